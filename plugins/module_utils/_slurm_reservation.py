# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm reservations as the ``slurm_reservation`` module reconciles them: read, check, compare, command lines.

- Reading: ``parse_reservations`` reads ``scontrol show reservation -o`` (one reservation per line, Slurm 22.05 and
  24.11; ``No reservations in the system`` is none) into the module's read-back dicts. A line it cannot read raises
  ``SlurmOutputError``: a reservation is never guessed.
- Wanting: ``check_spec`` turns the module's options into a wanted reservation, or raises ``SpecError`` naming the
  option and the value.
- Comparing: ``differences`` lists what differs between a read reservation and the wanted one; ``plan`` gives the
  action, the scontrol arguments and the reservation as it would be afterwards.

Times are the controller's local time, as scontrol takes and prints them (``YYYY-MM-DDTHH:MM:SS``); ``now`` is that
time when the module runs. Standard library only.
"""

from __future__ import absolute_import, division, print_function

import datetime
import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import (
    PARTITION_RE, NAME_RE, USER_RE, SlurmOutputError, SpecError, format_time, parse_duration, parse_time)

__metaclass__ = type

NONE_LINE = "No reservations in the system"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
ISO_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M")
SLURM_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
# Flags scontrol create/update reservation takes (man scontrol, Slurm 22.05 to 24.11), without a value.
KNOWN_FLAGS = frozenset((
    "ANY_NODES", "DAILY", "FIRST_CORES", "FLEX", "HOURLY", "IGNORE_JOBS", "LICENSE_ONLY", "MAGNETIC", "MAINT",
    "NO_HOLD_JOBS_AFTER_END", "OVERLAP", "PART_NODES", "PURGE_COMP", "REPLACE", "REPLACE_DOWN", "STATIC_ALLOC",
    "TIME_FLOAT", "USER_DELETE", "WEEKDAY", "WEEKEND", "WEEKLY"))
# Flags Slurm sets itself (SPEC_NODES: the nodes were named) and IGNORE_JOBS, which only applies while Slurm places
# the reservation: neither is compared.
NOT_COMPARED = frozenset(("SPEC_NODES", "IGNORE_JOBS"))
# Recurring reservations: Slurm moves their start forward by one period each time one ends (the smallest period of
# the flags: WEEKDAY and WEEKEND skip days, so a day).
RECURRING = {"HOURLY": 3600, "DAILY": 86400, "WEEKDAY": 86400, "WEEKEND": 86400, "WEEKLY": 7 * 86400}
_NULL = ("", "(null)", "(NULL)")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


# ---- scontrol show reservation -o --------------------------------------------------------------------------------

def _fields(line):
    """``Key=value Key=value`` as scontrol -o prints it; a token without ``Key=`` continues the value before."""
    out = {}
    key = None
    for token in line.split(" "):
        head = token.split("=", 1)[0]
        if "=" in token and _KEY.match(head):
            key, out[head] = head, token.split("=", 1)[1]
        elif key is not None:
            out[key] += " " + token
    return out


def _list(value):
    return [] if value in _NULL else [v for v in value.split(",") if v]


def _value(value):
    return None if value in _NULL else value


def parse_reservations(text):
    """``scontrol show reservation -o`` -> [reservation dict] (see ``reservation``); raises SlurmOutputError."""
    found = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line == NONE_LINE:
            continue
        if not line.startswith("ReservationName="):
            raise SlurmOutputError("cannot read this line of scontrol show reservation -o: %r" % line)
        found.append(reservation(_fields(line)))
    return found


def reservation(fields):
    """The read-back dict of one reservation's scontrol fields (times as printed, the duration in seconds)."""
    for key in ("ReservationName", "StartTime", "EndTime", "State"):
        if not fields.get(key):
            raise SlurmOutputError("scontrol show reservation -o printed no %s for %r"
                                   % (key, fields.get("ReservationName")))
    duration = fields.get("Duration", "")
    try:
        duration_s = None if duration.upper() in ("UNLIMITED", "INFINITE") else parse_time(duration)
    except SlurmOutputError:
        raise SlurmOutputError("reservation %s: cannot read Duration=%s" % (fields["ReservationName"], duration))
    nodes = _value(fields.get("Nodes", "")) or ""
    try:
        node_list = _hostlist.expand(nodes) if nodes else []
    except _hostlist.HostlistError as error:
        raise SlurmOutputError("reservation %s: cannot read Nodes=%s: %s" % (fields["ReservationName"], nodes, error))
    count = fields.get("NodeCnt", "")
    return {
        "name": fields["ReservationName"],
        "start_time": fields["StartTime"],
        "end_time": fields["EndTime"],
        "duration_s": duration_s,
        "nodes": nodes,
        "node_list": node_list,
        "node_count": int(count) if count.isdigit() else len(node_list),
        "flags": [f.upper() for f in _list(fields.get("Flags", ""))],
        "users": _list(fields.get("Users", "")),
        "accounts": _list(fields.get("Accounts", "")),
        "partition": _value(fields.get("PartitionName", "")),
        "state": fields["State"].upper(),
    }


