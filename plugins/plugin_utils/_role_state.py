# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's side of gpucluster.ops.role_state: the wanted state's digests and the roles' observations.

The ``gpucluster.ops.role_state`` callback runs in Ansible's main process. At the start of the playbook it hashes the
collection's content, at the start of each play the inventory, and from each host's role_state check to its
role_state record it reads every task result of the host (``Window.add``): what each one looked at or manages on the
node becomes an observation, each fact a set_fact or include_vars set is kept to be given back, and anything the
record could not stand for (a change, a failure, a module or command it cannot observe again, a task delegated to
another host) is a problem that keeps the run from being recorded. Ansible forks each task's worker from the main
process after the results before it were handled, so the action plugin in the record task's worker reads ``STATE``
as the callback left it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

from ansible_collections.gpucluster.ops.plugins.module_utils._role_state import read_only_command

# The facts the collection's roles read (tests/unit/plugins/plugin_utils/test_role_state_controller.py requires every ansible_facts key that a
# role, playbook or plugin names to be here): the wanted state hashes these, not the facts that change by the minute.
FACTS = ("architecture", "default_ipv4", "distribution", "distribution_major_version", "distribution_release",
         "distribution_version", "gpucluster_gpus", "gpucluster_ib_error", "gpucluster_ib_ports", "hostname",
         "interfaces", "kernel", "memtotal_mb", "os_family", "processor_vcpus", "python", "service_mgr", "services",
         "virtualization_role", "virtualization_type")

# Variables that differ between runs with nothing changed (or that stand for other parts of the wanted state).
SKIP_VARS = frozenset(("omit", "hostvars", "vars", "environment", "playbook_dir", "play_hosts", "role_names",
                       "role_name", "role_path", "role_uuid", "groups", "item"))
