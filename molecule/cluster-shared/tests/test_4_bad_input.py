"""Bad inventory fails in the role's preflight, names the host and the variable, and changes nothing on any node.

Runs the real ansible-playbook (the slurm role, as site.yml's Slurm play runs it) on the converged cluster, with
the bad input added to the scenario's inventory, and compares the configuration, munge keys, records and daemon start times of every node before and
after. Each case also asks for changes that must not happen (a new slurm.conf key, a cgroup.conf setting).
Debian 12 only: the checks are the role's, the same on both releases.
"""

import pytest

from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, snapshot

WATCHED = ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/topology.conf", "/etc/slurm/cgroup.conf",
           "/etc/slurm/.staging/slurm.conf", "/etc/slurm/slurmdbd.conf", "/etc/munge/munge.key",
           "/var/lib/gpucluster-slurm/slurmd-node.conf", "/etc/default/slurmd"]
CHANGES = MUST_NOT_CHANGE["slurm"]
CASES = [
    # name, extra inventory maker, extra vars, strings the output must name. One case end to end (a bad host
    # variable on one compute node stops every host of the run); the others, and more, are unit tests
    # (tests/unit/roles/test_bad_input_preflight.py).
    ("gres-count-not-a-number",
     lambda s: {"all": {"hosts": {s.groups["gpu_a100"][0]:
                                  {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}}}},
     {}, ["slurm_node_gres[0].count", "{c1}", "eight"]),
]


pytestmark = pytest.mark.release("debian12")

ALSO = "systemctl show -p ActiveEnterTimestamp slurmctld slurmd slurmdbd munge"


@pytest.mark.parametrize("name,inventory,extra,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(scenario, tmp_path, name, inventory, extra, expect):
    names = {"c1": scenario.groups["gpu_a100"][0], "c2": scenario.only("gpu_h100"), "ctl": scenario.controller}
    before = {h: snapshot(h, WATCHED, ALSO) for h in scenario.instances}
    rc, out = scenario.playbook(tmp_path, "slurm.yml", extra_inventory=inventory(scenario) if inventory else None,
                                extra_vars=dict(CHANGES, **extra))
    after = {h: snapshot(h, WATCHED, ALSO) for h in scenario.instances}
    # the spare node (for the add-node test) is not in the run, and must stay untouched too
    in_run = [h for h in scenario.instances if h != scenario.spare]
    assert_refused_before_change(name, rc, out, ["slurm"], [text.format(**names) for text in expect], before, after,
                                 run_hosts=in_run)
