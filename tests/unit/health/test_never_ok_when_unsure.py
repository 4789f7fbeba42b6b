"""Never OK when unsure: an input that failed, was cut short, could not be read, or is missing never gives a better
verdict than the checker can stand behind. One test per class of hostile input, on the replay path and the live
path alike (both go through ``_health.accept_input``)."""

import json
import os
import sys
import time

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health, _health_slurm
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILE_DIR = os.path.join(os.path.dirname(gpusim.__file__), "profiles")
EXPECTED = {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
            "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def make_bundle(tmp_path, *faults, profile="h100-sxm-8", name="bundle"):
    path = str(tmp_path / name)
    argv = ["gpusim", "bundle", path, "--profile", os.path.join(PROFILE_DIR, profile + ".json")]
    for fault in faults:
        argv += ["--fault", fault]
    assert gpusim.main(argv, env=dict(ENV))[0] == 0
    return path


def config(**extra):
    overrides = {"node": "gpu-node-07", "expected": dict(EXPECTED),
                 "thresholds": {"nccl_busbw_min_gbps": 300}}
    overrides.update(extra)
    return _health.load_config(None, overrides)


def replay(bundle, level="deep", **extra):
    result, _runner = _health.run(config(**extra), level=level, from_dir=bundle, use_state=False)
    return result


def found(result, severity=None):
    return sorted((f["code"], f["target"]) for f in result["findings"]
                  if severity is None or f["severity"] == severity)


def write(path, text, mode="w"):
    with open(path, mode) as handle:
        handle.write(text)


def read(path):
    with open(path) as handle:
        return handle.read()


def test_the_healthy_bundle_is_ok(tmp_path):
    result = replay(make_bundle(tmp_path))
    assert (result["status"], result["findings"]) == ("ok", [])


# ---- a tool that failed is not judged on what it printed ------------------------------------------------------

def _cut_nvlink_after_gpus(text, keep):
    """nvidia-smi nvlink -s output up to (not including) the header of GPU ``keep``."""
    marker = "GPU %d:" % keep
    return text[:text.index(marker)]


def test_nvlink_timeout_after_half_the_gpus_is_unknown_for_each_gpu_not_seen(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nvlink-status.txt")
    write(path, _cut_nvlink_after_gpus(read(path), 4))
    write(path + ".rc", "124\n")
    write(path + ".stderr", "nvidia-smi nvlink -s did not finish within 30 s\n")
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown" and result["exit_code"] == 3
    assert ("CHECK-INPUT-FAILED", "nvlink") in found(result)
    assert [t for c, t in found(result) if c == "CHECK-INPUT-PARTIAL"] == ["gpu4", "gpu5", "gpu6", "gpu7"]


def test_nvlink_cut_mid_gpu_with_rc_0_is_still_a_finding(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nvlink-status.txt")
    text = _cut_nvlink_after_gpus(read(path), 4)
    write(path, text[:text.rindex("Link 9:")])           # GPU 3 loses links 9-17, GPUs 4-7 are gone
    result = replay(bundle, level="quick")
    assert result["status"] == "error"                   # a short GPU with a clean exit is GPU-NVLINK-COUNT
    assert ("GPU-NVLINK-COUNT", "gpu3") in found(result, "error")
    assert [t for c, t in found(result, "unknown") if c == "CHECK-INPUT-PARTIAL"] == ["gpu4", "gpu5", "gpu6", "gpu7"]


def test_a_failed_nvlink_run_turns_a_short_link_count_into_unknown_not_a_drain(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nvlink-status.txt")
    text = read(path)
    write(path, text[:text.rindex("Link 9:")])           # the output of GPU 7 ends early
    write(path + ".rc", "137\n")
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown", result["findings"]
    assert ("CHECK-INPUT-PARTIAL", "gpu7") in found(result, "unknown")


@pytest.mark.parametrize("filename, level", [
    ("nvidia-smi-q.xml", "quick"), ("nvlink-status.txt", "quick"), ("nvlink-errors.txt", "standard"),
    ("kernel.log", "quick"), ("fabricmanager.state", "quick"), ("dcgmi-diag.json", "deep"),
    ("nccl-all-reduce.txt", "deep"), ("ibstat.txt", "quick"),
])
@pytest.mark.parametrize("rc", [1, 124, 137, 255])
def test_a_complete_looking_output_with_a_failure_code_is_unknown(tmp_path, filename, level, rc):
    bundle = make_bundle(tmp_path)
    if filename == "ibstat.txt":
        _rmtree(os.path.join(bundle, "sys-class-infiniband"))
    write(os.path.join(bundle, filename) + ".rc", "%d\n" % rc)
    result = replay(bundle, level=level)
    assert result["status"] == "unknown", result["findings"]
    assert result["exit_code"] == 3


def test_systemctl_is_active_exit_3_is_an_answer_not_a_failure(tmp_path):
    bundle = make_bundle(tmp_path, "fabricmanager_down")
    write(os.path.join(bundle, "fabricmanager.state") + ".rc", "3\n")
    result = replay(bundle, level="quick")
    assert ("NODE-FABRICMANAGER-DOWN", "node") in found(result, "error")
    assert "CHECK-INPUT-FAILED" not in [c for c, _t in found(result)]


def test_dcgm_failing_test_with_its_non_zero_exit_is_judged_on_the_output(tmp_path):
    bundle = make_bundle(tmp_path, "dcgm_fail")
    write(os.path.join(bundle, "dcgmi-diag.json") + ".rc", "226\n")
    result = replay(bundle)
    assert result["status"] == "error"
    assert "CHECK-INPUT-FAILED" not in [c for c, _t in found(result)]


def test_an_empty_output_with_rc_0_is_a_failure(tmp_path):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "fabricmanager.state"), "")
    result = replay(bundle, level="quick")
    assert found(result) == [("CHECK-INPUT-FAILED", "fabricmanager")]


def test_live_path_judges_a_timed_out_nvlink_the_same_way(tmp_path):
    bundle = make_bundle(tmp_path)
    outputs = {("nvidia-smi", "-q", "-x"): (0, read(os.path.join(bundle, "nvidia-smi-q.xml")), ""),
               ("nvidia-smi", "nvlink", "-s"): (124, _cut_nvlink_after_gpus(
                   read(os.path.join(bundle, "nvlink-status.txt")), 6), "timed out"),
               ("systemctl", "is-active", "nvidia-fabricmanager"): (0, "active\n", "")}

    def fake(argv, _timeout):
        return outputs.get(tuple(argv), (127, "", "%s: not here" % argv[0]))

    cfg = config(sources={"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
                          "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband")})
    result, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False)
    assert result["status"] == "unknown"
    assert [t for c, t in found(result) if c == "CHECK-INPUT-PARTIAL"] == ["gpu6", "gpu7"]
    assert ("CHECK-INPUT-FAILED", "nvlink") in found(result)


