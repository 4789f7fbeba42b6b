# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_job_config
short_description: The config of the gpu-job command, from the cluster's GPUs, partitions, teams and datasets
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - "Builds what the user_tools role writes to C(/etc/gpucluster/gpu-job.json) for C(bin/gpu-job): each partition's
    node types (GPU type, GPUs per node, how many nodes), its default and maximum time, the teams with their limits,
    each user's teams and default team, the dataset catalogue and the container runtime."
  - The nodes and partitions are those of P(gpucluster.ops.slurm_cluster_gpus#filter), the data slurm.conf is
    rendered from; the teams and users those of P(gpucluster.ops.team_quotas#filter).
  - Fails naming the variable and the value for a bad dataset name or path, a runtime other than podman, and a time
    that is not a duration (a bare number is refused, as everywhere in the collection).
positional: partitions, quota
options:
  _input:
    description: The result of P(gpucluster.ops.slurm_cluster_gpus#filter), with its partitions.
    type: dict
    required: true
  partitions:
    description: The C(slurm_partitions) list (for C(default), C(max_time) and C(default_time)).
    type: list
    elements: dict
    required: true
  quota:
    description: The result of P(gpucluster.ops.team_quotas#filter) (its C(teams) and C(users)).
    type: dict
    required: true
  datasets:
    description: Dataset name to its absolute path on the GPU nodes (C(user_tools_datasets)); mounted read-only.
    type: dict
    default: {}
  runtime:
    description: The container runtime jobs run with.
    type: str
    choices: [podman]
    default: podman
  runtime_args:
    description: Extra arguments of C(podman run) (C(user_tools_container_args)), such as the GPU devices.
    type: list
    elements: str
    default: []
  default_time:
    description: A job's time limit when neither C(--time) nor the partition's C(default_time) gives one.
    type: str
    default: 1h
  switches_wait:
    description: How long a multi-node job waits for nodes under one leaf switch (C(--switches=1@<wait>)).
    type: str
    default: 30m
  topology:
    description: Whether Slurm knows the fabric (C(slurm_fabric)), so that C(--switches) means something.
    type: bool
    default: false
  helper:
    description: The job-step program on the compute nodes (C(bin/gpu-job-container)) that adds the allocated GPUs.
    type: str
    default: /usr/local/lib/gpu-job/bin/gpu-job-container
  cdi_spec:
    description: The compute nodes' CDI spec (the C(container_toolkit) role's C(container_toolkit_cdi_spec)).
    type: str
    default: /etc/cdi/nvidia.yaml
  nccl_conf:
    description: The compute nodes' NCCL config, mounted read-only at C(/etc/nccl.conf) where a node has it.
    type: str
    default: /etc/nccl.conf
  storage_opts:
    description: The C(podman --storage-opt) of every job, such as the node's site image store (C(vfs.imagestore=/path)).
    type: list
    elements: str
    default: []
  user_store:
    description: The directory of the users' own image stores on the compute nodes (C(<dir>/<uid>)).
    type: str
    default: /var/lib/gpucluster/containers/users
  log_dir:
    description: Where job output goes (C(~) is the user's home directory); C(<log_dir>/<job id>.out).
    type: str
    default: ~/gpu-job-logs
  state_dir:
    description: The team_quota role's state directory (the budget reset stamps), when the login node has it.
    type: str
    default: /var/lib/gpucluster/team-quota
  reset_on_calendar:
    description:
      - The team_quota role's C(team_quota_reset_on_calendar) where the inventory sets it (period to OnCalendar).
      - Without it a budget resets at the period's start (the role's default timers), and C(gpu-job) says that date.
    type: dict
    default: {}
seealso:
  - plugin: gpucluster.ops.slurm_cluster_gpus
    plugin_type: filter
  - plugin: gpucluster.ops.team_quotas
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Render the gpu-job config
  ansible.builtin.copy:
    content: "{{ __cluster | gpucluster.ops.gpu_job_config(slurm_partitions, __quota, datasets=user_tools_datasets) | to_nice_json }}"
    dest: /etc/gpucluster/gpu-job.json
    mode: "0644"
  vars:
    __cluster: "{{ groups['slurm_compute'] | gpucluster.ops.slurm_cluster_gpus(hostvars, partitions=slurm_partitions, groups=groups) }}"
    __quota: "{{ team_quota_teams | gpucluster.ops.team_quotas(team_quota_gpu_types) }}"
"""

RETURN = r"""
_value:
  description: The config, written as JSON.
  type: dict
  contains:
    version:
      description: The config format's version (1).
      type: int
    partitions:
      description: Per partition C(name), C(default), C(max_time_s), C(default_time_s) and C(node_types).
      type: list
      elements: dict
      sample: [{name: batch, default: true, max_time_s: 259200, default_time_s: 7200,
                node_types: [{gpu_type: h100, gpus_per_node: 8, nodes: 32}]}]
    teams:
      description: Per team C(name), C(max_concurrent), C(gpu_hours), C(period), C(gpu_types), C(partitions).
      type: list
      elements: dict
    users:
      description: User name to C(default_team) and C(teams).
      type: dict
    datasets:
      description: Dataset name to path.
      type: dict
    runtime:
      description: C(name) and C(args) of the container runtime.
      type: dict
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_job import JobError, build_config
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(JobError, "gpu_job_config")
def gpu_job_config(cluster, partitions, quota, datasets=None, runtime="podman", runtime_args=None, default_time="1h",
                   switches_wait="30m", topology=False, log_dir="~/gpu-job-logs",
                   state_dir="/var/lib/gpucluster/team-quota", reset_on_calendar=None,
                   helper="/usr/local/lib/gpu-job/bin/gpu-job-container", cdi_spec="/etc/cdi/nvidia.yaml",
                   nccl_conf="/etc/nccl.conf", storage_opts=None, user_store="/var/lib/gpucluster/containers/users"):
    """Return the gpu-job config for ``cluster`` (slurm_cluster_gpus) and ``quota`` (team_quotas)."""
    quota = quota or {}
    return build_config(cluster, partitions, quota.get("teams") or [], quota.get("users") or [], datasets=datasets,
                        runtime=runtime, runtime_args=runtime_args, default_time=default_time,
                        switches_wait=switches_wait, topology=topology, log_dir=log_dir, state_dir=state_dir,
                        reset_on_calendar=reset_on_calendar, prices=quota.get("prices"),
                        currency=quota.get("currency") or "EUR",
                        gpu_types=[t[len("gres/gpu:"):] for t in quota.get("tres") or [] if t.startswith("gres/gpu:")],
                        helper=helper, cdi_spec=cdi_spec, nccl_conf=nccl_conf, storage_opts=storage_opts,
                        user_store=user_store)


class FilterModule(object):
    """gpucluster.ops gpu_job_config filter."""

    def filters(self):
        return {"gpu_job_config": gpu_job_config}
