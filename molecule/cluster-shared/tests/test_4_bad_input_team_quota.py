"""Bad team quotas fail in preflight, name the variable and the value, and leave Slurm and the node as they were.

Runs the real ansible-playbook (the team_quota role on the controller, as site.yml runs it) with the bad teams as
extra variables. One run carries many mistakes at once: the role lists every problem of the model in one message.
Debian 12 only: the checks are the role's, the same on both releases.
"""

import copy
import os

import pytest
import yaml

from bad_input import assert_refused_before_change, snapshot

pytestmark = pytest.mark.release("debian12")
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "group_vars", "all.yml")) as _f:
    GROUP_VARS = yaml.safe_load(_f)


def _bad_teams():
    teams = copy.deepcopy(GROUP_VARS["team_quota_teams"])
    teams["research"]["gpu_hours"] = "6000/montly"
    teams["research"]["members"] = ["alice", "carol"]          # carol in both teams, no default
    teams["development"]["max_concurrent"] = -8
    teams["development"]["priority"] = "urgent"
    teams["development"]["can_preempt"] = ["development"]
    teams["newteam"] = {"max_concurrent": 4, "members": ["dave"]}   # must not appear
    return teams


CASES = [
    ("model", {"team_quota_teams": _bad_teams()}, [
        "team_quota_teams.research.gpu_hours is '6000/montly': unknown period 'montly' (did you mean 'month'?)",
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
def test_bad_input_fails_in_preflight(scenario, tmp_path, name, extra, expect):
    variables = dict(extra)
    if "team_quota_teams" not in extra:      # a valid model that still asks for a change that must not happen
        variables["team_quota_teams"] = dict(GROUP_VARS["team_quota_teams"], newteam={"max_concurrent": 4})
    ctl = scenario.controller
    before = {ctl: snapshot(ctl, WATCHED, SLURM_RECORDS)}
    rc, out = scenario.playbook(tmp_path, "team_quota.yml", extra_vars=variables)
    after = {ctl: snapshot(ctl, WATCHED, SLURM_RECORDS)}
    assert_refused_before_change(name, rc, out, ["team_quota"], expect + ["host %s:" % ctl], before, after)
