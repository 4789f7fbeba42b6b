#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health
short_description: Check the health of a GPU node and fail at a chosen severity
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Runs the node health checks of gpucluster.ops (the same code as the C(gpucluster-health) command) on the
    target, covering GPU count and model, driver version, NVML, GPUs fallen off the bus, persistence and ECC mode, ECC errors,
    retired pages, row remapping, NVLink, PCIe links, temperatures, power, clock event reasons, Xid and SXid events,
    InfiniBand ports and link flaps, fabric manager, and at the deep level DCGM diagnostics and NCCL bandwidth.
  - Each finding has a stable code, a severity, the GPU or port it concerns and a suggested action.
  - The checks only read the node. At the V(standard) and V(deep) levels with O(use_state=true), a normal run saves
    the error counters it read to the config's C(state_file), so the next run can compare; in check mode the module
    reads and compares the saved counters but writes nothing (RV(notes) says where they would have been saved).
options:
  level:
    description:
      - V(quick) runs no load (one C(nvidia-smi -q -x), one C(nvlink -s), the kernel log); V(standard) adds error
        counters compared with the previous run; V(deep) adds C(dcgmi diag) and C(all_reduce_perf).
    type: str
    choices: [quick, standard, deep]
    default: quick
  expected:
    description:
      - What the node should have; keys include C(gpu_count), C(gpu_model), C(driver_version), C(cuda_version),
        C(nvlinks_per_gpu), C(nvswitch), C(ib_port_count), C(ib_rate_gbps), C(ib_link_layer), C(persistence_mode),
        C(ecc_mode), C(mig_mode), C(pcie_width), C(pcie_gen).
      - Without them, only what the checker can judge alone is reported (errors, lost GPUs, pending remaps, down links).
    type: dict
    default: {}
  thresholds:
    description: Overrides of the default thresholds (docs/health-checks.md lists them), such as C(gpu_temp_margin_c) or C(nccl_busbw_min_gbps).
    type: dict
    default: {}
  xid:
    description: Xid handling, C(ignore) (list of codes) and C(window_s) (seconds back in the kernel log).
    type: dict
    default: {}
  sources:
    description:
      - Where the tools and files are, such as C(nvidia_smi), C(sys_class_infiniband), C(ibstat) and C(kernel_log)
        (V(journal), V(dmesg) or C(file:/path)).
    type: dict
    default: {}
  config_file:
    description: A checker config file on the node (JSON or YAML); the options above override its values.
    type: path
  from_dir:
    description: Replay a bundle captured with C(gpucluster-health --collect) from this directory on the node.
    type: path
  fail_on:
    description:
      - When to fail the task. V(error) fails on errors; V(unknown) also when an input could not be read;
        V(warning) on anything above ok; V(never) only reports.
    type: str
    choices: [warning, error, unknown, never]
    default: error
  use_state:
    description: Read and save error counters between runs (standard and deep levels) in the config's C(state_file).
    type: bool
    default: true
extends_documentation_fragment:
  - gpucluster.ops.attributes.node_reader
attributes:
  check_mode:
    support: full
    details: The checks run the same; the error counters are read but not saved.
notes:
  - Commands run with C(LC_ALL=C) under C(timeout) so that a hung C(nvidia-smi) cannot hang the play.
seealso:
  - module: gpucluster.ops.gpu_facts
"""

EXAMPLES = r"""
- name: Check the GPU nodes against the inventory
  gpucluster.ops.gpu_health:
    expected:
      gpu_count: 8
      gpu_model: NVIDIA H100 80GB HBM3
      driver_version: "550"
      nvlinks_per_gpu: 18
      nvswitch: true
      ib_port_count: 8
      ib_rate_gbps: 400
  register: health

- name: Report without failing
  gpucluster.ops.gpu_health:
    config_file: /etc/gpucluster/health.json
    fail_on: never
  register: health

- name: Show the findings
  ansible.builtin.debug:
    msg: "{{ health.findings | map(attribute='code') | list }}"