def test_runner_keeps_what_a_timed_out_command_printed_and_says_it_timed_out():
    runner = _health.Runner()
    script = "import sys, time; print('GPU 0: H100'); sys.stdout.flush(); time.sleep(30)"
    started = time.monotonic()
    rc, out, err = runner.run([sys.executable, "-c", script], 1)
    assert time.monotonic() - started < 10
    assert (rc, out) == (124, "GPU 0: H100\n") and "did not finish within 1 s" in err


def test_runner_kills_a_command_whose_output_passes_the_cap():
    runner = _health.Runner(max_bytes=1 << 20)
    started = time.monotonic()
    rc, out, err = runner.run([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"], 30)
    assert time.monotonic() - started < 10
    assert (rc, out) == (_health.RC_OVER_CAP, "") and "input cap" in err


# ---- inputs are read with limits ------------------------------------------------------------------------------

def _rmtree(path):
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.remove(os.path.join(dirpath, name))
        for name in dirnames:
            full = os.path.join(dirpath, name)
            os.remove(full) if os.path.islink(full) else os.rmdir(full)
    os.rmdir(path)


def _make_fifo(path):
    os.remove(path) if os.path.lexists(path) else None
    os.mkfifo(path)


def _make_devzero(path):
    os.remove(path)
    os.symlink("/dev/zero", path)


def _make_loop(path):
    os.remove(path)
    os.symlink(os.path.basename(path), path)


def _make_directory(path):
    os.remove(path)
    os.mkdir(path)


def _make_huge(path):
    write(path, "x" * (2 * 1024 * 1024 + 1))


HOSTILE = {"fifo": (_make_fifo, "is a FIFO"), "dev-zero": (_make_devzero, "is a character device"),
           "symlink-loop": (_make_loop, "Too many levels of symbolic links"),
           "directory": (_make_directory, "is a directory"), "huge": (_make_huge, "input cap")}


@pytest.mark.parametrize("filename", ["nvidia-smi-q.xml", "nvlink-status.txt", "kernel.log", "fabricmanager.state",
                                      "dcgmi-diag.json", "nccl-all-reduce.txt", "captured_at"])
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_bundle_file_that_is_not_a_readable_regular_file_is_unknown_in_bounded_time(tmp_path, filename, kind):
    bundle = make_bundle(tmp_path)
    for fallback in ("nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        os.remove(os.path.join(bundle, fallback))
    make, reason = HOSTILE[kind]
    make(os.path.join(bundle, filename))
    started, cpu = time.monotonic(), time.process_time()
    result = replay(bundle, limits={"input_max_bytes": 2 * 1024 * 1024, "clock_skew_s": 300})
    assert time.monotonic() - started < 5 and time.process_time() - cpu < 3
    assert result["status"] in ("unknown", "error") and result["exit_code"] in (2, 3)
    text = json.dumps(result)
    assert reason in text, text


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_file_inside_the_sysfs_copy_is_a_note_not_a_hang(tmp_path, kind):
    bundle = make_bundle(tmp_path)
    make, reason = HOSTILE[kind]
    make(os.path.join(bundle, "sys-class-infiniband", "mlx5_3", "ports", "1", "state"))
    started = time.monotonic()
    result = replay(bundle, level="quick")
    assert time.monotonic() - started < 5
    assert result["status"] in ("unknown", "error")
    if kind != "huge":   # a 2 MiB sysfs attribute is over the 4 KiB a sysfs attribute can hold
        assert reason in json.dumps(result)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_live_file_source_that_is_hostile_is_unknown(tmp_path, kind):
    bundle = make_bundle(tmp_path)
    kernel = os.path.join(bundle, "kernel.log")
    HOSTILE[kind][0](kernel)

    def fake(argv, _timeout):
        return {("nvidia-smi", "-q", "-x"): (0, read(os.path.join(bundle, "nvidia-smi-q.xml")), "")}.get(
            tuple(argv), (127, "", "not here"))

    cfg = config(expected={"gpu_count": 8, "nvlinks_per_gpu": 0, "ib_port_count": 0},
                 sources={"kernel_log": "file:" + kernel},
                 limits={"input_max_bytes": 2 * 1024 * 1024, "clock_skew_s": 300})
    started = time.monotonic()
    result, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False)
    assert time.monotonic() - started < 5
    assert found(result) == [("CHECK-INPUT-FAILED", "kernel")]


def test_the_input_cap_is_configurable_and_validated(tmp_path):
    bundle = make_bundle(tmp_path)
    result = replay(bundle, limits={"input_max_bytes": 1000, "clock_skew_s": 300})
    assert result["status"] == "unknown"
    assert "larger than the 1000-byte input cap" in json.dumps(result)
    for bad in (0, -1, "16M", True, None):
        with pytest.raises(ValueError, match="limits.input_max_bytes"):
            config(limits={"input_max_bytes": bad, "clock_skew_s": 300})
    with pytest.raises(ValueError, match="limits must be a mapping"):
        config(limits={"input_max_bytes": 10, "clock_skew_s": 300, "other": 1})


# ---- time ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("captured_at, why", [
    ("2099-01-01T00:00:00Z", "lies in the future"),
    ("1970-01-01T00:00:10Z", "lies before 2010"),
    ("yesterday", "is not an ISO 8601 time"),
    ("2026-11-29T07:00:00Z", "lies before the kernel log's newest stamp"),
    ("", "is not an ISO 8601 time"),
])
def test_an_untrustworthy_capture_time_is_unknown_and_drops_no_xid(tmp_path, captured_at, why):
    bundle = make_bundle(tmp_path, "xid_error:gpu=1")
    write(os.path.join(bundle, "captured_at"), captured_at + "\n")
    result = replay(bundle, level="quick")
    assert ("GPU-XID-ERROR", "gpu1") in found(result, "error")
    clock = [f for f in result["findings"] if f["code"] == "CHECK-CLOCK"]
    assert len(clock) == 1 and why in clock[0]["message"], result["findings"]


