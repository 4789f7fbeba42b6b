"""The fleet model (_fleet): drift and outliers inside a group, unreachable and incomplete records (never OK), Slurm
state, the RMA list, the diff, the previous report, the table; the page (_fleet_html) at 400 nodes x 8 GPUs."""

import json
import os
import re

import fleet_records as fr
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet, _fleet_html


def build(nodes, **extra):
    return _fleet.build(nodes, created_at="2026-12-01T17:00:00Z", **extra)


def fleet_codes(report):
    return sorted((f["target"], f["code"], f["severity"]) for f in report["fleet_findings"])


def versions(**changes):
    return dict(fr.VERSIONS, **changes)


NO_PINS = {}


# ---- drift -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,value,code", [
    ("driver_version", "535.161.08", "FLEET-DRIFT-DRIVER"),
    ("cuda_version", "12.2", "FLEET-DRIFT-CUDA"),
    ("nccl_version", "2.18.3", "FLEET-DRIFT-NCCL"),
    ("ofed_version", "MLNX_OFED_LINUX-23.10-1.1.9.0", "FLEET-DRIFT-OFED"),
    ("vbios_versions", ["96.00.74.00.11"], "FLEET-DRIFT-VBIOS"),
    ("ib_fw_versions", ["28.38.1002", "28.39.1002"], "FLEET-DRIFT-IB-FW"),
])
def test_the_odd_node_drifts_from_the_group_majority(key, value, code):
    nodes = {h: fr.record(h, expected=NO_PINS) for h in ("gpu01", "gpu02", "gpu03")}
    nodes["gpu02"]["versions"][key] = value
    report = build(nodes)
    assert fleet_codes(report) == [("gpu02", code, "warning")]
    finding = report["nodes"]["gpu02"]["findings"][0]
    shown = ", ".join(value) if isinstance(value, list) else value
    majority = ", ".join(fr.VERSIONS[key]) if isinstance(value, list) else fr.VERSIONS[key]
    assert finding["check"] == "fleet" and shown in finding["message"] and majority in finding["message"]
    assert "majority" in finding["message"] and finding["action"]
    row = report["drift"]["gpu_h100"]["keys"][key]
    assert row["majority"] == majority and row["drifted"] == ["gpu02"]
    assert row["values"] == {majority: ["gpu01", "gpu03"], shown: ["gpu02"]}
    assert report["summary"] == {"nodes": 3, "ok": 2, "drained": 0, "warning": 1, "error": 0, "unknown": 0,
                                 "unreachable": 0}


def test_the_pin_wins_over_the_majority():
    nodes = {h: fr.record(h, versions=versions(driver_version="535.161.08")) for h in ("gpu01", "gpu02", "gpu03")}
    nodes["gpu03"]["versions"]["driver_version"] = "550.127.05"
    report = build(nodes)
    assert fleet_codes(report) == [("gpu01", "FLEET-DRIFT-DRIVER", "warning"), ("gpu02", "FLEET-DRIFT-DRIVER", "warning")]
    message = report["nodes"]["gpu01"]["findings"][0]["message"]
    assert "535.161.08" in message and "the inventory pins 550" in message
    assert report["drift"]["gpu_h100"]["keys"]["driver_version"]["pin"] == "550"


def test_a_split_group_without_pin_flags_every_side():
    nodes = {"gpu01": fr.record("gpu01", expected=NO_PINS),
             "gpu02": fr.record("gpu02", expected=NO_PINS, versions=versions(nccl_version="2.18.3"))}
    report = build(nodes)
    assert fleet_codes(report) == [("gpu01", "FLEET-DRIFT-NCCL", "warning"), ("gpu02", "FLEET-DRIFT-NCCL", "warning")]
    assert "no majority" in report["nodes"]["gpu01"]["findings"][0]["message"]


