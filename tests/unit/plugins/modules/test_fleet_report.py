"""fleet_report main(): the files it writes, what it returns, the previous report, check mode and a bad report_dir."""

import csv
import json
import os

import fleet_records as fr
import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health
from ansible_collections.gpucluster.ops.plugins.modules import fleet_report
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

CREATED = "2026-12-01T17:00:00Z"


def report(tmp_path, nodes, name="20261201T170000Z", check=False, **extra):
    args = dict({"nodes": nodes, "report_dir": str(tmp_path / "reports" / name), "created_at": CREATED,
                 "options": {"level": "quick", "drain": False}}, **extra)
    return run_module(fleet_report, args, check=check)


def test_writes_json_html_and_csv_and_returns_the_summary(tmp_path):
    result = report(tmp_path, fr.three_nodes())
    assert result["failed"] is False and result["changed"] is True
    where = str(tmp_path / "reports" / "20261201T170000Z")
    assert result["report_dir"] == where
    assert result["files"] == {"json": where + "/fleet.json", "html": where + "/fleet.html",
                               "rma_csv": where + "/rma.csv"}
    assert result["summary"] == {"nodes": 3, "ok": 2, "drained": 0, "warning": 0, "error": 1, "unknown": 0,
                                 "unreachable": 0}
    assert result["service"] == {"in_service": 2, "out_of_service": 1, "no_slurm_state": 0}
    assert result["table"] == ["gpu02 ERROR GPU-ROW-REMAP-FAILURE FLEET-SLURM-DRAINED", "2 nodes OK, 2 of 3 in service"]
    assert [(r["node"], r["gpu_index"], r["code"]) for r in result["rma"]] == [("gpu02", 3, "GPU-ROW-REMAP-FAILURE")]
    assert result["rma"][0]["serial"] == fr.gpus("gpu02")[3]["serial"]
    assert [(f["code"], f["severity"], f["target"]) for f in result["fleet_findings"]] == [
        ("FLEET-SLURM-DRAINED", "info", "gpu02")]
    assert result["diff"]["compared"] is False
    assert result["diff"]["counts"] == {"new": 2, "cleared": 0, "persisting": 0}
    with open(result["files"]["json"]) as handle:
        document = json.load(handle)
    assert document["schema_version"] == 1 and document["created_at"] == CREATED
    assert document["options"] == {"level": "quick", "drain": False}
    assert sorted(document["nodes"]) == ["gpu01", "gpu02", "gpu03"]
    assert [g["serial"] for g in document["nodes"]["gpu02"]["gpus"]] == [g["serial"] for g in fr.gpus("gpu02")]
    assert document["nodes"]["gpu02"]["gpus"][3]["status"] == "error"
    assert document["rma"] == result["rma"] and document["diff"] == result["diff"]
    with open(result["files"]["rma_csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["node"], r["gpu_index"], r["serial"], r["uuid"], r["code"]) for r in rows] == [
        ("gpu02", "3", fr.gpus("gpu02")[3]["serial"], fr.gpus("gpu02")[3]["uuid"], "GPU-ROW-REMAP-FAILURE")]
    assert "row remapping failure" in rows[0]["evidence"]
    with open(result["files"]["html"]) as handle:
        page = handle.read()
    assert page.startswith("<!DOCTYPE html>") and 'data-host="gpu02" data-status="error"' in page


def test_a_drained_node_is_not_ok_and_an_erroring_node_in_service_is_a_finding(tmp_path):
    """Issue 44: 2 nodes, 1 drained by the health checks and healthy now, the other in service with an error."""
    nodes = {"gpu01": fr.record("gpu01", [fr.REMAP_FAILURE]),
             "gpu02": fr.record("gpu02", slurm_state="IDLE+DRAIN", slurm_reason="gpucluster-health: GPU-XID-ERROR")}
    result = report(tmp_path, nodes, options={"level": "quick", "drain": True})
    assert result["summary"] == {"nodes": 2, "ok": 0, "drained": 1, "warning": 0, "error": 1, "unknown": 0,
                                 "unreachable": 0}
    assert result["service"] == {"in_service": 1, "out_of_service": 1, "no_slurm_state": 0}
    assert result["table"] == ["gpu01 ERROR FLEET-ERROR-IN-SERVICE GPU-ROW-REMAP-FAILURE",
                               "gpu02 DRAINED FLEET-SLURM-DRAINED", "0 nodes OK, 1 of 2 in service"]
    serving = [f for f in result["fleet_findings"] if f["code"] == "FLEET-ERROR-IN-SERVICE"]
    assert [(f["target"], f["severity"]) for f in serving] == [("gpu01", "error")]
    assert serving[0]["action"].startswith("this sweep drains it next (health_sweep_drain)")
    with open(result["files"]["json"]) as handle:
        document = json.load(handle)
    assert document["nodes"]["gpu02"]["status"] == "drained" and document["nodes"]["gpu02"]["in_service"] is False
    assert document["summary"] == result["summary"] and document["service"] == result["service"]
    with open(result["files"]["html"]) as handle:
        page = handle.read()
    assert 'data-host="gpu02" data-status="drained" data-in-service="0"' in page
    assert "in service 1 of 2" in page


def test_the_newest_sibling_report_is_the_previous_one(tmp_path):
    report(tmp_path, fr.three_nodes(), name="20261130T170000Z")
    older = fr.three_nodes()
    older["gpu01"] = fr.record("gpu01", [fr.finding("GPU-TEMP-HIGH", "warning", "gpu1", "GPU 1 is hot")])
    report(tmp_path, older, name="20261201T050000Z")
    nodes = fr.three_nodes()
    nodes["gpu03"] = fr.unreachable()
    result = report(tmp_path, nodes)
    diff = result["diff"]
    assert diff["previous"] == str(tmp_path / "reports" / "20261201T050000Z" / "fleet.json") and diff["compared"]
    assert diff["counts"] == {"new": 1, "cleared": 1, "persisting": 2}
    assert [(f["node"], f["code"]) for f in diff["new"]] == [("gpu03", "FLEET-UNREACHABLE")]
    assert [(f["node"], f["code"], f["target"]) for f in diff["cleared"]] == [("gpu01", "GPU-TEMP-HIGH", "gpu1")]
    assert sorted((f["node"], f["code"]) for f in diff["persisting"]) == [
        ("gpu02", "FLEET-SLURM-DRAINED"), ("gpu02", "GPU-ROW-REMAP-FAILURE")]
    assert result["summary"]["unknown"] == 1 and result["summary"]["unreachable"] == 1
    assert result["table"] == ["gpu02 ERROR GPU-ROW-REMAP-FAILURE FLEET-SLURM-DRAINED",
                               "gpu03 UNKNOWN FLEET-UNREACHABLE",
                               "1 node OK, 1 of 3 in service, 1 with no Slurm state"]


def test_previous_option_names_the_report_and_a_bad_one_is_a_note(tmp_path):
    first = report(tmp_path, fr.three_nodes(), name="a")
    result = report(tmp_path / "elsewhere", fr.three_nodes(), previous=first["files"]["json"])
    assert result["diff"]["previous"] == first["files"]["json"] and result["diff"]["counts"]["persisting"] == 2
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    result = report(tmp_path / "other", fr.three_nodes(), previous=str(junk))
    assert result["failed"] is False and result["diff"]["compared"] is False
    assert any("could not be read" in note for note in result["notes"])


def test_check_mode_writes_nothing(tmp_path):
    result = report(tmp_path, fr.three_nodes(), check=True)
    assert result["failed"] is False and result["summary"]["error"] == 1
    assert not os.path.exists(tmp_path / "reports") and "check mode: nothing written" in result["notes"]
    assert result["files"]["json"].endswith("/fleet.json")


@pytest.mark.parametrize("make", ["file", "readonly"])
def test_a_report_dir_that_cannot_be_written_is_refused_before_writing(tmp_path, monkeypatch, make):
    where = tmp_path / "reports"
    if make == "file":
        where.write_text("")
        why = "exists and is not a directory"
    else:
        where.mkdir()
        real = os.access
        # root may write anywhere: the directory is unwritable by what os.access answers for it
        monkeypatch.setattr(os, "access", lambda path, mode: False if path == str(where) else real(path, mode))
        why = "is a directory this user cannot write to"
    result = run_module(fleet_report, {"nodes": fr.three_nodes(), "report_dir": str(where)})
    assert result["failed"] and result["msg"].startswith("fleet_report: report_dir: ") and why in result["msg"]
    assert str(where) in result["msg"]
    assert not os.path.isdir(str(where)) or os.listdir(str(where)) == []


def test_a_report_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    result = run_module(fleet_report, {"nodes": {}, "report_dir": str(tmp_path / "file" / "sub")})
    assert result["failed"] and "is not a directory" in result["msg"]


def test_odd_records_never_fail_the_module(tmp_path):
    nodes = {"a": None, "b": "text", "c": {"reachable": True}, "d": {"reachable": True, "result": {"status": "bad"}},
             "e": {"reachable": True, "versions": [], "result": {"findings": "x", "gpus": {}}}}
    result = report(tmp_path, nodes)
    assert result["failed"] is False and result["summary"]["unknown"] == 5
    assert {f["target"] for f in result["fleet_findings"] if f["code"] == "FLEET-RECORD-INCOMPLETE"} == set(nodes)


def test_a_record_from_the_checker_on_a_simulated_node(tmp_path):
    """The record's result is what the checker returns for a simulated 8x H100 node with a row remap failure."""
    bundle = str(tmp_path / "bundle")
    profile = os.path.join(os.path.dirname(gpusim.__file__), "profiles", "h100-sxm-8.json")
    argv = ["gpusim", "bundle", bundle, "--profile", profile, "--fault", "row_remap_failure:gpu=5"]
    assert gpusim.main(argv, env={"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu02"})[0] == 0
    result, _runner = _health.run(_health.load_config(None, {"node": "gpu02"}), from_dir=bundle, use_state=False)
    nodes = fr.three_nodes()
    nodes["gpu02"]["result"] = result
    out = report(tmp_path, nodes)
    rma = [r for r in out["rma"] if r["code"] == "GPU-ROW-REMAP-FAILURE"]
    assert [(r["node"], r["gpu_index"]) for r in rma] == [("gpu02", 5)]
    assert rma[0]["serial"] == result["gpus"][5]["serial"] and rma[0]["serial"]
    assert out["table"][0].startswith("gpu02 ERROR ") and "GPU-ROW-REMAP-FAILURE" in out["table"][0]
