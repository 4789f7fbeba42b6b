#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: team_gpu_use
short_description: Report how busy the GPUs each team's Slurm jobs held were, from Prometheus
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Asks Prometheus for the monitoring role's recorded series (group C(gpucluster-jobs)) summed over a window at a
    fixed step, and returns per team the GPU-hours its jobs held (allocated), those at or above the busy threshold of
    the recording rules (busy), those below it (idle), those DCGM gave no utilisation for (unmeasured), the idle
    share, and the most idle jobs. The same model as C(gpu-job usage --team) (docs/monitoring.md).
  - Says which share of the window Prometheus knew Slurm's jobs for (C(coverage)); a gap (the Slurm collector down,
    Prometheus's retention shorter than the window) is never counted as idle or as no use.
  - Fails when Prometheus cannot be asked or does not answer as expected. Read-only.
options:
  prometheus_url:
    description: Prometheus's URL as the host the module runs on reaches it.
    type: str
    required: true
  teams:
    description: The teams (Slurm accounts) to report; all the accounts Prometheus has when empty.
    type: list
    elements: str
    default: []
  since:
    description:
      - Start of the window, C(YYYY-MM-DD) or C(YYYY-MM-DDTHH:MM[:SS]) in the host's local time; empty, the first
        of this month or the oldest data Prometheus keeps, whichever is later (C(history_from) says which). The
        window ends now.
    type: str
    default: ''
  step:
    description: The step of the sums in seconds (the report's resolution).
    type: int
    default: 60
  top:
    description: How many of the most idle jobs to return.
    type: int
    default: 5
  busy_util_pct:
    description: The busy threshold of the recording rules (C(monitoring_gpu_busy_util_pct)), as the text says it.
    type: int
    default: 10
extends_documentation_fragment:
  - gpucluster.ops.attributes.slurm_reader
notes:
  - Runs where Prometheus is reachable, usually the monitoring host (C(playbooks/team_usage.yml) delegates to it).
"""

EXAMPLES = r"""
- name: How busy the teams' GPUs were this month
  gpucluster.ops.team_gpu_use:
    prometheus_url: http://127.0.0.1:9090
    teams: [research, development]
  register: gpu_use

- name: Show it
  ansible.builtin.debug:
    msg: "{{ gpu_use.lines }}"
"""

RETURN = r"""
gpu_use:
  description: The report.
  returned: always
  type: dict
  contains:
    since:
      description: Start of the window, seconds since the epoch.
      type: int
    until:
      description: End of the window (now), seconds since the epoch.
      type: int
    step_s:
      description: The step of the sums.
      type: int
    coverage:
      description: The share of the window (0 to 1, rounded down) Prometheus knew Slurm's jobs for; only those steps
        are counted.
      type: float
    complete:
      description: Whether the figures cover the whole window and every held GPU (else the module warns).
      type: bool
    unmapped_gpu_hours:
      description: GPU-hours held on GPUs the Slurm collector could not map to DCGM's (in none of the team figures).
      type: float
    history_from:
      description: Without O(since), the start of the window when Prometheus's oldest data is after the first of the
        month (seconds since the epoch), else null.
      type: int
    teams:
      description: Per team C(allocated_gpu_hours), C(busy_gpu_hours), C(idle_gpu_hours), C(unmeasured_gpu_hours)
        and C(idle_share) (idle of allocated, null without allocated GPUs).
      type: dict
    top_idle_jobs:
      description: The most idle jobs, C(jobid), C(team), C(user), C(idle_gpu_hours), C(allocated_gpu_hours),
        C(idle_share).
      type: list
      elements: dict
lines:
  description: The report as text lines.
  returned: always
  type: list
  elements: str
"""

import datetime
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_use import (
    GpuUseError, parse_since, read, render_lines, share)
from ansible_collections.gpucluster.ops.plugins.module_utils._team_usage import period_start


def main():
    module = AnsibleModule(
        argument_spec=dict(
            prometheus_url=dict(type="str", required=True),
            teams=dict(type="list", elements="str", default=[]),
            since=dict(type="str", default=""),
            step=dict(type="int", default=60),
            top=dict(type="int", default=5),
            busy_util_pct=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    params = module.params
    now = time.time()
    try:
        since = (parse_since(params["since"]) if params["since"]
                 else period_start("month", datetime.datetime.fromtimestamp(int(now))))
        if time.mktime(since.timetuple()) >= now:
            raise GpuUseError("since is %s: that is not before now" % params["since"])
        report = read(params["prometheus_url"], params["teams"], time.mktime(since.timetuple()), now,
                      params["step"], top=params["top"], within_history=not params["since"])
    except GpuUseError as error:
        module.fail_json(msg="GPU use unknown: %s" % error)
    if not report["complete"]:
        module.warn("the GPU use is partial: Prometheus knew Slurm's jobs for %s%% of the window%s"
                    % (share(report), ", and %s GPU-hours were on GPUs the collector could not map"
                       % report["unmapped_gpu_hours"] if report["unmapped_gpu_hours"] else ""))
    module.exit_json(changed=False, gpu_use=report, lines=render_lines(report, params["busy_util_pct"]))


if __name__ == "__main__":
    main()
