"""The user_tools role (gpu-job on the login nodes): its preflight offline, and its config against the inventories.

The preflight runs as tests/unit/roles/test_bad_input_preflight.py runs the others (ansible-playbook, every host
offline, --tags user_tools_preflight): the shared cluster scenario's inventory passes, each bad input fails in the
argument specs or the preflight on the login node, naming host, variable and value. The config is built from the lab
inventory and every example inventory by the functions behind the role's filters (slurm_cluster_gpus, team_quotas,
gpu_job_config) with each inventory's own values, as Ansible loads them.
"""

import concurrent.futures
import json
import os

import pytest
from ansible import context
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_job
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import cluster_gpus
from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build
from offline_preflight import assert_refused_offline, molecule_inventory, run_roles, started_tasks

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LOGIN = "deb12-cluster-head"
CASES = [
    ("runtime-docker", {"user_tools_container_runtime": "docker"}, ["user_tools_container_runtime", "docker"]),
    ("dataset-relative", {"user_tools_datasets": {"imagenet": "data/imagenet"}},
     ["user_tools_datasets.imagenet is 'data/imagenet': an absolute path"]),
    ("team-typo", {"user_tools_teams": {"research": {"max_concurent": 8}}},
     ["user_tools_teams.research has unknown key 'max_concurent' (did you mean 'max_concurrent'?)"]),
    ("log-dir-spaces", {"user_tools_log_dir": "~/my logs"}, ["user_tools_log_dir (~/my logs)"]),
    # Issue 45: Slurm would cut gpu-job's --switches wait to its max_switch_wait (the slurm role's 30m).
    ("switches-wait-above-slurms", {"user_tools_switches_wait": "1h"},
     ["user_tools_switches_wait is 1h (3600 s), longer than Slurm's max_switch_wait of 1800 s"]),
    ("no-compute-nodes", {"user_tools_compute_group": "nothing_here"},
     ["user_tools_compute_group is 'nothing_here', which is not an inventory group"]),
    # The booking policy (issue 21): the shared cluster's, one value wrong.
    ("booking-share-above-one",
     {"user_tools_booking": {"partition": "dev", "max_gpus": 8, "max_duration": "4h", "max_ahead": "14d",
                             "max_share": 2}},
     ["user_tools_booking.max_share is 2"]),
    ("booking-partition-typo",
     {"user_tools_booking": {"partition": "devv", "max_gpus": 8, "max_duration": "4h", "max_ahead": "14d",
                             "max_share": 0.5}},
     ["user_tools_booking.partition is 'devv': no such partition"]),
]


@pytest.fixture(scope="module", name="runs")
def _runs(tmp_path_factory):
    """Every ansible-playbook run of this module at once (each is mostly waiting on its own Python)."""
    base = tmp_path_factory.mktemp("user_tools")
    cases = [("good", {})] + [(name, extra) for name, extra, _expect in CASES]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = dict((name, pool.submit(run_roles, base / name, molecule_inventory("cluster-deb12"),
                                          [("slurm_login", ["user_tools"])], extra)) for name, extra in cases)
    return dict((name, future.result()) for name, future in futures.items())


def test_the_shared_cluster_inventory_passes_the_preflight(runs):
    rc, out, calls = runs["good"]
    assert rc == 0, out
    assert not [c for c in calls if c.get("refused")], out
    assert "Build the config" in started_tasks(out)


@pytest.mark.parametrize("name,_extra,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_the_preflight(runs, name, _extra, expect):
    rc, out, calls = runs[name]
    if not name.startswith("runtime"):        # the argument specs' own message names the variable, not the host
        expect = expect + ["host %s:" % LOGIN]
    assert_refused_offline(name, rc, out, calls, ["user_tools"], expect, [LOGIN])


INVENTORIES = ["inventories/lab"] + sorted(os.path.join("inventories", "examples", d)
                                           for d in os.listdir(os.path.join(ROOT, "inventories", "examples")))


def _config(path):
    """The config the role writes for the inventory at ``path``, from its first login node's view."""
    context.CLIARGS = ImmutableDict(verbosity=0)
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[os.path.join(ROOT, path)])
    manager = VariableManager(loader=loader, inventory=inventory)
    groups = {g: [h.name for h in grp.get_hosts()] for g, grp in inventory.groups.items()}
    plain = {}

    def value(host, key, default=None):
        variables = plain.setdefault(host, manager.get_vars(host=inventory.get_host(host), include_hostvars=False))
        return json.loads(json.dumps(variables[key])) if key in variables else default

    login = groups["slurm_login"][0]
    partitions = value(login, "slurm_partitions")
    keys = ("slurm_node_gres", "slurm_node_name", "slurm_gpu_type_map", "health_check_expected")
    hostvars = dict((h, dict((k, value(h, k)) for k in keys if value(h, k) is not None))
                    for h in groups["slurm_compute"])
    cluster = cluster_gpus(groups["slurm_compute"], hostvars, partitions=partitions, groups=groups,
                           gpu_type_map=value(login, "slurm_gpu_type_map", {}))
    model = build(value(login, "team_quota_teams", {}), gpu_types=value(login, "team_quota_gpu_types", []))
    config = _gpu_job.build_config(cluster, partitions, model["teams"], model["users"],
                                   datasets={"imagenet": "/data/imagenet"},
                                   topology=bool(value(login, "slurm_fabric", {})))
    return cluster, model, config


