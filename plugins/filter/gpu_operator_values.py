# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_operator_values
short_description: The NVIDIA GPU Operator's Helm values, derived from what the collection manages on the same nodes
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Turns the gpu_operator role's settings and, per Kubernetes GPU node, what this collection does there into the
    chart's values; C(driver.enabled) is false where the nvidia_driver role installs the host driver (its
    C(nvidia_driver_version) goes to the validator), C(dcgm.enabled) and C(dcgmExporter.enabled) are false where the
    dcgm and dcgm_exporter roles serve the node (forcing them on there is an error naming the host and the port),
    C(mig.strategy), the device plugin's configs (time-slicing replicas per GPU model, chosen by the node label
    C(nvidia.com/device-plugin.config)), tolerations, the driver upgrade policy when the operator installs drivers,
    every C(repository) of the chart on the site registry, and C(operator.upgradeCRD=false) (the gpu_operator role
    applies the chart's CRDs itself).
  - Each node's labels are C(nvidia.com/gpu.deploy.operands=true), its device plugin config, and
    C(nvidia.com/gpu.deploy.driver=false) where the nvidia_driver role installs the host driver (C(true) elsewhere);
    never a label that NFD or GPU Feature Discovery owns.
  - With O(chart_values) and O(crd), every key of the result (the extra values too) must be a key of the chart's
    C(values.yaml) or of the ClusterPolicy CRD's spec schema; an unknown key fails, naming it and the nearest valid
    key.
  - Fails, naming the host, the variable and the value, on bad input (an unknown MIG strategy, replicas below 1, a
    node in both kubernetes_gpu_nodes and slurm_compute, two drivers or two exporters on one node).
positional: nodes, chart_values, crd
options:
  _input:
    description: The role's settings, the names of its variables without the C(gpu_operator_) prefix.
    type: dict
    required: true
  nodes:
    description:
      - Inventory host to what the collection does there, C({driver_managed, driver_version, dcgm_managed,
        dcgm_exporter_managed, dcgm_exporter_port, slurm, gpu_model}).
    type: dict
    required: true
  chart_values:
    description: The chart's own values (C(helm show values)); needed for the registry and the key check.
    type: dict
  crd:
    description: The chart's ClusterPolicy CRD (C(helm show crds)); with O(chart_values), the keys are checked.
    type: dict
  deployed:
    description: The deployed release's values (C(helm get values)), for RV(_value.diff).
    type: dict
seealso:
  - plugin: gpucluster.ops.gpu_operator_schema_problems
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Derive the values
  ansible.builtin.set_fact:
    __values: "{{ {'mig_strategy': 'single', 'time_slicing': {'l40s': 4}} | gpucluster.ops.gpu_operator_values(__nodes) }}"
"""

RETURN = r"""
_value:
  description: The derived values, the node labels and notes.
  type: dict
  contains:
    values:
      description: The chart's values.
      type: dict
    labels:
      description: Inventory host to the labels its Kubernetes node gets.
      type: dict
      sample: {l40s05: {nvidia.com/gpu.deploy.operands: "true", nvidia.com/device-plugin.config: l40s,
                        nvidia.com/gpu.deploy.driver: "false"}}
    notes:
      description: What the run should say (a setting that has no effect, a value the validator is not told).
      type: list
      elements: str
    diff:
      description: With O(deployed), C(path, old -> new) lines where the deployed values differ.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_operator import (
    GpuOperatorError, crd_schema, derive_values, key_problems, values_diff)
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(GpuOperatorError, "gpu_operator_values")
def gpu_operator_values(settings, nodes, chart_values=None, crd=None, deployed=None):
    """Return {values, labels, notes, diff} for ``settings`` on ``nodes``."""
    if not isinstance(settings, dict) or not isinstance(nodes, dict):
        raise AnsibleFilterError("gpu_operator_values expects the settings and the nodes as mappings")
    result = derive_values(settings, nodes, chart_values)
    if chart_values is not None and crd is not None:
        spec = crd_schema(crd).get("properties", {}).get("spec", {})
        problems = key_problems(result["values"], chart_values, spec)
        if problems:
            raise GpuOperatorError("; ".join(problems))
    result["diff"] = values_diff(deployed, result["values"]) if deployed is not None else []
    return result


class FilterModule(object):
    """gpucluster.ops gpu_operator_values filter."""

    def filters(self):
        return {"gpu_operator_values": gpu_operator_values}
