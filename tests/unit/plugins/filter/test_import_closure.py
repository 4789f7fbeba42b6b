"""Shipping programs to the nodes: gpucluster.ops.import_closure and roles/_common/tasks/node_programs.yml.

The roles copy a program of bin/ to the nodes with the collection files it imports, as import_closure finds them in
the code's own imports. The rule of what is shipped: node-side code imports only the standard library and the shipped
files (plugins/module_utils/ and bin/_gpucluster_bootstrap.py), never Ansible, another collection or a third-party
package, unless the import is guarded by ``except ImportError`` (the checker reads YAML configs when PyYAML happens
to be there). Here: every program the roles ship keeps the rule, runs from the shipped files alone in the installed
layout, and import_closure follows each form of import on small trees.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.import_closure import (FilterModule, file_imports,
                                                                              import_closure, resolve)
from ansible_collections.gpucluster.ops.tests.unit.roles.rolerender import RoleRender, trust

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
NODE_SIDE = ("plugins/module_utils/", "bin/")
COUNTERS = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"


def rule_problems(root, programs):
    """What breaks the rule of node-side code in ``programs`` and the files import_closure ships with them."""
    shipped = set(import_closure(programs, root))
    problems = []
    for relative in list(programs) + sorted(shipped):
        path = os.path.join(root, relative)
        for item in file_imports(path):
            found = [os.path.relpath(os.path.realpath(f), os.path.realpath(root)) for f in resolve(item, path, root)]
            for local in found:
                if local not in shipped:
                    problems.append("%s:%d imports %s, which is not shipped" % (relative, item.line, local))
                elif not local.startswith(NODE_SIDE):
                    problems.append("%s:%d imports %s, which is no node-side file (%s)"
                                    % (relative, item.line, local, ", ".join(NODE_SIDE)))
            if not found and not item.level and item.module.split(".")[0] not in STDLIB and not item.guarded:
                problems.append("%s:%d imports %s: node-side code may import only the standard library and the "
                                "shipped module_utils" % (relative, item.line, item.module))
    return problems


def _node_program_calls():
    """(role, programs) of every task that imports roles/_common/tasks/node_programs.yml, its vars templated with
    the calling role's variables."""
    calls = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))):
        role = path.split(os.sep)[-3]
        with open(path) as handle:
            tasks = yaml.safe_load(handle) or []
        for task in tasks:
            action = task.get("ansible.builtin.import_role") or task.get("ansible.builtin.include_role") or {}
            if action.get("name") == "gpucluster.ops._common" and action.get("tasks_from") == "node_programs":
                render = RoleRender(role, None, {})
                programs = render.templar.template(trust(task["vars"]["_common_node_programs"]))
                calls.append((role, ["bin/%s" % p for p in programs]))
    return calls


CALLS = _node_program_calls()


def test_the_roles_ship_the_checkers_through_node_programs():
    shipped = {program for _role, programs in CALLS for program in programs}
    assert {"bin/gpucluster-health", "bin/dcgm-counters-check"} <= shipped, CALLS


@pytest.mark.parametrize("role,programs", CALLS, ids=[c[0] for c in CALLS])
def test_node_side_code_imports_only_the_standard_library_and_what_is_shipped(role, programs):
    assert rule_problems(ROOT, programs) == [], role


@pytest.mark.parametrize("role,programs", CALLS, ids=[c[0] for c in CALLS])
def test_each_role_installs_every_module_its_program_imports(role, programs):
    # The imports read by pattern, not as import_closure reads them (moved here from test_xid_rules.py, where it read
    # the health_check role's hand-kept list of modules, which import_closure replaces).
    shipped = import_closure(programs)
    listed = {os.path.basename(f) for f in shipped if f.startswith("plugins/module_utils/")}
    assert "bin/_gpucluster_bootstrap.py" in shipped
    if role == "health_check":
        assert "_xid_catalog.py" in listed
    sources = [os.path.join(ROOT, p) for p in programs]
    sources += [os.path.join(ROOT, "plugins", "module_utils", n) for n in sorted(listed)]
    for path in sources:
        with open(path) as handle:
            source = handle.read()
        imported = set(re.findall(r"plugins\.module_utils(?:\._(\w+)| import (_\w+))", source))
        for pair in imported:
            module = (("_" + pair[0]) if pair[0] else pair[1]) + ".py"
            assert module in listed, "%s imports %s, which the %s role does not install" % (path, module, role)


def _install(programs, target):
    """Lay the programs and what they import out below ``target`` as node_programs.yml does."""
    for relative in import_closure(programs):
        os.makedirs(os.path.join(target, os.path.dirname(relative)), exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, relative), os.path.join(target, relative))
    for relative in programs:
        with open(os.path.join(ROOT, relative)) as handle:
            source = handle.read()
        path = os.path.join(target, relative)
        with open(path, "w") as handle:
            handle.write(re.sub(r"^#![^\n]*\n", "#!%s -IS\n" % sys.executable, source, count=1))
        os.chmod(path, 0o755)


