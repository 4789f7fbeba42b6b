# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm accounting state through sacctmgr: read, compare, plan the commands, apply, read back.

Standard library only. sacctmgr's exit code and messages say nothing reliable about what changed ("Nothing new
added." exits 1, an identical "modify" exits 0, ``GrpTRESMins=gres/gpu=abc`` stores 0 and exits 0, an unknown flag
is dropped without a word), so every decision here comes from ``sacctmgr -n -P show ... format=...`` before and
after: ``plan_*`` compares the wanted objects with what Slurm shows and returns the commands that make them equal,
``verify_*`` compares again after the commands ran and lists whatever Slurm stored differently.

``run`` is any callable taking an argv list and returning ``(rc, stdout, stderr)`` (``module.run_command`` with
``LC_ALL=C`` in the modules, a fake sacctmgr in the unit tests).
"""

from __future__ import absolute_import, division, print_function

import re
import shlex

__metaclass__ = type

# Flags of Slurm 22.05 to 24.11 (man sacctmgr, "Flags" of QOS); sacctmgr silently drops or coerces others.
QOS_FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
             "PartitionMinNodes", "PartitionTimeLimit", "Relative", "RequiresReservation", "UsageFactorSafe")
PREEMPT_MODES = ("cluster", "cancel", "requeue", "suspend", "off")
PRIORITY_MAX = 4294967294
TRES_MAX = 2 ** 63 - 1
# QOS fields in the order of ``show qos format=...``; Description last, as it is the one that might hold text.
QOS_FORMAT = ("Name", "Priority", "Flags", "GrpTRES", "GrpTRESMins", "Preempt", "PreemptMode", "PreemptExemptTime",
              "Description")
QOS_FIELDS = ("description", "priority", "flags", "grp_tres", "grp_tres_mins", "preempt", "preempt_mode",
              "preempt_exempt_time")
ACCOUNT_FIELDS = ("description", "organization", "parent", "qos", "default_qos")
NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")
TRES_RE = re.compile(r"^(cpu|mem|node|billing|energy|vmem|pages|fs/disk|gres/[a-z0-9_]+(?::[a-z0-9_.-]+)?|"
                     r"license/[A-Za-z0-9_.-]+|bb/[A-Za-z0-9_.-]+|ic/[A-Za-z0-9_.-]+)$")
TEXT_RE = re.compile(r"^[^|'\"\n\r\\]{0,200}$")
_TIME_RE = re.compile(r"^(?:(?P<days>[0-9]+)-)?(?P<a>[0-9]+)(?::(?P<b>[0-9]+))?(?::(?P<c>[0-9]+))?$")
_UNIT_RE = re.compile(r"^(?:(?P<d>[0-9]+)d)?(?:(?P<h>[0-9]+)h)?(?:(?P<m>[0-9]+)m(?:in)?)?(?:(?P<s>[0-9]+)s)?$")


class SacctmgrError(Exception):
    """sacctmgr could not be read, refused a command, or stored something other than what was asked."""


class SpecError(ValueError):
    """A wanted object is invalid; the message names the object, the option and the value."""


# ---------------------------------------------------------------------------------------------------------------------
# Values


def parse_tres(text):
    """``'gres/gpu:h100=0,gres/gpu=8'`` -> ``{'gres/gpu:h100': 0, 'gres/gpu': 8}``."""
    result = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _sep, value = item.rpartition("=")
        if not name:
            raise SacctmgrError("cannot read TRES %r in %r" % (item, text))
        try:
            result[name] = int(value)
        except ValueError:
            raise SacctmgrError("cannot read TRES count %r in %r" % (item, text))
    return result


def format_tres(tres):
    """A TRES dict as sacctmgr takes it, sorted by name; ``None`` values (to clear) become ``-1``."""
    return ",".join("%s=%s" % (name, -1 if tres[name] is None else tres[name]) for name in sorted(tres))


def parse_time(text):
    """Seconds from what sacctmgr prints for a duration (``00:00:20``, ``2-00:00:00``, empty for unset)."""
    text = (text or "").strip()
    if not text:
        return 0
    match = _TIME_RE.match(text)
    if not match:
        raise SacctmgrError("cannot read the duration %r" % text)
    days = int(match.group("days") or 0)
    a, b, c = match.group("a"), match.group("b"), match.group("c")
    if match.group("days") is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
    elif c is not None:
        hours, minutes, seconds = int(a), int(b), int(c)
    elif b is not None:
        hours, minutes, seconds = 0, int(a), int(b)
    else:
        hours, minutes, seconds = 0, int(a), 0
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def format_time(seconds):
    """Seconds as sacctmgr prints and takes them: ``00:00:20``, ``2-00:00:00``."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = "%02d:%02d:%02d" % (hours, minutes, secs)
    return "%d-%s" % (days, text) if days else text


