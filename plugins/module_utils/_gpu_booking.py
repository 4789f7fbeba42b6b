# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Booking GPU time (gpu-job reserve, bin/gpu-reserve): the policy from the inventory and the checks of a booking.

- ``build_policy`` turns the user_tools role's ``user_tools_booking`` into the ``booking`` entry of the gpu-job config
  (on the controller, through the gpu_booking_policy filter), or raises ``JobError`` naming the variable and value.
- ``check_request`` checks one booking against the policy, the teams and the reservations Slurm shows, and returns
  the reservation to create (the slurm_reservation module's wanted reservation and scontrol arguments), or raises
  ``JobError`` with the reason: nothing is booked then.
- ``check_cancel`` checks that a user may cancel a booking (its owner, or an admin of its team) and returns the
  scontrol arguments that delete it, or raises ``JobError``.

A booking is a Slurm reservation named ``<prefix><team>-<user>-<start>`` (prefix ``book-``) of whole nodes of the
booking partition (Slurm 22.05 cannot reserve GPUs of a node; see docs/gpu-job.md), for the team's account. Times
are the cluster's local time (the system's time zone, never the caller's TZ), as scontrol takes and prints them.
Durations are bounded (``MAX_SPAN_S``), so no date arithmetic overflows. Standard library only.
"""

from __future__ import absolute_import, division, print_function

import datetime
import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_job, _slurm_reservation as resv
from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_job import JobError
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError, format_time, parse_duration

__metaclass__ = type

PREFIX = resv.BOOKING_PREFIX
KEYS = ("partition", "max_gpus", "max_duration", "max_ahead", "max_share", "teams", "maintenance_windows")
TIME = resv.SLURM_TIME_FORMAT
TEAM_KEYS = ("max_gpus", "max_duration", "admins")
# The longest duration the policy may name (max_duration, max_ahead): ten years keeps every date in range.
MAX_SPAN_S = 3650 * 86400
STAMP_RE = re.compile(r"-[0-9]{8}T[0-9]{4}\Z")


def _duration(value, where, limit=MAX_SPAN_S, why=None):
    """Whole minutes, more than 0 and at most ``limit`` seconds (``why``: the refusal's end when it is more)."""
    try:
        seconds = parse_duration(value, where)
    except SpecError as error:
        raise JobError(str(error))
    if not seconds or seconds % 60:
        raise JobError("%s is %r: give whole minutes, more than 0, such as 4h or 90m" % (where, value))
    if seconds > limit:
        raise JobError("%s is %r: %s" % (where, value, why or "at most %s" % format_time(limit)))
    return seconds


def _time(value, where):
    try:
        return resv.slurm_time(value, where)
    except SpecError as error:
        raise JobError(str(error))


def _gpus(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobError("%s is %r: a whole number of GPUs, 1 or more" % (where, value))
    return value


def _admins(value, config, team, where):
    """A team's booking admins: members of the team, who may cancel any of its bookings."""
    if value is None:
        return []
    if not isinstance(value, list) or [u for u in value if not isinstance(u, str) or not u]:
        raise JobError("%s is %r: a list of user names, members of team %s" % (where, value, team))
    members = sorted(u for u, m in config["users"].items() if team in m["teams"])
    for user in value:
        if user not in members:
            raise JobError("%s: %r is not a member of team %s (members: %s)"
                           % (where, user, team, ", ".join(members) or "none"))
    return sorted(set(value))


def build_policy(booking, config, helper, variable="user_tools_booking"):
    """``user_tools_booking`` -> the config's ``booking`` entry (None when booking is off: the mapping is empty).

    ``config`` is the gpu-job config (its partitions and teams), ``helper`` the installed gpu-reserve program.
    """
    if booking in (None, {}):
        return None
    if not isinstance(booking, dict):
        raise JobError("%s is %r: a mapping (see the user_tools role's README), or {} for no booking"
                       % (variable, booking))
    unknown = sorted(str(k) for k in booking if k not in KEYS)
    if unknown:
        raise JobError("%s has unknown key(s) %s: the keys are %s" % (variable, ", ".join(unknown), ", ".join(KEYS)))
    for key in ("partition", "max_gpus", "max_duration", "max_ahead", "max_share"):
        if booking.get(key) is None:
            raise JobError("%s.%s is missing: booking needs %s" % (variable, key, ", ".join(KEYS[:5])))
    parts = dict((p["name"], p) for p in config["partitions"])
    name = booking["partition"]
    if name not in parts:
        raise JobError("%s.partition is %r: no such partition with GPU nodes (partitions: %s)"
                       % (variable, name, ", ".join(sorted(parts)) or "none"))
    sizes = sorted(set(t["gpus_per_node"] for t in parts[name]["node_types"]))
    if len(sizes) != 1:
        raise JobError("%s.partition is %r, whose nodes have %s GPUs: bookings are whole nodes, so the partition's "
                       "nodes must have the same number of GPUs" % (variable, name, " or ".join(map(str, sizes)) or "no"))
    share = booking["max_share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise JobError("%s.max_share is %r: the share of the partition's GPUs booked at once, above 0 and at most 1 "
                       "(such as 0.5)" % (variable, share))
    default = {"max_gpus": _gpus(booking["max_gpus"], variable + ".max_gpus"),
               "max_duration_s": _duration(booking["max_duration"], variable + ".max_duration")}
    overrides = booking.get("teams") or {}
    team_names = [t["name"] for t in config["teams"]]
    if not isinstance(overrides, dict):
        raise JobError("%s.teams is %r: a mapping of team to max_gpus, max_duration and admins" % (variable, overrides))
    teams = {}
    for team in sorted(overrides, key=str):
        where = "%s.teams.%s" % (variable, team)
        limits = overrides[team]
        if team not in team_names:
            raise JobError("%s: no such team (teams: %s)" % (where, ", ".join(sorted(team_names)) or "none"))
        if not isinstance(limits, dict) or [k for k in limits if k not in TEAM_KEYS]:
            raise JobError("%s is %r: a mapping of %s" % (where, limits, ", ".join(TEAM_KEYS)))
        teams[team] = {"max_gpus": _gpus(limits.get("max_gpus", default["max_gpus"]), where + ".max_gpus"),
                       "max_duration_s": _duration(limits.get("max_duration", booking["max_duration"]),
                                                   where + ".max_duration"),
                       "admins": _admins(limits.get("admins"), config, team, where + ".admins")}
    for team in team_names:
        teams.setdefault(team, dict(default, admins=[]))
    windows = []
    for index, window in enumerate(booking.get("maintenance_windows") or []):
        where = "%s.maintenance_windows[%d]" % (variable, index)
        if not isinstance(window, dict) or "start" not in window or "end" not in window:
            raise JobError("%s is %r: a mapping of start, end (YYYY-MM-DDTHH:MM) and reason" % (where, window))
        start, end = _time(window["start"], where + ".start"), _time(window["end"], where + ".end")
        if end <= start:
            raise JobError("%s: end %r is not after start %r" % (where, window["end"], window["start"]))
        windows.append({"start": start, "end": end, "reason": str(window.get("reason") or "maintenance")})
    gpn = sizes[0]
    nodes = sum(t["nodes"] for t in parts[name]["node_types"])
    return {"helper": helper, "prefix": PREFIX, "partition": name, "gpus_per_node": gpn, "nodes": nodes,
            "gpus": gpn * nodes, "max_share": float(share),
            "max_ahead_s": _duration(booking["max_ahead"], variable + ".max_ahead"),
            "teams": teams, "maintenance_windows": windows}


def policy(config):
    """The config's booking policy, or a JobError saying booking is off."""
    booking = config.get("booking")
    if not booking:
        raise JobError("booking is not enabled on this cluster (user_tools_booking is empty): ask the admins")
    return booking


def _parse(text):
    return datetime.datetime.strptime(text, TIME)


def _overlaps(item, start, end):
    return item["start_time"] < end and item["end_time"] > start


def _booking_gpus(item, booking):
    return item["node_count"] * booking["gpus_per_node"]


def bookings(booking, reservations):
    """The reservations that are bookings (named with the prefix)."""
    return [r for r in reservations if r["name"].startswith(booking["prefix"])]


def team_of(booking, item):
    """The team a booking is for (its account), or None."""
    return item["accounts"][0] if len(item["accounts"]) == 1 else None


def check_request(config, user, request, reservations, now):
    """Check a booking; return ``{name, gpus, nodes, team, start, end, args}`` (``args``: after ``scontrol``).

    ``request``: gpus, start, duration (strings as typed) and team (None: the user's default team);
    ``reservations``: _slurm_reservation.parse_reservations of scontrol's output; ``now``: a naive datetime.
    Raises ``JobError`` with the reason (nothing is booked).
    """
    booking = policy(config)
    team = _gpu_job.pick_team(config, user, request.get("team"))["name"]
    limits = booking["teams"].get(team)
    if limits is None:
        raise JobError("team %s may not book GPUs (rerun the user_tools role)" % team)
    gpus = _gpu_job.parse_gpus(request["gpus"])
    start = _time(request["start"], "--start")
    # Checked against the team's limit before any date arithmetic: an absurd duration is one line, not an overflow.
    seconds = _duration(request["duration"], "--duration", limits["max_duration_s"],
                        "team %s may book at most %s at a time" % (team, format_time(limits["max_duration_s"])))
    begins = _parse(start)
    if begins < now:
        raise JobError("--start is %s, which is in the past (now %s): book a time to come" % (start, now.strftime(TIME)))
    if (begins - now).total_seconds() > booking["max_ahead_s"]:
        raise JobError("--start is %s: bookings may start at most %s ahead (until %s)"
                       % (start, format_time(booking["max_ahead_s"]),
                          (now + datetime.timedelta(seconds=booking["max_ahead_s"])).strftime(TIME)))
    end = (begins + datetime.timedelta(seconds=seconds)).strftime(TIME)
    nodes = -(-gpus // booking["gpus_per_node"])
    booked = nodes * booking["gpus_per_node"]
    rounded = "" if booked == gpus else " (%d whole node(s) of %d GPUs: %d GPUs)" % (
        nodes, booking["gpus_per_node"], booked)
    overlapping = [r for r in bookings(booking, reservations) if _overlaps(r, start, end)]
    team_gpus = sum(_booking_gpus(r, booking) for r in overlapping if team_of(booking, r) == team)
    if team_gpus + booked > limits["max_gpus"]:
        raise JobError("--gpus is %d%s: team %s may book at most %d GPUs at once, and has %d booked then"
                       % (gpus, rounded, team, limits["max_gpus"], team_gpus))
    cap = int(booking["gpus"] * booking["max_share"])
    all_gpus = sum(_booking_gpus(r, booking) for r in overlapping)
    if all_gpus + booked > cap:
        raise JobError("--gpus is %d%s: at most %d of partition %s's %d GPUs may be booked at once, and %d are "
                       "booked then" % (gpus, rounded, cap, booking["partition"], booking["gpus"], all_gpus))
    for item in reservations:
        if "MAINT" in item["flags"] and _overlaps(item, start, end):
            raise JobError("%s to %s overlaps the maintenance reservation %s (%s to %s): book another time"
                           % (start, end, item["name"], item["start_time"], item["end_time"]))
    for window in booking["maintenance_windows"]:
        if _overlaps({"start_time": window["start"], "end_time": window["end"]}, start, end):
            raise JobError("%s to %s overlaps the maintenance window %s to %s (%s): book another time"
                           % (start, end, window["start"], window["end"], window["reason"]))
    name = "%s%s-%s-%s" % (booking["prefix"], team, user, begins.strftime("%Y%m%dT%H%M"))
    if resv.find(reservations, name):
        raise JobError("you have a booking for team %s at %s already (reservation %s)" % (team, start, name))
    params = dict(name=name, state="present", nodes=None, node_count=nodes, partition=booking["partition"],
                  start_time=start, duration="%dm" % (seconds // 60), end_time=None, flags=None, users=None,
                  accounts=[team])
    try:
        want = resv.check_spec(params, now)
    except SpecError as error:
        raise JobError("cannot book %s: %s" % (name, error))
    return {"name": name, "gpus": booked, "nodes": nodes, "team": team, "start": start, "end": end,
            "args": ["create", "reservation"] + resv.create_args(want)}


def owner_of(booking, item):
    """The user who booked ``item`` (from its name ``<prefix><team>-<user>-<YYYYmmddTHHMM>``), or None."""
    team = team_of(booking, item)
    head = "%s%s-" % (booking["prefix"], team)
    if team is None or not item["name"].startswith(head) or not STAMP_RE.search(item["name"]):
        return None
    return item["name"][len(head):-len("-YYYYmmddTHHMM")] or None


def check_cancel(config, user, name, reservations):
    """Check that ``user`` may cancel the booking ``name``; return ``{name, team, owner, start, end, args}``.

    The booking's owner may, and so may an admin of its team (the policy's ``teams.<team>.admins``). Raises
    ``JobError`` with the reason (nothing is cancelled).
    """
    booking = policy(config)
    if not isinstance(name, str) or not resv.NAME_PATTERN.match(name) or not name.startswith(booking["prefix"]):
        raise JobError("%r is not a booking: a booking's name starts with %s (gpu-job reservations lists them)"
                       % (name, booking["prefix"]))
    item = resv.find(reservations, name)
    if item is None:
        raise JobError("there is no booking %s (gpu-job reservations lists them)" % name)
    team, owner = team_of(booking, item), owner_of(booking, item)
    if team is None or owner is None:
        raise JobError("%s is not a booking gpu-job reserve made (account %s): ask the admins"
                       % (name, ",".join(item["accounts"]) or "none"))
    admins = (booking["teams"].get(team) or {}).get("admins") or []
    if user != owner and user not in admins:
        raise JobError("booking %s is %s's, for team %s: only %s or an admin of team %s (%s) may cancel it"
                       % (name, owner, team, owner, team, ", ".join(admins) or "none named"))
    return {"name": name, "team": team, "owner": owner, "start": item["start_time"], "end": item["end_time"],
            "args": ["delete", "reservationname=" + name]}


def listing(config, reservations):
    """Lines for gpu-job reservations: the bookings, then the maintenance reservations and windows."""
    booking = config.get("booking") or {"prefix": PREFIX, "gpus_per_node": 0, "maintenance_windows": []}
    lines = []
    for item in sorted(bookings(booking, reservations), key=lambda r: (r["start_time"], r["name"])):
        lines.append("%s  team %s  %s to %s  %d node(s) (%d GPUs) of %s  %s"
                     % (item["name"], team_of(booking, item) or ",".join(item["accounts"]), item["start_time"],
                        item["end_time"], item["node_count"], _booking_gpus(item, booking),
                        item["partition"] or "-", item["state"]))
    for item in reservations:
        if "MAINT" in item["flags"]:
            lines.append("maintenance %s  %s to %s  nodes %s"
                         % (item["name"], item["start_time"], item["end_time"], item["nodes"] or "-"))
    for window in booking["maintenance_windows"]:
        lines.append("maintenance window  %s to %s  %s" % (window["start"], window["end"], window["reason"]))
    return lines or ["no bookings"]
