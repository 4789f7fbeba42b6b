#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_offer
short_description: Ask an apt repository which versions of some packages it offers, without configuring it
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads the package index of one apt repository (NVIDIA's CUDA repository, or a site's mirror of it) into a scratch
    apt state in a temporary directory, with C(apt-get update) and C(apt-cache madison), and returns what it offers
    of O(packages). Nothing of the node's apt configuration, state or cache changes, so a role's preflight can refuse
    a repository that lacks a pinned package before the node is touched.
  - The node's own apt configuration (C(/etc/apt/apt.conf.d), its proxy among it) applies, so the repository is read
    the way the node will read it.
  - The index is read to see what the repository offers; nothing is installed from it. Its signature is checked when
    O(signed_by) names a key file that exists on the node, and not checked otherwise (the key may come with the
    repository, and the install that follows checks it).
  - Fails when the index cannot be read (a wrong URL, an unreachable mirror), naming the URL and apt's error.
options:
  uri:
    description: The repository's URL (C(http://), C(https://) or C(file://)), as in a C(.sources) file.
    type: str
    required: true
  suite:
    description: The suite. A flat repository, as NVIDIA's are, has the suite C(/) and no components.
    type: str
    default: /
  components:
    description: The components of a suite that is not flat.
    type: list
    elements: str
    default: []
  signed_by:
    description: A key file on the node that must have signed the repository, when it exists.
    type: path
  packages:
    description: The package names to ask about.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    support: full
    description: It changes nothing, in check mode or not.
  diff_mode:
    support: none
    description: Nothing changes, so there is no difference to show.
"""

EXAMPLES = r"""
- name: Ask the mirror which driver and fabric manager versions it offers
  gpucluster.ops.apt_offer:
    uri: http://mirror.example.internal/cuda/debian12/x86_64/
    packages: [nvidia-smi, nvidia-fabricmanager-550]
  register: offer
"""

RETURN = r"""
offers:
  description: Package name to the versions the repository offers, newest first (empty for a package it lacks).
  returned: success
  type: dict
  sample: {"nvidia-smi": ["550.90.07-1", "550.54.15-1"], "nvidia-fabricmanager-550": []}
stdout:
  description: C(apt-cache madison)'s output for the repository, as a role parses it for the node's own sources.
  returned: success
  type: str
stdout_lines:
  description: The same, a line each.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.ops.plugins.module_utils._apt_scratch import ScratchApt


def offers_of(lines, packages):
    """``{package: [versions]}`` from apt-cache madison's lines ("name | version | source"), in their order."""
    offers = dict((name, []) for name in packages)
    for line in lines:
        fields = [field.strip() for field in line.split("|")]
        if len(fields) >= 3 and fields[0] in offers and fields[1] not in offers[fields[0]]:
            offers[fields[0]].append(fields[1])
    return offers


def main():
    module = AnsibleModule(
        argument_spec=dict(
            uri=dict(type="str", required=True),
            suite=dict(type="str", default="/"),
            components=dict(type="list", elements="str", default=[]),
            signed_by=dict(type="path"),
            packages=dict(type="list", elements="str", required=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    with ScratchApt(module, params["uri"], params["suite"], params["components"], params["signed_by"]) as apt:
        apt.update()
        rc, out, err = apt.run("apt-cache", ["madison"] + params["packages"])
        # apt-cache madison exits 0 and prints nothing for a package no repository has.
        if rc != 0:
            module.fail_json(msg="apt-cache madison failed on the index of %s: %s" % (params["uri"], err.strip()))
    lines = [line for line in out.splitlines() if "|" in line]
    module.exit_json(changed=False, offers=offers_of(lines, params["packages"]), stdout="\n".join(lines),
                     stdout_lines=lines)


if __name__ == "__main__":
    main()
