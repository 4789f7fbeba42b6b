"""Bad inventory input fails in preflight, names the variable, and leaves the node as it was: once end to end.

Runs the real ansible-playbook against the scenario's instances with an inventory of its own (so that a variable
can be missing), and compares the managed files and packages before and after. The case kept here reads the node
(the kernel's fs.nr_open) and asks for changes that must not happen: a new package, kernel setting, hosts line and
limits whose hard one is above what the kernel allows (logins would fail). The other cases (wrong-type,
missing-required, bad-cluster-name, sysctl-list-value, bad-limit-entry, address-not-ip), and this one, run without a
node in tests/unit/roles/test_bad_input_preflight.py (test_node_baseline).
"""

import json
import os

import pytest
import yaml

from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, docker_hosts, inventory_hosts, run_playbook, snapshot

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WATCHED = [
    "/etc/hosts",
    "/etc/security/limits.d/90-gpucluster.conf",
    "/etc/sysctl.d/90-gpucluster-baseline.conf",
    "/etc/ansible/facts.d/gpucluster_node.fact",
    "/etc/chrony/sources.d/gpucluster.sources",
]
# Every case also asks for changes that must not happen: a new package, kernel setting, hosts line and limit.
CHANGES = MUST_NOT_CHANGE["node_baseline"]
GOOD = {"node_baseline_cluster_name": "molecule"}
CASES = [
    ("above-nr-open", {"node_baseline_limits_nofile_hard": 2000000000}, {},
     "node_baseline_limits_nofile_hard=2000000000"),
]


@pytest.mark.parametrize("name,extra,hostvars,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, extra, hostvars, expect):
    instances = inventory_hosts()
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": docker_hosts(instances, hostvars)}}))
    variables = dict(GOOD, **CHANGES)
    variables.update(extra)
    variables = {k: v for k, v in variables.items() if v is not None}
    (tmp_path / "vars.json").write_text(json.dumps(variables))

    before = {i: snapshot(i, WATCHED, "dpkg-query -W sl 2>&1 || true") for i in instances}
    rc, out = run_playbook(tmp_path / "inventory.yml", os.path.join(SCENARIO, "converge.yml"), tmp_path / "vars.json")
    after = {i: snapshot(i, WATCHED, "dpkg-query -W sl 2>&1 || true") for i in instances}
    assert_refused_before_change(name, rc, out, ["node_baseline"], [expect], before, after)
