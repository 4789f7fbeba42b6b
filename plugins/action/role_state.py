# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpucluster.ops.role_state on the controller (documentation: plugins/modules/role_state.py).

The check computes the wanted state's digests here: the collection's content and the play's inventory (from the
gpucluster.ops.role_state callback, in the main process) and the host's variables and the facts the roles read
(from the task's variables). The record hands the module what the callback collected for the host since the check,
or the reason it cannot be recorded. Either way the module runs on the node.
"""

from __future__ import annotations

from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _role_state as rs

OPTIONS = ("name", "state", "path")
MODULE = "gpucluster.ops.role_state"


class ActionModule(ActionBase):
    """Check a node against a role's record, or record it."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        unknown = sorted(set(args) - set(OPTIONS))
        if unknown:
            raise AnsibleActionFail("role_state: unknown options %s (a task gives only %s)"
                                    % (", ".join(unknown), ", ".join(OPTIONS)))
        name = args.get("name")
        state = args.get("state") or "check"
        if state not in ("check", "record", "absent"):
            raise AnsibleActionFail("role_state: state %r is not check, record or absent" % (state,))
        host = task_vars.get("inventory_hostname")
        module_args = dict(args, state=state)
        try:
            switch = boolean(self._templar.template(task_vars.get("gpucluster_role_state", True)), strict=True)
        except TypeError:
            raise AnsibleActionFail("host %s: gpucluster_role_state is %r, not true or false"
                                    % (host, task_vars.get("gpucluster_role_state")))
        if not switch and state != "absent":
            # off: every role runs in full, and no record is left to be trusted later
            module_args = dict(args, state="record", refuse="gpucluster_role_state is false")
            result.update(self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars))
            return dict(result, name=name, state=state, converged=False, reason="gpucluster_role_state is false")
        if state == "check":
            wanted, why = self._wanted(task_vars)
            if wanted is None:
                result.update(changed=False, converged=False, reason=why, facts={}, recorded=False, observed=0)
                return dict(result, name=name, state=state)
            module_args["wanted"] = wanted
        elif state == "record" and not rs.STATE["content"]:
            # Without the callback there is nothing to record, and no record was used: the node is not asked. An
            # older record stays; it stands only while the wanted state and every observation are as recorded.
            result.update(changed=False, converged=False, reason=self._wanted(task_vars)[1], facts={}, recorded=False,
                          observed=0)
            return dict(result, name=name, state=state)
        elif state == "record":
            window = (rs.STATE["windows"].get(host) or [None])[-1]
            refuse = self._refusal(task_vars, window, name)
            items = []
            if not refuse:
                items, refuse = self._templated(window.items)
            module_args.update(refuse=refuse or "")
            if not refuse:
                module_args.update(wanted=window.wanted, observe=items, facts=window.facts,
                                   host_facts=window.host_facts)
        result.update(self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars))
        if state == "check":
            result["wanted"] = module_args["wanted"]
            if result.get("converged") and result.get("host_facts"):
                result["ansible_facts"] = result["host_facts"]
        return dict(result, name=name, state=state)

    def _wanted(self, task_vars):
        """(digests by part, None), or (None, why they cannot be computed)."""
        if not rs.STATE["content"]:
            return None, "the gpucluster.ops.role_state callback is not enabled: every role runs in full"
        if not rs.STATE["inventory"]:
            return None, "the inventory could not be hashed (run with -vvv for why)"
        host, why = rs.host_vars_digest(task_vars, rs.STATE["registered"], self._templar.template)
        if host is None:
            return None, why
        return {"content": rs.STATE["content"], "inventory": rs.STATE["inventory"], "host": host}, None

    def _templated(self, items):
        """(items, None) with each path a no_log task gave as a template templated here, or (None, why not)."""
        done = []
        for item in items:
            if item.get("template"):
                try:
                    path = self._templar.template(item["path"])
                except Exception as exc:  # pylint: disable=broad-except  # any failure: not recorded
                    return None, "path %s cannot be templated: %s" % (item["path"], exc)
                if not isinstance(path, str) or not path.startswith("/"):
                    return None, "path %s is not absolute once templated (%r)" % (item["path"], path)
                item = dict(item, path=path)
                del item["template"]
            done.append(item)
        return done, None

    def _refusal(self, task_vars, window, name):
        """Why this run of the role cannot stand for the node, or None."""
        if self._task.check_mode or self._play_context.check_mode:
            return "check mode"
        cli = context.CLIARGS
        if list(task_vars.get("ansible_run_tags") or ["all"]) != ["all"] or task_vars.get("ansible_skip_tags"):
            return "the run was limited with --tags or --skip-tags"
        if cli.get("start_at_task") or cli.get("step"):
            return "the run started at a task or ran step by step"
        if window is None or window.name != name:
            return ("no task results were collected since the role's check (is the gpucluster.ops.role_state "
                    "callback enabled?)")
        if window.wanted is None:
            return "the wanted state was not computed at the role's check"
        if window.problems:
            return window.problems[0]
        return None
