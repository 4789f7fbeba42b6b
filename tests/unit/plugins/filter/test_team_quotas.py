"""The team quota model: parsing, validation (every bad input named with its path), and the rendered forms."""

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.team_quotas import FilterModule, team_quotas
from ansible_collections.gpucluster.ops.plugins.module_utils import _team_quota_model as model

SEED = {
    "research": {"gpu_hours": "20000/month", "max_concurrent": 16, "priority": "high",
                 "can_preempt": ["development"], "members": ["alice", {"name": "carol", "default": True}]},
    "development": {"gpu_hours": "5000/month", "max_concurrent": 8, "priority": "medium",
                    "preemptible_by": ["research"], "min_runtime_before_preemption": "30m",
                    "members": ["bob", "carol"]},
}


def seed(**changes):
    teams = copy.deepcopy(SEED)
    for path, value in changes.items():
        team, key = path.split("__")
        if value is None:
            teams[team].pop(key, None)
        else:
            teams[team][key] = value
    return teams


def problems(teams, **options):
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(teams, **options)
    return caught.value.problems


def qos(result, name):
    return [q for q in result["slurm"]["qos"] if q["name"] == name][0]


# -- values ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("20000/month", (20000, "month", 1200000)),
    ("5000 / week", (5000, "week", 300000)),
    ("20,000/months", (20000, "month", 1200000)),
    ("12.5/day", (12.5, "day", 750)),
    ("2.0/Day", (2, "day", 120)),
    (None, (None, None, None)),
])
def test_gpu_hours(text, expected):
    assert model.parse_gpu_hours(text, "x") == expected


@pytest.mark.parametrize("text,message", [
    ("20000/montly", "unknown period 'montly' (did you mean 'month'?)"),
    ("20000/year", "unknown period 'year'"),
    ("-5/month", "cannot be negative"),
    ("20000", "'<hours>/month'"),
    (20000, "'<hours>/month'"),
    (True, "'<hours>/month'"),
    ("0.01/day", "not a whole number"),
])
def test_gpu_hours_bad(text, message):
    with pytest.raises(ValueError) as caught:
        model.parse_gpu_hours(text, "team_quota_teams.x.gpu_hours")
    assert message in str(caught.value)
    assert "team_quota_teams.x.gpu_hours" in str(caught.value)


# The durations themselves (min_runtime_before_preemption): tests/unit/plugins/module_utils/test_slurm_values.py.

def test_duration_unset_is_zero_and_a_bare_number_names_the_path():
    research = [t for t in model.build(SEED)["teams"] if t["name"] == "research"][0]
    assert research["min_runtime_s"] == 0
    teams = copy.deepcopy(SEED)
    teams["development"]["min_runtime_before_preemption"] = "90"
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(teams)
    assert "team_quota_teams.development.min_runtime_before_preemption is '90': a number in a string" in str(caught.value)


@pytest.mark.parametrize("value,expected", [("high", (1000, "high")), ("HIGH", (1000, "high")), (42, (42, None)),
                                            ("7", (7, None)), (0, (0, None))])
def test_priority(value, expected):
    assert model.parse_priority(value, model.DEFAULT_PRIORITIES, "x") == expected


@pytest.mark.parametrize("value,message", [("urgent", "unknown priority"), ("hihg", "did you mean 'high'"),
                                           (-1, "runs from 0"), (2 ** 32, "runs from 0"), (True, "unknown priority"),
                                           (None, "unknown priority")])
def test_priority_bad(value, message):
    with pytest.raises(ValueError) as caught:
        model.parse_priority(value, model.DEFAULT_PRIORITIES, "x")
    assert message in str(caught.value)


# -- the seed --------------------------------------------------------------------------------------------------------

def test_seed_qos():
    result = model.build(SEED, gpu_types=["a100"])
    research, development = qos(result, "research"), qos(result, "development")
    assert research == {
        "name": "research", "description": "gpucluster.ops: team research", "priority": 1000,
        "flags": ["DenyOnLimit", "NoDecay"], "grp_tres": {"gres/gpu": 16}, "grp_tres_mins": {"gres/gpu": 1200000},
        "preempt": ["development"], "preempt_mode": "cluster", "preempt_exempt_time": "00:00:00"}
    assert development["grp_tres"] == {"gres/gpu": 8} and development["grp_tres_mins"] == {"gres/gpu": 300000}
    assert development["priority"] == 500 and development["preempt"] == []
    assert development["preempt_mode"] == "requeue" and development["preempt_exempt_time"] == "00:30:00"