def test_the_checkers_run_from_the_shipped_files_alone(tmp_path):
    target = str(tmp_path / "lib")
    _install(["bin/gpucluster-health", "bin/dcgm-counters-check"], target)
    installed = sorted(os.listdir(os.path.join(target, "bin")))
    assert installed == ["_gpucluster_bootstrap.py", "dcgm-counters-check", "gpucluster-health"]
    # Started through a link on PATH, as root starts it; the cwd holds nothing of the collection.
    link = tmp_path / "sbin" / "gpucluster-health"
    link.parent.mkdir()
    link.symlink_to(os.path.join(target, "bin", "gpucluster-health"))
    proc = subprocess.run([str(link), "--check-config"], capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert proc.returncode == 0 and "is a good config" in proc.stdout, proc.stderr
    bundle = tmp_path / "bundle"
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpusim", "gpusim.py"), "bundle", str(bundle),
                    "--profile", os.path.join(ROOT, "tests", "gpusim", "profiles", "h100-sxm-8.json")],
                   check=True, stdout=subprocess.PIPE)
    proc = subprocess.run([str(link), "--from-dir", str(bundle), "--level", "deep", "--format", "json", "--no-state"],
                          capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert '"status"' in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    counters = tmp_path / "counters.csv"
    counters.write_text(COUNTERS)
    proc = subprocess.run([os.path.join(target, "bin", "dcgm-counters-check"), str(counters)], capture_output=True,
                          text=True, cwd=str(tmp_path), check=False)
    assert proc.returncode == 0 and "2 metric(s)" in proc.stdout, (proc.stdout, proc.stderr)


# ---- import_closure on small trees ---------------------------------------------------------------------------------

MU = "ansible_collections.gpucluster.ops.plugins.module_utils"
TREE = {
    "bin/prog": "#!/bin/sh\nimport os\nimport sys\nimport _boot\nfrom %s import _a  # noqa\n" % MU,
    "bin/_boot.py": "import types\n",
    "plugins/module_utils/_a.py": "from %s._b import thing\n" % MU,
    "plugins/module_utils/_b.py": "from . import _c\n\n\ndef late():\n    import %s._d\n" % MU,
    "plugins/module_utils/_c.py": "import re\n",
    "plugins/module_utils/_d.py": "try:\n    from %s._e import y\nexcept ImportError:\n    from _e import y\n"
                                  "try:\n    import yaml\nexcept (ValueError, ImportError):\n    yaml = None\n" % MU,
    "plugins/module_utils/_e.py": "y = 1\n",
    "plugins/module_utils/_unused.py": "import ansible\n",
    "plugins/filter/f.py": "from ansible.errors import AnsibleFilterError\n",
}


def _tree(tmp_path, changes=None):
    for relative, text in dict(TREE, **(changes or {})).items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_every_form_of_import_is_followed(tmp_path):
    root = _tree(tmp_path)
    assert import_closure(["bin/prog"], root) == ["bin/_boot.py"] + ["plugins/module_utils/%s.py" % m for m in
                                                                     ("_a", "_b", "_c", "_d", "_e")]
    assert import_closure("bin/prog", root) == import_closure(["bin/prog"], root)
    assert FilterModule().filters()["import_closure"] is import_closure
    assert rule_problems(root, ["bin/prog"]) == []


@pytest.mark.parametrize("name,text,problem", [
    ("_c", "from ansible.module_utils.basic import AnsibleModule\n",
     "plugins/module_utils/_c.py:1 imports ansible.module_utils.basic: node-side code may import only"),
    ("_c", "import re\nimport yaml\n", "plugins/module_utils/_c.py:2 imports yaml: node-side code"),
    ("_c", "try:\n    import yaml\nexcept ValueError:\n    pass\n", "plugins/module_utils/_c.py:2 imports yaml"),
    ("_c", "from ansible_collections.community.general.plugins.module_utils import x\n",
     "imports ansible_collections.community.general.plugins.module_utils: node-side code"),
    ("_e", "from ansible_collections.gpucluster.ops.plugins.filter.f import g\n",
     "plugins/module_utils/_e.py:1 imports plugins/filter/f.py, which is no node-side file"),
])
def test_the_rule_finds_what_a_node_cannot_import(tmp_path, name, text, problem):
    root = _tree(tmp_path, {"plugins/module_utils/%s.py" % name: text})
    problems = rule_problems(root, ["bin/prog"])
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("text,message", [
    ("from %s._missing import x\n" % MU, "_c.py:1 imports %s._missing, which is no file of the collection" % MU),
    ("from %s import _missing\n" % MU, "_c.py:1 imports _missing from %s, which is no file" % MU),
    ("import ansible_collections.gpucluster.ops.nothing.here\n", "imports ansible_collections.gpucluster.ops.nothing"),
    ("import re\nfrom .. import _nope\n", "_c.py:2 imports _nope from .., which is no file"),
    ("def broken(:\n", "plugins/module_utils/_c.py as Python: "),
])
def test_what_cannot_be_shipped_fails_naming_file_and_line(tmp_path, text, message):
    root = _tree(tmp_path, {"plugins/module_utils/_c.py": text})
    with pytest.raises(AnsibleFilterError) as error:
        import_closure(["bin/prog"], root)
    assert "import_closure: " in str(error.value) and message in str(error.value)


@pytest.mark.parametrize("programs", [[], 5, [5], None, ["/etc/passwd"], ["../prog"], ["bin/missing"], ["bin"]])
def test_bad_programs_fail_naming_the_value(tmp_path, programs):
    with pytest.raises(AnsibleFilterError, match="import_closure: "):
        import_closure(programs, _tree(tmp_path))
