"""Fair share, off-peak pricing and GPU prices in the team model (issue 22): what it renders, every bad input."""

import copy

import pytest

from ansible_collections.gpucluster.ops.plugins.filter.team_quotas import team_quotas
from ansible_collections.gpucluster.ops.plugins.module_utils import _team_quota_model as model

TEAMS = {
    "research": {"gpu_hours": "20000/month", "max_concurrent": 16, "shares": 3, "members": ["alice"]},
    "development": {"gpu_hours": "5000/month", "max_concurrent": 8, "members": ["bob"]},
}
OFFPEAK = {"factor": 0.5, "open": "Mon..Fri *-*-* 20:00:00", "close": "Mon..Fri *-*-* 07:00:00"}
PARTITIONS = [{"name": "gpu", "groups": ["slurm_compute"], "default": True, "max_time": "UNLIMITED"},
              {"name": "debug", "nodes": "gpu01", "extra": {"PriorityTier": 2}}]


def teams(**changes):
    result = copy.deepcopy(TEAMS)
    for path, value in changes.items():
        team, key = path.split("__")
        result[team][key] = value
    return result


def problems(spec=None, **options):
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(TEAMS if spec is None else spec, **options)
    return caught.value.problems


def account(result, name):
    return [a for a in result["slurm"]["accounts"] if a["name"] == name][0]


def qos(result, name):
    return [q for q in result["slurm"]["qos"] if q["name"] == name][0]


# -- fair share ------------------------------------------------------------------------------------------------------

def test_shares_become_the_accounts_fairshare_default_one():
    result = model.build(TEAMS)
    assert account(result, "research")["fairshare"] == 3 and account(result, "development")["fairshare"] == 1
    assert [t["shares"] for t in result["teams"]] == [1, 3]
    assert model.build(teams(research__shares="7"))["teams"][1]["shares"] == 7


def test_weights_and_periods_in_the_slurm_conf_keys():
    conf = model.build(TEAMS, fairshare_weight=10000, age_weight="1000", calc_period="1m",
                       decay_half_life="7d")["slurm_conf"]
    assert conf["PriorityWeightFairshare"] == 10000 and conf["PriorityWeightAge"] == 1000
    assert conf["PriorityCalcPeriod"] == 1 and conf["PriorityDecayHalfLife"] == "7-00:00:00"
    assert conf["PriorityWeightQOS"] == 10000
    conf = model.build(TEAMS)["slurm_conf"]                                          # the model's defaults
    assert (conf["PriorityWeightFairshare"], conf["PriorityWeightAge"]) == (10000, 1000)
    assert "PriorityCalcPeriod" not in conf and "PriorityDecayHalfLife" not in conf   # not given: Slurm's own
    assert "PriorityWeightFairshare" not in model.build(TEAMS, fairshare_weight=None)["slurm_conf"]
    assert model.build(TEAMS, decay_half_life=0)["slurm_conf"]["PriorityDecayHalfLife"] == 0


def test_decay_reset_keeps_its_half_life_zero_and_refuses_another():
    conf = model.build(TEAMS, reset="decay", fairshare_weight=5000)["slurm_conf"]
    assert conf["PriorityDecayHalfLife"] == 0 and conf["PriorityUsageResetPeriod"] == "MONTHLY"
    assert conf["PriorityWeightFairshare"] == 5000
    assert model.build(TEAMS, reset="decay", decay_half_life="0")["slurm_conf"]["PriorityDecayHalfLife"] == 0
    found = problems(reset="decay", decay_half_life="14d")
    assert found == ["team_quotas: the decay reset method sets PriorityDecayHalfLife=0 (usage is only reset, never "
                     "decayed), but the decay half-life is '14-00:00:00': leave it unset with reset method decay"
                     .replace("team_quotas", "team_quota_teams")]


@pytest.mark.parametrize("options,message", [
    ({"fairshare_weight": -1}, "team_quota_priority_weight_fairshare (PriorityWeightFairshare) is -1"),
    ({"fairshare_weight": 2 ** 32}, "team_quota_priority_weight_fairshare (PriorityWeightFairshare) is 4294967296"),
    ({"fairshare_weight": "lots"}, "team_quota_priority_weight_fairshare (PriorityWeightFairshare) is 'lots'"),
    ({"fairshare_weight": True}, "team_quota_priority_weight_fairshare (PriorityWeightFairshare) is True"),
    ({"age_weight": -5}, "team_quota_priority_weight_age (PriorityWeightAge) is -5"),
    ({"calc_period": 5}, "team_quota_priority_calc_period (PriorityCalcPeriod) is 5: a bare number"),
    ({"calc_period": "0"}, "team_quota_priority_calc_period (PriorityCalcPeriod) is '0': slurmctld recalculates"),
    ({"calc_period": "90s"}, "team_quota_priority_calc_period (PriorityCalcPeriod) is '90s': Slurm counts it in whole"),
    ({"decay_half_life": "soon"}, "team_quota_priority_decay_half_life (PriorityDecayHalfLife) is 'soon'"),
])
def test_bad_priority_settings_are_named(options, message):
    assert any(p.startswith(message) for p in problems(**options)), problems(**options)


