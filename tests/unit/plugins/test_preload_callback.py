"""plugins/callback/preload.py: what it loads is in the process that forks Ansible's workers, so a worker finds it
there instead of loading it again (the gain is measured in docs/performance.md, not here). Run in a child Python, so
that this test's process keeps its own plugin state."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

PROBE = r"""
import json, os, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([os.environ["COLLECTIONS"]])
from ansible.plugins.loader import callback_loader
before = set(sys.modules)
plugin = callback_loader.get("gpucluster.ops.preload")
new = set(sys.modules) - before
plugin.v2_playbook_on_start(None)
print(json.dumps({"name": plugin.CALLBACK_NAME, "needs_enabled": plugin.CALLBACK_NEEDS_ENABLED,
                  "loaded_at_import": sorted(m for m in new if "gpucluster" in m and ".filter." in m),
                  "modules": sorted(set(sys.modules) - before)}))
"""


def test_it_loads_the_collections_filters_and_actions_and_the_builtin_plugins():
    env = dict(os.environ, COLLECTIONS=os.path.join(ROOT, ".cache", "collections"))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, text=True, check=True,
                         timeout=120).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen["name"] == "gpucluster.ops.preload" and seen["needs_enabled"] is True
    assert seen["loaded_at_import"] == []              # nothing before the playbook starts
    modules = set(seen["modules"])
    ours = {"ansible_collections.gpucluster.ops.plugins.%s.%s" % (kind, name[:-3])
            for kind in ("filter", "action") for name in os.listdir(os.path.join(ROOT, "plugins", kind))
            if name.endswith(".py") and not name.startswith("_")}
    assert ours and ours <= modules, sorted(ours - modules)
    for kind, name in (("action", "template"), ("action", "assert"), ("action", "validate_argument_spec"),
                       ("filter", "core"), ("test", "core"), ("lookup", "vars"), ("connection", "ssh"),
                       ("shell", "sh"), ("become", "sudo")):
        # ansible-core names a builtin plugin's module ansible_collections.ansible.builtin.plugins.<kind>.<name>
        # when asked by its full name, ansible.plugins.<kind>.<file>_<hash of its path> for a Jinja plugin file
        assert any(m.endswith("ansible.builtin.plugins.%s.%s" % (kind, name))
                   or m.startswith("ansible.plugins.%s.%s_" % (kind, name)) for m in modules), (kind, name)
