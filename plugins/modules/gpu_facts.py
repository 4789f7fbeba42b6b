#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: NVIDIA GPU inventory of a node as facts
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads C(nvidia-smi -q -x), C(nvidia-smi topo -m) and C(nvidia-smi nvlink -s) once each and returns the GPUs as
    facts, with for each GPU its index, minor number (the N of C(/dev/nvidiaN)), PCI bus id, UUID, model, memory,
    persistence, ECC and MIG modes, MIG devices, active NVLinks, NVLink peers, and CPU and NUMA affinity.
  - This is what the Slurm role needs to render C(gres.conf) and what the health checks compare with the inventory.
  - A node without a working driver returns an empty GPU list and the reason in C(gpucluster_gpu_error) instead of
    failing, unless O(fail_on_error) is set.
options:
  nvidia_smi:
    description: The nvidia-smi program to run.
    type: str
    default: nvidia-smi
  topology:
    description: Also read C(nvidia-smi topo -m) for CPU/NUMA affinity and NVLink peers.
    type: bool
    default: true
  nvlink:
    description: Also read C(nvidia-smi nvlink -s) for the number of active links per GPU.
    type: bool
    default: true
  fail_on_error:
    description: Fail when nvidia-smi cannot list the GPUs (driver not loaded, NVML mismatch, no GPU).
    type: bool
    default: false
extends_documentation_fragment:
  - gpucluster.ops.attributes.node_reader
  - gpucluster.ops.attributes.facts
seealso:
  - module: gpucluster.ops.gpu_health
"""

EXAMPLES = r"""
- name: Read the GPUs of every GPU node
  gpucluster.ops.gpu_facts:

- name: Show the GPU models
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpucluster_gpus'] | map(attribute='name') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node's GPUs.
  returned: always
  type: dict
  contains:
    gpucluster_gpus:
      description:
        - One entry per GPU in NVML order.
        - C(nvlinks_active), C(nvlink_peers), C(cpu_affinity) and C(numa_affinity) are null (unknown) when
          C(nvidia-smi nvlink -s) or C(nvidia-smi topo -m) was not run, failed, or did not list the GPU; an empty
          C(nvlink_peers) means the matrix lists no NVLink peer.
      type: list
      elements: dict
      returned: always
      sample:
        - index: 0
          minor_number: 0
          bus_id: "00000000:18:00.0"
          uuid: GPU-5b9e3f2a-0c1d-4e8f-9a7b-1c2d3e4f5a6b
          name: NVIDIA H100 80GB HBM3
          memory_total_mib: 81559
          persistence_mode: true
          ecc_mode: {current: true, pending: true}
          mig_mode: {current: false, pending: false}
          mig_devices: []
          nvlinks_active: 18
          nvlink_peers: [GPU1, GPU2]
          cpu_affinity: 0-55,112-167
          numa_affinity: "0"
    gpucluster_gpu_count:
      description: Number of GPUs listed.
      type: int
      returned: always
      sample: 8
    gpucluster_gpu_driver_version:
      description: NVIDIA driver version, or null.
      type: str
      returned: always
      sample: 550.127.05
    gpucluster_gpu_cuda_version:
      description: Highest CUDA version the driver supports, or null.
      type: str
      returned: always
      sample: "12.4"
    gpucluster_gpu_error:
      description: Why no GPU could be listed (empty when all went well).
      type: str
      returned: always
      sample: ""
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _nvlink, _nvsmi

_KEYS = ("index", "minor_number", "bus_id", "uuid", "name", "serial", "memory_total_mib", "persistence_mode",
         "ecc_mode", "mig_mode", "mig_devices")


def _run(module, argv):
    return module.run_command(["timeout", "60"] + argv, environ_update={"LC_ALL": "C", "LANG": "C"})


def gpu_facts(inventory, topology=None, nvlink=None):
    """Build the facts from parsed nvidia-smi outputs (pure function, for tests)."""
    gpus = []
    links = {}
    for entry in (nvlink or {}).get("gpus") or []:
        links[entry.get("index")] = sum(1 for link in entry.get("links") or [] if link.get("active"))
    matrix = (topology or {}).get("matrix") or {}
    cpu = (topology or {}).get("cpu_affinity") or {}
    numa = (topology or {}).get("numa_affinity") or {}
    for gpu in inventory.get("gpus") or []:
        fact = {key: gpu.get(key) for key in _KEYS}
        name = "GPU%s" % gpu.get("index")
        fact["nvlinks_active"] = links.get(gpu.get("index")) if nvlink is not None else None
        row = matrix.get(name)
        # unknown (None), never "no peers", when the matrix was not read or has no row for this GPU
        fact["nvlink_peers"] = None if row is None else sorted(
            (peer for peer, kind in row.items() if peer.startswith("GPU") and str(kind).startswith("NV")),
            key=lambda p: int(p[3:]) if p[3:].isdigit() else 0)
        fact["cpu_affinity"] = cpu.get(name)
        fact["numa_affinity"] = numa.get(name)
        gpus.append(fact)
    errors = [e.get("message", e.get("kind", "")) for e in inventory.get("errors") or []]
    return {
        "gpucluster_gpus": gpus,
        "gpucluster_gpu_count": len(gpus),
        "gpucluster_gpu_driver_version": inventory.get("driver_version"),
        "gpucluster_gpu_cuda_version": inventory.get("cuda_version"),
        "gpucluster_gpu_error": "; ".join(errors),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            topology=dict(type="bool", default=True),
            nvlink=dict(type="bool", default=True),
            fail_on_error=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    smi = module.params["nvidia_smi"]
    rc, out, err = _run(module, [smi, "-q", "-x"])
    inventory = _nvsmi.parse_query_xml(out)
    if rc != 0 and not inventory.get("errors"):
        inventory["errors"] = [{"kind": "other", "message": "%s -q -x: rc %d: %s" % (
            smi, rc, (err or out).strip().splitlines()[0] if (err or out).strip() else "no output")}]
    if not inventory.get("gpus") and not inventory.get("errors"):
        # rc 0 but nothing readable: never an empty node without a reason (a valid document with no GPU stays so)
        if inventory.get("unreadable"):
            inventory["errors"] = [{"kind": "unreadable", "message": "%s -q -x: %s" % (
                smi, "; ".join(inventory["unreadable"]))}]
        elif not out.strip():
            inventory["errors"] = [{"kind": "unreadable", "message": "%s -q -x printed nothing" % smi}]
    topology = nvlink = None
    if inventory.get("gpus"):
        if module.params["topology"]:
            rc_t, out_t, _err = _run(module, [smi, "topo", "-m"])
            topology = _nvlink.parse_topo_matrix(out_t) if rc_t == 0 else None
        if module.params["nvlink"]:
            rc_n, out_n, _err = _run(module, [smi, "nvlink", "-s"])
            nvlink = _nvlink.parse_nvlink_status(out_n) if rc_n == 0 else None
    facts = gpu_facts(inventory, topology, nvlink)
    if module.params["fail_on_error"] and not facts["gpucluster_gpus"]:
        module.fail_json(msg="no GPU listed by %s: %s" % (smi, facts["gpucluster_gpu_error"] or "no output"),
                         ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts,
                     unreadable=list(inventory.get("unreadable") or []))


if __name__ == "__main__":
    main()
