"""The team quota model against the cluster it runs on (team_quotas(cluster=...), _team_quota_model.check_cluster).

Each rule is tested as a class: the refusal names the team, the variable and the value (and what the cluster has),
the boundary value passes, and a correct model passes. The cluster is what gpucluster.ops.slurm_cluster_gpus
returns: {nodes: {node: {GPU type: count}}, partitions: {name: [nodes]}}.
"""

import copy

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.filter import team_quotas as team_quotas_filter
from ansible_collections.gpucluster.ops.plugins.filter.team_quotas import team_quotas
from ansible_collections.gpucluster.ops.plugins.module_utils import _team_quota_model as model

MONTH = 24 * 31

# 4 A100 nodes (32 GPUs) and 2 L40S nodes (8 GPUs); partition a100 and l40s per type, debug on one A100 node.
MIXED = {
    "nodes": dict([("dgx%02d" % i, {"a100": 8}) for i in range(1, 5)] + [("l40s%02d" % i, {"l40s": 4}) for i in (1, 2)]),
    "partitions": {"a100": ["dgx01", "dgx02", "dgx03", "dgx04"], "l40s": ["l40s01", "l40s02"], "debug": ["dgx04"],
                   "all": ["dgx01", "dgx02", "dgx03", "dgx04", "l40s01", "l40s02"]},
}
TYPES = ["a100", "l40s"]
TEAMS = {
    "training": {"gpu_hours": "20000/month", "max_concurrent": 32, "gpu_types": ["a100"], "partitions": ["a100"],
                 "members": ["amara"]},
    "inference": {"gpu_hours": "5000/month", "max_concurrent": 8, "gpu_types": ["l40s"], "members": ["bob"]},
    "research": {"gpu_hours": "1000/week", "max_concurrent": 40, "partitions": ["all"], "members": ["chen"]},
    "debugging": {"gpu_hours": "100/day", "max_concurrent": 8, "partitions": ["debug"], "members": ["dana"]},
}


def teams(**changes):
    result = copy.deepcopy(TEAMS)
    for path, value in changes.items():
        team, key = path.split("__")
        if value is None:
            result[team].pop(key, None)
        else:
            result[team][key] = value
    return result


def problems(team_map, gpu_types=None, cluster=None, **options):
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(team_map, gpu_types=TYPES if gpu_types is None else gpu_types,
                    cluster=MIXED if cluster is None else cluster, **options)
    return caught.value.problems


def test_a_model_that_fits_the_cluster_passes_without_warnings():
    result = model.build(TEAMS, gpu_types=TYPES, cluster=MIXED)
    assert result["warnings"] == []
    assert [t["name"] for t in result["teams"]] == ["debugging", "inference", "research", "training"]


def test_without_a_cluster_nothing_is_checked_against_one():
    result = model.build(teams(training__max_concurrent=1000, training__partitions=["nope"]), gpu_types=TYPES)
    assert result["warnings"] == []


# -- max_concurrent --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("team,reach,words", [
    # GPU types restrict the GPUs a team reaches...
    ("training", 32, "of GPU type a100 in partition a100 (32 a100)"),
    ("inference", 8, "of GPU type l40s in the cluster (8 l40s)"),
    # ...and so do partitions (the union of their nodes), for every type there.
    ("research", 40, "in partition all (32 a100, 8 l40s)"),
    ("debugging", 8, "in partition debug (8 a100)"),
])
def test_max_concurrent_above_the_gpus_the_team_reaches_is_refused(team, reach, words):
    assert model.build(teams(**{team + "__max_concurrent": reach}), gpu_types=TYPES, cluster=MIXED)["warnings"] == []
    found = problems(teams(**{team + "__max_concurrent": reach + 1}))
    assert found == ["team_quota_teams.%s.max_concurrent is %d, more than the %d GPUs %s: the team could never use "
                     "its limit" % (team, reach + 1, reach, words)]


def test_max_concurrent_counts_each_node_once_across_overlapping_partitions():
    assert problems(teams(debugging__partitions=["a100", "debug"], debugging__max_concurrent=33)) == [
        "team_quota_teams.debugging.max_concurrent is 33, more than the 32 GPUs in partitions a100, debug (32 a100): "
        "the team could never use its limit"]


def test_max_concurrent_with_both_gpu_types_and_partitions_counts_their_intersection():
    found = problems(teams(inference__partitions=["all"], inference__gpu_types=["l40s"], inference__max_concurrent=9))
    assert "team_quota_teams.inference.max_concurrent is 9, more than the 8 GPUs of GPU type l40s in partition all" \
        in found[0]


