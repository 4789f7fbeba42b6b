"""Every check, passing and failing, on snapshots built in the shape of docs/health-model.md."""

import copy

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as hc

BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
       "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
CONFIG = {"expected": {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
                       "cuda_version": "12.4", "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8,
                       "ib_rate_gbps": 400},
          "thresholds": {"nccl_busbw_min_gbps": 300}}
NOW = 1796000000.0
ZERO_COUNTERS = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


def gpu(index):
    return {
        "index": index, "minor_number": index, "bus_id": BUS[index], "uuid": "GPU-%08d" % index,
        "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "persistence_mode": True,
        "ecc_mode": {"current": True, "pending": True}, "mig_mode": {"current": False, "pending": False},
        "mig_devices": [],
        "ecc_errors": {"volatile": {"correctable": 0, "uncorrectable": 0},
                       "aggregate": {"correctable": 3, "uncorrectable": 0}},
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "replay_counter": 0},
        "temperature": {"gpu_c": 41, "memory_c": 48, "slowdown_c": 90, "shutdown_c": 95, "max_operating_c": 87,
                        "max_memory_c": 95},
        "power": {"draw_w": 120.5, "limit_w": 700.0, "default_limit_w": 700.0, "max_limit_w": 700.0},
        "clock_event_reasons": {"gpu_idle": True, "sw_power_cap": False, "hw_slowdown": False,
                                "hw_thermal_slowdown": False, "hw_power_brake_slowdown": False,
                                "sw_thermal_slowdown": False},
        "fabric": {"state": "Completed", "status": "Success"},
        "utilization": {"gpu_pct": 0, "memory_pct": 0},
        "errors": [],
    }


def healthy():
    return {
        "nvsmi": {"source": "xml", "driver_version": "550.127.05", "cuda_version": "12.4", "attached_gpus": 8,
                  "gpus": [gpu(i) for i in range(8)], "errors": [], "unreadable": []},
        "nvlink": {"gpus": [{"index": i, "links": [{"link": n, "active": True, "speed_gbps": 26.562}
                                                   for n in range(18)]} for i in range(8)],
                   "errors": [], "unreadable": []},
        "nvlink_errors": {"gpus": [{"index": i, "links": [{"link": n, "counters": dict(ZERO_COUNTERS)}
                                                          for n in range(18)]} for i in range(8)],
                          "errors": [], "unreadable": []},
        "ib": {"devices": [{"name": "mlx5_%d" % i, "type": "MT4129", "ports": [
            {"port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400.0,
             "link_layer": "InfiniBand", "counters": {"link_downed": 0, "symbol_error": 0}}]} for i in range(8)]
            + [{"name": "mlx5_bond_0", "type": "MT41692", "ports": [
                {"port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 200.0,
                 "link_layer": "Ethernet", "counters": {}}]}],
            "errors": [], "unreadable": []},
        "kernel": {"events": [], "latest_epoch": NOW - 60, "unreadable": []},
        "fabricmanager": "active",
        "dcgm": {"level": 3, "results": [{"test": "Memory", "category": "Hardware", "status": "pass", "gpus": None,
                                          "message": None}], "errors": [], "unreadable": []},
        "nccl": {"rows": [{"size_bytes": 8589934592, "oop_busbw": 480.0, "ip_busbw": 481.0, "oop_wrong": 0,
                           "ip_wrong": 0}], "avg_busbw_gbps": 120.0, "max_busbw_gbps": 481.0,
                 "errors": [], "unreadable": []},
        "now": NOW,
        "failures": {},
    }


def codes(findings, severity=None):
    return sorted({f["code"] for f in findings if severity is None or f["severity"] == severity})


def run(snapshot, level="deep", config=None):
    return hc.run_checks(snapshot, CONFIG if config is None else config, level)


def test_healthy_node_has_no_finding_above_ok():
    findings = run(healthy())
    assert findings == []
    assert hc.worst(findings) == "ok" and hc.exit_code(findings) == 0


def test_every_finding_has_the_contract_fields():
    snap = healthy()
    snap["nvsmi"]["gpus"][2]["remapped_rows"]["pending"] = True
    for item in run(snap):
        assert set(item) == {"check", "code", "severity", "target", "message", "action"}
        assert item["severity"] in hc.SEVERITIES and item["message"] and item["action"]