def test_seed_accounts_and_users():
    result = model.build(SEED)
    assert result["slurm"]["accounts"] == [
        {"name": "development", "description": "team development", "organization": "gpucluster.ops",
         "parent": "root", "qos": ["development"], "default_qos": "development", "fairshare": 1},
        {"name": "research", "description": "team research", "organization": "gpucluster.ops",
         "parent": "root", "qos": ["research"], "default_qos": "research", "fairshare": 1}]
    users = dict((u["name"], u) for u in result["slurm"]["users"])
    assert users["carol"] == {"name": "carol", "default_account": "research", "associations": [
        {"account": "development", "partition": ""}, {"account": "research", "partition": ""}]}
    assert users["alice"]["default_account"] == "research" and users["bob"]["default_account"] == "development"


def test_seed_slurm_conf_and_reset():
    result = model.build(SEED, gpu_types=["a100", "h100"])
    assert result["slurm_conf"] == {
        "AccountingStorageTRES": "gres/gpu,gres/gpu:a100,gres/gpu:h100",
        "AccountingStorageEnforce": "associations,limits,qos,safe",
        "PriorityType": "priority/multifactor", "PriorityWeightQOS": 10000,
        "PriorityWeightFairshare": 10000, "PriorityWeightAge": 1000,
        "PreemptType": "preempt/qos", "PreemptMode": "REQUEUE", "JobRequeue": 1}
    assert result["reset"] == {"month": ["development", "research"]}
    assert result["tres"] == ["gres/gpu", "gres/gpu:a100", "gres/gpu:h100"]
    without = model.build(SEED, gpu_types=["a100"], accounting_tres=False)
    assert "AccountingStorageTRES" not in without["slurm_conf"] and without["tres"] == ["gres/gpu", "gres/gpu:a100"]


def test_both_directions_of_preemption_are_one_edge():
    one = model.build(seed(development__preemptible_by=None))
    two = model.build(seed(research__can_preempt=None))
    assert qos(one, "research")["preempt"] == qos(two, "research")["preempt"] == ["development"]
    assert qos(one, "development")["preempt_mode"] == "requeue"


def test_no_preemption_means_no_preempt_settings():
    teams = {"a": {"max_concurrent": 2}, "b": {"max_concurrent": 3, "priority": 7}}
    result = model.build(teams)
    assert "PreemptType" not in result["slurm_conf"]
    assert qos(result, "b")["priority"] == 7 and qos(result, "a")["priority"] == 500
    assert qos(result, "a")["grp_tres_mins"] == {} and qos(result, "a")["flags"] == ["DenyOnLimit"]
    assert result["reset"] == {}


def test_unlimited_team_and_empty_model():
    result = model.build({"ops": None})
    assert qos(result, "ops")["grp_tres"] == {} and result["users"] == []
    assert model.build({})["slurm"] == {"qos": [], "accounts": [], "users": []}
    assert model.build(None)["teams"] == []


def test_gpu_type_restriction_zeroes_the_other_types():
    result = model.build(seed(research__gpu_types=["a100"]), gpu_types=["a100", "h100", "l40s"])
    assert qos(result, "research")["grp_tres"] == {"gres/gpu": 16, "gres/gpu:h100": 0, "gres/gpu:l40s": 0}
    assert qos(result, "development")["grp_tres"] == {"gres/gpu": 8}


def test_partitions_become_associations():
    result = model.build(seed(development__partitions=["dev", "debug"]))
    users = dict((u["name"], u) for u in result["slurm"]["users"])
    assert users["bob"]["associations"] == [{"account": "development", "partition": "dev"},
                                            {"account": "development", "partition": "debug"}]


