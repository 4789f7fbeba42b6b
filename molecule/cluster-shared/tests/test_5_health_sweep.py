"""playbooks/health_sweep.yml on the cluster: one check per GPU node (the installed checker by one raw call, or the
gpu_health module), the fleet report on the controller, and with health_sweep_drain the drains and resumes through
gpucluster.ops.slurm_node_state, behind its circuit breaker. The faults come from the simulator (tests/gpusim).

slurmd's own health check (test_3_health_drain.py) drains and resumes faulty nodes under the same owner (health)
every few seconds; this module puts a no-op in its place while it runs, so that every drain and resume seen here is
the sweep's, and puts the wrapper back at the end. Debian 12 only: the playbook and Slurm's commands are the same on
both releases, and Debian 12's cluster has the shorter chain of test modules (docs/testing.md); the offline tests,
tests/unit/test_health_sweep_playbook.py, cover the bad input.
"""

import json
import os

import pytest

from conftest import GPUSIM, ROOT, node_records, set_faults

pytestmark = pytest.mark.release("debian12")

SWEEP = os.path.join(ROOT, "playbooks", "health_sweep.yml")
# Rows pending remap on one GPU and one InfiniBand port down: errors at the quick level.
FAULTS = [{"name": "row_remap_pending", "gpu": 3}, {"name": "ib_port_down", "port": "mlx5_2/1"}]
# Two compute nodes: at most one may be out of service.
HALF = {"health_sweep_max_out_of_service": 0.5}


@pytest.fixture(scope="module", autouse=True)
def silenced(wrapper_silenced):
    """slurmd's HealthCheckProgram does nothing while this module runs (conftest.wrapper_silenced)."""
    return wrapper_silenced


@pytest.fixture(scope="module")
def nodes(scenario):
    """(the node that gets the faults, the other one)."""
    faulty = scenario.groups["gpu_a100"][0]
    assert sorted(scenario.groups["gpu_nodes"]) == sorted(scenario.compute) and faulty in scenario.compute
    return faulty, [h for h in scenario.compute if h != faulty][0]


def sweep(scenario, tmp_path, name, extra_vars=None, **kwargs):
    """Run the sweep with its report in tmp_path/reports/<name>; return (rc, output, report dir)."""
    report_dir = tmp_path / "reports" / name
    extra_vars = dict(extra_vars or {}, health_sweep_report_dir=str(report_dir))
    rc, out = scenario.playbook(tmp_path, SWEEP, extra_vars=extra_vars, **kwargs)
    return rc, out, report_dir


def load(report_dir):
    with open(str(report_dir / "fleet.json")) as handle:
        return json.load(handle)


def codes(node, severity=None):
    return sorted({f["code"] for f in node["findings"] if severity in (None, f["severity"])})


def states(ctl, scenario):
    return {n: (r["State"], r["Reason"]) for n, r in node_records(ctl, scenario.compute).items()}


@pytest.fixture(scope="module")
def reports(scenario, nodes, tmp_path_factory):
    """One sweep by the installed checker and one by the module, with the faults on one node and a driver pin on it
    that it does not match; the faults stay for the module's other tests."""
    faulty, _healthy = nodes
    set_faults(scenario, faulty, FAULTS)
    tmp_path = tmp_path_factory.mktemp("sweep")
    pin = {"all": {"hosts": {faulty: {"health_sweep_expected": {"driver_version": "535.104.05"}}}}}
    found = {}
    for method in ("auto", "module"):
        rc, out, report_dir = sweep(scenario, tmp_path, method, {"health_sweep_method": method}, extra_inventory=pin)
        assert rc == 0, out
        found[method] = (out, report_dir)
    return found


