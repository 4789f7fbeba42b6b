# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_reservation_specs
short_description: The slurm_reservation module's options for each reservation of slurm_reservations
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Checks every entry of the slurm role's C(slurm_reservations) as the M(gpucluster.ops.slurm_reservation) module
    does and returns its options per entry; fails naming the entry, the key and the value.
  - C(gpus) becomes whole nodes of the entry's C(partition) (C(node_count)); the partition's nodes must have the
    same number of GPUs.
  - Every name must start with O(prefix), which marks the reservations the inventory owns.
positional: cluster, prefix
options:
  _input:
    description: The C(slurm_reservations) list.
    type: list
    elements: dict
    required: true
  cluster:
    description: The result of P(gpucluster.ops.slurm_cluster_gpus#filter), with its partitions.
    type: dict
    required: true
  prefix:
    description: The name prefix of the inventory's reservations (C(slurm_reservations_prefix)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Reconcile the inventory's reservations
  gpucluster.ops.slurm_reservation: "{{ item }}"
  loop: "{{ slurm_reservations | gpucluster.ops.slurm_reservation_specs(__cluster, 'inv-') }}"
"""

RETURN = r"""
_value:
  description: Per entry the module's options (name, state, start_time, duration, end_time, nodes, node_count,
    partition, flags, users, accounts).
  type: list
  elements: dict
"""

import datetime

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_reservation import inventory_specs
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SpecError)
def slurm_reservation_specs(reservations, cluster, prefix):
    """Return the slurm_reservation options of every entry of ``reservations`` (slurm_reservations)."""
    return inventory_specs(reservations, cluster, prefix, datetime.datetime.now().replace(microsecond=0))


class FilterModule(object):
    """gpucluster.ops slurm_reservation_specs filter."""

    def filters(self):
        return {"slurm_reservation_specs": slurm_reservation_specs}
