#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: health_fanout
short_description: Run the health sweep's probe on every node reached by ssh, all at once from the controller
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - An action that runs on the controller only, once for the whole sweep (C(run_once)); it changes nothing on the
    nodes. C(playbooks/health_sweep.yml) uses it as its fast path.
  - Starts one C(ssh) per node, as many at a time as Ansible's C(forks), each running O(script) (the probe of
    C(roles/operations/tasks/health_sweep_node.yml)) with the host's Python, and builds each node's record with
    P(gpucluster.ops.health_sweep_record#filter), so the fleet report is the same as when each node is checked by
    its own tasks. Per node it costs the controller one ssh client instead of Ansible's per-host tasks.
  - The ssh command line is the one Ansible's ssh connection would use for the host (its C(ansible_host),
    C(ansible_port), C(ansible_user), C(ansible_ssh_private_key_file), C(ansible_ssh_common_args),
    C(ansible_ssh_extra_args), C(ssh_args), C(host_key_checking) and C(timeout), from the inventory and the
    configuration), with C(BatchMode=yes) and without a ControlPersist master left behind.
  - Leaves to the playbook's own tasks, naming each in RV(by_task) with the reason in RV(why_by_task), every host it
    cannot check the same way - a connection other than ssh, a password or a key in a variable, become, a bundle
    to replay (C(health_sweep_from_dir)), C(health_sweep_method=module), the standard or deep level in check mode -
    and every node whose probe found no checker installed or printed no answer (the module checks those).
  - A node ssh cannot reach (ssh exits 255) gets a record that says unreachable, as the playbook's own tasks give it;
    a node whose probe runs past O(timeout_s) gets a record with an error. Neither reads as OK.
options:
  hosts:
    description: The inventory names of the hosts to check (the play's hosts).
    type: list
    elements: str
    default: []
  script:
    description: The probe's Python source (C(lookup('ansible.builtin.file', 'health_sweep_probe.py'))).
    type: str
    required: true
  pins:
    description: The versions a pin may name (the operations role's pinnable versions).
    type: list
    elements: str
    default: []
  install_dir:
    description: Where the checker is for a host without C(health_check_install_dir) (the health_check role's default).
    type: str
    required: true
  config_file:
    description: The checker's config for a host without C(health_check_config_file) (the role's default).
    type: str
    required: true
  timeout_s:
    description: How long one node's probe may run, ssh included, before its record says so.
    type: int
    default: 3600
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin; needs C(ssh) there.
  check_mode:
    support: full
    description: It only reads; in check mode at the standard and deep levels it leaves the nodes to the module.
  diff_mode:
    support: none
    description: Changes nothing, so has no diff.
"""

EXAMPLES = r"""
- name: Run the installed health checker on every node reached by ssh
  gpucluster.ops.health_fanout:
    hosts: "{{ ansible_play_hosts_all }}"
    script: "{{ lookup('ansible.builtin.file', 'health_sweep_probe.py') }}"
    pins: [driver_version, cuda_version, gpu_count, gpu_model]
    install_dir: /usr/local/lib/gpucluster-health
    config_file: /etc/gpucluster/health.json
  delegate_to: localhost
  run_once: true
  register: fanout
"""

RETURN = r"""
records:
  description: The record of each node checked here, by inventory name (as P(gpucluster.ops.health_sweep_record#filter) gives it).
  type: dict
  returned: always
by_task:
  description: The hosts left to the playbook's own tasks, in the order of O(hosts).
  type: list
  elements: str
  returned: always
why_by_task:
  description: Why each host of RV(by_task) is there.
  type: dict
  returned: always
seconds:
  description: Each checked node's wall time, ssh included, in seconds.
  type: dict
  returned: always
forks:
  description: How many nodes were checked at a time (Ansible's C(forks)).
  type: int
  returned: always
ssh_cpu_s:
  description: The CPU seconds this machine's ssh clients took for all the nodes (user and system).
  type: float
  returned: always
"""