def find(reservations, name):
    """The reservation called ``name`` or None."""
    for item in reservations:
        if item["name"] == name:
            return item
    return None


# ---- the wanted reservation --------------------------------------------------------------------------------------

def slurm_time(value, where):
    """An ISO time ``YYYY-MM-DDTHH:MM[:SS]`` -> scontrol's ``YYYY-MM-DDTHH:MM:SS``; raises SpecError."""
    if isinstance(value, str):
        for fmt in ISO_FORMATS:
            try:
                return datetime.datetime.strptime(value.strip(), fmt).strftime(SLURM_TIME_FORMAT)
            except ValueError:
                pass
    raise SpecError("%s is %r, which is not a time: write 'now' or YYYY-MM-DDTHH:MM[:SS] (the controller's local "
                    "time), such as '2026-03-01T08:00'" % (where, value))


def now_text(now):
    """A datetime as scontrol prints times."""
    return now.strftime(SLURM_TIME_FORMAT)


def _names(value, where, pattern):
    if value is None:
        return None
    names = []
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise SpecError("%s: %r is not a valid name (lower-case letters, digits, '_', '.', '-')" % (where, item))
        if item in names:
            raise SpecError("%s is %r: it names %s twice" % (where, value, item))
        names.append(item)
    return sorted(names)


def _nodes(value):
    names = []
    for item in value:
        text = item.strip() if isinstance(item, str) else item
        problem = _hostlist.check(text) if isinstance(text, str) else "not a string"
        if problem:
            raise SpecError("nodes: %r is not a node name or hostlist: %s" % (item, problem))
        for name in _hostlist.expand(text):
            if name not in names:
                names.append(name)
    if not names:
        raise SpecError("nodes is %r: name at least one node" % (value,))
    return names


def _flags(value):
    if value is None:
        return None
    flags = []
    for item in value:
        flag = item.strip().upper() if isinstance(item, str) else item
        if flag not in KNOWN_FLAGS:
            raise SpecError("flags: %r is not a reservation flag this module sets (one of %s)"
                            % (item, ", ".join(sorted(KNOWN_FLAGS)).lower()))
        if flag not in flags:
            flags.append(flag)
    return flags


