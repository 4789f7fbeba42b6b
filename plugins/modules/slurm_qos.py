#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_qos
short_description: Manage Slurm QOS with sacctmgr, idempotently and with a read-back
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads every QOS with C(sacctmgr -n -P show qos format=...), compares the options given for each listed QOS,
    and runs C(sacctmgr -i add/modify/delete qos) only for what differs.
  - Options left out (or null) are not managed. Given options are authoritative; a C(grp_tres) mapping is the whole
    C(GrpTRES) limit (TRES not in it are cleared), C(flags) and C(preempt) are the whole lists.
  - It never trusts sacctmgr's exit code or messages (C(add) of an existing QOS exits 1, an identical C(modify)
    exits 0, C(GrpTRESMins=gres/gpu=abc) stores 0 and exits 0, unknown flags are dropped silently). After a change it
    reads every QOS again and fails, naming the QOS, option and both values, when Slurm stored something else.
  - Checks values itself before any change (numbers, flag names, TRES names against C(sacctmgr show tres), QOS named
    by C(preempt)).
  - New QOS are added first and their C(Preempt) set afterwards, so that QOS may preempt each other's new QOS.
options:
  qos:
    description: The QOS to manage.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: QOS name (lower case).
        type: str
        required: true
      state:
        description: C(absent) deletes the QOS.
        type: str
        choices: [present, absent]
        default: present
      description:
        description: C(Description) (no quotes, C(|) or line breaks). Slurm stores it in lower case; so does the module.
        type: str
      priority:
        description: C(Priority), 0 to 4294967294.
        type: int
      flags:
        description: C(Flags), for example C([DenyOnLimit, NoDecay]); an empty list clears them.
        type: list
        elements: str
      grp_tres:
        description: "C(GrpTRES) as a mapping, for example C({gres/gpu: 16}); an empty mapping clears it."
        type: dict
      grp_tres_mins:
        description: "C(GrpTRESMins) as a mapping, for example C({gres/gpu: 1200000})."
        type: dict
      preempt:
        description: QOS whose jobs this QOS's jobs may preempt; an empty list clears it.
        type: list
        elements: str
      preempt_mode:
        description: C(PreemptMode) of this QOS; C(cluster) follows slurm.conf.
        type: str
        choices: [cluster, cancel, requeue, suspend, "off"]
      preempt_exempt_time:
        description:
          - C(PreemptExemptTime), the minimum run time before a job of this QOS may be preempted.
          - Units (C(45s), C(30m), C(1h30m)) or a Slurm time (C(00:30:00)); 0 clears it (the global
            C(PreemptExemptTime) then applies). A bare number (C(90), C("90")) is refused, as sacctmgr would read minutes.
        type: raw
  prune:
    description:
      - Also delete QOS that are not listed and whose description starts with O(managed_prefix). The C(normal) QOS
        is never deleted.
    type: bool
    default: false
  managed_prefix:
    description: Description prefix that marks the QOS O(prune) may delete. Required with O(prune).
    type: str
attributes:
  check_mode:
    description: Reads the state and reports the changes and commands it would make; runs no change.
  diff_mode:
    description: Returns the managed options of each QOS that changes, before and after, one line per QOS.
extends_documentation_fragment:
  - gpucluster.ops.sacctmgr
"""

EXAMPLES = r"""
- name: Create the QOS of two teams
  gpucluster.ops.slurm_qos:
    qos:
      - name: development
        priority: 500
        flags: [DenyOnLimit, NoDecay]
        grp_tres: {gres/gpu: 8}
        grp_tres_mins: {gres/gpu: 300000}
        preempt_mode: requeue
        preempt_exempt_time: 30m
      - name: research
        priority: 1000
        flags: [DenyOnLimit, NoDecay]
        grp_tres: {gres/gpu: 16}
        grp_tres_mins: {gres/gpu: 1200000}
        preempt: [development]

- name: Remove a QOS
  gpucluster.ops.slurm_qos:
    qos:
      - name: oldteam
        state: absent