@pytest.mark.parametrize("mutate,code,severity,target", [
    (lambda s: s["nvsmi"]["gpus"].pop(), "GPU-COUNT-LOW", "error", "node"),
    (lambda s: s["nvsmi"]["gpus"][0].update(name="NVIDIA A100-SXM4-80GB"), "GPU-MODEL-MISMATCH", "error", "gpu0"),
    (lambda s: s["nvsmi"].update(driver_version="535.161.08"), "GPU-DRIVER-VERSION", "error", "node"),
    (lambda s: s["nvsmi"].update(cuda_version="12.2"), "GPU-CUDA-VERSION", "warning", "node"),
    (lambda s: s["nvsmi"]["errors"].append({"kind": "driver_mismatch", "message": "Driver/library version mismatch"}),
     "GPU-NVML-MISMATCH", "error", "node"),
    (lambda s: s["nvsmi"]["errors"].append({"kind": "nvml_init", "message": "couldn't communicate"}),
     "GPU-DRIVER-NOT-LOADED", "error", "node"),
    (lambda s: (s["nvsmi"]["gpus"].pop(3), s["nvsmi"]["errors"].append(
        {"kind": "device_handle", "bus_id": BUS[3], "message": "Unknown Error"})),
     "GPU-FALLEN-OFF-BUS", "error", BUS[3]),
    (lambda s: s["nvsmi"]["gpus"][1].update(persistence_mode=False), "GPU-PERSISTENCE-OFF", "warning", "gpu1"),
    (lambda s: s["nvsmi"]["gpus"][1]["ecc_mode"].update(current=False, pending=False),
     "GPU-ECC-DISABLED", "error", "gpu1"),
    (lambda s: s["nvsmi"]["gpus"][1]["ecc_mode"].update(pending=False), "GPU-ECC-PENDING", "warning", "gpu1"),
    (lambda s: s["nvsmi"]["gpus"][2]["ecc_errors"]["volatile"].update(uncorrectable=2),
     "GPU-ECC-UNCORRECTABLE-VOLATILE", "error", "gpu2"),
    (lambda s: s["nvsmi"]["gpus"][2]["ecc_errors"]["aggregate"].update(uncorrectable=2),
     "GPU-ECC-UNCORRECTABLE-AGGREGATE", "warning", "gpu2"),
    (lambda s: s["nvsmi"]["gpus"][2]["ecc_errors"]["volatile"].update(correctable=50000),
     "GPU-ECC-CORRECTABLE-HIGH", "warning", "gpu2"),
    (lambda s: s["nvsmi"]["gpus"][3]["retired_pages"].update(pending=True), "GPU-RETIRED-PAGES-PENDING", "error",
     "gpu3"),
    (lambda s: s["nvsmi"]["gpus"][3]["retired_pages"].update(double_bit=2, single_bit=1), "GPU-RETIRED-PAGES-DBE",
     "warning", "gpu3"),
    (lambda s: s["nvsmi"]["gpus"][3]["retired_pages"].update(double_bit=10, single_bit=55),
     "GPU-RETIRED-PAGES-LIMIT", "error", "gpu3"),
    (lambda s: s["nvsmi"]["gpus"][4]["remapped_rows"].update(pending=True, uncorrectable=1),
     "GPU-ROW-REMAP-PENDING", "error", "gpu4"),
    (lambda s: s["nvsmi"]["gpus"][4]["remapped_rows"].update(failure=True), "GPU-ROW-REMAP-FAILURE", "error", "gpu4"),
    (lambda s: s["nvlink"]["gpus"][5]["links"][7].update(active=False), "GPU-NVLINK-INACTIVE", "error", "gpu5"),
    (lambda s: s["nvlink"]["gpus"][5]["links"].pop(), "GPU-NVLINK-COUNT", "error", "gpu5"),
    (lambda s: s.update(nvlink={"gpus": [], "errors": [{"kind": "all_inactive", "message": "all links inactive"}],
                                "unreadable": []}), "GPU-NVLINK-INACTIVE", "error", "node"),
    (lambda s: s["nvlink_errors"]["gpus"][6]["links"][2]["counters"].update(replay=5000), "GPU-NVLINK-ERRORS",
     "warning", "gpu6/link2"),
    (lambda s: s["nvsmi"]["gpus"][6]["pcie"].update(width_current=8), "GPU-PCIE-WIDTH", "error", "gpu6"),
    (lambda s: (s["nvsmi"]["gpus"][6]["pcie"].update(gen_current=3),
                s["nvsmi"]["gpus"][6]["clock_event_reasons"].update(gpu_idle=False),
                s["nvsmi"]["gpus"][6]["utilization"].update(gpu_pct=90)), "GPU-PCIE-GEN", "warning", "gpu6"),
    (lambda s: s["nvsmi"]["gpus"][7]["temperature"].update(gpu_c=92), "GPU-TEMP-HIGH", "error", "gpu7"),
    (lambda s: s["nvsmi"]["gpus"][7]["temperature"].update(gpu_c=86), "GPU-TEMP-HIGH", "warning", "gpu7"),
    (lambda s: s["nvsmi"]["gpus"][7]["temperature"].update(memory_c=99), "GPU-MEMORY-TEMP-HIGH", "warning", "gpu7"),
    # Hopper on recent drivers: thresholds relative to T.Limit, absolute ones absent
    (lambda s: s["nvsmi"]["gpus"][7]["temperature"].update(slowdown_c=None, tlimit_c=-3, slowdown_tlimit_c=-2),
     "GPU-TEMP-HIGH", "error", "gpu7"),
    (lambda s: s["nvsmi"]["gpus"][7]["temperature"].update(slowdown_c=None, tlimit_c=2, slowdown_tlimit_c=-2),
     "GPU-TEMP-HIGH", "warning", "gpu7"),
    (lambda s: s["nvsmi"]["gpus"][0]["power"].update(draw_w=760.0), "GPU-POWER-OVER-LIMIT", "warning", "gpu0"),
    (lambda s: s["nvsmi"]["gpus"][0]["power"].update(limit_w=500.0), "GPU-POWER-CAPPED", "warning", "gpu0"),
    (lambda s: s["nvsmi"]["gpus"][0]["clock_event_reasons"].update(hw_slowdown=True), "GPU-CLOCK-HW-SLOWDOWN",
     "error", "gpu0"),
    (lambda s: s["nvsmi"]["gpus"][0]["clock_event_reasons"].update(hw_thermal_slowdown=True), "GPU-CLOCK-THERMAL",
     "error", "gpu0"),
    (lambda s: s["nvsmi"]["gpus"][0]["clock_event_reasons"].update(sw_thermal_slowdown=True), "GPU-CLOCK-THERMAL",
     "warning", "gpu0"),
    (lambda s: s["nvsmi"]["gpus"][0]["clock_event_reasons"].update(hw_power_brake_slowdown=True),
     "GPU-CLOCK-POWER-BRAKE", "error", "gpu0"),
    (lambda s: s.update(fabricmanager="inactive"), "NODE-FABRICMANAGER-DOWN", "error", "node"),
    (lambda s: s["nvsmi"]["gpus"][1]["fabric"].update(state="In Progress", status=None), "GPU-FABRIC-INCOMPLETE",
     "error", "gpu1"),
    (lambda s: s["ib"]["devices"].pop(0), "IB-PORT-COUNT", "error", "node"),
    (lambda s: s["ib"]["devices"][2]["ports"][0].update(state="Down", physical_state="Disabled"), "IB-PORT-DOWN",
     "error", "mlx5_2/1"),
    (lambda s: s["ib"]["devices"][2]["ports"][0].update(physical_state="Polling"), "IB-PORT-DOWN", "error",
     "mlx5_2/1"),
    (lambda s: s["ib"]["devices"][3]["ports"][0].update(rate_gbps=200.0), "IB-RATE-LOW", "error", "mlx5_3/1"),
    (lambda s: s["dcgm"]["results"].append({"test": "Memory", "status": "fail", "gpus": [3], "message": "DBE"}),
     "DCGM-DIAG-FAIL", "error", "gpu3"),
    (lambda s: s["nccl"].update(max_busbw_gbps=150.0), "NCCL-BUSBW-LOW", "error", "node"),
    (lambda s: s["nccl"].update(rows=[], max_busbw_gbps=None, errors=[{"kind": "launcher", "message": "slots"}]),
     "NCCL-TEST-FAILED", "error", "node"),
])
def test_each_fault_is_found_with_its_code_severity_and_target(mutate, code, severity, target):
    snap = healthy()
    mutate(snap)
    findings = run(snap)
    match = [f for f in findings if f["code"] == code and f["severity"] == severity]
    assert match, "expected %s/%s, got %s" % (code, severity, [(f["code"], f["severity"]) for f in findings])
    assert target in [f["target"] for f in match]
    assert hc.worst(findings) == severity or hc.worst(findings) == "error"


