#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_reservation
short_description: Create, update or delete one Slurm reservation, idempotently and with a read-back
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads every reservation with C(scontrol show reservation -o) (Slurm 22.05 to 24.11), compares the one named
    O(name) with the options given, and runs C(scontrol create reservation ...), C(scontrol update
    reservationname=...) or C(scontrol delete reservationname=...) only when they differ.
  - Options left out (O(partition), O(flags), O(users), O(accounts)) are not managed on an existing reservation;
    given ones are the whole value.
  - After a change it reads the reservations again and fails, naming what differs, when Slurm did not take it.
  - Checks every option before running anything and fails naming the option and the value.
  - Times are the controller's local time, as scontrol takes and prints them.
  - "A recurring reservation (O(flags) with C(hourly), C(daily), C(weekday), C(weekend) or C(weekly)) whose start
    Slurm moved on by whole periods matches the O(start_time) it was created with, so a later run changes nothing."
  - "GPUs: Slurm 22.05 refuses GPU (GRES) reservations (C(scontrol create reservation ... tres=gres/gpu=8):
    C(TRES type 'gres/gpu' not supported with reservations); C(gres=) is an unknown parameter), so this module
    reserves whole nodes (O(nodes) or O(node_count)); the slurm role's C(slurm_reservations) turns C(gpus) into
    whole nodes. Slurm 24.11 takes C(tres=gres/gpu=4) (with or without a type, O(nodes) or O(partition)) but
    reserves the node's every CPU with it (C(TRES=cpu=8,gres/gpu=4) on an 8-CPU node), so the node's other GPUs
    could not run a job either: whole nodes there too."