def check_spec(params, now):
    """The module's options -> the wanted reservation (None for state=absent); raises SpecError naming the option.

    ``now`` is the controller's local time (a naive datetime). The result has ``name``, ``start_time`` (``now`` or
    scontrol's time), ``end_time`` or ``duration_s`` (the other None), ``node_list`` or ``node_count``, and
    ``partition``, ``flags``, ``users``, ``accounts``: None where the option was left out (not managed).
    """
    name = params["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError("name is %r, which is not a reservation name (letters, digits, '_', '.', '-', at most 64)"
                        % (name,))
    if params["state"] == "absent":
        return None
    for first, second in (("nodes", "node_count"), ("duration", "end_time")):
        if params[first] is not None and params[second] is not None:
            raise SpecError("%s is %r and %s is %r: give one of them, not both"
                            % (first, params[first], second, params[second]))
    if params["node_count"] is not None and params["partition"] is None:
        raise SpecError("node_count is %r: it needs partition (the partition whose nodes Slurm chooses)"
                        % (params["node_count"],))
    missing = [o for o, given in (("nodes or node_count", params["nodes"] is not None or params["node_count"]
                                   is not None), ("duration or end_time", params["duration"] is not None
                                                  or params["end_time"] is not None),
                                  ("users or accounts", params["users"] is not None or params["accounts"] is not None))
               if not given]
    if missing:
        raise SpecError("state=present needs %s (reservation %s)" % (" and ".join(missing), name))
    want = dict(name=name, node_list=None, node_count=None, partition=None, duration_s=None, end_time=None)
    if params["nodes"] is not None:
        want["node_list"] = _nodes(params["nodes"])
    else:
        if not isinstance(params["node_count"], int) or params["node_count"] < 1:
            raise SpecError("node_count is %r: it must be 1 or more" % (params["node_count"],))
        want["node_count"] = params["node_count"]
    if params["partition"] is not None:
        if not params["partition"] or not PARTITION_RE.match(params["partition"]):
            raise SpecError("partition is %r, which is not a partition name" % (params["partition"],))
        want["partition"] = params["partition"]
    start = params["start_time"]
    start = "now" if isinstance(start, str) and start.strip().lower() == "now" else slurm_time(start, "start_time")
    want["start_time"] = start
    if params["duration"] is not None:
        seconds = parse_duration(params["duration"], "duration")
        if seconds <= 0 or seconds % 60:
            raise SpecError("duration is %r: a reservation lasts whole minutes, one or more (scontrol rounds seconds "
                            "up)" % (params["duration"],))
        want["duration_s"] = seconds
    else:
        end = slurm_time(params["end_time"], "end_time")
        begins = now_text(now) if start == "now" else start
        if end <= begins:
            raise SpecError("end_time is %r, which is not after the start (%s)" % (params["end_time"], begins))
        want["end_time"] = end
    want["flags"] = _flags(params["flags"])
    want["users"] = _names(params["users"], "users", USER_RE)
    want["accounts"] = _names(params["accounts"], "accounts", NAME_RE)
    if want["users"] == [] and not want["accounts"] or want["accounts"] == [] and not want["users"]:
        raise SpecError("users is %r and accounts is %r: Slurm needs at least one user or account"
                        % (params["users"], params["accounts"]))
    return want


# ---- comparing and planning --------------------------------------------------------------------------------------

def compared_flags(flags):
    """The flags that count when comparing: upper case, sorted, without those in NOT_COMPARED."""
    return sorted(set(f.upper() for f in flags) - NOT_COMPARED)


def started(current, now):
    """Whether a read reservation has begun: Slurm shows it ACTIVE or its start is not after ``now``."""
    return current["state"] == "ACTIVE" or current["start_time"] <= now_text(now)


def recurred(current, want):
    """Whether a recurring reservation's start is the wanted one moved on by whole periods, as Slurm moves it."""
    periods = [RECURRING[f] for f in (want["flags"] or current["flags"]) if f in RECURRING]
    if not periods or want["start_time"] == "now":
        return False
    shown = datetime.datetime.strptime(current["start_time"], SLURM_TIME_FORMAT)
    wanted = datetime.datetime.strptime(want["start_time"], SLURM_TIME_FORMAT)
    later = (shown - wanted).total_seconds()
    return later > 0 and later % min(periods) == 0


def differences(current, want, now):
    """The wanted fields (names of the read-back) that differ in the read reservation ``current``.

    A recurring reservation (flags DAILY, WEEKDAY, ...) whose start Slurm moved on by whole periods keeps its start.
    """
    differ = []
    if want["start_time"] == "now":
        if not started(current, now):
            differ.append("start_time")
    elif current["start_time"] != want["start_time"] and not recurred(current, want):
        differ.append("start_time")
    if want["duration_s"] is not None and current["duration_s"] != want["duration_s"]:
        differ.append("duration_s")
    if want["end_time"] is not None and current["end_time"] != want["end_time"] and not recurred(current, want):
        differ.append("end_time")
    if want["node_list"] is not None and set(current["node_list"]) != set(want["node_list"]):
        differ.append("nodes")
    if want["node_count"] is not None and current["node_count"] != want["node_count"]:
        differ.append("node_count")
    for key in ("partition",):
        if want[key] is not None and current[key] != want[key]:
            differ.append(key)
    if want["flags"] is not None and compared_flags(current["flags"]) != compared_flags(want["flags"]):
        differ.append("flags")
    for key in ("users", "accounts"):
        if want[key] is not None and sorted(current[key]) != want[key]:
            differ.append(key)
    return differ