def test_untyped_gpus_count_for_teams_without_gpu_types():
    cluster = {"nodes": {"n1": {"": 4}, "n2": {"a100": 8}}, "partitions": {}}
    assert model.build({"t": {"max_concurrent": 12}}, gpu_types=[], cluster=cluster)["warnings"] == []
    assert problems({"t": {"max_concurrent": 13}}, gpu_types=[], cluster=cluster) == [
        "team_quota_teams.t.max_concurrent is 13, more than the 12 GPUs in the cluster (4 untyped, 8 a100): the team "
        "could never use its limit"]


def test_a_cluster_without_gpus_refuses_any_gpu_limit():
    cluster = {"nodes": {"cpu01": {}}, "partitions": {"cpu": ["cpu01"]}}
    assert problems({"t": {"max_concurrent": 1}}, gpu_types=[], cluster=cluster) == [
        "team_quota_teams.t.max_concurrent is 1, more than the 0 GPUs in the cluster (none): the team could never "
        "use its limit"]
    assert model.build({"t": {"max_concurrent": 0}, "u": {}}, gpu_types=[], cluster=cluster)["warnings"] == []


# -- gpu_hours -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("team,period,gpus,days", [
    ("training", "month", 32, 31),
    ("inference", "month", 8, 31),
    ("research", "week", 40, 7),
    ("debugging", "day", 8, 1),
])
def test_a_budget_above_what_the_teams_gpus_deliver_in_its_period_is_refused(team, period, gpus, days):
    most = gpus * 24 * days
    fits = teams(**{team + "__gpu_hours": "%d/%s" % (most, period)})
    assert model.build(fits, gpu_types=TYPES, cluster=MIXED)
    found = problems(teams(**{team + "__gpu_hours": "%d/%s" % (most + 1, period)}))
    words = {"month": "a 31-day month", "week": "a week", "day": "a day"}[period]
    assert len(found) == 1
    assert found[0].startswith("team_quota_teams.%s.gpu_hours is '%d/%s', more than the %d GPU-hours the %d GPUs "
                               % (team, most + 1, period, most, gpus))
    assert found[0].endswith("deliver in %s (%d x 24 h x %d days)" % (words, gpus, days))


def test_a_fractional_budget_is_compared_exactly():
    assert problems(teams(debugging__gpu_hours="192.5/day")) == [
        "team_quota_teams.debugging.gpu_hours is '192.5/day', more than the 192 GPU-hours the 8 GPUs in partition "
        "debug deliver in a day (8 x 24 h x 1 days)"]


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(min_value=0, max_value=64), per_node=st.integers(min_value=1, max_value=8),
       hours=st.integers(min_value=0, max_value=400000))
def test_the_monthly_budget_limit_is_gpus_times_24_times_31(nodes, per_node, hours):
    cluster = {"nodes": {"n%03d" % i: {"h100": per_node} for i in range(nodes)}, "partitions": {}}
    team_map = {"t": {"gpu_hours": "%d/month" % hours}}
    if hours <= nodes * per_node * MONTH:
        model.build(team_map, gpu_types=["h100"] if nodes else [], cluster=cluster)
    else:
        assert any(p.startswith("team_quota_teams.t.gpu_hours is '%d/month'" % hours)
                   for p in problems(team_map, gpu_types=["h100"] if nodes else [], cluster=cluster))


def test_budgets_that_together_oversubscribe_the_cluster_are_a_warning_not_a_failure():
    # Each team alone fits the 40 GPUs (29760 GPU-hours a month); together they ask for 50000.
    team_map = {"a": {"gpu_hours": "25000/month"}, "b": {"gpu_hours": "25000/month"}, "c": {"gpu_hours": "10/day"}}
    result = model.build(team_map, gpu_types=TYPES, cluster=MIXED)
    assert result["warnings"] == [
        "team_quota_teams: the /month budgets add up to 50000 GPU-hours, more than the 29760 that the 40 GPUs of the "
        "cluster deliver in a 31-day month: the teams are oversubscribed, and those that spend early leave less for "
        "the others"]