def test_an_untrustworthy_capture_time_alone_makes_a_healthy_bundle_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "captured_at"), "2099-01-01T00:00:00Z\n")
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown" and found(result) == [("CHECK-CLOCK", "node")]


def test_live_kernel_stamps_ahead_of_the_clock_are_unknown(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("2099-01-01T00:00:00+0000 gpu-node-07 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has "
                   "fallen off the bus.\n")
    cfg = config(expected={"nvlinks_per_gpu": 0, "ib_port_count": 0},
                 sources={"kernel_log": "file:%s" % log, "nvidia_smi": "nvidia-smi"})
    bundle = make_bundle(tmp_path)

    def fake(argv, _timeout):
        return {("nvidia-smi", "-q", "-x"): (0, read(os.path.join(bundle, "nvidia-smi-q.xml")), "")}.get(
            tuple(argv), (127, "", "not here"))

    result, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False)
    assert "CHECK-CLOCK" in [c for c, _t in found(result)]
    assert result["status"] == "error"   # the Xid 79 still counts


# ---- stale state -----------------------------------------------------------------------------------------------

def test_counter_state_older_than_the_max_age_is_not_compared_with(tmp_path):
    state = tmp_path / "state.json"
    now = time.time()
    old = {"saved_at": now - 7200, "ib_counters": {"mlx5_0/1": {"link_downed": 0, "symbol_error": 0}},
           "nvlink_errors": {}}
    state.write_text(json.dumps(old))
    loaded, note = _health.load_state(str(state), 1800, now)
    assert loaded == {} and "not within 1800 s" in note
    old["saved_at"] = now - 60
    state.write_text(json.dumps(old))
    assert _health.load_state(str(state), 1800, now) == (old, None)
    for bad in ({"ib_counters": {}}, {"saved_at": now + 3600}, {"saved_at": "yesterday"}, [1, 2]):
        state.write_text(json.dumps(bad))
        assert _health.load_state(str(state), 1800, now)[0] == {}


