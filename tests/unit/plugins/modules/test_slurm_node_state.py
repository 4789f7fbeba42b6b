"""slurm_node_state against a fake scontrol/squeue (patched run_command): drain, resume, the owner's marker, the
circuit breaker, waiting for jobs, check and diff mode, and bad input failing before any change."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_nodes
from ansible_collections.gpucluster.ops.plugins.modules import slurm_node_state
from ansible_collections.gpucluster.ops.tests.unit.plugins.fake_slurm import FakeSlurm
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

HEALTH = "gpucluster-health: GPU-XID-79 gpu3"


def cluster(count=10, **states):
    """``count`` idle nodes gpu01.. with the (state, reason) of the ones named in ``states``."""
    nodes = []
    for index in range(1, count + 1):
        name = "gpu%02d" % index
        state, reason = states.get(name, ("IDLE", ""))
        nodes.append((name, state, reason))
    return FakeSlurm(nodes)


@pytest.fixture(autouse=True)
def no_real_clock(monkeypatch):
    """No test sleeps for real: the fake's clock stands in (each test patches it to its fake with ``clocked``)."""
    monkeypatch.setattr(_slurm_nodes, "_sleep", lambda seconds: pytest.fail("slept %s s for real" % seconds))


def clocked(monkeypatch, fake):
    monkeypatch.setattr(_slurm_nodes, "_now", fake.now)
    monkeypatch.setattr(_slurm_nodes, "_sleep", fake.sleep)
    return fake


def run(fake, check=False, **args):
    return run_module(slurm_node_state, args, check=check, run_command=fake)


# ---- drain -------------------------------------------------------------------------------------------------------

def test_drain_writes_the_owner_marker_and_the_reason():
    fake = cluster()
    result = run(fake, nodes=["gpu03"], state="drain", reason="GPU-XID-79 gpu3")
    assert result["changed"] and result["drained"] == ["gpu03"]
    assert fake.updates() == [["update", "nodename=gpu03", "state=drain", "reason=" + HEALTH]]
    assert result["nodes"] == {"gpu03": {"state": "IDLE+DRAIN", "reason": HEALTH}}
    assert result["out_of_service"] == {"before": 0, "after": 1, "total": 10, "limit": 1}
    assert (result["updated"], result["resumed"], result["refused"], result["not_ours"], result["busy"]) == \
        ([], [], [], [], [])


def test_drain_again_with_the_same_reason_changes_nothing():
    fake = cluster(gpu03=("IDLE+DRAIN", HEALTH))
    result = run(fake, nodes=["gpu03"], state="drain", reason="GPU-XID-79 gpu3")
    assert not result["changed"] and result["unchanged"] == ["gpu03"] and fake.updates() == []
    assert result["diff"] == {"before": "", "after": ""}


def test_drained_by_us_with_another_reason_gets_the_reason_updated():
    fake = cluster(gpu03=("MIXED+DRAIN", HEALTH))
    result = run(fake, nodes=["gpu03"], state="drain", reason="IB-PORT-DOWN mlx5_0/1")
    assert result["changed"] and result["updated"] == ["gpu03"] and result["drained"] == []
    assert fake.nodes["gpu03"] == {"state": "MIXED+DRAIN", "reason": "gpucluster-health: IB-PORT-DOWN mlx5_0/1"}
    assert result["diff"] == {
        "before": "gpu03 state=MIXED+DRAIN reason=%s\n" % HEALTH,
        "after": "gpu03 state=MIXED+DRAIN reason=gpucluster-health: IB-PORT-DOWN mlx5_0/1\n"}


def test_a_node_out_of_service_for_someone_else_is_never_touched():
    fake = cluster(gpu02=("DOWN+DRAIN", "disk replacement by admin"), gpu03=("IDLE+DRAIN", "gpucluster-maint: rack"),
                   gpu04=("DOWN+NOT_RESPONDING", "Not responding"), gpu05=("MIXED+FAIL", "flaky PSU"))
    for state in ("drain", "resume"):
        result = run(fake, nodes=["gpu02", "gpu03", "gpu04", "gpu05"], state=state, reason="X", max_out_of_service=1)
        assert not result["changed"] and fake.updates() == []
        assert result["not_ours"] == [
            {"node": "gpu02", "state": "DOWN+DRAIN", "reason": "disk replacement by admin"},
            {"node": "gpu03", "state": "IDLE+DRAIN", "reason": "gpucluster-maint: rack"},
            {"node": "gpu04", "state": "DOWN+NOT_RESPONDING", "reason": "Not responding"},
            {"node": "gpu05", "state": "MIXED+FAIL", "reason": "flaky PSU"}]