@pytest.mark.parametrize("value", [0, -1, "many", 2 ** 31, True, 1.5])
def test_bad_shares_are_named(value):
    found = problems(teams(development__shares=value))
    assert found == ["team_quota_teams.development.shares is %r: fair-share shares are a whole number from 1 to "
                     "2147483647 (only their ratio between teams matters)" % (value,)]


# -- off-peak --------------------------------------------------------------------------------------------------------

def test_offpeak_counts_budgets_in_billing_and_adds_the_partition():
    result = model.build(TEAMS, offpeak=dict(OFFPEAK), partitions=copy.deepcopy(PARTITIONS))
    assert qos(result, "research")["grp_tres_mins"] == {"billing": 20000 * 60 * 1000}
    assert qos(result, "research")["grp_tres"] == {"gres/gpu": 16}                   # GPUs at once: unchanged
    assert [(t["budget_tres"], t["budget_units_per_gpu_minute"]) for t in result["teams"]] == [("billing", 1000)] * 2
    assert result["offpeak"] == {"factor": 0.5, "billing_per_gpu": 500, "open": OFFPEAK["open"],
                                 "close": OFFPEAK["close"], "partition": "offpeak", "base_partition": None}
    parts = result["slurm_partitions"]
    assert [p["name"] for p in parts] == ["gpu", "debug", "offpeak"]
    assert parts[0]["extra"] == {"TRESBillingWeights": "GRES/gpu=1000"}
    assert parts[1]["extra"] == {"PriorityTier": 2, "TRESBillingWeights": "GRES/gpu=1000"}
    assert parts[2] == {"name": "offpeak", "groups": ["slurm_compute"], "default": False, "max_time": "UNLIMITED",
                        "extra": {"TRESBillingWeights": "GRES/gpu=500", "State": "DOWN"}}
    assert PARTITIONS[0].get("extra") is None                                        # the input is not changed
    based = model.build(TEAMS, offpeak=dict(OFFPEAK, base_partition="debug", partition="night", factor="0.25"),
                        partitions=copy.deepcopy(PARTITIONS))
    assert based["slurm_partitions"][2]["name"] == "night" and based["slurm_partitions"][2]["nodes"] == "gpu01"
    assert based["slurm_partitions"][2]["extra"] == {"PriorityTier": 2, "TRESBillingWeights": "GRES/gpu=250",
                                                     "State": "DOWN"}


def test_the_partitions_it_returns_given_back_give_the_same():
    once = model.build(TEAMS, offpeak=dict(OFFPEAK), partitions=copy.deepcopy(PARTITIONS))["slurm_partitions"]
    twice = model.build(TEAMS, offpeak=dict(OFFPEAK), partitions=copy.deepcopy(once))["slurm_partitions"]
    assert twice == once


def test_without_offpeak_the_budgets_are_gpu_minutes_as_before():
    result = model.build(TEAMS, partitions=copy.deepcopy(PARTITIONS))
    assert qos(result, "research")["grp_tres_mins"] == {"gres/gpu": 1200000}
    assert result["offpeak"] is None and result["slurm_partitions"] is None
    assert result["teams"][0]["budget_tres"] == "gres/gpu" and result["teams"][0]["budget_units_per_gpu_minute"] == 1