def test_custom_priority_levels_and_weight():
    result = model.build(seed(research__priority="urgent"), priorities={"urgent": 5000, "medium": 50}, qos_weight=3)
    assert qos(result, "research")["priority"] == 5000 and qos(result, "development")["priority"] == 50
    assert result["slurm_conf"]["PriorityWeightQOS"] == 3


def test_decay_reset_method():
    result = model.build(SEED, reset="decay")
    assert result["slurm_conf"]["PriorityDecayHalfLife"] == 0
    assert result["slurm_conf"]["PriorityUsageResetPeriod"] == "MONTHLY"
    assert qos(result, "research")["flags"] == ["DenyOnLimit"] and result["reset"] == {}
    assert "several (month, week)" in problems(seed(development__gpu_hours="100/week"), reset="decay")[0]


def test_weekly_and_daily_groups():
    result = model.build(seed(development__gpu_hours="100/week"))
    assert result["reset"] == {"month": ["research"], "week": ["development"]}


# -- errors ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("teams,expected", [
    (seed(development__gpu_hours="5000/montly"),
     "team_quota_teams.development.gpu_hours is '5000/montly': unknown period 'montly' (did you mean 'month'?)"),
    (seed(development__max_concurrent=-8), "team_quota_teams.development.max_concurrent is -8: a limit cannot be negative"),
    (seed(development__max_concurrent="eight"), "team_quota_teams.development.max_concurrent is 'eight'"),
    (seed(development__max_concurrent=True), "team_quota_teams.development.max_concurrent is True"),
    (seed(research__priority="urgent"), "team_quota_teams.research.priority is 'urgent': unknown priority"),
    (seed(research__can_preempt=["research", "development"]),
     "team_quota_teams.research.can_preempt: team research cannot preempt itself"),
    (seed(research__can_preempt=["developement"]),
     "team_quota_teams.research.can_preempt names team 'developement', which is not in team_quota_teams (did you mean"),
    (seed(development__can_preempt=["research"]), "preemption goes in a circle (development -> research -> development)"),
    (seed(research__members=["alice", "carol"]),
     "team_quota_teams: user carol is in teams development, research without a default"),
    (seed(development__members=["bob", {"name": "carol", "default": True}]),
     "user carol is the default member of several teams (development, research)"),
    (seed(research__max_concurent=3), "team_quota_teams.research has unknown key 'max_concurent' (did you mean "
                                      "'max_concurrent'?)"),
    (seed(research__members=["alice", "alice"]), "team_quota_teams.research.members lists user alice twice"),
    (seed(research__members=["Alice Smith"]), "team_quota_teams.research.members[0] is 'Alice Smith'"),
    (seed(research__members=[{"name": "x", "primary": True}]), "team_quota_teams.research.members[0] has unknown key"),
    (seed(research__members="alice"), "team_quota_teams.research.members is 'alice'"),
    (seed(research__min_runtime_before_preemption="30m"),
     "team_quota_teams.research.min_runtime_before_preemption is set, but no team can preempt research"),
    (seed(development__min_runtime_before_preemption=30), "bare number is ambiguous"),
    (seed(development__preempt_mode="suspend"), "team_quota_teams.development.preempt_mode is 'suspend'"),
    (seed(research__description="it's ours"), "team_quota_teams.research.description"),
    (seed(research__kubernetes_namespace="Research"), "team_quota_teams.research.kubernetes_namespace is 'Research'"),
    (seed(research__partitions=["gpu nodes"]), "team_quota_teams.research.partitions has 'gpu nodes'"),
    ({"Research": {}}, "team name 'Research' must be"),
    ({"research": "lots"}, "team_quota_teams.research is 'lots': a team is a mapping"),
])
def test_errors_name_the_path_and_value(teams, expected):
    found = problems(teams)
    assert any(expected in p for p in found), found


def test_every_problem_is_listed_at_once():
    teams = seed(development__gpu_hours="5000/montly", development__max_concurrent=-1, research__priority="urgent")
    assert len(problems(teams)) == 3


def test_gpu_type_errors():
    assert "the cluster's GPU types are not given" in problems(seed(research__gpu_types=["a100"]))[0]
    found = problems(seed(research__gpu_types=["a10O"]), gpu_types=["a100", "h100"])
    assert "has 'a10O', which is not a valid GPU type" in found[0]
    found = problems(seed(research__gpu_types=["a10"]), gpu_types=["a100", "h100"])
    assert "'a10', which is not one of the cluster's GPU types (a100, h100) (did you mean 'a100'?)" in found[0]


