# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_topology_lines
short_description: topology.conf lines for topology/tree from an InfiniBand fabric description
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "Turns C({leaves: [{name: leaf01, nodes: 'gpu[001-032]'}], spines: [{name: spine01, switches: 'leaf[01-04]'}],
    top: core01}) into C(SwitchName=leaf01 Nodes=gpu[001-032]), C(SwitchName=spine01 Switches=leaf[01-04]) and
    C(SwitchName=core01 Switches=spine[01-04]). Lines grow with switches, not nodes."
  - C(nodes) and C(switches) are hostlists or lists of names (Slurm node names).
  - Fails on a node under two leaves, a spine naming an unknown leaf, a leaf under no spine (when there are spines),
    a switch defined twice, and a node not in O(known_nodes) when that is given.
  - Fails when no single switch reaches every leaf (several spines, each with only part of the leaves, and no
    C(top)). Slurm would only log a warning, but jobs could then not span the parts. Add C(top) (a switch above the
    spines or leaves), or set C(allow_partitioned=true) for islands that really are separate.
    A fat tree where every spine lists every leaf needs neither.
positional: known_nodes
options:
  _input:
    description: The fabric description.
    type: dict
    required: true
  known_nodes:
    description: Slurm node names that may appear under leaves (for example the nodes of the NodeName lines).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Render topology.conf on the controller
  ansible.builtin.copy:
    dest: /etc/slurm/topology.conf
    content: "{{ (slurm_fabric | gpucluster.ops.slurm_topology_lines) | join('\n') }}\n"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: topology.conf lines, leaves first, then spines, then the top switch.
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import SlurmRenderError, topology_lines
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmRenderError, "slurm_topology_lines")
def slurm_topology_lines(fabric, known_nodes=None):
    """Return the topology.conf lines of ``fabric``."""
    return topology_lines(fabric, known_nodes)


class FilterModule(object):
    """gpucluster.ops slurm_topology_lines filter."""

    def filters(self):
        return {"slurm_topology_lines": slurm_topology_lines}
