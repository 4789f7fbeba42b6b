"""Fault 4: a run killed in the middle of the Slurm role's distribution of its files (issue 23).

Debian 12 only: Slurm 22.05 with local copies pushed to every node, where a mix of old and new files could happen
(Debian 13 is configless: the compute nodes hold no copies).

The run (playbooks/slurm.yml: the slurm role as site.yml's Slurm play runs it) gets a new configuration (a
slurm.conf key and a cgroup.conf key, so that the new set differs from the old in two files) and is killed with
SIGKILL by a test-only callback (callback_plugins/gpucluster_kill_at.py) the moment the distribution task finished
on the first compute node: forks=1, so the controller switched, that node switched and the other node had not
started. Every node's /etc/slurm files must then be all old or all new (sha256 of each file against the two sets),
and slurmctld still runs the old configuration (its handlers never ran). The next run, not interrupted, converges
with failed=0, tells the daemons what the killed run did not (slurmctld's live KillWait), and leaves the new set on
every node; the fixture puts the old configuration back, checked the same way.
"""

import json
import os
import re

import pytest
import yaml

from bad_input import changed_tasks, recap
from conftest import ROOT, node_records
from faults import report

pytestmark = pytest.mark.release("debian12")
# A fault module (conftest): after every other module.
FAULT_TEST = True

FILES = ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf")
KILL_TASK = "Install the configuration checked on the controller, every file in one switch"
CALLBACKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "callback_plugins")
NEW_KILLWAIT = 31


def _files(host):
    """{file: sha256} of what a reader of /etc/slurm/<file> sees on a host."""
    out = host.check_output("cd /etc/slurm && for f in %s; do [ -e \"$f\" ] && echo \"$f $(sha256sum < \"$f\" | cut -d' ' -f1)\"; done; true"
                            % " ".join(FILES))
    return dict(line.split() for line in out.splitlines())


def _marks(host):
    return host.check_output("cd /etc/slurm/.gpucluster 2>/dev/null && echo $(readlink current) $(readlink applied); true")


def _killwait(ctl):
    return re.search(r"^KillWait\s*=\s*(\d+)", ctl.check_output("scontrol show config"), re.M).group(1)


def _new_vars(scenario):
    with open(os.path.join(ROOT, "roles", "slurm", "defaults", "main.yml")) as handle:
        cgroup = yaml.safe_load(handle)["slurm_cgroup_conf"]
    return {"slurm_config_overrides": dict(scenario.group_vars["all"]["slurm_config_overrides"], KillWait=NEW_KILLWAIT),
            "slurm_cgroup_conf": dict(cgroup, AllowedRAMSpace=95)}


def _nodes(scenario):
    return [scenario.controller] + [h for h in scenario.compute if h != scenario.controller]


@pytest.fixture
def old_config(scenario, tmp_path):
    """The configuration before the test, put back after it (the reset does not know about it)."""
    nodes = _nodes(scenario)
    before = {h: _files(scenario.host(h)) for h in nodes}
    assert len({json.dumps(s, sort_keys=True) for s in before.values()}) == 1, before
    yield before[scenario.controller]
    rc, out = scenario.playbook(tmp_path, "slurm.yml")
    assert rc == 0 and all(c["failed"] == 0 for c in recap(out).values()), out
    for host in nodes:
        assert _files(scenario.host(host)) == before[host], host


def test_a_run_killed_in_the_distribution_leaves_no_mix_and_the_next_converges(scenario, ctl, old_config, tmp_path,
                                                                               monkeypatch):
    nodes = _nodes(scenario)
    old_killwait = _killwait(ctl)
    assert old_killwait != str(NEW_KILLWAIT)
    record = tmp_path / "killed-after.json"
    with monkeypatch.context() as env:
        env.setenv("ANSIBLE_CALLBACK_PLUGINS", CALLBACKS)
        env.setenv("ANSIBLE_CALLBACKS_ENABLED", "gpucluster.ops.preload,gpucluster_kill_at")  # ansible.cfg's and the fault's
        env.setenv("ANSIBLE_FORKS", "1")
        env.setenv("GPUCLUSTER_KILL_AT_TASK", KILL_TASK)
        env.setenv("GPUCLUSTER_KILL_AT_RECORD", str(record))
        rc, out = scenario.playbook(tmp_path, "slurm.yml", extra_vars=_new_vars(scenario))
    assert rc == -9 and record.exists(), (rc, out[-3000:])
    killed_after = json.loads(record.read_text())
    first = [h for h in nodes if h != scenario.controller][0]
    assert killed_after == [first], killed_after

    # at the kill point: the controller and the first node switched, the other not; no node with a mix
    new = _files(ctl)
    changed_files = sorted(f for f in FILES if new.get(f) != old_config.get(f))
    assert changed_files == ["cgroup.conf", "slurm.conf"], (old_config, new)
    at_kill = {}
    for host in nodes:
        live = _files(scenario.host(host))
        assert live in (old_config, new), (host, live)
        at_kill[host] = "new" if live == new else "old"
    assert at_kill == {h: "new" if h in (scenario.controller, first) else "old" for h in nodes}, at_kill
    assert _killwait(ctl) == old_killwait  # the handlers never ran
    stale = _marks(ctl).split()
    assert len(stale) == 2 and stale[0] != stale[1], stale  # switched, not applied

    # the next run finishes the switch and tells the daemons
    rc, out = scenario.playbook(tmp_path, "slurm.yml", extra_vars=_new_vars(scenario))
    counters = recap(out)
    assert rc == 0 and all(counters[h]["failed"] == 0 for h in nodes), out
    installed = changed_tasks(out)
    for host in nodes:
        assert _files(scenario.host(host)) == new, host
        current, applied = _marks(scenario.host(host)).split()
        assert current == applied, (host, current, applied)
    assert set(installed.get(KILL_TASK, [])) == set(nodes) - {scenario.controller}, installed
    assert scenario.controller in installed.get("Install the checked configuration, every file in one switch", []), installed
    assert _killwait(ctl) == str(NEW_KILLWAIT)
    records = node_records(ctl, scenario.compute)
    assert all("DOWN" not in r["State"] for r in records.values()), records
    for host in scenario.compute:
        # slurmd and the Slurm commands read through the symlinks
        node = scenario.host(host)
        assert node.check_output("readlink /etc/slurm/slurm.conf") == ".gpucluster/current/slurm.conf"
        assert re.search(r"^KillWait\s*=\s*%d" % NEW_KILLWAIT, node.check_output("scontrol show config"), re.M)
        assert node.service("slurmd").is_running

    report("interrupted distribution",
           "playbooks/slurm.yml with a new slurm.conf (KillWait=%d) and cgroup.conf (AllowedRAMSpace=95), SIGKILLed "
           "(forks=1) when '%s' had finished on %s" % (NEW_KILLWAIT, KILL_TASK, first),
           ["at the kill point every node had one whole set (sha256 of %s): %s" % (", ".join(FILES), at_kill),
            "slurmctld still ran the old configuration (KillWait=%s); current != applied on the controller"
            % old_killwait,
            "the rerun: failed=0 on %s; it switched the rest and re-notified the switched nodes" % ", ".join(nodes),
            "after it: the new set on every node, applied == current, slurmctld's KillWait=%d, slurmd running"
            % NEW_KILLWAIT,
            "the old configuration put back by the fixture (checked per node)"])