def test_bad_options():
    assert "reset method is 'weekly'" in problems(SEED, reset="weekly")[0]
    assert "PriorityWeightQOS is -1" in problems(SEED, qos_weight=-1)[0]
    with pytest.raises(model.TeamQuotaError):
        model.build(SEED, priorities={"high": -3})
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(["research"])
    assert "team_quota_teams is ['research']" in str(caught.value)


# -- Kubernetes ------------------------------------------------------------------------------------------------------

def _objects(result, kind):
    return [o for o in result["kubernetes"] if o["kind"] == kind]


def test_kubernetes_objects():
    result = model.build(seed(research__gpu_types=["h100"]), gpu_types=["a100", "h100"])
    flavors = _objects(result, "ResourceFlavor")
    assert [(f["metadata"]["name"], f["spec"]["nodeLabels"]) for f in flavors] == [
        ("gpu-a100", {"gpucluster.ops/gpu-type": "a100"}), ("gpu-h100", {"gpucluster.ops/gpu-type": "h100"})]
    quotas = dict((q["metadata"]["namespace"], q) for q in _objects(result, "ResourceQuota"))
    assert quotas["team-research"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
    assert quotas["team-development"]["metadata"]["annotations"]["gpucluster.ops/gpu-hours"] == "5000/month"
    queues = dict((q["metadata"]["name"], q) for q in _objects(result, "ClusterQueue"))
    research = queues["research"]["spec"]
    assert [f["name"] for f in research["resourceGroups"][0]["flavors"]] == ["gpu-h100"]
    # Issue 19: borrowingLimit 0 let no team borrow, so no preemption across teams could act. The GPUs are now the
    # Cohort's pool (nominalQuota 0 here) and the team's GPUs at once are what it may borrow of them.
    assert research["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "16"}]
    assert research["preemption"]["reclaimWithinCohort"] == "Any"
    assert queues["development"]["spec"]["preemption"]["reclaimWithinCohort"] == "Never"
    assert research["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-research"}}
    local = dict((q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in _objects(result, "LocalQueue"))
    assert local == {"team-development": "development", "team-research": "research"}
    classes = dict((c["metadata"]["name"], c["value"]) for c in _objects(result, "WorkloadPriorityClass"))
    assert classes == {"team-development": 500, "team-research": 1000}
    assert [n["metadata"]["name"] for n in _objects(result, "Namespace")] == ["team-development", "team-research"]


def test_kubernetes_without_gpu_types_uses_one_flavor():
    result = model.build(SEED)
    assert [f["metadata"]["name"] for f in _objects(result, "ResourceFlavor")] == ["gpu"]
    assert "nodeLabels" not in _objects(result, "ResourceFlavor")[0]["spec"]


# -- the filter ------------------------------------------------------------------------------------------------------

def test_filter_is_registered_and_raises_ansible_errors():
    assert FilterModule().filters()["team_quotas"] is team_quotas
    with pytest.raises(AnsibleFilterError) as caught:
        team_quotas(seed(development__gpu_hours="20000/montly"))
    assert "team_quotas: 1 problem(s): team_quota_teams.development.gpu_hours is '20000/montly'" in str(caught.value)


def test_filter_can_return_the_errors():
    assert team_quotas(seed(research__priority="x"), errors="return")["errors"][0].startswith(
        "team_quota_teams.research.priority is 'x'")
    good = team_quotas(SEED, ["a100"], errors="return")
    assert good["errors"] == [] and good["slurm_conf"]["AccountingStorageTRES"] == "gres/gpu,gres/gpu:a100"
    with pytest.raises(AnsibleFilterError):
        team_quotas(SEED, errors="ignore")


def test_filter_names_the_variable_it_is_given():
    with pytest.raises(AnsibleFilterError) as caught:
        team_quotas({"x": {"max_concurrent": -1}}, variable="team_quotas")
    assert "team_quotas.x.max_concurrent is -1" in str(caught.value)