"""

RETURN = r"""
status:
  description: The worst severity found (V(ok), V(info), V(warning), V(error) or V(unknown)).
  returned: always
  type: str
  sample: error
exit_code:
  description: What the C(gpucluster-health) command would exit with (0 ok, 1 warning, 2 error, 3 unknown).
  returned: always
  type: int
  sample: 2
findings:
  description: The findings, worst first.
  returned: always
  type: list
  elements: dict
  contains:
    check: {description: The check that made it., type: str, returned: always, sample: memory}
    code: {description: Stable fault code., type: str, returned: always, sample: GPU-ROW-REMAP-PENDING}
    severity: {description: "One of ok, info, warning, error or unknown.", type: str, returned: always, sample: error}
    target: {description: "The GPU, port or device concerned (V(node) for the node).", type: str, returned: always,
             sample: gpu3}
    message: {description: What is wrong., type: str, returned: always, sample: GPU 3 has row remappings pending}
    action: {description: What to do about it., type: str, returned: always, sample: reset the GPU}
gpus:
  description: The GPUs seen, with C(index), C(bus_id), C(uuid), C(name), C(serial) and C(vbios_version).
  returned: always
  type: list
  elements: dict
unreadable:
  description: Parts of tool output that could not be read, as C({input, detail}).
  returned: always
  type: list
  elements: dict
node:
  description: The node's name (the config's C(node), or the short host name).
  returned: always
  type: str
  sample: gpu01
level:
  description: The level that ran.
  returned: always
  type: str
  sample: quick
source:
  description: Where the inputs came from, V(live) or C(replay of <directory>).
  returned: always
  type: str
  sample: live
checked_at:
  description: When the inputs were read (ISO 8601, UTC).
  returned: always
  type: str
  sample: "2026-12-01T16:50:00Z"
driver_version:
  description: The NVIDIA driver version nvidia-smi reported, or null when it could not be read.
  returned: always
  type: str
  sample: "550.127.05"
missing_inputs:
  description: The inputs a replayed bundle does not have.
  returned: always
  type: list
  elements: str
notes:
  description: Remarks on the run, such as inputs nothing expects that could not be read, or where check mode would
    have saved the counters.
  returned: always
  type: list
  elements: str
tool_calls:
  description: How many commands the run started.
  returned: always
  type: int
  sample: 3
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _health

# The worst severities that fail the task for each fail_on choice.
FAILING = {
    "warning": ("warning", "error", "unknown"),
    "error": ("error",),
    "unknown": ("error", "unknown"),
    "never": (),
}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type="str", choices=["quick", "standard", "deep"], default="quick"),
            expected=dict(type="dict", default={}),
            thresholds=dict(type="dict", default={}),
            xid=dict(type="dict", default={}),
            sources=dict(type="dict", default={}),
            config_file=dict(type="path"),
            from_dir=dict(type="path"),
            fail_on=dict(type="str", choices=["warning", "error", "unknown", "never"], default="error"),
            use_state=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    overrides = {key: params[key] for key in ("expected", "thresholds", "xid", "sources") if params[key]}
    try:
        config = _health.load_config(params["config_file"], overrides)
    except (ValueError, IOError, OSError) as error:
        module.fail_json(msg="gpu_health: bad configuration: %s" % error)

    def run_command(argv, timeout):
        return module.run_command(["timeout", str(int(timeout))] + list(argv),
                                  environ_update={"LC_ALL": "C", "LANG": "C"})

    try:
        result, _runner = _health.run(config, level=params["level"], from_dir=params["from_dir"],
                                      runner=_health.Runner(run_command), use_state=params["use_state"],
                                      write_state=not module.check_mode)
    except (ValueError, IOError, OSError) as error:
        module.fail_json(msg="gpu_health: %s" % error)
    result["changed"] = False
    if result["status"] in FAILING[params["fail_on"]]:
        worst = [f for f in result["findings"] if f["severity"] == result["status"]]
        module.fail_json(msg="%s: %s: %s" % (config["node"], result["status"],
                                             "; ".join("%s %s: %s" % (f["code"], f["target"], f["message"])
                                                       for f in worst)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
