# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU-hours used against each team's budget, from Slurm's own counters.

Standard library only. Sources, in order of authority:

- ``scontrol -o show assoc_mgr flags=qos``: each QOS's ``GrpTRESMins=...gres/gpu=LIMIT(USED)`` and
  ``GrpTRES=...gres/gpu=LIMIT(IN_USE)``. USED is exactly what slurmctld enforces the budget with (GPU-minutes since
  the last reset; NoDecay keeps it from decaying); it grows every PriorityCalcPeriod (5 minutes by default) while
  jobs run.
- ``sreport -n -P -t minutes cluster AccountUtilizationByUser -T gres/gpu``: GPU-minutes per account and user from
  the accounting database, for the per-member breakdown. slurmdbd rolls usage up once an hour, so the most recent
  hour is missing there.
"""

from __future__ import absolute_import, division, print_function

import datetime
import os
import re

__metaclass__ = type

_QOS_RE = re.compile(r"(?:^|\s)QOS=(?P<name>[^\s(]+)\((?P<id>[0-9]+)\)")
_FIELD_RE = r"(?:^|\s)%s=(?P<value>\S*)"


class UsageError(ValueError):
    """Slurm's output could not be read; the message quotes it."""


def parse_tres_usage(text):
    """``'cpu=N(1),gres/gpu=16(4)'`` -> ``{'cpu': (None, 1), 'gres/gpu': (16, 4)}`` (limit None when N)."""
    result = {}
    for item in (text or "").split(","):
        if not item:
            continue
        match = re.match(r"^(?P<name>[^=]+)=(?P<limit>N|[0-9]+)\((?P<used>[0-9]+(?:\.[0-9]+)?)\)$", item)
        if not match:
            raise UsageError("cannot read the TRES usage %r" % item)
        limit = None if match.group("limit") == "N" else int(match.group("limit"))
        used = float(match.group("used"))
        result[match.group("name")] = (limit, int(used) if used.is_integer() else used)
    return result


def parse_assoc_mgr_qos(text):
    """QOS records of ``scontrol -o show assoc_mgr flags=qos`` as ``{name: {usage_raw, grp_tres, grp_tres_mins}}``."""
    result = {}
    for line in text.splitlines():
        match = _QOS_RE.search(line)
        if not match:
            continue
        record = {"name": match.group("name")}
        for key, field in (("usage_raw", "UsageRaw"), ("grp_tres", "GrpTRES"), ("grp_tres_mins", "GrpTRESMins"),
                           ("grp_tres_run_mins", "GrpTRESRunMins")):
            found = re.search(_FIELD_RE % field, line)
            if found is None:
                raise UsageError("QOS %s: no %s in %r" % (record["name"], field, line[:200]))
            value = found.group("value")
            if key == "usage_raw":
                try:
                    record[key] = float(value)
                except ValueError:
                    raise UsageError("QOS %s: UsageRaw is %r" % (record["name"], value))
            else:
                record[key] = parse_tres_usage(value)
        result[record["name"]] = record
    if not result and text.strip():
        raise UsageError("no QOS records in the output of scontrol show assoc_mgr: %r" % text[:200])
    return result


def parse_sreport_users(text):
    """``sreport -n -P ... format=Accounts,Login,TresName,Used`` -> ``{account: {user: minutes}}`` (user '' = total)."""
    result = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4:
            raise UsageError("cannot read the sreport line %r" % line)
        account, login, tres, used = cells[0], cells[1], cells[2], cells[-1]
        if tres and tres != "gres/gpu":
            continue
        try:
            minutes = int(used)
        except ValueError:
            raise UsageError("sreport: used is %r in %r" % (used, line))
        result.setdefault(account, {})[login] = minutes
    return result


