"""The health_check role's record (gpucluster.ops.role_state) on the scenario's real nodes, with the callback on.

One sequence, in order: a run that changes nothing records each node; the next run ends the role after its check on
both; then each node drifts in a way of its own (the checker's configuration edited on one, its timer stopped and
disabled on the other), and the next run notices it on that node alone, says what differs, runs the role in full
there, puts the node back, and records nothing (it changed something). Molecule's converge and idempotence ran
without the callback, so nothing was recorded before this test.
"""

import os
import re
import subprocess

import yaml

from bad_input import PLAIN_OUTPUT, inventory_hosts, recap, started_tasks

RECORD = "/var/lib/gpucluster/role-state/health_check.json"
CONFIG = "/etc/gpucluster/health.json"
TIMER = "gpucluster-health.timer"
ROLE_TASK = "gpucluster.ops.health_check : Write the checker's configuration"


def _run(tmp_path):
    play = tmp_path / "play.yml"
    # facts first, as site.yml gathers them: a role that gathers them itself (the node's OS, read in its run) is not
    # recorded
    play.write_text(yaml.safe_dump([{"name": "Role state", "hosts": "all", "gather_facts": True,
                                     "gather_subset": ["min", "virtual"],
                                     "roles": [{"role": "gpucluster.ops.health_check"}]}]))
    callbacks = os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "")
    env = dict(os.environ, ANSIBLE_CALLBACKS_ENABLED=",".join(filter(None, [callbacks, "gpucluster.ops.role_state"])),
               **PLAIN_OUTPUT)
    proc = subprocess.run(["ansible-playbook", "-v", "-i", os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]),
                           str(play)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def _sh(instance, script):
    return subprocess.run(["docker", "exec", instance, "sh", "-c", script], capture_output=True, text=True,
                          check=False)


def _reasons(out):
    """{host: reason} of the role's check results (state: check) that were not converged (from -v output)."""
    found = {}
    for match in re.finditer(r"^ok: \[([^\]]+)\] => .*?(?=^\S)", out, re.M | re.S):
        block = match.group(0)
        if "converged: false" in block and re.search(r"^\s*state: check$", block, re.M):
            reason = re.search(r"^\s*reason: (.*(?:\n\s{6,}\S.*)*)", block, re.M)
            found[match.group(1)] = " ".join(reason.group(1).split()).strip("'\"") if reason else ""
    return found


def test_a_converged_role_ends_after_its_check_and_drift_brings_it_back(tmp_path):
    hosts = inventory_hosts()
    assert len(hosts) == 2
    edited, stopped = sorted(hosts)

    out = _run(tmp_path)
    assert all(counts["changed"] == 0 for counts in recap(out).values()), out[-3000:]
    for host in hosts:
        assert _sh(host, "test -s %s" % RECORD).returncode == 0, "%s:\n%s" % (
            host, "\n".join(re.findall(r"^\s*reason: .*(?:\n\s{6,}\S.*)*", out, re.M)))

    out = _run(tmp_path)
    assert ROLE_TASK not in started_tasks(out)           # both nodes ended the role after its check
    assert "converged: true" in out and _reasons(out) == {}
    assert all(counts["changed"] == 0 for counts in recap(out).values())

    config_before = _sh(edited, "sha256sum %s" % CONFIG).stdout
    _sh(edited, "echo ' ' >> %s" % CONFIG)
    _sh(stopped, "systemctl disable --now %s" % TIMER)
    out = _run(tmp_path)
    reasons = _reasons(out)
    assert set(reasons) == {edited, stopped}, out[-3000:]
    assert reasons[edited].startswith("file %s: sha256" % CONFIG), reasons
    assert reasons[stopped].startswith("unit %s: ActiveState=active" % TIMER), reasons
    assert "-> ActiveState=inactive" in reasons[stopped] and "UnitFileState=disabled" in reasons[stopped], reasons
    counts = recap(out)
    assert counts[edited]["changed"] >= 1 and counts[stopped]["changed"] >= 1
    assert _sh(edited, "sha256sum %s" % CONFIG).stdout == config_before
    assert _sh(stopped, "systemctl is-active %s && systemctl is-enabled %s" % (TIMER, TIMER)).returncode == 0
    for host in hosts:                                   # a run that changed something stands for nothing
        assert _sh(host, "test -e %s" % RECORD).returncode != 0, host