def test_groups_are_compared_apart_and_a_node_in_no_group_is_said():
    nodes = {"a1": fr.record("a1", group="gpu_a100", expected=NO_PINS, versions=versions(driver_version="535.1")),
             "a2": fr.record("a2", group="gpu_a100", expected=NO_PINS, versions=versions(driver_version="535.1")),
             "h1": fr.record("h1", expected=NO_PINS), "h2": fr.record("h2", expected=NO_PINS),
             "x": fr.record("x", group=None, expected=NO_PINS, versions=versions(driver_version="470.1"))}
    report = build(nodes)
    assert fleet_codes(report) == [("x", "FLEET-NO-GROUP", "info")]
    assert sorted(report["drift"]) == ["gpu_a100", "gpu_h100"] and report["nodes"]["x"]["status"] == "info"
    assert report["summary"]["ok"] == 5


def test_a_pinned_version_that_could_not_be_read_is_unknown():
    nodes = {"gpu01": fr.record("gpu01"), "gpu02": fr.record("gpu02", versions=versions(driver_version=None))}
    report = build(nodes)
    assert fleet_codes(report) == [("gpu02", "FLEET-VERSION-UNKNOWN", "unknown")]
    assert report["nodes"]["gpu02"]["status"] == "unknown"


def test_an_unpinned_version_nobody_has_is_no_drift():
    nodes = {h: fr.record(h, expected=NO_PINS, versions=versions(ofed_version=None)) for h in ("gpu01", "gpu02")}
    assert build(nodes)["fleet_findings"] == []


# ---- GPU outliers ----------------------------------------------------------------------------------------------

def test_gpu_count_below_the_group_is_an_error_above_a_warning():
    nodes = {h: fr.record(h, expected=NO_PINS) for h in ("gpu01", "gpu02", "gpu03", "gpu04")}
    nodes["gpu02"]["result"]["gpus"] = fr.gpus("gpu02", 7)
    nodes["gpu03"]["result"]["gpus"] = fr.gpus("gpu03", 9)
    report = build(nodes)
    assert fleet_codes(report) == [("gpu02", "FLEET-GPU-COUNT", "error"), ("gpu03", "FLEET-GPU-COUNT", "warning")]
    assert "GPU count 7, the group's majority has 8" in report["nodes"]["gpu02"]["findings"][0]["message"]


def test_gpu_count_and_model_against_the_pin():
    nodes = {h: fr.record(h, expected=dict(fr.EXPECTED, gpu_count=4, gpu_model="NVIDIA A100-SXM4-80GB"))
             for h in ("gpu01", "gpu02")}
    report = build(nodes)
    assert fleet_codes(report) == [("gpu01", "FLEET-GPU-COUNT", "warning"), ("gpu01", "FLEET-GPU-MODEL", "warning"),
                                   ("gpu02", "FLEET-GPU-COUNT", "warning"), ("gpu02", "FLEET-GPU-MODEL", "warning")]
    assert "the inventory pins NVIDIA A100-SXM4-80GB" in report["nodes"]["gpu01"]["findings"][1]["message"]


def test_a_node_with_another_model_stands_out():
    nodes = {h: fr.record(h, expected=NO_PINS) for h in ("gpu01", "gpu02", "gpu03")}
    for gpu in nodes["gpu03"]["result"]["gpus"]:
        gpu["name"] = "NVIDIA H100 PCIe"
    assert fleet_codes(build(nodes)) == [("gpu03", "FLEET-GPU-MODEL", "warning")]


# ---- reachability, incomplete records, Slurm --------------------------------------------------------------------

def test_an_unreachable_node_is_unknown_never_ok():
    report = build({"gpu01": fr.record("gpu01"), "gpu02": fr.unreachable("ssh: connection refused")})
    entry = report["nodes"]["gpu02"]
    assert entry["status"] == "unknown" and entry["reachable"] is False
    assert [(f["code"], f["severity"]) for f in entry["findings"]] == [("FLEET-UNREACHABLE", "unknown")]
    assert "ssh: connection refused" in entry["findings"][0]["message"]
    assert report["summary"] == {"nodes": 2, "ok": 1, "drained": 0, "warning": 0, "error": 0, "unknown": 1,
                                 "unreachable": 1}
    assert report["drift"]["gpu_h100"]["nodes"] == ["gpu01"]


