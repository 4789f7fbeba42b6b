"""slurm_qos and slurm_account against a fake sacctmgr (patched run_command): every diff case and bad input."""

import copy

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _sacctmgr
from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build
from ansible_collections.gpucluster.ops.plugins.modules import slurm_account, slurm_qos
from ansible_collections.gpucluster.ops.tests.unit.plugins.fake_sacctmgr import FakeSacctmgr
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

SEED = {
    "research": {"gpu_hours": "20000/month", "max_concurrent": 16, "priority": "high",
                 "can_preempt": ["development"], "members": ["alice", {"name": "carol", "default": True}]},
    "development": {"gpu_hours": "5000/month", "max_concurrent": 8, "priority": "medium",
                    "min_runtime_before_preemption": "30m", "members": ["bob", "carol"]},
}


_FAKE = {}


@pytest.fixture
def fake():
    """The fake accounting database that ``run`` sends this test's sacctmgr commands to."""
    _FAKE["db"] = FakeSacctmgr()
    yield _FAKE["db"]
    _FAKE.clear()


def run(module, args, check=False):
    """main() of ``module`` with ``args`` against the ``fake`` fixture's sacctmgr; return the result."""
    db = _FAKE["db"]

    def run_command(argv, **kwargs):
        assert kwargs.get("environ_update", {}).get("LC_ALL") == "C"
        return db(argv)
    return run_module(module, args, check=check, run_command=run_command)


def seed_model(teams=None, **options):
    return build(copy.deepcopy(teams or SEED), gpu_types=["a100", "h100"], **options)


def run_account(_fake, accounts, users):
    return run(slurm_account, {"accounts": accounts, "users": users})


def apply_seed(fake, teams=None):
    model = seed_model(teams)
    q = run(slurm_qos, {"qos": model["slurm"]["qos"]})
    a = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})
    return model, q, a


# -- the runner (the values: tests/unit/plugins/module_utils/test_slurm_values.py) -----------------------------------

def test_show_keeps_a_description_with_a_bar():
    sacct = _sacctmgr.Sacctmgr(lambda argv: (0, "a|1|x|y|z\n", ""))
    assert sacct.show("qos", ["Name", "Priority", "Description"]) == [{"Name": "a", "Priority": "1",
                                                                       "Description": "x|y|z"}]
    sacct = _sacctmgr.Sacctmgr(lambda argv: (1, "", "sacctmgr: error: Problem talking to the database"))
    with pytest.raises(_sacctmgr.SacctmgrError) as caught:
        sacct.show("qos", ["Name"])
    assert "Problem talking to the database" in str(caught.value)


# -- slurm_qos -------------------------------------------------------------------------------------------------------

def test_qos_first_run_adds_then_sets_preempt_and_second_run_changes_nothing(fake):
    model = seed_model()
    first = run(slurm_qos, {"qos": model["slurm"]["qos"]})
    assert first["changed"] and not first["failed"]
    assert [c.split(" where")[0].split(" ")[2:4] for c in first["commands"]] == [
        ["add", "qos"], ["add", "qos"], ["modify", "qos"]]
    assert first["commands"][2] == "sacctmgr -i modify qos where name=research set Preempt=development"
    assert "sacctmgr -i add qos development 'Description=gpucluster.ops: team development' Priority=500 " \
           "Flags=DenyOnLimit,NoDecay GrpTRES=gres/gpu:a100=-1,gres/gpu:h100=-1,gres/gpu=8" not in first["commands"][0]
    stored = fake.qos["development"]
    assert stored["GrpTRES"] == {"gres/gpu": "8"} and stored["GrpTRESMins"] == {"gres/gpu": "300000"}
    assert stored["PreemptExemptTime"] == "00:30:00" and stored["PreemptMode"] == "requeue"
    assert stored["Flags"] == "DenyOnLimit,NoDecay" and fake.qos["research"]["Preempt"] == "development"
    assert first["qos"]["research"]["grp_tres_mins"] == {"gres/gpu": 1200000}
    assert first["diff"]["after"].startswith("development: Priority=500 Flags=DenyOnLimit,NoDecay GrpTRES=gres/gpu=8")
    assert first["diff"]["before"] == ""
    calls = len(fake.changes)
    second = run(slurm_qos, {"qos": model["slurm"]["qos"]})
    assert not second["changed"] and second["commands"] == [] and len(fake.changes) == calls
    assert second["diff"]["before"] == second["diff"]["after"] == ""


