# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_partition_lines
short_description: PartitionName lines of slurm.conf from a list of partitions
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Builds one C(PartitionName=) line per entry of a C(slurm_partitions) list, with the nodes folded into a hostlist.
  - "Each entry has C(name) and C(groups) (inventory groups) and/or C(nodes) (a hostlist or a list of node names).
    Optional fields: C(default) (bool), C(max_time), C(default_time) (Slurm times), C(qos), C(allow_accounts),
    C(allow_qos) (lists), C(priority_tier) (int), C(oversubscribe) (EXCLUSIVE, NO, YES[:n], FORCE[:n]),
    C(preempt_mode) (OFF, CANCEL, GANG, REQUEUE, SUSPEND, comma-joined), C(state) (UP, DOWN, DRAIN, INACTIVE),
    C(exclusive_nodes) (bool, not written), C(def_mem_per_gpu) (MiB, an int) and C(extra) (other PartitionName keys
    of Slurm, as Key: value)."
  - "C(DefMemPerGPU): a job gets memory by the GPUs it asks for, not a whole node's (Slurm's default where no
    C(--mem) is given, which leaves a node's other GPUs idle). A partition's C(def_mem_per_gpu) is written as given;
    without it, and with O(node_lines), the partition gets the least C(RealMemory) per GPU of its nodes with GPUs (node
    types differ); without GPU nodes, or where C(extra) sets a C(DefMemPerCPU), C(DefMemPerGPU) or C(DefMemPerNode)
    of its own, none."
  - "Times are Slurm times with C(:) or C(-) (C(minutes:seconds), C(hours:minutes:seconds), C(days-hours),
    C(days-hours:minutes), C(days-hours:minutes:seconds)), written as given; units (C(30m), C(2h), C(1d), C(1h30m)),
    written as whole minutes; C(UNLIMITED) or C(INFINITE); or C(0). A bare number (C(30) or C(\"30\")) is refused:
    Slurm reads minutes, a person may mean seconds."
  - Node names of group members follow the host variable C(slurm_node_name) when O(hostvars) is given, else the
    inventory name up to the first dot, as in P(gpucluster.ops.slurm_node_lines#filter).
  - Fails, naming the partition and the value, on an undefined group, an empty node set, two default partitions,
    a node in two partitions that both have C(exclusive_nodes=true), a bad time, an unknown field or extra key.
positional: groups, hostvars, node_lines
options:
  _input:
    description: The C(slurm_partitions) list.
    type: list
    elements: dict
    required: true
  groups:
    description: The C(groups) of the play.
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) of the play, to read C(slurm_node_name).
    type: dict
  node_lines:
    description: The C(NodeName) lines of the same cluster (P(gpucluster.ops.slurm_node_lines#filter)), for each
      partition's C(DefMemPerGPU).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Show the partition lines
  ansible.builtin.debug:
    msg: "{{ slurm_partitions | gpucluster.ops.slurm_partition_lines(groups, hostvars) }}"
  vars:
    slurm_partitions:
      - {name: gpu, groups: [slurm_gpu], default: true, max_time: "2-00:00:00"}
      - {name: debug, nodes: "gpu[001-002]", max_time: 30m, priority_tier: 10}
"""

RETURN = r"""
_value:
  description:
    - One line per partition, in the given order, for example
      C(PartitionName=gpu Nodes=gpu[001-032] Default=YES MaxTime=2-00:00:00).
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import SlurmRenderError, partition_lines
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmRenderError, "slurm_partition_lines")
def slurm_partition_lines(partitions, groups, hostvars=None, node_lines=None):
    """Return the PartitionName lines of ``partitions``."""
    return partition_lines(partitions, groups, hostvars, node_lines=node_lines)


class FilterModule(object):
    """gpucluster.ops slurm_partition_lines filter."""

    def filters(self):
        return {"slurm_partition_lines": slurm_partition_lines}
