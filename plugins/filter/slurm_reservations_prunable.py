# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_reservations_prunable
short_description: The reservations the inventory owned and dropped, from scontrol show reservation -o
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads C(scontrol show reservation -o) as the M(gpucluster.ops.slurm_reservation) module does and returns the
    names that start with O(prefix) (the inventory's mark), are not in O(declared) and are not maintenance (C(MAINT))
    reservations. Bookings (C(book-)) and maintenance reservations are never in it.
  - Fails on output it cannot read; nothing is deleted on a guess.
positional: declared, prefix
options:
  _input:
    description: The output of C(scontrol show reservation -o).
    type: str
    required: true
  prefix:
    description: The mark of the reservations the inventory owns (C(slurm_reservations_prefix)); others are kept.
    type: str
    required: true
  declared:
    description: The names the inventory declares.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Delete the reservations the inventory dropped
  gpucluster.ops.slurm_reservation:
    name: "{{ item }}"
    state: absent
  loop: "{{ __shown.stdout | gpucluster.ops.slurm_reservations_prunable(slurm_reservations | map(attribute='name'), 'inv-') }}"
"""

RETURN = r"""
_value:
  description: The names to delete, sorted.
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_reservation import prunable
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SlurmOutputError
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmOutputError, "slurm_reservations_prunable")
def slurm_reservations_prunable(text, declared, prefix):
    """Return the names of the reservations the inventory owned (``prefix``) and no longer declares."""
    return prunable(text, list(declared), prefix)


class FilterModule(object):
    """gpucluster.ops slurm_reservations_prunable filter."""

    def filters(self):
        return {"slurm_reservations_prunable": slurm_reservations_prunable}
