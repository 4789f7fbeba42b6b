# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm QOS through sacctmgr: check the wanted QOS, read them, plan the commands, verify what Slurm stored.

Standard library only; the runner and its rules are in ``_sacctmgr``, the values in ``_slurm_values``.
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr import SacctmgrError, differences, jsonable
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import (
    PRIORITY_MAX, SlurmOutputError, SpecError, check_int, check_name, check_name_list, check_text, check_tres,
    format_time, format_tres, parse_duration, parse_time, parse_tres)

__metaclass__ = type

# Flags of Slurm 22.05 to 24.11 (man sacctmgr, "Flags" of QOS); sacctmgr silently drops or coerces others.
QOS_FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
             "PartitionMinNodes", "PartitionTimeLimit", "Relative", "RequiresReservation", "UsageFactorSafe")
PREEMPT_MODES = ("cluster", "cancel", "requeue", "suspend", "off")
# QOS fields in the order of ``show qos format=...``; Description last, as it is the one that might hold text.
QOS_FORMAT = ("Name", "Priority", "Flags", "GrpTRES", "GrpTRESMins", "Preempt", "PreemptMode", "PreemptExemptTime",
              "Description")
QOS_FIELDS = ("description", "priority", "flags", "grp_tres", "grp_tres_mins", "preempt", "preempt_mode",
              "preempt_exempt_time")


def check_qos_spec(spec, index=0):
    """Validate one wanted QOS; return it normalised (unset options are None: left as Slurm has them)."""
    if not isinstance(spec, dict):
        raise SpecError("qos[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = check_name(spec.get("name"), "qos[%d].name" % index)
    where = "qos %s" % name
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state}
    # sacctmgr stores descriptions in lower case, whatever the quoting (seen on 22.05 and 24.11).
    out["description"] = None if spec.get("description") is None else check_text(spec["description"],
                                                                                 where + ": description").lower()
    out["priority"] = None if spec.get("priority") is None else check_int(spec["priority"], where + ": priority",
                                                                          maximum=PRIORITY_MAX)
    flags = spec.get("flags")
    if flags is not None:
        if isinstance(flags, str):
            flags = [f for f in flags.split(",") if f]
        if not isinstance(flags, (list, tuple)):
            raise SpecError("%s: flags is %r, which is not a list" % (where, flags))
        canonical = dict((f.lower(), f) for f in QOS_FLAGS)
        normal = []
        for flag in flags:
            if not isinstance(flag, str) or flag.lower() not in canonical:
                raise SpecError("%s: flags has %r, which is not a QOS flag (%s); sacctmgr would drop or change it "
                                "without an error" % (where, flag, ", ".join(QOS_FLAGS)))
            normal.append(canonical[flag.lower()])
        flags = sorted(set(normal))
    out["flags"] = flags
    out["grp_tres"] = check_tres(spec.get("grp_tres"), where + ": grp_tres")
    out["grp_tres_mins"] = check_tres(spec.get("grp_tres_mins"), where + ": grp_tres_mins")
    out["preempt"] = check_name_list(spec.get("preempt"), where + ": preempt")
    if out["preempt"] and name in out["preempt"]:
        raise SpecError("%s: preempt names the QOS itself" % where)
    mode = spec.get("preempt_mode")
    if mode is not None:
        mode = str(mode).lower()
        if mode not in PREEMPT_MODES:
            raise SpecError("%s: preempt_mode is %r: use one of %s"
                            % (where, spec.get("preempt_mode"), ", ".join(PREEMPT_MODES)))
    out["preempt_mode"] = mode
    out["preempt_exempt_time"] = parse_duration(spec.get("preempt_exempt_time"), where + ": preempt_exempt_time")
    return out


def read_qos(sacct):
    """Every QOS as ``{name: {field: value}}`` in the normalised form of ``check_qos_spec``."""
    result = {}
    for row in sacct.show("qos", QOS_FORMAT):
        try:
            result[row["Name"]] = {
                "name": row["Name"],
                "description": row["Description"],
                "priority": int(row["Priority"] or 0),
                "flags": sorted(f for f in row["Flags"].split(",") if f),
                "grp_tres": parse_tres(row["GrpTRES"]),
                "grp_tres_mins": parse_tres(row["GrpTRESMins"]),
                "preempt": sorted(p for p in row["Preempt"].split(",") if p),
                "preempt_mode": (row["PreemptMode"] or "cluster").lower(),
                "preempt_exempt_time": parse_time(row["PreemptExemptTime"]),
            }
        except SlurmOutputError as exc:
            raise SacctmgrError("sacctmgr show qos: qos %s: %s" % (row["Name"], exc))
    return result


def _qos_differences(current, wanted):
    """{field: (current value, wanted value)} for the fields that ``wanted`` manages and that differ."""
    return differences(current, wanted, QOS_FIELDS)


