#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: ib_facts
short_description: InfiniBand and RoCE adapters and ports of a node as facts
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads C(/sys/class/infiniband) (no command needed), or C(ibstat) when that tree is absent, and returns every
    adapter with its ports, each with its state, physical state, rate, link layer and error counters.
  - The infiniband role uses it to verify ports after a run; the health checks use the same parser.
options:
  sys_class_infiniband:
    description: Where the sysfs tree is.
    type: path
    default: /sys/class/infiniband
  ibstat:
    description: The ibstat program, used when the sysfs tree does not exist.
    type: str
    default: ibstat
extends_documentation_fragment:
  - gpucluster.ops.attributes.node_reader
  - gpucluster.ops.attributes.facts
"""

EXAMPLES = r"""
- name: Read the InfiniBand ports
  gpucluster.ops.ib_facts:

- name: Check that every InfiniBand port is up at 400 Gb/s
  ansible.builtin.assert:
    that:
      - ansible_facts['gpucluster_ib_ports'] | selectattr('link_layer', 'equalto', 'InfiniBand')
        | rejectattr('state', 'equalto', 'Active') | list | length == 0
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node's RDMA adapters.
  returned: always
  type: dict
  contains:
    gpucluster_ib_devices:
      description: Adapters with their ports (C(name), C(type), C(fw_ver), C(ports)).
      type: list
      elements: dict
      returned: always
    gpucluster_ib_ports:
      description: Every port flattened, with C(device), C(port), C(state), C(physical_state), C(rate_gbps),
        C(link_layer).
      type: list
      elements: dict
      returned: always
      sample:
        - {device: mlx5_0, port: 1, state: Active, physical_state: LinkUp, rate_gbps: 400.0, link_layer: InfiniBand}
    gpucluster_ib_source:
      description: Where the data came from (the sysfs path or C(ibstat)), or C(none).
      type: str
      returned: always
      sample: /sys/class/infiniband
    gpucluster_ib_error:
      description: Why nothing could be read (empty when all went well).
      type: str
      returned: always
      sample: ""
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _ib


def ib_facts(parsed, source):
    """Build the facts from a parsed sysfs tree or ibstat output (pure function, for tests)."""
    ports = []
    for device in parsed.get("devices") or []:
        for port in device.get("ports") or []:
            ports.append({"device": device.get("name"), "port": port.get("port"), "state": port.get("state"),
                          "physical_state": port.get("physical_state"), "rate_gbps": port.get("rate_gbps"),
                          "link_layer": port.get("link_layer")})
    return {
        "gpucluster_ib_devices": parsed.get("devices") or [],
        "gpucluster_ib_ports": ports,
        "gpucluster_ib_source": source,
        "gpucluster_ib_error": "; ".join(e.get("message", "") for e in parsed.get("errors") or []),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sys_class_infiniband=dict(type="path", default="/sys/class/infiniband"),
            ibstat=dict(type="str", default="ibstat"),
        ),
        supports_check_mode=True,
    )
    root = module.params["sys_class_infiniband"]
    if os.path.isdir(root):
        parsed, source = _ib.read_sys_class_infiniband(root), root
    else:
        ibstat = module.get_bin_path(module.params["ibstat"])
        if ibstat is None:
            missing = {"errors": [{"message": "%s does not exist and %s is not installed" % (root, module.params["ibstat"])}]}
            module.exit_json(changed=False, ansible_facts=ib_facts(missing, "none"), unreadable=[])
        rc, out, err = module.run_command([ibstat], environ_update={"LC_ALL": "C", "LANG": "C"})
        parsed, source = _ib.parse_ibstat(out), "ibstat"
        if rc != 0 and not parsed.get("errors"):
            parsed.setdefault("errors", []).append({"message": "ibstat: rc %d: %s" % (rc, err.strip())})
        if not parsed.get("devices") and not parsed.get("errors") and parsed.get("unreadable"):
            # output that is not ibstat's is no answer: never an empty node without a reason
            parsed["errors"] = [{"message": "ibstat: %s" % "; ".join(parsed["unreadable"])}]
    module.exit_json(changed=False, ansible_facts=ib_facts(parsed, source),
                     unreadable=list(parsed.get("unreadable") or []))


if __name__ == "__main__":
    main()