def _time_args(want, current, differ):
    """starttime= and duration=/endtime= for a create (current None) or for an update that moves the times."""
    args = []
    if current is None or "start_time" in differ:
        args.append("starttime=" + want["start_time"])
    moved = current is None or set(differ) & set(("start_time", "duration_s", "end_time"))
    if moved and want["duration_s"] is not None:
        args.append("duration=" + format_time(want["duration_s"]))
    elif moved:
        args.append("endtime=" + want["end_time"])
    return args


def create_args(want):
    """The arguments after ``scontrol create reservation``."""
    args = ["reservationname=" + want["name"]] + _time_args(want, None, [])
    if want["node_list"] is not None:
        args.append("nodes=" + _hostlist.fold(want["node_list"]))
    else:
        args.append("nodecnt=%d" % want["node_count"])
    if want["partition"] is not None:
        args.append("partitionname=" + want["partition"])
    if want["flags"]:
        args.append("flags=" + ",".join(want["flags"]))
    for key in ("users", "accounts"):
        if want[key]:
            args.append("%s=%s" % (key, ",".join(want[key])))
    return args


def update_args(current, want, differ):
    """The arguments after ``scontrol update`` that make ``current`` the wanted reservation."""
    args = ["reservationname=" + want["name"]] + _time_args(want, current, differ)
    if "nodes" in differ:
        args.append("nodes=" + _hostlist.fold(want["node_list"]))
    if "node_count" in differ:
        args.append("nodecnt=%d" % want["node_count"])
    if "partition" in differ:
        args.append("partitionname=" + want["partition"])
    if "flags" in differ:
        have, wanted = compared_flags(current["flags"]), compared_flags(want["flags"])
        added = [f for f in wanted if f not in have]
        removed = [f for f in have if f not in wanted]
        if added:
            args.append("flags+=" + ",".join(added))
        if removed:
            args.append("flags-=" + ",".join(removed))
    for key in ("users", "accounts"):
        if key in differ:
            args.append("%s=%s" % (key, ",".join(want[key])))
    return args


def predict(current, want, now):
    """The reservation as Slurm should show it after the change (check mode's answer; None where Slurm chooses)."""
    blank = dict(name=want["name"], flags=[], users=[], accounts=[], partition=None, state="INACTIVE", nodes=None,
                 node_list=None, node_count=None)
    after = dict(current) if current else blank
    if want["start_time"] != "now":
        after["start_time"] = want["start_time"]
    elif current is None or not started(current, now):
        after["start_time"] = now_text(now)
    begins = datetime.datetime.strptime(after["start_time"], SLURM_TIME_FORMAT)
    if want["duration_s"] is not None:
        after["duration_s"] = want["duration_s"]
        after["end_time"] = now_text(begins + datetime.timedelta(seconds=want["duration_s"]))
    elif want["end_time"] is not None:
        after["end_time"] = want["end_time"]
        ends = datetime.datetime.strptime(want["end_time"], SLURM_TIME_FORMAT)
        after["duration_s"] = int((ends - begins).total_seconds())
    if current is None or want["start_time"] == "now" or want["start_time"] != current["start_time"]:
        after["state"] = "ACTIVE" if after["start_time"] <= now_text(now) else "INACTIVE"
    if want["node_list"] is not None:
        after["node_list"] = _hostlist.expand(_hostlist.fold(want["node_list"]))
        after["nodes"] = _hostlist.fold(want["node_list"])
        after["node_count"] = len(want["node_list"])
    elif want["node_count"] is not None and (current is None or current["node_count"] != want["node_count"]):
        after.update(nodes=None, node_list=None, node_count=want["node_count"])
    if want["partition"] is not None:
        after["partition"] = want["partition"]
    if want["flags"] is not None and current is None:
        after["flags"] = list(want["flags"])
    elif want["flags"] is not None:
        wanted = compared_flags(want["flags"])
        after["flags"] = [f for f in current["flags"] if f in NOT_COMPARED or f in wanted] + [
            f for f in wanted if f not in current["flags"]]
    if current is None and want["node_list"] is not None:
        after["flags"] = after["flags"] + ["SPEC_NODES"]
    for key in ("users", "accounts"):
        if want[key] is not None:
            after[key] = list(want[key])
    return after


def plan(current, want, now):
    """(action, scontrol argv tail, predicted reservation, differing fields) for ``current`` (or None) and ``want``.

    ``want`` None means absent. Actions: created, updated, deleted, none.
    """
    if want is None:
        if current is None:
            return "none", None, None, []
        return "deleted", ["delete", "reservationname=" + current["name"]], None, ["state"]
    if current is None:
        return "created", ["create", "reservation"] + create_args(want), predict(None, want, now), ["state"]
    differ = differences(current, want, now)
    if not differ:
        return "none", None, current, []
    return "updated", ["update"] + update_args(current, want, differ), predict(current, want, now), differ


