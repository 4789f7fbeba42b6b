# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test only (test_15_interrupted_run.py): SIGKILL ansible-playbook at a fixed point of a run.

Enabled for one run by the environment (ANSIBLE_CALLBACK_PLUGINS=<this directory>,
ANSIBLE_CALLBACKS_ENABLED=gpucluster_kill_at). GPUCLUSTER_KILL_AT_TASK names the task (its name without the role
prefix), GPUCLUSTER_KILL_AT_HOSTS how many hosts must have finished it (ok or changed) before the kill (default 1).
Before it kills, it writes the hosts that finished to GPUCLUSTER_KILL_AT_RECORD (a JSON list) if set. It kills the
worker processes first, then itself: nothing of the run goes on after the kill point (with forks=1 no other host has
started the task).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpucluster_kill_at
type: aggregate
short_description: Kill the run when a named task finished on N hosts (tests only)
description: Kills ansible-playbook with SIGKILL at a fixed point; for fault-injection tests.
requirements: [enabled by ANSIBLE_CALLBACKS_ENABLED]
"""

import json
import os
import signal

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster_kill_at"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._task = os.environ.get("GPUCLUSTER_KILL_AT_TASK", "")
        self._hosts = int(os.environ.get("GPUCLUSTER_KILL_AT_HOSTS", "1"))
        self._record = os.environ.get("GPUCLUSTER_KILL_AT_RECORD", "")
        self._done = []

    def _finished(self, result):
        name = result._task.get_name()
        if not self._task or name.split(" : ", 1)[-1] != self._task:
            return
        self._done.append(result._host.get_name())
        if len(self._done) < self._hosts:
            return
        if self._record:
            with open(self._record, "w") as handle:
                json.dump(self._done, handle)
        me = os.getpid()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        os.kill(me, signal.SIGKILL)

    def v2_runner_on_ok(self, result):
        self._finished(result)
