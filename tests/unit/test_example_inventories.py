"""The real-size example inventories (inventories/examples/*) are usable as they stand.

Each one is loaded with Ansible's own inventory machinery (InventoryManager, VariableManager, HostVars, with the vault
variables of its vault.yml.example as extra vars) and checked for what a site run would trip over:

- every variable it sets is a variable of a role that playbooks/site.yml applies (or a documented host variable),
  and each host's values pass the argument specs of the roles applied to its groups (ArgumentSpecValidator on the
  role's meta/argument_specs.yml, as Ansible validates role arguments);
- the slurm role's own render step (tasks_from: render, through the gpucluster.ops.slurm_*_lines filters) turns it
  into slurm.conf, gres.conf, topology.conf and cgroup.conf that the collection's config checker accepts, with one
  NodeName line per node type and the right GPU count per type;
- gpucluster.ops.ipoib_addresses gives every host of the fabric its own address;
- gpucluster.ops.team_quotas accepts the team model, its GPU types are the cluster's, its partitions exist;
- health_check_expected passes the health checker's own config validation;
- ansible-playbook --syntax-check of playbooks/site.yml passes with it;
- ansible-inventory --graph parses it (an inventory source it cannot parse fails the run, not a warning) and shows
  every group and host the checks above count.

GPU nodes of the group kubernetes_gpu_nodes (an example where Slurm runs beside Kubernetes) are GPU nodes without
being Slurm compute nodes: the Slurm and team checks count slurm_compute, the hardware checks every GPU node.

The ansible-playbook and ansible-inventory runs (syntax check, render and graph, per inventory) start together with
the module's first test and run beside the in-process checks.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible import context
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader import AnsibleCollectionConfig
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.gpucluster.ops.plugins.filter.ipoib_addresses import FilterModule as IpoibFilters
from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import FilterModule as NodeLineFilters
from ansible_collections.gpucluster.ops.plugins.filter.team_quotas import FilterModule as TeamQuotaFilters
from ansible_collections.gpucluster.ops.plugins.module_utils import _health
from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import expand as expand_hostlist
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_config_check import check_config_dir, format_problem
from ansible_collections.gpucluster.ops.tests.unit.roles.rolerender import trust
from render_step import COLLECTIONS, ansible_env, render_argv, render_env, rendered_files, write_render_play

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES_DIR = os.path.join(ROOT, "inventories", "examples")
EXAMPLES = sorted(d for d in os.listdir(EXAMPLES_DIR) if os.path.isfile(os.path.join(EXAMPLES_DIR, d, "hosts.yml")))

# What each example must come to: GPU nodes and GPUs of the whole cluster; per Slurm node type (one NodeName line)
# its Slurm GPU type, Slurm compute nodes and GPUs per node (two node types may share a GPU type: dgx-a100-50gpu's
# DGX A100 and A100 PCIe servers are both a100); the Kubernetes GPU nodes (group kubernetes_gpu_nodes) the same way,
# when there are any; the node types (child groups of gpu_nodes); and the IPoIB rails of a GPU node (one address per
# rail).
EXPECTED = {
    "dgx-a100-50gpu": {"gpu_nodes": 10, "gpus": 50, "types": [("a100", 4, 8), ("a100", 4, 3)],
                       "kubernetes": [("a100", 2, 3)], "node_types": 2, "rails": 1},
    "hgx-h100-256": {"gpu_nodes": 32, "gpus": 256, "types": [("h100", 32, 8)], "kubernetes": [], "node_types": 1,
                     "rails": 1},
    "hgx-h100-400gpu": {"gpu_nodes": 50, "gpus": 400, "types": [("h100", 50, 8)], "kubernetes": [], "node_types": 1,
                        "rails": 2},
    "mixed-a100-l40s": {"gpu_nodes": 40, "gpus": 224, "types": [("a100", 16, 8), ("l40s", 24, 4)], "kubernetes": [],
                        "node_types": 2, "rails": 1},
}
KUBERNETES_GROUP = "kubernetes_gpu_nodes"


def slurm_nodes(name):
    """The Slurm compute nodes an example must have."""
    return sum(nodes for _gpu_type, nodes, _per_node in EXPECTED[name]["types"])


def slurm_gpus(name):
    """The GPUs of an example's Slurm compute nodes (the whole cluster's where no GPU node is Kubernetes')."""
    return sum(nodes * per_node for _gpu_type, nodes, per_node in EXPECTED[name]["types"])