def test_a_stale_state_file_gives_a_note_and_no_rising_counter_finding(tmp_path):
    bundle = make_bundle(tmp_path)
    state = tmp_path / "state.json"
    previous = {"saved_at": time.time() - 86400, "nvlink_errors": {}, "ib_counters": {
        "mlx5_%d/1" % i: {"link_downed": -5, "symbol_error": -5000} for i in range(8)}}
    state.write_text(json.dumps(previous))
    cfg = config(state_file=str(state), sources={"sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband"),
                                                 "kernel_log": "file:" + os.path.join(bundle, "kernel.log")},
                 expected={"gpu_count": 8, "nvlinks_per_gpu": 0, "ib_port_count": 8})

    def fake(argv, _timeout):
        return {("nvidia-smi", "-q", "-x"): (0, read(os.path.join(bundle, "nvidia-smi-q.xml")), "")}.get(
            tuple(argv), (127, "", "not here"))

    result, _runner = _health.run(cfg, level="standard", runner=_health.Runner(fake))
    assert "IB-LINK-FLAP" not in [c for c, _t in found(result)]
    assert any("not within 1800 s" in note for note in result["notes"])
    assert json.loads(state.read_text())["saved_at"] > time.time() - 60   # saved anew, with its time


# ---- exit codes, nothing to judge, DCGM that tested nothing -----------------------------------------------------