def _xid(code, bus=BUS[2], epoch=NOW - 600, kind="xid", fatal=None, device=None):
    event = {"kind": kind, "code": code, "bus_id": bus, "device": device, "pid": None,
             "message": "Xid %s" % code, "epoch": epoch, "uptime_s": None, "raw": ""}
    if fatal is not None:
        event["sxid_fatal"] = fatal
    return event


@pytest.mark.parametrize("event,code,severity,target", [
    (_xid(79), "GPU-FALLEN-OFF-BUS", "error", "gpu2"),
    (_xid(48), "GPU-XID-ERROR", "error", "gpu2"),
    (_xid(94), "GPU-XID-ERROR", "error", "gpu2"),
    (_xid(13), "GPU-XID-APP", "warning", "gpu2"),
    (_xid(31, bus="00000000:77:00.0"), "GPU-XID-APP", "warning", "00000000:77:00.0"),
    (_xid(20034, bus=None, kind="sxid", fatal=True, device="nvidia-nvswitch3"), "NVSWITCH-SXID-FATAL", "error",
     "nvidia-nvswitch3"),
    (_xid(12028, bus=None, kind="sxid", fatal=False, device="nvidia-nvswitch1"), "NVSWITCH-SXID", "warning",
     "nvidia-nvswitch1"),
])
def test_xid_classification(event, code, severity, target):
    snap = healthy()
    snap["kernel"]["events"].append(event)
    findings = run(snap, level="quick")
    assert [(f["code"], f["severity"], f["target"]) for f in findings] == [(code, severity, target)]


