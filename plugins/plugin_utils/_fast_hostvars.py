# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A faster read-only view of ``hostvars`` for filters that read a few variables of thousands of hosts.

``hostvars[host]`` runs the whole of ``VariableManager.get_vars()`` for the host: every vars plugin for every group
of the host, then a template engine for the result. At 10,000 hosts that costs about 1 ms per host and per filter,
which is most of the time of a slurm.conf render. The group part of a host's variables depends only on the list of
its groups, so this view computes it once per distinct list and adds the host's own layers (inventory host vars,
host_vars files, facts, set_fact/include_vars, extra vars) in the precedence order of ``get_vars()``.

A value that holds a Jinja template is not served from here: the view falls back to ``hostvars[host][key]``, which
templates it exactly as Ansible does. So does everything when ``hostvars`` is not Ansible's HostVars (a plain dict in
tests and benchmarks), when ``hash_behaviour`` is ``merge``, or when Ansible's internals differ from what this view
knows (checked once, on construction). The unit tests compare this view with ``hostvars`` on an inventory with
group_vars, host_vars, inventory variables, facts, set_fact and extra vars.
"""

from __future__ import annotations

import multiprocessing
import os

try:
    from ansible import constants as C
    from ansible.inventory.helpers import get_group_vars, sort_groups
    from ansible.template import is_trusted_as_template
    from ansible.vars.clean import clean_facts, namespace_facts
    from ansible.inventory.group import InventoryObjectType
    from ansible.plugins.loader import vars_loader
    from ansible.utils.path import basedir as _vars_basedir
    from ansible.utils.vars import combine_vars
    from ansible.vars.hostvars import HostVars
    from ansible.vars.plugins import _plugin_should_run, _prime_vars_loader, get_plugin_vars
except ImportError:  # pragma: no cover - another Ansible: use hostvars as it is
    HostVars = None

# Ansible's own host_vars/ and group_vars/ plugin: a host without a file or directory of its name in host_vars/ gets
# nothing from it, which the view knows from one listing of the directory instead of a call per host.
_HOST_GROUP_VARS = "ansible.builtin.host_group_vars"

_MISSING = object()
_FACTS = ("facts layer",)  # markers in _Layers: the layers built when one of their keys is read
_MAGIC = ("magic variables",)
_PRECEDENCE = ("all_inventory", "groups_inventory", "all_plugins_inventory", "all_plugins_play",
               "groups_plugins_inventory", "groups_plugins_play")


def _templated(value, depth=0):
    """True when ``value`` holds a string Ansible would template (trusted and with Jinja markers)."""
    if isinstance(value, str):
        return ("{{" in value or "{%" in value or "{#" in value) and is_trusted_as_template(value)
    if depth > 20:
        return True
    if isinstance(value, dict):
        return any(_templated(k, depth + 1) or _templated(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_templated(v, depth + 1) for v in value)
    return False


class _HostView(object):
    """One host's variables: ``get(key, default)`` and ``[key]``, like the HostVarsVars it stands for."""

    __slots__ = ("_owner", "_name", "_vars")

    def __init__(self, owner, name, variables):
        self._owner = owner
        self._name = name
        self._vars = variables

    def get(self, key, default=None):
        value = self._vars.get(key, _MISSING)
        if value is _MISSING:
            return default
        # gathered facts are never templates; everything else is checked
        if key != "ansible_facts" and self._owner.templated(value):
            return self._owner.hostvars[self._name][key]
        return value

    def __getitem__(self, key):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key):
        return key in self._vars

    @property
    def shared_key(self):
        """A key that hosts with the same variables share (variables from their groups alone), else None: what is
        derived from a host's variables alone may be derived once for all hosts of one key."""
        return getattr(self._vars, "shared_key", None)


