#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_report
short_description: Write the fleet health report of a health sweep (JSON, HTML page, RMA list)
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Takes every node's health result, versions and Slurm state as C(playbooks/health_sweep.yml) gathers them and
    writes one report into O(report_dir) on the controller, C(fleet.json), C(fleet.html) (one self-contained page)
    and C(rma.csv); docs/health-sweep.md describes the files.
  - Adds fleet-level findings (check C(fleet), target the inventory host name) to the nodes' own. Version drift
    inside a GPU group, for the driver, CUDA, NCCL, VBIOS, InfiniBand HCA firmware and OFED
    (C(FLEET-DRIFT-DRIVER), C(FLEET-DRIFT-CUDA), C(FLEET-DRIFT-NCCL), C(FLEET-DRIFT-VBIOS), C(FLEET-DRIFT-IB-FW),
    C(FLEET-DRIFT-OFED)), against the node's pin in C(expected) where there is one, else against the group's
    majority. GPU count and model outliers (C(FLEET-GPU-COUNT), C(FLEET-GPU-MODEL)). Unreachable nodes
    (C(FLEET-UNREACHABLE), severity unknown). Nodes drained or down in Slurm (C(FLEET-SLURM-DRAINED), info when the
    health checks drained it, warning otherwise). Nodes whose health check found errors that Slurm still
    schedules on (C(FLEET-ERROR-IN-SERVICE), error). A record that lacks a part (C(FLEET-RECORD-INCOMPLETE),
    unknown).
  - A node out of service in Slurm (down, drained, draining, failing, by anyone, gpucluster.ops' own owners
    included) is never OK; its status is C(drained) when its findings are all OK or info, and RV(summary) counts it
    as C(drained).
  - Compares the findings with the previous report (new, cleared and persisting, by node, code and target).
  - Runs on the controller (delegate it to C(localhost), with C(run_once)). It never fails on odd records; it fails only
    when O(report_dir) cannot be written, before it writes anything.
options:
  nodes:
    description:
      - Inventory host name to the node's record, C({reachable, error, source, group, expected, versions, slurm,
        result}). C(result) is what C(gpucluster-health --format json) prints or M(gpucluster.ops.gpu_health)
        returns; C(versions) has C(driver_version), C(cuda_version), C(nccl_version), C(ofed_version),
        C(vbios_versions) and C(ib_fw_versions); C(expected) holds the inventory's pins, the same keys in the
        singular, and C(gpu_count), C(gpu_model). docs/health-sweep.md has the full schema.
    type: dict
    required: true
  report_dir:
    description:
      - The directory the report goes into, created when missing (with its parents). Refused, before anything is
        written, when it exists and is not a writable directory.
    type: path
    required: true
  previous:
    description:
      - The previous report's C(fleet.json) to compare with. By default the newest sibling directory of
        O(report_dir) (same parent) holding a C(fleet.json), by name (UTC timestamp names sort in time), then by
        modification time.
    type: path
  options:
    description: What the sweep ran with (level, drain, start time, limits), shown on the page and kept in the JSON.
    type: dict
    default: {}
  rma_codes:
    description:
      - The fault codes whose error findings go into the RMA list. The default is C(GPU-FALLEN-OFF-BUS) (Xid 79 and
        a GPU lost to the driver), C(GPU-ROW-REMAP-FAILURE) (Xid 64), C(GPU-RETIRED-PAGES-LIMIT),
        C(DCGM-DIAG-FAIL) and C(NVSWITCH-SXID-FATAL).
    type: list
    elements: str
  created_at:
    description: The report's time (ISO 8601, UTC); by default now. Fixed times make reports comparable in tests.
    type: str
extends_documentation_fragment:
  - gpucluster.ops.attributes.node_reader
attributes:
  check_mode:
    support: full
    details: Builds the whole report and returns it, and writes nothing; RV(files) says where it would write.
seealso:
  - module: gpucluster.ops.gpu_health
"""

EXAMPLES = r"""
- name: Write the fleet report
  gpucluster.ops.fleet_report:
    nodes: "{{ sweep_records }}"
    report_dir: "{{ playbook_dir }}/reports/{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
    options:
      level: quick
      drain: false
  delegate_to: localhost
  run_once: true
  register: fleet

- name: Show the nodes that are not OK
  ansible.builtin.debug:
    msg: "{{ fleet.table }}"
  run_once: true
"""

RETURN = r"""
report_dir:
  description: The report's directory (absolute).
  returned: always
  type: str
  sample: /srv/ops/reports/20261201T170000Z