def test_xid_window_and_ignore_list_and_catalog():
    snap = healthy()
    snap["kernel"]["events"] = [_xid(48, epoch=NOW - 3 * 86400), _xid(43)]
    # the Xid 48 is three days old, outside the default 24 h window; Xid 43 is an application fault
    assert [(f["code"], f["severity"]) for f in run(snap, level="quick")] == [("GPU-XID-APP", "warning")]
    config = dict(CONFIG, xid={"ignore": [43]})
    assert run(snap, level="quick", config=config) == []
    snap["xid_catalog"] = {43: {"severity": "error", "class": "driver", "action": "reset it"}}
    findings = run(snap, level="quick")
    assert [(f["code"], f["severity"], f["action"]) for f in findings] == [("GPU-XID-ERROR", "error", "reset it")]


def test_xid_events_are_grouped_per_code_and_gpu():
    snap = healthy()
    snap["kernel"]["events"] = [_xid(13, epoch=NOW - i) for i in range(300)]
    findings = run(snap, level="quick")
    assert len(findings) == 1 and findings[0]["message"].startswith("300 XID 13")


def test_ib_flaps_from_kernel_log_and_counters():
    snap = healthy()
    flap = {"kind": "link_down", "code": None, "bus_id": None, "device": "ib3", "pid": None, "message": "lost carrier",
            "epoch": NOW - 100, "uptime_s": None, "raw": ""}
    snap["kernel"]["events"] = [dict(flap) for _i in range(3)]
    assert codes(run(snap, level="quick"), "warning") == ["IB-LINK-FLAP"]
    snap["kernel"]["events"] = [dict(flap) for _i in range(7)]
    assert codes(run(snap, level="quick"), "error") == ["IB-LINK-FLAP"]
    snap["kernel"]["events"] = []
    snap["previous"] = {"ib_counters": {"mlx5_1/1": {"link_downed": 0, "symbol_error": 0}}}
    snap["ib"]["devices"][1]["ports"][0]["counters"].update(link_downed=4, symbol_error=500)
    assert codes(run(snap, level="quick")) == ["IB-LINK-FLAP", "IB-SYMBOL-ERRORS"]


def test_nvlink_counters_rising_since_previous_run():
    snap = healthy()
    snap["nvlink_errors"]["gpus"][0]["links"][0]["counters"]["crc_flit"] = 400
    snap["previous"] = {"nvlink_errors": {"gpu0/link0": {"crc_flit": 100}}}
    found = run(snap, level="standard")
    assert codes(found) == ["GPU-NVLINK-ERRORS"] and "rose by 300" in found[0]["message"]
    assert run(snap, level="quick") == []   # nvlink -e counters are a standard-level check


def test_levels_gate_deep_checks():
    snap = healthy()
    snap["dcgm"]["results"].append({"test": "PCIe", "status": "fail", "gpus": None, "message": None})
    assert run(snap, level="standard") == []
    assert codes(run(snap, level="deep")) == ["DCGM-DIAG-FAIL"]
    with pytest.raises(ValueError):
        hc.run_checks(snap, CONFIG, "thorough")


