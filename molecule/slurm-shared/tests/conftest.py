"""Fixtures of the Slurm scenarios (slurm-deb12, slurm-deb13): the cluster as the inventory describes it, and hosts.

The tests run once (not once per host): they look at the cluster from the controller, as a user would, and run the
real ansible-playbook where a test needs another run (bad input, adding a node).
"""

import glob
import json
import os
import re
import subprocess

import pytest
import testinfra
import yaml

from bad_input import PLAIN_OUTPUT

SHARED = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERGE = os.path.join(SHARED, "converge.yml")


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


class Scenario(object):
    """The molecule inventory of this scenario, its shared group_vars, and helpers to run the converge playbook."""

    def __init__(self):
        self.name = os.environ["MOLECULE_SCENARIO_NAME"]
        self.inventory_file = os.environ["MOLECULE_INVENTORY_FILE"]
        self.inventory_dir = os.path.dirname(self.inventory_file)
        inventory = _load(self.inventory_file)
        self.groups = {name: sorted((data or {}).get("hosts") or {}) for name, data in inventory.items() if name != "all"}
        self.instances = sorted(inventory["all"]["hosts"])
        self.group_vars = {os.path.basename(p)[:-4]: _load(p) for p in glob.glob(os.path.join(SHARED, "group_vars", "*.yml"))}
        self.release = "debian12" if "debian12" in self.groups else "debian13"
        self.configless = bool(self.group_vars[self.release].get("slurm_configless"))
        self.cluster_name = self.group_vars[self.release]["slurm_cluster_name"]

    def only(self, group):
        hosts = self.groups.get(group, [])
        assert len(hosts) == 1, (group, hosts)
        return hosts[0]

    @property
    def controller(self):
        return self.only("slurm_controller")

    @property
    def database(self):
        return self.only("slurm_database")

    def node_vars(self, host):
        """The slurm_node_* variables of a compute host, from the group_vars of its hardware group."""
        merged = {}
        for group in ("gpu_a100", "gpu_h100"):
            if host in self.groups.get(group, []):
                merged.update(self.group_vars[group])
        return merged

    def host(self, name):
        return testinfra.get_host("docker://%s" % name)

    def converge(self, tmp_path, extra_inventory=None, limit=None, extra_vars=None):
        """Run the scenario's converge playbook like an operator; return (rc, output)."""
        argv = ["ansible-playbook", "-i", self.inventory_dir]
        if extra_inventory:
            path = tmp_path / "extra-inventory.yml"
            path.write_text(yaml.safe_dump(extra_inventory))
            argv += ["-i", str(path)]
        if limit:
            argv += ["--limit", ",".join(limit)]
        if extra_vars:
            path = tmp_path / "extra-vars.json"
            path.write_text(json.dumps(extra_vars))
            argv += ["-e", "@%s" % path]
        argv.append(CONVERGE)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              env=dict(os.environ, **PLAIN_OUTPUT))
        return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def scenario():
    return Scenario()


@pytest.fixture(scope="session")
def ctl(scenario):
    return scenario.host(scenario.controller)


def node_records(ctl, nodes):
    """`scontrol show node -o` as {node: {key: value}} (values may hold blanks only in Reason, which is last)."""
    out = ctl.check_output("scontrol show node -o %s" % ",".join(nodes))
    records = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line.split(" Reason=")[0]))
        records[fields["NodeName"]] = fields
    return records


def slurmd_started(scenario, hosts):
    """ActiveEnterTimestamp of slurmd on each host (changes only when slurmd (re)starts)."""
    return {h: scenario.host(h).check_output("systemctl show -p ActiveEnterTimestamp --value slurmd") for h in hosts}
