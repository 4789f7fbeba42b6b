"""Bad inventory input fails in preflight, names the variable, and leaves the node as it was.

Runs the real ansible-playbook against the scenario's instances with an inventory of its own (so that a variable
can be missing), once per case, and compares the managed files and packages before and after.
"""

import json
import os
import re
import subprocess

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLE = os.path.join(SCENARIO, "..", "..", "roles", "node_baseline")
WATCHED = [
    "/etc/hosts",
    "/etc/security/limits.d/90-gpucluster.conf",
    "/etc/sysctl.d/90-gpucluster-baseline.conf",
    "/etc/ansible/facts.d/gpucluster_node.fact",
    "/etc/chrony/sources.d/gpucluster.sources",
]
# Every case also asks for changes that must not happen: a new package, kernel setting, hosts line and limit.
CHANGES = {
    "node_baseline_extra_packages": ["sl"],
    "node_baseline_sysctl": {"vm.overcommit_ratio": 60},
    "node_baseline_hosts_extra": [{"address": "10.99.0.2", "names": ["never"]}],
    "node_baseline_limits_nofile_soft": 4096,
}
GOOD = {"node_baseline_cluster_name": "molecule"}
CASES = [
    ("wrong-type", {"node_baseline_limits_nofile_hard": "lots"}, {}, "node_baseline_limits_nofile_hard"),
    ("missing-required", {"node_baseline_cluster_name": None}, {}, "node_baseline_cluster_name"),
    ("above-nr-open", {"node_baseline_limits_nofile_hard": 2000000000}, {}, "node_baseline_limits_nofile_hard"),
    ("bad-cluster-name", {"node_baseline_cluster_name": "Lab Cluster"}, {}, "node_baseline_cluster_name"),
    ("sysctl-list-value", {"node_baseline_sysctl": {"vm.swappiness": [1, 2]}}, {}, "node_baseline_sysctl"),
    ("bad-limit-entry", {"node_baseline_limits_extra": [{"domain": "*", "type": "soft", "item": "memlok",
                                                         "value": 1}]}, {}, "node_baseline_limits_extra"),
    ("address-not-ip", {}, {"node_baseline_address": "10.0.0.300"}, "node_baseline_address"),
]


def _instances():
    with open(os.environ["MOLECULE_INVENTORY_FILE"]) as f:
        inventory = yaml.safe_load(f)
    return sorted(inventory["all"]["hosts"])


def _preflight_task_names():
    with open(os.path.join(ROLE, "tasks", "preflight.yml")) as f:
        names = [t["name"] for t in yaml.safe_load(f)]
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


def _snapshot(instance):
    script = "for f in %s; do sha256sum $f 2>/dev/null || echo absent $f; done; dpkg-query -W sl 2>&1 || true" % (
        " ".join(WATCHED))
    return subprocess.run(["docker", "exec", instance, "sh", "-c", script],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name,extra,hostvars,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, extra, hostvars, expect):
    instances = _instances()
    inventory = {"all": {"hosts": {i: dict(hostvars, ansible_connection="community.docker.docker",
                                           ansible_python_interpreter="/usr/bin/python3") for i in instances}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    variables = dict(GOOD, **CHANGES)
    variables.update(extra)
    variables = {k: v for k, v in variables.items() if v is not None}
    (tmp_path / "vars.json").write_text(json.dumps(variables))

    before = {i: _snapshot(i) for i in instances}
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(tmp_path / "inventory.yml"), os.path.join(SCENARIO, "converge.yml"),
         "-e", "@%s" % (tmp_path / "vars.json")],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    out = proc.stdout + proc.stderr
    after = {i: _snapshot(i) for i in instances}

    assert proc.returncode == 2, "case %s: expected failed hosts (rc 2), got rc %d\n%s" % (name, proc.returncode, out)
    assert expect in out, "case %s: the error does not name %s\n%s" % (name, expect, out)
    failed_tasks = _failed_tasks(out)
    assert failed_tasks, out
    # argument_specs validation runs first, then preflight.yml: both come before any change
    outside = {t for t in failed_tasks if t not in _preflight_task_names()
               and not t.startswith("Validating arguments against arg spec 'main'")}
    assert not outside, "case %s failed outside preflight: %s" % (name, outside)
    for i in instances:
        assert re.search(r"^%s\s+: .*changed=0 .*failed=1" % re.escape(i), out, re.M), out
        assert before[i] == after[i], "case %s changed %s:\nbefore:\n%s\nafter:\n%s" % (name, i, before[i], after[i])