@pytest.mark.parametrize("change,says", [
    (lambda r: r.pop("result"), "result is missing"),
    (lambda r: r.update(result={}), "result is missing"),
    (lambda r: r.pop("reachable"), "reachable is missing"),
    (lambda r: r.pop("versions"), "versions is missing"),
    (lambda r: r["result"].update(status="error"), "result.status is error but no finding says why"),
    (lambda r: r["result"].update(status="fine"), "result.status is 'fine'"),
    (lambda r: r["result"].pop("findings"), "result.findings is missing"),
    (lambda r: r["result"].update(findings=[{"code": "X"}]), "1 finding(s) of result.findings without code"),
    (lambda r: r["result"].update(gpus="eight"), "result.gpus is not a list"),
    (lambda r: r.update(source="ssh"), "source is 'ssh'"),
])
def test_a_record_missing_a_part_is_unknown_and_names_it(change, says):
    record = fr.record("gpu01")
    change(record)
    entry = build({"gpu01": record})["nodes"]["gpu01"]
    incomplete = [f for f in entry["findings"] if f["code"] == "FLEET-RECORD-INCOMPLETE"]
    assert len(incomplete) == 1 and says in incomplete[0]["message"] and incomplete[0]["severity"] == "unknown"
    assert entry["status"] in ("unknown", "error")


@pytest.mark.parametrize("state,reason,severity,says", [
    ("DRAINED", "gpucluster-health: GPU-XID-ERROR", "info", "by the health checks"),
    ("MIXED+DRAIN", "gpucluster-health: GPU-XID-ERROR", "info", "by the health checks"),
    ("DRAINING", "bad DIMM, ticket 4711", "warning", "not gpucluster.ops'"),
    ("IDLE+DRAIN", "gpucluster-maintenance: monthly deep checks failed: DCGM-DIAG-FAIL gpu2", "info",
     "by the monthly maintenance's deep checks"),
    ("IDLE+DRAIN", "gpucluster-drift: version drift from the pins: DRIVER", "info", "by the weekly maintenance"),
    ("IDLE+DRAIN", "gpucluster-rack3: PDU swap", "info", "gpucluster.ops (owner rack3)"),
    ("DOWN*", "", "warning", "(no reason given)"),
    ("IDLE+FAIL", "Not responding", "warning", "Not responding"),
])
def test_slurm_out_of_service_says_whose(state, reason, severity, says):
    report = build({"gpu01": fr.record("gpu01", slurm_state=state, slurm_reason=reason)})
    assert fleet_codes(report) == [("gpu01", "FLEET-SLURM-DRAINED", severity)]
    assert says in report["fleet_findings"][0]["message"] and state in report["fleet_findings"][0]["message"]


@pytest.mark.parametrize("reason", [r for _s, r in [
    ("", "gpucluster-nvlink: the faults stayed after the restart: reboot the node; if it persists, RMA GPU 5"),
    ("", "gpucluster-health: GPU-XID-79 gpu3"), ("", "gpucluster-upgrade: rolling upgrade"),
    ("", "gpucluster-rack3: PDU swap")]])
def test_the_way_back_for_a_drain_of_ours_is_the_resume_playbook(reason):
    """Issue 44: the suggested action for a node NVLink left drained was a rerun that said 'nothing to remediate'."""
    report = build({"gpu07": fr.record("gpu07", slurm_state="IDLE+DRAIN", slurm_reason=reason)})
    action = report["fleet_findings"][0]["action"]
    assert action.endswith("ansible-playbook -i INVENTORY playbooks/resume.yml --limit gpu07"), action