def gpu_types(name):
    """The Slurm GPU types of an example's compute nodes."""
    return sorted({gpu_type for gpu_type, _nodes, _per_node in EXPECTED[name]["types"]})


# Host variables the roles read that are not role arguments (README: slurm, node_baseline, monitoring), and the
# connection variables. Anything else an example sets must be an argument of a role of playbooks/site.yml.
HOST_VARIABLES = {
    "ansible_host", "ansible_user", "ansible_port", "ansible_python_interpreter",
    "gpucluster_cluster_name", "gpucluster_site_skip_roles",
    # roles/_common tasks_from=kubernetes_preflight, read by the roles that call the Kubernetes API.
    "gpucluster_kubernetes_delegate", "gpucluster_kubeconfig", "gpucluster_kubernetes_context",
    "node_baseline_address",
    "monitoring_scrape_address", "monitoring_expected_gpus",
    "slurm_node_name", "slurm_node_cpus", "slurm_node_sockets", "slurm_node_cores_per_socket",
    "slurm_node_threads_per_core", "slurm_node_real_memory", "slurm_node_memory_reserve_mib", "slurm_node_gres",
    "slurm_node_features", "slurm_node_weight", "slurm_gres_cpu_numbering",
}
# Lab and test settings that have no place in a real inventory.
LAB_ONLY = re.compile(r"^(gpusim_|lab_|health_check_sources$|slurm_config_overrides$|ansible_connection$)")


def _load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _vault_vars(name):
    return _load_yaml(os.path.join(EXAMPLES_DIR, name, "group_vars", "all", "vault.yml.example"))


def _site_roles():
    """(host pattern, role name, entry point) for every role playbooks/site.yml applies."""
    applied = []
    for play in _load_yaml(os.path.join(ROOT, "playbooks", "site.yml")):
        for role in play.get("roles") or []:
            name = role["role"] if isinstance(role, dict) else role
            applied.append((play["hosts"], name, "main"))
        for task in play.get("tasks") or []:
            for action in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if action in task:
                    applied.append((play["hosts"], task[action]["name"], task[action].get("tasks_from", "main")))
    return applied


def _argument_specs(role):
    short = role.split(".")[-1]
    specs = _load_yaml(os.path.join(ROOT, "roles", short, "meta", "argument_specs.yml"))["argument_specs"]
    return {entry: spec.get("options") or {} for entry, spec in specs.items()}


