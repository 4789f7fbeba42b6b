# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load the plugins every task uses once, in Ansible's main process, instead of once per task
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Ansible runs each task of each host in a new worker process forked from its main process, and loads the
    plugins the task needs (its action plugin, the filters and tests its templates and conditions use, the
    connection, shell and become plugins) in that worker, where they are lost when the task ends. A playbook of
    this collection pays that again for every task result.
  - At the start of the playbook this callback loads them in the main process, so that every worker starts with
    them; it changes nothing else and prints nothing. The plugins are those of C(ansible.builtin) that the
    collection's roles use, this collection's filters and action plugins, the C(ssh) and C(local) connections and
    C(community.docker.docker) where it is installed.
  - "Measured on the slurm role's preflight (29 tasks on 3 hosts): a median of 4.84 s of the controller's CPU
    instead of 5.67 s. Loading costs a run about 0.2 s, so it pays from a few dozen task results on
    (docs/performance.md)."
  - Enable it with C(callbacks_enabled = gpucluster.ops.preload) in C(ansible.cfg) (this collection's
    C(ansible.cfg) and C(ansible-fleet.cfg) do).
requirements:
  - Nothing beyond ansible-core.
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# callbacks_enabled = gpucluster.ops.preload
"""

import os

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import (action_loader, become_loader, connection_loader, filter_loader, lookup_loader,
                                    shell_loader, test_loader)

# One name from each plugin file the collection's tasks reach (a Jinja plugin file holds many filters or tests:
# loading one loads the file).
BUILTIN = {
    action_loader: ("normal", "command", "copy", "template", "assert", "set_fact", "debug", "fail", "include_vars",
                    "package", "service", "validate_argument_spec", "gather_facts", "uri", "fetch", "reboot",
                    "wait_for_connection", "pause", "shell", "group_by"),
    filter_loader: ("to_json", "unique", "urlsplit", "password_hash"),
    test_loader: ("match", "file", "subset", "uri"),
    lookup_loader: ("vars", "file", "env", "template", "first_found"),
    connection_loader: ("ssh", "local"),
    shell_loader: ("sh",),
    become_loader: ("sudo", "su"),
}
OTHERS = {connection_loader: ("community.docker.docker",)}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster.ops.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        loaded, missing = 0, []
        for loader, names in BUILTIN.items():
            for name in names:
                loaded += self._load(loader, "ansible.builtin." + name, missing)
        for loader, names in OTHERS.items():
            for name in names:
                loaded += self._load(loader, name, missing)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for loader, folder in ((filter_loader, "filter"), (action_loader, "action")):
            for entry in sorted(os.listdir(os.path.join(here, folder))):
                if entry.endswith(".py") and not entry.startswith("_"):
                    loaded += self._load(loader, "gpucluster.ops." + entry[:-3], missing)
        self._display.vvv("gpucluster.ops.preload: %d plugins loaded in the main process; not found: %s"
                          % (loaded, ", ".join(missing) or "none"))

    @staticmethod
    def _load(loader, name, missing):
        """1 when the plugin loaded; a plugin that is not there (an optional collection) is only noted."""
        try:
            found = loader.get(name, class_only=True) if loader is not filter_loader and loader is not test_loader \
                else loader.get(name)
        except Exception:     # pylint: disable=broad-except
            found = None      # the worker that needs it loads it, and reports what fails, as without this
        if found is None:
            missing.append(name)
            return 0
        return 1
