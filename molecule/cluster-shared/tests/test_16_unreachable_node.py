"""Fault 5: one GPU node unreachable during site.yml and the health sweep (issue 23).

The node's container is stopped (faults.stop: systemd and every daemon gone, its name no longer resolves), and
Ansible reaches it by community.docker.docker_api, which reports a stopped container as unreachable as SSH reports a
dead host (the docker CLI connection reports a failed task instead: "Container ... is not running"). site.yml
runs the parts test_0 reruns on Debian 12 (tags health, slurm, quota) and the health sweep runs
(playbooks/health_sweep.yml): both must finish on the other hosts with failed=0 and report the node unreachable
(the recap; the sweep's fleet report says unreachable, never ok). Nothing on the others may be skipped silently: each
other host gets, task by task, the same results (ok/changed as ok, skipped) as in the same run once the node is back,
which the module runs last. The node is started again (faults.start) before that run.
Debian 12 only: the sweep and the site's plays are the same on both releases.
"""

import json
import os
import re

import pytest

from bad_input import recap
from conftest import ROOT, node_records
from faults import report, start, stop, wait_for

pytestmark = pytest.mark.release("debian12")
# A fault module (conftest): after every other module.
FAULT_TEST = True

SWEEP = os.path.join(ROOT, "playbooks", "health_sweep.yml")
# The parts of site.yml that test_0 reruns on Debian 12 but the GPU stack (gpu_stack): after test_9_rolling_upgrade
# the canary runs the upgrade's driver, not the inventory's, and a run with that tag would put it back (a change in
# the first run that the second, once the node is back, would not repeat).
DEBIAN12_RERUN_TAGS = "health,slurm,quota"
RESULT = re.compile(r"^(ok|changed|skipping|fatal|failed|included): \[([^\]]+)\]")
TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.+?)\] \**$")


def _results(out):
    """{host: [(task, result)]} in order, ok and changed both 'ok' (a result per loop item collapses into one)."""
    found, task = {}, None
    for line in out.splitlines():
        header = TASK.match(line)
        if header:
            task = header.group(1)
            continue
        result = RESULT.match(line)
        if result and task:
            kind = "ok" if result.group(1) in ("ok", "changed") else result.group(1)
            rows = found.setdefault(result.group(2), [])
            if not rows or rows[-1][0] != task:
                rows.append((task, kind))
    return found


@pytest.fixture
def dead(scenario):
    """The GPU node that is stopped; started again whatever happens."""
    node = scenario.groups["gpu_nodes"][-1]
    yield node
    start(scenario, node)


def test_an_unreachable_gpu_node_is_reported_and_the_others_finish(scenario, ctl, dead, tmp_path):
    others = sorted(set(scenario.groups["head_nodes"] + scenario.groups["gpu_nodes"]) - {dead})
    stop(dead)

    as_dead = {"all": {"hosts": {dead: {"ansible_connection": "community.docker.docker_api"}}}}
    rc, out = scenario.playbook(tmp_path, args=["--tags", DEBIAN12_RERUN_TAGS], extra_inventory=as_dead)
    counters = recap(out)
    assert rc == 4, (rc, out[-4000:])  # ansible-playbook: some host unreachable
    assert counters[dead]["unreachable"] > 0 and counters[dead]["failed"] == 0, counters
    assert all(counters[h]["failed"] == 0 and counters[h]["unreachable"] == 0 for h in others), counters
    assert re.search(r"^fatal: \[%s\]: UNREACHABLE!" % re.escape(dead), out, re.M)
    # the site's summary says so, beside what Slurm last knew of it
    assert re.search(r"^ *%s .*\n +NOT REACHED: " % re.escape(dead), out, re.M), out[-3000:]
    site_down = _results(out)

    report_dir = tmp_path / "sweep"
    rc, sweep_out = scenario.playbook(tmp_path, SWEEP, extra_vars={"health_sweep_report_dir": str(report_dir)},
                                      extra_inventory=as_dead)
    sweep_counters = recap(sweep_out)
    # the sweep never fails a host it cannot check (roles/operations/tasks/health_sweep_node.yml ignores unreachable): its report says why
    assert rc in (0, 4), (rc, sweep_out[-4000:])
    assert all(c["failed"] == 0 for c in sweep_counters.values()), sweep_counters
    assert re.search(r"^ +- %s UNKNOWN FLEET-UNREACHABLE" % re.escape(dead), sweep_out, re.M), sweep_out[-3000:]
    sweep_rc = rc
    with open(str(report_dir / "fleet.json")) as handle:
        fleet = json.load(handle)
    nodes = fleet["nodes"]
    assert nodes[dead]["status"] == "unknown" and not nodes[dead]["reachable"], nodes[dead]
    assert "FLEET-UNREACHABLE" in {f["code"] for f in nodes[dead]["findings"]}, nodes[dead]
    gpu_others = [h for h in scenario.groups["gpu_nodes"] if h != dead]
    assert all(nodes[h]["reachable"] for h in gpu_others), nodes
    assert fleet["summary"]["unreachable"] == 1, fleet["summary"]

    # back: the same site run, every node up; the others' results must be the same task by task
    start(scenario, dead)

    def registered():
        record = node_records(ctl, [dead])[dead]
        return not re.search("DOWN|NOT_RESPONDING", record["State"]), record
    wait_for("%s back in Slurm" % dead, registered, 120)
    rc, out_up = scenario.playbook(tmp_path, args=["--tags", DEBIAN12_RERUN_TAGS])
    assert rc == 0, out_up[-4000:]
    site_up = _results(out_up)
    differ = {}
    for host in others:
        if site_down.get(host) != site_up.get(host):
            down, up = dict(site_down.get(host, [])), dict(site_up.get(host, []))
            differ[host] = {t: (down.get(t), up.get(t)) for t in set(down) | set(up) if down.get(t) != up.get(t)}
    assert not differ, differ
    records = node_records(ctl, scenario.compute)
    assert all("DOWN" not in r["State"] for r in records.values()), records

    report("unreachable GPU node",
           "container %s stopped during site.yml --tags %s and playbooks/health_sweep.yml" % (dead, DEBIAN12_RERUN_TAGS),
           ["site.yml: rc 4, %s unreachable, failed=0 and unreachable=0 on %s" % (dead, ", ".join(others)),
            "the sweep: rc %d, fleet.json says %s unreachable (status %s), summary unreachable=1"
            % (sweep_rc, dead, nodes[dead]["status"]),
            "the others' results task by task the same as in the run with every node up (%d tasks on %s)"
            % (len(site_up.get(others[0], [])), others[0]),
            "%s booted again (faults.start: gpusim's /dev/nvidia*, slurmd); the next site run rc 0, no compute "
            "node DOWN" % dead])
