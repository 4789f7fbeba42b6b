# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: scontrol_nodes
short_description: Read the nodes of C(scontrol show node -o) as name, state and reason, by structure
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads the output of C(scontrol show node -o) (one node per line) into one mapping per node, as the
    C(gpucluster.ops.slurm_node_state) module and the node-local health wrapper read it.
  - The state is the C(State) field, which comes before C(Reason); the reason is free text up to Slurm's
    C([user@time]) stamp. An administrator's reason that holds C(State=IDLE), C(Reason=), quotes or the collection's
    own marker is read as text, never as fields.
  - Lines that are not node lines (an empty line, C(No nodes in the system)) are skipped.
positional: _input
options:
  _input:
    description: The command's output, as a string or a list of lines (C(stdout_lines)).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the nodes' states and reasons
  ansible.builtin.command:
    argv: [scontrol, show, node, --oneliner]
  register: nodes
  changed_when: false

- name: The nodes drained by the health checks
  ansible.builtin.debug:
    msg: "{{ nodes.stdout | gpucluster.ops.scontrol_nodes | selectattr('reason', 'match', 'gpucluster-health:')
             | map(attribute='name') }}"
"""

RETURN = r"""
_value:
  description: One entry per node, in scontrol's order.
  type: list
  elements: dict
  contains:
    name:
      description: The node's name (C(NodeName)).
      type: str
    state:
      description: Its state as scontrol prints it, for example C(IDLE+DRAIN).
      type: str
    reason:
      description: Its reason without Slurm's C([user@time]) stamp; empty when it has none.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_nodes import parse_scontrol_nodes


def scontrol_nodes(output):
    """The nodes of ``scontrol show node -o`` output as [{name, state, reason}]."""
    if isinstance(output, (list, tuple)):
        output = "\n".join(str(line) for line in output)
    if not isinstance(output, str):
        raise AnsibleFilterError("scontrol_nodes: expected scontrol's output as a string or lines, got %r" % (output,))
    return parse_scontrol_nodes(output)


class FilterModule(object):
    """gpucluster.ops scontrol_nodes filter."""

    def filters(self):
        return {"scontrol_nodes": scontrol_nodes}
