"""fast_hostvars: the same values as Ansible's hostvars, from every layer of a host's variables, much faster."""

import pytest
from ansible import constants as C
from ansible import context
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _fast_hostvars
from ansible_collections.gpucluster.ops.plugins.plugin_utils._fast_hostvars import FastHostVars, fast_hostvars

INVENTORY = """
all:
  vars:
    site: lab
    slurm_node_features: [from-all]
  children:
    slurm_compute:
      vars:
        slurm_node_cpus: 64
        slurm_node_gres: [{name: gpu, type: a100, count: 8}]
      children:
        big:
          vars:
            slurm_node_cpus: 128
            derived: "{{ slurm_node_cpus * 2 }}"
          hosts:
            gpu01:
            gpu02: {slurm_node_cpus: 96}
        small:
          hosts:
            gpu03:
            gpu04:
    login:
      hosts:
        login01:
"""


@pytest.fixture()
def hostvars(tmp_path):
    context.CLIARGS = ImmutableDict(verbosity=0)
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "small.yml").write_text("slurm_node_real_memory: 2048\nslurm_node_features: [small]\n")
    (tmp_path / "group_vars" / "all.yml").write_text("slurm_node_weight: 1\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu04.yml").write_text("slurm_node_real_memory: 4096\nslurm_node_name: gpu-four\n")
    (tmp_path / "host_vars" / "gpu01.json").write_text('{"slurm_node_weight": 11}')
    (tmp_path / "host_vars" / "login01").mkdir()
    (tmp_path / "host_vars" / "login01" / "main.yml").write_text("site: login-site\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader)


def _magic(hv, host):
    manager = hv._variable_manager  # pylint: disable=protected-access
    inventory_host = hv._inventory.get_host(host)  # pylint: disable=protected-access
    return set(manager._get_magic_variables(  # pylint: disable=protected-access
        play=None, host=inventory_host, task=None, include_hostvars=False))


def _same(hv, fast):
    for host in ["gpu01", "gpu02", "gpu03", "gpu04", "login01"]:
        slow = hv[host]
        keys = set(slow) - _magic(hv, host)
        assert keys <= set(fast[host]._vars), host  # pylint: disable=protected-access
        for key in keys:
            assert fast[host].get(key) == slow[key], (host, key)
        assert fast[host].get("no_such_variable", "dflt") == "dflt"


def test_every_layer_matches_hostvars(hostvars):
    manager = hostvars._variable_manager  # pylint: disable=protected-access
    manager.set_host_facts("gpu01", {"processor_vcpus": 128, "memtotal_mb": 1031800})
    manager.set_host_variable("gpu02", "slurm_node_real_memory", 999)          # include_vars
    manager.set_nonpersistent_facts("gpu03", {"slurm_node_cpus": 16})         # set_fact
    manager._extra_vars = {"slurm_node_weight": 7}  # pylint: disable=protected-access
    _same(hostvars, fast_hostvars(hostvars))
    fast = fast_hostvars(hostvars)
    assert fast["gpu01"].get("ansible_facts")["processor_vcpus"] == 128
    assert fast["gpu02"]["slurm_node_cpus"] == 96 and fast["gpu02"]["slurm_node_real_memory"] == 999
    assert fast["gpu03"]["slurm_node_cpus"] == 16 and fast["gpu03"]["slurm_node_features"] == ["small"]
    assert fast["gpu04"]["slurm_node_name"] == "gpu-four" and fast["gpu04"]["slurm_node_weight"] == 7


@pytest.fixture()
def jsonfile_cache(tmp_path, monkeypatch):
    """A jsonfile fact cache without a prefix (as ansible-fleet.cfg has it), for the next fixture's VariableManager."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    monkeypatch.setattr(C, "CACHE_PLUGIN", "jsonfile")
    return tmp_path / "facts"


def test_a_file_fact_cache_is_asked_only_for_the_hosts_it_has(jsonfile_cache, hostvars, monkeypatch):
    manager = hostvars._variable_manager  # pylint: disable=protected-access
    manager.set_host_facts("gpu01", {"processor_vcpus": 128})
    assert sorted(p.name for p in jsonfile_cache.iterdir()) == ["s1_gpu01"]
    cache = manager._fact_cache  # pylint: disable=protected-access
    # ansible-core 2.19 cannot list a file cache's keys without a prefix; the directory's listing names the hosts
    with pytest.raises(TypeError):
        cache.keys()
    assert _fast_hostvars._fact_cache_hosts(cache) == frozenset(["gpu01"])  # pylint: disable=protected-access
    asked = []
    get = cache.get
    monkeypatch.setattr(cache, "get", lambda key: asked.append(key) or get(key))
    fast = fast_hostvars(hostvars)
    assert fast["gpu01"].get("ansible_facts")["processor_vcpus"] == 128
    assert fast["gpu02"].get("ansible_facts", {}) == {} and fast["gpu03"]["slurm_node_cpus"] == 64
    assert asked == ["gpu01"]
    _same(hostvars, fast)


def test_a_fact_cache_that_cannot_list_its_hosts_is_asked_once_for_the_list(hostvars, monkeypatch):
    cache = hostvars._variable_manager._fact_cache  # pylint: disable=protected-access
    listed = []

    def keys():
        listed.append(1)
        raise NotImplementedError
    monkeypatch.setattr(cache, "keys", keys)
    hostvars._variable_manager.set_host_facts("gpu01", {"processor_vcpus": 128})  # pylint: disable=protected-access
    fast = fast_hostvars(hostvars)
    assert fast["gpu01"].get("ansible_facts")["processor_vcpus"] == 128
    assert [fast[h].get("ansible_facts", {}) for h in ("gpu02", "gpu03", "gpu04")] == [{}, {}, {}]
    assert listed == [1]


def test_templated_values_come_from_hostvars(hostvars):
    fast = fast_hostvars(hostvars)
    assert isinstance(fast, FastHostVars)
    assert fast["gpu01"].get("derived") == 256
    assert fast["gpu02"].get("derived") == 192


def test_not_ansible_hostvars_is_returned_as_is():
    plain = {"gpu01": {"slurm_node_cpus": 4}}
    assert fast_hostvars(plain) is plain


def test_merge_hash_behaviour_uses_hostvars(hostvars, monkeypatch):
    monkeypatch.setattr(C, "DEFAULT_HASH_BEHAVIOUR", "merge")
    assert fast_hostvars(hostvars) is hostvars


def test_unknown_host_falls_back(hostvars):
    fast = fast_hostvars(hostvars)
    with pytest.raises(Exception):
        fast["nonexistent"]["x"]  # pylint: disable=expression-not-assigned


def test_kept_only_within_a_worker_process(hostvars, monkeypatch):
    assert fast_hostvars(hostvars) is not fast_hostvars(hostvars)  # the main process never keeps one
    monkeypatch.setattr(_fast_hostvars.multiprocessing, "parent_process", object)
    monkeypatch.setattr(_fast_hostvars, "_WORKER_VIEW", {})
    first = fast_hostvars(hostvars)
    assert fast_hostvars(hostvars) is first


def test_host_group_vars_runs_only_for_hosts_with_a_host_vars_entry(hostvars, monkeypatch):
    """One listing of host_vars/ instead of a plugin call per host: the same values, and no call for gpu02 and
    gpu03, which have nothing there (gpu01 has a .json file, gpu04 a .yml file, login01 a directory)."""
    called = []
    real = _fast_hostvars.get_plugin_vars

    def counting(loader, plugin, path, entities):
        called.extend(e.name for e in entities)
        return real(loader, plugin, path, entities)

    monkeypatch.setattr(_fast_hostvars, "get_plugin_vars", counting)
    fast = fast_hostvars(hostvars)
    _same(hostvars, fast)
    assert fast["gpu01"]["slurm_node_weight"] == 11 and fast["login01"]["site"] == "login-site"
    hosts_called = set(called) & {"gpu01", "gpu02", "gpu03", "gpu04", "login01"}
    assert hosts_called == {"gpu01", "gpu04", "login01"}, called


SHARED_INVENTORY = """
all:
  children:
    slurm_compute:
      vars:
        slurm_node_cpus: 128
        slurm_node_real_memory: 1000000
        slurm_node_gres: [{name: gpu, type: a100, count: 8}]
      children:
        plain:
          hosts:
            n001:
            n002:
            n003:
        nvme:
          vars:
            slurm_node_features: [nvme]
          hosts:
            n004:
            n005: {slurm_node_weight: 5}
            n006:
            n007:
"""


def test_hosts_with_group_variables_alone_share_a_key_and_their_node_specs_are_each_their_own(tmp_path):
    """node_specs makes one spec per shared key and copies it: every spec must equal the one made from the host's
    own variables (Ansible's hostvars, no sharing), whatever the host has of its own (variables, facts, files)."""
    from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_render as render
    context.CLIARGS = ImmutableDict(verbosity=0)
    (tmp_path / "hosts.yml").write_text(SHARED_INVENTORY)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n007.yml").write_text("slurm_node_real_memory: 500000\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    manager.set_host_facts("n002", {"processor_vcpus": 64})                       # gathered facts
    manager.set_nonpersistent_facts("n003", {"slurm_node_name": "node-three"})   # set_fact
    hostvars = HostVars(inventory=inventory, variable_manager=manager, loader=loader)
    fast = fast_hostvars(hostvars)
    hosts = ["n%03d" % i for i in range(1, 8)]
    keys = {h: fast[h].shared_key for h in hosts}
    assert keys["n001"] is not None and keys["n004"] is not None and keys["n001"] != keys["n004"]
    assert keys["n006"] == keys["n004"]
    assert all(keys[h] is None for h in ("n002", "n003", "n005", "n007")), keys
    slow_specs = render.node_specs(hosts, hostvars, render.DEFAULTS)
    fast_specs = render.node_specs(hosts, fast, render.DEFAULTS)
    as_dicts = [[{k: getattr(s, k) for k in render.NodeSpec.__slots__} for s in specs] for specs in (slow_specs, fast_specs)]
    assert as_dicts[0] == as_dicts[1]
    assert [s.name for s in fast_specs] == ["n001", "n002", "node-three", "n004", "n005", "n006", "n007"]
    assert fast_specs[5].features == ["nvme"] and fast_specs[6].memory != fast_specs[5].memory
