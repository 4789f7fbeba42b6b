"""Bad inventory fails in the role's preflight, names the host and the variable, and changes nothing on any node.

Runs the real ansible-playbook on the converged cluster, once per case, with the bad input added to the scenario's
inventory, and compares the configuration, munge keys, records and daemon start times of every node before and
after. Each case also asks for changes that must not happen (a new slurm.conf key, a cgroup.conf setting).
Debian 12 only: the checks are the role's, the same on both releases.
"""

import os
import re

import pytest
import yaml

from conftest import SHARED, recap

ROLE_TASKS = os.path.join(SHARED, "..", "..", "roles", "slurm", "tasks")
WATCHED = ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/topology.conf", "/etc/slurm/cgroup.conf",
           "/etc/slurm/.staging/slurm.conf", "/etc/slurm/slurmdbd.conf", "/etc/munge/munge.key",
           "/var/lib/gpucluster-slurm/slurmd-node.conf", "/etc/default/slurmd"]
CHANGES = {"slurm_conf_extra": {"MaxJobCount": 20000}, "slurm_cgroup_conf": {"ConstrainCores": False}}
CASES = [
    # name, extra inventory maker, extra vars, strings the output must name
    ("node-in-two-exclusive-partitions", None,
     {"slurm_partitions": [{"name": "dev", "groups": ["slurm_compute"], "exclusive_nodes": True},
                           {"name": "research", "groups": ["gpu_h100"], "exclusive_nodes": True}]},
     ["slurm_partitions", "{c2}", "exclusive_nodes"]),
    ("gres-count-not-a-number",
     lambda s: {"all": {"hosts": {s.groups["gpu_a100"][0]:
                                  {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}}}},
     {}, ["slurm_node_gres[0].count", "{c1}", "eight"]),
    ("partition-names-undefined-group", None,
     {"slurm_partitions": [{"name": "dev", "groups": ["slurm_compute_typo"]}]},
     ["slurm_partitions", "{ctl}", "slurm_compute_typo"]),
]


def _task_names(path):
    """Names of the tasks of a task file, blocks and rescues included, and of the files it imports."""
    with open(path) as handle:
        tasks = yaml.safe_load(handle) or []
    names = set()
    stack = list(tasks)
    while stack:
        task = stack.pop()
        names.add(task.get("name"))
        for key in ("block", "rescue", "always"):
            stack.extend(task.get(key) or [])
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            names |= _task_names(os.path.join(os.path.dirname(path), imported))
    return names


def _failed_tasks(out):
    current, failed = None, set()
    for line in out.splitlines():
        task = re.match(r"TASK \[(?:[\w.]+ : )?(.+?)\] \**$", line)
        if task:
            current = task.group(1)
        elif line.startswith(("fatal:", "failed:")) and current:
            failed.add(current)
    return failed


def _snapshot(scenario):
    script = ("for f in %s; do sha256sum $f 2>/dev/null || echo absent $f; done; "
              "systemctl show -p ActiveEnterTimestamp slurmctld slurmd slurmdbd munge") % " ".join(WATCHED)
    return {h: scenario.host(h).check_output(script) for h in scenario.instances}


@pytest.mark.parametrize("name,inventory,extra,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(scenario, tmp_path, name, inventory, extra, expect):
    if scenario.release != "debian12":
        pytest.skip("bad input is tested once, on Debian 12")
    names = {"c1": scenario.groups["gpu_a100"][0], "c2": scenario.only("gpu_h100"), "ctl": scenario.controller}
    before = _snapshot(scenario)
    rc, out = scenario.converge(tmp_path, extra_inventory=inventory(scenario) if inventory else None,
                                extra_vars=dict(CHANGES, **extra))
    after = _snapshot(scenario)

    assert rc == 2, "case %s: expected failed hosts (rc 2), got rc %d\n%s" % (name, rc, out)
    for text in expect:
        assert text.format(**names) in out, "case %s: the error does not name %s\n%s" % (name, text.format(**names), out)
    failed = _failed_tasks(out)
    preflight = _task_names(os.path.join(ROLE_TASKS, "preflight.yml"))
    outside = {t for t in failed if t not in preflight and not t.startswith("Validating arguments against arg spec")}
    assert failed and not outside, "case %s failed outside preflight: %s\n%s" % (name, outside, out)
    counters = recap(out)
    for host in counters:
        assert counters[host]["changed"] == 0 and counters[host]["failed"] == 1, (name, host, counters[host], out)
    assert before == after, "case %s changed a node" % name
