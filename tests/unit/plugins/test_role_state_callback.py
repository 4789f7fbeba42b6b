"""plugins/callback/role_state.py with stand-ins for Ansible's result objects: a role's check that is not converged
opens a window for its host, the host's results go to it (and only its own), the record closes it, a converged check
opens none, a run_once result that sets facts for all hosts spoils every open window, and a task from a file outside
the collection is a problem. What the windows make of each result is tests/unit/plugins/plugin_utils/
test_role_state_controller.py's."""

import os

import pytest

from ansible_collections.gpucluster.ops.plugins.callback import role_state as callback
from ansible_collections.gpucluster.ops.plugins.plugin_utils import _role_state as rs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class Host(object):
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class Task(object):
    def __init__(self, action, name="a task", path=None, run_once=False, args=None):
        self.action = self.resolved_action = action
        self.name = name
        self.run_once = run_once
        self.args = args or {}
        self._path = path if path is not None else os.path.join(ROOT, "roles", "nccl", "tasks", "main.yml") + ":3"

    def get_name(self):
        return self.name

    def get_path(self):
        return self._path


class Result(object):
    def __init__(self, host, task, result):
        self.host, self.task, self.result = Host(host), task, result


@pytest.fixture(name="plugin")
def fixture_plugin():
    plugin = callback.CallbackModule()
    rs.STATE["windows"] = {}
    yield plugin
    rs.STATE["windows"] = {}


def check(plugin, host, converged=False):
    plugin.v2_runner_on_ok(Result(host, Task("gpucluster.ops.role_state"),
                                  {"state": "check", "name": "nccl", "converged": converged, "wanted": {"host": "x"}}))


def test_a_window_from_the_check_to_the_record(plugin):
    check(plugin, "gpu01")
    check(plugin, "gpu02", converged=True)
    assert list(rs.STATE["windows"]) == ["gpu01"]
    window = rs.STATE["windows"]["gpu01"][-1]
    assert window.name == "nccl" and window.wanted == {"host": "x"}
    plugin.v2_runner_on_ok(Result("gpu01", Task("ansible.builtin.template"), {"dest": "/etc/nccl.conf"}))
    plugin.v2_runner_on_ok(Result("gpu02", Task("ansible.builtin.template"), {"dest": "/etc/other.conf"}))
    plugin.v2_runner_on_skipped(Result("gpu01", Task("ansible.builtin.command"), {"skipped": True}))
    assert window.items == [{"kind": "file", "path": "/etc/nccl.conf"}] and window.results == 2
    plugin.v2_runner_on_ok(Result("gpu01", Task("gpucluster.ops.role_state"), {"state": "record", "name": "nccl"}))
    assert rs.STATE["windows"]["gpu01"] == []


def test_short_and_legacy_names_are_the_builtin_modules(plugin):
    assert callback.action_name(Task("template")) == "ansible.builtin.template"
    assert callback.action_name(Task("ansible.legacy.command")) == "ansible.builtin.command"
    assert callback.action_name(Task("gpucluster.ops.ib_facts")) == "gpucluster.ops.ib_facts"


def test_run_once_facts_spoil_every_window_a_run_once_assert_does_not(plugin):
    check(plugin, "gpu01")
    check(plugin, "gpu02")
    plugin.v2_runner_on_ok(Result("gpu01", Task("ansible.builtin.assert", run_once=True), {}))
    assert all(not w[-1].problems for w in rs.STATE["windows"].values())
    plugin.v2_runner_on_ok(Result("gpu01", Task("ansible.builtin.set_fact", run_once=True),
                                  {"ansible_facts": {"a": 1}}))
    assert all("runs once for all hosts" in w[-1].problems[0] for w in rs.STATE["windows"].values())


def test_a_task_from_outside_the_collection_and_a_failure(plugin):
    check(plugin, "gpu01")
    plugin.v2_runner_on_ok(Result("gpu01", Task("ansible.builtin.set_fact", path="/tmp/site/hooks.yml:1"),
                                  {"ansible_facts": {"a": 1}}))
    plugin.v2_runner_on_failed(Result("gpu01", Task("ansible.builtin.command"), {"rc": 1}), ignore_errors=True)
    plugin.v2_runner_on_ok(Result("gpu01", Task("ansible.builtin.validate_argument_spec", path="/tmp/site/play.yml:3"),
                                  {"validate_args_context": {}}))
    problems = rs.STATE["windows"]["gpu01"][-1].problems
    assert len(problems) == 2       # the argument check of an included role names the play's file: it is fine
    assert "outside the collection" in problems[0] and problems[1].endswith("failed")


def test_a_new_play_forgets_windows_a_failed_host_left_open(plugin):
    check(plugin, "gpu01")

    class Play(object):
        def get_variable_manager(self):
            raise RuntimeError("no inventory in this test")
    plugin.v2_playbook_on_play_start(Play())
    assert rs.STATE["windows"] == {} and rs.STATE["inventory"] is None