class _Layers(object):
    """One host's variables as the layers of ``get_vars()`` (facts not injected as variables), read without merging
    them: a key is looked up from the highest layer down, so a filter that reads a dozen variables of 10,000 hosts
    pays for a dozen lookups per host, not for copying every variable of every host. The facts layer
    (``ansible_facts``, ``ansible_local``) is built when one of them is read, without the deep copy of
    ``namespace_facts()`` (the view is read-only); the magic variables when one of them is read."""

    __slots__ = ("_owner", "_host", "_layers", "_facts", "shared_key")
    _FACT_KEYS = ("ansible_facts", "ansible_local")
    _MAGIC_KEYS = ("inventory_hostname", "inventory_hostname_short", "group_names")

    def __init__(self, owner, host):
        self._owner = owner
        self._host = host
        self._facts = None
        name = host.name
        # highest precedence first: the facts layer (_FACTS) sits between include_vars and the vars plugins, the magic
        # variables (_MAGIC) above the inventory's host variables, as Host.get_vars() combines them
        own = (owner._set_facts.get(name), owner._vars_cache.get(name),  # pylint: disable=protected-access
               owner._plugins_play([host]), owner._plugins_inventory([host]))  # pylint: disable=protected-access
        group_part = owner._group_part(host)  # pylint: disable=protected-access
        self._layers = [layer for layer in (
            owner._extra_vars, own[0], own[1], _FACTS, own[2], own[3], _MAGIC, host.vars, group_part) if layer]
        # Hosts whose variables are their groups' alone (no variable, fact or file of their own besides the inventory
        # file's name) share this key: one group part, the same inventory file. None for any other host.
        inventory_vars = host.vars or {}
        self.shared_key = None
        if not any(own) and not owner.host_facts(host) and set(inventory_vars) <= {"inventory_file", "inventory_dir"}:
            self.shared_key = (id(group_part), inventory_vars.get("inventory_file"), inventory_vars.get("inventory_dir"))

    def _fact_layer(self):
        if self._facts is None:
            facts = self._owner.host_facts(self._host)
            self._facts = {"ansible_facts": dict((k[8:] if k.startswith("ansible_") and k != "ansible_local" else k, v)
                                                 for k, v in facts.items()),
                           "ansible_local": facts.get("ansible_local", {})}
        return self._facts

    def get(self, key, default=None):
        """The value of ``key`` in the highest layer that has it, else ``default``."""
        for layer in self._layers:
            if layer is _FACTS:
                if key in self._FACT_KEYS:
                    return self._fact_layer()[key]
            elif layer is _MAGIC:
                if key in self._MAGIC_KEYS:
                    return self._host.get_magic_vars()[key]
            else:
                value = layer.get(key, _MISSING)
                if value is not _MISSING:
                    return value
        return default

    def __contains__(self, key):
        return self.get(key, _MISSING) is not _MISSING

    def __iter__(self):
        seen = set(self._FACT_KEYS) | set(self._MAGIC_KEYS)
        yield from seen
        for layer in self._layers:
            for key in layer if isinstance(layer, dict) or hasattr(layer, "keys") else ():
                if key not in seen:
                    seen.add(key)
                    yield key


_NOT_ASKED = object()


def _fact_cache_hosts(cache):
    """The host names a fact cache holds facts of (a superset: an expired entry is still named), or None when it
    cannot say. ansible-core 2.19's file caches (jsonfile, yaml, pickle) fail to list their keys when no prefix is set
    (len(None)); their files are named by the key, so the listing of their directory names the hosts."""
    try:
        return frozenset(cache.keys())
    except TypeError:
        plugin = getattr(cache, "__wrapped__", None)
        directory = getattr(plugin, "_cache_dir", None)
        restore = getattr(cache, "_restore_key", None)
        try:
            if not directory or restore is None or plugin.get_option("_prefix"):
                return None
            return frozenset(name for name in map(restore, os.listdir(directory)) if name)
        except (AttributeError, KeyError, OSError):
            return None
    except (AttributeError, NotImplementedError, OSError, KeyError):
        return None


