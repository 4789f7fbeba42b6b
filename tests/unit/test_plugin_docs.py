"""Plugin docs and packaging facts that must agree with the code.

Every plugin's DOCUMENTATION, EXAMPLES and RETURN are YAML that parses (ansible-doc and the docs build read them):
a plain scalar with ': ' or '{a: b}' inside breaks a whole plugin's documentation silently until ansible-doc or
ansible-test sanity runs; this finds it with the unit tests. Also: one header style, the Python version promised for
the nodes, the collections galaxy.yml declares and the ansible-core meta/runtime.yml admits. `make docs` renders
the same docs with antsibull-docs (warnings are errors).
"""

import ast
import glob
import json
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGINS = sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))
                 + glob.glob(os.path.join(ROOT, "plugins", "callback", "*.py"))
                 + glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def _blocks(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            yield node.targets[0].id, node.value.value


@pytest.mark.parametrize("path", PLUGINS, ids=[os.path.relpath(p, ROOT) for p in PLUGINS])
def test_plugin_documentation_is_yaml(path):
    blocks = dict(_blocks(path))
    assert "DOCUMENTATION" in blocks, path
    for name, text in blocks.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail("%s %s: %s" % (os.path.relpath(path, ROOT), name, exc))
    assert yaml.safe_load(blocks["DOCUMENTATION"])["module" if "/modules/" in path else "name"]


# One header for every module, filter and doc fragment (a module adds the shebang ansible-test wants).
HEADER = ("# -*- coding: utf-8 -*-\n"
          "# Copyright: gpucluster.ops contributors\n"
          "# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)\n"
          "\n"
          "from __future__ import annotations\n")
HEADED = PLUGINS + sorted(glob.glob(os.path.join(ROOT, "plugins", "doc_fragments", "*.py")))


@pytest.mark.parametrize("path", HEADED, ids=[os.path.relpath(p, ROOT) for p in HEADED])
def test_plugin_header(path):
    with open(path) as handle:
        text = handle.read()
    expected = ("#!/usr/bin/python\n" if "/modules/" in path else "") + HEADER
    name = os.path.relpath(path, ROOT)
    assert text.startswith(expected), "%s does not start with the house header:\n%s" % (name, expected)


# The Python the nodes need: ansible-core's own floor for modules on managed nodes (2.19: 3.8). Everything that runs
# there (modules, module_utils, the health checker) must parse as that Python, and every "Python 3.N+" or "Python 3.N
# and newer" promise in the docs and plugins must name that version.
def _node_python_min():
    from ansible.module_utils import basic
    return basic._PY_MIN


NODE_SIDE = sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
                   + glob.glob(os.path.join(ROOT, "plugins", "module_utils", "**", "*.py"), recursive=True)
                   + [os.path.join(ROOT, "bin", "gpucluster-health")])


@pytest.mark.parametrize("path", NODE_SIDE, ids=[os.path.relpath(p, ROOT) for p in NODE_SIDE])
def test_node_side_code_parses_as_the_promised_python(path):
    with open(path) as handle:
        ast.parse(handle.read(), filename=path, feature_version=_node_python_min())


_PROMISE = re.compile(r"[Pp]ython (3\.\d+)(?:\+| and newer| or newer| or later)")


# The managed nodes' Python floor of each supported ansible-core (meta/runtime.yml): the docs promise the lowest, and
# say where a newer ansible-core needs more.
NODE_PYTHON_FLOOR = {"2.19": (3, 8), "2.20": (3, 9), "2.21": (3, 9)}


def test_node_python_floor_table_is_true_for_the_running_ansible_core():
    from ansible.release import __version__
    assert NODE_PYTHON_FLOOR[".".join(__version__.split(".")[:2])] == tuple(_node_python_min())


def test_python_version_promises_agree():
    wanted = "%d.%d" % min(NODE_PYTHON_FLOOR.values())
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "galaxy.yml")]
    paths += glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "roles", "*", "README.md"))
    paths += glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True)
    paths += [path for path in glob.glob(os.path.join(ROOT, "bin", "*")) if os.path.isfile(path)]
    wrong = []
    for path in sorted(paths):
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                wrong += ["%s:%d: %s" % (os.path.relpath(path, ROOT), number, m.group(0))
                          for m in _PROMISE.finditer(line) if m.group(1) != wanted]
    assert not wrong, "the nodes need Python %s (ansible-core's floor); these promise another:\n%s" % (
        wanted, "\n".join(wrong))


