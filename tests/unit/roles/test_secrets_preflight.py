"""Secrets in preflight: the one placeholder rule (roles/_common/tasks/secrets.yml), who uses it, Grafana's admin
password, and the munge key's mode from the start.

The placeholder rule runs through the real ansible-playbook on localhost; the Grafana conditions are the preflight
task's own `that:` list, evaluated with the role's variables.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.ops.tests.unit.roles.rolerender import UBUNTU_2404, RoleRender

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
EXAMPLES = os.path.join(ROOT, "inventories", "examples")
PLAY = """- name: Check secrets
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the shared placeholder rule
      ansible.builtin.include_role:
        name: gpucluster.ops._common
        tasks_from: secrets
      vars:
        _common_secrets: [unit_db_password, unit_key]
"""


def _load(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


def _run(tmp_path, extra_vars):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=%s" % sys.executable, "-e", "@%s" % (tmp_path / "vars.json"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("value", ["CHANGE-ME-openssl-rand-hex-24", "change-me-secret-4711", "  CHANGE-ME-secret-4711"])
def test_placeholder_is_refused_naming_host_and_variable_never_the_value(tmp_path, value):
    rc, out = _run(tmp_path, {"unit_db_password": "a-real-password-4711", "unit_key": value})
    assert rc != 0, out
    assert ("host localhost: unit_key is still the example vault's placeholder (a value beginning with CHANGE-ME, "
            "from vault.yml.example)") in out, out
    assert value.strip() not in out and "a-real-password-4711" not in out
    assert "unit_db_password is still" not in out


def test_real_secrets_pass_the_placeholder_rule(tmp_path):
    rc, out = _run(tmp_path, {"unit_db_password": "my-CHANGE-ME-is-inside", "unit_key": 12345})
    assert rc == 0, out


def _secrets_checked(role):
    names = []
    for task in _load("roles", role, "tasks", "preflight.yml"):
        include = task.get("ansible.builtin.include_role") or {}
        if include.get("name") == "gpucluster.ops._common" and include.get("tasks_from") == "secrets":
            names.extend(task["vars"]["_common_secrets"])
    return names


def test_every_preflight_that_consumes_a_secret_uses_the_one_rule():
    assert sorted(_secrets_checked("slurm")) == ["slurm_db_password", "slurm_munge_key"]
    assert _secrets_checked("monitoring") == ["monitoring_grafana_admin_password"]


@pytest.mark.parametrize("example", sorted(os.listdir(EXAMPLES)))
def test_the_example_vaults_placeholders_are_all_refused(example):
    """Each placeholder of vault.yml.example starts with CHANGE-ME and reaches a variable the rule checks."""
    vault = _load("inventories", "examples", example, "group_vars", "all", "vault.yml.example")
    checked = set(_secrets_checked("slurm") + _secrets_checked("monitoring"))
    reached = {}
    folder = os.path.join(EXAMPLES, example, "group_vars", "all")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yml"):
            for key, value in (_load(folder, name) or {}).items():
                if isinstance(value, str) and value.startswith("{{ vault_"):
                    reached[value.strip("{} ")] = key
    for key, value in vault.items():
        assert str(value).startswith("CHANGE-ME"), key
        assert reached.get(key) in checked, (key, reached.get(key))


def _grafana_conditions():
    for task in _load("roles", "monitoring", "tasks", "preflight.yml"):
        if task.get("name") == "Check that Grafana gets an admin password of its own":
            return task["ansible.builtin.assert"]["that"], task["when"]
    raise AssertionError("the Grafana password check is gone from the monitoring preflight")


@pytest.mark.parametrize("password, accepted", [
    ("", False), ("admin", False), ("Admin", False), ("short7!", False), ("has a blank", False), ('quote"inside', False),
    ("back\\slash-inside", False), ("lab-only-grafana-password", True), ("Zx9#q!w2-e$r", True),
])
def test_grafana_admin_password_preflight(password, accepted):
    that, when = _grafana_conditions()
    role = RoleRender("monitoring", None, UBUNTU_2404, monitoring_grafana_admin_password=password)
    assert role.var(when) is True
    assert all(role.var(condition) for condition in that) is accepted


def test_grafana_password_is_not_asked_for_without_grafana():
    _that, when = _grafana_conditions()
    assert RoleRender("monitoring", None, UBUNTU_2404, monitoring_grafana_enabled=False).var(when) is False


def test_inventories_give_grafana_a_password():
    lab = _load("inventories", "lab", "group_vars", "all.yml")
    molecule = _load("molecule", "cluster-shared", "group_vars", "all.yml")
    for value in (lab["monitoring_grafana_admin_password"], molecule["monitoring_grafana_admin_password"]):
        role = RoleRender("monitoring", None, UBUNTU_2404, monitoring_grafana_admin_password=value)
        assert all(role.var(condition) for condition in _grafana_conditions()[0]), value


def _tasks_on(path_var, tasks):
    return [t for t in tasks if path_var in json.dumps(t)]


def test_munge_key_never_exists_with_another_mode_or_owner():
    tasks = _tasks_on("__slurm_munge_key_file", _load("roles", "slurm", "tasks", "configure.yml"))
    names = [t["name"] for t in tasks]
    generate = next(t for t in tasks if t["name"].startswith("Generate the cluster's munge key"))
    script = generate["ansible.builtin.shell"]["cmd"]
    # Written to a private mktemp file, given owner and mode, then renamed into place.
    assert script.index("mktemp") < script.index("dd ") < script.index("chown munge:munge") < script.index("chmod 0400") \
        < script.index('mv "$tmp" "$key"')
    touch = names.index("Give the munge key file its owner and mode before a key is copied into it (an empty file when new)")
    for task in tasks:
        module = task.get("ansible.builtin.copy")
        if module:
            assert names.index(task["name"]) > touch, task["name"]
            assert (module["owner"], module["mode"], task["no_log"]) == ("munge", "0400", True)
    touched = tasks[touch]["ansible.builtin.file"]
    assert (touched["state"], touched["owner"], touched["mode"]) == ("touch", "munge", "0400")
