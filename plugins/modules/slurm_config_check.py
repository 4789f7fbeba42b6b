#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_config_check
short_description: Check a Slurm configuration directory before it is installed
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads C(slurm.conf) (with its C(Include) files), C(gres.conf), C(topology.conf) and C(cgroup.conf) of a
    directory the way Slurm's parser does, and fails with the list of problems it finds.
  - It checks keys of Slurm 22.05 and 24.11 (case-insensitive) and the values of typed keys (numbers, booleans,
    times, enumerations, plugin names).
  - It finds malformed hostlists, duplicate node and partition names, and partitions, switches or gres.conf lines
    naming undefined nodes.
  - It finds C(Gres=) without C(GresTypes), non-numeric GRES counts, and gres.conf disagreeing with slurm.conf per
    node.
  - It finds C(TopologyPlugin=topology/tree) without topology.conf, and C(gres/gpu) TRES in use but not in
    C(AccountingStorageTRES).
  - It refuses what slurmctld 22.05 and 24.11 refuse or reset although the type is right, for example no
    C(ClusterName), C(SlurmctldHost) or partition, C(SlurmctldPort) or C(SlurmdPort) outside 1-65535, an
    C(SrunPortRange) Slurm ignores, C(MaxJobCount=0), and node counts of 0.
  - Several of these pass C(scontrol) and start the daemons but misbehave; a partition naming an undefined node kills
    a running slurmctld on C(scontrol reconfigure). Check before installing.
  - The same checks run from a checkout without Ansible as C(bin/slurm-config-check DIR).
  - Read-only.
options:
  path:
    description: Directory holding slurm.conf and its companion files.
    type: path
    required: true
  version:
    description:
      - Slurm version the files are for, C(22.05), C(24.11) or a full version such as C(24.11.5).
      - C(any) accepts what either version accepts.
    type: str
    default: any
  required_tres:
    description: TRES that limits will use (for example C(gres/gpu)); C(AccountingStorageTRES) must track each one.
    type: list
    elements: str
    default: []
  allow_plugins:
    description: Plugin names to accept besides those shipped by Debian's Slurm packages, for example C(switch/hpe_slingshot).
    type: list
    elements: str
    default: []
  fail_on_warnings:
    description: Fail on warnings too (a key set twice, a fabric without a single root, extra GRES in gres.conf).
    type: bool
    default: false
  scontrol_parse:
    description:
      - Also parse slurm.conf with C(SLURM_CONF=PATH/slurm.conf scontrol show hostnames x) and report what scontrol
        prints on stderr (it exits 0 on some errors). Needs C(scontrol) on the target.
    type: bool
    default: false
extends_documentation_fragment:
  - gpucluster.ops.attributes.slurm_reader
notes:
  - The tables of keys and plugins come from probing the parsers of Slurm 22.05.8 (Debian 12) and 24.11.5 (Debian 13).
"""

EXAMPLES = r"""
- name: Check the rendered Slurm configuration
  gpucluster.ops.slurm_config_check:
    path: /etc/slurm/.staging
    version: "{{ slurm_version }}"
    required_tres: [gres/gpu]
    scontrol_parse: true
"""

RETURN = r"""
problems:
  description: Every problem found, errors and warnings, in file and line order.
  returned: always
  type: list
  elements: dict
  contains:
    file:
      description: File name relative to O(path).
      type: str
      sample: slurm.conf
    line:
      description: Line number (of the first physical line of a continued line); 0 for the whole file.
      type: int
      sample: 12
    key:
      description: The key the problem is about.
      type: str
      sample: Gres
    message:
      description: What is wrong and what Slurm would do.
      type: str
      sample: "Gres=gpu:a100:8 needs GresTypes=gpu; without it Slurm shows Gres=(null)"
    severity:
      description: C(error) or C(warning).
      type: str
      sample: error
errors:
  description: Number of problems of severity error.
  returned: always
  type: int
  sample: 0
warnings_count:
  description: Number of problems of severity warning.
  returned: always
  type: int
  sample: 1
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_config_check import (
    check_config_dir, format_problem, normalize_version)
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_conf_parse import problem


def scontrol_problems(module, path):
    """Problems that scontrol's own parse of slurm.conf prints on stderr."""
    scontrol = module.get_bin_path("scontrol", required=True)
    conf = os.path.join(path, "slurm.conf")
    rc, _out, err = module.run_command([scontrol, "show", "hostnames", "x"],
                                       environ_update={"SLURM_CONF": conf, "LC_ALL": "C"})
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    if rc != 0 and not lines:
        lines = ["error: scontrol exited %d" % rc]
    found = []
    for line in lines:
        text = line[len("scontrol: "):] if line.startswith("scontrol: ") else line
        severe = rc != 0 or text.startswith(("error", "fatal")) or "Invalid" in text
        found.append(problem("slurm.conf", 0, "scontrol", text, "error" if severe else "warning"))
    return found


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            version=dict(type="str", default="any"),
            required_tres=dict(type="list", elements="str", default=[]),
            allow_plugins=dict(type="list", elements="str", default=[]),
            fail_on_warnings=dict(type="bool", default=False),
            scontrol_parse=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        version = normalize_version(params["version"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    problems = check_config_dir(params["path"], version, params["required_tres"], params["allow_plugins"])
    if params["scontrol_parse"]:
        problems.extend(scontrol_problems(module, params["path"]))
    errors = [p for p in problems if p["severity"] == "error"]
    warnings = [p for p in problems if p["severity"] == "warning"]
    result = dict(changed=False, problems=problems, errors=len(errors), warnings_count=len(warnings))
    failing = errors + (warnings if params["fail_on_warnings"] else [])
    if failing:
        module.fail_json(msg="%d problem(s) in %s:\n%s" % (len(failing), params["path"], "\n".join(format_problem(p) for p in failing)),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
