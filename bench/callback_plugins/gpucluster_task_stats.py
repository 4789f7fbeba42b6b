# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bench-only callback: one JSON line per task result (bench/site_rerun.py enables it by the environment)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type  # pylint: disable=invalid-name

DOCUMENTATION = r"""
name: gpucluster_task_stats
type: aggregate
short_description: Write one JSON line per task and host to the file named by GPUCLUSTER_TASK_STATS
description:
  - Used by bench/site_rerun.py only, never by a role or a playbook. Each line has the play, the role, the task,
    the host, the status (ok, changed, skipped, failed, unreachable) and the seconds from the task's start on the
    controller to the host's result.
options: {}
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Append one JSON line per task result."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster_task_stats"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get("GPUCLUSTER_TASK_STATS")
        self._play = ""
        self._started = {}

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.monotonic()  # pylint: disable=protected-access

    def _write(self, result, status):
        if not self._path:
            return
        task = result._task  # pylint: disable=protected-access
        host = result._host.get_name()  # pylint: disable=protected-access
        started = self._started.pop((host, task._uuid), None)  # pylint: disable=protected-access
        role = task._role.get_name(include_role_fqcn=False) if task._role else ""  # pylint: disable=protected-access
        record = {"play": self._play, "role": role, "task": task.get_name(), "action": task.action, "host": host,
                  "status": status, "seconds": round(time.monotonic() - started, 4) if started else None}
        with open(self._path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "changed" if result._result.get("changed") else "ok")  # pylint: disable=protected-access

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._write(result, "unreachable")