# Packaging: galaxy.yml declares exactly the collections that the shipped content calls by FQCN, each with a range
# that admits the version the tested ansible package ships; meta/runtime.yml promises only the tested ansible-core.
# Where content names another collection: in YAML and templates a filter or test (| x.y.z, is x.y.z, map('x.y.z')
# and lookup('x.y.z') arguments), in task files and playbooks also a module key; in Python an ansible_collections
# import.
_NAME = r"([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*"
_IN_JINJA = [re.compile(r"(?:\||\bis(?:\s+not)?)\s*" + _NAME + r"\b"),
             re.compile(r"\(\s*['\"]" + _NAME + r"['\"]")]
_MODULE_KEY = re.compile(r"^\s*(?:-\s+)?" + _NAME + r":", re.M)
_PY_IMPORT = re.compile(r"\bansible_collections\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\b")
_NOT_COLLECTIONS = {("ansible", "builtin"), ("gpucluster", "ops")}


def _used_collections():
    used = {}
    for top in ("roles", "playbooks", "plugins"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if not path.endswith((".yml", ".yaml", ".j2", ".py")) or not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, ROOT)
            with open(path) as handle:
                text = handle.read()
            if path.endswith(".py"):
                patterns = [_PY_IMPORT]
            elif re.search(r"(^playbooks/|/tasks/|/handlers/)", rel) and not path.endswith(".j2"):
                patterns = _IN_JINJA + [_MODULE_KEY]
            else:
                patterns = _IN_JINJA
            for pattern in patterns:
                for namespace, name in pattern.findall(text):
                    if (namespace, name) not in _NOT_COLLECTIONS:
                        used.setdefault("%s.%s" % (namespace, name), rel)
    return used


def _galaxy():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        return yaml.safe_load(handle)


def test_galaxy_declares_the_collections_the_content_uses():
    declared = _galaxy()["dependencies"] or {}
    used = _used_collections()
    assert set(declared) == set(used), "used but not declared: %s; declared but not used: %s" % (
        {c: used[c] for c in sorted(set(used) - set(declared))}, sorted(set(declared) - set(used)))


def test_dependency_ranges_admit_the_tested_ansible_package():
    import ansible
    from ansible.galaxy.dependency_resolution.versioning import meets_requirements
    # The ansible package installs its collections beside ansible-core's own package.
    shipped = os.path.join(os.path.dirname(os.path.dirname(ansible.__file__)), "ansible_collections")
    for collection, wanted in sorted(_galaxy()["dependencies"].items()):
        manifest = os.path.join(shipped, *collection.split(".") + ["MANIFEST.json"])
        assert os.path.exists(manifest), "%s is not installed with the ansible package" % collection
        with open(manifest) as handle:
            version = json.load(handle)["collection_info"]["version"]
        assert meets_requirements(version, wanted), "%s %s does not admit %s" % (collection, wanted, version)
        assert "<" in wanted, "%s: %s has no upper bound (the next major may break the roles)" % (collection, wanted)


def test_requires_ansible_is_the_tested_range():
    """meta/runtime.yml admits the running ansible-core and exactly the minor releases of NODE_PYTHON_FLOOR, the ones
    tested (2.19 on the host, 2.21 on scripts/controller.sh's controller, 2.20 between them)."""
    from ansible.release import __version__
    from packaging.specifiers import SpecifierSet
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        spec = SpecifierSet(yaml.safe_load(handle)["requires_ansible"])
    assert __version__ in spec
    minors = sorted(NODE_PYTHON_FLOOR, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert all("%s.0" % v in spec for v in minors), spec
    low = [int(p) for p in minors[0].split(".")]
    high = [int(p) for p in minors[-1].split(".")]
    assert "%d.%d.99" % (low[0], low[1] - 1) not in spec and "%d.%d.0" % (high[0], high[1] + 1) not in spec, spec
