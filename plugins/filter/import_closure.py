# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: import_closure
short_description: The collection's Python files that some of its programs import, directly or not
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads programs of this collection (such as C(bin/gpucluster-health)) on the controller and follows their
    imports, and the imports of what they import, to the collection's own files. The roles that install a program on
    the nodes (C(gpucluster.ops.health_check) and C(gpucluster.ops.dcgm_exporter), through
    C(roles/_common/tasks/node_programs.yml)) copy exactly these files, so the list is the code's own and never kept
    by hand.
  - "An import is the collection's own when it names C(ansible_collections.gpucluster.ops.<path>) (the file
    C(<path>.py) below the collection root; C(from <package> import <name>) also finds the module C(<name>.py) of the
    package), when it is relative, or when a plain C(import <name>) names a C(<name>.py) beside the importing file
    (C(bin/_gpucluster_bootstrap.py) beside a program). Every other import (the standard library, Ansible, other
    packages) is left to the node."
  - Imports are read from the source with Python's C(ast) module wherever they stand (in functions and in C(try)
    blocks too), so a file that is imported only on some code path is still copied.
  - Fails, naming the file and the line, on a file that cannot be read or parsed, and on an import of the collection
    that names no file of it.
positional: root
options:
  _input:
    description: The programs, as paths relative to the collection root (C(bin/gpucluster-health)); one path or a list.
    type: list
    elements: str
    required: true
  root:
    description: The collection root the paths are relative to; by default this collection's own.
    type: path
"""

EXAMPLES = r"""
- name: Copy what the health checker imports
  ansible.builtin.copy:
    src: "{{ role_path }}/../../{{ item }}"
    dest: "/usr/local/lib/gpucluster-health/{{ item }}"
    mode: "0644"
  loop: "{{ ['bin/gpucluster-health'] | gpucluster.ops.import_closure }}"
  # bin/_gpucluster_bootstrap.py, plugins/module_utils/_dcgm.py, ..., plugins/module_utils/_xid_catalog.py
"""

RETURN = r"""
_value:
  description: The files the programs import, directly or not, as sorted paths relative to the root (the programs
    themselves are left out).
  type: list
  elements: str
"""

import ast
import collections
import os

from ansible.errors import AnsibleFilterError

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTION_PACKAGE = "ansible_collections.gpucluster.ops"
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")

# One import statement: module ("a.b" of "import a.b" or "from a.b import c"; "" for "from . import c"), the names of
# a from-import, the level of a relative one, its line, and whether it stands in a try block that catches ImportError.
Import = collections.namedtuple("Import", "module names level line guarded")


def _catches_import_error(handler):
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types)


def _walk(nodes, guarded):
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, (), 0, node.lineno, guarded)
        elif isinstance(node, ast.ImportFrom):
            yield Import(node.module or "", tuple(a.name for a in node.names), node.level, node.lineno, guarded)
        elif isinstance(node, ast.Try):
            body_guarded = guarded or any(_catches_import_error(h) for h in node.handlers if h.type is not None)
            yield from _walk(node.body, body_guarded)
            for handler in node.handlers:
                yield from _walk(handler.body, guarded)
            yield from _walk(node.orelse + node.finalbody, guarded)
        else:
            yield from _walk(ast.iter_child_nodes(node), guarded)


def file_imports(path):
    """Every import statement of the Python file ``path`` (a list of Import)."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise AnsibleFilterError("import_closure: cannot read %s as Python: %s" % (path, exc))
    return list(_walk(tree.body, False))


def _module_file(directory, parts):
    """The file of module ``parts`` below ``directory`` (``a/b.py`` or ``a/b/__init__.py``), or None."""
    base = os.path.join(directory, *parts)
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _resolve_in(directory, parts, item, where):
    label = "." * item.level + item.module
    found = []
    module = _module_file(directory, parts) if parts else None
    if module is not None:
        found.append(module)
    elif not os.path.isdir(os.path.join(directory, *parts)):
        raise AnsibleFilterError("import_closure: %s imports %s, which is no file of the collection" % (where, label))
    for name in item.names:
        submodule = _module_file(directory, parts + [name]) if name != "*" else None
        if submodule is not None:
            found.append(submodule)
        elif module is None:
            raise AnsibleFilterError("import_closure: %s imports %s from %s, which is no file of the collection"
                                     % (where, name, label))
    return found


def resolve(item, path, root):
    """The files of the collection below ``root`` that the import ``item`` of the file ``path`` loads ([] for an
    import from outside the collection)."""
    where = "%s:%d" % (os.path.relpath(path, root), item.line)
    parts = item.module.split(".") if item.module else []
    if item.level:
        directory = os.path.dirname(path)
        for _level in range(item.level - 1):
            directory = os.path.dirname(directory)
        return _resolve_in(directory, parts, item, where)
    if item.module == COLLECTION_PACKAGE or item.module.startswith(COLLECTION_PACKAGE + "."):
        return _resolve_in(root, parts[3:], item, where)
    sibling = os.path.join(os.path.dirname(path), parts[0] + ".py")
    return [sibling] if os.path.isfile(sibling) else []


def _inside(root, path):
    return os.path.commonpath([root, path]) == root and path != root


def import_closure(programs, root=None):
    """Return the sorted paths, relative to ``root``, of the collection files that ``programs`` import."""
    root = os.path.realpath(COLLECTION_ROOT if root is None else str(root))
    if isinstance(programs, str):
        programs = [programs]
    if not isinstance(programs, (list, tuple)) or not programs or not all(isinstance(p, str) for p in programs):
        raise AnsibleFilterError("import_closure: expected paths of programs relative to the collection root, got %r"
                                 % (programs,))
    todo = []
    for program in programs:
        path = os.path.realpath(os.path.join(root, program))
        if os.path.isabs(program) or not _inside(root, path) or not os.path.isfile(path):
            raise AnsibleFilterError("import_closure: %r is no file below the collection root %s" % (program, root))
        todo.append(path)
    entries = set(todo)
    seen = set(todo)
    while todo:
        path = todo.pop()
        for item in file_imports(path):
            for found in resolve(item, path, root):
                found = os.path.realpath(found)
                if not _inside(root, found):
                    raise AnsibleFilterError("import_closure: %s:%d imports %s, outside the collection root %s"
                                             % (os.path.relpath(path, root), item.line, found, root))
                if found not in seen:
                    seen.add(found)
                    todo.append(found)
    imported = seen - entries
    return sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in imported)


class FilterModule(object):
    """gpucluster.ops import_closure filter."""

    def filters(self):
        return {"import_closure": import_closure}