def test_nvlink_takes_over_the_health_checks_drain_and_never_an_administrators():
    """The node-local health check drained gpu03 for its NVLink fault before the runbook ran: with take_over the
    runbook's owner takes the drain (issue 44: before, the node was not_ours and the runbook exited 0 doing
    nothing); an administrator's drain and another owner's stay not_ours, and the breaker counts nothing more."""
    fake = cluster(4, gpu02=("IDLE+DRAIN", "disk replacement by admin"), gpu03=("IDLE+DRAIN", HEALTH),
                   gpu04=("IDLE+DRAIN", "gpucluster-upgrade: to 550"))
    result = run(fake, nodes=["gpu02", "gpu03", "gpu04"], state="drain", owner="nvlink", reason="NVLink remediation",
                 take_over=["health"], max_out_of_service=0.25)
    assert result["changed"] and result["taken_over"] == ["gpu03"] and result["updated"] == ["gpu03"]
    assert fake.nodes["gpu03"] == {"state": "IDLE+DRAIN", "reason": "gpucluster-nvlink: NVLink remediation"}
    assert [n["node"] for n in result["not_ours"]] == ["gpu02", "gpu04"] and result["refused"] == []
    assert fake.updates() == [["update", "nodename=gpu03", "state=drain",
                               "reason=gpucluster-nvlink: NVLink remediation"]]
    # and once it is the runbook's, the runbook's resume brings it back
    back = run(fake, nodes=["gpu03"], state="resume", owner="nvlink")
    assert back["resumed"] == ["gpu03"] and fake.nodes["gpu03"] == {"state": "IDLE", "reason": ""}


def test_without_take_over_the_health_checks_drain_is_not_ours():
    fake = cluster(4, gpu03=("IDLE+DRAIN", HEALTH))
    result = run(fake, nodes=["gpu03"], state="drain", owner="nvlink", reason="NVLink remediation")
    assert not result["changed"] and result["taken_over"] == [] and [n["node"] for n in result["not_ours"]] == ["gpu03"]


# ---- resume ------------------------------------------------------------------------------------------------------

def test_resume_touches_only_the_same_owners_drains():
    fake = cluster(gpu01=("IDLE+DRAIN", HEALTH), gpu02=("IDLE+DRAIN", "gpucluster-maint: rack 3"),
                   gpu03=("IDLE+DRAIN", "gpucluster-healthy: not the health owner"))
    result = run(fake, nodes=["gpu[01-04]"], state="resume")
    assert result["resumed"] == ["gpu01"] and result["unchanged"] == ["gpu04"]
    assert [n["node"] for n in result["not_ours"]] == ["gpu02", "gpu03"]
    assert fake.updates() == [["update", "nodename=gpu01", "state=resume"]]
    assert result["nodes"]["gpu01"] == {"state": "IDLE", "reason": ""}
    maint = run(fake, nodes=["gpu02"], state="resume", owner="maint")
    assert maint["resumed"] == ["gpu02"] and fake.nodes["gpu02"] == {"state": "IDLE", "reason": ""}


# ---- the circuit breaker -----------------------------------------------------------------------------------------

def test_the_breaker_counts_every_node_out_of_service_and_drains_in_the_order_given():
    # 20 nodes, 25 %: 5 may be out; 2 already are (an administrator's, and Slurm's), so 3 more, in the order given
    fake = cluster(20, gpu01=("DOWN+DRAIN", "disk replacement"), gpu02=("DOWN", "Not responding"))
    result = run(fake, nodes=["gpu09", "gpu05", "gpu07", "gpu06", "gpu08"], state="drain", reason="X",
                 max_out_of_service=0.25)
    assert result["drained"] == ["gpu09", "gpu05", "gpu07"]
    assert [r["node"] for r in result["refused"]] == ["gpu06", "gpu08"]
    assert "circuit breaker" in result["refused"][0]["why"] and "5 of the cluster's 20" in result["refused"][0]["why"]
    assert result["out_of_service"] == {"before": 2, "after": 5, "total": 20, "limit": 5}
    assert not result["failed"]
    assert [u[1] for u in fake.updates()] == ["nodename=gpu09", "nodename=gpu05", "nodename=gpu07"]