def test_the_filter_shows_the_warnings_and_returns_them(monkeypatch):
    shown = []
    monkeypatch.setattr(team_quotas_filter.Display, "warning", lambda self, msg, *a, **k: shown.append(msg))
    team_map = {"a": {"gpu_hours": "25000/month"}, "b": {"gpu_hours": "25000/month"}}
    result = team_quotas(team_map, TYPES, cluster=MIXED, errors="return")
    assert result["errors"] == [] and len(result["warnings"]) == 1
    assert shown == ["team_quotas: " + result["warnings"][0]]
    shown[:] = []
    team_quotas(TEAMS, TYPES, cluster=MIXED)
    assert shown == []


# -- partitions ------------------------------------------------------------------------------------------------------

def test_a_partition_no_partition_of_the_cluster_has_is_refused():
    found = problems(teams(training__partitions=["a100", "a10o"], training__max_concurrent=None,
                           training__gpu_hours=None))
    assert found == ["team_quota_teams.training.partitions has 'a10o', which is not a partition of the cluster "
                     "(partitions: a100, all, debug, l40s) (did you mean 'a100'?)"]


def test_a_cluster_without_partitions_refuses_every_team_partition():
    cluster = dict(MIXED, partitions={})
    found = problems({"t": {"partitions": ["gpu"]}}, cluster=cluster)
    assert found == ["team_quota_teams.t.partitions has 'gpu', which is not a partition of the cluster "
                     "(partitions: none)"]


# -- GPU types -------------------------------------------------------------------------------------------------------

def test_a_quota_gpu_type_no_node_has_is_refused():
    found = problems(teams(inference__gpu_types=["h100"]), gpu_types=["a100", "l40s", "h100"])
    assert "team_quota_gpu_types has 'h100', which no node of the cluster has (the nodes' GPU types: a100, l40s) " \
           "(did you mean 'a100'?)" in found
    assert "team_quota_teams.inference.gpu_types has 'h100', which no node of the cluster has (the nodes' GPU types: " \
           "a100, l40s) (did you mean 'a100'?)" in found
    # and the team reaches no GPU at all, so its limits cannot be met either
    assert any(p.startswith("team_quota_teams.inference.max_concurrent is 8, more than the 0 GPUs") for p in found)


def test_a_node_gpu_type_the_quota_gpu_types_leave_out_is_refused():
    # l40s left out: training's restriction to a100 would set no limit of 0 on it, so training could use l40s.
    found = problems(teams(inference__gpu_types=None, research__partitions=None, research__max_concurrent=None),
                     gpu_types=["a100"])
    assert found == ["team_quota_gpu_types is [a100], but nodes of the cluster have GPU type 'l40s' too (l40s01, "
                     "l40s02): list every type the nodes have, or a team's gpu_types restriction does not cover it"]


def test_no_quota_gpu_types_and_no_restriction_is_fine_on_a_typed_cluster():
    team_map = {"t": {"max_concurrent": 40, "gpu_hours": "29760/month"}}
    assert model.build(team_map, gpu_types=[], cluster=MIXED)["warnings"] == []


def test_the_cluster_is_named_as_the_caller_says():
    found = problems(teams(training__partitions=["nope"], training__max_concurrent=None, training__gpu_hours=None),
                     cluster_name="the cluster (inventory group slurm_compute)")
    assert found[0].startswith("team_quota_teams.training.partitions has 'nope', which is not a partition of the "
                               "cluster (inventory group slurm_compute)")


@pytest.mark.parametrize("cluster,words", [
    ([], "the cluster is []"),
    ({"partitions": {}}, "the cluster is {'partitions': {}}"),
    ({"nodes": {"n1": {"a100": -1}}}, "the cluster.nodes.n1 is {'a100': -1}"),
    ({"nodes": {"n1": {"a100": 8}}, "partitions": {"p": "n1"}}, "the cluster.partitions is {'p': 'n1'}"),
])
def test_a_malformed_cluster_description_is_refused(cluster, words):
    assert any(p.startswith(words) for p in problems({"t": {}}, gpu_types=[], cluster=cluster))


def test_every_problem_is_listed_at_once_through_the_filter():
    bad = teams(training__max_concurrent=33, inference__gpu_hours="6000/month", research__partitions=["alll"])
    with pytest.raises(AnsibleFilterError) as caught:
        team_quotas(bad, TYPES, cluster=MIXED)
    text = str(caught.value)
    assert "team_quota_teams.training.max_concurrent is 33" in text
    assert "team_quota_teams.inference.gpu_hours is '6000/month', more than the 5952 GPU-hours" in text
    assert "team_quota_teams.research.partitions has 'alll'" in text
    returned = team_quotas(bad, TYPES, cluster=MIXED, errors="return")
    assert "warnings" not in returned and len(returned["errors"]) >= 3
