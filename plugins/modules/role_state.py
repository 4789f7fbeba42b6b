#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: role_state
short_description: Tell whether a role would change nothing on a node, from the record of its last no-change run
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "A role of this collection starts with O(state=check) and ends with O(state=record) (through C(_common)'s
    C(role_state_check) and C(role_state_record) task files). When the check finds the node as the role's last run
    left it, the role ends there: one task instead of hundreds at fleet size. Anything it cannot tell makes the role
    run in full, so a node is never taken for converged when unsure."
  - "O(state=record), after the role's tasks, writes C(PATH/NAME.json) only when that run of the role changed
    nothing, failed nowhere, ran every task (no C(--tags), C(--skip-tags) or C(--start-at-task)), was not in check
    mode, and every task result of the role is one the record can stand for (the action plugin decides from the
    results that the C(gpucluster.ops.role_state) callback collected). It holds: the wanted state (digests of the
    collection's content, the inventory, the host's variables and the facts the roles read), what the tasks looked at
    or managed on the node (files, directory trees, packages, systemd units, and the output of read-only probes such
    as C(dpkg-query) or C(apt-cache madison)), and the facts the role set (given back on a converged node, so that
    later tasks and other hosts see them)."
  - "O(state=check) is converged only when the record is there and readable, its wanted state is the one computed
    now, and every observation is made again and gives the recorded value. RV(reason) names what differs: a new
    package version offered, a file edited by hand, a unit stopped, a changed variable. A check that is not
    converged removes the record (outside check mode), so that a run that then changes the node and fails leaves
    nothing to stand for it."
  - The options other than O(name), O(state) and O(path) are set by the action plugin; a task does not give them.
  - Writing the record is bookkeeping, not a change of the node's configuration, so the task never reports a change.
