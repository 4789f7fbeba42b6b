# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_gres_lines
short_description: gres.conf lines from the inventory and gathered GPU facts
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Builds gres.conf lines such as C(NodeName=gpu[001-032] Name=gpu Type=a100 File=/dev/nvidia[0-3] Cores=0-31),
    folded over hosts like P(gpucluster.ops.slurm_node_lines#filter), which it must agree with (same host
    variables, same GPU types).
  - GPUs come from C(ansible_facts['gpucluster_gpus']) (C(minor_number) gives C(/dev/nvidiaN), C(name) the type,
    C(cpu_affinity) the cores). Without facts, C(slurm_node_gres) gives the GPUs as C(/dev/nvidia0) upwards, without
    Cores. With both, their GPU counts must agree; the declared type is used when it is a single one.
  - "GPU type rule: the first token of the product name, lower-cased, spaces as underscores, split at C(_) and C(-),
    that looks like a model (a100, h100, h200, l40s, a10g, v100s, gh200); otherwise all tokens joined with C(_).
    The type is therefore part of the name that AutoDetect=nvml reports, which Slurm requires when it checks types."
  - "C(Cores=) maps C(cpu_affinity) (logical CPU ids as C(nvidia-smi topo -m) prints them, for example
    C(0-47,96-143)) to Slurm's core ids, which count cores socket by socket and ignore threads. With the host
    variable C(slurm_gres_cpu_numbering=split) (default, Linux's usual order) a CPU id C(c) is core
    C(c mod (sockets x cores_per_socket)). With C(adjacent) (sibling threads numbered next to each other) it is
    C(c div threads_per_core). Cores are left out when the affinity or the CPU layout is unknown."
  - A host with C(slurm_gres_autodetect=nvml) (or O(autodetect=nvml)) gets C(NodeName=... AutoDetect=nvml) instead;
    its GPU types must then be part of the detected names. Only use it where the NVML GPU plugin is installed
    (Debian 13's slurm-wlm-nvml-plugin; Debian 12's Slurm has none and marks such nodes INVAL).
  - Other GRES of C(slurm_node_gres) (for example C(shard)) become C(Name=... Count=...) lines.
  - Fails, naming the host, the variable and the value, on bad or missing data.
positional: hostvars
options:
  _input:
    description: Inventory host names of the Slurm compute nodes.
    type: list
    elements: str
    required: true
  autodetect:
    description: Default for hosts without C(slurm_gres_autodetect).
    type: str
    choices: [nvml, "off"]
    default: "off"
  gpu_type_map:
    description: Product name to Slurm GPU type; the same map as for P(gpucluster.ops.slurm_node_lines#filter).
    type: dict
    default: {}
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Render gres.conf on the controller
  ansible.builtin.copy:
    dest: /etc/slurm/gres.conf
    content: |
      {% for line in groups['slurm_compute'] | gpucluster.ops.slurm_gres_lines(hostvars) %}
      {{ line }}
      {% endfor %}
    mode: "0644"
"""

RETURN = r"""
_value:
  description: gres.conf lines, each starting with C(NodeName=<hostlist>).
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import SlurmRenderError, gres_lines
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmRenderError, "slurm_gres_lines")
def slurm_gres_lines(hosts, hostvars, autodetect=None, gpu_type_map=None):
    """Return the folded gres.conf lines for ``hosts``."""
    return gres_lines(hosts, hostvars, autodetect=autodetect, gpu_type_map=gpu_type_map)


class FilterModule(object):
    """gpucluster.ops slurm_gres_lines filter."""

    def filters(self):
        return {"slurm_gres_lines": slurm_gres_lines}