def _cli(*argv):
    sys.path.insert(0, os.path.join(ROOT, "bin"))
    import importlib.machinery  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel
    loader = importlib.machinery.SourceFileLoader("gpucluster_health_cli", os.path.join(ROOT, "bin",
                                                                                        "gpucluster-health"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.main(list(argv))


def test_a_bundle_whose_files_are_the_wrong_type_exits_3_not_64(tmp_path, capsys):
    bundle = make_bundle(tmp_path)
    _make_directory(os.path.join(bundle, "nvidia-smi-q.xml"))
    for fallback in ("nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        os.remove(os.path.join(bundle, fallback))
    assert _cli("--from-dir", bundle, "--node", "n1") == 3
    assert "UNKNOWN" in capsys.readouterr().out


def test_usage_and_config_errors_are_64(tmp_path, capsys):
    bad = tmp_path / "health.json"
    bad.write_text('{"expected": {"gpu_count": "eight"}}')
    assert _cli("--config", str(bad), "--from-dir", str(tmp_path)) == 64
    assert _cli("--from-dir", str(tmp_path / "absent")) == 64
    capsys.readouterr()


def test_a_fault_of_the_checker_itself_is_unknown_not_a_verdict(tmp_path, monkeypatch, capsys):
    bundle = make_bundle(tmp_path)

    def broken(*_args, **_kwargs):
        raise KeyError("a parser bug")

    monkeypatch.setattr(_health, "evaluate", broken)
    assert _cli("--from-dir", bundle, "--node", "n1") == 3
    assert "internal error, the node's health is unknown: KeyError" in capsys.readouterr().err


def test_a_bundle_without_nvidia_smi_is_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    for name in ("nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        os.remove(os.path.join(bundle, name))
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), from_dir=bundle, use_state=False)
    assert result["status"] == "unknown"
    assert ("CHECK-INPUT-MISSING", "nvidia-smi-q.xml") in found(result)


def test_an_empty_bundle_is_unknown_not_ok(tmp_path):
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), from_dir=str(tmp_path),
                                  use_state=False)
    assert result["status"] == "unknown" and result["exit_code"] == 3


def test_an_nvidia_smi_document_without_gpus_is_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "nvidia-smi-q.xml"),
          '<?xml version="1.0" ?>\n<nvidia_smi_log><driver_version>550.127.05</driver_version>'
          '<attached_gpus>0</attached_gpus></nvidia_smi_log>\n')
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), level="quick", from_dir=bundle,
                                  use_state=False)
    assert ("CHECK-NO-GPU-INVENTORY", "node") in found(result, "unknown")


@pytest.mark.parametrize("text", ["", "{}", '{"DCGM GPU Diagnostic": {"test_categories": []}}'])
def test_a_dcgm_diag_that_tested_nothing_is_unknown_at_the_deep_level(tmp_path, text):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "dcgmi-diag.json"), text)
    result = replay(bundle)
    assert result["status"] == "unknown", result["findings"]


# ---- without a config: NVLink and InfiniBand inputs are still read -------------------------------------------

