# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: sysctl_differ
short_description: Kernel settings whose running value differs from the wanted one
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Takes the registered results of C(sysctl -n KEY) commands run in a loop over the keys, and the wanted settings,
    and returns the keys whose running value differs.
  - Values are compared as whitespace-separated words, so C(4096 87380 6291456) equals the tab-separated form that
    the kernel prints; booleans compare as C(1) and C(0).
positional: wanted
options:
  _input:
    description: The C(results) of a looped C(ansible.builtin.command) task; each has C(item) (the key) and C(stdout).
    type: list
    elements: dict
    required: true
  wanted:
    description: Mapping of sysctl key to wanted value.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Apply the settings that differ
  ansible.builtin.command: sysctl -p /etc/sysctl.d/90-site.conf
  when: "current.results | gpucluster.ops.sysctl_differ({'vm.swappiness': 10}) | length > 0"
"""

RETURN = r"""
_value:
  description: Keys whose running value differs from the wanted value, sorted.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


def _words(value):
    if isinstance(value, bool):
        value = int(value)
    return str(value).split()


def sysctl_differ(results, wanted):
    """Return the sorted keys whose current value differs from the wanted one."""
    if not isinstance(wanted, dict):
        raise AnsibleFilterError("sysctl_differ: the wanted settings must be a mapping, got %r" % (wanted,))
    differ = set()
    for result in results or []:
        if not isinstance(result, dict) or "item" not in result:
            raise AnsibleFilterError("sysctl_differ: %r is not a registered loop result with an 'item'" % (result,))
        key = result["item"]
        if key not in wanted:
            continue
        if _words(result.get("stdout", "")) != _words(wanted[key]):
            differ.add(key)
    return sorted(differ)


class FilterModule(object):
    """gpucluster.ops sysctl_differ filter."""

    def filters(self):
        return {"sysctl_differ": sysctl_differ}