def test_qos_changed_limit_is_the_only_change_and_shows_in_the_diff(fake):
    apply_seed(fake)
    teams = copy.deepcopy(SEED)
    teams["research"]["max_concurrent"] = 24
    result = run(slurm_qos, {"qos": seed_model(teams)["slurm"]["qos"]})
    assert result["commands"] == ["sacctmgr -i modify qos where name=research set GrpTRES=gres/gpu=24"]
    assert result["changes"] == [{"action": "modify", "name": "research",
                                  "changes": {"grp_tres": [{"gres/gpu": 16}, {"gres/gpu": 24}]}}]
    assert "GrpTRES=gres/gpu=16" in result["diff"]["before"] and "GrpTRES=gres/gpu=24" in result["diff"]["after"]
    assert "development:" not in result["diff"]["before"] + result["diff"]["after"]


@pytest.mark.parametrize("change,expected", [
    ({"priority": 7}, "Priority=7"),
    ({"flags": ["NoDecay"]}, "Flags=NoDecay"),
    ({"flags": []}, "Flags=-1"),
    ({"grp_tres": {"gres/gpu": 8, "gres/gpu:h100": 0}}, "gres/gpu:h100=0"),
    ({"grp_tres": {}}, "GrpTRES=gres/gpu=-1"),
    ({"grp_tres_mins": {"gres/gpu": 60}}, "GrpTRESMins=gres/gpu=60"),
    ({"preempt": ["research"]}, "Preempt=research"),
    ({"preempt_mode": "cancel"}, "PreemptMode=cancel"),
    ({"preempt_exempt_time": 0}, "PreemptExemptTime=-1"),
    ({"preempt_exempt_time": "2h"}, "PreemptExemptTime=02:00:00"),
    ({"preempt_exempt_time": "2d"}, "PreemptExemptTime=2-00:00:00"),
    ({"description": "other"}, "Description=other"),
])
def test_qos_each_option_change(fake, change, expected):
    apply_seed(fake)
    spec = dict({"name": "development"}, **change)
    if "preempt" in change:
        fake.qos["research"]["Preempt"] = ""
    result = run(slurm_qos, {"qos": [spec]})
    assert result["changed"] and not result["failed"], result
    assert result["commands"][0].startswith("sacctmgr -i modify qos where name=development set ")
    assert expected in result["commands"][0]
    again = run(slurm_qos, {"qos": [spec]})
    assert not again["changed"], again["commands"]


def test_descriptions_are_compared_as_slurm_stores_them(fake):
    apply_seed(fake)
    spec = {"name": "research", "description": "Research Group"}
    first = run(slurm_qos, {"qos": [spec]})
    assert first["commands"] == ["sacctmgr -i modify qos where name=research set 'Description=research group'"]
    assert not first["failed"] and not run(slurm_qos, {"qos": [spec]})["changed"]
    account = {"name": "research", "description": "Research Group", "organization": "GPUcluster.ops"}
    first = run(slurm_account, {"accounts": [account]})
    assert not first["failed"] and not run(slurm_account, {"accounts": [account]})["changed"]


def test_qos_unmanaged_options_are_left_alone(fake):
    apply_seed(fake)
    result = run(slurm_qos, {"qos": [{"name": "research", "priority": 1000}]})
    assert not result["changed"]


def test_qos_check_mode_runs_nothing(fake):
    model = seed_model()
    result = run(slurm_qos, {"qos": model["slurm"]["qos"]}, check=True)
    assert result["changed"] and len(result["commands"]) == 3
    assert fake.changes == [] and set(fake.qos) == {"normal"}


