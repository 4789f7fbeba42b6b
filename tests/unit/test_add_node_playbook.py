# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/add_node.yml without a cluster: bad input (an unknown node, an empty or malformed add_nodes, a node
outside the groups, the controller outside --limit) stops the run in its first play, naming the variable and the
value, before anything runs: no facts gathered, no role, no Slurm call. The nodes are this machine (a local
connection) and never reached; a fake scontrol logs every call. The new nodes' play keeps the role list of
site.yml's GPU nodes play.

The behaviour itself (the drained join, the health check, the resume, the other nodes) is tested on the shared
cluster: molecule/cluster-shared/tests/test_8_add_node.py.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from bad_input import started_tasks
from logged_scontrol import logged_scontrol_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADD_NODE = os.path.join(ROOT, "playbooks", "add_node.yml")
SITE = os.path.join(ROOT, "playbooks", "site.yml")


class Run(object):
    """Two GPU hosts, a head node that is the controller, a spare host outside the groups, a fake scontrol."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.env, self.log = logged_scontrol_env(tmp_path)
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        inventory = {"all": {"hosts": {"spare": dict(local)}, "children": {
            "head_nodes": {"hosts": {"head": dict(local)}},
            "gpu_nodes": {"hosts": {"gpu01": dict(local), "gpu02": dict(local)}},
            "slurm_controller": {"hosts": {"head": {}}},
            "slurm_compute": {"children": {"gpu_nodes": {}}}}}}
        self.inventory = tmp_path / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump(inventory))

    def run(self, extra_vars=None, args=()):
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(self.inventory)]
        if extra_vars is not None:
            path = self.tmp / "extra-vars.json"
            path.write_text(json.dumps(extra_vars))
            argv += ["-e", "@%s" % path]
        argv += list(args) + [ADD_NODE]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env,
                              cwd=str(self.tmp), timeout=300, check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")


BAD = {
    "an unknown node": ({"add_nodes": "gpu01,gpu99"}, (), ["add_nodes names gpu99", "not in the inventory"]),
    "an unknown node in a list": ({"add_nodes": ["gpu99"]}, (), ["add_nodes names gpu99", "not in the inventory"]),
    "an empty add_nodes": ({"add_nodes": ""}, (), ['add_nodes is "": it names no node']),
    "an add_nodes of blanks and commas": ({"add_nodes": " , "}, (), ['add_nodes is " , ": it names no node']),
    "an empty list": ({"add_nodes": []}, (), ["add_nodes is []: it names no node"]),
    "a mapping": ({"add_nodes": {"gpu01": 1}}, (), ['add_nodes is {"gpu01": 1}', "a comma-separated string or a list"]),
    "a list of numbers": ({"add_nodes": [1, 2]}, (), ["add_nodes is [1, 2]", "a comma-separated string or a list"]),
    "a host outside gpu_nodes and slurm_compute": ({"add_nodes": "spare"}, (),
                                                   ["add_nodes names spare", "not in both gpu_nodes and slurm_compute"]),
    "the controller": ({"add_nodes": "head"}, (), ["add_nodes names head", "not in both gpu_nodes and slurm_compute"]),
    "a node outside --limit": ({"add_nodes": "gpu02"}, ("--limit", "gpu01,head"),
                               ["add_nodes names gpu02", "outside --limit"]),
    "the controller outside --limit": (None, ("--limit", "gpu01"),
                                       ["the Slurm controller head is outside --limit", "--limit gpu01,head"]),
    "no add_nodes and no --limit": (None, (), ["add_nodes is not set and --limit names no host of gpu_nodes",
                                               "-e add_nodes=gpu17,gpu18"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_stops_the_run_before_anything_runs(tmp_path, case):
    run = Run(tmp_path)
    extra, args, words = BAD[case]
    rc, out = run.run(extra, args)
    assert rc != 0, out
    flat = " ".join(out.split())
    for word in words + ["nothing was changed"]:
        assert word in flat, (case, word, out)
    # nothing ran past the first task: no facts, no role, no Slurm call
    assert started_tasks(out) == ["Check add_nodes and the inventory groups of the nodes to add"], out
    assert not run.log.exists()


def _play(path, name):
    with open(path) as handle:
        plays = yaml.safe_load(handle)
    return next(p for p in plays if p.get("name") == name)


def test_the_new_nodes_get_the_roles_of_the_site_gpu_play():
    """One role list for a GPU node: add_node.yml's copy must stay that of site.yml (roles, conditions, tasks)."""
    site = _play(SITE, "GPU nodes")
    add = _play(ADD_NODE, "The new GPU nodes")

    def strip(play):
        return ([{k: v for k, v in r.items() if k != "tags"} for r in play["roles"]],
                [{k: v for k, v in t.items() if k != "tags"} for t in play.get("tasks", [])])
    assert strip(add) == strip(site)
