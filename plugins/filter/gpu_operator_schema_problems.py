# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_operator_schema_problems
short_description: Where rendered GPU Operator objects or a cluster's ClusterPolicy CRD break the chart's CRD schema
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - With O(_input) the objects C(helm template) rendered, validates each ClusterPolicy against the chart's CRD
    (O(crd)) structurally, as the API server would take it (a field the schema does not know, which the API server
    drops without an error; a wrong type; a value outside an enum; a missing required field). No ClusterPolicy
    rendered is a problem too.
  - With O(live_crd) instead (a CRD read back from the cluster after the role applied the chart's), says where it is
    not O(crd), which may then be any CRD of the chart (other served or stored versions, or the chart CRD's field
    paths the cluster's lacks, as an old CRD that nothing upgraded). With lists for both, each CRD of O(crd) is looked
    up by name among O(live_crd); one the cluster lacks is a problem too.
  - Returns the problems as messages; an empty list when there are none.
positional: crd
options:
  _input:
    description: The rendered objects (C(helm template) output through C(from_yaml_all)); ignored with O(live_crd).
    type: list
    elements: raw
    required: true
  crd:
    description: The chart's ClusterPolicy CRD (C(helm show crds)); with O(live_crd), any CRD of the chart, or a list.
    type: raw
    required: true
  live_crd:
    description: The cluster's CRD of the same name, read back with C(kubernetes.core.k8s_info), or a list of them.
    type: raw
  registry:
    description: The site registry; every C(image) of the rendered objects must be on it (a container's full image).
    type: str
    default: ""
seealso:
  - plugin: gpucluster.ops.gpu_operator_values
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Validate the rendered ClusterPolicy
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('; ') }}"
  vars:
    __problems: "{{ __rendered.stdout | ansible.builtin.from_yaml_all | list | gpucluster.ops.gpu_operator_schema_problems(__crd) }}"
"""

RETURN = r"""
_value:
  description: The problems, each naming the field path and the value.
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_operator import (
    GpuOperatorError, crd_schema, foreign_images, live_crd_problems, schema_problems)
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(GpuOperatorError, "gpu_operator_schema_problems")
def gpu_operator_schema_problems(objects, crd, live_crd=None, registry=""):
    """Problems of the rendered ClusterPolicy objects against ``crd``, or of ``live_crd`` against it."""
    if isinstance(live_crd, list):
        live = {c.get("metadata", {}).get("name"): c for c in live_crd if isinstance(c, dict)}
        problems = []
        for expected in crd if isinstance(crd, list) else [crd]:
            name = expected.get("metadata", {}).get("name")
            problems += live_crd_problems(expected, live[name]) if name in live else ["the cluster has no %s" % name]
        return problems
    if live_crd is not None:
        return live_crd_problems(crd, live_crd)
    policies = [o for o in objects or [] if isinstance(o, dict) and o.get("kind") == "ClusterPolicy"]
    if not policies:
        return ["the chart rendered no ClusterPolicy"]
    schema = crd_schema(crd)
    problems = []
    for policy in policies:
        name = policy.get("metadata", {}).get("name", "?")
        problems += ["ClusterPolicy %s: %s" % (name, p) for p in schema_problems(policy, schema)]
    if registry:
        problems += ["%s is not on the site registry %s (gpu_operator_registry)" % (image, registry)
                     for image in foreign_images(objects, registry)]
    return problems


class FilterModule(object):
    """gpucluster.ops gpu_operator_schema_problems filter."""

    def filters(self):
        return {"gpu_operator_schema_problems": gpu_operator_schema_problems}
