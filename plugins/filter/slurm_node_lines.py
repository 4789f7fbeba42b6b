# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_node_lines
short_description: NodeName lines of slurm.conf from the inventory and gathered facts
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Builds the C(NodeName=) lines of slurm.conf for the given hosts, once, on the controller. Hosts whose lines would
    be identical share one line with a folded hostlist, so the output grows with node types, not with nodes.
  - "The node name is the host variable C(slurm_node_name), else the inventory name up to its first dot."
  - "Declared host variables win over facts: C(slurm_node_cpus), C(slurm_node_sockets),
    C(slurm_node_cores_per_socket), C(slurm_node_threads_per_core) over C(ansible_facts['processor_vcpus']),
    C(processor_count), C(processor_cores) and C(processor_threads_per_core); C(slurm_node_real_memory) (MiB) over
    C(ansible_facts['memtotal_mb']) minus a reserve; C(slurm_node_gres) (a list of C({name, type, count})) over the
    GPUs in C(ansible_facts['gpucluster_gpus']) gathered by C(gpucluster.ops.gpu_facts)."
  - "C(slurm_node_features) (list of names of C([A-Za-z0-9_.-])) and C(slurm_node_weight) (integer) are added when set."
  - The memory reserve is C(slurm_node_memory_reserve_mib) when set, else O(memory_reserve_percent) of memtotal but
    at least O(memory_reserve_min_mib). RealMemory is rounded down to O(memory_round_mib), so identical nodes whose
    memtotal differs by a few MiB (firmware and kernel reservations) still share a line.
  - GPU types are short names derived from the product name (C(NVIDIA H100 80GB HBM3) is C(h100), C(NVIDIA
    A100-SXM4-80GB) is C(a100), C(NVIDIA L40S) is C(l40s)); see P(gpucluster.ops.slurm_gres_lines#filter) and
    docs/slurm-config.md for the rule. O(gpu_type_map) and the host variable C(slurm_gpu_type_map) map product
    names to other types.
  - Fails, naming the host, the variable and the value, when data is missing or invalid. It also fails when two
    nodes get the same name, when CPUs disagree with sockets x cores x threads, when a GPU has MIG enabled, or when
    two GPU models of different memory size map to the same type (A100 40GB and 80GB).
positional: hostvars
options:
  _input:
    description: Inventory host names of the Slurm compute nodes, for example C(groups['slurm_compute']).
    type: list
    elements: str
    required: true
  gpu_type_map:
    description: Product name (as nvidia-smi prints it) to Slurm GPU type; wins over the built-in rule.
    type: dict
    default: {}
  memory_reserve_percent:
    description: Share of memtotal kept back from jobs when C(slurm_node_memory_reserve_mib) is not set.
    type: int
    default: 3
  memory_reserve_min_mib:
    description: Smallest reserve in MiB when the share is used.
    type: int
    default: 1024
  memory_round_mib:
    description: RealMemory is rounded down to a multiple of this.
    type: int
    default: 1024
seealso:
  - plugin: gpucluster.ops.slurm_gres_lines
    plugin_type: filter
  - plugin: gpucluster.ops.slurm_partition_lines
    plugin_type: filter
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Render slurm.conf on the controller
  ansible.builtin.template:
    src: slurm.conf.j2
    dest: /etc/slurm/slurm.conf
    mode: "0644"
  # slurm.conf.j2:
  # {% for line in groups['slurm_compute'] | gpucluster.ops.slurm_node_lines(hostvars, gpu_type_map=slurm_gpu_type_map) %}
  # {{ line }}
  # {% endfor %}
"""

RETURN = r"""
_value:
  description:
    - NodeName lines in Slurm's node order, for example
      C(NodeName=gpu[001-032] CPUs=128 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2 RealMemory=1000448
      Gres=gpu:a100:8 Features=a100,ib).
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import SlurmRenderError, node_lines
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SlurmRenderError, "slurm_node_lines")
def slurm_node_lines(hosts, hostvars, gpu_type_map=None, memory_reserve_percent=None, memory_reserve_min_mib=None,
                     memory_round_mib=None):
    """Return the folded NodeName lines for ``hosts``."""
    return node_lines(hosts, hostvars, gpu_type_map=gpu_type_map, memory_reserve_percent=memory_reserve_percent,
                      memory_reserve_min_mib=memory_reserve_min_mib, memory_round_mib=memory_round_mib)


class FilterModule(object):
    """gpucluster.ops slurm_node_lines filter."""

    def filters(self):
        return {"slurm_node_lines": slurm_node_lines}