- name: Remove every QOS marked as ours that is not listed
  gpucluster.ops.slurm_qos:
    qos: "{{ my_qos_list }}"
    prune: true
    managed_prefix: "gpucluster.ops: "
"""

RETURN = r"""
commands:
  description: The sacctmgr commands run (in check mode, the ones that would run).
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i modify qos where name=research set GrpTRES=gres/gpu=24"]
changes:
  description: One entry per QOS added, modified or deleted, with C(before, after) values of each changed option.
  returned: always
  type: list
  elements: dict
  sample: [{action: modify, name: research, changes: {grp_tres: [{gres/gpu: 16}, {gres/gpu: 24}]}}]
qos:
  description: Every QOS as Slurm shows it after the run (before it, in check mode), by name.
  returned: always
  type: dict
  sample: {research: {priority: 1000, flags: [DenyOnLimit, NoDecay], grp_tres: {gres/gpu: 16}}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr import (
    Sacctmgr, SacctmgrError, apply, command_lines)
from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr_qos import (
    check_qos_spec, plan_qos, read_qos, verify_qos)
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError


def _check_references(sacct, specs, current):
    tracked = sacct.tres_names()
    wanted_names = set(s["name"] for s in specs if s["state"] == "present")
    problems = []
    for spec in specs:
        for field in ("grp_tres", "grp_tres_mins"):
            for name in sorted(spec.get(field) or {}):
                if name not in tracked:
                    problems.append("qos %s: %s names TRES %s, which this cluster does not track; add it to "
                                    "AccountingStorageTRES in slurm.conf (tracked: %s)"
                                    % (spec["name"], field, name, ",".join(sorted(tracked))))
        for other in spec.get("preempt") or []:
            if other not in wanted_names and other not in current:
                problems.append("qos %s: preempt names QOS %s, which neither exists nor is listed" % (spec["name"], other))
    return problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            qos=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                description=dict(type="str"),
                priority=dict(type="int"),
                flags=dict(type="list", elements="str"),
                grp_tres=dict(type="dict"),
                grp_tres_mins=dict(type="dict"),
                preempt=dict(type="list", elements="str"),
                preempt_mode=dict(type="str", choices=["cluster", "cancel", "requeue", "suspend", "off"]),
                preempt_exempt_time=dict(type="raw"),
            )),
            prune=dict(type="bool", default=False),
            managed_prefix=dict(type="str"),
        ),
        required_if=[("prune", True, ["managed_prefix"])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        specs = [check_qos_spec(spec, index) for index, spec in enumerate(params["qos"])]
    except SpecError as exc:
        module.fail_json(msg=str(exc))
    names = [s["name"] for s in specs]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        module.fail_json(msg="qos lists %s more than once" % ", ".join(duplicates))

    path = module.get_bin_path("sacctmgr", required=True)
    sacct = Sacctmgr(lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}), path)
    try:
        current = read_qos(sacct)
        problems = _check_references(sacct, specs, current)
        if problems:
            module.fail_json(msg="; ".join(problems))
        actions, diff = plan_qos(current, specs, prune=params["prune"], managed_prefix=params["managed_prefix"])
    except (SacctmgrError, SpecError) as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=bool(actions), commands=command_lines(actions), diff=diff,
                  changes=[dict(action=a["action"], name=a["name"], changes=a["changes"]) for a in actions],
                  qos=current)
    if not actions or module.check_mode:
        module.exit_json(**result)

    outputs = apply(sacct, actions)
    try:
        after = read_qos(sacct)
    except SacctmgrError as exc:
        module.fail_json(msg="could not read the QOS back after the changes: %s" % exc, outputs=outputs, **result)
    deleted = [a["name"] for a in actions if a["action"] == "delete"]
    problems = verify_qos(after, specs, deleted)
    result["qos"] = after
    if problems:
        said = "; ".join("%s -> rc %d: %s" % (o["command"], o["rc"], o["output"].replace("\n", " ")) for o in outputs)
        module.fail_json(msg="Slurm did not store what was asked: %s (sacctmgr said: %s)" % ("; ".join(problems), said),
                         outputs=outputs, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
