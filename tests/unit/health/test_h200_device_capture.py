"""A real capture: gpucluster-health --collect on one NVIDIA H200 (device tool, driver 580.159.04, 2026-12-04).

The bundle (tests/unit/fixtures/bundles/h200x1_device; PROVENANCE.txt there says how it was taken) replays to the
verdicts the checker gave live on that machine, and the nvidia-smi parsers, gpu_facts and the gres.conf render read
from it what nvidia-smi printed there (its summary table and -L, kept in fixtures/nvsmi/h200x1_*)."""

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import slurm_gres_lines
from ansible_collections.gpucluster.ops.plugins.module_utils import _health, _nvlink, _nvsmi
from ansible_collections.gpucluster.ops.plugins.modules import gpu_facts
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import host_facts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures")
BUNDLE = os.path.join(FIXTURES, "bundles", "h200x1_device")
CHECKER = os.path.join(ROOT, "bin", "gpucluster-health")
# The config of the device run (PROVENANCE.txt), without its state file: a replay reads none.
DEVICE_CONFIG = {"node": "h200-device", "level": "quick", "expected": {"gpu_count": 1, "gpu_model": "NVIDIA H200"},
                 "sources": {"kernel_log": "dmesg", "dcgm_level": 1},
                 "timeouts": {"command_s": 60, "dcgm_s": 150, "nccl_s": 60}}
GPU = {"index": 0, "bus_id": "00000000:00:06.0", "uuid": "GPU-dc730f1a-4991-b143-607e-665e68a7232d",
       "name": "NVIDIA H200", "serial": "1654024029926", "vbios_version": "96.00.A5.00.1A"}
# What the checker said live on the H200 with DEVICE_CONFIG: status, exit code, findings, unreadable inputs.
LIVE = {
    "quick": ("ok", 0, [], []),
    "standard": ("ok", 0, [], []),
    "deep": ("unknown", 3, [("CHECK-INPUT-FAILED", "unknown", "dcgm")],
             [{"input": "dcgm", "detail": "rc 127: dcgmi: No such file or directory"}]),
}
# The capture has no sys-class-infiniband/ (taken before --collect wrote an empty one), so the replay reads
# ibstat.txt, which failed there; live, the empty /sys/class/infiniband was read and nothing was noted.
IB_NOTE = "ib could not be read (rc 127: ibstat: No such file or directory); nothing expects it"
# What gpu_facts returned there (plugins/modules/gpu_facts.py run with ansible-core 2.19.14 on the real nvidia-smi).
FACTS = {
    "gpucluster_gpus": [{
        "index": 0, "minor_number": 0, "bus_id": "00000000:00:06.0", "uuid": "GPU-dc730f1a-4991-b143-607e-665e68a7232d",
        "name": "NVIDIA H200", "serial": "1654024029926", "memory_total_mib": 143771, "persistence_mode": True,
        "ecc_mode": {"current": True, "pending": True}, "mig_mode": {"current": False, "pending": False},
        "mig_devices": [], "nvlinks_active": None, "nvlink_peers": [], "cpu_affinity": "0-15", "numa_affinity": "0"}],
    "gpucluster_gpu_count": 1,
    "gpucluster_gpu_driver_version": "580.159.04",
    "gpucluster_gpu_cuda_version": "13.0",
    "gpucluster_gpu_error": "",
}


def read(*parts):
    with open(os.path.join(*parts)) as handle:
        return handle.read()


def replay_cli(tmp_path, level, config=None):
    """bin/gpucluster-health --from-dir on the bundle, as a person would run it; (exit code, result)."""
    argv = [sys.executable, "-I", CHECKER, "--from-dir", BUNDLE, "--level", level, "--format", "json"]
    if config is not None:
        path = tmp_path / "health.json"
        path.write_text(json.dumps(config))
        argv += ["--config", str(path)]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert proc.stderr == b"", proc.stderr.decode()
    return proc.returncode, json.loads(proc.stdout)


def codes(result):
    return [(f["code"], f["severity"], f["target"]) for f in result["findings"]]