@pytest.mark.parametrize("state", ["IDLE", "ALLOCATED", "MIXED", "COMPLETING", "IDLE+CLOUD"])
def test_slurm_in_service_is_no_finding(state):
    assert build({"gpu01": fr.record("gpu01", slurm_state=state)})["fleet_findings"] == []


# ---- a node out of service is never OK; an erroring node in service is a finding (issue 44) ------------------------

OWNERS_DRAIN = [("IDLE+DRAIN", "gpucluster-health: GPU-XID-ERROR gpu2"),
                ("DRAINED", "gpucluster-maintenance: monthly deep checks failed: DCGM-DIAG-FAIL gpu2"),
                ("IDLE+DRAIN", "gpucluster-drift: version drift from the pins: DRIVER"),
                ("DRAINING", "gpucluster-nvlink: reset GPU 3"), ("IDLE+DRAIN", "gpucluster-upgrade: rolling upgrade"),
                ("IDLE+DRAIN", "gpucluster-add-node: health check pending"), ("DOWN", "gpucluster-rack3: PDU swap")]


@pytest.mark.parametrize("state,reason", OWNERS_DRAIN)
def test_a_node_drained_by_our_own_owners_is_not_counted_ok(state, reason):
    """Issue 44: "1 node OK" with 0 of 2 in service; the drained node's findings are all OK or info."""
    nodes = {"gpu01": fr.record("gpu01", slurm_state=state, slurm_reason=reason),
             "gpu02": fr.record("gpu02", slurm_state="IDLE")}
    report = build(nodes)
    drained = report["nodes"]["gpu01"]
    assert drained["status"] == "drained" and drained["in_service"] is False
    assert report["nodes"]["gpu02"]["status"] == "ok" and report["nodes"]["gpu02"]["in_service"] is True
    assert report["summary"] == {"nodes": 2, "ok": 1, "drained": 1, "warning": 0, "error": 0, "unknown": 0,
                                 "unreachable": 0}
    assert report["service"] == {"in_service": 1, "out_of_service": 1, "no_slurm_state": 0}
    assert _fleet.table(report) == ["gpu01 DRAINED FLEET-SLURM-DRAINED", "1 node OK, 1 of 2 in service"]


def test_two_nodes_one_drained_by_the_health_checks_is_not_two_ok():
    nodes = {"gpu01": fr.record("gpu01"),
             "gpu02": fr.record("gpu02", slurm_state="DRAINED", slurm_reason="gpucluster-health: GPU-XID-ERROR")}
    report = build(nodes)
    assert report["summary"]["ok"] == 1 and report["summary"]["drained"] == 1
    assert report["service"]["in_service"] == 1
    assert _fleet.table(report)[-1] == "1 node OK, 1 of 2 in service"
    assert "2 nodes OK" not in _fleet.table(report)


def test_in_service_counts_say_which_nodes_slurm_does_not_know():
    nodes = {"gpu01": fr.record("gpu01"), "gpu02": fr.record("gpu02"), "gpu03": fr.unreachable()}
    nodes["gpu02"]["slurm"] = None
    report = build(nodes)
    assert [report["nodes"][h]["in_service"] for h in ("gpu01", "gpu02", "gpu03")] == [True, None, None]
    assert report["nodes"]["gpu02"]["status"] == "ok"
    assert report["service"] == {"in_service": 1, "out_of_service": 0, "no_slurm_state": 2}
    assert _fleet.table(report)[-1] == "2 nodes OK, 1 of 3 in service, 2 with no Slurm state"


def test_the_page_never_hides_a_drained_node_as_ok():
    nodes = {"gpu01": fr.record("gpu01"),
             "gpu02": fr.record("gpu02", slurm_state="IDLE+DRAIN", slurm_reason="gpucluster-health: GPU-XID-ERROR")}
    page = _fleet_html.render(build(nodes))
    row = re.search(r'<tr data-host="gpu02"[^>]*>', page).group(0)
    assert 'data-status="drained"' in row and 'data-in-service="0"' in row
    section = re.search(r'<div class="node" id="n-gpu02"[^>]*>', page).group(0)
    assert 'data-status="drained"' in section
    assert 'data-status="ok"' in re.search(r'<tr data-host="gpu01"[^>]*>', page).group(0)
    # the script hides only what is OK and not out of service
    assert "data-in-service') !== '0'" in page


