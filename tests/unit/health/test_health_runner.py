"""The collector, replay, config, renderings and the Slurm drain logic of the checker."""

import json
import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health, _health_slurm, _nvsmi
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILE = os.path.join(os.path.dirname(gpusim.__file__), "profiles", "h100-sxm-8.json")
EXPECTED = {"gpu_count": 8, "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}


def make_bundle(tmp_path, *faults):
    path = str(tmp_path / "bundle")
    argv = ["gpusim", "bundle", path, "--profile", PROFILE]
    for fault in faults:
        argv += ["--fault", fault]
    assert gpusim.main(argv, env=dict(ENV))[0] == 0
    return path


def config(**extra):
    overrides = {"node": "gpu-node-07", "expected": dict(EXPECTED)}
    overrides.update(extra)
    return _health.load_config(None, overrides)


# ---- config ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,error", [
    ('{"expected": {"gpu_count": "eight"}}', "expected.gpu_count must be a whole number"),
    ('{"expected": {"ib_rate_gbps": -1}}', "expected.ib_rate_gbps must be a positive number"),
    ('{"thresholds": {"gpu_temp_c": 80}}', "thresholds.gpu_temp_c is not a known threshold"),
    ('{"thresholds": {"gpu_temp_margin_c": "hot"}}', "thresholds.gpu_temp_margin_c must be a number"),
    ('{"level": "thorough"}', "level must be one of quick, standard, deep"),
    ('{"xid": {"ignore": ["13"]}}', "xid.ignore must be a list of Xid numbers"),
    ('{"slurm": {"max_drained_share": 2}}', "slurm.max_drained_share must be a number from 0 to 1"),
    ('{"expectd": {}}', "unknown key(s) expectd"),
    ("[1, 2]", "the config must be a mapping"),
])
def test_bad_config_names_file_key_and_value(tmp_path, text, error):
    path = tmp_path / "health.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"%s: .*%s" % (path, error.replace("(", r"\(").replace(")", r"\)"))):
        _health.load_config(str(path))


def test_config_json_and_yaml_and_comment_key(tmp_path):
    path = tmp_path / "health.json"
    path.write_text('{"_managed": "by Ansible", "expected": {"gpu_count": 4}}')
    assert _health.load_config(str(path))["expected"] == {"gpu_count": 4}
    path.write_text("expected:\n  gpu_count: 2\n")
    assert _health.load_config(str(path))["expected"]["gpu_count"] == 2


# ---- replay ----------------------------------------------------------------------------------------------------

def test_replay_uses_the_bundle_capture_time_for_windows(tmp_path):
    bundle = make_bundle(tmp_path, "xid_error:gpu=1")
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    assert result["checked_at"] == "2026-11-30T07:00:00Z"
    assert ("GPU-XID-ERROR", "gpu1") in [(f["code"], f["target"]) for f in result["findings"]]
    # the same Xid 25 hours before the capture time is outside the 24 h window
    with open(os.path.join(bundle, "captured_at"), "w") as handle:
        handle.write("2026-12-01T08:00:00Z\n")
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    assert "GPU-XID-ERROR" not in [f["code"] for f in result["findings"]]
    assert result["status"] == "ok", result["findings"]


def test_replay_failed_command_without_output(tmp_path):
    bundle = make_bundle(tmp_path)
    os.remove(os.path.join(bundle, "nvidia-smi-q.xml"))
    os.remove(os.path.join(bundle, "nvidia-smi-q.txt"))
    os.remove(os.path.join(bundle, "nvidia-smi-query.csv"))
    with open(os.path.join(bundle, "nvidia-smi-q.xml.rc"), "w") as handle:
        handle.write("124\n")
    with open(os.path.join(bundle, "nvidia-smi-q.xml.stderr"), "w") as handle:
        handle.write("nvidia-smi -q -x did not finish within 30 s\n")
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    assert [(f["code"], f["severity"]) for f in result["findings"]][:1] == [("GPU-NVSMI-FAILED", "error")]
    assert "did not finish" in result["findings"][0]["message"]


def test_replay_falls_back_to_text_then_csv_and_reports_missing_files(tmp_path):
    bundle = make_bundle(tmp_path)
    os.remove(os.path.join(bundle, "nvidia-smi-q.xml"))
    os.remove(os.path.join(bundle, "nvlink-status.txt"))
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    assert len(result["gpus"]) == 8 and result["missing_inputs"] == ["nvlink-status.txt"]
    os.remove(os.path.join(bundle, "nvidia-smi-q.txt"))
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    assert len(result["gpus"]) == 8


