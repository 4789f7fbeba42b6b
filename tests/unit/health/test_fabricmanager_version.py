# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric manager's version against the loaded driver's (standard level, NVSwitch systems only)."""

import os

from ansible_collections.gpucluster.ops.plugins.module_utils import _health
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILES = os.path.join(os.path.dirname(gpusim.__file__), "profiles")
EXPECTED = {"gpu_count": 8, "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}


def make_bundle(tmp_path, *faults, profile="h100-sxm-8"):
    path = str(tmp_path / "bundle")
    argv = ["gpusim", "bundle", path, "--profile", os.path.join(PROFILES, profile + ".json")]
    for fault in faults:
        argv += ["--fault", fault]
    assert gpusim.main(argv, env=dict(ENV))[0] == 0
    return path


def replay(bundle, level="standard", expected=None):
    config = _health.load_config(None, {"node": "gpu-node-07", "expected": dict(EXPECTED if expected is None
                                                                                else expected)})
    return _health.run(config, from_dir=bundle, level=level, use_state=False)[0]


def codes(result):
    return {(f["code"], f["severity"], f["target"]) for f in result["findings"]}


def test_a_matching_fabric_manager_is_ok(tmp_path):
    assert replay(make_bundle(tmp_path))["status"] == "ok"


def test_a_mismatched_fabric_manager_is_an_error_with_both_versions_and_the_action(tmp_path):
    result = replay(make_bundle(tmp_path, "fabricmanager_version:value=550.54.15"))
    found = [f for f in result["findings"] if f["code"] == "FABRICMANAGER-VERSION-MISMATCH"]
    assert len(found) == 1 and found[0]["severity"] == "error" and found[0]["target"] == "node"
    assert "550.54.15" in found[0]["message"] and "550.127.05" in found[0]["message"]
    assert found[0]["action"] == "install the fabric manager matching driver 550.127.05"
    # and what follows from it: the fabric manager never started, the fabric is incomplete
    assert ("NODE-FABRICMANAGER-DOWN", "error", "node") in codes(result)
    assert ("GPU-FABRIC-INCOMPLETE", "error", "gpu0") in codes(result)


def test_the_version_is_judged_from_the_standard_level(tmp_path):
    bundle = make_bundle(tmp_path, "fabricmanager_version:value=550.54.15")
    assert "FABRICMANAGER-VERSION-MISMATCH" not in {c for c, _s, _t in codes(replay(bundle, "quick"))}
    assert "FABRICMANAGER-VERSION-MISMATCH" in {c for c, _s, _t in codes(replay(bundle, "deep"))}


def test_gpus_with_fabric_state_make_an_nvswitch_system_without_the_expectation(tmp_path):
    bundle = make_bundle(tmp_path, "fabricmanager_version:value=550.54.15")
    result = replay(bundle, expected={})
    assert ("FABRICMANAGER-VERSION-MISMATCH", "error", "node") in codes(result)


def test_an_unreadable_version_is_unknown_never_ok(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "fabricmanager-version.txt")
    with open(path, "w") as handle:
        handle.write("Segmentation fault\n")
    result = replay(bundle)
    assert result["status"] == "unknown"
    assert ("FABRICMANAGER-VERSION-UNKNOWN", "unknown", "node") in codes(result)
    os.unlink(path)
    result = replay(bundle)
    assert result["status"] == "unknown"
    assert ("CHECK-INPUT-MISSING", "unknown", "fabricmanager-version.txt") in codes(result)
    with open(path + ".rc", "w") as handle:
        handle.write("127\n")
    with open(path + ".stderr", "w") as handle:
        handle.write("nv-fabricmanager: No such file or directory\n")
    result = replay(bundle)
    assert ("CHECK-INPUT-FAILED", "unknown", "fabricmanager_version") in codes(result)


def test_nothing_on_a_system_without_nvswitch(tmp_path):
    expected = {"gpu_count": 4, "nvlinks_per_gpu": 0, "ib_port_count": 1, "ib_rate_gbps": 200}
    bundle = make_bundle(tmp_path, profile="l40s-pcie-4")
    assert not os.path.exists(os.path.join(bundle, "fabricmanager-version.txt"))
    result = replay(bundle, "standard", expected)
    assert not [c for c, _s, _t in codes(result) if "FABRICMANAGER" in c or c.startswith("CHECK-")], codes(result)


def test_the_live_collector_runs_the_source_and_writes_it_into_the_bundle(tmp_path):
    calls = []
    env = dict(ENV, GPUSIM_PROFILE=os.path.join(PROFILES, "h100-sxm-8.json"))

    def run(argv, _timeout):
        calls.append(list(argv))
        faults = ["fabricmanager_version:value=550.54.15"]
        return gpusim.run_tool(os.path.basename(argv[0]), list(argv[1:]), dict(env), None, faults)

    bundle = make_bundle(tmp_path)
    sources = {"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
               "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
               "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband"),
               "fabricmanager_version": "/opt/gpusim/bin/nv-fabricmanager"}
    config = _health.load_config(None, {"node": "gpu-node-07", "expected": dict(EXPECTED), "sources": sources})
    out = str(tmp_path / "collected")
    result, _runner = _health.run(config, level="standard", runner=_health.Runner(run), collect_dir=out,
                                  use_state=False)
    assert ["/opt/gpusim/bin/nv-fabricmanager", "--version"] in calls
    assert ("FABRICMANAGER-VERSION-MISMATCH", "error", "node") in codes(result)
    with open(os.path.join(out, "fabricmanager-version.txt")) as handle:
        assert handle.read() == "Fabric Manager version is : 550.54.15\n"
    # a quick --collect captures it too (for a later replay at any level), without judging it
    quick_out = str(tmp_path / "quick")
    quick, _runner = _health.run(config, level="quick", runner=_health.Runner(run), collect_dir=quick_out,
                                 use_state=False)
    assert "FABRICMANAGER-VERSION-MISMATCH" not in {c for c, _s, _t in codes(quick)}
    assert ("FABRICMANAGER-VERSION-MISMATCH", "error", "node") in codes(replay(quick_out))


def test_a_file_source_is_read_instead_of_running_the_tool(tmp_path):
    version = tmp_path / "fm.txt"
    version.write_text("Fabric Manager version is : 550.54.15\n")
    bundle = make_bundle(tmp_path)
    calls = []
    env = dict(ENV, GPUSIM_PROFILE=os.path.join(PROFILES, "h100-sxm-8.json"))

    def run(argv, _timeout):
        calls.append(os.path.basename(argv[0]))
        return gpusim.run_tool(os.path.basename(argv[0]), list(argv[1:]), dict(env))

    sources = {"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
               "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
               "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband"),
               "fabricmanager_version": "file:" + str(version)}
    config = _health.load_config(None, {"node": "gpu-node-07", "expected": dict(EXPECTED), "sources": sources})
    result, _runner = _health.run(config, level="standard", runner=_health.Runner(run), use_state=False)
    assert "nv-fabricmanager" not in calls
    assert ("FABRICMANAGER-VERSION-MISMATCH", "error", "node") in codes(result)