@pytest.mark.parametrize("state", ["IDLE", "ALLOCATED", "MIXED"])
def test_an_erroring_node_still_in_service_is_a_finding_of_its_own(state):
    ib_down = fr.finding("IB-PORT-DOWN", "error", "mlx5_0/1", "down", check="infiniband")
    nodes = {"gpu01": fr.record("gpu01", [fr.REMAP_FAILURE, ib_down], slurm_state=state),
             "gpu02": fr.record("gpu02")}
    report = build(nodes)
    assert fleet_codes(report) == [("gpu01", "FLEET-ERROR-IN-SERVICE", "error")]
    item = report["fleet_findings"][0]
    assert "GPU-ROW-REMAP-FAILURE" in item["message"] and "IB-PORT-DOWN" in item["message"]
    assert state in item["message"] and "Slurm still schedules" in item["message"]
    assert "health_sweep_drain=true" in item["action"] and "drain" in item["action"]
    assert report["nodes"]["gpu01"]["status"] == "error" and report["nodes"]["gpu01"]["in_service"] is True
    assert _fleet.table(report)[0] == "gpu01 ERROR FLEET-ERROR-IN-SERVICE GPU-ROW-REMAP-FAILURE IB-PORT-DOWN"


@pytest.mark.parametrize("state,reason", [("IDLE+DRAIN", "gpucluster-health: GPU-ROW-REMAP-FAILURE gpu3"),
                                          ("DRAINING", "bad DIMM"), ("DOWN*", "Not responding")])
def test_an_erroring_node_out_of_service_has_no_in_service_finding(state, reason):
    report = build({"gpu01": fr.record("gpu01", [fr.REMAP_FAILURE], slurm_state=state, slurm_reason=reason)})
    assert "FLEET-ERROR-IN-SERVICE" not in {c for _t, c, _s in fleet_codes(report)}


def test_an_erroring_node_without_slurm_state_or_only_warnings_has_no_in_service_finding():
    nodes = {"gpu01": fr.record("gpu01", [fr.REMAP_FAILURE]),
             "gpu02": fr.record("gpu02", [fr.finding("GPU-TEMP-HIGH", "warning", "gpu1", "hot")])}
    nodes["gpu01"]["slurm"] = None
    assert fleet_codes(build(nodes)) == []


# ---- the pins as the config has them (issue 44) ---------------------------------------------------------------

def test_the_drift_table_shows_the_gpu_count_and_model_pins():
    nodes = {h: fr.record(h) for h in ("gpu01", "gpu02")}
    report = build(nodes)
    keys = report["drift"]["gpu_h100"]["keys"]
    assert keys["gpu_count"]["pin"] == 8 and keys["gpu_model"]["pin"] == fr.MODEL
    assert keys["driver_version"]["pin"] == "550"
    drift = re.search(r'<table id="drift">.*?</table>', _fleet_html.render(report)).group(0)
    assert re.search(r"<td>GPU count</td><td class=\"mono\">8</td>", drift), drift
    assert re.search(r"<td>GPU model</td><td class=\"mono\">%s</td>" % re.escape(fr.MODEL), drift), drift


def test_unpinned_gpu_count_and_model_show_no_pin_and_different_pins_show_each():
    report = build({h: fr.record(h, expected=NO_PINS) for h in ("gpu01", "gpu02")})
    keys = report["drift"]["gpu_h100"]["keys"]
    assert keys["gpu_count"]["pin"] is None and keys["gpu_model"]["pin"] is None
    nodes = {"gpu01": fr.record("gpu01"), "gpu02": fr.record("gpu02", expected=dict(fr.EXPECTED, gpu_count=4))}
    assert build(nodes)["drift"]["gpu_h100"]["keys"]["gpu_count"]["pin"] == [4, 8]