@pytest.fixture(scope="module")
def playbook_runs(tmp_path_factory):
    """Start the syntax check and the render of every example at once; return {(example, kind): Popen}."""
    tmp = tmp_path_factory.mktemp("examples")
    play = write_render_play(tmp)
    runs = {}
    for name in EXAMPLES:
        inventory = os.path.join(EXAMPLES_DIR, name)
        runs[(name, "syntax")] = subprocess.Popen(
            ["ansible-playbook", "--syntax-check", "-i", inventory, os.path.join(ROOT, "playbooks", "site.yml")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False"))
        extra = dict(_vault_vars(name), ansible_connection="local", ansible_python_interpreter=sys.executable)
        (tmp / ("%s.json" % name)).write_text(json.dumps(extra))
        runs[(name, "render")] = subprocess.Popen(
            render_argv(inventory, play, tmp / ("%s.json" % name)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=ROOT, env=render_env(ANSIBLE_DEPRECATION_WARNINGS="False"))
        runs[(name, "graph")] = _graph(inventory)
    yield runs
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _graph(inventory):
    """Start ``ansible-inventory --graph`` on ``inventory``; a source it cannot parse fails the run (Ansible's default
    is a warning and an inventory of localhost alone)."""
    return subprocess.Popen(
        ["ansible-inventory", "-i", str(inventory), "--graph"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False", ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
                                             ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True"))


def _graph_groups(out):
    """{group: {every host under it, through its child groups too}} from ``ansible-inventory --graph``."""
    groups, stack = {}, []
    for line in out.splitlines():
        text = line.rstrip()
        if not text:
            continue
        cut = text.rfind("|--")
        depth, name = (cut // 3 + 1, text[cut + 3:]) if cut >= 0 else (0, text)
        del stack[depth:]
        if name.startswith("@"):
            name = name[1:].rstrip(":")
            groups.setdefault(name, set())
            stack.append(name)
        else:
            for group in stack:
                groups[group].add(name)
    return groups


def _finish(playbook_runs, name, kind):
    proc = playbook_runs[(name, kind)]
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def collection_loader():
    """Ansible's collection loader, so that gpucluster.ops.* filters in inventory values template as in a run.

    pytest imported this collection as plain packages (pytest.ini's pythonpath), without the metadata Ansible's
    plugin loader looks for: while this module runs, the collection's modules are loaded again through Ansible's
    loader; afterwards the loader is removed and pytest's modules are put back.
    """
    if AnsibleCollectionConfig.collection_finder is not None:
        yield
        return
    saved = _pop_collection_modules()
    init_plugin_loader([COLLECTIONS])
    yield
    _AnsibleCollectionFinder._remove()  # pylint: disable=protected-access
    _pop_collection_modules()
    sys.modules.update(saved)


def _pop_collection_modules():
    return {n: sys.modules.pop(n) for n in list(sys.modules) if n == "ansible_collections" or n.startswith("ansible_collections.")}


class Example(object):
    """One example inventory as Ansible loads it."""

    def __init__(self, name, path=None):
        context.CLIARGS = ImmutableDict(verbosity=0)
        self.name = name
        self.path = path or os.path.join(EXAMPLES_DIR, name)
        self.loader = DataLoader()
        self.inventory = InventoryManager(loader=self.loader, sources=[self.path])
        self.manager = VariableManager(loader=self.loader, inventory=self.inventory)
        # what -e @vault.yml would give
        self.manager._extra_vars = _vault_vars(name) if path is None else {}  # pylint: disable=protected-access
        self.hostvars = HostVars(inventory=self.inventory, variable_manager=self.manager, loader=self.loader)
        self.groups = {g: [h.name for h in grp.get_hosts()] for g, grp in self.inventory.groups.items()}

    def hosts(self, pattern="all"):
        return [h.name for h in self.inventory.get_hosts(pattern)]

    def set_keys(self, host):
        """The variables the inventory sets for a host (not Ansible's magic variables, not the extra vars)."""
        inventory_host = self.inventory.get_host(host)
        magic = set(self.manager._get_magic_variables(  # pylint: disable=protected-access
            play=None, host=inventory_host, task=None, include_hostvars=False, _hosts=None, _hosts_all=None))
        magic |= set(inventory_host.get_magic_vars()) | {"ansible_facts", "ansible_local", "inventory_file", "inventory_dir"}
        every = self.manager.get_vars(host=inventory_host, include_hostvars=False)
        return sorted(set(every) - magic - set(self.manager.extra_vars))

    def value(self, host, key):
        return json.loads(json.dumps(self.hostvars[host][key]))


@pytest.fixture(scope="module", params=EXAMPLES)
def example(request, collection_loader, playbook_runs):  # pylint: disable=unused-argument,redefined-outer-name
    """One example, loaded in-process while the ansible-playbook runs of every example go on beside it."""
    return Example(request.param)


def test_every_example_is_listed_here():
    assert EXAMPLES and sorted(EXPECTED) == EXAMPLES


def test_groups_of_the_site_playbook(example):
    expected = EXPECTED[example.name]
    gpu_nodes = example.hosts("gpu_nodes")
    assert len(gpu_nodes) == expected["gpu_nodes"]
    assert len(example.hosts("slurm_controller")) == 1 and len(example.hosts("slurm_database")) == 1
    assert example.hosts("slurm_controller") == example.hosts("slurm_database")
    assert set(example.hosts("slurm_controller")) <= set(example.hosts("head_nodes"))
    assert set(example.hosts("slurm_login")) == set(example.hosts("head_nodes"))
    # Every GPU node is a Slurm compute node or a Kubernetes GPU node, never both.
    kubernetes = example.groups.get(KUBERNETES_GROUP, [])
    assert len(kubernetes) == sum(nodes for _gpu_type, nodes, _per_node in expected["kubernetes"])
    assert set(kubernetes) <= set(gpu_nodes)
    assert sorted(example.hosts("slurm_compute")) == sorted(set(gpu_nodes) - set(kubernetes))
    assert len(example.hosts("slurm_compute")) == slurm_nodes(example.name)
    assert not set(gpu_nodes) & set(example.hosts("head_nodes"))
    # Node types: child groups of gpu_nodes that split it without overlap.
    types = [g.name for g in example.inventory.groups["gpu_nodes"].child_groups]
    assert len(types) == expected["node_types"]
    assert sorted(h for t in types for h in example.groups[t]) == sorted(gpu_nodes)
    # The whole cluster's GPUs, as the nodes' health checks expect them.
    assert sum(example.value(h, "health_check_expected")["gpu_count"] for h in gpu_nodes) == expected["gpus"]
    # The Kubernetes GPU nodes by (GPU type, GPUs per node), as Slurm would type them.
    found = {}
    for host in kubernetes:
        gpu_type = example.value(host, "slurm_node_gres")[0]["type"]
        key = (gpu_type, example.value(host, "health_check_expected")["gpu_count"])
        found[key] = found.get(key, 0) + 1
    assert found == {(gpu_type, per_node): nodes for gpu_type, nodes, per_node in expected["kubernetes"]}


def test_kubernetes_gpu_nodes_get_no_slurm(example):
    """A Kubernetes GPU node gets the GPU nodes' roles, not Slurm's: no slurmd, so no HealthCheckProgram wrapper, and
    the containers bring CUDA and NCCL, and the GPU Operator its container toolkit."""
    kubernetes = example.groups.get(KUBERNETES_GROUP, [])
    plays = [pattern for pattern, role, _entry in _site_roles() if role == "gpucluster.ops.slurm"]
    assert plays and all(not set(kubernetes) & set(example.hosts(pattern)) for pattern in plays)
    for host in kubernetes:
        assert example.value(host, "health_check_slurm_enabled") is False, host
        assert {"cuda_toolkit", "nccl", "container_toolkit"} >= set(example.value(host, "gpucluster_site_skip_roles"))
        assert {"cuda_toolkit", "nccl"} <= set(example.value(host, "gpucluster_site_skip_roles")), host
    for host in example.hosts("slurm_compute"):
        assert "health_check_slurm_enabled" not in example.set_keys(host), host
        assert "gpucluster_site_skip_roles" not in example.set_keys(host), host


def test_no_lab_settings_and_no_secrets(example):
    for host in example.hosts():
        keys = example.set_keys(host)
        assert not [k for k in keys if LAB_ONLY.match(k)], host
        assert example.value(host, "slurm_db_password") == example.manager.extra_vars["vault_slurm_db_password"]
    for folder, _dirs, files in os.walk(example.path):
        for filename in files:
            with open(os.path.join(folder, filename)) as handle:
                text = handle.read()
            # The password is a vault reference wherever it is set; nothing reaches a container.
            for value in re.findall(r"^\s*slurm_db_password:(.*)$", text, re.M):
                assert re.match(r"""^\s*["']\{\{\s*vault_\w+\s*\}\}["']\s*$""", value), (filename, value)
            assert "docker" not in text and "gpusim" not in text, filename
    assert not os.path.exists(os.path.join(example.path, "group_vars", "all", "vault.yml"))


def test_variables_are_role_arguments_and_pass_their_specs(example):
    applied = _site_roles()
    specs = {(role, entry): _argument_specs(role).get(entry, _argument_specs(role)["main"])
             for _pattern, role, entry in applied}
    known = set(HOST_VARIABLES).union(*[set(options) for options in specs.values()])
    problems = []
    for host in example.hosts():
        keys = example.set_keys(host)
        problems += ["%s: %s is no variable of the roles of site.yml" % (host, k) for k in keys if k not in known]
        for pattern, role, entry in applied:
            if host not in example.hosts(pattern):
                continue
            options = specs[(role, entry)]
            mine = [k for k in keys if k in options]
            params = {k: example.value(host, k) for k in mine}
            result = ArgumentSpecValidator({k: options[k] for k in mine}).validate(params)
            problems += ["%s: %s (%s): %s" % (host, role, entry, m) for m in result.error_messages]
            problems += ["%s: %s (%s) needs %s" % (host, role, entry, k)
                         for k, o in options.items() if o.get("required") and k not in keys]
    assert problems == [], "\n".join(problems)


def test_health_expectations_pass_the_checker_and_match_slurm(example):
    for host in example.hosts("gpu_nodes"):
        expected = example.value(host, "health_check_expected")
        config = _health.load_config(overrides={"node": host, "expected": expected})
        assert config["expected"] == expected
        gres = [g for g in example.value(host, "slurm_node_gres") if g["name"] == "gpu"]
        assert len(gres) == 1 and gres[0]["count"] == expected["gpu_count"], host
        assert example.value(host, "infiniband_expected_port_count") == expected["ib_port_count"], host
        assert example.value(host, "infiniband_expected_rate_gbps") == expected["ib_rate_gbps"], host
        assert example.value(host, "nvidia_driver_version").startswith(expected["driver_version"]), host
        cores = example.value(host, "slurm_node_sockets") * example.value(host, "slurm_node_cores_per_socket")
        assert cores * example.value(host, "slurm_node_threads_per_core") == example.value(host, "slurm_node_cpus")


def test_node_lines_are_one_per_node_type(example):
    """The filter the render uses, called in-process on Ansible's hostvars: one line per node type."""
    lines = NodeLineFilters().filters()["slurm_node_lines"](example.groups["slurm_compute"], example.hostvars)
    found = []
    for line in lines:
        fields = dict(f.split("=", 1) for f in line.split())
        _name, gpu_type, count = fields["Gres"].split(":")
        found.append((gpu_type, len(expand_hostlist(fields["NodeName"])), int(count)))
    assert sorted(found) == sorted(EXPECTED[example.name]["types"]), lines


def test_ipoib_addresses_do_not_collide(example):
    hosts = example.groups["all"]
    group = {example.value(h, "infiniband_hosts_group") if "infiniband_hosts_group" in example.set_keys(h) else "all"
             for h in hosts}
    assert group == {"all"}
    mtu = {example.value(h, "infiniband_fabric_mtu") if "infiniband_fabric_mtu" in example.set_keys(h) else 4096
           for h in hosts}
    assert len(mtu) == 1
    assigned = IpoibFilters().filters()["ipoib_addresses"](hosts, example.hostvars, fabric_mtu=mtu.pop())
    addresses = [i["address"] for h in hosts for i in assigned[h] if i.get("address")]
    # every host has its ib0 address; each GPU node one address per rail, each rail its own subnet
    assert sorted(h for h in hosts for i in assigned[h] if i.get("address") and i["name"] == "ib0") == sorted(hosts)
    rails = EXPECTED[example.name]["rails"]
    for host in example.groups["gpu_nodes"]:
        subnets = [i["subnet"] for i in assigned[host] if i.get("address")]
        assert len(subnets) == len(set(subnets)) == rails, (host, assigned[host])
    assert len(addresses) == len(hosts) + (rails - 1) * len(example.groups["gpu_nodes"])
    assert len(set(addresses)) == len(addresses)


def test_team_quota_model(example):
    controller = example.hosts("slurm_controller")[0]
    teams = example.value(controller, "team_quota_teams")
    quota_types = example.value(controller, "team_quota_gpu_types")
    model = TeamQuotaFilters().filters()["team_quotas"](teams, quota_types)
    assert len(model["teams"]) == len(teams) >= 2
    assert sorted(quota_types) == gpu_types(example.name)
    partitions = {p["name"] for p in example.value(controller, "slurm_partitions")}
    for team in teams.values():
        assert set(team.get("partitions", [])) <= partitions, team
    # The slurm.conf keys quotas need reach the slurm role through the inventory.
    slurm_conf_extra = example.value(controller, "slurm_conf_extra")
    assert slurm_conf_extra["AccountingStorageEnforce"] == "associations,limits,qos,safe"
    assert "AccountingStorageTRES" not in slurm_conf_extra
    # Each team's GPUs at once fit the GPUs of its types; the monthly budgets fit the cluster's GPU-hours.
    types = EXPECTED[example.name]["types"]
    for team in teams.values():
        gpus = sum(n * per for t, n, per in types if t in team.get("gpu_types", [t for t, _n, _per in types]))
        assert 0 < team["max_concurrent"] <= gpus, team
    monthly = [int(team["gpu_hours"].split("/")[0]) for team in teams.values() if team["gpu_hours"].endswith("/month")]
    assert len(monthly) == len(teams) and sum(monthly) <= slurm_gpus(example.name) * 730


def _team_quota_preflight(example, **overrides):
    """The team_quota preflight's cluster read and model, templated as the role does on the controller: the role's
    defaults, the controller's inventory variables, the role's vars, then ``overrides`` (as extra vars)."""
    role = os.path.join(ROOT, "roles", "team_quota")
    controller = example.hosts("slurm_controller")[0]
    variables = trust(_load_yaml(os.path.join(role, "defaults", "main.yml")))
    variables.update(example.manager.get_vars(host=example.inventory.get_host(controller), include_hostvars=True))
    variables.update(trust(_load_yaml(os.path.join(role, "vars", "main.yml"))))
    variables.update(overrides)
    tasks = {t["name"]: t for t in _load_yaml(os.path.join(role, "tasks", "inventory_check.yml"))}
    read = tasks["Read the GPUs of every compute node and the nodes of every partition"]["ansible.builtin.set_fact"]
    check = tasks["Check that the cluster's compute nodes are in the inventory"]["ansible.builtin.assert"]["that"]
    templar = Templar(loader=example.loader, variables=variables)
    assert templar.template(trust_as_template("{{ %s }}" % check)) is True
    cluster = templar.template(trust_as_template(read["__team_quota_cluster"]))
    templar = Templar(loader=example.loader, variables=dict(variables, __team_quota_cluster=cluster))
    return cluster, templar.template(trust_as_template("{{ __team_quota_model }}"))


def test_team_quota_preflight_accepts_the_teams_against_the_cluster(example):
    """The role's own preflight expressions: the cluster it reads is the one the render declares, and the teams fit."""
    cluster, team_model = _team_quota_preflight(example)
    assert len(cluster["nodes"]) == slurm_nodes(example.name)
    assert sorted(set(t for c in cluster["nodes"].values() for t in c)) == gpu_types(example.name)
    assert sum(sum(c.values()) for c in cluster["nodes"].values()) == slurm_gpus(example.name)
    controller = example.hosts("slurm_controller")[0]
    assert sorted(cluster["partitions"]) == sorted(p["name"] for p in example.value(controller, "slurm_partitions"))
    assert team_model["errors"] == [] and team_model["warnings"] == []


def test_team_quota_preflight_refuses_teams_the_cluster_cannot_serve(example):
    controller = example.hosts("slurm_controller")[0]
    teams = example.value(controller, "team_quota_teams")
    gpus = slurm_gpus(example.name)
    name = sorted(teams)[0]
    bad = dict(teams)
    bad[name] = dict(teams[name], max_concurrent=gpus + 1, gpu_hours="%d/month" % (gpus * 24 * 31 + 1),
                     partitions=["nonexistent"])
    _cluster, team_model = _team_quota_preflight(example, team_quota_teams=bad)
    errors = " ".join(team_model["errors"])
    assert "team_quota_teams.%s.partitions has 'nonexistent', which is not a partition of the cluster (inventory " \
           "group slurm_compute)" % name in errors
    assert "team_quota_teams.%s.max_concurrent is %d, more than the 0 GPUs" % (name, gpus + 1) in errors
    assert "team_quota_teams.%s.gpu_hours is '%d/month'" % (name, gpus * 24 * 31 + 1) in errors


def test_the_lab_inventory_fits_its_cluster(collection_loader):  # pylint: disable=unused-argument,redefined-outer-name
    """The lab (inventories/lab) against the same cross-host checks: teams, GRES and health expectations, IPoIB."""
    lab = Example("lab", os.path.join(ROOT, "inventories", "lab"))
    cluster, team_model = _team_quota_preflight(lab)
    assert cluster["nodes"] == {"lab-gpu01": {"h100": 8}, "lab-gpu02": {"h100": 8}}
    assert team_model["errors"] == [] and team_model["warnings"] == []
    assert len(NodeLineFilters().filters()["slurm_node_lines"](lab.groups["slurm_compute"], lab.hostvars)) == 1
    assigned = IpoibFilters().filters()["ipoib_addresses"](lab.groups["all"], lab.hostvars)
    assert sorted(i["address"] for h in assigned for i in assigned[h]) == ["10.20.0.1/24", "10.20.0.2/24",
                                                                           "10.20.0.254/24"]


def _rendered(playbook_runs, name):
    rc, out, err = _finish(playbook_runs, name, "render")
    assert rc == 0, (out[-3000:], err[-2000:])
    return rendered_files(out)


@pytest.mark.parametrize("name", EXAMPLES)
def test_slurm_render_passes_the_config_checker(playbook_runs, name, tmp_path):
    files = _rendered(playbook_runs, name)
    assert sorted(files) == ["cgroup.conf", "gres.conf", "slurm.conf", "topology.conf"]
    for filename, content in files.items():
        (tmp_path / filename).write_text(content)
    problems = check_config_dir(str(tmp_path), "22.05", ["gres/gpu"])
    assert [format_problem(p) for p in problems] == []
    expected = EXPECTED[name]
    lines = files["slurm.conf"].splitlines()
    nodes = [dict(f.split("=", 1) for f in line.split()) for line in lines if line.startswith("NodeName=")]
    found = []
    for node in nodes:
        _gpu, gpu_type, count = node["Gres"].split(":")
        found.append((gpu_type, len(expand_hostlist(node["NodeName"])), int(count)))
    assert sorted(found) == sorted(expected["types"]), nodes
    assert sum(n * per for _t, n, per in found) == slurm_gpus(name)
    gres = [line for line in files["gres.conf"].splitlines() if line.startswith("NodeName=")]
    assert len(gres) == len(expected["types"])
    switches = [line for line in files["topology.conf"].splitlines() if line.startswith("SwitchName=")]
    leaves = [s for s in switches if " Nodes=" in s]
    under_leaves = [n for s in leaves for n in expand_hostlist(s.split(" Nodes=")[1])]
    assert sorted(under_leaves) == sorted(n for node in nodes for n in expand_hostlist(node["NodeName"]))
    keys = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("#", "NodeName", "PartitionName")))
    assert keys["TopologyPlugin"] == "topology/tree" and keys["SlurmctldParameters"] == "enable_configless"
    assert keys["AccountingStorageTRES"] == ",".join(["gres/gpu"] + ["gres/gpu:%s" % t for t in gpu_types(name)])
    assert keys["ProctrackType"] == "proctrack/cgroup"  # real nodes: no container overrides


@pytest.mark.parametrize("name", EXAMPLES)
def test_site_playbook_syntax_check(playbook_runs, name):
    rc, out, err = _finish(playbook_runs, name, "syntax")
    assert rc == 0, (out[-2000:], err[-2000:])
    assert "WARNING" not in err, err


@pytest.mark.parametrize("name", EXAMPLES)
def test_ansible_inventory_graph(playbook_runs, name):
    """ansible-inventory parses the example and shows the groups and hosts the checks above count."""
    rc, out, err = _finish(playbook_runs, name, "graph")
    assert rc == 0, (out[-2000:], err[-2000:])
    assert "WARNING" not in err, err
    groups = _graph_groups(out)
    expected = EXPECTED[name]
    kubernetes = sum(nodes for _gpu_type, nodes, _per_node in expected["kubernetes"])
    assert {"head_nodes", "gpu_nodes", "slurm_controller", "slurm_database", "slurm_login", "slurm_compute"} <= set(groups)
    assert groups["all"] == groups["head_nodes"] | groups["gpu_nodes"]
    assert len(groups["gpu_nodes"]) == expected["gpu_nodes"]
    assert len(groups.get(KUBERNETES_GROUP, ())) == kubernetes
    assert groups["slurm_compute"] == groups["gpu_nodes"] - groups.get(KUBERNETES_GROUP, set())
    assert len(groups["slurm_controller"]) == 1 and groups["slurm_login"] == groups["head_nodes"]


def test_ansible_inventory_graph_fails_on_a_broken_inventory(tmp_path):
    """The graph check is no formality: an example whose hosts.yml does not parse fails it."""
    broken = tmp_path / "broken"
    shutil.copytree(os.path.join(EXAMPLES_DIR, EXAMPLES[0]), str(broken))
    with open(str(broken / "hosts.yml"), "a") as handle:
        handle.write("    slurm_compute: [unclosed\n")
    proc = _graph(broken)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, (out, err)
    assert "hosts.yml" in err, err