def printed():
    """What nvidia-smi printed there in its summary table and -L (read with regular expressions, not our parsers)."""
    table = read(FIXTURES, "nvsmi", "h200x1_summary.txt")
    header = re.search(r"Driver Version: (\S+)\s+CUDA Version: (\S+)", table)
    row = re.search(r"^\|\s+(\d+)\s+(NVIDIA \S+)\s+(On|Off)\s+\|\s+(\S+) ", table, re.MULTILINE)
    memory = re.search(r"(\d+)MiB / (\d+)MiB", table)
    uuid = re.match(r"GPU 0: (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", read(FIXTURES, "nvsmi", "h200x1_L.txt").strip())
    return {"driver": header.group(1), "cuda": header.group(2), "index": int(row.group(1)), "name": row.group(2),
            "persistence": row.group(3) == "On", "bus_id": row.group(4), "memory_total_mib": int(memory.group(2)),
            "name_l": uuid.group(1), "uuid": uuid.group(2), "gpus": len(re.findall(r"^GPU \d+:", read(
                FIXTURES, "nvsmi", "h200x1_L.txt"), re.MULTILINE))}


# ---- the checker on the bundle -----------------------------------------------------------------------------------

@pytest.mark.parametrize("level", sorted(LIVE))
def test_replay_gives_the_live_verdict(tmp_path, level):
    status, exit_code, findings, unreadable = LIVE[level]
    rc, result = replay_cli(tmp_path, level, DEVICE_CONFIG)
    assert (rc, result["status"], result["exit_code"]) == (exit_code, status, exit_code)
    assert codes(result) == findings
    assert result["unreadable"] == unreadable
    assert result["gpus"] == [dict(GPU, minor_number=0)] and result["driver_version"] == "580.159.04"
    assert result["missing_inputs"] == [] and result["notes"] == [IB_NOTE] and result["tool_calls"] == 0
    assert result["node"] == "h200-device" and result["level"] == level


def test_without_a_config_the_single_h200_is_ok_without_nvlink_output(tmp_path):
    """nvidia-smi nvlink -s printed nothing there (rc 0): with no link expected that is no finding."""
    rc, result = replay_cli(tmp_path, "standard")
    assert (rc, result["status"], codes(result)) == (0, "ok", [])


@pytest.mark.parametrize("expected, findings", [
    # the whole expectation of this node holds
    ({"gpu_count": 1, "gpu_model": "NVIDIA H200", "driver_version": "580", "cuda_version": "13.0",
      "persistence_mode": True, "ecc_mode": True, "mig_mode": False, "pcie_width": 16, "pcie_gen": 5,
      "nvlinks_per_gpu": 0, "ib_port_count": 0}, []),
    # NVLinks expected, but nvidia-smi nvlink -s and -e printed nothing there: a tool that printed nothing while an
    # output is expected failed (unknown), it did not report zero links
    ({"nvlinks_per_gpu": 18}, [("CHECK-INPUT-FAILED", "unknown", "nvlink"),
                               ("CHECK-INPUT-FAILED", "unknown", "nvlink_errors")]),
    ({"gpu_count": 8}, [("GPU-COUNT-LOW", "error", "node")]),
    ({"gpu_model": "NVIDIA H100 80GB HBM3"}, [("GPU-MODEL-MISMATCH", "error", "gpu0")]),
    ({"driver_version": "570"}, [("GPU-DRIVER-VERSION", "error", "node")]),
    # an NVSwitch system without systemctl: the fabric manager's state is unknown, never ok; its version was not
    # collected (nothing said NVSwitch when the bundle was taken)
    ({"nvswitch": True}, [("CHECK-INPUT-FAILED", "unknown", "fabricmanager"),
                          ("CHECK-INPUT-MISSING", "unknown", "fabricmanager-version.txt")]),
])
def test_expectations_are_judged_on_the_capture(expected, findings):
    config = _health.load_config(None, {"node": "h200-device", "expected": expected})
    result, _runner = _health.run(config, level="standard", from_dir=BUNDLE, use_state=False)
    assert codes(result) == findings