files:
  description: The files written (in check mode, that would be written).
  returned: always
  type: dict
  contains:
    json: {description: The report document., type: str, returned: always, sample: /srv/ops/reports/20261201T170000Z/fleet.json}
    html: {description: The page., type: str, returned: always, sample: /srv/ops/reports/20261201T170000Z/fleet.html}
    rma_csv: {description: The RMA list., type: str, returned: always, sample: /srv/ops/reports/20261201T170000Z/rma.csv}
summary:
  description:
    - How many nodes have each status, C(ok) + C(drained) + C(warning) + C(error) + C(unknown) = C(nodes). C(ok)
      is a node whose worst finding is OK or info and that Slurm schedules on (or whose Slurm state is not known);
      C(drained) one whose findings are OK or info but that is out of service in Slurm. Unreachable nodes are also
      unknown.
  returned: always
  type: dict
  sample: {nodes: 400, ok: 395, drained: 1, warning: 2, error: 1, unknown: 1, unreachable: 1}
service:
  description:
    - How many nodes Slurm schedules on (C(in_service)), does not (C(out_of_service)), and has no state of
      (C(no_slurm_state)); they add up to the nodes.
  returned: always
  type: dict
  sample: {in_service: 397, out_of_service: 3, no_slurm_state: 0}
table:
  description:
    - One line per node that is not OK, worst first (host, status, the codes of its warnings and worse and
      C(FLEET-SLURM-DRAINED)), then C(N nodes OK, I of N in service) (and how many have no Slurm state).
  returned: always
  type: list
  elements: str
  sample: ["gpu017 ERROR GPU-ROW-REMAP-FAILURE FLEET-SLURM-DRAINED", "gpu101 DRAINED FLEET-SLURM-DRAINED",
           "395 nodes OK, 397 of 400 in service"]
rma:
  description: The RMA list, one entry per GPU and fault code, C({node, gpu_index, serial, uuid, bus_id, code, target,
    evidence}).
  returned: always
  type: list
  elements: dict
diff:
  description:
    - The findings against the previous report, C(new), C(cleared) and C(persisting) (lists of findings with
      C(node)), their C(counts), C(previous) (the path compared with, or null) and C(compared).
  returned: always
  type: dict
fleet_findings:
  description: The fleet-level findings (check C(fleet)), worst first per node.
  returned: always
  type: list
  elements: dict
notes:
  description: Remarks, such as a previous report that could not be read.
  returned: always
  type: list
  elements: str
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet
from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet_html


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="dict", required=True),
            report_dir=dict(type="path", required=True),
            previous=dict(type="path"),
            options=dict(type="dict", default={}),
            rma_codes=dict(type="list", elements="str"),
            created_at=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    report_dir = os.path.abspath(params["report_dir"])
    problem = _fleet.report_dir_problem(report_dir)
    if problem:
        module.fail_json(msg="fleet_report: report_dir: %s" % problem, report_dir=report_dir)
    notes = []
    previous_path = params["previous"] or _fleet.find_previous(report_dir)
    previous = None
    if previous_path:
        previous, why = _fleet.load_previous(previous_path)
        if why:
            notes.append(why + "; the diff compares with nothing")
    created_at = params["created_at"] or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = _fleet.build(params["nodes"], options=params["options"], rma_codes=params["rma_codes"],
                          previous=previous, previous_path=previous_path if previous is not None else None,
                          created_at=created_at)
    report["notes"] = notes
    files = {"json": os.path.join(report_dir, _fleet.REPORT_FILE), "html": os.path.join(report_dir, _fleet.HTML_FILE),
             "rma_csv": os.path.join(report_dir, _fleet.RMA_FILE)}
    texts = {"json": _fleet.to_json(report), "html": _fleet_html.render(report), "rma_csv": _fleet.rma_csv(report)}
    if module.check_mode:
        notes.append("check mode: nothing written")
    else:
        try:
            os.makedirs(report_dir, exist_ok=True)
            for key in ("rma_csv", "html", "json"):
                _fleet.write_atomic(files[key], texts[key])
        except OSError as error:
            module.fail_json(msg="fleet_report: writing %s: %s" % (report_dir, error), report_dir=report_dir)
    module.exit_json(changed=True, report_dir=report_dir, files=files, summary=report["summary"],
                     service=report["service"],
                     table=_fleet.table(report), rma=report["rma"], diff=report["diff"],
                     fleet_findings=report["fleet_findings"], notes=notes)


if __name__ == "__main__":
    main()
