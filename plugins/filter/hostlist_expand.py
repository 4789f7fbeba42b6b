# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: hostlist_expand
short_description: Expand a Slurm hostlist expression into node names
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Expands C(gpu[001-004,010]) into C(gpu001), C(gpu002), C(gpu003), C(gpu004), C(gpu010), in the order
    C(scontrol show hostnames) prints them, duplicates kept.
  - Built on the python-hostlist library (C(pip install python-hostlist) on the Ansible controller; it is in the
    collection's requirements.txt), with Slurm's own rules checked first where python-hostlist is more lenient. Zero padding of the low bound is kept
    (C(gpu[001-010])); several bracket groups expand outer first (C(rack[1-2]-gpu[01-02])).
  - Fails, naming the offending text, on what Slurm rejects or misreads. Errors include text after the last
    bracket range (C(unit[0-1]rack)), an unclosed bracket (C(gpu[01-), which Slurm silently turns into a node
    C(gpu])), a backwards range (C(gpu[05-01])), an ambiguous padding (C(gpu[1-03])), empty names, blanks and
    ranges of more than 65536 names.
  - A list input is joined with commas first, so a list of expressions works too.
positional: _input
options:
  _input:
    description: A hostlist expression, or a list of them.
    type: raw
    required: true
seealso:
  - plugin: gpucluster.ops.hostlist_fold
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Show the nodes of the gpu partition
  ansible.builtin.debug:
    msg: "{{ 'gpu[001-004],login01' | gpucluster.ops.hostlist_expand }}"
  # ['gpu001', 'gpu002', 'gpu003', 'gpu004', 'login01']
"""

RETURN = r"""
_value:
  description: The node names, in Slurm's order, duplicates kept.
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import expand_with_slurm_rules


def hostlist_expand(expr):
    """Return the node names of a Slurm hostlist expression (or of a list of them)."""
    if isinstance(expr, (list, tuple)):
        expr = ",".join(str(item) for item in expr)
    return expand_with_slurm_rules(expr)


class FilterModule(object):
    """gpucluster.ops hostlist_expand filter."""

    def filters(self):
        return {"hostlist_expand": hostlist_expand}
