# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: role_state
type: aggregate
short_description: Collect what each role's tasks observed on a node, for gpucluster.ops.role_state's records
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "A role of this collection that ran on a node and changed nothing is recorded there by
    M(gpucluster.ops.role_state), so that the next run checks the node in one task and ends the role when nothing
    differs. This callback gives that module what it needs from Ansible's main process: at the start of the playbook
    a digest of the collection's content, at the start of each play a digest of the inventory (variables of every
    group and host, C(host_vars/) and C(group_vars/), extra variables, the facts the roles read and the variables set
    so far), and, from each host's role_state check to its record, what every task result of the host looked at or
    manages (files, directory trees, packages, systemd units, read-only probes) and the facts it set."
  - "A task result the record could not stand for keeps the run from being recorded: a change, a failure, a task
    from a file outside the collection, a module or command that cannot be observed again, a task run on another
    host. The record task's result names the first such result (C(reason))."
  - It prints nothing. Without it nothing is recorded, and every role runs in full.
  - Enable it with C(callbacks_enabled = gpucluster.ops.role_state) in C(ansible.cfg) (this collection's
    C(ansible.cfg) and C(ansible-fleet.cfg) do).
requirements:
  - Nothing beyond ansible-core.
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# callbacks_enabled = gpucluster.ops.preload, gpucluster.ops.role_state
"""

import os

from ansible.plugins.callback import CallbackBase

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _role_state as rs


def action_name(task):
    """The task's module as its full name (ansible.legacy.X and a short X as ansible.builtin.X)."""
    name = getattr(task, "resolved_action", None) or task.action or ""
    if name.startswith("ansible.legacy."):
        name = "ansible.builtin." + name[len("ansible.legacy."):]
    elif "." not in name:
        name = "ansible.builtin." + name
    return name


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster.ops.role_state"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._root = os.path.realpath(rs.collection_root()) + os.sep

    def v2_playbook_on_start(self, playbook):
        rs.STATE["content"], rs.STATE["registered"] = rs.content_digest(self._root)
        rs.STATE["root"] = self._root
        rs.STATE["windows"] = {}
        rs.STATE["inventory"] = None

    def v2_playbook_on_play_start(self, play):
        try:
            rs.STATE["inventory"] = rs.inventory_digest(play.get_variable_manager(), rs.STATE["registered"])
        except Exception as exc:  # pylint: disable=broad-except  # unknown: nothing is converged in this play
            rs.STATE["inventory"] = None
            self._display.vvv("gpucluster.ops.role_state: the inventory cannot be hashed: %s" % exc)
        # a window left open by a play that ended a host early never closes: nothing is recorded from it
        rs.STATE["windows"] = {}

    def _add(self, result, status):
        task = result.task
        host = result.host.get_name()
        action = action_name(task)
        windows = rs.STATE["windows"]
        data = result.result
        if action == "gpucluster.ops.role_state":
            if data.get("state") == "check" and status == "ok" and not data.get("converged"):
                windows.setdefault(host, []).append(rs.Window(data.get("name"), data.get("wanted")))
                return
            if data.get("state") == "record" and windows.get(host):
                windows[host].pop()
                return
        if task.run_once and status != "skipped" and action not in rs.PURE - rs.GIVE_BACK:
            # Ansible reports a run_once result for one host and applies it to all: no window can stand for it
            for host_windows in windows.values():
                for window in host_windows:
                    window.problem("task %r runs once for all hosts" % task.get_name())
        if not windows.get(host):
            return
        path = task.get_path() or ""
        # the argument check Ansible adds to an included role names the including play's file: its spec is the role's
        origin_ok = action == "ansible.builtin.validate_argument_spec" or (
            os.path.realpath(path.rsplit(":", 1)[0]).startswith(self._root) if path else action in rs.PURE)
        delegated = bool(data.get("_ansible_delegated_vars")) and \
            data["_ansible_delegated_vars"].get("ansible_delegated_host") not in (None, host)
        for window in windows[host]:
            window.add(status, action, task.get_name(), data, delegated=delegated, origin_ok=origin_ok,
                       task_args=task.args)

    def v2_runner_on_ok(self, result):
        self._add(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._add(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._add(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._add(result, "unreachable")