# What makes a variable's value depend on more than the other variables: it is templated to hash its value.
_CALLS = re.compile(r"\b(lookup|query|q|now)\s*\(")
_REGISTER = re.compile(r"^\s*register:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.M)
_CONTENT_DIRS = ("roles", "plugins", "playbooks", "meta")
_CONTENT_FILES = ("galaxy.yml",)

# Modules whose ok result says nothing about the node: conditions, variables, includes, messages.
PURE = frozenset("ansible.builtin." + name for name in (
    "assert", "set_fact", "debug", "fail", "meta", "include_tasks", "import_tasks", "include_role", "import_role",
    "include_vars", "validate_argument_spec", "group_by", "add_host", "pause")) | frozenset((
        "gpucluster.ops.role_state", "gpucluster.ops.slurm_render"))
# The facts of these are given back on a converged node.
GIVE_BACK = frozenset(("ansible.builtin.set_fact", "ansible.builtin.include_vars"))
FILE_MODULES = {"ansible.builtin.template": "dest", "ansible.builtin.copy": "dest", "ansible.builtin.file": "path",
                "ansible.builtin.lineinfile": "path", "ansible.builtin.blockinfile": "path",
                "ansible.builtin.replace": "path", "ansible.builtin.get_url": "dest", "ansible.builtin.stat": "path",
                "ansible.builtin.slurp": "src"}
PACKAGE_MODULES = frozenset(("ansible.builtin.apt", "ansible.builtin.dnf", "ansible.builtin.package",
                             "ansible.builtin.dpkg_selections"))
UNIT_MODULES = frozenset(("ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service"))
SERVICE_FACTS_PROBES = (
    ("systemctl", "list-units", "--type=service", "--all", "--plain", "--no-legend", "--no-pager"),
    ("systemctl", "list-unit-files", "--type=service", "--plain", "--no-legend", "--no-pager"))
APT_STAMP = "/var/lib/apt/periodic/update-success-stamp"
APT_LISTS = "/var/lib/apt/lists"

STATE = {"content": None, "registered": frozenset(), "inventory": None, "windows": {}, "root": None}


def collection_root():
    """The directory of the collection this file is part of."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def content_digest(root):
    """(digest, registered): the sha256 of the collection's roles, plugins, playbooks and metadata (not its Markdown
    files), and the names its tasks register (whose values are what the tasks observed: not the wanted state)."""
    digest = hashlib.sha256()
    registered = set()
    paths = [os.path.join(root, name) for name in _CONTENT_FILES]
    for name in _CONTENT_DIRS:
        for top, dirs, files in os.walk(os.path.join(root, name)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            # not the compiled files, nor the documentation (a README changes nothing a role does)
            paths.extend(os.path.join(top, f) for f in sorted(files) if not f.endswith((".pyc", ".md")))
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            continue
        digest.update(("%s\0%d\0" % (os.path.relpath(path, root), len(data))).encode())
        digest.update(data)
        if path.endswith((".yml", ".yaml")):
            registered.update(_REGISTER.findall(data.decode("utf-8", "replace")))
    return digest.hexdigest(), frozenset(registered)


def canonical(value, depth=0):
    """value as JSON-able data with sorted keys, whatever Ansible wrapped it in; unknown objects by their repr."""
    if depth > 64:
        return repr(value)
    if isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")):
        return {str(k): canonical(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [canonical(v, depth + 1) for v in value]
        return sorted(items, key=_sort_key) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, str):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return repr(value)


def _sort_key(value):
    return json.dumps(value, sort_keys=True)


def digest_of(value):
    return hashlib.sha256(json.dumps(canonical(value), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _files_digest(directories):
    digest = hashlib.sha256()
    for base in sorted(set(directories)):
        for top, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError as exc:
                    data = ("unreadable: %s" % exc).encode()
                digest.update(("%s\0%d\0" % (path, len(data))).encode())
                digest.update(data)
    return digest.hexdigest()


def inventory_digest(variable_manager, registered):
    """The inventory as this play sees it: every group's and host's variables, host_vars/ and group_vars/ beside the
    inventory sources and the playbook, extra variables, and every host's facts that the roles read and the
    variables set so far (set_fact, include_vars; not registered results)."""
    inventory = variable_manager._inventory  # pylint: disable=protected-access
    loader = variable_manager._loader  # pylint: disable=protected-access
    groups = sorted(inventory.groups.values(), key=lambda g: g.name)
    hosts = sorted(inventory.hosts.values(), key=lambda h: h.name)
    facts = variable_manager._fact_cache  # pylint: disable=protected-access
    nonpersistent = variable_manager._nonpersistent_fact_cache  # pylint: disable=protected-access
    included = variable_manager._vars_cache  # pylint: disable=protected-access
    var_dirs = []
    for source in list(getattr(inventory, "_sources", [])) + [loader.get_basedir()]:
        if not source or "," in source:
            continue
        base = source if os.path.isdir(source) else os.path.dirname(source)
        var_dirs.extend(os.path.join(base, sub) for sub in ("host_vars", "group_vars"))
    parts = {
        "groups": [(g.name, g.vars, sorted(c.name for c in g.child_groups), sorted(h.name for h in g.hosts))
                   for g in groups],
        "hosts": [(h.name, h.vars) for h in hosts],
        "extra": variable_manager.extra_vars,
        "files": _files_digest(var_dirs),
        "facts": [(h.name, host_facts(_get(facts, h.name))) for h in hosts],
        # set_fact and include_vars alike: a converged role sets again with set_fact what include_vars set
        "set": [(h.name, _unregistered(dict(included.get(h.name) or {}, **(nonpersistent.get(h.name) or {})),
                                       registered)) for h in hosts],
    }
    dump("inventory", parts)
    return digest_of(parts)


def _unregistered(variables, registered):
    return {k: v for k, v in variables.items() if k not in registered}


def _get(cache, name):
    try:
        return cache.get(name) or {}
    except Exception:  # pylint: disable=broad-except  # a fact cache that cannot be read is as no facts
        return {}


def host_facts(facts):
    """The facts the roles read, from a host's facts (with or without the ansible_ prefix)."""
    facts = facts or {}
    picked = {}
    for key in FACTS:
        for name in (key, "ansible_" + key):
            if name in facts:
                # setup lists the interfaces in the order the kernel gives them, which is not always the same
                picked[key] = sorted(facts[name]) if key == "interfaces" and isinstance(facts[name], list) \
                    else facts[name]
                break
    if "ansible_local" in facts:
        picked["local"] = facts["ansible_local"]
    return picked