def test_without_a_config_a_bundle_with_a_down_port_and_an_inactive_link_is_an_error(tmp_path):
    bundle = make_bundle(tmp_path, "ib_port_down:port=mlx5_2/1,value=Polling", "nvlink_inactive:gpu=2")
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), level="quick", from_dir=bundle,
                                  use_state=False)
    assert ("IB-PORT-DOWN", "mlx5_2/1") in found(result, "error")
    assert ("GPU-NVLINK-INACTIVE", "gpu2") in found(result, "error")


def test_without_a_config_a_pcie_bundle_is_ok(tmp_path):
    bundle = make_bundle(tmp_path, profile="l40s-pcie-4")
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), level="quick", from_dir=bundle,
                                  use_state=False)
    assert result["status"] == "ok", result["findings"]


def test_an_all_reduce_perf_output_cut_before_its_summary_is_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nccl-all-reduce.txt")
    text = read(path)
    write(path, text[:text.index("# Out of bounds values")])
    result = replay(bundle)
    assert found(result) == [("CHECK-INPUT-PARTIAL", "node")]


# ---- the drain circuit breaker holds when stricter verdicts hit many nodes at once -----------------------------

def _nodes(count, drained_by_us=0):
    nodes = []
    for index in range(count):
        ours = index < drained_by_us
        nodes.append({"name": "gpu%03d" % index, "state": "IDLE+DRAIN" if ours else "IDLE",
                      "reason": "gpucluster-health: GPU-XID-ERROR gpu1" if ours else ""})
    return nodes


def test_a_fleet_turning_unknown_at_once_drains_and_resumes_nothing(tmp_path):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "nvlink-status.txt") + ".rc", "124\n")   # say a driver update makes nvlink hang
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown"
    nodes = _nodes(200, drained_by_us=5)
    for node in nodes:
        action, _why = _health_slurm.decide(result, node["name"], nodes, 0.1)
        assert action == "none", (node, action)


def test_a_fleet_turning_error_at_once_stops_at_the_circuit_breaker(tmp_path):
    bundle = make_bundle(tmp_path, "gpu_missing")
    result = replay(bundle, level="quick")
    assert result["status"] == "error"
    nodes = _nodes(200)
    drained = 0
    for node in nodes:
        action, argument = _health_slurm.decide(result, node["name"], nodes, 0.1)
        if action == "drain":
            node["state"], node["reason"] = "IDLE+DRAIN", argument
            drained += 1
        else:
            assert action == "refuse" and "circuit breaker" in argument
    assert drained == 20   # 10% of 200 may be out of service; the 21st is refused, and every one after it


# ---- errors a tool printed that no check judges; live and replay alike ---------------------------------------

