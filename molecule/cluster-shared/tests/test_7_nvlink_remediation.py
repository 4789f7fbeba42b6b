"""playbooks/nvlink_remediation.yml on the cluster (docs/nvlink-remediation.md): the degraded node drained, its GPU
services stopped in order and started in reverse, checked again, resumed when the links came back; a node whose
links stay down left drained with the next action (reboot, then RMA with the GPU's serial); a node whose fabric
manager differs from the driver left drained with that reason and no restart; the other nodes' services untouched.

The faults and the services come from the simulator (tests/gpusim): NVLink degradation that a fabric manager restart
clears or not, a fabric manager of another version, and the simulated nvidia-fabricmanager, nvidia-persistenced and
nvidia-dcgm units, which log every start and stop to /var/log/gpusim/services.log. dcgm-exporter is the collection's
own service. Debian 13 only: the playbook is the same on both releases; tests/unit/test_maintenance_playbooks.py
covers the bad input.
"""

import os
import time

import pytest

from conftest import ROOT, SERVICES_LOG, node_records, set_faults

pytestmark = pytest.mark.release("debian13")

PLAYBOOK = os.path.join(ROOT, "playbooks", "nvlink_remediation.yml")
# Stopped in this order, started in the reverse one.
ORDER = ["dcgm-exporter", "nvidia-dcgm", "nvidia-persistenced", "nvidia-fabricmanager"]
UNITS = ORDER[1:]


@pytest.fixture(scope="module", autouse=True)
def silenced(wrapper_silenced):
    """slurmd's HealthCheckProgram does nothing while this module runs: it would drain the degraded node first."""
    return wrapper_silenced


@pytest.fixture(scope="module")
def nodes(scenario):
    """(the A100 node, the H100 node)."""
    return scenario.groups["gpu_a100"][0], scenario.groups["gpu_h100"][0]


def states(ctl, scenario):
    return {n: (r["State"], r["Reason"]) for n, r in node_records(ctl, scenario.compute).items()}


def _flat(out):
    """The output as one line, the YAML callback's folding and quote doubling undone."""
    return " ".join(out.replace("''", "'").split())


def log_lines(scenario, host):
    return scenario.host(host).check_output("cat %s" % SERVICES_LOG).splitlines()


def events_since(scenario, host, before):
    """(event, unit) of each services.log line written after the first ``before`` lines."""
    return [tuple(line.split()[1:3]) for line in log_lines(scenario, host)[len(before):]]


def exporter_restarts(scenario, host):
    return scenario.host(host).check_output("systemctl show -p InvocationID --value dcgm-exporter").strip()


def run(scenario, tmp_path, name, extra_vars=None, args=()):
    report_dir = tmp_path / "reports" / name
    rc, out = scenario.playbook(tmp_path, PLAYBOOK, extra_vars=dict(extra_vars or {},
                                                                    health_sweep_report_dir=str(report_dir)), args=args)
    return rc, out, report_dir