def host_vars_digest(task_vars, registered, template):
    """(digest, None), or (None, why): the host's variables that make up its wanted state. A value that calls a
    lookup, query or now() is hashed as template(value) gives it; one that cannot be templated makes it unknown."""
    picked = {}
    for key, value in task_vars.items():
        if key in SKIP_VARS or key.startswith("ansible_") or key in registered:
            continue
        if _calls(value):
            try:
                value = template(value)
            except Exception as exc:  # pylint: disable=broad-except  # any failure: unknown, not converged
                return None, "variable %s cannot be templated: %s" % (key, exc)
        picked[key] = value
    picked["__facts__"] = host_facts(task_vars.get("ansible_facts"))
    dump("host-%s-%s" % (task_vars.get("inventory_hostname"), task_vars.get("_common_role_state_name")), picked)
    return digest_of(picked), None


def dump(name, value):
    """With GPUCLUSTER_ROLE_STATE_DUMP set to a directory, write what a digest is made of there (NAME-TIME.json),
    to tell which variable or fact changed the wanted state between two runs."""
    directory = os.environ.get("GPUCLUSTER_ROLE_STATE_DUMP")
    if directory:
        path = os.path.join(directory, "%s-%.6f.json" % (re.sub(r"[^A-Za-z0-9_.-]", "_", name), time.time()))
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(canonical(value), handle, sort_keys=True, indent=1)