def test_collect_on_a_node_without_hca_replays_to_the_live_verdict(tmp_path):
    """The H200 VM had an empty /sys/class/infiniband: --collect must record it, or the replay reads the failed
    ibstat.txt and judges differently (unknown instead of IB-PORT-COUNT, a note instead of nothing)."""
    outputs = {("-q", "-x"): "nvidia-smi-q.xml", ("-q",): "nvidia-smi-q.txt", ("nvlink", "-s"): "nvlink-status.txt",
               ("nvlink", "-e"): "nvlink-errors.txt", ("topo", "-m"): "topo.txt"}

    def node(argv, _timeout):
        if argv[0] == "nvidia-smi" and tuple(argv[1:]) in outputs:
            return 0, read(BUNDLE, outputs[tuple(argv[1:])]), ""
        return 127, "", "%s: No such file or directory" % argv[0]

    sysfs = tmp_path / "sys-class-infiniband-of-the-node"
    sysfs.mkdir()
    sources = {"sys_class_infiniband": str(sysfs), "kernel_log": "file:" + os.path.join(BUNDLE, "kernel.log")}
    for expected, findings in (({"ib_port_count": 1}, [("IB-PORT-COUNT", "error", "node")]), ({}, [])):
        config = _health.load_config(None, {"node": "h200-device", "expected": expected, "sources": sources})
        out = str(tmp_path / ("bundle-%d" % len(expected)))
        live, _runner = _health.run(config, level="quick", collect_dir=out, runner=_health.Runner(node),
                                    use_state=False)
        replayed, _runner = _health.run(config, level="quick", from_dir=out, use_state=False)
        assert codes(live) == codes(replayed) == findings
        assert live["notes"] == replayed["notes"] == []
        assert os.listdir(os.path.join(out, "sys-class-infiniband")) == []


# ---- parsers, gpu_facts and the gres render on the capture -------------------------------------------------------

@pytest.mark.parametrize("name, parse", [("nvidia-smi-q.xml", _nvsmi.parse_query_xml),
                                         ("nvidia-smi-q.txt", _nvsmi.parse_query_text)])
def test_nvidia_smi_query_reads_what_nvidia_smi_printed(name, parse):
    seen = printed()
    inventory = parse(read(BUNDLE, name))
    assert (inventory["errors"], inventory["unreadable"]) == ([], [])
    assert (inventory["driver_version"], inventory["cuda_version"]) == (seen["driver"], seen["cuda"]) == (
        "580.159.04", "13.0")
    assert inventory["attached_gpus"] == len(inventory["gpus"]) == seen["gpus"] == 1
    gpu = inventory["gpus"][0]
    fields = ("index", "name", "bus_id", "uuid", "memory_total_mib", "persistence_mode")
    assert tuple(gpu[key] for key in fields) == tuple(seen[key] for key in (
        "index", "name", "bus_id", "uuid", "memory_total_mib", "persistence")) == (
        0, "NVIDIA H200", "00000000:00:06.0", "GPU-dc730f1a-4991-b143-607e-665e68a7232d", 143771, True)
    assert seen["name_l"] == gpu["name"]
    assert {key: gpu[key] for key in GPU} == GPU and (gpu["minor_number"], gpu["board_id"]) == (0, "0x6")
    assert (gpu["ecc_mode"], gpu["mig_mode"], gpu["mig_devices"]) == (
        {"current": True, "pending": True}, {"current": False, "pending": False}, [])
    assert gpu["ecc_errors"] == {"volatile": {"correctable": 0, "uncorrectable": 0},
                                 "aggregate": {"correctable": 0, "uncorrectable": 0}}
    # Hopper remaps rows; it retires no pages (N/A)
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "gen_device_max": 5, "gen_host_max": None,
                           "width_current": 16, "width_max": 16, "replay_counter": 0}
    # T.Limit temperatures: 48 C of headroom, slowdown at -2, shutdown at -8; no absolute thresholds
    temperature = gpu["temperature"]
    assert (temperature["gpu_c"], temperature["tlimit_c"], temperature["slowdown_tlimit_c"],
            temperature["shutdown_tlimit_c"], temperature["slowdown_c"]) == (39, 48, -2, -8, None)
    assert (gpu["power"]["limit_w"], gpu["power"]["default_limit_w"], gpu["power"]["max_limit_w"]) == (700.0,) * 3
    assert gpu["fabric"] == {"state": None, "status": None} and gpu["errors"] == []
    assert gpu["clock_event_reasons"]["gpu_idle"] is True and not any(
        value for key, value in gpu["clock_event_reasons"].items() if key != "gpu_idle")


