# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No private ansible-core API in plugins/ or tests/support/ (issue 43).

ansible-core's private code (``ansible._internal``, names and attributes with a leading underscore) changes between
minor releases; the collection supports 2.19 to 2.21 and reaches ansible-core only through its public interfaces.
The test reads every Python file's syntax tree and names each use of:

- a module of ``ansible._internal`` (or any ``ansible.*`` module whose name starts with ``_``), imported;
- a name with one leading underscore imported from an ``ansible`` module;
- an attribute with one leading underscore read or written on an object that is not our own: allowed are the
  attributes a class of ours defines itself (``self._x``, ``cls._x``, methods and class attributes, in the same file),
  attributes of our own modules (``ansible_collections.gpucluster.ops``), and the protected members that
  ansible-core's plugin base classes document for plugin authors (the table below).
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREES = ("plugins", os.path.join("tests", "support"))

# The protected members of ansible-core's plugin base classes that its developer guide tells plugin authors to use
# or set ("Developing plugins", "Action plugins", "Callback plugins", "Connection plugins"): the documented plugin API.
PLUGIN_API = {
    # ActionBase: the task, its connection, loader and templar, running a module, the check-mode/async/connection
    # declarations a plugin sets, and finding a file in the role's search path
    "_task", "_connection", "_play_context", "_loader", "_templar", "_shared_loader_obj", "_execute_module",
    "_low_level_execute_command", "_supports_check_mode", "_supports_async", "_requires_connection",
    "_find_needle", "_remove_tmp_path", "_make_tmp_path", "_transfer_data", "_fixup_perms2",
    # CallbackBase: its display and result helpers
    "_display", "_dump_results", "_handle_warnings", "_handle_exception", "_get_item_label", "_run_is_verbose",
    "_clean_results",
    # ConnectionBase: the connection's settings and the connected flag a plugin keeps
    "_connected", "_shell", "_become", "_load_name",
}
# On any object: AnsibleModule's diff-mode flag (the module guide's way to support --diff; ansible-core has no other),
# and the standard library's namedtuple methods.
ANY_OBJECT_API = {"_diff", "_replace", "_asdict", "_fields", "_make"}


def _python_files():
    for tree in TREES:
        for top, dirs, files in os.walk(os.path.join(ROOT, tree)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(top, name)


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree):
    """Names that code in this file defines: functions, methods, classes, class attributes, attributes assigned on
    any object (self._x = ..., obj._x = ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute):
                        names.add(sub.attr)
                    elif isinstance(sub, ast.Name):
                        names.add(sub.id)
        elif isinstance(node, ast.arguments):
            names.update(a.arg for a in node.args + node.kwonlyargs)
        elif isinstance(node, (ast.Tuple, ast.List)):
            pass
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and len(node.args) > 1:
            if isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
    return names


def _our_modules(tree):
    """Local names bound to modules or objects of this collection (or of this test support tree)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (node.module.startswith("ansible_collections.gpucluster")
                                                                 or node.level > 0):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ansible_collections.gpucluster"):
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def private_uses(path):
    """Each use of ansible-core's private API in one file, as 'path:line: what'."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    tree = ast.parse(source, path)
    rel = os.path.relpath(path, ROOT)
    own, ours = _own_names(tree), _our_modules(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ansible" and any(_private(p) for p in parts[1:]):
                    found.append("%s:%d: import %s" % (rel, node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "ansible":
                continue
            if any(_private(p) for p in parts[1:]):
                found.append("%s:%d: from %s import ..." % (rel, node.lineno, node.module))
            for alias in node.names:
                if _private(alias.name):
                    found.append("%s:%d: from %s import %s" % (rel, node.lineno, node.module, alias.name))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ours:
                continue
            if node.attr in own or node.attr in ANY_OBJECT_API:
                continue
            if isinstance(base, ast.Name) and base.id in ("self", "cls") and node.attr in PLUGIN_API:
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super" and node.attr in PLUGIN_API:
                continue
            found.append("%s:%d: .%s on %s" % (rel, node.lineno, node.attr, ast.unparse(base)[:60]))
    return found


def test_no_private_ansible_core_api():
    found = [use for path in _python_files() for use in private_uses(path)]
    assert not found, "ansible-core's private API used (issue 43):\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("from ansible._internal._templating import _template_vars\n", "from ansible._internal._templating import ..."),
    ("import ansible._internal._templating\n", "import ansible._internal._templating"),
    ("from ansible.vars.plugins import _prime_vars_loader\n", "from ansible.vars.plugins import _prime_vars_loader"),
    ("def f(manager):\n    return manager._fact_cache\n", ".\x5ffact_cache on manager"),
    ("class A:\n    def f(self):\n        return self._vars_cache\n", ".\x5fvars_cache on self"),
])
def test_each_kind_of_private_use_is_named(tmp_path, source, expected):
    """The test above cannot pass by reading nothing: each kind of use is found and named."""
    path = tmp_path / "plugin.py"
    path.write_text(source)
    uses = private_uses(str(path))
    assert uses and any(expected in use for use in uses), uses


@pytest.mark.parametrize("source", [
    "class A:\n    def __init__(self):\n        self._seen = {}\n    def f(self):\n        return self._seen\n",
    "from ansible.plugins.action import ActionBase\nclass A(ActionBase):\n    def run(self):\n        return self._task\n",
    "from ansible_collections.gpucluster.ops.plugins.module_utils import _x as x\nx._helper()\n",
])
def test_our_own_and_the_documented_plugin_api_are_allowed(tmp_path, source):
    path = tmp_path / "plugin.py"
    path.write_text(source)
    assert private_uses(str(path)) == []


def test_it_reads_both_trees():
    files = list(_python_files())
    assert any("/plugins/action/" in f for f in files) and any("/tests/support/" in f for f in files), files