def duration_seconds(value, where):
    """A wanted duration: int seconds, units (``30m``, ``1h30m``) or a Slurm time with ``:`` (``00:30:00``).

    A bare number in a string is refused: sacctmgr reads it as minutes, the module's integers are seconds.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise SpecError("%s is %r: give seconds, '30m' or '00:30:00'" % (where, value))
    if isinstance(value, int):
        if value < 0:
            raise SpecError("%s is %r: a duration cannot be negative" % (where, value))
        return value
    text = str(value).strip().lower()
    if re.match(r"^-?[0-9]+$", text):
        raise SpecError("%s is %r: a number in a string is ambiguous (sacctmgr reads minutes); give an integer of "
                        "seconds, '%sm' or a Slurm time such as '00:30:00'" % (where, value, text))
    units = _UNIT_RE.match(text)
    if text and units and any(units.groupdict().values()):
        parts = dict((k, int(v or 0)) for k, v in units.groupdict().items())
        return ((parts["d"] * 24 + parts["h"]) * 60 + parts["m"]) * 60 + parts["s"]
    if _TIME_RE.match(text):
        seconds = parse_time(text)
        match = _TIME_RE.match(text)
        if (match.group("days") is not None or match.group("c") is not None) and (
                int(match.group("b") or 0) > 59 or int(match.group("c") or 0) > 59):
            raise SpecError("%s is %r: minutes and seconds run from 0 to 59" % (where, value))
        return seconds
    raise SpecError("%s is %r: give seconds, units such as '30m' or '1h30m', or a Slurm time such as '00:30:00'"
                    % (where, value))


def _int(value, where, minimum=0, maximum=TRES_MAX):
    if isinstance(value, bool):
        raise SpecError("%s is %r, which is not a whole number" % (where, value))
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value):
        number = int(value)
    else:
        raise SpecError("%s is %r, which is not a whole number" % (where, value))
    if number < minimum or number > maximum:
        raise SpecError("%s is %r: it must be from %d to %d" % (where, value, minimum, maximum))
    return number


def _text(value, where):
    if not isinstance(value, str) or not TEXT_RE.match(value):
        raise SpecError("%s is %r: up to 200 characters without quotes, '|', '\\' or line breaks" % (where, value))
    return value


def _name(value, where, pattern=NAME_RE):
    if not isinstance(value, str) or not pattern.match(value):
        raise SpecError("%s is %r, which is not a valid name (lower-case letters, digits, '_', '.', '-')"
                        % (where, value))
    return value


def _name_list(value, where):
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise SpecError("%s is %r, which is not a list of names" % (where, value))
    names = [_name(v, where) for v in value]
    if len(set(names)) != len(names):
        raise SpecError("%s is %r: it names something twice" % (where, value))
    return sorted(names)


def _tres(value, where):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError("%s is %r: give a mapping of TRES name to count, for example {gres/gpu: 16}" % (where, value))
    result = {}
    for name, count in value.items():
        if not isinstance(name, str) or not TRES_RE.match(name):
            raise SpecError("%s has TRES %r, which is not a TRES name such as cpu, mem or gres/gpu:a100" % (where, name))
        result[name] = _int(count, "%s[%s]" % (where, name))
    return result


# ---------------------------------------------------------------------------------------------------------------------
# sacctmgr


class Sacctmgr(object):
    """Runs sacctmgr; every read is ``-n -P show``, every change ``-i``."""

    def __init__(self, run, path="sacctmgr"):
        self._run = run
        self.path = path
        self.commands = []

    def show(self, entity, fields, where=()):
        argv = [self.path, "-n", "-P", "show", entity] + list(where) + ["format=" + ",".join(fields)]
        rc, out, err = self._run(argv)
        if rc != 0:
            raise SacctmgrError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()))
        rows = []
        for line in out.splitlines():
            if not line.strip():
                continue
            cells = line.split("|")
            if len(cells) > len(fields):      # only the last field (a description) may hold '|'
                cells = cells[:len(fields) - 1] + ["|".join(cells[len(fields) - 1:])]
            if len(cells) < len(fields):
                raise SacctmgrError("%s printed a line with %d of %d fields: %r"
                                    % (" ".join(argv), len(cells), len(fields), line))
            rows.append(dict(zip(fields, [c.strip() for c in cells])))
        return rows

    def change(self, args):
        """Run ``sacctmgr -i ARGS``; return (rc, output). The caller reads the result back, not the exit code."""
        argv = [self.path, "-i"] + list(args)
        self.commands.append(argv)
        rc, out, err = self._run(argv)
        return rc, "\n".join(t.strip() for t in (out, err) if t and t.strip())

    def clusters(self):
        return [row["Cluster"] for row in self.show("cluster", ["Cluster"]) if row["Cluster"]]

    def tres_names(self):
        names = set()
        for row in self.show("tres", ["Type", "Name"]):
            names.add("%s/%s" % (row["Type"], row["Name"]) if row["Name"] else row["Type"])
        return names

    def qos_names(self):
        return set(row["Name"] for row in self.show("qos", ["Name"]))


def resolve_cluster(sacct, cluster):
    """The cluster to work on: the given one (it must exist) or the only one slurmdbd knows."""
    known = sacct.clusters()
    if cluster:
        if cluster not in known:
            raise SacctmgrError("cluster %r is not registered in slurmdbd (known: %s)"
                                % (cluster, ", ".join(known) or "none"))
        return cluster
    if len(known) != 1:
        raise SacctmgrError("slurmdbd knows %d clusters (%s): name one with the cluster option"
                            % (len(known), ", ".join(known) or "none"))
    return known[0]


# ---------------------------------------------------------------------------------------------------------------------
# QOS


def check_qos_spec(spec, index=0):
    """Validate one wanted QOS; return it normalised (unset options are None: left as Slurm has them)."""
    if not isinstance(spec, dict):
        raise SpecError("qos[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = _name(spec.get("name"), "qos[%d].name" % index)
    where = "qos %s" % name
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state}
    # sacctmgr stores descriptions in lower case, whatever the quoting (seen on 22.05 and 24.11).
    out["description"] = None if spec.get("description") is None else _text(spec["description"],
                                                                            where + ": description").lower()
    out["priority"] = None if spec.get("priority") is None else _int(spec["priority"], where + ": priority",
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
    out["grp_tres"] = _tres(spec.get("grp_tres"), where + ": grp_tres")
    out["grp_tres_mins"] = _tres(spec.get("grp_tres_mins"), where + ": grp_tres_mins")
    out["preempt"] = _name_list(spec.get("preempt"), where + ": preempt")
    if out["preempt"] and name in out["preempt"]:
        raise SpecError("%s: preempt names the QOS itself" % where)
    mode = spec.get("preempt_mode")
    if mode is not None:
        mode = str(mode).lower()
        if mode not in PREEMPT_MODES:
            raise SpecError("%s: preempt_mode is %r: use one of %s"
                            % (where, spec.get("preempt_mode"), ", ".join(PREEMPT_MODES)))
    out["preempt_mode"] = mode
    out["preempt_exempt_time"] = duration_seconds(spec.get("preempt_exempt_time"), where + ": preempt_exempt_time")
    return out


def read_qos(sacct):
    """Every QOS as ``{name: {field: value}}`` in the normalised form of ``check_qos_spec``."""
    result = {}
    for row in sacct.show("qos", QOS_FORMAT):
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
    return result


def _qos_differences(current, wanted):
    """{field: (current value, wanted value)} for the fields that ``wanted`` manages and that differ."""
    diff = {}
    for field in QOS_FIELDS:
        want = wanted.get(field)
        if want is None:
            continue
        have = current.get(field) if current else None
        if have != want:
            diff[field] = (have, want)
    return diff


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
                         "changes": _jsonable(diff)})
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
                             "changes": _jsonable(diff)})
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


def _jsonable(diff):
    return dict((k, [v[0], v[1]]) for k, v in diff.items())


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


# ---------------------------------------------------------------------------------------------------------------------
# Accounts and users


def check_account_spec(spec, index=0):
    if not isinstance(spec, dict):
        raise SpecError("accounts[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = _name(spec.get("name"), "accounts[%d].name" % index)
    where = "account %s" % name
    if name == "root":
        raise SpecError("%s: the root account is Slurm's own and is not managed here" % where)
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state}
    for field in ("description", "organization"):
        # sacctmgr stores both in lower case, whatever the quoting (seen on 22.05 and 24.11).
        out[field] = None if spec.get(field) is None else _text(spec[field], "%s: %s" % (where, field)).lower()
    out["parent"] = _name(spec.get("parent") or "root", where + ": parent")
    out["qos"] = _name_list(spec.get("qos"), where + ": qos")
    default_qos = spec.get("default_qos")
    out["default_qos"] = None if default_qos is None else _name(default_qos, where + ": default_qos")
    if out["default_qos"] and out["qos"] is not None and out["default_qos"] not in out["qos"]:
        raise SpecError("%s: default_qos %s is not in its qos list %s" % (where, out["default_qos"], out["qos"]))
    if out["parent"] == name:
        raise SpecError("%s: parent is the account itself" % where)
    return out


def check_user_spec(spec, index=0):
    if not isinstance(spec, dict):
        raise SpecError("users[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = _name(spec.get("name"), "users[%d].name" % index, USER_RE)
    where = "user %s" % name
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state, "default_account": None, "associations": []}
    if state == "absent":
        return out
    associations = spec.get("associations")
    if not isinstance(associations, (list, tuple)) or not associations:
        raise SpecError("%s: associations is %r: give a list of {account, partition}" % (where, associations))
    seen = set()
    for position, assoc in enumerate(associations):
        if isinstance(assoc, str):
            assoc = {"account": assoc}
        if not isinstance(assoc, dict):
            raise SpecError("%s: associations[%d] is %r: give {account, partition}" % (where, position, assoc))
        account = _name(assoc.get("account"), "%s: associations[%d].account" % (where, position))
        partition = assoc.get("partition") or ""
        if not isinstance(partition, str) or not PARTITION_RE.match(partition):
            raise SpecError("%s: associations[%d].partition is %r, which is not a partition name"
                            % (where, position, partition))
        key = (account, partition)
        if key in seen:
            raise SpecError("%s: associations lists %s%s twice" % (where, account, "/" + partition if partition else ""))
        seen.add(key)
        out["associations"].append({"account": account, "partition": partition})
    out["associations"].sort(key=lambda a: (a["account"], a["partition"]))
    default = spec.get("default_account") or out["associations"][0]["account"]
    out["default_account"] = _name(default, where + ": default_account")
    if default not in set(a["account"] for a in out["associations"]):
        raise SpecError("%s: default_account %s is not one of its associations' accounts" % (where, default))
    return out


def read_accounts(sacct, cluster):
    """Accounts, user associations and users of ``cluster`` as ``(accounts, users)``.

    ``accounts``: ``{name: {description, organization, parent, qos, default_qos, on_cluster}}`` (records without an
    association on this cluster have ``on_cluster`` False). ``users``: ``{name: {default_account, associations}}``,
    associations being ``{(account, partition)}``.
    """
    accounts = {}
    for row in sacct.show("account", ["Account", "Description", "Organization"]):
        accounts[row["Account"]] = {"name": row["Account"], "description": row["Description"],
                                    "organization": row["Organization"], "parent": None, "qos": None,
                                    "default_qos": None, "on_cluster": False}
    users = {}
    rows = sacct.show("assoc", ["Account", "ParentName", "User", "Partition", "QOS", "DefaultQOS"],
                      ["where", "cluster=" + cluster])
    for row in rows:
        if not row["User"]:
            account = accounts.setdefault(row["Account"], {"name": row["Account"], "description": "",
                                                           "organization": ""})
            account.update({"parent": row["ParentName"] or "root", "on_cluster": True,
                            "qos": sorted(q for q in row["QOS"].split(",") if q),
                            "default_qos": row["DefaultQOS"] or ""})
        else:
            user = users.setdefault(row["User"], {"name": row["User"], "default_account": "", "associations": set()})
            user["associations"].add((row["Account"], row["Partition"]))
    for row in sacct.show("user", ["User", "DefaultAccount"]):
        if row["User"] in users:
            users[row["User"]]["default_account"] = row["DefaultAccount"]
        else:
            users[row["User"]] = {"name": row["User"], "default_account": row["DefaultAccount"], "associations": set()}
    return accounts, users


def _account_differences(have, want):
    diff = {}
    for field in ACCOUNT_FIELDS:
        value = want.get(field)
        if value is None:
            continue
        current = have.get(field) if have else None
        if current != value:
            diff[field] = (current, value)
    return diff


def _account_assignments(diff):
    labels = {"description": "Description", "organization": "Organization", "parent": "Parent", "qos": "QOS",
              "default_qos": "DefaultQOS"}
    args = []
    for field in ACCOUNT_FIELDS:
        if field in diff:
            value = diff[field][1]
            args.append("%s=%s" % (labels[field], ",".join(value) if isinstance(value, list) else value))
    return args


def account_line(account):
    if account is None:
        return None
    parts = []
    for field, label in (("parent", "Parent"), ("qos", "QOS"), ("default_qos", "DefaultQOS"),
                         ("organization", "Organization"), ("description", "Description")):
        value = account.get(field)
        if value is not None:
            parts.append("%s=%s" % (label, ",".join(value) if isinstance(value, list) else value))
    return "account %s: %s" % (account["name"], " ".join(parts))


def _assoc_text(associations):
    return ",".join("%s/%s" % (a, p) if p else a for a, p in sorted(associations))


def user_line(name, default_account, associations):
    return "user %s: DefaultAccount=%s Associations=%s" % (name, default_account or "", _assoc_text(associations))


def _user_delete(name, account, partition, cluster):
    return ["delete", "user", "where", "name=" + name, "account=" + account, "cluster=" + cluster,
            "partition=" + partition]


def plan_accounts(current_accounts, current_users, accounts, users, cluster, prune=False, managed_organization=None,
                  existing_qos=None):
    """Return (actions, diff) to bring accounts and users of ``cluster`` to the wanted ones.

    Users' associations are managed within the managed accounts: those listed, and with ``prune`` the accounts whose
    Organization is ``managed_organization``. Associations of a listed user under other accounts are left alone.
    Order: add accounts, modify accounts, add user associations, set default accounts, delete associations, set
    default accounts that a delete emptied, delete accounts (so that no user is left without its default account).
    """
    if prune and not managed_organization:
        raise SpecError("prune needs managed_organization: only accounts with that organization are removed")
    listed_accounts = dict((a["name"], a) for a in accounts)
    present_accounts = set(n for n, a in listed_accounts.items() if a["state"] == "present")
    absent_accounts = set(n for n, a in listed_accounts.items() if a["state"] == "absent"
                          and current_accounts.get(n, {}).get("on_cluster"))
    pruned_accounts = set()
    if prune:
        for name, have in current_accounts.items():
            if (name not in listed_accounts and have.get("on_cluster") and name != "root"
                    and have.get("organization") == managed_organization):
                pruned_accounts.add(name)
    managed = present_accounts | absent_accounts | pruned_accounts
    errors = []
    for want in accounts:
        if want["state"] != "present":
            continue
        if want["parent"] != "root" and want["parent"] not in present_accounts and not (
                current_accounts.get(want["parent"], {}).get("on_cluster")):
            errors.append("account %s: parent %s does not exist" % (want["name"], want["parent"]))
        if existing_qos is not None:
            for qos in (want["qos"] or []) + ([want["default_qos"]] if want["default_qos"] else []):
                if qos not in existing_qos:
                    errors.append("account %s: QOS %s does not exist (known: %s)"
                                  % (want["name"], qos, ", ".join(sorted(existing_qos))))
    listed_users = dict((u["name"], u) for u in users)
    for want in users:
        for assoc in want["associations"]:
            account = assoc["account"]
            if account in absent_accounts or (account in listed_accounts
                                              and listed_accounts[account]["state"] == "absent"):
                errors.append("user %s: association with account %s, which is to be absent" % (want["name"], account))
            elif account not in present_accounts and not current_accounts.get(account, {}).get("on_cluster"):
                errors.append("user %s: account %s does not exist on cluster %s and is not listed"
                              % (want["name"], account, cluster))
    if errors:
        raise SpecError("; ".join(sorted(set(errors))))

    add_accounts, modify_accounts, add_assocs, defaults, delete_assocs, delete_accounts = [], [], [], [], [], []
    defaults_again = []
    before, after = [], []
    # Parents before children.
    for want in _parents_first([a for a in accounts if a["state"] == "present"]):
        have = current_accounts.get(want["name"])
        if have is None or not have.get("on_cluster"):
            diff = _account_differences(None, want)
            add_accounts.append({"action": "add", "name": "account " + want["name"],
                                 "args": ["add", "account", want["name"], "cluster=" + cluster]
                                 + _account_assignments(diff), "changes": _jsonable(diff)})
            after.append(account_line(want))
            continue
        diff = _account_differences(have, want)
        if diff:
            modify_accounts.append({"action": "modify", "name": "account " + want["name"],
                                    "args": ["modify", "account", "where", "name=" + want["name"],
                                             "cluster=" + cluster, "set"] + _account_assignments(diff),
                                    "changes": _jsonable(diff)})
            before.append(account_line(dict((f, have.get(f)) for f in ("name",) + ACCOUNT_FIELDS
                                            if f == "name" or want.get(f) is not None)))
            after.append(account_line(want))

    for name in sorted(set(current_users) | set(listed_users)):
        have = current_users.get(name, {"default_account": "", "associations": set()})
        have_managed = set(a for a in have["associations"] if a[0] in managed)
        want = listed_users.get(name)
        if want is not None and want["state"] == "present":
            wanted_assocs = set((a["account"], a["partition"]) for a in want["associations"])
            wanted_managed = wanted_assocs | (have["associations"] - have_managed - wanted_assocs)
            missing = sorted(wanted_assocs - have["associations"])
            extra = sorted(a for a in have_managed if a not in wanted_assocs)
            is_new = not have["associations"]
            if missing and is_new:
                # A user without associations needs its default account in the same command.
                first = [a for a in missing if a[0] == want["default_account"]][0]
                missing.remove(first)
                missing.insert(0, first)
            for position, (account, partition) in enumerate(missing):
                args = ["add", "user", name, "account=" + account, "cluster=" + cluster]
                if partition:
                    args.append("partition=" + partition)
                if position == 0 and is_new:
                    args.append("defaultaccount=" + want["default_account"])
                add_assocs.append({"action": "add", "name": "user %s %s" % (name, _assoc_text([(account, partition)])),
                                   "args": args, "changes": {}})
            default_changes = have["default_account"] != want["default_account"] and not (is_new and missing)
            if default_changes:
                defaults.append({"action": "modify", "name": "user " + name,
                                 "args": ["modify", "user", "where", "name=" + name, "set",
                                          "defaultaccount=" + want["default_account"]],
                                 "changes": {"default_account": [have["default_account"], want["default_account"]]}})
            for account, partition in extra:
                delete_assocs.append({"action": "delete", "name": "user %s %s" % (name, _assoc_text([(account,
                                                                                                      partition)])),
                                      "args": _user_delete(name, account, partition, cluster), "changes": {}})
            if any(account == want["default_account"] for account, _partition in extra):
                # sacctmgr empties the default account when any association under it is deleted, even when
                # another one (for another partition) stays: set it again afterwards.
                defaults_again.append({"action": "modify", "name": "user " + name,
                                       "args": ["modify", "user", "where", "name=" + name, "set",
                                                "defaultaccount=" + want["default_account"]],
                                       "changes": {"default_account": ["", want["default_account"]]}})
            if missing or extra or have["default_account"] != want["default_account"]:
                before.append(user_line(name, have["default_account"], have["associations"])
                              if have["associations"] else None)
                after.append(user_line(name, want["default_account"], wanted_managed))
            continue
        # Absent, or not listed: its associations under managed accounts go (without prune: only under accounts
        # that are to be deleted, so that no user keeps an association with a deleted account).
        if want is not None or prune:
            removable = have_managed
        else:
            removable = set(a for a in have["associations"] if a[0] in absent_accounts | pruned_accounts)
        if not removable:
            continue
        for account, partition in sorted(removable):
            delete_assocs.append({"action": "delete", "name": "user %s %s" % (name, _assoc_text([(account, partition)])),
                                  "args": _user_delete(name, account, partition, cluster), "changes": {}})
        before.append(user_line(name, have["default_account"], have["associations"]))
        remaining = have["associations"] - removable
        after.append(user_line(name, have["default_account"], remaining) if remaining else None)
    for name in sorted(absent_accounts | pruned_accounts):
        delete_accounts.append({"action": "delete", "name": "account " + name,
                                "args": ["delete", "account", "where", "name=" + name, "cluster=" + cluster],
                                "changes": {}})
        before.append(account_line(current_accounts[name]))
    actions = add_accounts + modify_accounts + add_assocs + defaults + delete_assocs + defaults_again + delete_accounts
    diff = {"before": "".join(line + "\n" for line in before if line),
            "after": "".join(line + "\n" for line in after if line),
            "before_header": "sacctmgr show account/assoc/user (cluster %s)" % cluster,
            "after_header": "sacctmgr show account/assoc/user (cluster %s, wanted)" % cluster}
    return actions, diff, managed


def _parents_first(accounts):
    names = set(a["name"] for a in accounts)
    ordered, placed = [], set()
    pending = sorted(accounts, key=lambda a: a["name"])
    while pending:
        progress = False
        for account in list(pending):
            if account["parent"] not in names or account["parent"] in placed:
                ordered.append(account)
                placed.add(account["name"])
                pending.remove(account)
                progress = True
        if not progress:
            raise SpecError("accounts %s name each other as parents" % ", ".join(a["name"] for a in pending))
    return ordered


def verify_accounts(current_accounts, current_users, accounts, users, managed, prune):
    """Problems where Slurm's state after the changes differs from what was wanted."""
    problems = []
    for want in accounts:
        have = current_accounts.get(want["name"])
        if want["state"] == "absent":
            if have is not None and have.get("on_cluster"):
                problems.append("account %s: still exists after the delete" % want["name"])
            continue
        if have is None or not have.get("on_cluster"):
            problems.append("account %s: does not exist after the add" % want["name"])
            continue
        for field, (stored, wanted_value) in sorted(_account_differences(have, want).items()):
            problems.append("account %s: Slurm stored %s=%r, wanted %r" % (want["name"], field, stored, wanted_value))
    listed = set()
    for want in users:
        listed.add(want["name"])
        have = current_users.get(want["name"], {"default_account": "", "associations": set()})
        have_managed = set(a for a in have["associations"] if a[0] in managed)
        if want["state"] == "absent":
            if have_managed:
                problems.append("user %s: still has associations %s" % (want["name"], _assoc_text(have_managed)))
            continue
        wanted_assocs = set((a["account"], a["partition"]) for a in want["associations"])
        if not wanted_assocs <= have["associations"] or (have_managed - wanted_assocs):
            problems.append("user %s: Slurm has associations %s, wanted %s"
                            % (want["name"], _assoc_text(have_managed | (wanted_assocs & have["associations"])),
                               _assoc_text(wanted_assocs)))
        if have["default_account"] != want["default_account"]:
            problems.append("user %s: Slurm stored default account %r, wanted %r"
                            % (want["name"], have["default_account"], want["default_account"]))
    if prune:
        for name, have in current_users.items():
            if name not in listed and set(a for a in have["associations"] if a[0] in managed):
                problems.append("user %s: still has associations under managed accounts after the prune" % name)
    return problems


def apply(sacct, actions):
    """Run the planned commands in order; return their outputs (for error messages, never for decisions)."""
    outputs = []
    for action in actions:
        rc, output = sacct.change(action["args"])
        outputs.append({"command": command_line(action), "rc": rc, "output": output})
    return outputs


def command_line(action):
    """The command of one action as a shell would show it."""
    return " ".join(shlex.quote(arg) for arg in ["sacctmgr", "-i"] + action["args"])


def command_lines(actions):
    return [command_line(action) for action in actions]