@pytest.mark.parametrize("path", INVENTORIES)
def test_the_config_of_each_inventory_fits_its_teams(path):
    cluster, model, config = _config(path)
    for part in config["partitions"]:     # a partition's node types hold exactly its nodes' GPUs
        members = cluster["partitions"][part["name"]]
        assert sum(t["nodes"] for t in part["node_types"]) == len(members) > 0
        assert sum(t["gpus_per_node"] * t["nodes"] for t in part["node_types"]) == sum(
            sum(cluster["nodes"][n].values()) for n in members)
    assert sorted(p["name"] for p in config["partitions"]) == sorted(cluster["partitions"])
    assert [p["name"] for p in config["partitions"] if p["default"]], config["partitions"]
    assert sorted(config["users"]) == sorted(u["name"] for u in model["users"])
    for team in config["teams"]:
        # every team can run a one-GPU job and a job of one whole node of each type it may use
        placement = _gpu_job.fit(config, 1, team)
        assert placement["nodes"] == 1 and placement["gpus_per_node"] == 1
        for part in config["partitions"]:
            if team["partitions"] and part["name"] not in team["partitions"]:
                continue
            for kind in part["node_types"]:
                if team["gpu_types"] and kind["gpu_type"] not in team["gpu_types"]:
                    continue
                if team["max_concurrent"] is None or kind["gpus_per_node"] <= team["max_concurrent"]:
                    whole = _gpu_job.fit(config, kind["gpus_per_node"], team, kind["gpu_type"] or None)
                    assert (whole["nodes"], whole["gpus_per_node"]) == (1, kind["gpus_per_node"]), (team, kind)
        script = _gpu_job.script(config, {"name": "t", "team": team["name"], "placement": placement,
                                          "time_s": _gpu_job.job_time(config, placement, None), "image": "img:1",
                                          "command": "true", "dataset": "/data/imagenet", "log_dir": "/l",
                                          "workdir": "/w"})
        assert "#SBATCH --account=%s\n#SBATCH --qos=%s\n" % (team["name"], team["name"]) in script


def test_the_lab_config():
    _cluster, _model, config = _config("inventories/lab")
    assert config["partitions"] == [{"name": "gpu", "default": True, "max_time_s": 2 * 86400, "default_time_s": 3600,
                                     "node_types": [{"gpu_type": "h100", "gpus_per_node": 8, "nodes": 2}]}]
    assert config["topology"] is True
    team = config["teams"][0]
    placement = _gpu_job.fit(config, 16, dict(team, max_concurrent=None))
    assert (placement["nodes"], placement["gpus_per_node"]) == (2, 8)


def test_the_fallback_for_slurms_max_switch_wait_is_the_slurm_roles_default():
    """user_tools repeats slurm_max_switch_wait's default for hosts whose inventory does not set it."""
    import yaml
    with open(os.path.join(ROOT, "roles", "slurm", "defaults", "main.yml")) as handle:
        default = yaml.safe_load(handle)["slurm_max_switch_wait"]
    with open(os.path.join(ROOT, "roles", "user_tools", "vars", "main.yml")) as handle:
        fallback = yaml.safe_load(handle)["__user_tools_slurm_max_switch_wait"]
    assert fallback == "{{ slurm_max_switch_wait | default('%s') }}" % default


def test_the_fallback_for_the_registrys_port_is_the_image_registry_roles_default():
    """user_tools repeats image_registry_port's default (the site registry of short image names) for hosts whose
    inventory does not set it: held equal here, as the max_switch_wait fallback is."""
    import yaml
    with open(os.path.join(ROOT, "roles", "image_registry", "defaults", "main.yml")) as handle:
        default = yaml.safe_load(handle)["image_registry_port"]
    with open(os.path.join(ROOT, "roles", "user_tools", "vars", "main.yml")) as handle:
        fallback = yaml.safe_load(handle)["__user_tools_site_registry"]
    assert "(image_registry_port | default(%d))" % default in fallback


def test_the_fallbacks_for_prometheus_and_the_busy_threshold_are_the_monitoring_roles_defaults():
    """gpu-job usage --team (and playbooks/team_usage.yml) find Prometheus and say the busy threshold as the
    monitoring role's defaults give them where the inventory sets neither: held equal here."""
    import yaml
    with open(os.path.join(ROOT, "roles", "monitoring", "defaults", "main.yml")) as handle:
        monitoring = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "roles", "user_tools", "vars", "main.yml")) as handle:
        found = yaml.safe_load(handle)["__user_tools_prometheus_url"]
    with open(os.path.join(ROOT, "roles", "user_tools", "defaults", "main.yml")) as handle:
        threshold = yaml.safe_load(handle)["user_tools_gpu_busy_util_pct"]
    assert "monitoring_prometheus_listen_address | default('%s')" % monitoring["monitoring_prometheus_listen_address"] \
        in found
    assert ".monitoring_gpu_busy_util_pct | default(%d) }}" % monitoring["monitoring_gpu_busy_util_pct"] in threshold
    with open(os.path.join(ROOT, "playbooks", "team_usage.yml")) as handle:
        playbook = handle.read()
    assert "monitoring_prometheus_listen_address | default('%s')" % monitoring["monitoring_prometheus_listen_address"] \
        in playbook
    assert "monitoring_gpu_busy_util_pct | default(%d)" % monitoring["monitoring_gpu_busy_util_pct"] in playbook