def test_qos_state_absent_and_prune(fake):
    apply_seed(fake)
    fake.qos["oldteam"] = fake._new_qos("oldteam", "gpucluster.ops: team oldteam")
    fake.qos["handmade"] = fake._new_qos("handmade", "made by hand")
    specs = seed_model()["slurm"]["qos"]
    kept = run(slurm_qos, {"qos": specs})
    assert not kept["changed"] and "oldteam" in fake.qos
    pruned = run(slurm_qos, {"qos": specs, "prune": True, "managed_prefix": "gpucluster.ops: "})
    assert pruned["commands"] == ["sacctmgr -i delete qos where name=oldteam"]
    assert "oldteam" not in fake.qos and "handmade" in fake.qos and "normal" in fake.qos
    assert pruned["diff"]["before"].startswith("oldteam:") and pruned["diff"]["after"] == ""
    absent = run(slurm_qos, {"qos": [{"name": "handmade", "state": "absent"}]})
    assert absent["commands"] == ["sacctmgr -i delete qos where name=handmade"] and "handmade" not in fake.qos
    assert not run(slurm_qos, {"qos": [{"name": "handmade", "state": "absent"}]})["changed"]


def test_qos_prune_needs_the_marker(fake):
    result = run(slurm_qos, {"qos": [], "prune": True})
    assert result["failed"] and "managed_prefix" in result["msg"]


def test_qos_read_back_catches_a_silent_coercion(fake):
    apply_seed(fake)
    fake.coerce[("qos", "research", "grptresmins")] = "gres/gpu=abc"     # what sacctmgr stores as 0, rc 0
    result = run(slurm_qos, {"qos": [{"name": "research", "grp_tres_mins": {"gres/gpu": 60}}]})
    assert result["failed"]
    assert "qos research: Slurm stored grp_tres_mins={'gres/gpu': 0}, wanted {'gres/gpu': 60}" in result["msg"]
    assert "sacctmgr said: sacctmgr -i modify qos where name=research set GrpTRESMins=gres/gpu=60 -> rc 0" in result["msg"]


def test_qos_read_back_catches_a_refused_command(fake):
    fake.fail_on = "add qos research"
    result = run(slurm_qos, {"qos": seed_model()["slurm"]["qos"]})
    assert result["failed"] and "qos research: does not exist after the add" in result["msg"]
    assert "simulated failure" in result["msg"]


@pytest.mark.parametrize("spec,message", [
    ({"name": "Research"}, "qos[0].name is 'Research'"),
    ({"name": "r", "priority": -1}, "qos r: priority is -1: it must be from 0 to 4294967294"),
    ({"name": "r", "flags": ["NoDecayy"]}, "qos r: flags has 'NoDecayy', which is not a QOS flag"),
    ({"name": "r", "grp_tres": {"gres/gpu": "abc"}}, "qos r: grp_tres[gres/gpu] is 'abc', which is not a whole number"),
    ({"name": "r", "grp_tres": {"gres/gpu": -2}}, "qos r: grp_tres[gres/gpu] is -2"),
    ({"name": "r", "grp_tres": {"gpus": 2}}, "qos r: grp_tres has TRES 'gpus'"),
    ({"name": "r", "grp_tres_mins": {"gres/gpu": True}}, "grp_tres_mins[gres/gpu] is True"),
    ({"name": "r", "preempt": ["r"]}, "qos r: preempt names the QOS itself"),
    ({"name": "r", "preempt_exempt_time": "30"}, "qos r: preempt_exempt_time is '30': a number in a string"),
    ({"name": "r", "preempt_exempt_time": 172800}, "qos r: preempt_exempt_time is 172800: a bare number is ambiguous"),
    ({"name": "r", "description": "a|b"}, "qos r: description is 'a|b'"),
    ({"name": "r", "grp_tres": {"gres/gpu:b200": 1}}, "names TRES gres/gpu:b200, which this cluster does not track"),
    ({"name": "r", "preempt": ["ghost"]}, "qos r: preempt names QOS ghost, which neither exists nor is listed"),
])
def test_qos_bad_input_fails_before_any_change(fake, spec, message):
    result = run(slurm_qos, {"qos": [spec]})
    assert result["failed"] and message in result["msg"], result["msg"]
    assert fake.changes == []


