#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_team_usage
short_description: Report GPU-hours used against each team's budget from Slurm's counters
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads each team QOS's GPU-minutes used and GPUs in use from slurmctld (C(scontrol -o show assoc_mgr flags=qos)),
    the numbers Slurm enforces the budget with, and compares them with the budget.
  - Adds each member's GPU-hours from the accounting database (C(sreport cluster AccountUtilizationByUser -T
    gres/gpu)) since the team's last reset (recorded by the reset timer of the team_quota role) or since the start
    of the period. slurmdbd rolls usage up hourly, so the last hour is missing from the member figures.
  - With O(prices), adds each team's GPU-hours per GPU type from the accounting database (C(sreport ... -T
    gres/gpu,gres/gpu:TYPE)) since the same start and their cost (GPU-hours of each type x its price per GPU-hour).
    Usage that was not read, or GPUs of a type without a price, make the cost unknown (null), never 0.
  - With off-peak pricing (the team model's C(budget_tres) C(billing)) the budget figures are the QOS's billing
    minutes in GPU-hours at the full rate (an off-peak GPU-hour counts its factor); the accounted GPU-hours are real.
  - Returns the report as data, as a text table and as CSV. Read-only.
options:
  teams:
    description:
      - The teams, as the C(teams) list of the P(gpucluster.ops.team_quotas#filter) filter (C(name), C(period),
        C(gpu_hours), C(max_concurrent), C(members)).
    type: list
    elements: dict
    required: true
  state_dir:
    description: Directory where the reset timer records C(<period>.last-reset).
    type: path
    default: /var/lib/gpucluster/team-quota
  members:
    description: Whether to add per-member GPU-hours from sreport.
    type: bool
    default: true
  prices:
    description:
      - Price of one GPU-hour per GPU type (the C(prices) of the P(gpucluster.ops.team_quotas#filter) filter;
        the key C('') prices GPUs without a type). Empty - no cost columns.
    type: dict
    default: {}
  currency:
    description: The currency of O(prices), as the report shows it.
    type: str
    default: EUR
  gpu_types:
    description: The cluster's GPU types, whose GPU-hours sreport is asked for beside the priced ones.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - gpucluster.ops.attributes.slurm_reader
notes:
  - Runs on the Slurm controller (or any host whose C(scontrol) and C(sreport) reach it and slurmdbd).
"""

EXAMPLES = r"""
- name: Read the teams' usage
  gpucluster.ops.slurm_team_usage:
    teams: "{{ (team_quota_teams | gpucluster.ops.team_quotas).teams }}"
  register: usage

- name: Show it as a table
  ansible.builtin.debug:
    msg: "{{ usage.table }}"
"""

RETURN = r"""
report:
  description: One entry per team.
  returned: always
  type: list
  elements: dict
  contains:
    team:
      description: Team (account and QOS) name.
      type: str
      sample: research
    period:
      description: Budget period (C(month), C(week), C(day)), or null without a budget.
      type: str
      sample: month
    since:
      description: Start of the counted usage (the last reset, or the start of the period), ISO 8601, local time.
      type: str
      sample: "2026-11-01T00:00:00"
    budget_gpu_hours:
      description: The budget from inventory.
      type: float
      sample: 20000
    used_gpu_hours:
      description: GPU-hours counted against the budget by slurmctld since the last reset.
      type: float
      sample: 1234.5
    remaining_gpu_hours:
      description: Budget left, per Slurm's stored limit.
      type: float
      sample: 18765.5
    used_percent:
      description: Share of the budget used.
      type: float
      sample: 6.2
    gpus_in_use:
      description: GPUs the team's running jobs hold now.
      type: int
      sample: 12
    max_concurrent:
      description: The team's GPU limit from inventory.
      type: int
      sample: 16
    limit_in_slurm:
      description: The limits slurmctld holds (C(gpu_minutes), C(max_concurrent)), to compare with inventory.
      type: dict
    members:
      description: Each member's GPU-hours from the accounting database (C(user), C(gpu_hours)).
      type: list
      elements: dict
    accounted_gpu_hours:
      description: With O(prices), the team's GPU-hours in the accounting database since C(since); null when not read.
      type: float
    gpu_hours_by_type:
      description: With O(prices), those GPU-hours per GPU type (C('') for GPUs of no listed type).
      type: dict
    cost:
      description: With O(prices), the cost of those GPU-hours; null when unknown (see C(cost_unknown_because)).
      type: float
      sample: 3702.5
    cost_unknown_because:
      description: Why the cost is unknown, or null.
      type: str
    currency:
      description: With O(prices), the currency of C(cost).
      type: str
    found:
      description: Whether slurmctld has the team's QOS.
      type: bool
table:
  description: The report as text lines (a table per team, then members).
  returned: always
  type: list
  elements: str
csv:
  description: The report as CSV text, one row per team (empty cells are unknown).
  returned: always
  type: str
generated_at:
  description: When the counters were read, ISO 8601, local time of the host.
  returned: always
  type: str
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._team_usage import (
    UsageError, last_reset, parse_assoc_mgr_qos, parse_sreport_tres, period_start, render_csv, render_table,
    sreport_argv, team_report)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            teams=dict(type="list", elements="dict", required=True),
            state_dir=dict(type="path", default="/var/lib/gpucluster/team-quota"),
            members=dict(type="bool", default=True),
            prices=dict(type="dict", default={}),
            currency=dict(type="str", default="EUR"),
            gpu_types=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    teams = module.params["teams"]
    for index, team in enumerate(teams):
        if not isinstance(team.get("name"), str) or not team["name"]:
            module.fail_json(msg="teams[%d] has no name: give the teams list of the team_quotas filter" % index)
        if team.get("period") not in (None, "month", "week", "day"):
            module.fail_json(msg="teams[%d] (%s): period is %r" % (index, team["name"], team.get("period")))
    prices = module.params["prices"]
    for gpu, price in sorted(prices.items()):
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
            module.fail_json(msg="prices.%s is %r: a price per GPU-hour is a number, 0 or more" % (gpu, price))
    priced = bool(prices)
    environ = {"LC_ALL": "C"}
    now = datetime.datetime.now().replace(microsecond=0)
    scontrol = module.get_bin_path("scontrol", required=True)
    rc, out, err = module.run_command([scontrol, "-o", "show", "assoc_mgr", "flags=qos"], environ_update=environ)
    if rc != 0:
        module.fail_json(msg="scontrol show assoc_mgr failed (rc %d): %s" % (rc, (err or out).strip()))
    try:
        qos_usage = parse_assoc_mgr_qos(out)
    except UsageError as exc:
        module.fail_json(msg=str(exc))

    since = {}
    sreport_usage = {}
    for team in teams:
        if team.get("period"):
            since[team["name"]] = last_reset(module.params["state_dir"], team["period"], now)
    tres_usage = {} if priced else None
    gpu_types = list(module.params["gpu_types"]) + [gpu for gpu in prices if gpu] if priced else ()
    if (module.params["members"] or priced) and teams:
        sreport = module.get_bin_path("sreport", required=True)
        by_start = {}
        for team in teams:
            start = since.get(team["name"]) or period_start("month", now)
            by_start.setdefault(start, []).append(team["name"])
        for start, names in sorted(by_start.items()):
            rc, out, err = module.run_command(sreport_argv(sreport, start, names, gpu_types), environ_update=environ)
            if rc != 0:
                module.fail_json(msg="sreport failed (rc %d): %s" % (rc, (err or out).strip()))
            try:
                found = parse_sreport_tres(out)
            except UsageError as exc:
                module.fail_json(msg=str(exc))
            for name in names:
                logins = found.get(name, {})
                sreport_usage[name] = dict((user, tres["gres/gpu"]) for user, tres in logins.items()
                                           if "gres/gpu" in tres)
                if tres_usage is not None:
                    # sreport ran and printed no line for the account: it used no GPU since the start.
                    tres_usage[name] = logins.get("", {"gres/gpu": 0})
    report = team_report(teams, qos_usage, sreport_usage,
                         dict((k, v.strftime("%Y-%m-%dT%H:%M:%S")) for k, v in since.items()),
                         tres_usage=tres_usage, prices=prices, currency=module.params["currency"])
    generated_at = now.strftime("%Y-%m-%dT%H:%M:%S")
    module.exit_json(changed=False, report=report, table=render_table(report), csv=render_csv(report, generated_at),
                     generated_at=generated_at)


if __name__ == "__main__":
    main()