def test_nvidia_smi_csv_queries_read_what_nvidia_smi_printed():
    seen = printed()
    inventory = _nvsmi.parse_query_csv(read(FIXTURES, "nvsmi", "h200x1_query.csv"))
    assert (inventory["errors"], inventory["unreadable"], inventory["driver_version"], inventory["cuda_version"]) == (
        [], [], seen["driver"], None)
    gpu = inventory["gpus"][0]
    assert len(inventory["gpus"]) == inventory["attached_gpus"] == 1
    assert {key: gpu[key] for key in GPU} == GPU
    assert (gpu["memory_total_mib"], gpu["persistence_mode"], gpu["ecc_mode"], gpu["mig_mode"]) == (
        seen["memory_total_mib"], True, {"current": True, "pending": True}, {"current": False, "pending": False})
    # this driver prints the header as clocks_event_reasons.* for the clocks_throttle_reasons.* it was asked for
    assert gpu["clock_event_reasons"] == {"gpu_idle": True, "applications_clocks_setting": False,
                                          "sw_power_cap": False, "hw_slowdown": False, "hw_thermal_slowdown": False,
                                          "hw_power_brake_slowdown": False, "sw_thermal_slowdown": False,
                                          "sync_boost": False}
    assert (gpu["power"]["limit_w"], gpu["pcie"]["gen_max"], gpu["pcie"]["width_max"]) == (700.0, 5, 16)
    extra = _nvsmi.parse_query_csv(read(FIXTURES, "nvsmi", "h200x1_query_ext.csv"))
    assert (extra["errors"], extra["unreadable"]) == ([], [])
    gpu = extra["gpus"][0]
    assert (gpu["name"], gpu["memory_total_mib"], gpu["temperature"]["tlimit_c"]) == ("NVIDIA H200", 143771, 48)
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert (gpu["pcie"]["gen_device_max"], gpu["pcie"]["gen_host_max"], gpu["fabric"]) == (
        5, None, {"state": None, "status": None})


def test_nvlink_and_topology_of_the_single_gpu():
    assert _nvlink.parse_nvlink_status(read(BUNDLE, "nvlink-status.txt")) == {"gpus": [], "errors": [],
                                                                              "unreadable": []}
    topo = _nvlink.parse_topo_matrix(read(BUNDLE, "topo.txt"))    # with the ANSI underline nvidia-smi prints
    assert (topo["devices"], topo["matrix"], topo["errors"], topo["unreadable"]) == (
        ["GPU0"], {"GPU0": {"GPU0": "X"}}, [], [])
    assert (topo["cpu_affinity"], topo["numa_affinity"]) == ({"GPU0": "0-15"}, {"GPU0": "0"})


def test_gpu_facts_returns_what_it_returned_on_the_h200():
    answers = {("-q", "-x"): "nvidia-smi-q.xml", ("topo", "-m"): "topo.txt", ("nvlink", "-s"): "nvlink-status.txt"}
    calls = []

    def smi(argv, environ_update=None, **_kwargs):
        calls.append(argv[3:])
        assert argv[:3] == ["timeout", "60", "nvidia-smi"] and environ_update == {"LC_ALL": "C", "LANG": "C"}
        return 0, read(BUNDLE, answers[tuple(argv[3:])]), ""

    result = run_module(gpu_facts, {}, run_command=smi)
    assert result["failed"] is False and result["unreadable"] == []
    assert result["ansible_facts"] == FACTS
    assert calls == [["-q", "-x"], ["topo", "-m"], ["nvlink", "-s"]]


def test_gres_line_of_the_h200_node():
    hostvars = {"gpu01": host_facts(sockets=1, cores=16, threads=1, gpus=FACTS["gpucluster_gpus"])}
    assert slurm_gres_lines(["gpu01"], hostvars) == ["NodeName=gpu01 Name=gpu Type=h200 File=/dev/nvidia0 Cores=0-15"]
