"""_slurm_nodes: node states, the owners' markers, the circuit breaker's plan, squeue and the wait loop; and that
the node-local health wrapper (_health_slurm) and slurm_node_state agree on the marker, the states and the limit."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_slurm, _hostlist, _slurm_nodes
from ansible_collections.gpucluster.ops.tests.unit.plugins.fake_slurm import FakeSlurm


# ---- states and markers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("state, out", [
    ("IDLE", False), ("MIXED", False), ("ALLOCATED", False), ("IDLE+COMPLETING", False), ("IDLE+POWERED_DOWN", False),
    ("IDLE+DRAIN", True), ("MIXED+DRAIN", True), ("ALLOCATED+DRAIN", True), ("DOWN", True), ("DOWN*", True),
    ("DOWN+NOT_RESPONDING", True), ("DOWN+DRAIN+NOT_RESPONDING", True), ("MIXED+FAIL", True), ("IDLE+FAIL", True),
    ("drained", True), ("draining", True), ("", False),
])
def test_out_of_service(state, out):
    assert _slurm_nodes.out_of_service(state) is out


def test_the_health_owner_is_the_wrappers_historical_prefix():
    assert _slurm_nodes.marker() == _slurm_nodes.marker("health") == _health_slurm.REASON_PREFIX == "gpucluster-health:"
    assert _slurm_nodes.marker("maint-2") == "gpucluster-maint-2:"


@pytest.mark.parametrize("owner", ["", "Health", "2nd", "-x", "a b", "a:b", "a_b", None])
def test_bad_owners_are_refused(owner):
    with pytest.raises(ValueError):
        _slurm_nodes.marker(owner)


def test_one_owners_marker_is_not_a_prefix_of_anothers():
    node = {"state": "IDLE+DRAIN", "reason": "gpucluster-health-x: X"}
    assert _slurm_nodes.ours(node, "health-x") and not _slurm_nodes.ours(node, "health")
    assert not _slurm_nodes.ours({"state": "IDLE", "reason": "gpucluster-health: X"}, "health")


def test_the_reason_is_cut_to_200_characters():
    assert _slurm_nodes.slurm_reason("health", " GPU-XID-79 gpu3 ") == "gpucluster-health: GPU-XID-79 gpu3"
    long = _slurm_nodes.slurm_reason("health", "X" * 300)
    assert len(long) == _slurm_nodes.REASON_MAX == 200 and long.endswith("...")


@pytest.mark.parametrize("text, problem", [
    ("GPU-XID-79 gpu3, IB-PORT-DOWN mlx5_2/1", None), ("", "empty"), ("  ", "empty"), (None, "empty"),
    ("key=value", "'='"), ("two\nlines", "control"), ("tab\there", "control"),
])
def test_reason_problem(text, problem):
    found = _slurm_nodes.reason_problem(text)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize("total, share, limit", [
    (200, 0.1, 20), (100, 0.29, 29), (10, 0.7, 7), (10, 0.3, 3), (9, 0.1, 1), (4, 0.3, 1), (4, 1, 4), (4, 0, 0),
    (0, 0.5, 0), (2, 0.1, 1), (2, 0.0, 0), (1, 0.1, 1),
])
def test_the_limit_is_the_share_rounded_down_at_least_one_without_float_noise(total, share, limit):
    """One rule (issue 44): max(1, floor(share x nodes)), 0 only for a share of 0."""
    assert _slurm_nodes.breaker_limit(total, share) == limit


TWO = [{"name": "gpu01", "state": "IDLE", "reason": ""}, {"name": "gpu02", "state": "IDLE", "reason": ""}]


def test_the_breaker_on_two_nodes_drains_one_and_refuses_the_second_naming_the_variable():
    first = _slurm_nodes.plan(TWO, ["gpu01"], "drain", reason="X", owner="nvlink", share=0.1,
                              variable="nvlink_remediation_max_out_of_service")
    assert first["drained"] == ["gpu01"] and first["refused"] == []
    after = [dict(TWO[0], state="IDLE+DRAIN", reason="gpucluster-nvlink: X"), TWO[1]]
    second = _slurm_nodes.plan(after, ["gpu02"], "drain", reason="X", owner="nvlink", share=0.1,
                               variable="nvlink_remediation_max_out_of_service")
    why = second["refused"][0]["why"]
    assert second["drained"] == [] and "1 of the cluster's 2 nodes" in why
    assert "nvlink_remediation_max_out_of_service=0.1" in why and "raise nvlink_remediation_max_out_of_service" in why


def test_the_wrapper_and_the_module_refuse_at_the_same_count_counting_every_owner():
    """A node out for an administrator counts against the health wrapper's breaker as it does against the module's."""
    nodes = [dict(TWO[0], state="IDLE+DRAIN", reason="disk swap"), dict(TWO[1])]
    action, why = _health_slurm.decide({"status": "error", "findings": [
        {"severity": "error", "code": "GPU-XID-79", "target": "gpu3"}]}, "gpu02", nodes, 0.1)
    assert action == "refuse" and "health_check_slurm_max_drained_share=0.1" in why and "1 of the cluster's 2" in why
    assert _slurm_nodes.plan(nodes, ["gpu02"], "drain", reason="X", share=0.1)["refused"]
    action, _why = _health_slurm.decide({"status": "error", "findings": [
        {"severity": "error", "code": "GPU-XID-79", "target": "gpu3"}]}, "gpu02", TWO, 0.1)
    assert action == "drain"


def test_a_share_of_zero_drains_nothing():
    assert _slurm_nodes.plan(TWO, ["gpu01"], "drain", reason="X", share=0)["refused"]
    action, _why = _health_slurm.decide({"status": "error", "findings": [
        {"severity": "error", "code": "GPU-XID-79", "target": "gpu3"}]}, "gpu02", TWO, 0)
    assert action == "refuse"


# ---- scontrol show node -o ---------------------------------------------------------------------------------------

def test_parse_a_slurm_shaped_line_with_keys_after_the_reason():
    text = ("NodeName=gpu01 Arch=x86_64 CoresPerSocket=32 OS=Linux 6.1.0-13-amd64 #1 SMP Debian 6.1.55-1 "
            "State=MIXED+DRAIN CfgTRES=cpu=128,mem=1000G,gres/gpu=8 Reason=gpucluster-maint: rack 3 PDU, gpu[01-02] "
            "[alice@2026-12-01T10:00:00] Comment=(null)\n"
            "NodeName=gpu02 State=IDLE Reason=\n"
            "\n"
            "No nodes in the system\n")
    assert _slurm_nodes.parse_scontrol_nodes(text) == [
        {"name": "gpu01", "state": "MIXED+DRAIN", "reason": "gpucluster-maint: rack 3 PDU, gpu[01-02]"},
        {"name": "gpu02", "state": "IDLE", "reason": ""}]


STAMP = " [alice@2026-12-01T10:00:00]"


@pytest.mark.parametrize("reason", [
    "rack 3 State=IDLE", "Reason=none State=IDLE+DRAIN", "a | b | c", "'quoted' \"double\"", "ünïcödé ✓ GPU",
    "see gpucluster-health: GPU-XID-79 gpu3", "x [bob@2025-01-01T00:00:00] State=IDLE", "Comment=hi State=IDLE",
])
def test_an_administrators_reason_is_read_as_text_never_as_fields(reason):
    """Issue 46: a reason holding State= once made a drained node parse as in service."""
    line = ("NodeName=gpu01 Arch=x86_64 OS=Linux 6.1.0 #1 SMP State=IDLE+DRAIN ThreadsPerCore=2 Partitions=gpu "
            "CfgTRES=cpu=128,mem=1000G,gres/gpu=8 Reason=%s%s Comment=(null)\n" % (reason, STAMP))
    node = _slurm_nodes.parse_scontrol_nodes(line)[0]
    assert node == {"name": "gpu01", "state": "IDLE+DRAIN", "reason": reason}
    assert _slurm_nodes.out_of_service(node["state"]) and not _slurm_nodes.ours(node)
    # and the health wrapper leaves the administrator's drain alone
    action, _why = _health_slurm.decide({"status": "error", "findings": [
        {"severity": "error", "code": "GPU-XID-79", "target": "gpu3"}]}, "gpu01", [node], 1.0)
    assert action == "none"
    assert _health_slurm.decide({"status": "ok", "findings": []}, "gpu01", [node], 1.0)[0] == "none"


def test_a_reason_without_slurms_stamp_runs_to_the_next_field_or_the_end():
    assert _slurm_nodes.parse_scontrol_nodes("NodeName=a State=IDLE+DRAIN Reason=x State=IDLE y")[0] == {
        "name": "a", "state": "IDLE+DRAIN", "reason": "x State=IDLE y"}


def test_the_fake_scontrol_reads_back_what_it_was_told():
    fake = FakeSlurm([("gpu01", "IDLE", ""), ("gpu02", "DOWN+DRAIN", "disk swap")])
    fake(["scontrol", "update", "nodename=gpu01", "state=drain", "reason=gpucluster-health: X y"],
         environ_update={"LC_ALL": "C"})
    nodes = _slurm_nodes.parse_scontrol_nodes(fake(["scontrol", "show", "node", "-o"], environ_update={"LC_ALL": "C"})[1])
    assert nodes == [{"name": "gpu01", "state": "IDLE+DRAIN", "reason": "gpucluster-health: X y"},
                     {"name": "gpu02", "state": "DOWN+DRAIN", "reason": "disk swap"}]


# ---- squeue and waiting ------------------------------------------------------------------------------------------

def test_squeue_argv_and_busy_nodes():
    assert _slurm_nodes.squeue_argv("/usr/bin/squeue", "gpu[01-03]") == [
        "/usr/bin/squeue", "-h", "-w", "gpu[01-03]", "-t", "RUNNING,COMPLETING", "-o", "%N"]
    out = "gpu[02-05]\n\ngpu09\n"
    assert _slurm_nodes.busy_nodes(out, ["gpu09", "gpu01", "gpu03"], _hostlist.expand) == ["gpu09", "gpu03"]
    assert _slurm_nodes.busy_nodes("", ["gpu01"], _hostlist.expand) == []


def _clock(monkeypatch):
    state = {"now": 100.0, "sleeps": []}
    monkeypatch.setattr(_slurm_nodes, "_now", lambda: state["now"])

    def sleep(seconds):
        state["sleeps"].append(seconds)
        state["now"] += seconds
    monkeypatch.setattr(_slurm_nodes, "_sleep", sleep)
    return state


def test_wait_idle_polls_until_the_nodes_are_free(monkeypatch):
    clock = _clock(monkeypatch)
    answers = [(["a", "b"], None), (["b"], None), ([], None)]
    busy, error = _slurm_nodes.wait_idle(lambda: answers.pop(0), ["a", "b"], 60, 10)
    assert (busy, error) == ([], None) and clock["sleeps"] == [10, 10]


def test_wait_idle_stops_at_the_deadline_with_the_busy_nodes(monkeypatch):
    clock = _clock(monkeypatch)
    busy, error = _slurm_nodes.wait_idle(lambda: (["a"], None), ["a", "b"], 25, 10)
    assert (busy, error) == (["a"], None) and clock["sleeps"] == [10, 10, 5]


def test_wait_idle_counts_every_node_busy_when_a_poll_fails(monkeypatch):
    _clock(monkeypatch)
    answers = [([], "squeue exited 1: timeout"), ([], "squeue exited 1: timeout")]
    assert _slurm_nodes.wait_idle(lambda: answers.pop(0), ["a", "b"], 10, 10) == (["a", "b"], "squeue exited 1: timeout")
    answers = [([], "squeue exited 1"), ([], None)]
    assert _slurm_nodes.wait_idle(lambda: answers.pop(0), ["a", "b"], 10, 10) == ([], None)


def test_wait_idle_with_no_time_polls_once(monkeypatch):
    clock = _clock(monkeypatch)
    assert _slurm_nodes.wait_idle(lambda: (["a"], None), ["a"], 0, 10) == (["a"], None) and clock["sleeps"] == []


# ---- the plan ----------------------------------------------------------------------------------------------------

def _cluster(states):
    return [{"name": "n%03d" % index, "state": state, "reason": reason} for index, (state, reason) in enumerate(states)]


def test_plan_resume_of_a_down_node_predicts_it_stays_out():
    cluster = _cluster([("DOWN+DRAIN+NOT_RESPONDING", "gpucluster-health: X"), ("IDLE+DRAIN", "gpucluster-health: X")])
    plan = _slurm_nodes.plan(cluster, ["n000", "n001"], "resume")
    assert plan["resumed"] == ["n000", "n001"]
    assert plan["after"] == {"n000": {"state": "DOWN+NOT_RESPONDING", "reason": ""},
                             "n001": {"state": "IDLE", "reason": ""}}
    assert plan["out_of_service"] == {"before": 2, "after": 1, "total": 2, "limit": 1}


STATES = st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "IDLE+DRAIN", "MIXED+DRAIN", "DOWN", "DOWN+DRAIN",
                          "IDLE+FAIL"])
REASONS = st.sampled_from(["", "gpucluster-health: X", "gpucluster-health: Y", "gpucluster-maint: Z", "admin"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(STATES, REASONS), min_size=1, max_size=30), st.floats(0, 1), st.randoms(),
       st.sampled_from(["drain", "resume"]))
def test_the_plan_never_passes_the_limit_nor_touches_what_is_not_ours(states, share, rnd, state):
    cluster = _cluster(states)
    names = [n["name"] for n in cluster]
    rnd.shuffle(names)
    names = names[:rnd.randint(1, len(names))]
    plan = _slurm_nodes.plan(cluster, names, state, "X", "health", share)
    by_name = dict((n["name"], n) for n in cluster)
    oos = plan["out_of_service"]
    if state == "drain":
        assert oos["after"] <= max(oos["limit"], oos["before"])
        assert not plan["resumed"]
    else:
        assert oos["after"] <= oos["before"] and not plan["drained"] and not plan["refused"]
    touched = [name for name, _action, _reason in plan["actions"]]
    assert all(_slurm_nodes.ours(by_name[n]) or not _slurm_nodes.out_of_service(by_name[n]["state"]) for n in touched)
    assert [n["node"] for n in plan["not_ours"]] == [
        n for n in names if _slurm_nodes.out_of_service(by_name[n]["state"]) and not _slurm_nodes.ours(by_name[n])]
    # every listed node lands in exactly one list
    lists = [plan["drained"], plan["updated"], plan["resumed"], plan["unchanged"], [r["node"] for r in plan["refused"]],
             [n["node"] for n in plan["not_ours"]]]
    assert sorted(sum(lists, [])) == sorted(names)
    # the refused are those beyond the limit, in the order given
    if plan["refused"]:
        assert oos["after"] == oos["limit"] or oos["before"] >= oos["limit"]


# ---- the wrapper and the module agree ----------------------------------------------------------------------------

def test_a_drain_by_the_module_with_owner_health_is_resumed_by_the_wrapper_and_the_other_way_round():
    module_drain = _slurm_nodes.plan(_cluster([("IDLE", "")]), ["n000"], "drain", "GPU-XID-79 gpu3", "health", 1)
    drained = [{"name": "n000", "state": "IDLE+DRAIN", "reason": module_drain["actions"][0][2]}]
    assert _health_slurm.decide({"status": "ok", "findings": []}, "n000", drained)[0] == "resume"
    wrapper_reason = _health_slurm.drain_reason([{"code": "GPU-XID-79", "severity": "error", "target": "gpu3"}])
    assert wrapper_reason == module_drain["actions"][0][2]
    by_wrapper = [{"name": "n000", "state": "IDLE+DRAIN", "reason": wrapper_reason}]
    assert _slurm_nodes.plan(by_wrapper, ["n000"], "resume")["resumed"] == ["n000"]
    assert _slurm_nodes.plan(by_wrapper, ["n000"], "resume", owner="maint")["not_ours"][0]["node"] == "n000"


def test_the_wrapper_leaves_a_failing_node_alone():
    # changed with slurm_node_state: a FAIL flag is out of service, so someone else's failing node is not drained
    nodes = [{"name": "n000", "state": "MIXED+FAIL", "reason": "flaky PSU"}, {"name": "n001", "state": "IDLE",
                                                                              "reason": ""}]
    error = {"status": "error", "findings": [{"code": "GPU-XID-79", "severity": "error", "target": "gpu3"}]}
    assert _health_slurm.decide(error, "n000", nodes, 1)[0] == "none"


def test_both_compute_the_same_limit():
    # 200 nodes at 10 %: both take a node out while 19 are out (any owner), and both refuse once 20 are
    nodes = _cluster([("IDLE+DRAIN", "gpucluster-health: X")] * 10 + [("DOWN", "")] * 9 + [("IDLE", "")] * 181)
    error = {"status": "error", "findings": [{"code": "GPU-XID-79", "severity": "error", "target": "gpu3"}]}
    assert _health_slurm.decide(error, "n150", nodes, 0.1)[0] == "drain"
    assert _slurm_nodes.plan(nodes, ["n150"], "drain", "X", "health", 0.1)["drained"] == ["n150"]
    nodes[20]["state"], nodes[20]["reason"] = "IDLE+DRAIN", "maintenance by alice"
    assert _health_slurm.decide(error, "n150", nodes, 0.1)[0] == "refuse"
    assert _slurm_nodes.plan(nodes, ["n150"], "drain", "X", "health", 0.1)["refused"][0]["node"] == "n150"
