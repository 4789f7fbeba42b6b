"""Every plugin's DOCUMENTATION, EXAMPLES and RETURN are YAML that parses (ansible-doc and the docs build read them).

A plain scalar with ': ' or '{a: b}' inside breaks a whole plugin's documentation silently until ansible-doc or
ansible-test sanity runs; this finds it with the unit tests.
"""

import ast
import glob
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGINS = sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))
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
    assert yaml.safe_load(blocks["DOCUMENTATION"])["name" if "/filter/" in path else "module"]
