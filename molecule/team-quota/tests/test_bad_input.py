"""Bad inventory fails in preflight, names the variable and the value, and leaves Slurm and the node as they were.

Runs the real ansible-playbook against the scenario's instances with an inventory of its own. One run carries many
mistakes at once: the role lists every problem of the model in one message.
"""

import copy
import json
import os

import pytest
import yaml

from bad_input import assert_refused_before_change, docker_hosts, inventory_hosts, run_playbook, snapshot

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(SCENARIO, "molecule.yml")) as _f:
    GROUP_VARS = yaml.safe_load(_f)["provisioner"]["inventory"]["group_vars"]["all"]


def _bad_teams():
    teams = copy.deepcopy(GROUP_VARS["team_quota_teams"])
    teams["research"]["gpu_hours"] = "20000/montly"
    teams["research"]["members"] = ["alice", "carol"]          # carol in both teams, no default
    teams["development"]["max_concurrent"] = -8
    teams["development"]["priority"] = "urgent"
    teams["development"]["can_preempt"] = ["development"]
    teams["newteam"] = {"max_concurrent": 4, "members": ["dave"]}   # must not appear
    return teams


CASES = [
    ("model", {"team_quota_teams": _bad_teams()}, [
        "team_quota_teams.research.gpu_hours is '20000/montly': unknown period 'montly' (did you mean 'month'?)",
        "team_quota_teams.development.max_concurrent is -8: a limit cannot be negative",
        "team_quota_teams.development.priority is 'urgent': unknown priority",
        "team_quota_teams.development.can_preempt: team development cannot preempt itself",
        "user carol is in teams development, research without a default"]),
    ("calendar", {"team_quota_reset_on_calendar": {"month": "first of the month"}},
     ["team_quota_reset_on_calendar has values systemd cannot read: month: 'first of the month'"]),
]


WATCHED = ["/etc/systemd/system/gpucluster-team-quota-reset-*", "/usr/local/sbin/gpucluster-team-quota-reset"]
SLURM_RECORDS = ("sacctmgr -n -P show qos format=Name,Priority,GrpTRES,GrpTRESMins,Preempt,Description; "
                 "sacctmgr -n -P show assoc format=Account,User,Partition,QOS; sacctmgr -n -P show user")


@pytest.mark.parametrize("name,extra,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, extra, expect):
    instances = inventory_hosts()
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": docker_hosts(instances)}}))
    variables = dict(GROUP_VARS, **extra)
    if "team_quota_teams" not in extra:      # a valid model that still asks for a change that must not happen
        variables["team_quota_teams"] = dict(GROUP_VARS["team_quota_teams"], newteam={"max_concurrent": 4})
    (tmp_path / "vars.json").write_text(json.dumps(variables))

    before = {i: snapshot(i, WATCHED, SLURM_RECORDS) for i in instances}
    rc, out = run_playbook(tmp_path / "inventory.yml", os.path.join(SCENARIO, "converge.yml"), tmp_path / "vars.json")
    after = {i: snapshot(i, WATCHED, SLURM_RECORDS) for i in instances}
    assert_refused_before_change(name, rc, out, ["team_quota"], expect + ["host %s:" % i for i in instances],
                                 before, after)