def _qos_assignments(diff, adding=False):
    args = []
    for field in QOS_FIELDS:
        if field not in diff:
            continue
        have, want = diff[field]
        if field == "description":
            args.append("Description=%s" % want)
        elif field == "priority":
            args.append("Priority=%d" % want)
        elif field == "flags":
            if want or not adding:
                args.append("Flags=%s" % (",".join(want) if want else "-1"))
        elif field in ("grp_tres", "grp_tres_mins"):
            key = "GrpTRES" if field == "grp_tres" else "GrpTRESMins"
            tres = dict(want)
            for name in (have or {}):
                if name not in tres:
                    tres[name] = None
            if tres and (not adding or want):
                args.append("%s=%s" % (key, format_tres(dict((k, v) for k, v in tres.items()
                                                             if not (adding and v is None)))))
        elif field == "preempt":
            args.append("Preempt=%s" % ",".join(want))
        elif field == "preempt_mode":
            args.append("PreemptMode=%s" % want)
        elif field == "preempt_exempt_time":
            if want or not adding:
                args.append("PreemptExemptTime=%s" % (format_time(want) if want else "-1"))
    return args


def qos_line(qos):
    """One QOS as a line for a diff, showing only the managed fields."""
    if qos is None:
        return None
    parts = []
    labels = (("priority", "Priority"), ("flags", "Flags"), ("grp_tres", "GrpTRES"), ("grp_tres_mins", "GrpTRESMins"),
              ("preempt", "Preempt"), ("preempt_mode", "PreemptMode"), ("preempt_exempt_time", "PreemptExemptTime"),
              ("description", "Description"))
    for field, label in labels:
        value = qos.get(field)
        if value is None:
            continue
        if field in ("grp_tres", "grp_tres_mins"):
            value = format_tres(value)
        elif field in ("flags", "preempt"):
            value = ",".join(value)
        elif field == "preempt_exempt_time":
            value = format_time(value) if value else ""
        parts.append("%s=%s" % (label, value))
    return "%s: %s" % (qos["name"], " ".join(parts))


def plan_qos(current, wanted, prune=False, managed_prefix=None):
    """Return (actions, diff) to bring ``current`` (read_qos) to ``wanted`` (checked specs).

    Actions are dicts ``{action: add|modify|delete, name, args, changes}`` in the order to run them: adds (without
    Preempt, which may name a QOS added later), then modifies, then deletes.
    """
    adds, modifies, deletes = [], [], []
    before, after = [], []
    listed = set()
    for want in wanted:
        name = want["name"]
        listed.add(name)
        have = current.get(name)
        if want["state"] == "absent":
            if have is not None:
                deletes.append({"action": "delete", "name": name, "args": ["delete", "qos", "where", "name=" + name],
                                "changes": {}})
                before.append(qos_line(_managed_view(have, want)))
            continue
        if have is None:
            first = dict(want, preempt=None)
            diff = _qos_differences(None, first)
            adds.append({"action": "add", "name": name, "args": ["add", "qos", name] + _qos_assignments(diff, True),
                         "changes": jsonable(diff)})
            if want.get("preempt"):
                modifies.append({"action": "modify", "name": name,
                                 "args": ["modify", "qos", "where", "name=" + name, "set",
                                          "Preempt=%s" % ",".join(want["preempt"])],
                                 "changes": {"preempt": [[], want["preempt"]]}})
            after.append(qos_line(want))
            continue
        diff = _qos_differences(have, want)
        if diff:
            modifies.append({"action": "modify", "name": name,
                             "args": ["modify", "qos", "where", "name=" + name, "set"] + _qos_assignments(diff),
                             "changes": jsonable(diff)})
            before.append(qos_line(_managed_view(have, want)))
            after.append(qos_line(want))
    if prune:
        if not managed_prefix:
            raise SpecError("prune needs managed_prefix: only QOS whose description starts with it are removed")
        for name in sorted(current):
            have = current[name]
            if name in listed or name == "normal" or not (have["description"] or "").startswith(managed_prefix):
                continue
            deletes.append({"action": "delete", "name": name, "args": ["delete", "qos", "where", "name=" + name],
                            "changes": {}})
            before.append(qos_line(have))
    diff = {"before": "".join(line + "\n" for line in before), "after": "".join(line + "\n" for line in after),
            "before_header": "sacctmgr show qos", "after_header": "sacctmgr show qos (wanted)"}
    return adds + modifies + deletes, diff


def _managed_view(have, want):
    view = {"name": have["name"]}
    for field in QOS_FIELDS:
        if want.get(field) is not None or want.get("state") == "absent":
            view[field] = have.get(field)
    return view


def verify_qos(current, wanted, deleted):
    """Problems where Slurm's state (read after the changes) differs from what was wanted."""
    problems = []
    for want in wanted:
        have = current.get(want["name"])
        if want["state"] == "absent":
            if have is not None:
                problems.append("qos %s: still exists after the delete" % want["name"])
            continue
        if have is None:
            problems.append("qos %s: does not exist after the add" % want["name"])
            continue
        for field, (stored, wanted_value) in sorted(_qos_differences(have, want).items()):
            problems.append("qos %s: Slurm stored %s=%r, wanted %r" % (want["name"], field, stored, wanted_value))
    for name in deleted:
        if name in current:
            problems.append("qos %s: still exists after the delete" % name)
    return problems
