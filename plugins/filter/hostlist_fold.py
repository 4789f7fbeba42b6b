# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: hostlist_fold
short_description: Fold node names into a Slurm hostlist expression
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Folds C(gpu001), C(gpu002), C(gpu010) into C(gpu[001-002,010]), exactly as Slurm prints it.
  - A string input is read by python-hostlist, as P(gpucluster.ops.hostlist_expand#filter) reads it; the folding itself
    follows Slurm's algorithm (its range order and zero-padding rules), which python-hostlist's does not.
  - With O(sort=true) (the default) the names are sorted and made unique like C(scontrol show hostlistsorted).
    Prefixes sort in natural order, names without a number come first, then the width of the number, then its value.
    Only the trailing number of a name is folded (C(rack1-gpu[01-02],rack2-gpu01)), and zero padding is never mixed
    within a range.
  - With O(sort=false) the order is kept (duplicates dropped) and the result equals C(scontrol show hostlist).
  - Fails on a name that cannot be a node name (empty, blanks, commas, brackets, non-ASCII) or whose trailing number
    has more than 9 digits.
positional: _input
options:
  _input:
    description: Node names, or a hostlist expression (expanded first).
    type: raw
    required: true
  sort:
    description: Sort the names in Slurm's order first.
    type: bool
    default: true
seealso:
  - plugin: gpucluster.ops.hostlist_expand
    plugin_type: filter
"""

EXAMPLES = r"""
- name: One hostlist for all GPU nodes
  ansible.builtin.set_fact:
    gpu_nodes: "{{ groups['gpu'] | gpucluster.ops.hostlist_fold }}"
  # gpu[001-032]
"""

RETURN = r"""
_value:
  description: The hostlist expression; empty for no names.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import HostlistError, fold
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import expand_with_slurm_rules, filter_errors


@filter_errors(HostlistError, "hostlist_fold")
def hostlist_fold(names, sort=True):
    """Return the Slurm hostlist expression of ``names``."""
    if not isinstance(sort, bool):
        raise AnsibleFilterError("hostlist_fold: sort is %r, not true or false" % (sort,))
    if isinstance(names, str):
        names = expand_with_slurm_rules(names, caller="hostlist_fold")
    if not hasattr(names, "__iter__"):
        raise AnsibleFilterError("hostlist_fold: expected a list of node names, got %r" % (names,))
    return fold([str(name) for name in names], sort=sort)


class FilterModule(object):
    """gpucluster.ops hostlist_fold filter."""

    def filters(self):
        return {"hostlist_fold": hostlist_fold}