@pytest.mark.parametrize("rc", [0, 2, 15])
def test_nvidia_smi_printing_only_an_error_no_check_knows_is_unknown(tmp_path, rc):
    bundle = make_bundle(tmp_path)
    for fallback in ("nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        os.remove(os.path.join(bundle, fallback))
    write(os.path.join(bundle, "nvidia-smi-q.xml"), "Unable to query GPU information: Unknown Error\n")
    if rc:
        write(os.path.join(bundle, "nvidia-smi-q.xml.rc"), "%d\n" % rc)
    result, _runner = _health.run(_health.load_config(None, {"node": "n1"}), level="quick", from_dir=bundle,
                                  use_state=False)
    assert result["status"] == "unknown", result["findings"]
    assert ("CHECK-INPUT-ERROR", "nvsmi") in found(result)


def test_a_complete_nvidia_smi_output_with_an_unjudged_error_and_a_failure_code_is_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nvidia-smi-q.xml")
    write(path, read(path) + "Unable to query GPU information: Unknown Error\n")
    write(path + ".rc", "15\n")
    assert replay(bundle, level="quick")["status"] == "unknown"


@pytest.mark.parametrize("rc", [0, 9])
def test_nvlink_printing_only_a_tool_error_is_unknown_for_every_gpu(tmp_path, rc):
    bundle = make_bundle(tmp_path)
    path = os.path.join(bundle, "nvlink-status.txt")
    write(path, "Failed to initialize NVML: Unknown Error\n")
    if rc:
        write(path + ".rc", "%d\n" % rc)
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown", result["findings"]
    assert len([t for c, t in found(result) if c == "CHECK-INPUT-PARTIAL"]) == 8


@pytest.mark.parametrize("line", ["dmesg: read kernel buffer failed: Operation not permitted",
                                  "Hint: You are currently not seeing messages from other users and the system."])
def test_a_kernel_log_that_says_it_could_not_be_read_is_unknown(tmp_path, line):
    bundle = make_bundle(tmp_path)
    write(os.path.join(bundle, "kernel.log"), line + "\n")
    result = replay(bundle, level="quick")
    assert result["status"] == "unknown" and ("CHECK-INPUT-ERROR", "kernel") in found(result)


def test_live_journalctl_hint_on_stderr_with_rc_0_is_unknown(tmp_path):
    bundle = make_bundle(tmp_path)
    xml = read(os.path.join(bundle, "nvidia-smi-q.xml"))

    def fake(argv, _timeout):
        if argv[0] == "journalctl":
            return 0, "", "Hint: You are currently not seeing messages from other users and the system.\n"
        return {("nvidia-smi", "-q", "-x"): (0, xml, "")}.get(tuple(argv), (127, "", "not here"))

    cfg = config(expected={"gpu_count": 8, "nvlinks_per_gpu": 0, "ib_port_count": 0})
    result, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False)
    assert found(result) == [("CHECK-INPUT-ERROR", "kernel")]


def test_an_input_nothing_expects_that_fails_is_a_note_live_and_in_its_bundle(tmp_path):
    bundle = make_bundle(tmp_path)
    xml = read(os.path.join(bundle, "nvidia-smi-q.xml"))
    kernel = os.path.join(bundle, "kernel.log")

    def fake(argv, _timeout):
        return {("nvidia-smi", "-q", "-x"): (0, xml, ""),
                ("nvidia-smi", "nvlink", "-s"): (124, "", "timed out"),
                ("nvidia-smi", "topo", "-m"): (0, "GPU0\tX\n", "")}.get(tuple(argv), (127, "", "not here"))

    cfg = config(expected={"gpu_count": 8, "ib_port_count": 0},
                 sources={"kernel_log": "file:" + kernel})
    collected = str(tmp_path / "collected")
    live, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False,
                                collect_dir=collected)
    again, _runner = _health.run(cfg, level="quick", from_dir=collected, use_state=False)
    for result in (live, again):
        assert result["status"] == "ok", result["findings"]
        assert any(n.startswith("nvlink could not be read (rc 124") for n in result["notes"]), result["notes"]


def test_an_empty_kernel_log_collected_live_replays_as_empty_not_missing(tmp_path):
    bundle = make_bundle(tmp_path)
    xml = read(os.path.join(bundle, "nvidia-smi-q.xml"))

    def fake(argv, _timeout):
        return {("nvidia-smi", "-q", "-x"): (0, xml, ""), ("journalctl",): None}.get(
            tuple(argv), (0, "", "") if argv[0] in ("journalctl", "nvidia-smi", "ibstat") else (127, "", "x"))

    cfg = config(expected={"gpu_count": 8, "nvlinks_per_gpu": 0, "ib_port_count": 0})
    collected = str(tmp_path / "collected")
    live, _runner = _health.run(cfg, level="quick", runner=_health.Runner(fake), use_state=False,
                                collect_dir=collected)
    again, _runner = _health.run(cfg, level="quick", from_dir=collected, use_state=False)
    assert live["status"] == again["status"] == "ok", (live["findings"], again["findings"])


