#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_render
short_description: Render slurm.conf, gres.conf, topology.conf and cgroup.conf from the inventory in one pass
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - An action that runs on the controller only; it writes nothing and reports no change. The slurm role's render
    step (C(tasks_from=render)) uses it to set C(__slurm_files).
  - Gives the lines of P(gpucluster.ops.slurm_node_lines#filter), P(gpucluster.ops.slurm_gres_lines#filter),
    P(gpucluster.ops.slurm_partition_lines#filter) and P(gpucluster.ops.slurm_topology_lines#filter) (checked against
    the node names) in one pass over the hosts' variables, then renders each template of O(templates) as
    C(lookup('ansible.builtin.template', ...) | trim) plus a final newline, with the lines as the variables
    C(__slurm_node_lines), C(__slurm_gres_lines), C(__slurm_partition_lines) and C(__slurm_topology_lines).
  - The files are byte for byte those of the filters and lookups; at 10,000 nodes it costs far less, because the
    task's variables are copied once for all templates (a template lookup deep-copies them for each file) and the
    hosts' variables are read once for all lines.
  - Fails like the filters, naming the host, the variable and the value; the message starts with the name of the
    filter that would have failed (C(slurm_node_lines:) and so on).
options:
  hosts:
    description: Inventory host names of the Slurm compute nodes, for example C(groups['slurm_compute']).
    type: list
    elements: str
    default: []
  group:
    description:
      - The inventory group of the Slurm compute nodes, instead of O(hosts). At 10,000 nodes it is the cheaper of
        the two, since Ansible hands a task's templated options back to the main process with its result.
    type: str
  partitions:
    description: The partitions, as for P(gpucluster.ops.slurm_partition_lines#filter).
    type: list
    elements: dict
    default: []
  fabric:
    description: The fabric, as for P(gpucluster.ops.slurm_topology_lines#filter); empty for no topology lines.
    type: dict
    default: {}
  gpu_type_map:
    description: Product name to Slurm GPU type, as for P(gpucluster.ops.slurm_node_lines#filter).
    type: dict
    default: {}
  autodetect:
    description: Default for hosts without C(slurm_gres_autodetect), as for P(gpucluster.ops.slurm_gres_lines#filter).
    type: str
    choices: [nvml, "off"]
    default: "off"
  templates:
    description: File name to template (found like the template lookup's, in the role's C(templates/)).
    type: dict
    default: {}
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin.
  check_mode:
    support: full
    description: Renders in check mode too; it changes nothing in any mode.
  diff_mode:
    support: none
    description: Writes nothing, so has no diff.
seealso:
  - plugin: gpucluster.ops.slurm_node_lines
    plugin_type: filter
  - module: gpucluster.ops.slurm_config_files
"""

EXAMPLES = r"""
- name: Render the Slurm configuration on the controller
  gpucluster.ops.slurm_render:
    hosts: "{{ groups['slurm_compute'] }}"
    partitions: "{{ slurm_partitions }}"
    fabric: "{{ slurm_fabric }}"
    templates:
      slurm.conf: slurm.conf.j2
      gres.conf: gres.conf.j2
  register: rendered
"""

RETURN = r"""
files:
  description: File name (a key of O(templates)) to content.
  returned: success
  type: dict
  sample: {"gres.conf": "# Ansible managed\nNodeName=gpu[001-032] Name=gpu Type=a100 File=/dev/nvidia[0-7]\n"}
lines:
  description: The lines the templates saw, under C(node), C(gres), C(partition) and C(topology).
  returned: success
  type: dict
  sample: {"node": ["NodeName=gpu[001-032] CPUs=128 RealMemory=1000448 Gres=gpu:a100:8"], "gres": [],
           "partition": ["PartitionName=batch Nodes=gpu[001-032] Default=YES"], "topology": []}
"""
