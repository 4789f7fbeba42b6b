"""The slurm role's render step (tasks_from: render) through the real ansible-playbook on localhost as the
controller: what it writes for an inventory, and how it stops on bad inventory, naming the host and the variable.

The files must pass the collection's config checker, and Slurm's own parser where scontrol is installed.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_config_check import check_config_dir
from render_step import play_tasks, render_argv, render_env, write_render_play

A100 = {"slurm_node_cpus": 64, "slurm_node_sockets": 2, "slurm_node_cores_per_socket": 32,
        "slurm_node_threads_per_core": 1, "slurm_node_real_memory": 500000,
        "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}], "slurm_node_features": ["a100"]}
H100 = dict(A100, slurm_node_gres=[{"name": "gpu", "type": "h100", "count": 4}], slurm_node_features=["h100"])
GOOD = {
    "slurm_cluster_name": "unit",
    "slurm_partitions": [{"name": "dev", "groups": ["slurm_compute"], "default": True, "max_time": "1:00:00"},
                         {"name": "research", "groups": ["h100"], "exclusive_nodes": True}],
    "slurm_fabric": {"leaves": [{"name": "leaf1", "nodes": "gpu[01-04]"}, {"name": "leaf2", "nodes": "gpu[05-06]"}],
                     "spines": [{"name": "spine1", "switches": "leaf[1-2]"}]},
    "slurm_config_overrides": {"ProctrackType": "proctrack/linuxproc", "SlurmctldTimeout": None,
                               "SchedulerParameters": "bf_continue,sched_interval=5"},
    "slurm_conf_extra": {"ProctrackType": "proctrack/pgid", "PriorityType": "priority/multifactor",
                         "AccountingStorageEnforce": ["associations", "limits", "qos"]},
}


def _inventory(host_overrides=None):
    hosts_a = {"gpu%02d" % i: None for i in range(1, 5)}
    hosts_h = {"gpu%02d" % i: None for i in range(5, 7)}
    for host, values in (host_overrides or {}).items():
        (hosts_a if host in hosts_a else hosts_h)[host] = values
    return {"all": {"children": {
        "slurm_controller": {"hosts": {"localhost": {"ansible_connection": "local",
                                                     "ansible_python_interpreter": sys.executable}}},
        "slurm_database": {"hosts": {"db01": None}},
        "slurm_compute": {"children": {"a100": {"hosts": hosts_a, "vars": A100},
                                       "h100": {"hosts": hosts_h, "vars": H100}}}}}}


def _render(tmp_path, extra_vars, host_overrides=None):
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(_inventory(host_overrides)))
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    argv = render_argv(tmp_path / "inventory.yml", write_render_play(tmp_path), tmp_path / "vars.json")
    proc = subprocess.run(argv, capture_output=True, text=True, env=render_env(), check=False)
    return proc.returncode, play_tasks(proc.stdout)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    rc, tasks = _render(tmp_path_factory.mktemp("good"), GOOD)
    assert rc == 0, json.dumps(tasks, indent=1)[-3000:]
    return tasks[-1]["hosts"]["localhost"]["__slurm_files"]


def _keys(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith(("#", "NodeName", "PartitionName")))


def test_files_and_managed_headers(rendered):
    assert sorted(rendered) == ["cgroup.conf", "gres.conf", "slurm.conf", "topology.conf"]
    for content in rendered.values():
        assert content.startswith("#\n# Ansible managed") and content.endswith("\n")


def test_slurm_conf_keys_merge_order(rendered):
    keys = _keys(rendered["slurm.conf"])
    assert keys["ClusterName"] == "unit" and keys["SlurmctldHost"] == "localhost"
    assert keys["ProctrackType"] == "proctrack/pgid"          # slurm_conf_extra is merged last
    assert "SlurmctldTimeout" not in keys                      # null removes a key
    assert keys["AccountingStorageEnforce"] == "associations,limits,qos"  # lists are joined
    assert keys["PriorityType"] == "priority/multifactor"
    assert keys["AccountingStorageType"] == "accounting_storage/slurmdbd" and keys["AccountingStorageHost"] == "db01"
    assert keys["AccountingStorageTRES"] == "gres/gpu,gres/gpu:a100,gres/gpu:h100"
    assert keys["GresTypes"] == "gpu" and keys["TopologyPlugin"] == "topology/tree"
    assert keys["HealthCheckProgram"] == "/usr/local/sbin/gpucluster-health-slurm"
    assert keys["TaskPlugin"] == "task/cgroup,task/affinity"   # real clusters: cgroup plugins by default
    assert "SlurmctldParameters" not in keys                   # not configless
    # the site's scheduler parameters, with the role's max_switch_wait (slurm_max_switch_wait 30m) added (issue 45)
    assert keys["SchedulerParameters"] == "bf_continue,sched_interval=5,max_switch_wait=1800"


def test_nodes_partitions_gres_topology(rendered):
    conf = rendered["slurm.conf"].splitlines()
    assert [l for l in conf if l.startswith("NodeName=")] == [
        "NodeName=gpu[01-04] CPUs=64 Sockets=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=500000 Gres=gpu:a100:8 Features=a100",
        "NodeName=gpu[05-06] CPUs=64 Sockets=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=500000 Gres=gpu:h100:4 Features=h100"]
    assert [l for l in conf if l.startswith("PartitionName=")] == [
        # DefMemPerGPU (issue 45): the least RealMemory per GPU of the partition's nodes (8 x a100: 62500, 4 x h100:
        # 125000), so that one GPU of a job brings its share of a node's memory, not all of it
        "PartitionName=dev Nodes=gpu[01-06] Default=YES MaxTime=1:00:00 DefMemPerGPU=62500",
        "PartitionName=research Nodes=gpu[05-06] DefMemPerGPU=125000"]
    assert [l for l in rendered["gres.conf"].splitlines() if not l.startswith("#")] == [
        "NodeName=gpu[01-04] Name=gpu Type=a100 File=/dev/nvidia[0-7]", "NodeName=gpu[05-06] Name=gpu Type=h100 File=/dev/nvidia[0-3]"]
    assert [l for l in rendered["topology.conf"].splitlines() if not l.startswith("#")] == [
        "SwitchName=leaf1 Nodes=gpu[01-04]", "SwitchName=leaf2 Nodes=gpu[05-06]", "SwitchName=spine1 Switches=leaf[1-2]"]
    assert "ConstrainDevices=yes" in rendered["cgroup.conf"]


def test_rendered_files_pass_the_checker_and_scontrol(rendered, tmp_path):
    for name, content in rendered.items():
        (tmp_path / name).write_text(content)
    assert [p for p in check_config_dir(str(tmp_path), None, ["gres/gpu"]) if p["severity"] == "error"] == []
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("no scontrol here")
    proc = subprocess.run([scontrol, "show", "hostnames", "x"], capture_output=True, text=True, check=False,
                          env=dict(os.environ, SLURM_CONF=str(tmp_path / "slurm.conf")))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def _team_model():
    from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build
    return build({"research": {"gpu_hours": "100/day", "max_concurrent": 4, "shares": 3},
                  "development": {"gpu_hours": "50/day", "max_concurrent": 2}},
                 gpu_types=["a100", "h100"], accounting_tres=False, fairshare_weight=10000, age_weight=1000,
                 calc_period="1m", decay_half_life="7d",
                 offpeak={"factor": 0.5, "open": "Mon..Fri *-*-* 20:00:00", "close": "Mon..Fri *-*-* 07:00:00"},
                 partitions=GOOD["slurm_partitions"])


@pytest.fixture(scope="module")
def rendered_fair_share(tmp_path_factory):
    team = _team_model()
    extra = dict(GOOD, slurm_conf_extra=team["slurm_conf"], slurm_partitions=team["slurm_partitions"])
    rc, tasks = _render(tmp_path_factory.mktemp("fair"), extra)
    assert rc == 0, json.dumps(tasks, indent=1)[-3000:]
    return tasks[-1]["hosts"]["localhost"]["__slurm_files"]


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_fair_share_and_offpeak_render_and_pass_the_checker(rendered_fair_share, tmp_path, version):
    keys = _keys(rendered_fair_share["slurm.conf"])
    assert keys["PriorityWeightFairshare"] == "10000" and keys["PriorityWeightAge"] == "1000"
    assert keys["PriorityCalcPeriod"] == "1" and keys["PriorityDecayHalfLife"] == "7-00:00:00"
    assert keys["PriorityWeightQOS"] == "10000" and keys["PriorityType"] == "priority/multifactor"
    assert [l for l in rendered_fair_share["slurm.conf"].splitlines() if l.startswith("PartitionName=")] == [
        "PartitionName=dev Nodes=gpu[01-06] Default=YES MaxTime=1:00:00 DefMemPerGPU=62500 "
        "TRESBillingWeights=GRES/gpu=1000",
        "PartitionName=research Nodes=gpu[05-06] DefMemPerGPU=125000 TRESBillingWeights=GRES/gpu=1000",
        "PartitionName=offpeak Nodes=gpu[01-06] Default=NO MaxTime=1:00:00 DefMemPerGPU=62500 State=DOWN "
        "TRESBillingWeights=GRES/gpu=500"]
    for name, content in rendered_fair_share.items():
        (tmp_path / name).write_text(content)
    errors = [p for p in check_config_dir(str(tmp_path), version, ["gres/gpu"]) if p["severity"] == "error"]
    assert errors == []


BAD = [
    ("exclusive-partitions", {"slurm_partitions": [{"name": "a", "groups": ["slurm_compute"], "exclusive_nodes": True},
                                                   {"name": "b", "groups": ["h100"], "exclusive_nodes": True}]}, None,
     ["slurm_partitions", "gpu05", "exclusive_nodes"]),
    ("gres-count", {}, {"gpu02": {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}},
     ["host gpu02", "slurm_node_gres[0].count", "eight"]),
    ("undefined-group", {"slurm_partitions": [{"name": "dev", "groups": ["nope"]}]}, None,
     ["slurm_partitions", "'nope' is not defined", "host localhost"]),
    ("outside-run-without-data", {}, {"gpu03": {"slurm_node_real_memory": None}},
     ["host gpu03", "slurm_node_real_memory", "cached facts"]),
]


@pytest.mark.parametrize("name,extra,hosts,expect", BAD, ids=[b[0] for b in BAD])
def test_bad_inventory_stops_the_render_naming_host_and_variable(tmp_path, name, extra, hosts, expect):
    rc, tasks = _render(tmp_path, dict(GOOD, **extra), hosts)
    assert rc == 2, name
    failed = [t for t in tasks if t["hosts"].get("localhost", {}).get("failed") and not t["hosts"]["localhost"].get("rescued")]
    assert failed[-1]["task"]["name"].endswith("Stop, naming the host, the variable and the value that cannot be rendered")
    message = failed[-1]["hosts"]["localhost"]["msg"]
    for text in expect:
        assert text in message, (name, text, message)
    assert message.endswith("Nothing was changed.")


# --- high availability (issue 23): a backup controller ------------------------------------------------------------

def test_backup_controller_renders_every_slurmctldhost_and_the_failover_keys(tmp_path):
    """The controller group's hosts are SlurmctldHost lines in inventory order (the primary renders); the timeouts
    and JobRequeue come from their variables, and the files still pass the checker."""
    inventory = _inventory()
    inventory["all"]["children"]["slurm_controller"]["hosts"]["ctl2.example.org"] = None
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))   # inventory order counts
    extra = dict(GOOD, slurm_config_overrides={"ProctrackType": "proctrack/linuxproc"}, slurm_state_save_shared=True,
                 slurm_state_save_location="/srv/shared/slurmctld", slurm_slurmctld_timeout=10,
                 slurm_slurmd_timeout=30, slurm_job_requeue=False)
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    argv = render_argv(tmp_path / "inventory.yml", write_render_play(tmp_path), tmp_path / "vars.json")
    proc = subprocess.run(argv, capture_output=True, text=True, env=render_env(), check=False)
    tasks = play_tasks(proc.stdout)
    assert proc.returncode == 0, json.dumps(tasks, indent=1)[-3000:]
    files = tasks[-1]["hosts"]["localhost"]["__slurm_files"]
    lines = files["slurm.conf"].splitlines()
    assert [line for line in lines if line.startswith("SlurmctldHost=")] == ["SlurmctldHost=localhost", "SlurmctldHost=ctl2"]
    keys = _keys(files["slurm.conf"])
    assert (keys["StateSaveLocation"], keys["SlurmctldTimeout"], keys["SlurmdTimeout"], keys["JobRequeue"]) == \
        ("/srv/shared/slurmctld", "10", "30", "0")
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    assert [p for p in check_config_dir(str(tmp_path), None, ["gres/gpu"]) if p["severity"] == "error"] == []