def test_qos_duplicates_fail(fake):
    result = run(slurm_qos, {"qos": [{"name": "a"}, {"name": "a"}]})
    assert result["failed"] and "qos lists a more than once" in result["msg"]


# -- slurm_account ---------------------------------------------------------------------------------------------------

def test_account_fairshare_set_read_back_and_idempotent(fake):
    model, _q, first = apply_seed(fake)
    assert not first["failed"], first.get("msg")
    accounts = [dict(a, fairshare=5) if a["name"] == "research" else a for a in model["slurm"]["accounts"]]
    changed = run_account(fake, accounts=accounts, users=model["slurm"]["users"])
    assert changed["changed"] and not changed["failed"], changed.get("msg")
    assert "sacctmgr -i modify account where name=research cluster=lab set Fairshare=5" in changed["commands"]
    assert changed["accounts"]["research"]["fairshare"] == 5
    assert changed["accounts"]["development"]["fairshare"] == 1
    again = run_account(fake, accounts=accounts, users=model["slurm"]["users"])
    assert not again["changed"] and not again["failed"]


def test_account_fairshare_not_stored_fails(fake):
    model, _q, _first = apply_seed(fake)
    fake.coerce[("account", "research", "fairshare")] = "1"
    accounts = [dict(a, fairshare=7) if a["name"] == "research" else a for a in model["slurm"]["accounts"]]
    result = run_account(fake, accounts=accounts, users=model["slurm"]["users"])
    assert result["failed"] and "account research: Slurm stored fairshare=1, wanted 7" in result["msg"]


@pytest.mark.parametrize("bad", [0, -3, "many", True])
def test_account_fairshare_bad_value(fake, bad):
    result = run_account(fake, accounts=[{"name": "research", "fairshare": bad}], users=[])
    assert result["failed"] and "fairshare" in result["msg"] and str(bad).lower() in result["msg"].lower()
    assert not any(c for c in fake.calls if "-i" in c)


def test_accounts_first_run_then_no_change(fake):
    model, _q, first = apply_seed(fake)
    assert first["changed"] and not first["failed"], first.get("msg")
    assert first["cluster"] == "lab"
    assert "sacctmgr -i add account development cluster=lab 'Description=team development' " \
           "Organization=gpucluster.ops Parent=root QOS=development DefaultQOS=development Fairshare=1" in first["commands"]
    assert "sacctmgr -i add user carol account=research cluster=lab defaultaccount=research" in first["commands"]
    assert "sacctmgr -i add user carol account=development cluster=lab" in first["commands"]
    assert first["users"]["carol"] == {"default_account": "research", "associations": [
        {"account": "development", "partition": ""}, {"account": "research", "partition": ""}]}
    assert first["accounts"]["research"]["default_qos"] == "research"
    again = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})
    assert not again["changed"] and again["commands"] == []


def test_accounts_check_mode_before_the_qos_exist(fake):
    model = seed_model()
    result = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]}, check=True)
    assert not result["failed"] and result["changed"] and fake.changes == []
    assert "QOS research does not exist yet; in check mode it is assumed that an earlier task creates it" \
        in result["warnings"]
    failed = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})
    assert failed["failed"] and "account research: QOS research does not exist" in failed["msg"]


def test_accounts_check_mode_runs_nothing(fake):
    run(slurm_qos, {"qos": seed_model()["slurm"]["qos"]})
    before = len(fake.changes)
    model = seed_model()
    result = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]}, check=True)
    assert result["changed"] and result["commands"] and len(fake.changes) == before