def _calls(value, depth=0):
    if isinstance(value, str):
        return "{{" in value and bool(_CALLS.search(value))
    if depth > 32:
        return True
    if isinstance(value, dict):
        return any(_calls(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_calls(v, depth + 1) for v in value)
    return False


class Window(object):
    """One host's task results from a role's role_state check to its record."""

    def __init__(self, name, wanted=None):
        self.name = name
        self.wanted = wanted
        self.items = []
        self.facts = {}
        self.host_facts = {}
        self.problems = []
        self.results = 0
        self._keys = set()

    def problem(self, text):
        if len(self.problems) < 20:
            self.problems.append(text)

    def observe(self, item):
        key = json.dumps(item, sort_keys=True)
        if key not in self._keys:
            self._keys.add(key)
            self.items.append(item)

    def add(self, status, action, task_name, result, delegated=False, origin_ok=True, task_args=None):
        """One task result of the host: status is ok, changed, failed, skipped or unreachable."""
        self.results += 1
        where = "task %r" % task_name
        if status == "skipped":
            return
        if status != "ok":
            self.problem("%s %s" % (where, status))
            return
        if not origin_ok:
            self.problem("%s comes from a file outside the collection" % where)
            return
        items = result.get("results") if isinstance(result.get("results"), list) else [result]
        for one in items:
            if not isinstance(one, dict) or one.get("skipped"):
                continue
            if one.get("changed"):
                self.problem("%s changed" % where)
                continue
            if one.get("failed"):
                self.problem("%s failed" % where)
                continue
            if action in PURE:
                if action in GIVE_BACK and "censored" in one:
                    self.problem("%s hides the variables it sets (no_log): they could not be set again" % where)
                elif action in GIVE_BACK and isinstance(one.get("ansible_facts"), dict):
                    self.facts.update(one["ansible_facts"])
                continue
            if delegated:
                self.problem("%s runs %s on another host" % (where, action))
                continue
            self._observe(action, where, one, task_args or {})
            if isinstance(one.get("ansible_facts"), dict):
                # a fact module's facts (ib_facts, service_facts), given back as facts on a converged node
                self.host_facts.update(one["ansible_facts"])

    def _observe(self, action, where, result, task_args):
        args = (result.get("invocation") or {}).get("module_args") or {}
        if action in FILE_MODULES and "censored" in result:
            # no_log hides the result: the path as the task gives it, templated by the record task (the role's
            # variables are the same there); a loop's item is not known then
            path = task_args.get(FILE_MODULES[action]) or task_args.get("path") or task_args.get("dest")
            if isinstance(path, str) and "item" not in path and (path.startswith("/") or path.startswith("{{")):
                self.observe({"kind": "file", "path": path, "template": True})
            else:
                self.problem("%s hides its result (no_log) and gives no path to template" % where)
            return
        if action in FILE_MODULES:
            path = result.get(FILE_MODULES[action]) or args.get(FILE_MODULES[action]) or result.get("path") \
                or args.get("path") or args.get("dest")
            if not isinstance(path, str) or not path.startswith("/"):
                self.problem("%s: no absolute path in its result" % where)
            elif action == "ansible.builtin.copy" and "checksum" not in result:
                self.observe({"kind": "tree", "path": path})
            else:
                self.observe({"kind": "file", "path": path})
        elif action == "ansible.builtin.find":
            for path in args.get("paths") or []:
                self.observe({"kind": "tree", "path": path})
        elif action in PACKAGE_MODULES:
            self._packages(action, where, args)
        elif action in UNIT_MODULES:
            name = args.get("name")
            if name:
                self.observe({"kind": "unit", "name": name if "." in name else name + ".service"})
            elif not args.get("daemon_reload") and not args.get("daemon_reexec"):
                self.problem("%s: no unit name" % where)
        elif action == "gpucluster.ops.ib_facts":
            self.observe({"kind": "ib", "path": args.get("sys_class_infiniband") or "/sys/class/infiniband",
                          "ibstat": args.get("ibstat") or "ibstat"})
        elif action == "gpucluster.ops.slurm_config_files":
            # the configuration directory as the module leaves it: the files' links, the generations, the applied one
            self.observe({"kind": "tree", "path": args.get("path") or "/etc/slurm"})
        elif action == "ansible.builtin.service_facts":
            # every service's state and unit file state, as service_facts reads them from systemd
            for argv in SERVICE_FACTS_PROBES:
                self.observe({"kind": "command", "argv": list(argv)})
        elif action in ("ansible.builtin.command", "ansible.builtin.shell"):
            argv = result.get("cmd")
            if action == "ansible.builtin.command" and read_only_command(argv):
                self.observe({"kind": "command", "argv": list(argv)})
            else:
                self.problem("%s: %s is not one of the read-only probes" % (where, json.dumps(argv)[:200]))
        else:
            self.problem("%s: %s cannot be observed again" % (where, action))

    def _packages(self, action, where, args):
        if action == "ansible.builtin.dpkg_selections":
            names = [args.get("name")]
        else:
            names = args.get("name") or args.get("pkg") or []
            names = [names] if isinstance(names, str) else list(names)
            if args.get("deb") or args.get("upgrade") not in (None, "no", False):
                self.problem("%s: a .deb file or an upgrade cannot be observed again" % where)
                return
            if args.get("update_cache"):
                seconds = args.get("cache_valid_time")
                if not isinstance(seconds, int) or seconds <= 0:
                    self.problem("%s refreshes the package lists every run" % where)
                    return
                # a full run refreshes the lists once they are older than this (apt's own rule: the stamp, else
                # the lists directory): the record stands until then
                self.observe({"kind": "age", "path": APT_STAMP, "fallback": APT_LISTS, "seconds": seconds})
        for name in names:
            if not isinstance(name, str) or not name or "*" in name or "/" in name:
                self.problem("%s: package %r cannot be observed again" % (where, name))
                continue
            self.observe({"kind": "package", "name": re.split(r"[=<>]", name, 1)[0]})