class FastHostVars(object):
    """``hostvars`` with the group part of each host's variables computed once per distinct group list."""

    def __init__(self, hostvars):
        self.hostvars = hostvars
        manager = hostvars._variable_manager  # pylint: disable=protected-access
        self._inventory = hostvars._inventory  # pylint: disable=protected-access
        self._loader = hostvars._loader  # pylint: disable=protected-access
        self._facts = manager._fact_cache  # pylint: disable=protected-access
        self._fact_hosts = _NOT_ASKED  # the names the fact cache has facts of; None: it cannot say, ask per host
        self._vars_cache = manager._vars_cache  # pylint: disable=protected-access
        self._set_facts = manager._nonpersistent_fact_cache  # pylint: disable=protected-access
        self._extra_vars = manager.extra_vars
        self._sources = self._inventory._sources  # pylint: disable=protected-access
        self._basedirs = [self._loader.get_basedir()] if manager.safe_basedir else []
        self._group_memo = {}
        self._views = {}
        self._checked = {}
        self._plugins = None
        self._host_vars_names = {}

    def templated(self, value):
        """``_templated(value)``, remembered per object: hosts of one group share their group variables' objects."""
        if value is None or isinstance(value, (bool, int, float)):
            return False
        seen = self._checked.get(id(value))
        if seen is None:
            # the value is kept with its answer, so that its id cannot be reused by another object meanwhile
            seen = self._checked[id(value)] = (value, _templated(value))
        return seen[1]

    def _vars_plugins(self):
        """[(name, the plugin when it is stateless, else None)] of the vars plugins that run at the task stage, in the
        order of ansible.vars.plugins.get_vars_from_path, which looks each one up again for every call."""
        if self._plugins is None:
            if vars_loader._paths is None:  # pylint: disable=protected-access
                _prime_vars_loader()
            plugins = []
            for name in list(vars_loader._plugin_instance_cache):  # pylint: disable=protected-access
                plugin = vars_loader.get(name)
                if plugin is not None and _plugin_should_run(plugin, "task"):
                    plugins.append((name, plugin if getattr(plugin, "is_stateless", False) else None))
            self._plugins = plugins
        return self._plugins

    def _host_vars_listed(self, path):
        """The names a host_vars/ file or directory of ``path`` can be for (every entry, with and without its YAML or
        JSON extension), as Ansible's host_group_vars plugin resolves ``path``; an empty set when there is none."""
        names = self._host_vars_names.get(path)
        if names is None:
            directory = os.path.join(os.path.realpath(_vars_basedir(path)), "host_vars")
            names = set()
            if os.path.isdir(directory):
                for entry in os.listdir(directory):
                    names.add(entry)
                    for extension in C.YAML_FILENAME_EXTENSIONS:
                        if extension and entry.endswith(extension):
                            names.add(entry[:-len(extension)])
            self._host_vars_names[path] = names
        return names

    def _vars_from_path(self, path, entities):
        """ansible.vars.plugins.get_vars_from_path(loader, path, entities, "task"), with the plugins looked up once and
        Ansible's host_group_vars not called for a host that has nothing in host_vars/."""
        data = {}
        for name, plugin in self._vars_plugins():
            if plugin is None:
                plugin = vars_loader.get(name)
                if plugin is None:
                    continue
            if (getattr(plugin, "ansible_name", None) == _HOST_GROUP_VARS
                    and all(getattr(e, "base_type", None) is InventoryObjectType.HOST for e in entities)
                    and not any(e.name in self._host_vars_listed(path) for e in entities)):
                continue
            new_vars = get_plugin_vars(self._loader, plugin, path, entities)
            if new_vars != {}:
                data = combine_vars(data, new_vars)
        return data

    def _plugins_inventory(self, entities):
        """ansible.vars.plugins.get_vars_from_inventory_sources(loader, sources, entities, "task")."""
        data = {}
        for path in self._sources:
            if path is None:
                continue
            if "," in path and not os.path.exists(path):  # a host list
                continue
            if not os.path.isdir(path):
                path = os.path.dirname(path)
            new_vars = self._vars_from_path(path, entities)
            if new_vars != {}:
                data = combine_vars(data, new_vars)
        return data

    def _plugins_play(self, entities):
        data = {}
        for path in self._basedirs:
            found = self._vars_from_path(path, entities)
            if found:
                data.update(found)
        return data

    def _group_part(self, host):
        groups = sort_groups([g for g in host.get_groups() if g.name != "all"])
        key = tuple(g.name for g in groups)
        part = self._group_memo.get(key)
        if part is None:
            all_group = self._inventory.groups.get("all")
            sources = {
                "all_inventory": all_group.get_vars,
                "all_plugins_inventory": lambda: self._plugins_inventory([all_group]),
                "all_plugins_play": lambda: self._plugins_play([all_group]),
                "groups_inventory": lambda: get_group_vars(groups),
                "groups_plugins_inventory": lambda: self._plugins_inventory(groups),
                "groups_plugins_play": lambda: self._plugins_play(groups),
            }
            part = {}
            for entry in C.VARIABLE_PRECEDENCE:
                part.update(sources[entry]())
            self._group_memo[key] = part
        return part

    def __getitem__(self, name):
        view = self._views.get(name)
        if view is not None:
            return view
        host = self._inventory.get_host(name)
        if host is None:
            return self.hostvars[name]
        if C.INJECT_FACTS_AS_VARS:
            variables = self._merged(host)
        else:
            variables = _Layers(self, host)
        view = self._views[name] = _HostView(self, name, variables)
        return view

    def host_facts(self, host):
        """The host's gathered facts (the fact cache's own object; empty when none). The cache's keys are read once: a
        file cache (jsonfile) would otherwise look for a file of each host that has none, 10,000 times for a render
        with the controller's facts alone (6% of its CPU time)."""
        if self._fact_hosts is _NOT_ASKED:
            self._fact_hosts = _fact_cache_hosts(self._facts)
        if self._fact_hosts is not None and host.name not in self._fact_hosts:
            return {}
        try:
            return self._facts.get(host.name) or {}
        except KeyError:
            return {}

    def _merged(self, host):
        """Every layer merged into one dict (facts injected as variables need clean_facts over all of them)."""
        facts = self.host_facts(host)
        # the layers of get_vars(), lowest precedence first; later ones replace whole top-level keys
        variables = dict(self._group_part(host))
        variables.update(host.get_vars())
        variables.update(self._plugins_inventory([host]))
        variables.update(self._plugins_play([host]))
        variables.update(namespace_facts(facts))
        variables.update(clean_facts(facts))
        variables.update(self._vars_cache.get(host.name, {}))
        variables.update(self._set_facts.get(host.name, {}))
        variables.update(self._extra_vars)
        return variables

    def __contains__(self, name):
        return name in self.hostvars


# Ansible runs each task of each host in a worker process of its own, forked from the main process, and variables
# do not change while a worker templates its task. There the view is kept between the filter calls of the task
# (slurm_node_lines, slurm_gres_lines and slurm_partition_lines each read the same hosts). The main process, whose
# variables change between tasks, never keeps one.
_WORKER_VIEW = {}


def fast_hostvars(hostvars):
    """Return a fast view of Ansible's ``hostvars`` when it is safe, else ``hostvars`` itself."""
    if HostVars is None or not isinstance(hostvars, HostVars):
        return hostvars
    in_worker = multiprocessing.parent_process() is not None
    if in_worker:
        view = _WORKER_VIEW.get(id(hostvars))
        if view is not None and view.hostvars is hostvars:
            return view
    try:
        if C.DEFAULT_HASH_BEHAVIOUR != "replace" or not set(C.VARIABLE_PRECEDENCE) <= set(_PRECEDENCE):
            return hostvars
        view = FastHostVars(hostvars)
    except AttributeError:
        return hostvars
    if in_worker:
        _WORKER_VIEW.clear()
        _WORKER_VIEW[id(hostvars)] = view
    return view