def period_start(period, now):
    """Start of the calendar period holding ``now`` (a naive local datetime): month, week (Monday) or day."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "month":
        return day.replace(day=1)
    if period == "week":
        return day - datetime.timedelta(days=day.weekday())
    if period == "day":
        return day
    raise UsageError("unknown period %r" % (period,))


def next_period_start(period, now):
    """Start of the calendar period after the one holding ``now``: when a timer-reset budget resets next."""
    start = period_start(period, now)
    if period == "month":
        return (start + datetime.timedelta(days=32)).replace(day=1)
    return start + datetime.timedelta(days=7 if period == "week" else 1)


def last_reset(state_dir, period, now):
    """When the team_quota role's reset timer last reset ``period`` budgets (its ``<period>.last-reset`` file in
    ``state_dir``), else the start of the current period."""
    path = os.path.join(state_dir, "%s.last-reset" % period)
    try:
        with open(path) as handle:
            text = handle.read().strip()
        return datetime.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except (IOError, OSError, ValueError):
        return period_start(period, now)


def _hours(minutes):
    return None if minutes is None else round(minutes / 60.0, 2)


def team_report(teams, qos_usage, sreport_usage=None, since=None):
    """One entry per team: budget, used and remaining GPU-hours, GPUs in use, per-member GPU-hours."""
    report = []
    for team in teams:
        name = team["name"]
        qos = qos_usage.get(name)
        entry = {"team": name, "period": team.get("period"), "since": (since or {}).get(name),
                 "budget_gpu_hours": team.get("gpu_hours"), "max_concurrent": team.get("max_concurrent"),
                 "used_gpu_hours": None, "remaining_gpu_hours": None, "used_percent": None, "gpus_in_use": None,
                 "limit_in_slurm": None, "members": [], "found": qos is not None}
        if qos is not None:
            limit_minutes, used_minutes = qos["grp_tres_mins"].get("gres/gpu", (None, 0))
            entry["used_gpu_hours"] = _hours(used_minutes)
            entry["limit_in_slurm"] = {"gpu_minutes": limit_minutes,
                                       "max_concurrent": qos["grp_tres"].get("gres/gpu", (None, 0))[0]}
            entry["gpus_in_use"] = qos["grp_tres"].get("gres/gpu", (None, 0))[1]
            if limit_minutes is not None:
                entry["remaining_gpu_hours"] = _hours(max(limit_minutes - used_minutes, 0))
                entry["used_percent"] = round(100.0 * used_minutes / limit_minutes, 1) if limit_minutes else None
        accounted = (sreport_usage or {}).get(name, {})
        for member in team.get("members") or []:
            user = member["name"] if isinstance(member, dict) else member
            entry["members"].append({"user": user, "gpu_hours": _hours(accounted.get(user, 0))})
        report.append(entry)
    return report


def _cell(value, suffix=""):
    if value is None:
        return "-"
    return "%s%s" % (value, suffix)


def render_table(report):
    """The report as a fixed-width text table, one line per team, then one per member."""
    header = ("team", "period", "budget GPU-h", "used GPU-h", "used %", "left GPU-h", "GPUs now")
    rows = [header]
    for entry in report:
        rows.append((entry["team"], _cell(entry["period"]), _cell(entry["budget_gpu_hours"]),
                     _cell(entry["used_gpu_hours"]), _cell(entry["used_percent"], "%"),
                     _cell(entry["remaining_gpu_hours"]),
                     "%s/%s" % (_cell(entry["gpus_in_use"]), _cell(entry["max_concurrent"]))))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = []
    for position, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(widths[i]) if i == 0 else str(cell).rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
        if position == 0:
            lines.append("  ".join("-" * w for w in widths))
    members = [(e["team"], m) for e in report for m in e["members"]]
    if members:
        lines.append("")
        lines.append("members (GPU-hours accounted by slurmdbd since the period start; the last hour is not rolled up yet)")
        for team, member in members:
            lines.append("  %s/%s: %s" % (team, member["user"], _cell(member["gpu_hours"])))
    missing = [e["team"] for e in report if not e["found"]]
    if missing:
        lines.append("")
        lines.append("no QOS in slurmctld for: %s (run the team_quota role)" % ", ".join(missing))
    return lines
