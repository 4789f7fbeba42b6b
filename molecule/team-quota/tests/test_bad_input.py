"""Bad inventory fails in preflight, names the variable and the value, and leaves Slurm and the node as they were.

Runs the real ansible-playbook against the scenario's instances with an inventory of its own. One run carries many
mistakes at once: the role lists every problem of the model in one message.
"""

import copy
import json
import os
import re
import subprocess

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLE = os.path.join(SCENARIO, "..", "..", "roles", "team_quota")
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


def _instances():
    with open(os.environ["MOLECULE_INVENTORY_FILE"]) as f:
        inventory = yaml.safe_load(f)
    return sorted(inventory["all"]["hosts"])


def _preflight_task_names():
    with open(os.path.join(ROLE, "tasks", "preflight.yml")) as f:
        return [t["name"] for t in yaml.safe_load(f)]


def _failed_tasks(out):
    current, failed = None, set()
    for line in out.splitlines():
        task = re.match(r"TASK \[(?:[\w.]+ : )?(.+?)\] \**$", line)
        if task:
            current = task.group(1)
        elif line.startswith(("fatal:", "failed:")) and current:
            failed.add(current)
    return failed


def _snapshot(instance):
    script = ("sacctmgr -n -P show qos format=Name,Priority,GrpTRES,GrpTRESMins,Preempt,Description; "
              "sacctmgr -n -P show assoc format=Account,User,Partition,QOS; sacctmgr -n -P show user; "
              "sha256sum /etc/systemd/system/gpucluster-team-quota-reset-* /usr/local/sbin/gpucluster-team-quota-reset")
    return subprocess.run(["docker", "exec", instance, "sh", "-c", script],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name,extra,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, extra, expect):
    instances = _instances()
    inventory = {"all": {"hosts": dict((i, {"ansible_connection": "community.docker.docker",
                                            "ansible_python_interpreter": "/usr/bin/python3"}) for i in instances)}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    variables = dict(GROUP_VARS, **extra)
    if "team_quota_teams" not in extra:      # a valid model that still asks for a change that must not happen
        variables["team_quota_teams"] = dict(GROUP_VARS["team_quota_teams"], newteam={"max_concurrent": 4})
    (tmp_path / "vars.json").write_text(json.dumps(variables))

    before = dict((i, _snapshot(i)) for i in instances)
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inventory.yml"),
                           os.path.join(SCENARIO, "converge.yml"), "-e", "@%s" % (tmp_path / "vars.json")],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    out = proc.stdout + proc.stderr
    after = dict((i, _snapshot(i)) for i in instances)

    assert proc.returncode == 2, "case %s: expected failed hosts (rc 2), got rc %d\n%s" % (name, proc.returncode, out)
    flat = re.sub(r"\s+", " ", out).replace("''", "'")
    for message in expect:
        assert message in flat, "case %s: the error does not say %r\n%s" % (name, message, out)
    failed_tasks = _failed_tasks(out)
    assert failed_tasks, out
    outside = set(t for t in failed_tasks if t not in _preflight_task_names()
                  and not t.startswith("Validating arguments against arg spec 'main'"))
    assert not outside, "case %s failed outside preflight: %s" % (name, outside)
    for i in instances:
        assert re.search(r"^%s\s+: .*changed=0 .*failed=1" % re.escape(i), out, re.M), out
        assert "host %s:" % i in flat, out
        assert before[i] == after[i], "case %s changed %s:\nbefore:\n%s\nafter:\n%s" % (name, i, before[i], after[i])