options:
  name:
    description: The reservation's name (letters, digits, C(_), C(.), C(-); at most 64).
    type: str
    required: true
  state:
    description: C(present) creates or updates the reservation, C(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  nodes:
    description:
      - The reserved nodes, Slurm node names or hostlist expressions such as C(gpu[01-04]); folded into one hostlist.
        Compared as a set of names with the nodes Slurm shows.
      - With O(state=present), O(nodes) or O(node_count) is required.
    type: list
    elements: str
  node_count:
    description:
      - Reserve any this many nodes of O(partition) (Slurm chooses them); compared with the reservation's node count.
    type: int
  partition:
    description: The partition (C(PartitionName)); required with O(node_count).
    type: str
  start_time:
    description:
      - C(now), or an ISO time C(YYYY-MM-DDTHH:MM[:SS]) in the controller's local time.
      - An existing reservation matches C(now) when it has already started (Slurm shows it C(ACTIVE), or its start is
        not after the controller's clock), so it is never pushed forward on a later run; one that starts later is
        moved to start now.
      - An ISO time must equal the start Slurm shows, to the second.
    type: str
    default: now
  duration:
    description:
      - How long the reservation lasts, a duration such as C(4h), C(90m), C(1d) or C(04:00:00) (a bare number is
        refused); whole minutes. Compared with the duration Slurm shows, so a running reservation keeps its end.
      - With O(state=present), O(duration) or O(end_time) is required.
    type: str
  end_time:
    description: When the reservation ends, an ISO time C(YYYY-MM-DDTHH:MM[:SS]) (the controller's local time).
    type: str
  flags:
    description:
      - Reservation flags, for example C([maint, ignore_jobs]), in any case; the whole list of flags.
      - Compared with the flags Slurm shows, in upper case, leaving out C(SPEC_NODES) (Slurm adds it itself when
        nodes are named) and C(IGNORE_JOBS) (it only matters when Slurm places the reservation, so it is sent at
        creation and never compared or updated). Other flags Slurm shows that the list lacks are removed with
        C(flags-=), missing ones added with C(flags+=).
      - Left out, the flags of an existing reservation are not managed.
    type: list
    elements: str
  users:
    description:
      - The users allowed to use the reservation; the whole list. Left out, not managed.
      - With O(state=present), O(users) or O(accounts) is required (Slurm needs one).
    type: list
    elements: str
  accounts:
    description: The accounts allowed to use the reservation; the whole list. Left out, not managed.
    type: list
    elements: str
  scontrol:
    description: The scontrol program, a name looked up on the PATH or an absolute path.
    type: str
    default: scontrol
attributes:
  check_mode:
    support: full
    description: Reads the reservations and returns the commands that would run and the reservation as it would
      be; runs nothing else.
  diff_mode:
    support: full
    description: Returns the reservation before and after (as dicts; empty when absent).
notes:
  - Runs where C(scontrol) reaches slurmctld as a Slurm administrator, for example delegated to the first host of
    the C(slurm_controller) group.
  - Slurm refuses a reservation on nodes that run jobs unless O(flags) has C(ignore_jobs) (or C(maint) with
    C(ignore_jobs)); the module then fails with scontrol's message.
"""

EXAMPLES = r"""
- name: Reserve the rack for four hours of maintenance from now, running jobs or not
  gpucluster.ops.slurm_reservation:
    name: maint-rack3
    nodes: ["rack3-gpu[01-16]"]
    start_time: now
    duration: 4h
    flags: [maint, ignore_jobs]
    users: [root]
  delegate_to: "{{ groups['slurm_controller'][0] }}"

- name: Book any two nodes of the gpu partition for a team's Saturday run
  gpucluster.ops.slurm_reservation:
    name: team-a-saturday
    node_count: 2
    partition: gpu
    start_time: "2026-03-07T08:00"
    end_time: "2026-03-07T20:00"
    accounts: [team-a]
  delegate_to: "{{ groups['slurm_controller'][0] }}"

- name: End the maintenance reservation
  gpucluster.ops.slurm_reservation:
    name: maint-rack3
    state: absent
  delegate_to: "{{ groups['slurm_controller'][0] }}"
"""

RETURN = r"""
action:
  description: What the run did (in check mode, would do).
  returned: always
  type: str
  choices: [created, updated, deleted, none]
  sample: created
commands:
  description: The scontrol commands run (in check mode, that would run), as argv lists.
  returned: always
  type: list
  elements: list
  sample: [[scontrol, create, reservation, reservationname=maint-rack3, starttime=now, duration=04:00:00,
            "nodes=rack3-gpu[01-16]", "flags=MAINT,IGNORE_JOBS", users=root]]
reservation:
  description:
    - The reservation as Slurm shows it after the run (in check mode, as it would be; C(nodes), C(node_list) are
      null where Slurm would choose the nodes); null when absent.
  returned: always
  type: dict
  contains:
    name:
      description: The name.
      type: str
    start_time:
      description: The start, C(YYYY-MM-DDTHH:MM:SS) in the controller's local time.
      type: str
    end_time:
      description: The end, as C(start_time).
      type: str
    duration_s:
      description: The duration in seconds (null for an unlimited one).
      type: int
    nodes:
      description: The nodes as a Slurm hostlist.
      type: str
    node_list:
      description: The nodes, one name each.
      type: list
      elements: str
    node_count:
      description: How many nodes.
      type: int
    flags:
      description: The flags Slurm shows, upper case (C(SPEC_NODES) included).
      type: list
      elements: str
    users:
      description: The users.
      type: list
      elements: str
    accounts:
      description: The accounts.
      type: list
      elements: str
    partition:
      description: The partition, or null.
      type: str
    state:
      description: C(ACTIVE) (it has begun) or C(INACTIVE).
      type: str
  sample: {name: maint-rack3, start_time: "2026-03-01T08:00:00", end_time: "2026-03-01T12:00:00", duration_s: 14400,
           nodes: "rack3-gpu[01-16]", node_list: [rack3-gpu01, "..."], node_count: 16,
           flags: [MAINT, IGNORE_JOBS, SPEC_NODES], users: [root], accounts: [], partition: null, state: ACTIVE}
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist, _slurm_reservation as resv
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SlurmOutputError, SpecError

ENVIRON = {"LC_ALL": "C", "LANG": "C"}
SHOWN = ("name", "start_time", "end_time", "duration_s", "nodes", "node_count", "flags", "users", "accounts",
         "partition", "state")


def _now():
    """The controller's local time (the module runs there), to the second."""
    return datetime.datetime.now().replace(microsecond=0)


def _scontrol(module, value):
    if "/" in value:
        if not (os.path.isfile(value) and os.access(value, os.X_OK)):
            module.fail_json(msg="scontrol is %r, which is not an executable file" % (value,))
        return value
    return module.get_bin_path(value, required=True)


def _read(module, scontrol, when):
    argv = [scontrol, "show", "reservation", "-o"]
    rc, out, err = module.run_command(argv, environ_update=ENVIRON)
    if rc != 0:
        module.fail_json(msg="could not read the reservations %s: scontrol show reservation -o exited %d: %s"
                         % (when, rc, (err or out).strip()))
    try:
        return resv.find(resv.parse_reservations(out), module.params["name"])
    except SlurmOutputError as error:
        module.fail_json(msg="could not read the reservations %s: %s" % (when, error))


def _shown(item):
    return dict((k, item[k]) for k in SHOWN) if item else {}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            nodes=dict(type="list", elements="str"),
            node_count=dict(type="int"),
            partition=dict(type="str"),
            start_time=dict(type="str", default="now"),
            duration=dict(type="str"),
            end_time=dict(type="str"),
            flags=dict(type="list", elements="str"),
            users=dict(type="list", elements="str"),
            accounts=dict(type="list", elements="str"),
            scontrol=dict(type="str", default="scontrol"),
        ),
        supports_check_mode=True,
    )
    now = _now()
    try:
        want = resv.check_spec(module.params, now)
    except SpecError as error:
        module.fail_json(msg=str(error))
    scontrol = _scontrol(module, module.params["scontrol"])

    current = _read(module, scontrol, "before any change")
    action, tail, after, _differ = resv.plan(current, want, now)
    commands = [[scontrol] + tail] if tail else []
    result = dict(changed=action != "none", action=action, commands=commands, reservation=after,
                  diff=dict(before=_shown(current), after=_shown(after)))
    if module.check_mode or not commands:
        module.exit_json(**result)

    rc, out, err = module.run_command(commands[0], environ_update=ENVIRON)
    said = (err or out).strip()
    back = _read(module, scontrol, "back after the change" if rc == 0
                 else "back after scontrol %s failed (%s)" % (tail[0], said))
    result.update(reservation=back, changed=_shown(back) != _shown(current))
    result["diff"]["after"] = _shown(back)
    if rc != 0:
        module.fail_json(msg="scontrol %s exited %d: %s" % (tail[0], rc, said), **result)
    problems = _taken(back, want)
    if problems:
        module.fail_json(msg="Slurm did not take the change of reservation %s: %s"
                         % (module.params["name"], problems), **result)
    module.exit_json(**result)


def _taken(back, want):
    """Why the read-back does not show the change ('' when it does)."""
    if want is None:
        return "it is still listed" if back is not None else ""
    if back is None:
        return "it is not listed"
    wanted = dict(want, nodes=want["node_list"] and _hostlist.fold(want["node_list"]))
    return "; ".join("%s is %r, not %r" % (key, back[key], wanted[key])
                     for key in resv.differences(back, want, _now()))


if __name__ == "__main__":
    main()