def test_user_moves_default_before_the_old_association_goes(fake):
    apply_seed(fake)
    teams = copy.deepcopy(SEED)
    teams["research"]["members"] = ["alice"]                   # carol leaves research, her default team
    teams["development"]["members"] = ["bob", "carol"]
    model = seed_model(teams)
    result = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})
    assert result["commands"] == [
        "sacctmgr -i modify user where name=carol set defaultaccount=development",
        "sacctmgr -i delete user where name=carol account=research cluster=lab partition="]
    assert fake.users["carol"] == "development"
    assert "user carol: DefaultAccount=research Associations=development,research" in result["diff"]["before"]
    assert "user carol: DefaultAccount=development Associations=development" in result["diff"]["after"]


def test_partition_associations(fake):
    apply_seed(fake)
    teams = copy.deepcopy(SEED)
    teams["development"]["partitions"] = ["dev"]
    model = seed_model(teams)
    result = run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})
    assert "sacctmgr -i add user bob account=development cluster=lab partition=dev" in result["commands"]
    assert "sacctmgr -i delete user where name=bob account=development cluster=lab partition=" in result["commands"]
    # sacctmgr empties bob's default account when his development association goes, though development/dev stays
    assert result["commands"][-1] == "sacctmgr -i modify user where name=bob set defaultaccount=development"
    assert [a for a in fake.assocs if a["User"] == "bob"][0]["Partition"] == "dev"
    assert fake.users["bob"] == "development"
    assert not run(slurm_account, {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]})["changed"]


def test_account_option_changes(fake):
    apply_seed(fake)
    fake.qos["extra"] = fake._new_qos("extra")
    spec = {"name": "research", "description": "Research group", "qos": ["extra", "research"],
            "default_qos": "research"}
    result = run(slurm_account, {"accounts": [spec]})
    assert result["commands"] == ["sacctmgr -i modify account where name=research cluster=lab set "
                                  "'Description=research group' QOS=extra,research"]
    assert not run(slurm_account, {"accounts": [spec]})["changed"]


def test_unlisted_users_are_left_alone_without_prune_and_removed_with_it(fake):
    model, _q, _a = apply_seed(fake)
    fake.assocs.append({"Cluster": "lab", "Account": "research", "ParentName": "", "User": "mallory",
                        "Partition": "", "QOS": "research", "DefaultQOS": "research"})
    fake.users["mallory"] = "research"
    args = {"accounts": model["slurm"]["accounts"], "users": model["slurm"]["users"]}
    assert not run(slurm_account, args)["changed"]
    pruned = run(slurm_account, dict(args, prune=True, managed_organization="gpucluster.ops"))
    assert pruned["commands"] == ["sacctmgr -i delete user where name=mallory account=research cluster=lab partition="]
    assert "mallory" not in fake.users
    assert "user mallory: DefaultAccount=research Associations=research" in pruned["diff"]["before"]


def test_prune_removes_only_our_accounts(fake):
    model, _q, _a = apply_seed(fake)
    teams = copy.deepcopy(SEED)
    del teams["development"]
    teams["research"]["members"] = ["alice", "carol"]
    teams["research"]["can_preempt"] = []
    fake.accounts["legacy"] = {"Description": "by hand", "Organization": "physics"}
    fake.assocs.append({"Cluster": "lab", "Account": "legacy", "ParentName": "root", "User": "", "Partition": "",
                        "QOS": "normal", "DefaultQOS": ""})
    smaller = seed_model(teams)
    args = {"accounts": smaller["slurm"]["accounts"], "users": smaller["slurm"]["users"], "prune": True,
            "managed_organization": "gpucluster.ops"}
    result = run(slurm_account, args)
    assert not result["failed"], result["msg"]
    assert result["commands"] == [
        "sacctmgr -i delete user where name=bob account=development cluster=lab partition=",
        "sacctmgr -i delete user where name=carol account=development cluster=lab partition=",
        "sacctmgr -i delete account where name=development cluster=lab"]
    assert "development" not in result["accounts"] and "legacy" in result["accounts"]
    assert "bob" not in fake.users
    assert not run(slurm_account, args)["changed"]


