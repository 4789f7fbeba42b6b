"""gpu_health main() on replayed bundles (from_dir) and on the simulator's tools through a patched run_command;
check mode reads the saved counters and writes none."""

import json
import os
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import gpu_health
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILE = os.path.join(os.path.dirname(gpusim.__file__), "profiles", "h100-sxm-8.json")
EXPECTED = {"gpu_count": 8, "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def make_bundle(directory, *faults):
    argv = ["gpusim", "bundle", str(directory), "--profile", PROFILE]
    for fault in faults:
        argv += ["--fault", fault]
    assert gpusim.main(argv, env=dict(ENV))[0] == 0
    return str(directory)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return make_bundle(tmp_path_factory.mktemp("health") / "healthy")


def config_file(tmp_path, bundle, **extra):
    """A checker config on the node: the bundle's kernel log, fabric manager state and sysfs tree as sources."""
    data = {"node": "gpu-node-07", "expected": dict(EXPECTED), "state_file": str(tmp_path / "state" / "state.json"),
            "sources": {"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
                        "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
                        "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband")}}
    data.update(extra)
    path = tmp_path / "health.json"
    path.write_text(json.dumps(data))
    return str(path)


def simulator(profile=PROFILE, calls=None):
    """run_command answering with the simulator's tools, as a node with the profile's hardware would."""
    def run_command(argv, environ_update=None, **_kwargs):
        assert argv[0] == "timeout" and int(argv[1]) > 0 and environ_update == {"LC_ALL": "C", "LANG": "C"}
        if calls is not None:
            calls.append(argv[2:])
        return gpusim.main([os.path.basename(argv[2])] + list(argv[3:]), env=dict(ENV, GPUSIM_PROFILE=profile))
    return run_command


def broken(**answers):
    """run_command where each named tool (nvidia-smi subcommand) answers as given, the others as the simulator."""
    sim = simulator()

    def run_command(argv, **kwargs):
        key = argv[3] if len(argv) > 3 else ""
        return answers[key] if key in answers else sim(argv, **kwargs)
    return run_command


def codes(result):
    return [(f["code"], f["target"]) for f in result["findings"]]


# ---- replayed bundles -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", [False, True])
def test_healthy_bundle_is_ok_and_lists_its_gpus(healthy, check):
    result = run_module(gpu_health, {"from_dir": healthy, "expected": EXPECTED, "level": "deep"}, check=check)
    assert result["failed"] is False and result["changed"] is False, result.get("msg")
    assert (result["status"], result["exit_code"], result["tool_calls"]) == ("ok", 0, 0)
    assert result["source"] == "replay of %s" % healthy and result["unreadable"] == []
    root = ET.parse(os.path.join(healthy, "nvidia-smi-q.xml")).getroot()
    assert [(g["bus_id"], g["uuid"], g["name"]) for g in result["gpus"]] == [
        (g.get("id"), g.findtext("uuid"), g.findtext("product_name")) for g in root.findall("gpu")]
    assert result["driver_version"] == root.findtext("driver_version")


def test_faulty_bundle_fails_with_the_finding(tmp_path):
    bundle = make_bundle(tmp_path / "b", "row_remap_pending:gpu=3")
    result = run_module(gpu_health, {"from_dir": bundle, "expected": EXPECTED})
    assert result["failed"] and result["status"] == "error" and result["exit_code"] == 2
    assert ("GPU-ROW-REMAP-PENDING", "gpu3") in codes(result)
    assert result["msg"].startswith("%s: error: " % result["node"]) and "GPU-ROW-REMAP-PENDING gpu3: " in result["msg"]
    reported = run_module(gpu_health, {"from_dir": bundle, "expected": EXPECTED, "fail_on": "never"})
    assert reported["failed"] is False and reported["status"] == "error"


@pytest.mark.parametrize("fail_on,fails", [("warning", True), ("error", False), ("unknown", False), ("never", False)])
def test_fail_on_a_warning(tmp_path, fail_on, fails):
    bundle = make_bundle(tmp_path / "b", "persistence_off:gpu=2")
    result = run_module(gpu_health, {"from_dir": bundle, "expected": EXPECTED, "fail_on": fail_on})
    assert result["status"] == "warning" and result["failed"] is fails


