# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pci_devices
short_description: Parse C(lspci -n) output into devices
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Turns the lines of C(lspci -n) (or C(lspci -n -d 10de:)) into one dict per device with its slot, class, vendor and
    device id, lower-case hex. Lines that are not device lines are skipped.
options:
  _input:
    description: The output of C(lspci -n), as a string or a list of lines.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Count the NVIDIA GPUs
  ansible.builtin.debug:
    msg: "{{ lspci.stdout | gpucluster.ops.pci_devices | selectattr('vendor', 'equalto', '10de')
             | selectattr('class', 'in', ['0300', '0302']) | list | length }}"
"""

RETURN = r"""
_value:
  description: The devices.
  type: list
  elements: dict
  contains:
    slot: {description: PCI address as lspci prints it., type: str, sample: "0000:18:00.0"}
    class: {description: "Class code (0302 3D controller, 0680 bridge).", type: str, sample: "0302"}
    vendor: {description: Vendor id., type: str, sample: 10de}
    device: {description: Device id., type: str, sample: "2330"}
"""

import re

from ansible.errors import AnsibleFilterError

# "18:00.0 0302: 10de:2330 (rev a1)" or "0000:18:00.0 0302: 10de:2330"
_LINE = re.compile(r"^\s*(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
                   r"(?P<class>[0-9a-fA-F]{4}):\s+(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})")


def pci_devices(text):
    """Return [{slot, class, vendor, device}] for the device lines of lspci -n output."""
    if isinstance(text, (list, tuple)):
        lines = [str(line) for line in text]
    elif isinstance(text, str):
        lines = text.splitlines()
    else:
        raise AnsibleFilterError("pci_devices expects lspci -n output as a string or list of lines, got %r" % (text,))
    devices = []
    for line in lines:
        match = _LINE.match(line)
        if match:
            devices.append({key: match.group(key).lower() for key in ("slot", "class", "vendor", "device")})
    return devices


class FilterModule(object):
    """gpucluster.ops pci_devices filter."""

    def filters(self):
        return {"pci_devices": pci_devices}