# ---- reservations declared in inventory (the slurm role's slurm_reservations) -------------------------------------

# The names of gpu-job's bookings (bin/gpu-reserve): never the inventory's, so never pruned.
BOOKING_PREFIX = "book-"
INVENTORY_KEYS = ("name", "start_time", "duration", "end_time", "nodes", "node_count", "gpus", "partition", "flags",
                  "users", "accounts")


def inventory_specs(entries, cluster, prefix, now, variable="slurm_reservations"):
    """``slurm_reservations`` -> the slurm_reservation module's options per entry; raises SpecError naming the entry.

    ``cluster`` is the slurm_cluster_gpus filter's result (with partitions): ``gpus`` becomes whole nodes of the
    entry's partition (whose nodes must have the same number of GPUs). Every name starts with ``prefix``, which marks
    the reservations the inventory owns (the prune deletes only those).
    """
    if not isinstance(prefix, str) or not prefix or BOOKING_PREFIX.startswith(prefix[:len(BOOKING_PREFIX)]):
        raise SpecError("slurm_reservations_prefix is %r: it must not overlap %r, the names of gpu-job's bookings"
                        % (prefix, BOOKING_PREFIX))
    if not isinstance(entries, list):
        raise SpecError("%s is %r: a list of reservations" % (variable, entries))
    out, names = [], []
    for index, entry in enumerate(entries):
        where = "%s[%d]" % (variable, index)
        if not isinstance(entry, dict):
            raise SpecError("%s is %r: a mapping with name, start_time, ..." % (where, entry))
        where = "%s[name=%s]" % (variable, entry.get("name"))
        unknown = sorted(str(k) for k in entry if k not in INVENTORY_KEYS)
        if unknown:
            raise SpecError("%s: unknown key(s) %s (the keys are %s)"
                            % (where, ", ".join(unknown), ", ".join(INVENTORY_KEYS)))
        name = entry.get("name")
        if not isinstance(name, str) or not name.startswith(prefix):
            raise SpecError("%s: the name must start with %r (slurm_reservations_prefix), which marks the "
                            "reservations the inventory owns" % (where, prefix))
        if name in names:
            raise SpecError("%s: the name is declared twice" % where)
        names.append(name)
        params = dict((k, entry.get(k)) for k in INVENTORY_KEYS if k != "gpus")
        params.update(state="present", start_time=entry.get("start_time", "now"))
        if entry.get("gpus") is not None:
            params["node_count"] = _gpu_nodes(entry, cluster, where)
            if entry.get("nodes") is not None or entry.get("node_count") is not None:
                raise SpecError("%s: give one of nodes, node_count and gpus" % where)
        try:
            check_spec(params, now)
        except SpecError as error:
            raise SpecError("%s: %s" % (where, error))
        out.append(params)
    return out


def _gpu_nodes(entry, cluster, where):
    gpus, partition = entry["gpus"], entry.get("partition")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("%s: gpus is %r: a whole number, 1 or more" % (where, gpus))
    members = (cluster.get("partitions") or {}).get(partition)
    if not members:
        raise SpecError("%s: gpus needs partition, a partition with nodes (partition is %r)" % (where, partition))
    sizes = sorted(set(sum((cluster["nodes"].get(n) or {}).values()) for n in members))
    if len(sizes) != 1 or not sizes[0]:
        raise SpecError("%s: gpus is %d, but the nodes of partition %s have %s GPUs: Slurm reserves whole nodes here "
                        "(no GPU reservations, see the slurm_reservation module), so give node_count or nodes"
                        % (where, gpus, partition, " or ".join(map(str, sizes))))
    return -(-gpus // sizes[0])


def prunable(text, declared, prefix):
    """The reservations of ``scontrol show reservation -o`` the inventory owned and dropped: named with ``prefix``,
    not in ``declared``, and never a maintenance (MAINT) reservation."""
    return sorted(r["name"] for r in parse_reservations(text)
                  if r["name"].startswith(prefix) and r["name"] not in declared and "MAINT" not in r["flags"]
                  and not r["name"].startswith(BOOKING_PREFIX))