def test_a_bundle_without_its_gpu_inventory_is_never_ok(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    for name in ("nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        os.remove(os.path.join(bundle, name))
    result = run_module(gpu_health, {"from_dir": bundle, "expected": EXPECTED, "fail_on": "unknown"})
    assert result["failed"] and result["status"] in ("unknown", "error")


@pytest.mark.parametrize("args,message", [
    ({"from_dir": "/nonexistent/bundle"}, "gpu_health: "),
    ({"thresholds": {"gpu_temp_c": 80}}, "gpu_health: bad configuration: "),
    ({"config_file": "/nonexistent/health.json"}, "gpu_health: bad configuration: "),
])
def test_bad_input_fails_with_a_message(args, message):
    result = run_module(gpu_health, args)
    assert result["failed"] and result["msg"].startswith(message)


# ---- live, through run_command --------------------------------------------------------------------------------

def test_live_quick_run_uses_timeout_and_the_c_locale(tmp_path, healthy):
    calls = []
    result = run_module(gpu_health, {"config_file": config_file(tmp_path, healthy)}, run_command=simulator(calls=calls))
    assert result["failed"] is False and result["status"] == "ok", result["findings"]
    assert calls == [["nvidia-smi", "-q", "-x"], ["nvidia-smi", "nvlink", "-s"]] and result["tool_calls"] == 2
    assert not os.path.exists(tmp_path / "state")           # quick level keeps no counters


@pytest.mark.parametrize("answer", [
    (9, fixture("nvsmi/error_no_driver.txt"), ""),
    (0, "Segmentation fault\n", ""),
    (0, "", ""),
    (124, "", "nvidia-smi -q -x did not finish within 30 s"),
])
def test_a_failing_or_garbled_nvidia_smi_is_never_ok(tmp_path, healthy, answer):
    args = {"config_file": config_file(tmp_path, healthy)}
    result = run_module(gpu_health, dict(args, fail_on="never"), run_command=broken(**{"-q": answer}))
    assert result["status"] in ("error", "unknown") and result["exit_code"] >= 2, result["findings"]
    failed = run_module(gpu_health, dict(args, fail_on="unknown"), run_command=broken(**{"-q": answer}))
    assert failed["failed"] and failed["msg"].startswith("gpu-node-07: %s: " % result["status"])


# ---- counter state and check mode -----------------------------------------------------------------------------

def test_check_mode_writes_no_state_and_a_real_run_does(tmp_path, healthy):
    args = {"config_file": config_file(tmp_path, healthy), "level": "standard"}
    state = tmp_path / "state" / "state.json"
    checked = run_module(gpu_health, args, check=True, run_command=simulator())
    assert checked["failed"] is False and checked["status"] == "ok", checked["findings"]
    assert not os.path.exists(str(state)) and not os.path.exists(str(state.parent))
    assert "check mode: the counters would have been saved to %s" % state in checked["notes"]
    real = run_module(gpu_health, args, run_command=simulator())
    assert real["status"] == "ok" and json.loads(state.read_text())["nvlink_errors"]
    assert not [n for n in real["notes"] if n.startswith("check mode")]


def test_check_mode_compares_with_the_saved_counters_and_leaves_them(tmp_path, healthy):
    args = {"config_file": config_file(tmp_path, healthy), "level": "standard"}
    state = tmp_path / "state" / "state.json"
    run_module(gpu_health, args, run_command=simulator())
    saved, stamp = state.read_bytes(), os.stat(str(state)).st_mtime_ns
    faulty = tmp_path / "faulty.json"
    faulty.write_text(json.dumps({"base": "h100-sxm-8", "faults": [{"name": "nvlink_errors", "gpu": 4}]}))
    checked = run_module(gpu_health, dict(args, fail_on="never"), check=True, run_command=simulator(str(faulty)))
    assert "GPU-NVLINK-ERRORS" in [code for code, _target in codes(checked)]      # the saved state was read
    assert state.read_bytes() == saved and os.stat(str(state)).st_mtime_ns == stamp
    assert sorted(os.listdir(str(state.parent))) == ["state.json"]                   # no temporary file left either
    again = run_module(gpu_health, dict(args, fail_on="never"), run_command=simulator(str(faulty)))
    assert "GPU-NVLINK-ERRORS" in [code for code, _target in codes(again)] and state.read_bytes() != saved


def test_use_state_false_neither_reads_nor_writes(tmp_path, healthy):
    args = {"config_file": config_file(tmp_path, healthy), "level": "standard", "use_state": False}
    result = run_module(gpu_health, args, run_command=simulator())
    assert result["status"] == "ok" and not os.path.exists(str(tmp_path / "state"))
