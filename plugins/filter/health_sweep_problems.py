# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: health_sweep_problems
short_description: What is wrong with the health sweep's variables, on every host at once
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - The check of C(playbooks/health_sweep.yml)'s variables for all its hosts in one task, before any node is
    checked (a check task per host costs the controller more than a node's check does).
  - One message per bad variable of each host, naming the host, the variable and its value (as JSON) and what it
    must be - C(health_sweep_level), C(health_sweep_drain), C(health_sweep_max_out_of_service),
    C(health_sweep_method), C(health_sweep_fanout), C(health_sweep_expected), C(health_sweep_groups) and
    C(health_sweep_from_dir) (a directory on this machine); an empty list when all are good.
positional: _input, hostvars, pinnable
options:
  _input:
    description: The inventory names of the hosts to check (the play's hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  pinnable:
    description: The versions C(health_sweep_expected) may pin (the operations role's pinnable versions).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Check the sweep's variables on every host
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('; ') }}"
  vars:
    __problems: "{{ ansible_play_hosts_all | gpucluster.ops.health_sweep_problems(hostvars, ['driver_version']) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: The messages, each starting with C(host NAME:); empty when every host's variables are good.
  type: list
  elements: str
"""

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _health_sweep


def health_sweep_problems(hosts, hostvars, pinnable):
    """Every host's problems, in the order of ``hosts`` (plugin_utils/_health_sweep.py: problems)."""
    found = []
    for host in hosts or []:
        found += _health_sweep.problems(host, hostvars[host], list(pinnable or []))
    return found


class FilterModule(object):
    """gpucluster.ops health_sweep_problems filter."""

    def filters(self):
        return {"health_sweep_problems": health_sweep_problems}
