# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: duration_seconds
short_description: Read a duration a person wrote (C(30m), C(2h), C(1d), C(00:30:00)) as seconds
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - The collection's one reading of durations in inventory and on the command line, the same as its modules'
    (C(30m), C(10min), C(2h), C(1d), C(1h30m), C(45s), or a Slurm time such as C(00:30:00) or C(2-00:00:00)).
  - A bare number (C(30) or C("30")) is refused, as everywhere in the collection (Slurm reads it as minutes and a
    person may mean seconds). C(0) alone is taken.
  - Fails with a message that names O(where) and the value, so a playbook's check of its variables needs no message
    of its own.
positional: _input, where
options:
  _input:
    description: The duration.
    type: raw
    required: true
  where:
    description: "What the value is, for the error message (such as C(host gpu01: maintenance_drain_deadline))."
    type: str
    default: the duration
"""

EXAMPLES = r"""
- name: Wait for jobs at most this long
  ansible.builtin.set_fact:
    deadline_s: "{{ maintenance_drain_deadline | gpucluster.ops.duration_seconds('maintenance_drain_deadline') }}"
  # '2h' -> 7200
"""

RETURN = r"""
_value:
  description: The duration in seconds.
  type: int
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError, parse_duration
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors


@filter_errors(SpecError)
def duration_seconds(value, where="the duration"):
    """Seconds of ``value``; raises (as AnsibleFilterError) naming ``where`` and the value."""
    if value is None:
        raise SpecError("%s is not set: write a duration such as '30m' or '2h'" % where)
    return parse_duration(value, where)


class FilterModule(object):
    """gpucluster.ops duration_seconds filter."""

    def filters(self):
        return {"duration_seconds": duration_seconds}