def test_a_damaged_reading_does_not_replace_the_counter_baseline(tmp_path):
    bundle = make_bundle(tmp_path)
    state = tmp_path / "state.json"
    baseline = {"saved_at": time.time() - 60, "nvlink_errors": {"gpu0/link0": {"replay": 0}}, "ib_counters": {}}
    state.write_text(json.dumps(baseline))
    outputs = {("nvidia-smi", "-q", "-x"): (0, read(os.path.join(bundle, "nvidia-smi-q.xml")), ""),
               ("nvidia-smi", "nvlink", "-s"): (0, read(os.path.join(bundle, "nvlink-status.txt")), ""),
               ("nvidia-smi", "nvlink", "-e"): (124, "", "timed out"),
               ("systemctl", "is-active", "nvidia-fabricmanager"): (0, "active\n", "")}
    cfg = config(state_file=str(state), sources={"kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
                                                 "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband")})
    result, _runner = _health.run(cfg, level="standard",
                                  runner=_health.Runner(lambda argv, _t: outputs.get(tuple(argv), (127, "", "x"))))
    assert result["status"] == "unknown"
    assert json.loads(state.read_text()) == baseline
    assert "counters not saved: nvlink_errors failed or was read in part" in result["notes"]


@pytest.mark.parametrize("saved", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_a_state_time_that_is_no_real_time_is_not_trusted_and_does_not_crash(tmp_path, saved):
    state = tmp_path / "state.json"
    state.write_text('{"saved_at": %s, "ib_counters": {}, "nvlink_errors": {}}' % saved)
    loaded, note = _health.load_state(str(state), 1800, time.time())
    assert loaded == {} and "not within 1800 s" in note


def test_a_fault_after_the_check_such_as_an_unwritable_prom_file_is_unknown(tmp_path, capsys):
    bundle = make_bundle(tmp_path)
    prom = str(tmp_path / "no-such-dir" / "health.prom")
    assert _cli("--from-dir", bundle, "--node", "n1", "--prom-file", prom) == 3
    assert "internal error, the node's health is unknown" in capsys.readouterr().err


def test_output_is_written_whole_and_stdout_stays_empty(tmp_path, capsys):
    bundle = make_bundle(tmp_path)
    out = tmp_path / "last.json"
    assert _cli("--from-dir", bundle, "--node", "n1", "--format", "json", "--output", str(out)) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text())["status"] == "ok"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".last.json")] == []


@pytest.mark.parametrize("fmt", ["json", "human", "prometheus"])
def test_a_fault_of_the_checker_replaces_the_last_report_with_unknown(tmp_path, capsys, fmt):
    bundle = make_bundle(tmp_path)
    out = tmp_path / "last.json"
    out.write_text('{"status": "ok"}\n')
    prom = str(tmp_path / "no-such-dir" / "health.prom")
    assert _cli("--from-dir", bundle, "--node", "n1", "--format", fmt, "--output", str(out), "--prom-file", prom) == 3
    assert "internal error" in capsys.readouterr().err
    text = out.read_text()
    if fmt == "json":
        report = json.loads(text)
        assert report["status"] == "unknown" and report["exit_code"] == 3 and "internal error" in report["notes"][0]
    elif fmt == "human":
        assert text.startswith("n1: UNKNOWN") and "CHECKER-INTERNAL-ERROR" in text
    else:
        assert 'gpucluster_health_status{node="n1",level="quick"} 3' in text


def test_a_checker_that_cannot_start_replaces_the_last_reports_with_unknown(tmp_path, capsys):
    out, prom = tmp_path / "last.json", tmp_path / "health.prom"
    out.write_text('{"status": "ok"}\n')
    prom.write_text('gpucluster_health_status{node="n1",level="quick"} 0\n')
    bad = tmp_path / "health.json"
    bad.write_text("{not json")
    assert _cli("--config", str(bad), "--node", "n1", "--format", "json", "--output", str(out),
                "--prom-file", str(prom)) == 64
    assert capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["status"] == "unknown" and report["findings"][0]["code"] == "CHECKER-USAGE-ERROR", report
    assert 'gpucluster_health_status{node="n1",level="quick"} 3' in prom.read_text()