def test_result_gpus_carry_serial_and_vbios_for_the_rma_list(tmp_path):
    """The fleet report's RMA list quotes each GPU's serial: the result's gpus carry it and the VBIOS version."""
    bundle = make_bundle(tmp_path)
    result, _runner = _health.run(config(), from_dir=bundle, use_state=False)
    with open(os.path.join(bundle, "nvidia-smi-q.xml")) as handle:
        parsed = _nvsmi.parse_query_xml(handle.read())["gpus"]
    assert [(g["serial"], g["vbios_version"]) for g in result["gpus"]] == [
        (g["serial"], g["vbios_version"]) for g in parsed]
    assert all(g["serial"] and g["vbios_version"] == "96.00.99.00.01" for g in result["gpus"])
    assert sorted(result["gpus"][0]) == [
        "bus_id", "index", "minor_number", "name", "serial", "uuid", "vbios_version"]


def test_replay_of_a_missing_directory_is_an_error():
    with pytest.raises(ValueError, match="is not a directory"):
        _health.run(config(), from_dir="/nonexistent/bundle")


# ---- live collection with a fake runner -------------------------------------------------------------------------

def sim_runner(profile=PROFILE):
    """Run the simulator in-process for every command the collector starts."""
    env = dict(ENV, GPUSIM_PROFILE=profile)

    def run(argv, _timeout):
        tool = os.path.basename(argv[0])
        return gpusim.main([tool] + list(argv[1:]), env=dict(env))
    return _health.Runner(run)


def test_live_quick_run_makes_two_tool_calls_and_collect_writes_a_replayable_bundle(tmp_path):
    bundle = make_bundle(tmp_path)
    sources = {"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
               "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
               "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband")}
    live, runner = _health.run(config(sources=sources), level="quick", runner=sim_runner(), use_state=False)
    assert live["status"] == "ok" and runner.calls == 2 == live["tool_calls"]
    out = str(tmp_path / "collected")
    collected, _runner = _health.run(config(sources=sources), level="quick", runner=sim_runner(), collect_dir=out,
                                     use_state=False)
    assert os.path.exists(os.path.join(out, "nvidia-smi-q.xml")) and os.path.exists(os.path.join(out, "topo.txt"))
    replayed, _runner = _health.run(config(), from_dir=out, use_state=False)
    assert replayed["gpus"] == collected["gpus"] and replayed["status"] == "ok"


def test_missing_tool_and_timeout_become_findings():
    def run(argv, _timeout):
        return (127, "", "%s: No such file or directory" % argv[0]) if "nvlink" in argv else (124, "", "timeout")
    result, _runner = _health.run(config(sources={"kernel_log": "file:/nonexistent"}), level="quick",
                                  runner=_health.Runner(run), use_state=False)
    codes = {(f["code"], f["target"]) for f in result["findings"]}
    assert ("GPU-NVSMI-FAILED", "node") in codes
    assert ("CHECK-INPUT-FAILED", "nvlink") in codes and ("CHECK-INPUT-FAILED", "kernel") in codes
    assert result["exit_code"] == 2


def test_state_file_makes_rising_counters_visible(tmp_path):
    bundle = make_bundle(tmp_path)
    sources = {"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
               "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
               "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband")}
    state = str(tmp_path / "state.json")
    first, _r = _health.run(config(sources=sources, state_file=state), level="standard", runner=sim_runner())
    assert first["status"] == "ok" and json.load(open(state))["nvlink_errors"]
    faulty = tmp_path / "faulty.json"
    faulty.write_text(json.dumps({"base": "h100-sxm-8", "faults": [{"name": "nvlink_errors", "gpu": 4}]}))
    second, _r = _health.run(config(sources=sources, state_file=state), level="standard",
                             runner=sim_runner(str(faulty)))
    assert "GPU-NVLINK-ERRORS" in [f["code"] for f in second["findings"]]


# ---- renderings ------------------------------------------------------------------------------------------------

def test_prometheus_text_is_well_formed(tmp_path):
    result, _runner = _health.run(config(), from_dir=make_bundle(tmp_path, "row_remap_pending:gpu=3"), use_state=False)
    text = _health.render_prometheus(result, 0.05)
    lines = text.splitlines()
    assert 'gpucluster_health_status{node="gpu-node-07",level="quick"} 2' in lines
    assert 'gpucluster_health_finding{node="gpu-node-07",code="GPU-ROW-REMAP-PENDING",severity="error",target="gpu3"} 1' \
        in lines
    for line in lines:
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or " " in line
    families = [line.split()[2] for line in lines if line.startswith("# TYPE ")]
    assert len(families) == len(set(families))


