# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_booking_policy
short_description: The gpu-job config with the booking policy of gpu-job reserve added
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "Adds C(booking) to the config of P(gpucluster.ops.gpu_job_config#filter): the booking partition, its GPUs per
    node and GPU count, the most GPUs and the longest duration each team may book, how far ahead, the share of the
    partition booked at once, the declared maintenance windows and the privileged helper's path. C(booking) is null
    when O(booking) is empty (booking is off)."
  - Fails naming the variable and the value for an unknown key, a partition without GPU nodes or with nodes of
    different GPU counts (bookings are whole nodes), a team that is not one of the config's, a share outside (0, 1],
    a duration that is not whole minutes, and a window whose end is not after its start.
positional: booking, helper
options:
  _input:
    description: The gpu-job config (P(gpucluster.ops.gpu_job_config#filter)).
    type: dict
    required: true
  booking:
    description: The user_tools role's C(user_tools_booking).
    type: dict
    required: true
  helper:
    description: The installed C(gpu-reserve) program, which C(gpu-job reserve) runs through sudo.
    type: str
    required: true
seealso:
  - plugin: gpucluster.ops.gpu_job_config
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Render the gpu-job config with the booking policy
  ansible.builtin.copy:
    content: "{{ __config | gpucluster.ops.gpu_booking_policy(user_tools_booking, '/usr/local/lib/gpu-job/bin/gpu-reserve') | to_nice_json }}"
    dest: /etc/gpucluster/gpu-job.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The config, with C(booking) (null when booking is off).
  type: dict
  contains:
    booking:
      description: C(helper), C(prefix), C(partition), C(gpus_per_node), C(nodes), C(gpus), C(max_share),
        C(max_ahead_s), C(teams) (team to C(max_gpus) and C(max_duration_s)) and C(maintenance_windows).
      type: dict
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_booking import build_policy
from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_job import JobError
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(JobError, "gpu_booking_policy")
def gpu_booking_policy(config, booking, helper):
    """Return ``config`` with its ``booking`` entry built from ``booking`` (user_tools_booking)."""
    return dict(config, booking=build_policy(booking, config, helper))


class FilterModule(object):
    """gpucluster.ops gpu_booking_policy filter."""

    def filters(self):
        return {"gpu_booking_policy": gpu_booking_policy}