def test_the_report_has_the_faulty_nodes_findings_and_the_drift(scenario, reports, nodes):
    faulty, healthy = nodes
    # the driver the node reports (the simulator's own on Debian 13, the installed package's on Debian 12)
    running = scenario.host(faulty).check_output(
        "%s/nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u" % os.path.dirname(GPUSIM)).strip()
    assert running and running != "535.104.05", running
    out, report_dir = reports["auto"]
    for name in ("fleet.json", "fleet.html", "rma.csv"):
        assert (report_dir / name).is_file(), name
    report = load(report_dir)
    assert report["schema_version"] == 1
    assert sorted(report["nodes"]) == sorted(nodes)
    bad, good = report["nodes"][faulty], report["nodes"][healthy]
    assert {"GPU-ROW-REMAP-PENDING", "IB-PORT-DOWN"} <= set(codes(bad, "error")), bad["findings"]
    assert not codes(good, "error"), good["findings"]
    assert bad["source"] == "cli" and good["source"] == "cli"
    assert len(good["gpus"]) == 8 and all(g["serial"] and g["uuid"] for g in good["gpus"]), good["gpus"]
    # the pin wins: the node runs another driver, its inventory pins 535.104.05 (no node runs it)
    drift = [f for f in bad["findings"] if f["code"] == "FLEET-DRIFT-DRIVER"]
    assert drift and running in drift[0]["message"] and "535.104.05" in drift[0]["message"], bad["findings"]
    assert "FLEET-DRIFT-DRIVER" not in codes(good)
    # the page is the one file a person opens: self-contained, with the faulty node in it
    page = (report_dir / "fleet.html").read_text()
    assert faulty in page and "GPU-ROW-REMAP-PENDING" in page and "<script src" not in page
    # the table in the play's output: the node that is not OK, then a count
    assert faulty in out.split("Show the nodes that are not OK")[1].split("TASK")[0], out


def test_the_fast_path_and_the_module_path_give_the_same_report(reports):
    def comparable(report_dir):
        report = load(report_dir)
        for key in ("created_at", "diff", "previous"):
            report.pop(key, None)
        report["options"] = {k: v for k, v in report["options"].items() if k not in ("started", "method")}
        for node in report["nodes"].values():
            assert node.pop("source") in ("cli", "module")
            node.pop("checked_at", None)
        return json.dumps(report, sort_keys=True)
    assert load(reports["module"][1])["nodes"][sorted(load(reports["module"][1])["nodes"])[0]]["source"] == "module"
    assert comparable(reports["auto"][1]) == comparable(reports["module"][1])


def test_check_mode_changes_nothing(scenario, ctl, reports, tmp_path, nodes):
    before = states(ctl, scenario)
    rc, out, report_dir = sweep(scenario, tmp_path, "check", dict(HALF, health_sweep_drain=True,
                                                                  health_sweep_level="standard"), args=["--check"])
    assert rc == 0, out
    # it says what it would drain, and drains nothing
    shown = out.split("what the circuit breaker refused")[1].split("PLAY RECAP")[0]
    assert nodes[0] in shown.split("drained:")[1].split(":")[0], out
    assert states(ctl, scenario) == before
    assert not report_dir.exists()


def test_drain_takes_the_faulty_node_out_with_its_codes_and_resumes_it_healed(scenario, ctl, reports, tmp_path, nodes):
    faulty, healthy = nodes
    rc, out, report_dir = sweep(scenario, tmp_path, "drain", dict(HALF, health_sweep_drain=True))
    assert rc == 0, out
    record = node_records(ctl, [faulty])[faulty]
    assert "DRAIN" in record["State"], (record, out)
    assert record["Reason"].startswith("gpucluster-health: "), record
    bad = load(report_dir)["nodes"][faulty]
    for code in codes(bad, "error"):
        if not code.startswith("FLEET-"):
            assert code in record["Reason"], (code, record["Reason"])
    assert node_records(ctl, [healthy])[healthy]["State"] == "IDLE"

    set_faults(scenario, faulty, [])
    rc, out, _report_dir = sweep(scenario, tmp_path, "healed", dict(HALF, health_sweep_drain=True))
    assert rc == 0, out
    # resumed: no drain flag and no reason (a fresh slurmd may still carry NOT_RESPONDING for a few seconds)
    record = node_records(ctl, [faulty])[faulty]
    assert record["State"].split("+")[0] == "IDLE" and "DRAIN" not in record["State"], (record, out)
    assert not record["Reason"], (record, out)


def test_the_circuit_breaker_refuses_to_drain_past_its_share(scenario, ctl, reports, tmp_path, nodes):
    for host in nodes:
        set_faults(scenario, host, FAULTS)
    rc, out, _report_dir = sweep(scenario, tmp_path, "breaker", dict(HALF, health_sweep_drain=True))
    assert rc == 0, out
    # sinfo: one of the two nodes drained (the first in inventory order), the other refused and still in service
    sinfo = dict(line.split() for line in ctl.check_output("sinfo --noheader --Node --format='%N %t'").splitlines())
    drained = sorted(n for n in nodes if sinfo[n].startswith("drain"))
    assert len(drained) == 1, (sinfo, out)
    refused = [n for n in nodes if n not in drained][0]
    assert sinfo[refused] == "idle", sinfo
    shown = out.split("what the circuit breaker refused")[1].split("PLAY RECAP")[0]
    assert refused in shown.split("refused:")[1], out