def test_fail_on_refusal_fails_after_making_the_drains_it_may():
    fake = cluster(10)
    result = run(fake, nodes=["gpu01", "gpu02"], state="drain", reason="X", fail_on_refusal=True)
    assert result["failed"] and "circuit breaker refused to drain gpu02" in result["msg"]
    assert result["drained"] == ["gpu01"] and fake.nodes["gpu01"]["state"] == "IDLE+DRAIN"


def test_a_hostlist_is_expanded_and_names_given_twice_count_once():
    fake = cluster(10)
    result = run(fake, nodes=["gpu[01-02]", "gpu02", " gpu03 "], state="drain", reason="X", max_out_of_service=0.5)
    assert result["drained"] == ["gpu01", "gpu02", "gpu03"] and len(fake.updates()) == 3
    assert sorted(result["nodes"]) == ["gpu01", "gpu02", "gpu03"]


def test_a_long_reason_is_cut_and_still_reads_back_as_ours():
    fake = cluster()
    first = run(fake, nodes=["gpu01"], state="drain", reason="GPU-XID-79 gpu3, " * 20)
    assert first["drained"] == ["gpu01"] and len(fake.nodes["gpu01"]["reason"]) == 200
    again = run(fake, nodes=["gpu01"], state="drain", reason="GPU-XID-79 gpu3, " * 20)
    assert not again["changed"] and again["unchanged"] == ["gpu01"]


def test_resume_ignores_the_reason_and_predicts_in_check_mode():
    fake = cluster(gpu01=("DOWN+DRAIN+NOT_RESPONDING", HEALTH))
    result = run(fake, check=True, nodes=["gpu01"], state="resume", reason="whatever")
    assert result["changed"] and result["resumed"] == ["gpu01"] and fake.updates() == []
    assert result["nodes"]["gpu01"] == {"state": "DOWN+NOT_RESPONDING", "reason": ""}
    assert result["out_of_service"] == {"before": 1, "after": 1, "total": 10, "limit": 1}
    assert result["diff"]["after"] == "gpu01 state=DOWN+NOT_RESPONDING reason=\n"


# ---- waiting for jobs --------------------------------------------------------------------------------------------

def test_wait_polls_squeue_until_the_drained_nodes_run_no_job(monkeypatch):
    fake = clocked(monkeypatch, cluster(10, gpu02=("MIXED+DRAIN", HEALTH)))
    fake.jobs = {"gpu[01-02]": 25, "gpu[05-06]": 1000}
    result = run(fake, nodes=["gpu01", "gpu02"], state="drain", reason="GPU-XID-79 gpu3", wait=True,
                 poll_interval=10, max_out_of_service=0.5)
    assert result["drained"] == ["gpu01"] and result["unchanged"] == ["gpu02"] and result["busy"] == []
    polls = [argv for argv in fake.calls if argv[0].endswith("squeue")]
    assert polls[0] == ["/usr/bin/squeue", "-h", "-w", "gpu[01-02]", "-t", "RUNNING,COMPLETING", "-o", "%N"]
    assert len(polls) == 4 and fake.clock == 30


def test_busy_nodes_at_the_deadline_are_reported_never_killed(monkeypatch):
    fake = clocked(monkeypatch, cluster(10))
    fake.jobs = {"gpu01": 10 ** 6}
    result = run(fake, nodes=["gpu01"], state="drain", reason="X", wait=True, wait_timeout=60, poll_interval=7)
    assert not result["failed"] and result["busy"] == ["gpu01"] and fake.clock == 60
    assert not any("scancel" in argv[0] or "cancel" in argv for argv in fake.calls)


def test_a_failing_squeue_reports_every_waited_node_busy_with_a_warning(monkeypatch):
    fake = clocked(monkeypatch, cluster(10))
    fake.fail[("/usr/bin/squeue",)] = (1, "", "squeue: error: Unable to contact slurm controller\n")
    result = run(fake, nodes=["gpu01"], state="drain", reason="X", wait=True, wait_timeout=20, poll_interval=10)
    assert not result["failed"] and result["busy"] == ["gpu01"]
    assert "Unable to contact slurm controller" in result["warnings"][0]


def test_check_mode_with_wait_polls_once_and_sleeps_never():
    fake = cluster(10)
    fake.jobs = {"gpu01": 10 ** 6}
    result = run(fake, check=True, nodes=["gpu01"], state="drain", reason="X", wait=True)
    assert result["busy"] == ["gpu01"] and fake.updates() == []
    assert len([argv for argv in fake.calls if argv[0].endswith("squeue")]) == 1