# ---- GPUs, RMA, table ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,indexes", [
    ("gpu3", [3]), ("gpu0,gpu1", [0, 1]), ("gpu2/link4", [2]), ("00000000:48:00.0", [3]), ("48:00.0", [3]),
    ("node", []), ("mlx5_0/1", []), ("", []),
])
def test_gpu_indexes_of_a_target(target, indexes):
    assert _fleet.gpu_indexes({"check": "memory", "target": target}, fr.gpus("gpu01")) == indexes


def test_a_fleet_finding_names_no_gpu_even_for_a_host_called_gpu02():
    assert _fleet.gpu_indexes({"check": "fleet", "target": "gpu02"}, fr.gpus("gpu02")) == []


def test_cells_take_the_worst_severity_of_their_gpu():
    findings = [fr.REMAP_FAILURE, fr.finding("GPU-TEMP-HIGH", "warning", "gpu3", "hot"),
                fr.finding("GPU-NVLINK-ERRORS", "warning", "gpu0/link2", "errors", check="nvlink"),
                fr.finding("IB-PORT-DOWN", "error", "mlx5_0/1", "down", check="infiniband")]
    entry = build({"gpu02": fr.record("gpu02", findings)})["nodes"]["gpu02"]
    assert [g["status"] for g in entry["gpus"]] == ["warning", "ok", "ok", "error", "ok", "ok", "ok", "ok"]
    assert entry["node_status"] == "error" and entry["status"] == "error"


def test_the_rma_list_takes_error_findings_of_the_rma_codes():
    findings = [fr.REMAP_FAILURE, fr.finding("GPU-RETIRED-PAGES-LIMIT", "warning", "gpu1", "close to the limit"),
                fr.finding("GPU-FALLEN-OFF-BUS", "error", "00000000:98:00.0", "lost", check="inventory"),
                fr.finding("NVSWITCH-SXID-FATAL", "error", "nvswitch", "SXid 20034", check="xid"),
                fr.finding("GPU-ECC-UNCORRECTABLE-VOLATILE", "error", "gpu2", "2 uncorrectable")]
    report = build({"gpu02": fr.record("gpu02", findings)})
    assert [(r["code"], r["gpu_index"]) for r in report["rma"]] == [
        ("GPU-FALLEN-OFF-BUS", None), ("GPU-ROW-REMAP-FAILURE", 3), ("NVSWITCH-SXID-FATAL", None)]
    assert report["rma_codes"] == sorted(_fleet.DEFAULT_RMA_CODES)
    custom = build({"gpu02": fr.record("gpu02", findings)}, rma_codes=["GPU-ECC-UNCORRECTABLE-VOLATILE"])
    assert [(r["code"], r["gpu_index"], r["serial"]) for r in custom["rma"]] == [
        ("GPU-ECC-UNCORRECTABLE-VOLATILE", 2, fr.gpus("gpu02")[2]["serial"])]
    text = _fleet.rma_csv(custom)
    assert text.splitlines()[0] == "node,gpu_index,serial,uuid,bus_id,code,evidence"
    assert text.splitlines()[1].startswith("gpu02,2,%s,%s," % (fr.gpus("gpu02")[2]["serial"],
                                                               fr.gpus("gpu02")[2]["uuid"]))


def test_the_default_rma_codes_are_codes_the_checker_has():
    with open(_fleet.checks.__file__) as handle:
        source = handle.read()
    for code in _fleet.DEFAULT_RMA_CODES:
        assert '"%s"' % code in source, code


