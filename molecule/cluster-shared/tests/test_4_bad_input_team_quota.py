"""Bad team quotas fail in preflight, name the variable and the value, and leave Slurm and the node as they were.

Runs the real ansible-playbook (the team_quota role on the controller, as site.yml runs it) with the bad teams as
extra variables. Debian 12 only: the checks are the role's, the same on both releases.
"""

import os

import pytest
import yaml

from bad_input import assert_refused_before_change, snapshot

pytestmark = pytest.mark.release("debian12")
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "group_vars", "all.yml")) as _f:
    GROUP_VARS = yaml.safe_load(_f)


# One case end to end: its verdict is what the node's systemd-analyze accepts, and a valid model that adds a team
# must leave Slurm as it was. The model's mistakes are a unit test (tests/unit/roles/test_bad_input_preflight.py).
CASES = [
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
