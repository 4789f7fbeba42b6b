# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_cluster_gpus
short_description: The GPUs of each Slurm compute node and the nodes of each partition, as slurm.conf declares them
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads the compute nodes' GRES exactly as P(gpucluster.ops.slurm_node_lines#filter) does (C(slurm_node_gres),
    else the GPUs of C(ansible_facts['gpucluster_gpus']); C(slurm_gpu_type_map) and O(gpu_type_map) name the types)
    and the partitions as P(gpucluster.ops.slurm_partition_lines#filter) does, so that other models (the team
    quotas of P(gpucluster.ops.team_quotas#filter)) can be checked against the cluster the inventory renders.
  - No CPU or memory data is read, so it needs no hardware facts.
  - "Fails, naming the host, the variable and the value, where the node lines would: bad GRES, two hosts with one
    Slurm node name, a partition that cannot be rendered, and a host whose GPU GRES count differs from its
    C(health_check_expected.gpu_count)."
positional: hostvars
options:
  _input:
    description: Inventory host names of the Slurm compute nodes, for example C(groups['slurm_compute']).
    type: list
    elements: str
    required: true
  partitions:
    description: The C(slurm_partitions) list; when left out, no partitions are returned.
    type: list
    elements: dict
  groups:
    description: The C(groups) of the play (needed with O(partitions)).
    type: dict
  gpu_type_map:
    description: Product name to Slurm GPU type, the slurm role's C(slurm_gpu_type_map).
    type: dict
    default: {}
  undeclared_ok:
    description:
      - Leave out, and list under RV(_value.undeclared), the hosts with neither C(slurm_node_gres) nor gathered GPU
        facts (for a check that runs before the facts are gathered). Otherwise such a host counts as a node
        without GPUs, which C(health_check_expected.gpu_count) may refuse.
    type: bool
    default: false
seealso:
  - plugin: gpucluster.ops.slurm_node_lines
    plugin_type: filter
  - plugin: gpucluster.ops.team_quotas
    plugin_type: filter
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Check the team quotas against the cluster's GPUs and partitions
  ansible.builtin.debug:
    msg: >-
      {{ team_quota_teams | gpucluster.ops.team_quotas(team_quota_gpu_types, cluster=__cluster) }}
  vars:
    __cluster: >-
      {{ groups['slurm_compute'] | gpucluster.ops.slurm_cluster_gpus(hostvars, partitions=slurm_partitions,
                                                                     groups=groups) }}
"""

RETURN = r"""
_value:
  description: The cluster's GPUs and partitions.
  type: dict
  contains:
    nodes:
      description: Slurm node name to its GPUs per type (GPUs without a type under C("")).
      type: dict
      sample: {gpu001: {h100: 8}, gpu002: {h100: 8}}
    partitions:
      description: Partition name to the Slurm node names in it.
      type: dict
      sample: {batch: [gpu001, gpu002], debug: [gpu002]}
    undeclared:
      description: With O(undeclared_ok), the hosts left out because nothing declares or shows their GPUs yet.
      type: list
      elements: str
      sample: []
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import SlurmRenderError, cluster_gpus
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmRenderError, "slurm_cluster_gpus")
def slurm_cluster_gpus(hosts, hostvars, partitions=None, groups=None, gpu_type_map=None, undeclared_ok=False):
    """Return {nodes: {node: {type: count}}, partitions: {name: [nodes]}, undeclared: [hosts]} for ``hosts``."""
    return cluster_gpus(hosts, hostvars, partitions=partitions, groups=groups,
                        gpu_type_map=gpu_type_map, undeclared_ok=undeclared_ok)


class FilterModule(object):
    """gpucluster.ops slurm_cluster_gpus filter."""

    def filters(self):
        return {"slurm_cluster_gpus": slurm_cluster_gpus}