def test_the_table_lists_nodes_not_ok_worst_first_then_the_ok_count():
    nodes = {"a": fr.record("a", [fr.finding("GPU-TEMP-HIGH", "warning", "gpu1", "hot")]),
             "b": fr.record("b", [fr.REMAP_FAILURE]), "c": fr.unreachable(), "d": fr.record("d"),
             "e": fr.record("e", slurm_state="DRAINED", slurm_reason="gpucluster-health: GPU-TEMP-HIGH")}
    # e: drained by the health checks, nothing found now: not OK (issue 44); b: errors and still in service
    assert _fleet.table(build(nodes)) == ["b ERROR FLEET-ERROR-IN-SERVICE GPU-ROW-REMAP-FAILURE",
                                          "c UNKNOWN FLEET-UNREACHABLE", "a WARNING GPU-TEMP-HIGH",
                                          "e DRAINED FLEET-SLURM-DRAINED",
                                          "1 node OK, 3 of 5 in service, 1 with no Slurm state"]


# ---- previous report and diff ----------------------------------------------------------------------------------

def test_diff_by_node_code_and_target():
    before = build({"gpu01": fr.record("gpu01", [fr.finding("GPU-TEMP-HIGH", "warning", "gpu1", "hot")]),
                    "gpu02": fr.record("gpu02", [fr.REMAP_FAILURE])})
    after = build({"gpu01": fr.record("gpu01", [fr.finding("GPU-TEMP-HIGH", "warning", "gpu2", "hot")]),
                   "gpu02": fr.record("gpu02", [fr.REMAP_FAILURE])}, previous=json.loads(_fleet.to_json(before)),
                  previous_path="/r/1/fleet.json")
    diff = after["diff"]
    assert diff["previous"] == "/r/1/fleet.json" and diff["counts"] == {"new": 1, "cleared": 1, "persisting": 2}
    assert [(f["node"], f["target"]) for f in diff["new"]] == [("gpu01", "gpu2")]
    assert [(f["node"], f["target"]) for f in diff["cleared"]] == [("gpu01", "gpu1")]
    assert [(f["node"], f["code"]) for f in diff["persisting"]] == [("gpu02", "FLEET-ERROR-IN-SERVICE"),
                                                                    ("gpu02", "GPU-ROW-REMAP-FAILURE")]


def test_the_previous_report_is_the_newest_sibling_with_a_fleet_json(tmp_path):
    for name, has in (("20261130T000000Z", True), ("20261201T000000Z", True), ("20261201T120000Z", False),
                      ("20261202T000000Z", "self")):
        (tmp_path / name).mkdir()
        if has:
            (tmp_path / name / "fleet.json").write_text("{}")
    (tmp_path / "fleet.json").write_text("{}")
    assert _fleet.find_previous(str(tmp_path / "20261202T000000Z")) == str(tmp_path / "20261201T000000Z" / "fleet.json")
    assert _fleet.find_previous(str(tmp_path / "new" / "x")) is None


@pytest.mark.parametrize("text,says", [("{bad", "could not be read"), ('{"schema_version": 2}', "schema_version 1"),
                                       ("[]", "schema_version 1")])
def test_a_previous_report_that_cannot_be_used_says_why(tmp_path, text, says):
    path = tmp_path / "fleet.json"
    path.write_text(text)
    document, why = _fleet.load_previous(str(path))
    assert document is None and says in why and str(path) in why


def test_report_dir_problems(tmp_path):
    assert _fleet.report_dir_problem(str(tmp_path / "a" / "b")) is None
    assert _fleet.report_dir_problem(str(tmp_path)) is None
    (tmp_path / "f").write_text("")
    assert "exists and is not a directory" in _fleet.report_dir_problem(str(tmp_path / "f"))
    assert "is not a directory" in _fleet.report_dir_problem(str(tmp_path / "f" / "sub"))


# ---- never raises ----------------------------------------------------------------------------------------------

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                           ["reachable", "result", "versions", "group", "findings", "gpus", "status", "slurm",
                            "expected", "severity", "code", "target", "index", "name", "state", "reason",
                            "driver_version", "vbios_versions", "source", "error"]), inner, max_size=5),
                       max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), JSONISH, max_size=4), JSONISH)
