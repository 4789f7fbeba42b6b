"""The user_tools role's sudo rule for the booking helper (issue 46): its two forms only, and never the caller's TZ.

Rendered from tasks/install.yml as Ansible would render it; the role validates it with ``visudo -cf`` before it is in
place, and so does this test where visudo is installed (sudo's package).
"""

import os
import shutil
import subprocess

import pytest
import yaml
from ansible.template import trust_as_template

from .rolerender import ROLES, RoleRender

HELPER = "/usr/local/lib/gpu-job/bin/gpu-reserve"


def _task():
    with open(os.path.join(ROLES, "user_tools", "tasks", "install.yml")) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        for inner in task.get("block") or []:
            if inner.get("name", "").startswith("Let every user run the booking helper"):
                return inner
    raise AssertionError("no sudo rule task in roles/user_tools/tasks/install.yml")


@pytest.fixture(name="rule")
def _rule():
    task = _task()
    assert task["ansible.builtin.copy"]["validate"] == "/usr/sbin/visudo -cf %s"
    assert task["ansible.builtin.copy"]["mode"] == "0440"
    render = RoleRender("user_tools", None, {})
    assert render.var("__user_tools_reserve_helper") == HELPER
    return render.templar.template(trust_as_template(task["ansible.builtin.copy"]["content"]))


def test_the_rule_allows_create_and_cancel_and_drops_tz(rule):
    lines = [line for line in rule.splitlines() if line and not line.startswith("#")]
    # Under env_reset sudo keeps a TZ without '/' or '%' (env_check) and reads env_delete only without env_reset.
    assert lines == ["Defaults!%s env_check-=TZ, env_keep-=TZ, env_delete+=TZ" % HELPER,
                     "ALL ALL=(root) NOPASSWD: %s create *, %s cancel *" % (HELPER, HELPER)], rule


def test_visudo_accepts_the_rule(rule, tmp_path):
    visudo = shutil.which("visudo") or ("/usr/sbin/visudo" if os.path.exists("/usr/sbin/visudo") else None)
    if visudo is None:
        pytest.skip("visudo is not installed here (the role runs it on the login node)")
    path = tmp_path / "gpucluster-gpu-reserve"
    path.write_text(rule)
    proc = subprocess.run([visudo, "-cf", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
