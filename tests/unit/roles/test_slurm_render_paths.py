"""The slurm role's render step (one gpucluster.ops.slurm_render task) against the path it replaced (three set_fact
tasks with the line filters and four template lookups, kept in tests/support/slurm_render_filters.yml): the same
files, byte for byte, and the same failure message, on a generated inventory of a few hundred nodes of several kinds.
"""

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from render_step import ROOT, play_tasks, render_env

PLAY = """- name: Render the Slurm configuration on the controller
  hosts: slurm_controller[0]
  gather_facts: false
  tasks:
    - name: Run the render step of {role}
      ansible.builtin.include_role:
        name: {role}
        tasks_from: render
    - name: Show the rendered files
      ansible.builtin.debug:
        var: __slurm_files
"""
HARDWARE = {"slurm_node_cpus": 128, "slurm_node_sockets": 2, "slurm_node_cores_per_socket": 32,
            "slurm_node_threads_per_core": 2, "slurm_node_real_memory": 1000448,
            "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}]}


def _inventory(nodes=300):
    """Three kinds of node in groups, and hosts of their own: a renamed node, a weight, a shard GRES, NVML."""
    hosts = ["gpu%04d" % i for i in range(1, nodes + 1)]
    third = nodes // 3
    own = {hosts[0]: {"slurm_node_name": "gpu-first"}, hosts[1]: {"slurm_node_weight": 5},
           hosts[2]: {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}, {"name": "shard", "count": 16}]},
           hosts[third + 1]: {"slurm_gres_autodetect": "nvml"}}
    groups = {"gpu_a": (hosts[:third], dict(HARDWARE, slurm_node_features=["a100", "ib"])),
              "gpu_b": (hosts[third:2 * third], dict(HARDWARE, slurm_node_features=["a100", "ib", "nvme"])),
              "gpu_h": (hosts[2 * third:], dict(HARDWARE, slurm_node_gres=[{"name": "gpu", "type": "h100", "count": 4}],
                                                slurm_node_real_memory=2000000))}
    leaves = [{"name": "leaf%03d" % (j + 1), "nodes": hosts[j * 32:(j + 1) * 32]} for j in range((nodes + 31) // 32)]
    leaves[0]["nodes"] = ["gpu-first"] + leaves[0]["nodes"][1:]
    return {"all": {
        "vars": {"slurm_cluster_name": "paths", "slurm_health_check": False,
                 "slurm_partitions": [{"name": "batch", "groups": ["slurm_compute"], "default": True, "max_time": "2-00:00:00"},
                                      {"name": "nvme", "groups": ["gpu_b"], "priority_tier": 10},
                                      {"name": "h100", "groups": ["gpu_h"], "exclusive_nodes": True}],
                 "slurm_fabric": {"leaves": leaves, "spines": [{"name": "spine1", "switches": [l["name"] for l in leaves]}]}},
        "children": {
            "slurm_controller": {"hosts": {"localhost": {"ansible_connection": "local",
                                                         "ansible_python_interpreter": sys.executable}}},
            "slurm_compute": {"children": {
                name: {"hosts": {h: own.get(h) for h in members}, "vars": variables}
                for name, (members, variables) in groups.items()}}}}}


def _run(tmp_path, role, inventory, extra_vars):
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    (tmp_path / "play.yml").write_text(PLAY.format(role=role))
    argv = ["ansible-playbook", "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
            "-e", "@%s" % (tmp_path / "vars.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=render_env(), check=False)
    return proc.returncode, play_tasks(proc.stdout)


@pytest.fixture(scope="module")
def filters_role(tmp_path_factory):
    """The slurm role with the render step it had before gpucluster.ops.slurm_render."""
    role = tmp_path_factory.mktemp("roles") / "slurm_filters"
    shutil.copytree("%s/roles/slurm" % ROOT, str(role))
    shutil.copy("%s/tests/support/slurm_render_filters.yml" % ROOT, str(role / "tasks" / "render.yml"))
    return str(role)


def _outcome(rc, tasks):
    """(rc, files, reason): the reason of a failure is its message after the variable the rescue names (one pass
    attributes a GRES count to the node lines, which read it first, where the filters ran the GRES filter first)."""
    last = [t["hosts"]["localhost"] for t in tasks if "localhost" in t["hosts"]][-1]
    reason = None
    if rc:
        reason = re.sub(r"^.*cannot be rendered into Slurm's configuration: (slurm_[a-z]+_lines: )?", "", last["msg"])
    return rc, last.get("__slurm_files"), reason


@pytest.mark.parametrize("name,extra", [
    ("good", {}),
    ("no-fabric", {"slurm_fabric": {}}),
    ("bad-count", {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}),
    ("bad-partition", {"slurm_partitions": [{"name": "dev", "groups": ["nope"]}]}),
    ("bad-fabric", {"slurm_fabric": {"leaves": [{"name": "leaf1", "nodes": "gpu[0001-0002],other"}]}}),
    ("bad-numbering", {"slurm_gres_cpu_numbering": ["split"]}),
], ids=lambda value: value if isinstance(value, str) else "")
def test_the_action_renders_what_the_filters_and_lookups_rendered(tmp_path, filters_role, name, extra):
    inventory = _inventory()
    outcomes = []
    for run, role in (("new", "gpucluster.ops.slurm"), ("old", filters_role)):
        (tmp_path / run).mkdir()
        outcomes.append(_outcome(*_run(tmp_path / run, role, inventory, extra)))
    new, old = outcomes
    assert new == old, name
    if name.startswith("bad"):
        assert new[0] == 2 and new[2].endswith("Nothing was changed."), new
    else:
        assert new[0] == 0 and sorted(new[1]) == sorted(["slurm.conf", "gres.conf", "cgroup.conf"]
                                                        + (["topology.conf"] if name == "good" else []))