def test_human_output_names_codes_and_actions(tmp_path):
    result, _runner = _health.run(config(), from_dir=make_bundle(tmp_path, "ib_port_down:port=mlx5_1"), use_state=False)
    text = _health.render_human(result)
    assert text.startswith("gpu-node-07: ERROR") and "IB-PORT-DOWN" in text and "-> " in text


def test_write_atomic(tmp_path):
    path = str(tmp_path / "metrics.prom")
    _health.write_atomic(path, "a 1\n")
    assert open(path).read() == "a 1\n" and oct(os.stat(path).st_mode & 0o777) == "0o644"


# ---- Slurm drain decisions ---------------------------------------------------------------------------------------

SCONTROL = """\
NodeName=gpu01 Arch=x86_64 CoresPerSocket=32 State=IDLE ThreadsPerCore=2 Reason=
NodeName=gpu02 Arch=x86_64 State=IDLE+DRAIN Reason=gpucluster-health: GPU-ROW-REMAP-PENDING gpu3 [root@2026-11-30T07:00:00]
NodeName=gpu03 Arch=x86_64 State=DOWN+DRAIN Reason=disk replacement by admin [alice@2026-11-29T10:00:00]
NodeName=gpu04 Arch=x86_64 State=MIXED Reason=
"""
ERROR = {"status": "error", "findings": [
    {"code": "IB-PORT-DOWN", "severity": "error", "target": "mlx5_2/1"},
    {"code": "GPU-TEMP-HIGH", "severity": "warning", "target": "gpu1"},
    {"code": "NODE-FABRICMANAGER-DOWN", "severity": "error", "target": "node"}]}
OK = {"status": "ok", "findings": []}


def nodes(text=SCONTROL):
    return _health_slurm.parse_scontrol_nodes(text)


def test_parse_scontrol_keeps_reasons_with_spaces_and_drops_the_stamp():
    parsed = nodes()
    assert parsed[1] == {"name": "gpu02", "state": "IDLE+DRAIN",
                         "reason": "gpucluster-health: GPU-ROW-REMAP-PENDING gpu3"}
    assert parsed[2]["reason"] == "disk replacement by admin"


def test_drain_with_the_error_codes_as_reason():
    # two of four out (an administrator's and a health drain): 0.75 allows three
    action, reason = _health_slurm.decide(ERROR, "gpu04", nodes(), max_drained_share=0.75)
    assert (action, reason) == ("drain", "gpucluster-health: IB-PORT-DOWN mlx5_2/1, NODE-FABRICMANAGER-DOWN")


def test_resume_only_what_it_drained():
    assert _health_slurm.decide(OK, "gpu02", nodes())[0] == "resume"
    assert _health_slurm.decide(OK, "gpu03", nodes())[0] == "none"
    assert _health_slurm.decide(ERROR, "gpu03", nodes())[0] == "none"


def test_update_reason_when_codes_change_and_unknown_changes_nothing():
    assert _health_slurm.decide(ERROR, "gpu02", nodes())[0] == "update"
    assert _health_slurm.decide({"status": "unknown", "findings": []}, "gpu02", nodes())[0] == "none"


def test_circuit_breaker():
    # two of four nodes are out of service (one drained by health checks, one by an administrator): every node out
    # counts, and 10 % or 30 % of four allow one (at least one), 75 % three
    action, why = _health_slurm.decide(ERROR, "gpu04", nodes(), max_drained_share=0.1)
    assert action == "refuse" and "circuit breaker" in why and "2 of the cluster's 4" in why
    assert _health_slurm.decide(ERROR, "gpu04", nodes(), max_drained_share=0.3)[0] == "refuse"
    assert _health_slurm.decide(ERROR, "gpu04", nodes(), max_drained_share=0.75)[0] == "drain"


def test_apply_runs_scontrol_update():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "", ""
    assert _health_slurm.apply("drain", "gpucluster-health: X", "gpu04", run)[0] == 0
    assert calls[-1] == ["scontrol", "update", "nodename=gpu04", "state=drain", "reason=gpucluster-health: X"]
    _health_slurm.apply("resume", "healthy", "gpu02", run)
    assert calls[-1] == ["scontrol", "update", "nodename=gpu02", "state=resume"]
    assert _health_slurm.apply("none", "nothing to do", "gpu01", run) == (0, "nothing to do")
    assert len(calls) == 2