def back_to_normal(scenario, ctl, hosts):
    """No faults, the units running, the nodes resumed and answering (a resumed node may show NOT_RESPONDING for a
    few seconds)."""
    for host in hosts:
        set_faults(scenario, host, [])
        scenario.host(host).check_output("systemctl start %s" % " ".join(UNITS))
        ctl.check_output("scontrol update nodename=%s state=resume || true" % host)
    deadline = time.monotonic() + 60
    while any(s != ("IDLE", "") for s in states(ctl, scenario).values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert all(s == ("IDLE", "") for s in states(ctl, scenario).values()), states(ctl, scenario)


def test_a_recoverable_node_is_restarted_in_order_and_resumed_the_others_untouched(scenario, ctl, nodes, tmp_path):
    a100, h100 = nodes
    set_faults(scenario, a100, [{"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"}])
    # The node-local health check drained the node for this fault first (its wrapper is silenced here, so the test
    # writes its drain): the runbook takes the drain over (issue 44: it called the node not_ours and did nothing).
    ctl.check_output("scontrol update nodename=%s state=drain reason='gpucluster-health: GPU-NVLINK-INACTIVE gpu1'"
                     % a100)
    before = {h: log_lines(scenario, h) for h in nodes}
    exporter = exporter_restarts(scenario, h100)
    options = {"nvlink_remediation_max_nodes": 1, "nvlink_remediation_reset_gpus": True}
    rc, out, _report = run(scenario, tmp_path, "recoverable", options)
    assert rc == 0, out
    # stopped in order (dcgm-exporter is the collection's service: its stop shows in systemd, not in the log), the
    # GPUs reset once nothing holds them, started in reverse, on the degraded node only
    assert events_since(scenario, a100, before[a100]) == (
        [("stop", u) for u in UNITS] + [("reset", "gpu%d" % i) for i in range(8)]
        + [("start", u) for u in reversed(UNITS)]), log_lines(scenario, a100)
    assert "Stop the services that hold the GPUs" in out and "dcgm-exporter" in out.split(
        "Stop the services that hold the GPUs")[1].split("TASK")[0], out
    assert events_since(scenario, h100, before[h100]) == [], log_lines(scenario, h100)
    assert exporter_restarts(scenario, h100) == exporter
    after = states(ctl, scenario)
    assert after[a100] == ("IDLE", ""), after
    assert after[h100] == ("IDLE", ""), after
    assert "%s: recovered: resumed: the links came back" % a100 in out, out


def test_a_persistent_fault_and_a_version_mismatch_stay_drained_with_the_next_action(scenario, ctl, nodes, tmp_path):
    a100, h100 = nodes
    back_to_normal(scenario, ctl, nodes)
    set_faults(scenario, a100, [{"name": "nvlink_degraded", "gpu": 1, "value": "persistent"}])
    set_faults(scenario, h100, [{"name": "fabricmanager_version", "value": "550.54.15"}])
    before = {h: log_lines(scenario, h) for h in nodes}
    # both nodes out at once: the operator raises the circuit breaker's share for this run
    rc, out, report_dir = run(scenario, tmp_path, "persistent", {"nvlink_remediation_max_nodes": 2,
                                                                 "nvlink_remediation_max_out_of_service": 1.0})
    assert rc == 0, out
    after = node_records(ctl, list(nodes))
    # the links stayed down after the restart: drained, the next action naming the GPU's serial
    assert "DRAIN" in after[a100]["State"], after
    assert after[a100]["Reason"].startswith("gpucluster-nvlink: the faults stayed after the restart"), after
    assert "reboot the node" in after[a100]["Reason"] and "RMA GPU 1 serial " in after[a100]["Reason"], after
    assert events_since(scenario, a100, before[a100]) == (
        [("stop", u) for u in UNITS] + [("start", u) for u in reversed(UNITS)])
    # the fabric manager of another version: drained with the version to install, nothing restarted
    assert "DRAIN" in after[h100]["State"], after
    assert after[h100]["Reason"].startswith(
        "gpucluster-nvlink: install the fabric manager matching driver 550.127.05"), after
    assert events_since(scenario, h100, before[h100]) == [], log_lines(scenario, h100)
    assert (report_dir / "fleet.json").is_file()


def test_resume_brings_back_the_nodes_remediation_left_drained_once_their_faults_are_cleared(
        scenario, ctl, nodes, tmp_path):
    """Issue 44: a node NVLink remediation left drained could never be resumed by a playbook. After the repair (the
    faults cleared), playbooks/resume.yml checks the nodes again and resumes both, each by its owner's marker."""
    a100, h100 = nodes
    after = node_records(ctl, list(nodes))
    assert all(after[h]["Reason"].startswith("gpucluster-nvlink:") for h in nodes), after
    for host in nodes:
        set_faults(scenario, host, [])
    rc, out = scenario.playbook(tmp_path, os.path.join(ROOT, "playbooks", "resume.yml"),
                                extra_vars={"health_sweep_report_dir": str(tmp_path / "reports" / "resume")})
    assert rc == 0, out[-4000:]
    for host in nodes:
        assert "%s: resumed (drained by nvlink, its check passes now)" % host in out, out[-4000:]
    deadline = time.monotonic() + 60
    while any("DRAIN" in r["State"] for r in node_records(ctl, list(nodes)).values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert all("DRAIN" not in r["State"] for r in node_records(ctl, list(nodes)).values()), node_records(ctl, list(nodes))


def test_the_circuit_breaker_holds_for_a_remediation(scenario, ctl, nodes, tmp_path):
    """Issue 44: a remediation once drained the last node in service. With the default share (0.1 of 2 nodes allows
    one out), the first node is remediated and the second is refused, naming the count and the variable."""
    a100, h100 = nodes
    back_to_normal(scenario, ctl, nodes)
    for host in nodes:
        set_faults(scenario, host, [{"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"}])
    before = {h: log_lines(scenario, h) for h in nodes}
    rc, out, _report_dir = run(scenario, tmp_path, "breaker", {"nvlink_remediation_max_nodes": 2})
    flat = _flat(out)
    assert "circuit breaker: 1 of the cluster's" in flat and "nvlink_remediation_max_out_of_service=0.1" in flat, out
    after = states(ctl, scenario)
    assert after[h100] == ("IDLE", ""), after
    assert events_since(scenario, h100, before[h100]) == [], log_lines(scenario, h100)
    assert after[a100] == ("IDLE", "") and "%s: recovered" % a100 in out, (after, out)
    back_to_normal(scenario, ctl, nodes)


def test_a_run_that_remediates_nothing_it_found_fails_saying_why(scenario, ctl, nodes, tmp_path):
    """Issue 44: a run whose every candidate was out of service for someone else exited 0. An administrator's drain
    is never taken over: the run fails, naming the outcome and the node, and the drain stays as it was."""
    a100, h100 = nodes
    back_to_normal(scenario, ctl, nodes)
    set_faults(scenario, a100, [{"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"}])
    ctl.check_output("scontrol update nodename=%s state=drain reason='disk replacement by admin'" % a100)
    rc, out, _report_dir = run(scenario, tmp_path, "nothing")
    flat = _flat(out)
    assert rc != 0 and "NVLink remediation remediated none of the 1 node(s)" in flat, out[-4000:]
    assert "1 not_ours (%s)" % a100 in flat, out[-4000:]
    # Slurm appends who and when ("[root@2026-12-06T04:23:44]")
    assert node_records(ctl, [a100])[a100]["Reason"].startswith("disk replacement by admin"), node_records(ctl, [a100])
    back_to_normal(scenario, ctl, nodes)


def test_check_mode_changes_nothing(scenario, ctl, nodes, tmp_path):
    a100, h100 = nodes
    back_to_normal(scenario, ctl, nodes)
    set_faults(scenario, a100, [{"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"}])
    before = {h: log_lines(scenario, h) for h in nodes}
    slurm = states(ctl, scenario)
    rc, out, report_dir = run(scenario, tmp_path, "check", args=["--check"])
    assert rc == 0, out
    assert states(ctl, scenario) == slurm
    assert all(events_since(scenario, h, before[h]) == [] for h in nodes)
    assert not report_dir.exists()
    assert "%s: check_mode" % a100 in out, out
    # what would happen, never a story of what did (issue 44)
    assert "would drain it (owner nvlink) and wait up to 2h" in _flat(out) and "it was resumed" not in _flat(out), out
