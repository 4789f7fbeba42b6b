# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: health_sweep_record
short_description: A node's record for the health sweep's fleet report, from the results of the tasks that checked it
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "The one definition of a node's record in the fleet report of C(playbooks/health_sweep.yml): whether it was
    reached, the error that makes it unknown, how it was checked (C(cli), C(module) or C(replay)), its comparison
    group, its pins, the versions the fleet compares and the checker's result."
  - Used by C(roles/operations/tasks/health_sweep_node.yml) for a node checked by its own tasks, and by
    P(gpucluster.ops.health_fanout#module) for the nodes it checked over ssh all at once, so that the report is the same
    whichever way a node was checked.
  - A node that could not be reached, or whose check gave no result, gets an error, never a result that reads as OK.
positional: _input
options:
  _input:
    description:
      - The registered result of the probe (C(roles/operations/files/health_sweep_probe.py) sent by C(ansible.builtin.raw)),
        with C(rc), C(stdout), C(stderr), and C(unreachable) with C(msg) when the node could not be reached.
    type: dict
    required: true
  module:
    description: The registered result of the C(gpucluster.ops.gpu_health) task; a skipped result or none when it did not run.
    type: dict
  replay:
    description: Whether a captured bundle was replayed (C(health_sweep_from_dir)).
    type: bool
    default: false
  node_name:
    description: The node's name in Slurm (C(health_check_node_name), default the inventory name).
    type: str
  groups:
    description: C(health_sweep_groups); the node's group is the first of them it is in.
    type: list
    elements: str
    default: []
  group_names:
    description: The host's inventory groups.
    type: list
    elements: str
    default: []
  health_check_expected:
    description:
      - The host's C(health_check_expected). Its C(gpu_model) is the node's group when it is in none of O(groups),
        and its keys named in O(pinnable) are pins.
    type: dict
    default: {}
  health_sweep_expected:
    description: The host's C(health_sweep_expected), pins over those of O(health_check_expected).
    type: dict
    default: {}
  pinnable:
    description: The versions a pin may name (the operations role's pinnable versions).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Keep the node's record for the fleet report
  ansible.builtin.set_fact:
    node_record: >-
      {{ probe | gpucluster.ops.health_sweep_record(module=module_result,
           node_name=inventory_hostname, groups=health_sweep_groups | default([]), group_names=group_names,
           health_check_expected=health_check_expected | default({}), pinnable=['driver_version', 'gpu_count']) }}
"""

RETURN = r"""
_value:
  description:
    - "The record: C(reachable), C(error) (none when the check gave a result), C(source), C(group), C(expected),
      C(versions) (C(driver_version), C(cuda_version), C(nccl_version), C(ofed_version), C(vbios_versions),
      C(ib_fw_versions)), C(slurm) (none: the sweep adds the node's Slurm state later) and C(result) (the checker's
      document, or none)."
  type: dict
"""

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _health_sweep


def health_sweep_record(probe, module=None, replay=False, node_name=None, groups=None, group_names=None,
                        health_check_expected=None, health_sweep_expected=None, pinnable=None):
    """The node's record (plugin_utils/_health_sweep.py: record)."""
    return _health_sweep.record(dict(probe or {}), dict(module) if module else None, bool(replay), node_name,
                                list(groups or []), list(group_names or []), dict(health_check_expected or {}),
                                dict(health_sweep_expected or {}), list(pinnable or []))


class FilterModule(object):
    """gpucluster.ops health_sweep_record filter."""

    def filters(self):
        return {"health_sweep_record": health_sweep_record}
