"""The health check drains through Slurm: a fault on a GPU node makes slurmd's HealthCheckProgram (the health_check
role's wrapper) drain that node with the checker's codes as the reason, jobs go elsewhere, and the node comes back
once healthy; a node an operator drained stays drained. The faults come from the simulator (tests/gpusim), as the
real tools would show them. Debian 12 only: the wrapper and scontrol behave the same on both releases, and Debian 12's
cluster has the shorter chain of test modules (docs/testing.md).
"""

import time

import pytest

from conftest import health_report, node_records, set_faults

pytestmark = pytest.mark.release("debian12")

# Rows pending remap on one GPU and one InfiniBand port down: errors at the wrapper's level (quick).
FAULTS = [{"name": "row_remap_pending", "gpu": 3}, {"name": "ib_port_down", "port": "mlx5_2/1"}]
OPERATOR_REASON = "operator: cable swap"


def _interval(scenario):
    return scenario.group_vars["all"]["slurm_health_check_interval"]


def _wait_for(ctl, node, wanted, timeout):
    """Poll the node's Slurm record until wanted(record) holds; return the record (the last one seen on timeout)."""
    deadline = time.monotonic() + timeout
    record = node_records(ctl, [node])[node]
    while not wanted(record) and time.monotonic() < deadline:
        time.sleep(2)
        record = node_records(ctl, [node])[node]
    return record


@pytest.fixture(scope="module")
def nodes(scenario):
    """(the node that gets the faults, the node an operator drains)."""
    faulty = scenario.groups["gpu_a100"][0]
    assert faulty in scenario.compute
    return faulty, [h for h in scenario.compute if h != faulty][0]


def test_a_faulty_node_is_drained_with_the_codes_as_reason(scenario, ctl, nodes):
    faulty, healthy = nodes
    set_faults(scenario, faulty, FAULTS)
    record = _wait_for(ctl, faulty, lambda r: "DRAIN" in r["State"], 3 * _interval(scenario) + 30)
    assert "DRAIN" in record["State"], record
    report = health_report(scenario, faulty)
    assert report["status"] == "error", report
    codes = sorted({f["code"] for f in report["findings"] if f["severity"] == "error"})
    assert codes, report
    assert record["Reason"].startswith("gpucluster-health:"), record
    for code in codes:
        assert code in record["Reason"], (code, record["Reason"])
    # the other node is left alone, and a job goes there
    assert node_records(ctl, [healthy])[healthy]["State"] == "IDLE"
    out = ctl.check_output("srun --gres=gpu:1 --time=1 hostname")
    assert out.strip() == healthy, out


def test_the_node_is_resumed_once_healthy(scenario, ctl, nodes):
    faulty, _healthy = nodes
    assert "DRAIN" in node_records(ctl, [faulty])[faulty]["State"]
    set_faults(scenario, faulty, [])
    record = _wait_for(ctl, faulty, lambda r: r["State"] == "IDLE", 3 * _interval(scenario) + 30)
    assert record["State"] == "IDLE" and not record["Reason"], record
    report = health_report(scenario, faulty)
    assert report["status"] == "ok", report


def test_a_node_an_operator_drained_stays_drained(scenario, ctl, nodes):
    _faulty, healthy = nodes
    ctl.check_output("scontrol update nodename=%s state=drain reason='%s'" % (healthy, OPERATOR_REASON))
    # two runs of the health check on a healthy node: it must not resume a drain it did not make
    before = scenario.host(healthy).check_output("stat -c %Y /var/lib/gpucluster-health/slurm-last.json")
    deadline = time.monotonic() + 3 * _interval(scenario) + 30
    runs = 0
    while runs < 2 and time.monotonic() < deadline:
        time.sleep(2)
        now = scenario.host(healthy).check_output("stat -c %Y /var/lib/gpucluster-health/slurm-last.json")
        if now != before:
            runs, before = runs + 1, now
    assert runs == 2, "slurmd did not run the health check twice within %d s" % (3 * _interval(scenario) + 30)
    record = node_records(ctl, [healthy])[healthy]
    assert "DRAIN" in record["State"] and record["Reason"].startswith(OPERATOR_REASON), record
