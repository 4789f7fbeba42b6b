#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_config_files
short_description: Install Slurm's configuration files as one set, switched atomically
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Writes the files (C(slurm.conf), C(gres.conf), C(topology.conf), C(cgroup.conf)) into a new directory
    C(PATH/.gpucluster/gen-<sha256>), fsyncs them, reads them back, and only then makes them live with one
    C(rename(2)) of the symlink C(PATH/.gpucluster/current). Each C(PATH/<name>) is a symlink to
    C(.gpucluster/current/<name>), made once, so Slurm and its commands read the files at their usual paths.
  - A run killed at any point leaves every file of the old set or every file of the new set live, never a mix; the
    next run finishes the switch.
  - Migrates plain files (what earlier versions of the role wrote) without changing what is live at any moment; what
    is live becomes a generation first, then each file is replaced by its symlink.
  - Files of O(names) not in O(files) are removed after the switch. Old generations are pruned; the current one, the
    applied one and the one before stay.
  - C(PATH/.gpucluster/applied) names the generation the daemons were last told about. O(state=present) reports a
    change while it differs from the current one, so that a run killed after the switch but before its handlers ran
    notifies them again the next time; a handler moves it with O(state=applied) once the daemons re-read the files.
  - O(state=absent) removes the files of O(names) and the generations (a node that stops reading local copies).
options:
  path:
    description: The configuration directory.
    type: path
    default: /etc/slurm
  files:
    description: File name (no directory) to content, for O(state=present).
    type: dict
    default: {}
  names:
    description: Every file name this module manages in O(path); those not in O(files) are removed.
    type: list
    elements: str
    default: [slurm.conf, gres.conf, topology.conf, cgroup.conf]
  state:
    description:
      - C(present) installs O(files); C(applied) records that the daemons re-read the current generation; C(absent)
        removes the files of O(names) and every generation.
    type: str
    choices: [present, applied, absent]
    default: present
  owner:
    description: Owner of the files.
    type: str
    default: root
  group:
    description: Group of the files.
    type: str
    default: root
  mode:
    description: Mode of the files, octal.
    type: str
    default: "0644"
  keep:
    description: Older generations kept besides the current, the applied and the previous one.
    type: int
    default: 1
attributes:
  check_mode:
    support: full
    description: Reports whether it would switch to a new generation or remove files; writes nothing.
  diff_mode:
    support: full
    description: Returns the content of each file that changes or goes, before and after.
notes:
  - The switch is atomic for readers that open a file after it; a daemon that reads several files in one pass
    (slurmd on start or C(SIGHUP)) may, for a switch that falls inside that pass, read files of both sets, as it would
    with any other way of writing them. What stays on disk is always one set.
"""

EXAMPLES = r"""
- name: Install the configuration checked on the controller, every file in one switch
  gpucluster.ops.slurm_config_files:
    path: /etc/slurm
    files: "{{ hostvars[__slurm_controller]['__slurm_files'] }}"
  notify: [Reload slurmd]

- name: Record that slurmd re-read the files (a handler, after the reload)
  gpucluster.ops.slurm_config_files:
    path: /etc/slurm
    state: applied
"""

RETURN = r"""
generation:
  description: The generation now current (C(gen-) and 16 hex digits of the sha256 over the names and contents).
  returned: always
  type: str
  sample: gen-3f2a9c0d1b7e4a55
previous:
  description: The generation current pointed at before, if any.
  returned: always
  type: str
  sample: gen-0a1b2c3d4e5f6789
actions:
  description: What the module did, or would do in check mode; empty when nothing was to do.
  returned: always
  type: list
  elements: str
  sample: ["write generation gen-3f2a9c0d1b7e4a55", "switch current from gen-0a1b2c3d4e5f6789 to gen-3f2a9c0d1b7e4a55"]
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._config_generation import Generations, generation_name


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/slurm"),
            files=dict(type="dict", default={}),
            names=dict(type="list", elements="str", default=["slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"]),
            state=dict(type="str", choices=["present", "applied", "absent"], default="present"),
            owner=dict(type="str", default="root"),
            group=dict(type="str", default="root"),
            mode=dict(type="str", default="0644"),
            keep=dict(type="int", default=1),
        ),
        supports_check_mode=True,
    )
    params = module.params
    files = {str(k): "" if v is None else str(v) for k, v in params["files"].items()}
    bad = [name for name in files if "/" in name or name.startswith(".") or name not in params["names"]]
    if bad:
        module.fail_json(msg="files %s: a name must be one of names (%s), without a directory"
                         % (", ".join(sorted(bad)), ", ".join(params["names"])))
    try:
        mode = int(params["mode"], 8)
        uid = pwd.getpwnam(params["owner"]).pw_uid
        gid = grp.getgrnam(params["group"]).gr_gid
    except (ValueError, KeyError) as exc:
        module.fail_json(msg="owner %s, group %s, mode %s: %s" % (params["owner"], params["group"], params["mode"], exc))
    store = Generations(params["path"], params["names"], mode=mode, uid=uid, gid=gid, keep=params["keep"])
    previous = store.current()
    result = dict(changed=False, previous=previous or "", generation=previous or "", actions=[])

    if params["state"] == "applied":
        if store.current() and store.applied() != store.current():
            result["actions"] = ["mark %s applied" % store.current()]
            result["changed"] = True
            if not module.check_mode:
                store.mark_applied()
        module.exit_json(**result)

    if params["state"] == "absent":
        live = store.live()
        if live or os.path.lexists(store.store):
            result["actions"] = ["remove %s and the generations" % ", ".join(sorted(live) or ["nothing live"])]
            result["changed"] = True
            if module._diff:
                result["diff"] = [dict(before_header=name, after_header=name, before=data.decode("utf-8", "replace"),
                                       after="") for name, data in sorted(live.items())]
            if not module.check_mode:
                store.remove()
        result["generation"] = ""
        module.exit_json(**result)

    actions = store.plan(files)
    result["actions"] = actions
    result["generation"] = generation_name(files)
    if actions:
        result["changed"] = True
        if module._diff:
            live = store.live()
            result["diff"] = [
                dict(before_header=name, after_header=name,
                     before=live[name].decode("utf-8", "replace") if name in live else "",
                     after=files.get(name, ""))
                for name in params["names"] if live.get(name) != (files[name].encode("utf-8") if name in files else None)]
        if not module.check_mode:
            try:
                store.install(files)
            except OSError as exc:
                module.fail_json(msg="%s: %s (what is live is still one whole set: %s)"
                                 % (params["path"], exc, store.current() or "the plain files"), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
