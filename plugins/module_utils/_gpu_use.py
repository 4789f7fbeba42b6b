# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How busy the GPUs each team's jobs held were, from Prometheus: one model for ``gpu-job usage --team`` and
``playbooks/team_usage.yml`` (the team_gpu_use module).

The monitoring role's recording rules (group ``gpucluster-jobs``) count, at each evaluation, each account's GPUs held
by Slurm jobs (``gpucluster:account_gpus_allocated``, from the Slurm collector's ``slurm_job_gpu_info``), those of
them at or above the busy threshold (``gpucluster:account_gpus_busy``, DCGM's utilisation joined on node and GPU) and
those below it (``gpucluster:account_gpus_idle``), and the same per job. Summed over the report's window at a fixed
step these are GPU-hours: allocated, busy and idle. A held GPU with no utilisation from DCGM is neither busy nor idle:
it is counted as unmeasured, never as either. ``gpucluster:slurm_jobs_known`` says when the collector read Slurm:
the report says which share of the window it covers, so that a gap (a collector down, Prometheus's retention shorter
than the window) is never read as "no use".

Standard library only (it runs on login nodes in gpu-job).
"""

from __future__ import annotations

import datetime
import http.client
import json
import re
import time
import urllib.parse

from ansible_collections.gpucluster.ops.plugins.module_utils._team_usage import fixed_width

# The recorded series the report reads (roles/monitoring/templates/gpucluster-alerts.yml.j2).
ACCOUNT_SERIES = (("allocated", "gpucluster:account_gpus_allocated"), ("busy", "gpucluster:account_gpus_busy"),
                  ("idle", "gpucluster:account_gpus_idle"))
JOB_SERIES = (("allocated", "gpucluster:job_gpus_allocated"), ("idle", "gpucluster:job_gpus_idle"))
KNOWN_SERIES = "gpucluster:slurm_jobs_known"
ACCOUNT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


class GpuUseError(Exception):
    """Prometheus could not be asked, or did not answer as expected: the figures are unknown."""


TIME_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")


def parse_since(text, name="since"):
    """The start of a report's window from ``text`` (a day or a local time), as a datetime; ``name`` is the option
    the error names."""
    for pattern in TIME_FORMATS:
        try:
            return datetime.datetime.strptime(text, pattern)
        except ValueError:
            continue
    raise GpuUseError("%s is %r: give a day as YYYY-MM-DD or a time as YYYY-MM-DDTHH:MM[:SS]" % (name, text))


def _steps(since, now, step):
    """The window [since, now] as the subquery's range and step, whole seconds, at least one step."""
    step = int(step)
    if step < 1:
        raise GpuUseError("the step is %r s: give at least 1 s" % (step,))
    window = int(now - since)
    if window < step:
        raise GpuUseError("the window from %d to %d is shorter than one step (%d s)" % (since, now, step))
    return window, step


def queries(accounts, since, now, step, top=5, user=None):
    """{name: PromQL} evaluated at ``now``: per account GPU-steps allocated, busy and idle; the ``top`` most idle jobs
    (of ``user`` only, when given) with their allocated GPU-steps; the GPU-steps of GPUs the collector could not map;
    the steps Slurm was known and all the steps. ``accounts`` is a list of names (all when empty). Every sum counts
    only the steps at which the Slurm collector's series were known (gpucluster:slurm_jobs_known), so that a stale
    file of a stopped collector adds nothing."""
    window, step = _steps(since, now, step)
    for name in list(accounts) + ([user] if user is not None else []):
        if not ACCOUNT_PATTERN.match(name or ""):
            raise GpuUseError("the name %r is not one Slurm accepts" % (name,))
    # raw (backquoted) PromQL strings: the regular expression's backslashes reach Prometheus as they are
    matchers = ["account=~`%s`" % "|".join(re.escape(a) for a in accounts)] if accounts else []
    match = "{%s}" % ",".join(matchers) if matchers else ""
    job_match = "{%s}" % ",".join(matchers + (["user=`%s`" % user] if user is not None else []))
    job_match = "" if job_match == "{}" else job_match
    span = "[%ds:%ds]" % (window, step)
    known = "on() (%s == 1)" % KNOWN_SERIES

    def summed(selector, by):
        return "sum by (%s) (sum_over_time((%s and %s)%s))" % (by, selector, known, span)
    out = {}
    for key, series in ACCOUNT_SERIES:
        out["account_" + key] = summed(series + match, "account")
    idle = "topk(%d, %s > 0)" % (int(top), summed(JOB_SERIES[1][1] + job_match, "jobid, account, user"))
    out["job_idle"] = idle
    out["job_allocated"] = "%s and on(jobid) %s" % (summed(JOB_SERIES[0][1] + job_match, "jobid, account, user"), idle)
    out["unmapped"] = "sum(sum_over_time((sum(slurm_job_gpus_unmapped) and %s)%s))" % (known, span)
    out["known"] = "count_over_time((%s == 1)%s)" % (KNOWN_SERIES, span)
    out["steps"] = "count_over_time(vector(1)%s)" % span
    return out


def _http_get(url, target, timeout):
    """(status, body) of a GET of ``target`` (path and query) at ``url`` (http or https, certificates verified), with
    http.client: the standard library on a login node, where Ansible's open_url is not."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GpuUseError("the Prometheus URL %r is not http://HOST[:PORT] or https://..." % (url,))
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
        try:
            connection.request("GET", parts.path.rstrip("/") + target)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise GpuUseError("cannot reach Prometheus at %s: %s" % (url, error))


def prometheus_query(url, expr, when, timeout=30):
    """The result of an instant query at ``when`` (``/api/v1/query``), a list of ``{metric, value}``."""
    query = urllib.parse.urlencode({"query": expr, "time": "%d" % int(when)})
    status, body = _http_get(url, "/api/v1/query?" + query, timeout)
    if status != 200:
        raise GpuUseError("Prometheus at %s answered %s: %s" % (url, status, body.decode("utf-8", "replace")[:300]))
    try:
        document = json.loads(body.decode("utf-8"))
    except ValueError:
        raise GpuUseError("Prometheus at %s answered something that is not JSON" % url)
    if not isinstance(document, dict) or document.get("status") != "success":
        raise GpuUseError("Prometheus at %s refused the query: %s" % (url, (document or {}).get("error")))
    data = document.get("data") or {}
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise GpuUseError("Prometheus at %s answered a %s, not a vector" % (url, data.get("resultType")))
    return data["result"]


def _value(item):
    try:
        return float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        raise GpuUseError("Prometheus answered a sample without a value: %r" % (item,))


def _hours(steps, step):
    return round(steps * step / 3600.0, 6)


def gpu_use(results, accounts, since, now, step):
    """The report from the answers to ``queries`` (``{name: result list}``): per account allocated, busy, idle and
    unmeasured GPU-hours and the idle share, the top idle jobs, and the share of the window Slurm was known."""
    window, step = _steps(since, now, step)
    steps = {}
    for key, _series in ACCOUNT_SERIES:
        for item in results["account_" + key]:
            account = (item.get("metric") or {}).get("account", "")
            steps.setdefault(account, {})[key] = _value(item)
    teams = {}
    for account in sorted(set(accounts) | set(steps)):
        if accounts and account not in accounts:
            continue
        found = steps.get(account, {})
        allocated = found.get("allocated", 0.0)
        busy, idle = found.get("busy", 0.0), found.get("idle", 0.0)
        teams[account] = {
            "allocated_gpu_hours": _hours(allocated, step), "busy_gpu_hours": _hours(busy, step),
            "idle_gpu_hours": _hours(idle, step),
            "unmeasured_gpu_hours": _hours(max(allocated - busy - idle, 0.0), step),
            "idle_share": round(idle / allocated, 4) if allocated else None}
    allocated_of = {}
    for item in results["job_allocated"]:
        labels = item.get("metric") or {}
        allocated_of[labels.get("jobid")] = _value(item)
    jobs = []
    for item in results["job_idle"]:
        labels = item.get("metric") or {}
        idle = _value(item)
        allocated = allocated_of.get(labels.get("jobid"))
        jobs.append({"jobid": labels.get("jobid"), "team": labels.get("account"), "user": labels.get("user"),
                     "idle_gpu_hours": _hours(idle, step),
                     "allocated_gpu_hours": None if allocated is None else _hours(allocated, step),
                     "idle_share": round(idle / allocated, 4) if allocated else None})
    jobs.sort(key=lambda job: (-job["idle_gpu_hours"], job["jobid"] or ""))
    known_steps = sum(_value(item) for item in results["known"])
    all_steps = sum(_value(item) for item in results["steps"])
    unmapped = sum(_value(item) for item in results["unmapped"])
    # the share rounded down, so that one step missing of a month's is never shown as all of it
    coverage = int(min(known_steps / all_steps, 1.0) * 10000) / 10000.0 if all_steps else 0.0
    return {"since": int(since), "until": int(now), "step_s": step, "coverage": coverage,
            "complete": bool(all_steps) and known_steps >= all_steps and not unmapped,
            "unmapped_gpu_hours": _hours(unmapped, step), "teams": teams, "top_idle_jobs": jobs}


def history_start(url, now, query=None):
    """The oldest time Prometheus holds samples for (its self-scrape's prometheus_tsdb_lowest_timestamp_seconds), or
    None when it does not say."""
    found = (query or prometheus_query)(url, "min(prometheus_tsdb_lowest_timestamp_seconds)", now)
    return _value(found[0]) if found else None


def read(url, accounts, since, now, step, top=5, user=None, within_history=False, query=None):
    """Ask Prometheus at ``url`` and return ``gpu_use``'s report. With ``within_history`` (a default window, not one the
    person chose) the window starts no earlier than the oldest data Prometheus keeps, and the report says so
    (``history_from``). Raises GpuUseError when Prometheus cannot answer."""
    query = query or prometheus_query
    if not url:
        raise GpuUseError("no Prometheus URL is configured")
    history = None
    if within_history:
        oldest = history_start(url, now, query)
        if oldest is not None and oldest > since:
            history = since = min(float(int(oldest) + 1), now - int(step))
    asked = queries(accounts, since, now, step, top, user)
    report = gpu_use(dict((name, query(url, expr, now)) for name, expr in asked.items()), accounts, since, now,
                     step)
    report["history_from"] = None if history is None else int(history)
    return report


def _cell(value, pattern="%.2f"):
    return "-" if value is None else pattern % value


def _when(epoch):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def render_lines(report, threshold_pct):
    """The report as text lines: one row per team, then the top idle jobs, then what the figures do not cover."""
    header = ("team", "allocated GPU-h", "busy GPU-h", "idle GPU-h", "idle %", "unmeasured GPU-h")
    rows = [header]
    for team, entry in sorted(report["teams"].items()):
        rows.append((team, _cell(entry["allocated_gpu_hours"]), _cell(entry["busy_gpu_hours"]),
                     _cell(entry["idle_gpu_hours"]),
                     _cell(None if entry["idle_share"] is None else 100 * entry["idle_share"], "%.1f"),
                     _cell(entry["unmeasured_gpu_hours"])))
    lines = ["GPUs held by Slurm jobs from %s to %s, busy at >= %s%% utilisation (Prometheus, every %d s)"
             % (_when(report["since"]), _when(report["until"]), threshold_pct, report["step_s"])]
    if report.get("history_from") is not None:
        lines.append("(from the oldest data Prometheus keeps, not the start of the month: --since or a longer "
                     "retention for more)")
    lines.extend(fixed_width(rows))
    if report["top_idle_jobs"]:
        lines.append("")
        lines.append("most idle jobs (GPU-hours held below the threshold)")
        for job in report["top_idle_jobs"]:
            lines.append("  job %s of %s (%s): %s idle of %s GPU-hours held"
                         % (job["jobid"], job["user"], job["team"], _cell(job["idle_gpu_hours"]),
                            _cell(job["allocated_gpu_hours"])))
    if report["coverage"] < 1.0:
        lines.append("")
        lines.append("partial: Prometheus knew Slurm's jobs for %s%% of this time (the Slurm collector was down or "
                     "stale, or Prometheus keeps less history); the figures cover only that" % share(report))
    if report["unmapped_gpu_hours"]:
        lines.append("")
        lines.append("partial: %s GPU-hours were held on GPUs the Slurm collector could not map to DCGM's (gres.conf "
                     "without File= order: AutoDetect, MIG); they are in none of the figures"
                     % _cell(report["unmapped_gpu_hours"]))
    if any(e["unmeasured_gpu_hours"] for e in report["teams"].values()):
        lines.append("")
        lines.append("unmeasured: GPUs held while DCGM gave no utilisation for them (neither busy nor idle)")
    return lines


def share(report):
    """The share of the window covered, in percent as text, never rounded up to 100."""
    percent = 100 * report["coverage"]
    return ("%.1f" if percent < 10 else "%d") % (int(percent * 10) / 10.0 if percent < 10 else int(percent))