def test_wait_needs_squeue_and_nothing_changes_without_it():
    fake = cluster(10)
    result = run_module(slurm_node_state, dict(nodes=["gpu01"], state="drain", reason="X", wait=True),
                        run_command=fake, missing=("squeue",))
    assert result["failed"] and "squeue" in result["msg"] and fake.calls == []


# ---- what Slurm does not take ------------------------------------------------------------------------------------

def test_a_failing_scontrol_update_fails_naming_the_node_after_trying_the_others():
    fake = cluster(10)
    fake.fail[("/usr/bin/scontrol", "update", "nodename=gpu01")] = (1, "", "slurm_update error: Access denied\n")
    result = run(fake, nodes=["gpu01", "gpu02"], state="drain", reason="X", max_out_of_service=0.5)
    assert result["failed"] and "drain gpu01: scontrol exited 1: slurm_update error: Access denied" in result["msg"]
    assert fake.nodes["gpu02"]["state"] == "IDLE+DRAIN" and result["nodes"]["gpu01"]["state"] == "IDLE"
    assert "gpu01 shows state IDLE" in result["msg"]


def test_an_update_slurm_did_not_take_is_caught_by_the_read_back():
    fake = cluster(10, gpu02=("IDLE+DRAIN", HEALTH))
    fake.ignore_updates = True
    drain = run(fake, nodes=["gpu01"], state="drain", reason="X", max_out_of_service=0.5)
    assert drain["failed"] and "gpu01 shows state IDLE reason '' after drain" in drain["msg"]
    resume = run(fake, nodes=["gpu02"], state="resume")
    assert resume["failed"] and "gpu02 is still drained" in resume["msg"]


def test_scontrol_show_failing_fails_before_any_change():
    fake = cluster(10)
    fake.fail[("/usr/bin/scontrol", "show")] = (1, "", "slurm_load_node error: Unable to contact slurm controller\n")
    result = run(fake, nodes=["gpu01"], state="drain", reason="X")
    assert result["failed"] and "Unable to contact slurm controller" in result["msg"] and fake.updates() == []


# ---- check and diff mode -----------------------------------------------------------------------------------------

def test_check_mode_computes_everything_and_changes_nothing():
    fake = cluster(10, gpu01=("IDLE+DRAIN", HEALTH))
    result = run(fake, check=True, nodes=["gpu02", "gpu03"], state="drain", reason="X", max_out_of_service=0.2)
    assert result["changed"] and result["drained"] == ["gpu02"] and [r["node"] for r in result["refused"]] == ["gpu03"]
    assert fake.updates() == []
    assert result["nodes"]["gpu02"] == {"state": "IDLE+DRAIN", "reason": "gpucluster-health: X"}
    assert result["diff"] == {"before": "gpu02 state=IDLE reason=\n",
                              "after": "gpu02 state=IDLE+DRAIN reason=gpucluster-health: X\n"}


# ---- bad input fails before any change ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ({"nodes": ["gpu99"], "state": "drain", "reason": "X"}, "nodes: gpu99 not known to Slurm"),
    ({"nodes": ["gpu[01-"], "state": "drain", "reason": "X"}, "nodes: 'gpu[01-' is not a node name or hostlist"),
    ({"nodes": [], "state": "drain", "reason": "X"}, "nodes is empty"),
    ({"nodes": ["gpu01", ""], "state": "drain", "reason": "X"}, "nodes: '' names no node"),
    ({"nodes": ["gpu01", "gpu[05-01]"], "state": "drain", "reason": "X"}, "nodes: 'gpu[05-01]' is not a node name"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "X", "wait_timeout": -1}, "wait_timeout -1 must be 0 or more"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "X", "max_out_of_service": 1.5},
     "max_out_of_service 1.5 must be from 0 to 1"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "X", "max_out_of_service": -0.1},
     "max_out_of_service -0.1 must be from 0 to 1"),
    ({"nodes": ["gpu01"], "state": "drain"}, "reason None must not be empty"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "  "}, "reason '  ' must not be empty"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "a=b"}, "reason 'a=b' must not contain '='"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "X", "owner": "Ops"}, "owner 'Ops' must be lower case"),
    ({"nodes": ["gpu01"], "state": "drain", "reason": "X", "poll_interval": 0}, "poll_interval 0 must be 1 or more"),
])
def test_bad_input_fails_naming_the_option_and_value_before_any_change(args, message):
    fake = cluster(10)
    result = run(fake, **args)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert fake.updates() == []