options:
  name:
    description: The role (or the role's task file) the record is for; its file name under O(path).
    type: str
    required: true
  state:
    description:
      - C(check) compares the node with the record; C(record) writes the record after a no-change run; C(absent)
        removes the record, so that the role runs in full the next time.
    type: str
    choices: [check, record, absent]
    default: check
  path:
    description: The directory of the records, root's alone.
    type: path
    default: /var/lib/gpucluster/role-state
  wanted:
    description: Digests of the wanted state, by part (computed on the controller by the action plugin).
    type: dict
    default: {}
  observe:
    description: O(state=record) only. What to observe, as the action plugin found it in the role's task results.
    type: list
    elements: dict
    default: []
  facts:
    description: O(state=record) only. The facts the role set, given back by a converged check.
    type: dict
    default: {}
  host_facts:
    description: O(state=record) only. The facts the role's fact modules returned, given back as facts by a converged check.
    type: dict
    default: {}
  refuse:
    description: O(state=record) only. Why this run cannot be recorded (the action plugin's finding); the record is removed.
    type: str
    default: ""
attributes:
  action:
    support: full
    description: The action plugin computes the wanted state on the controller and hands the role's observations on.
  check_mode:
    support: full
    description: Checks in check mode too; O(state=record) and O(state=absent) write nothing in check mode.
  diff_mode:
    support: none
    description: Reports no change, so has no diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes, as root (the records are root's).
notes:
  - "The inventory variable C(gpucluster_role_state) (default true) turns it off for a host: set to false, every role
    runs in full there and the host's records are removed as the roles end."
  - "To tell which variable or fact changed the wanted state (RV(reason) names only the part: C(content),
    C(inventory) or C(host)), set the environment variable C(GPUCLUSTER_ROLE_STATE_DUMP) to a directory on the
    controller: each digest's input is written there as JSON, to compare between two runs."
  - Enable the C(gpucluster.ops.role_state) callback (this collection's C(ansible.cfg) and C(ansible-fleet.cfg) do).
    Without it nothing is recorded and every role runs in full.
  - A record is only as good as what the role looks at. What a role's tasks did not look at (a package in the
    repositories that no task asked about, a file no task reads) is not observed; that is also what a full run would
    not have looked at.
"""

EXAMPLES = r"""
- name: Tell whether the node is as the role's last no-change run left it
  gpucluster.ops.role_state:
    name: nccl
  register: __common_role_state

- name: Record the node's state after a run of the role that changed nothing
  gpucluster.ops.role_state:
    name: nccl
    state: record

- name: Make every role run in full on the next run
  gpucluster.ops.role_state:
    name: "{{ item }}"
    state: absent
  loop: [nccl, cuda_toolkit]
"""

RETURN = r"""
converged:
  description: O(state=check) only. Whether the node is as the record says, with the same wanted state.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the role runs in full (O(state=check)) or why the run was not recorded (O(state=record)); empty otherwise.
  returned: always
  type: str
  sample: "package libnccl2: hold installed 2.22.3-1 -> hold installed 2.22.4-1"
facts:
  description: O(state=check), when converged. The facts the role set in the recorded run, to set again.
  returned: always
  type: dict
  sample: {__nccl_installed_version: 2.22.3-1}
host_facts:
  description: O(state=check), when converged. The facts the role's fact modules returned in the recorded run (the
    action plugin sets them as the host's facts).
  returned: always
  type: dict
  sample: {gpucluster_ib_ports: []}
recorded:
  description: O(state=record) only. Whether the record was written (in check mode, would be).
  returned: always
  type: bool
  sample: true
observed:
  description: How many observations the record holds (O(state=check)) or would hold (O(state=record)).
  returned: always
  type: int
  sample: 14
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _role_state as rs


def _finish(module, result, drop=None, **values):
    """Exit with result updated by values; drop names a record to remove first (never in check mode): one that no
    longer stands for the node, so that a run that changes it and then fails leaves nothing to trust."""
    if drop and not module.check_mode:
        try:
            os.unlink(drop)
        except FileNotFoundError:
            pass
    result.update(values)
    module.exit_json(**result)


def _check(module, path, wanted, result):
    record, why = rs.load(path)
    if record is None:
        _finish(module, result, reason=why)
    result["observed"] = len(record["observed"])
    differs = sorted(part for part in set(record["wanted"]) | set(wanted)
                     if record["wanted"].get(part) != wanted.get(part))
    if not wanted or differs:
        _finish(module, result, drop=path,
                reason="the wanted state changed since the record: %s" % (", ".join(differs) or "not computed"))
    values, errors = rs.observe_all(record["items"])
    if errors:
        key = sorted(errors)[0]
        _finish(module, result, drop=path, reason="%s cannot be observed: %s" % (key, errors[key]))
    difference = rs.compare(record["observed"], values)
    if difference:
        _finish(module, result, drop=path, reason=difference)
    _finish(module, result, converged=True, facts=record["facts"], host_facts=record.get("host_facts", {}))


def _record(module, path, params, result):
    # a run that cannot stand for the node removes any older record, so that it is not trusted
    if params["refuse"] or not params["wanted"]:
        _finish(module, result, drop=path, reason=params["refuse"] or "the wanted state was not computed")
    items = []
    seen = set()
    for item in params["observe"]:
        key = rs.item_key(item)
        if key not in seen:
            seen.add(key)
            items.append(item)
    values, errors = rs.observe_all(items)
    if errors:
        key = sorted(errors)[0]
        _finish(module, result, drop=path, reason="%s cannot be observed: %s" % (key, errors[key]))
    record = dict(format=rs.FORMAT, name=params["name"], wanted=params["wanted"], items=items, observed=values,
                  facts=params["facts"], host_facts=params["host_facts"])
    if not module.check_mode:
        try:
            rs.save(path, record)
        except OSError as exc:
            module.fail_json(msg="%s cannot be written: %s" % (path, exc))
    _finish(module, result, recorded=True, observed=len(values))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["check", "record", "absent"], default="check"),
            path=dict(type="path", default="/var/lib/gpucluster/role-state"),
            wanted=dict(type="dict", default={}),
            observe=dict(type="list", elements="dict", default=[]),
            facts=dict(type="dict", default={}),
            host_facts=dict(type="dict", default={}),
            refuse=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$", params["name"]):
        module.fail_json(msg="name %r: letters, digits, '_', '.' and '-' only" % params["name"])
    path = os.path.join(params["path"], params["name"] + ".json")
    result = dict(changed=False, converged=False, reason="", facts={}, host_facts={}, recorded=False, observed=0)
    if params["state"] == "absent":
        _finish(module, result, drop=path)
    if params["state"] == "check":
        _check(module, path, params["wanted"], result)
    _record(module, path, params, result)


if __name__ == "__main__":
    main()