def test_any_records_give_a_report_and_a_page_never_an_exception(nodes, previous):
    report = build(nodes, previous=previous if isinstance(previous, dict) else None)
    json.dumps(report)
    _fleet_html.render(report)
    _fleet.rma_csv(report)
    for host, entry in report["nodes"].items():
        record = nodes[host]
        if not isinstance(record, dict) or record.get("reachable") is not True or not isinstance(
                record.get("result"), dict) or not record["result"]:
            assert _fleet.rank(entry["status"]) >= _fleet.rank("unknown"), (record, entry["findings"])


# ---- the page --------------------------------------------------------------------------------------------------

def test_the_page_is_self_contained_and_escapes_what_nodes_say():
    nodes = fr.three_nodes()
    said = '<script>alert("x")</script> & "quotes"'
    nodes["gpu01"]["result"]["findings"] = [fr.finding("GPU-TEMP-HIGH", "warning", "gpu1", said)]
    nodes["gpu01"]["result"]["status"] = "warning"
    page = _fleet_html.render(build(nodes, options={"level": "standard", "started": "2026-12-01T16:59:00Z"}))
    assert '<script>alert("x")' not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp;" in page
    assert page.count("<script>") == 1 and not re.search(r"""\b(src|href)=["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "2026-12-01T16:59:00Z" in page and "standard" in page and "2026-12-01T17:00:00Z" in page
    assert 'id="filter-text"' in page and 'id="filter-hideok"' in page and 'id="drift"' in page


def test_the_page_for_400_nodes_of_8_gpus_is_under_2_mb():
    report = build(fr.fleet(400))
    page = _fleet_html.render(report)
    assert len(page.encode("utf-8")) < 2 * 1024 * 1024
    unreachable = [h for h, e in report["nodes"].items() if not e["reachable"]]
    assert page.count('<tr data-host="') == 400 and page.count('data-gpu="') == 8 * (400 - len(unreachable))
    assert report["summary"]["nodes"] == 400 and report["summary"]["unreachable"] == len(unreachable) == 3
    codes = {f["code"] for f in report["fleet_findings"]}
    assert codes >= {"FLEET-DRIFT-DRIVER", "FLEET-UNREACHABLE", "FLEET-SLURM-DRAINED"}
    assert os.path.basename(_fleet.HTML_FILE) == "fleet.html"


def test_a_planted_link_at_the_old_temporary_name_is_never_written_through(tmp_path):
    """Issue 46: the report was written through a link planted at the predictable <file>.tmp.<pid>."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    report = tmp_path / "reports"
    report.mkdir()
    target = report / "fleet.json"
    os.symlink(str(victim), "%s.tmp.%d" % (target, os.getpid()))
    _fleet.write_atomic(str(target), "{}\n")
    assert victim.read_text() == "keep me\n" and target.read_text() == "{}\n" and not target.is_symlink()
    assert sorted(p.name for p in report.iterdir()) == ["fleet.json", "fleet.json.tmp.%d" % os.getpid()]


def test_a_link_planted_at_the_report_itself_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    target = tmp_path / "fleet.json"
    os.symlink(str(victim), str(target))
    _fleet.write_atomic(str(target), "{}\n")
    assert victim.read_text() == "keep me\n" and not target.is_symlink() and target.read_text() == "{}\n"


def test_a_world_writable_report_directory_without_the_sticky_bit_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    assert "without the sticky bit" in _fleet.report_dir_problem(str(shared))
    assert "without the sticky bit" in _fleet.report_dir_problem(str(shared / "new"))
    os.chmod(str(shared), 0o1777)
    assert _fleet.report_dir_problem(str(shared)) is None
    link = tmp_path / "link"
    os.symlink(str(shared), str(link))
    assert "symbolic link" in _fleet.report_dir_problem(str(link))
