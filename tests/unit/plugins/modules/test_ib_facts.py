"""ib_facts main() on a sysfs tree from the simulator's bundle (a temporary root) and on captured ibstat outputs."""

import os
import shutil

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import ib_facts
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "ib")
ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


@pytest.fixture(scope="module")
def sysfs(tmp_path_factory):
    """The /sys/class/infiniband tree of the simulator's h100-sxm-8 bundle (read-only: copy it to change it)."""
    bundle = str(tmp_path_factory.mktemp("ib") / "bundle")
    assert gpusim.main(["gpusim", "bundle", bundle, "--profile", "h100-sxm-8"], env=dict(ENV))[0] == 0
    return os.path.join(bundle, "sys-class-infiniband")


def read(path):
    with open(path) as handle:
        return handle.read().strip()


def ports_in_the_tree(root):
    """(device, port, state, physical state, rate, link layer) as the kernel's files say them."""
    found = []
    for device in sorted(os.listdir(root)):
        for port in sorted(os.listdir(os.path.join(root, device, "ports")), key=int):
            base = os.path.join(root, device, "ports", port)
            found.append((device, int(port), read(base + "/state").split(": ")[1].capitalize(),
                          read(base + "/phys_state").split(": ")[1], float(read(base + "/rate").split()[0]),
                          read(base + "/link_layer")))
    return found


def ibstat(rc, out, err="", calls=None):
    def run_command(argv, environ_update=None, **_kwargs):
        assert environ_update == {"LC_ALL": "C", "LANG": "C"}
        if calls is not None:
            calls.append(argv)
        return rc, out, err
    return run_command


def as_tuples(facts):
    return [(p["device"], p["port"], p["state"], p["physical_state"], p["rate_gbps"], p["link_layer"])
            for p in facts["gpucluster_ib_ports"]]


@pytest.mark.parametrize("check", [False, True])
def test_sysfs_tree_gives_every_port(sysfs, check):
    result = run_module(ib_facts, {"sys_class_infiniband": sysfs}, check=check)     # no command may run
    facts = result["ansible_facts"]
    assert result["failed"] is False and result["changed"] is False and result["unreadable"] == []
    assert facts["gpucluster_ib_source"] == sysfs and facts["gpucluster_ib_error"] == ""
    assert as_tuples(facts) == ports_in_the_tree(sysfs)
    assert len(facts["gpucluster_ib_ports"]) == 9 and as_tuples(facts)[-1][-1] == "Ethernet"
    device = facts["gpucluster_ib_devices"][0]
    assert (device["name"], device["fw_ver"]) == ("mlx5_0", read(os.path.join(sysfs, "mlx5_0", "fw_ver")))


def test_unreadable_sysfs_values_are_unknown_never_active(sysfs, tmp_path):
    sysfs = shutil.copytree(sysfs, str(tmp_path / "sys-class-infiniband"))
    with open(os.path.join(sysfs, "mlx5_3", "ports", "1", "state"), "w") as handle:
        handle.write("bogus\n")
    with open(os.path.join(sysfs, "mlx5_4", "ports", "1", "rate"), "w") as handle:
        handle.write("fast\n")
    result = run_module(ib_facts, {"sys_class_infiniband": sysfs})
    ports = {p["device"]: p for p in result["ansible_facts"]["gpucluster_ib_ports"]}
    assert ports["mlx5_3"]["state"] is None and ports["mlx5_4"]["rate_gbps"] is None
    assert result["unreadable"] == ["mlx5_3/1/state value 'bogus' is not the kernel's '<number>: <word>'",
                                    "mlx5_4/1/rate value 'fast' is not the kernel's '<n> Gb/sec (<w>X <speed>)'"]


def test_without_the_tree_ibstat_is_read(tmp_path):
    calls = []
    result = run_module(ib_facts, {"sys_class_infiniband": str(tmp_path / "none"), "ibstat": "ibstat"},
                        run_command=ibstat(0, fixture("ibstat_h100_8x_ndr_healthy.txt"), calls=calls))
    facts = result["ansible_facts"]
    assert calls == [["/usr/bin/ibstat"]] and facts["gpucluster_ib_source"] == "ibstat"
    text = fixture("ibstat_h100_8x_ndr_healthy.txt")
    assert [p["device"] for p in facts["gpucluster_ib_ports"]] == [
        line.split("'")[1] for line in text.splitlines() if line.startswith("CA '")]
    assert text.count("State: Active") == sum(p["state"] == "Active" for p in facts["gpucluster_ib_ports"]) == 9
    assert facts["gpucluster_ib_error"] == "" and not result["failed"]


def test_ibstat_errors_are_reported(tmp_path):
    result = run_module(ib_facts, {"sys_class_infiniband": str(tmp_path / "none")},
                        run_command=ibstat(0, fixture("ibstat_ibpanic_mlx5_2.txt")))
    facts = result["ansible_facts"]
    assert [p["device"] for p in facts["gpucluster_ib_ports"]] == ["mlx5_0", "mlx5_1"]
    assert "stat of IB device 'mlx5_2' failed" in facts["gpucluster_ib_error"]


@pytest.mark.parametrize("rc,out,err,message", [
    (255, "", "ibpanic: [1] main: can't open umad\n", "ibstat: rc 255: ibpanic: [1] main: can't open umad"),
    (0, "Segmentation fault\n", "", "ibstat: line 1: not ibstat/ibstatus output: 'Segmentation fault'"),
])
def test_failed_or_garbage_ibstat_is_an_error_never_an_empty_node(tmp_path, rc, out, err, message):
    result = run_module(ib_facts, {"sys_class_infiniband": str(tmp_path / "none")}, run_command=ibstat(rc, out, err))
    facts = result["ansible_facts"]
    assert facts["gpucluster_ib_ports"] == [] and facts["gpucluster_ib_error"] == message


def test_no_tree_and_no_ibstat(tmp_path):
    root = str(tmp_path / "none")
    result = run_module(ib_facts, {"sys_class_infiniband": root}, missing=("ibstat",))
    facts = result["ansible_facts"]
    assert not result["failed"] and facts["gpucluster_ib_source"] == "none" and facts["gpucluster_ib_ports"] == []
    assert facts["gpucluster_ib_error"] == "%s does not exist and ibstat is not installed" % root
