"""playbooks/inventory_check.yml, the site run's first play, refuses an inventory that describes another cluster than
the one meant, naming host or team, variable and value, without connecting to any node (so before anything
changes); the lab and example inventories pass it.

It runs the real ansible-playbook on copies of the lab inventory with one mistake each. The play never connects:
the lab's hosts are containers that are not running here, and an attempt to reach them would fail the test.
"""

import os
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "inventory_check.yml")


def run_check(inventory):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="false",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1")
    ansible_playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([ansible_playbook, "-i", inventory, PLAYBOOK], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, timeout=300, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def lab_copy(tmp_path):
    path = str(tmp_path / "lab")
    shutil.copytree(os.path.join(ROOT, "inventories", "lab"), path)
    return path


def edit(path, change):
    with open(path) as handle:
        data = yaml.safe_load(handle) or {}
    change(data)
    with open(path, "w") as handle:
        yaml.safe_dump(data, handle)


def test_roles_site_yml_may_leave_out_pass(tmp_path):
    inventory = lab_copy(tmp_path)
    edit(os.path.join(inventory, "host_vars", "lab-gpu02.yml"),
         _skip(["node_tuning", "nvidia_driver", "cuda_toolkit", "nccl", "dcgm", "dcgm_exporter", "monitoring"]))
    rc, out = run_check(inventory)
    assert rc == 0, out


@pytest.mark.parametrize("inventory", ["lab", "examples/dgx-a100-50gpu", "examples/hgx-h100-256",
                                       "examples/hgx-h100-400gpu", "examples/mixed-a100-l40s"])
def test_the_shipped_inventories_pass(inventory):
    rc, out = run_check(os.path.join(ROOT, "inventories", inventory))
    assert rc == 0, out
    assert "unreachable=0" in out and "failed=0" in out


def _team(field, value):
    def change(data):
        data["team_quota_teams"]["research"][field] = value
    return change


def _mtu_on_gpu02(data):
    data["infiniband_ipoib_interfaces"] = [{"name": "ib0", "subnet": "10.20.0.0/24", "mode": "connected",
                                            "mtu": 2044}]


def _gres_4(data):
    data["slurm_node_gres"] = [{"name": "gpu", "type": "h100", "count": 4}]


def _skip(value):
    def change(data):
        data["gpucluster_site_skip_roles"] = value
    return change


def _expect_driver(version, **pins):
    def change(data):
        data.setdefault("health_check_expected", {})["driver_version"] = version
        data.update(pins)
    return change


CASES = {
    # issue 45: the lab pinned 550.127.05 while the archive's 550 had moved on, and the health check drained the
    # node the site run had just installed; where the inventory says both, they must agree
    "an expected driver the pinned driver version contradicts": (
        "host_vars/lab-gpu02.yml", _expect_driver("550.127.05", nvidia_driver_version="550.163.01"),
        ["lab-gpu02", "health_check_expected.driver_version", "550.127.05", "nvidia_driver_version", "550.163.01"]),
    "an expected driver outside the driver branch the inventory installs": (
        "host_vars/lab-gpu02.yml", _expect_driver("535.216.03"),
        ["lab-gpu02", "health_check_expected.driver_version", "535.216.03", "nvidia_driver_branch", "550"]),
    "site.yml asked to leave out a role later plays need": (
        "host_vars/lab-gpu02.yml", _skip(["nccl", "slurm"]), ["lab-gpu02", "gpucluster_site_skip_roles", "slurm"]),
    "site.yml asked to leave out a role of a typo": (
        "host_vars/lab-gpu02.yml", _skip(["nvidia-driver"]), ["lab-gpu02", "gpucluster_site_skip_roles", "nvidia-driver"]),
    "site.yml's roles to leave out given as a string": (
        "host_vars/lab-gpu02.yml", _skip("nccl"), ["lab-gpu02", "gpucluster_site_skip_roles", "must be a list"]),
    "max_concurrent above the cluster's GPUs": (
        "group_vars/all.yml", _team("max_concurrent", 64), ["research", "max_concurrent", "64"]),
    "a budget above what the GPUs deliver in 31 days": (
        "group_vars/all.yml", _team("gpu_hours", "20000/month"), ["research", "gpu_hours", "20000"]),
    "a partition no partition list has": (
        "group_vars/all.yml", _team("partitions", ["gpu", "bigmem"]), ["research", "partitions", "bigmem"]),
    "a GPU type no node has": (
        "group_vars/all.yml", _team("gpu_types", ["a100"]), ["research", "gpu_types", "a100"]),
    "one rail's MTU differs on one host": (
        "host_vars/lab-gpu02.yml", _mtu_on_gpu02, ["ib0", "lab-gpu02", "2044"]),
    "a node's GRES count differs from its health check's GPU count": (
        "host_vars/lab-gpu02.yml", _gres_4, ["lab-gpu02", "health_check_expected.gpu_count", "8"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_inventory_stops_the_run_naming_what_is_wrong(tmp_path, case):
    filename, change, words = CASES[case]
    inventory = lab_copy(tmp_path)
    edit(os.path.join(inventory, filename), change)
    rc, out = run_check(inventory)
    assert rc != 0, out
    assert "unreachable=0" in out, out       # refused without connecting to any node
    failed = [line for line in out.splitlines() if "fatal:" in line or "msg" in line or "ERROR" in line]
    text = "\n".join(failed) + out[out.find("fatal:"):]
    for word in words:
        assert word in text, (word, out)


def test_the_lab_pins_no_driver_version_the_archive_can_move():
    """The lab installs what Debian's archive has in the branch (nvidia_driver_branch, no nvidia_driver_version): its
    health check may expect the branch, never one version of it (issue 45: 550.127.05 drained the healthy node)."""
    with open(os.path.join(ROOT, "inventories", "lab", "group_vars", "gpu_nodes.yml")) as handle:
        gpu_nodes = yaml.safe_load(handle)
    assert not gpu_nodes.get("nvidia_driver_version")
    expected = str(gpu_nodes.get("health_check_expected", {}).get("driver_version", ""))
    assert expected in ("", str(gpu_nodes["nvidia_driver_branch"])), expected