@pytest.mark.parametrize("offpeak,message", [
    (dict(OFFPEAK, factor=1.5), "team_quota_offpeak.factor is 1.5: the off-peak factor is above 0 and at most 1"),
    (dict(OFFPEAK, factor=0), "team_quota_offpeak.factor is 0: the off-peak factor is above 0 and at most 1"),
    (dict(OFFPEAK, factor=-0.5), "team_quota_offpeak.factor is -0.5: the off-peak factor is above 0"),
    (dict(OFFPEAK, factor="half"), "team_quota_offpeak.factor is 'half': give a number above 0 and at most 1"),
    (dict(OFFPEAK, factor=True), "team_quota_offpeak.factor is True: give a number"),
    (dict(OFFPEAK, factor=0.3333), "team_quota_offpeak.factor is 0.3333: give the factor in steps of 0.001"),
    (dict(OFFPEAK, close=OFFPEAK["open"]), "team_quota_offpeak: open and close are both 'Mon..Fri *-*-* 20:00:00', "
                                           "so the off-peak window never opens"),
    (dict(OFFPEAK, open=""), "team_quota_offpeak.open is '': give a systemd OnCalendar time"),
    (dict((k, v) for k, v in OFFPEAK.items() if k != "close"), "team_quota_offpeak.close is None"),
    (dict(OFFPEAK, hours="20-7"), "team_quota_offpeak has unknown key 'hours'"),
    (dict(OFFPEAK, partition="gpu"), "team_quota_offpeak.partition is 'gpu', which slurm_partitions already has"),
    (dict(OFFPEAK, partition="a b"), "team_quota_offpeak.partition is 'a b', which is not a partition name"),
    (dict(OFFPEAK, base_partition="gpus"), "team_quota_offpeak.base_partition is 'gpus': the off-peak partition "
                                           "copies the nodes of one of the partitions (gpu, debug) (did you mean"),
    ("nightly", "team_quota_offpeak is 'nightly': give {factor, open, close}"),
])
def test_bad_offpeak_is_named(offpeak, message):
    found = problems(offpeak=offpeak, partitions=copy.deepcopy(PARTITIONS))
    assert any(p.startswith(message) for p in found), found


def test_a_partition_with_its_own_billing_weights_is_refused_with_offpeak():
    parts = [dict(PARTITIONS[0], extra={"TRESBillingWeights": "CPU=1"})]
    assert problems(offpeak=dict(OFFPEAK), partitions=parts) == [
        "partition gpu sets TRESBillingWeights itself: with off-peak pricing the team model sets it on every partition "
        "(budgets are counted in billing)"]


# -- prices ----------------------------------------------------------------------------------------------------------

def test_prices_are_checked_and_returned():
    result = model.build(TEAMS, gpu_types=["a100", "h100"], prices={"h100": 2.5, "a100": "1.2", "": 0},
                         currency="USD")
    assert result["prices"] == {"": 0, "a100": 1.2, "h100": 2.5} and result["currency"] == "USD"
    assert model.build(TEAMS)["prices"] == {} and model.build(TEAMS)["currency"] == "EUR"


@pytest.mark.parametrize("prices,currency,message", [
    ({"h100": -1}, "EUR", "team_quota_gpu_prices.h100 is -1: a price per GPU-hour is a number from 0 to"),
    ({"h100": "cheap"}, "EUR", "team_quota_gpu_prices.h100 is 'cheap': give the price of one GPU-hour as a number"),
    ({"h100": True}, "EUR", "team_quota_gpu_prices.h100 is True: give the price"),
    ({"h10": 1}, "EUR", "team_quota_gpu_prices: 'h10' is not one of the cluster's GPU types (a100, h100) (did you mean"),
    ({"H 100": 1}, "EUR", "team_quota_gpu_prices: 'H 100' is not a GPU type"),
    ([2.5], "EUR", "team_quota_gpu_prices is [2.5]: give {GPU type: price per GPU-hour}"),
    ({"h100": 1}, "euros and cents", "team_quota_currency is 'euros and cents': give a short name"),
])
def test_bad_prices_are_named(prices, currency, message):
    found = problems(gpu_types=["a100", "h100"], prices=prices, currency=currency)
    assert any(p.startswith(message) for p in found), found


def test_every_problem_at_once():
    found = problems(teams(research__shares=0), offpeak=dict(OFFPEAK, factor=2), prices={"a100": -1},
                     fairshare_weight=-1, partitions=copy.deepcopy(PARTITIONS))
    assert len(found) == 4


def test_role_defaults_are_the_models():
    import yaml
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    with open(os.path.join(root, "roles", "team_quota", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert defaults["team_quota_priority_weight_fairshare"] == model.DEFAULT_FAIRSHARE_WEIGHT
    assert defaults["team_quota_priority_weight_age"] == model.DEFAULT_AGE_WEIGHT


def test_filter_passes_everything_through():
    result = team_quotas(TEAMS, ["a100"], fairshare_weight=100, age_weight=10, calc_period="2m", offpeak=dict(OFFPEAK),
                         partitions=copy.deepcopy(PARTITIONS), prices={"a100": 1}, currency="USD")
    assert result["slurm_conf"]["PriorityWeightFairshare"] == 100 and result["slurm_conf"]["PriorityCalcPeriod"] == 2
    assert result["offpeak"]["factor"] == 0.5 and result["prices"] == {"a100": 1} and result["currency"] == "USD"
    assert team_quotas(TEAMS, offpeak=dict(OFFPEAK, factor=9), errors="return")["errors"][0].startswith(
        "team_quota_offpeak.factor is 9")