def test_cool_hopper_with_tlimit_headroom_is_fine():
    snap = healthy()
    snap["nvsmi"]["gpus"][0]["temperature"].update(slowdown_c=None, shutdown_c=None, tlimit_c=45, slowdown_tlimit_c=-2)
    assert run(snap) == []


def test_idle_gpu_with_low_pcie_gen_is_not_a_fault():
    snap = healthy()
    snap["nvsmi"]["gpus"][0]["pcie"]["gen_current"] = 1   # idle GPUs train their link down to save power
    assert run(snap) == []


def test_without_config_only_self_evident_faults_are_reported():
    snap = healthy()
    snap["nvsmi"]["gpus"].pop()
    snap["nvsmi"]["driver_version"] = "999.1"
    assert run(snap, config={}) == []
    snap["nvsmi"]["gpus"][0]["remapped_rows"]["pending"] = True
    assert codes(run(snap, config={})) == ["GPU-ROW-REMAP-PENDING"]


def test_without_config_a_down_port_and_an_inactive_link_still_count():
    """The inputs given are judged on what needs no expected value: a port Down or Polling, an inactive link."""
    snap = healthy()
    snap["ib"]["devices"][0]["ports"][0]["state"] = "Down"
    snap["ib"]["devices"][0]["ports"][0]["physical_state"] = "Polling"
    snap["nvlink"]["gpus"][3]["links"][5]["active"] = False
    found = run(snap, config={})
    assert [(f["code"], f["target"], f["severity"]) for f in found] == [
        ("GPU-NVLINK-INACTIVE", "gpu3", "error"), ("IB-PORT-DOWN", "mlx5_0/1", "error")]


def test_without_config_a_disabled_port_is_left_alone_and_missing_inputs_are_no_finding():
    snap = healthy()
    snap["ib"]["devices"][0]["ports"][0]["state"] = "Down"
    snap["ib"]["devices"][0]["ports"][0]["physical_state"] = "Disabled"
    assert run(snap, config={}) == []
    del snap["ib"], snap["nvlink"]
    assert run(snap, config={}) == []


def test_an_expected_count_of_zero_skips_the_input():
    snap = healthy()
    snap["ib"]["devices"][0]["ports"][0]["state"] = "Down"
    snap["nvlink"]["gpus"][3]["links"][5]["active"] = False
    assert run(snap, config={"expected": {"ib_port_count": 0, "nvlinks_per_gpu": 0}}) == []


def test_failed_and_unreadable_inputs_are_unknown_not_silent():
    snap = healthy()
    del snap["ib"]
    snap["failures"] = {"ib": {"rc": 127, "stderr": "ibstat: not found"}}
    snap["kernel"]["unreadable"] = ["line 3: no timestamp"]
    found = run(snap, level="quick")
    assert codes(found, "unknown") == ["CHECK-INPUT-FAILED", "CHECK-UNREADABLE"]
    assert hc.exit_code(found) == 3


def test_nvsmi_failure_without_output():
    snap = healthy()
    snap["nvsmi"] = None
    snap["failures"] = {"nvsmi": {"rc": 124, "stderr": "nvidia-smi did not finish within 30 s"}}
    found = run(snap, level="quick")
    assert codes(found) == ["GPU-NVSMI-FAILED"] and "did not finish" in found[0]["message"]


def test_exit_codes_and_worst():
    f = hc.finding
    assert hc.exit_code([f("a", "X", "warning", "n", "m")]) == 1
    assert hc.exit_code([f("a", "X", "warning", "n", "m"), f("a", "Y", "unknown", "n", "m")]) == 3
    assert hc.exit_code([f("a", "X", "error", "n", "m"), f("a", "Y", "unknown", "n", "m")]) == 2
    assert hc.worst([f("a", "X", "info", "n", "m")]) == "info" and hc.exit_code([f("a", "X", "info", "n", "m")]) == 0
    with pytest.raises(ValueError):
        f("a", "X", "fatal", "n", "m")


def test_findings_sorted_worst_first_then_code_then_natural_target():
    snap = healthy()
    for i in (2, 1):
        snap["nvsmi"]["gpus"][i]["persistence_mode"] = False
    snap["nvsmi"]["gpus"][4]["remapped_rows"]["pending"] = True
    order = [(f["severity"], f["target"]) for f in run(snap)]
    assert order == [("error", "gpu4"), ("warning", "gpu1"), ("warning", "gpu2")]


def test_checks_do_not_modify_the_snapshot():
    snap = healthy()
    snap["nvsmi"]["gpus"][4]["remapped_rows"]["pending"] = True
    before = copy.deepcopy(snap)
    run(snap)
    assert snap == before
