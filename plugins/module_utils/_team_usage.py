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
  hour is missing there. With ``-T gres/gpu,gres/gpu:TYPE,...`` it gives the GPU-minutes of each GPU type too, which
  the cost is computed from: GPU-hours of each type x its price per GPU-hour. Usage that could not be read, or GPUs of
  a type without a price, make the cost unknown (None), never 0.

With off-peak pricing (the team model's ``budget_tres`` is ``billing``) the QOS counts the budget in billing minutes,
``budget_units_per_gpu_minute`` per GPU-minute at the full rate: the used budget is billing / that, in GPU-hours at
the full rate (an off-peak GPU-hour counts factor x 1), while the accounted GPU-hours (sreport) are real GPU-hours.
"""

from __future__ import absolute_import, division, print_function

import csv
import datetime
import io
import json
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


def parse_sreport_tres(text):
    """``sreport -n -P ... format=Accounts,Login,TresName,Used`` -> ``{account: {user: {tres: minutes}}}`` (user ''
    = the account's total; a line without a TRES name is gres/gpu)."""
    result = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4:
            raise UsageError("cannot read the sreport line %r" % line)
        account, login, tres, used = cells[0], cells[1], cells[2] or "gres/gpu", cells[-1]
        try:
            minutes = int(used)
        except ValueError:
            raise UsageError("sreport: used is %r in %r" % (used, line))
        result.setdefault(account, {}).setdefault(login, {})[tres] = minutes
    return result


def parse_sreport_users(text):
    """``sreport -n -P ... format=Accounts,Login,TresName,Used`` -> ``{account: {user: minutes}}`` (user '' = total)."""
    result = {}
    for account, logins in parse_sreport_tres(text).items():
        for login, tres in logins.items():
            if "gres/gpu" in tres:
                result.setdefault(account, {})[login] = tres["gres/gpu"]
    return result


def sreport_tres(gpu_types=()):
    """The TRES the usage report asks sreport for: all GPUs, and each GPU type (for the cost)."""
    return ",".join(["gres/gpu"] + ["gres/gpu:%s" % gpu for gpu in sorted(set(gpu_types)) if gpu])


def sreport_argv(sreport, start, accounts, gpu_types=()):
    """The sreport command of the usage report (slurm_team_usage and gpu-job quota): GPU-minutes per account, user
    and TRES since ``start`` (a datetime)."""
    return [sreport, "-n", "-P", "-t", "minutes", "cluster", "AccountUtilizationByUser",
            "start=" + start.strftime("%Y-%m-%dT%H:%M:%S"), "end=now", "-T", sreport_tres(gpu_types),
            "accounts=" + ",".join(accounts), "format=Accounts,Login,TresName,Used"]


# sacct's fields for a user's own GPU use (gpu-job usage): one allocation line per job (-X).
SACCT_USAGE_FIELDS = "JobID,Account,AllocTRES,Start,End"


def sacct_tres_minutes(text, since, now):
    """``sacct -n -P -X -o JobID,Account,AllocTRES,Start,End`` -> ``{account: {tres: minutes}}`` of the GPU TRES
    (``gres/gpu`` and ``gres/gpu:<type>``), each job's time cut to [since, now] (naive local datetimes, as sacct
    prints them); a job that never started counts nothing, a running one up to ``now``. The same ``{tres: minutes}``
    form as sreport's, so gpu_hours_by_type and cost_of price both alike."""
    result = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != 5:
            raise UsageError("cannot read the sacct line %r" % line)
        account, tres, start, end = cells[1].strip(), cells[2].strip(), cells[3].strip(), cells[4].strip()
        if start in ("", "Unknown", "None"):
            continue
        try:
            begin = max(datetime.datetime.strptime(start, "%Y-%m-%dT%H:%M:%S"), since)
            finish = now if end in ("", "Unknown", "None") else min(
                datetime.datetime.strptime(end, "%Y-%m-%dT%H:%M:%S"), now)
        except ValueError:
            raise UsageError("cannot read the times of the sacct line %r" % line)
        minutes = max((finish - begin).total_seconds(), 0) / 60.0
        entry = result.setdefault(account, {"gres/gpu": 0})
        for item in tres.split(","):
            name, _sep, count = item.partition("=")
            if name == "gres/gpu" or name.startswith("gres/gpu:"):
                if not count.isdigit():
                    raise UsageError("cannot read the GPU count %r of the sacct line %r" % (item, line))
                entry[name] = entry.get(name, 0) + int(count) * minutes
    return result


def gpu_hours_by_type(tres_minutes):
    """``{tres: minutes}`` of an account -> (all GPU-hours, {GPU type: GPU-hours}, ''  holding GPUs of no listed type)."""
    total = tres_minutes.get("gres/gpu", 0)
    typed = dict((tres[len("gres/gpu:"):], minutes) for tres, minutes in tres_minutes.items()
                 if tres.startswith("gres/gpu:"))
    rest = total - sum(typed.values())
    if rest > 0:
        typed[""] = rest
    return _hours(total), dict((gpu, _hours(minutes)) for gpu, minutes in typed.items() if minutes)


def cost_of(tres_minutes, prices):
    """(cost, why unknown): GPU-hours of each type x its price; None with the reason when usage or a price is unknown."""
    if tres_minutes is None:
        return None, "usage not read from slurmdbd"
    if not prices:
        return None, "no prices in inventory"
    total = tres_minutes.get("gres/gpu", 0)
    typed = dict((tres[len("gres/gpu:"):], minutes) for tres, minutes in tres_minutes.items()
                 if tres.startswith("gres/gpu:"))
    rest = total - sum(typed.values())
    if rest < 0:
        return None, "slurmdbd counts more typed GPU-minutes (%d) than GPU-minutes (%d)" % (sum(typed.values()), total)
    if rest:
        typed[""] = rest
    missing = sorted(gpu or "untyped" for gpu, minutes in typed.items() if minutes and gpu not in prices)
    if missing:
        return None, "no price for GPU type %s" % ", ".join(missing)
    return round(sum(minutes / 60.0 * prices[gpu] for gpu, minutes in typed.items() if minutes), 2), None


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


def team_report(teams, qos_usage, sreport_usage=None, since=None, tres_usage=None, prices=None, currency=None):
    """One entry per team: budget, used and remaining GPU-hours, GPUs in use, per-member GPU-hours.

    With ``tres_usage`` (``{account: {tres: minutes}}`` from parse_sreport_tres, the account totals) each entry has
    the accounted GPU-hours (all and per GPU type) and, with ``prices``, their cost; a team missing from
    ``tres_usage`` (not read) has them None. ``prices`` set means cost columns, even where the cost is unknown.
    """
    report = []
    for team in teams:
        name = team["name"]
        qos = qos_usage.get(name)
        entry = {"team": name, "period": team.get("period"), "since": (since or {}).get(name),
                 "budget_gpu_hours": team.get("gpu_hours"), "max_concurrent": team.get("max_concurrent"),
                 "used_gpu_hours": None, "remaining_gpu_hours": None, "used_percent": None, "gpus_in_use": None,
                 "limit_in_slurm": None, "members": [], "found": qos is not None}
        if tres_usage is not None or prices:
            minutes = None if tres_usage is None else tres_usage.get(name)
            hours, by_type = gpu_hours_by_type(minutes) if minutes is not None else (None, None)
            cost, unknown = cost_of(minutes, prices)
            entry.update({"accounted_gpu_hours": hours, "gpu_hours_by_type": by_type, "cost": cost,
                          "cost_unknown_because": unknown, "currency": currency})
        budget_tres = team.get("budget_tres") or "gres/gpu"
        units = team.get("budget_units_per_gpu_minute") or 1
        if qos is not None:
            limit_minutes, used_minutes = qos["grp_tres_mins"].get(budget_tres, (None, 0))
            if units != 1:
                limit_minutes = None if limit_minutes is None else limit_minutes // units
                used_minutes = used_minutes / float(units)
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


def _priced(report):
    return any("cost" in entry for entry in report)


def fixed_width(rows):
    """Rows of cells as text lines: the first column left-aligned, the others right-aligned, a rule under the first
    row (the header). The usage reports' tables (this one, _gpu_use's)."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for position, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(widths[i]) if i == 0 else str(cell).rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
        if position == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render_table(report):
    """The report as a fixed-width text table, one line per team, then one per member."""
    header = ("team", "period", "budget GPU-h", "used GPU-h", "used %", "left GPU-h", "GPUs now")
    priced = _priced(report)
    if priced:
        currency = next((e.get("currency") for e in report if e.get("currency")), "") or ""
        header = header + ("GPU-h since", ("cost %s" % currency).strip())
    rows = [header]
    for entry in report:
        row = (entry["team"], _cell(entry["period"]), _cell(entry["budget_gpu_hours"]),
               _cell(entry["used_gpu_hours"]), _cell(entry["used_percent"], "%"),
               _cell(entry["remaining_gpu_hours"]),
               "%s/%s" % (_cell(entry["gpus_in_use"]), _cell(entry["max_concurrent"])))
        if priced:
            row = row + (_cell(entry.get("accounted_gpu_hours")),
                         _cell(None if entry.get("cost") is None else "%.2f" % entry["cost"]))
        rows.append(row)
    lines = fixed_width(rows)
    members = [(e["team"], m) for e in report for m in e["members"]]
    if members:
        lines.append("")
        lines.append("members (GPU-hours accounted by slurmdbd since the period start; the last hour is not rolled up yet)")
        for team, member in members:
            lines.append("  %s/%s: %s" % (team, member["user"], _cell(member["gpu_hours"])))
    if priced:
        lines.append("")
        lines.append("cost: GPU-hours accounted by slurmdbd since the period start (the last hour is not rolled up yet) "
                     "x the price per GPU-hour of each GPU type")
        for entry in report:
            if entry.get("cost") is None:
                lines.append("  %s: cost unknown (%s)" % (entry["team"], entry.get("cost_unknown_because")))
    missing = [e["team"] for e in report if not e["found"]]
    if missing:
        lines.append("")
        lines.append("no QOS in slurmctld for: %s (run the team_quota role)" % ", ".join(missing))
    return lines


CSV_FIELDS = ("team", "period", "since", "budget_gpu_hours", "used_gpu_hours", "remaining_gpu_hours", "used_percent",
              "gpus_in_use", "max_concurrent", "accounted_gpu_hours", "cost", "currency", "found")


def render_csv(report, generated_at=None):
    """The report as CSV text, one row per team (empty cells: unknown), with ``generated_at`` as a column."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS + ("generated_at",))
    for entry in report:
        writer.writerow(["" if entry.get(field) is None else entry.get(field) for field in CSV_FIELDS]
                        + [generated_at or ""])
    return out.getvalue()


def render_json(report, generated_at=None):
    """The report as JSON text: ``{generated_at, teams}``."""
    return json.dumps({"generated_at": generated_at, "teams": report}, indent=2, sort_keys=True)