def test_state_absent_account_and_user(fake):
    model, _q, _a = apply_seed(fake)
    result = run(slurm_account, {"accounts": [{"name": "development", "state": "absent"}],
                                 "users": [{"name": "alice", "state": "absent"}]})
    assert not result["failed"], result["msg"]
    # alice's research association stays: research is not managed in this call
    assert "alice" in fake.users
    assert "sacctmgr -i delete user where name=bob account=development cluster=lab partition=" in result["commands"]
    assert result["commands"][-1] == "sacctmgr -i delete account where name=development cluster=lab"
    assert "carol" in fake.users and fake.users["carol"] == "research"


def test_account_read_back_catches_a_coercion(fake):
    apply_seed(fake)
    fake.coerce[("account", "research", "description")] = "something else"
    result = run(slurm_account, {"accounts": [{"name": "research", "description": "Research group"}]})
    assert result["failed"]
    assert "account research: Slurm stored description='something else', wanted 'research group'" in result["msg"]


@pytest.mark.parametrize("args,message", [
    ({"accounts": [{"name": "root"}]}, "the root account is Slurm's own"),
    ({"accounts": [{"name": "Team A"}]}, "accounts[0].name is 'Team A'"),
    ({"accounts": [{"name": "a", "qos": ["x"], "default_qos": "y"}]}, "default_qos y is not in its qos list"),
    ({"accounts": [{"name": "a", "qos": ["ghost"]}]}, "account a: QOS ghost does not exist"),
    ({"accounts": [{"name": "a", "parent": "nowhere"}]}, "account a: parent nowhere does not exist"),
    ({"accounts": [{"name": "a", "description": "it's"}]}, "account a: description is \"it's\""),
    ({"users": [{"name": "alice"}]}, "user alice: associations is None"),
    ({"users": [{"name": "alice", "associations": ["nowhere"]}]},
     "user alice: account nowhere does not exist on cluster lab and is not listed"),
    ({"users": [{"name": "alice", "associations": ["research"], "default_account": "development"}]},
     "user alice: default_account development is not one of its associations' accounts"),
    ({"users": [{"name": "alice", "associations": ["research", "research"]}]}, "associations lists research twice"),
    ({"users": [{"name": "Alice", "associations": ["research"]}]}, "users[0].name is 'Alice'"),
    ({"users": [{"name": "alice", "associations": [{"account": "research", "partition": "a b"}]}]},
     "associations[0].partition is 'a b'"),
    ({"accounts": [{"name": "research", "state": "absent"}], "users": [{"name": "alice", "associations": ["research"]}]},
     "user alice: association with account research, which is to be absent"),
    ({"cluster": "other"}, "cluster 'other' is not registered in slurmdbd (known: lab)"),
    ({"prune": True}, "managed_organization"),
    ({"users": [{"name": "a", "associations": ["research"]}, {"name": "a", "associations": ["research"]}]},
     "users lists a more than once"),
])
def test_account_bad_input_fails_before_any_change(fake, args, message):
    run(slurm_qos, {"qos": seed_model()["slurm"]["qos"]})
    fake.changes = []
    if "research" in str(args):
        model = seed_model()
        run(slurm_account, {"accounts": model["slurm"]["accounts"]})
        fake.changes = []
    result = run(slurm_account, args)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert fake.changes == []


def test_cluster_must_be_named_when_there_are_several(fake):
    fake.clusters = ["a", "b"]
    result = run(slurm_account, {"accounts": []})
    assert result["failed"] and "slurmdbd knows 2 clusters (a, b): name one with the cluster option" in result["msg"]


def test_offpeak_budget_in_billing_is_stored_and_read_back(fake):
    offpeak = {"factor": 0.5, "open": "Mon..Fri *-*-* 20:00:00", "close": "Mon..Fri *-*-* 07:00:00"}
    model = seed_model(offpeak=offpeak)
    first = run(slurm_qos, {"qos": model["slurm"]["qos"]})
    assert first["changed"] and not first["failed"], first.get("msg")
    assert fake.qos["research"]["GrpTRESMins"] == {"billing": str(20000 * 60 * 1000)}
    again = run(slurm_qos, {"qos": model["slurm"]["qos"]})
    assert not again["changed"] and not again["failed"]
