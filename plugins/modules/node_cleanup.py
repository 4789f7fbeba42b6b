#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_cleanup
short_description: Remove old files, job scratch directories, downloaded packages and container images on a node
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Runs a list of cleanup rules on a node, each of one kind. C(files) removes old files below listed directories, or
    with O(rules[].unit=entry) old job scratch directories as a whole. C(package_cache) removes the package
    manager's downloaded packages. C(container_images) removes old container images no container uses.
  - Checks every rule and every path before anything is removed, and fails naming C(rules[i].key) and the value.
    Every listed path must be one of O(allowed_roots) or below one, also after its symlinks are resolved; C(/) is
    always refused, and so is a path that is relative, holds a NUL byte or a C(..) component.
  - A system tree (C(/etc), C(/usr), C(/bin), C(/sbin), C(/lib*), C(/boot), C(/home), C(/root), C(/opt), C(/srv),
    C(/var/lib), C(/var/spool), C(/var/mail), C(/dev), C(/proc), C(/sys), C(/run), C(/snap)), a directory below one
    or holding one (C(/var) holds C(/var/lib)), also after symlinks are resolved, is refused as an allowed root and
    as a rule's path unless the rule sets O(rules[].allow_system_tree). C(/var/lib/systemd/coredump) is not taken
    for a system tree.
  - "Safety of the C(files) and C(package_cache) rules, also against the users who own the directories they clean:
    the walk is by file descriptors, never by path. Each listed path is opened from C(/) to its allowed root and on,
    one directory at a time relative to the one before, never through a symlink (C(O_NOFOLLOW)), so a parent swapped
    for a symlink after the rules were checked is not followed; below it each directory is opened relative to its
    parent and must still be the directory that was looked at, and each file is looked at and unlinked relative to
    its directory's descriptor. A directory swapped for a symlink during the walk is thus never entered and nothing
    outside a listed path is removed, also in check mode, which walks the same way. A symlink may itself be removed
    when old; nothing on another filesystem below a listed path is touched (its C(st_dev) differs), a listed path
    itself is never removed, and a file that a process holds open (C(/proc/*/fd)), or a scratch directory that holds
    one or is a process's working directory, is skipped and returned as C(in_use). A file that vanishes meanwhile is
    not an error."
  - Ages are by modification time (C(mtime)); the access time is not read. Durations are written with their unit,
    such as C(30m), C(12h), C(7d), C(1h30m) or C(00:30:00); a bare number is refused.
  - A rule that could not do all its work (a runtime not installed, a directory that cannot be read, the open files
    that cannot be read) returns its RV(rules[].errors) and makes RV(status) C(unknown); the other rules still run,
    and the task does not fail.
options:
  rules:
    description:
      - The cleanup rules, run in order. Only the keys of a rule's kind may be given.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The rule's name, unique among the rules; it names the rule in the result.
        type: str
        required: true
      kind:
        description:
          - C(files) cleans O(rules[].paths); C(package_cache) the package manager's downloaded packages (Debian
            C(/var/cache/apt/archives/*.deb) and C(partial/), RHEL C(*.rpm) below C(/var/cache/dnf) and
            C(/var/cache/yum), those that exist); C(container_images) the images of O(rules[].runtime).
        type: str
        required: true
        choices: [files, package_cache, container_images]
      paths:
        description:
          - C(files) only, required there. Absolute directories to clean below; each must be one of O(allowed_roots)
            or below one. A path that does not exist is returned in RV(rules[].missing_paths), not an error.
          - A path that is a symlink, or lies below a symlink between its allowed root and itself, is skipped, not
            followed.
        type: list
        elements: path
      allow_system_tree:
        description:
          - C(files) only. Let this rule clean in a system tree (such as C(/home) or C(/var/lib)), and let
            O(allowed_roots) name one. Without it, a path or an allowed root in, or holding, a system tree is
            refused.
        type: bool
        default: false
      age:
        description:
          - What is older than this is removed, a duration such as C(7d). Required for C(files) and
            C(container_images); optional for C(package_cache), where every downloaded package goes without it.
          - For C(files), a file's age is its C(mtime); with O(rules[].unit=entry), the newest C(mtime) of anything
            inside the entry. For C(container_images), the image's creation time as the runtime reports it (when it
            was built, not pulled).
        type: str
      patterns:
        description:
          - C(files) only. Shell globs (fnmatch) on the file name (with O(rules[].unit=entry), on the entry's name);
            a file matching none is kept. Default, every file.
        type: list
        elements: str
      unit:
        description:
          - C(files) only. C(file) removes each file (or symlink) older than O(rules[].age) anywhere below a path;
            directories stay. C(entry) takes each direct child of a path (a job's scratch directory) as a whole and
            removes it when the newest C(mtime) anywhere inside it is older than O(rules[].age); an entry holding an
            open file, a process's working directory or another filesystem is skipped whole.
        type: str
        choices: [file, entry]
        default: file
      runtime:
        description:
          - C(container_images) only, required there. The runtime whose images are cleaned, with its CLI
            (C(docker), C(podman), or C(ctr) for containerd) found on the PATH. A runtime that is not installed is
            an error of the rule.
          - An image that any container uses, running or stopped, is never removed.
        type: str
        choices: [docker, podman, containerd]
      keep:
        description:
          - C(container_images) only. Globs on the image's C(repo:tag) names (C(<none>:<none>) for an image without
            one); an image with a name matching any of them is never removed.
        type: list
        elements: str
      namespace:
        description:
          - C(containerd) only. The containerd namespace; C(k8s.io) is refused (the kubelet manages those images).
            Default C(default).
        type: str
  allowed_roots:
    description:
      - The directories below which the rules may clean. Every O(rules[].paths) entry, and each package cache, must be
        one of them or below one. C(/) is refused, and so is a system tree unless a rule sets
        O(rules[].allow_system_tree).
      - A root's own path is trusted. Its symlinks are resolved when the rules are checked, and the walk then opens
        that directory from C(/) without following a symlink.
    type: list
    elements: path
    default: [/scratch, /tmp, /var/tmp, /var/log, /var/crash, /var/lib/systemd/coredump, /var/cache/apt,
              /var/cache/dnf, /var/cache/yum]
  validate_only:
    description:
      - Check O(rules) and O(allowed_roots) and stop there, looking at no file and running no container runtime (a
        playbook's check of its policy on every node before anything runs). RV(rules) is then empty.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reads everything and returns in RV(rules[].removed) what each rule would remove; removes nothing.
  diff_mode:
    support: full
    description: Returns the paths and images removed (in check mode, that would be), one line each, as the
      C(before); the C(after) is empty. The list is cut after 200 per rule, as RV(rules[].removed) is.
  platform:
    support: full
    platforms: posix
    description: Linux nodes (it reads C(/proc)); run as root, or the open files of other users' processes cannot
      be read and the C(files) rules remove nothing.
notes:
  - A file opened after the scan of C(/proc) and before its removal is not seen as open; the scan is made once per
    run, before the first C(files) or C(package_cache) rule.
  - In check mode, rules whose paths overlap each list what they would remove, so a file may be listed (and counted)
    by two rules; for real, the first rule removes it.
  - Sizes are apparent sizes (C(st_size)); an image's size is what the runtime reports, shared layers counted in
    each image.
"""

EXAMPLES = r"""
- name: Clean old scratch directories, temporary files and core dumps on the GPU nodes
  gpucluster.ops.node_cleanup:
    rules:
      - name: job scratch
        kind: files
        paths: [/scratch/jobs]
        unit: entry
        age: 14d
      - name: old temporary files
        kind: files
        paths: [/tmp, /var/tmp]
        age: 10d
      - name: core dumps
        kind: files
        paths: [/var/lib/systemd/coredump, /var/crash]
        patterns: ["core.*", "*.crash"]
        age: 7d
  become: true
  register: cleanup

- name: Remove the downloaded packages and container images unused for a month, keeping the CUDA base images
  gpucluster.ops.node_cleanup:
    rules:
      - name: packages
        kind: package_cache
      - name: images
        kind: container_images
        runtime: docker
        age: 30d
        keep: ["nvcr.io/nvidia/cuda:*"]
  become: true

- name: Fail when a cleanup could not tell what to remove
  ansible.builtin.assert:
    that: cleanup.status == 'ok'
    fail_msg: "{{ cleanup.rules | map(attribute='errors') | flatten }}"
"""

RETURN = r"""
changed:
  description: Whether anything was removed (in check mode, would be).
  returned: always
  type: bool
  sample: true
status:
  description: C(ok), or C(unknown) when any rule has RV(rules[].errors) (it could not do all its work).
  returned: always
  type: str
  sample: ok
removed_bytes:
  description: Bytes removed by all the rules (in check mode, that would be).
  returned: always
  type: int
  sample: 1073741824
rules:
  description: One result per rule, in the order of O(rules).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The rule's name.
      type: str
      sample: job scratch
    kind:
      description: The rule's kind.
      type: str
      sample: files
    removed:
      description:
        - What the rule removed (in check mode, would remove), at most 200 entries; all are counted in
          RV(rules[].removed_count).
        - For images, C(path) is the image's names (or its ID when it has none) and C(id) its ID.
      type: list
      elements: dict
      sample: [{path: /scratch/jobs/4711, bytes: 52428800}]
    removed_count:
      description: How many files, entries or images the rule removed (would remove).
      type: int
      sample: 1
    removed_bytes:
      description: Their bytes.
      type: int
      sample: 52428800
    removed_truncated:
      description: How many removed entries are counted but left out of RV(rules[].removed).
      type: int
      sample: 0
    skipped:
      description:
        - Old enough, but not removed, with why (at most 200 entries); for example C(in_use), C(other filesystem),
          a symlink given as a path, a directory replaced while the rule ran, an image a container uses or that
          O(rules[].keep) keeps.
      type: list
      elements: dict
      sample: [{path: /scratch/jobs/4712, why: in_use}]
    skipped_truncated:
      description: How many skipped entries are left out of RV(rules[].skipped).
      type: int
      sample: 0
    missing_paths:
      description: Listed paths that do not exist.
      type: list
      elements: str
      sample: []
    errors:
      description: What the rule could not do; any makes RV(status) C(unknown).
      type: list
      elements: str
      sample: ["podman is not installed (no podman on PATH): cannot tell which images are old"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _cleanup
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError

ENVIRON = {"LC_ALL": "C", "LANG": "C"}


def _diff(result):
    lines = []
    for rule in result["rules"]:
        lines.extend("%s: %s (%d bytes)\n" % (rule["name"], item["path"], item["bytes"]) for item in rule["removed"])
        if rule["removed_truncated"]:
            lines.append("%s: ... and %d more\n" % (rule["name"], rule["removed_truncated"]))
    return dict(before="".join(lines), after="")


def main():
    # The keys of a rule (allow_system_tree among them) are checked by _cleanup.check_rule, per kind (_cleanup.KEYS),
    # naming rules[i].key; suboptions here would give every rule every kind's keys.
    module = AnsibleModule(
        argument_spec=dict(
            rules=dict(type="list", elements="dict", required=True),
            allowed_roots=dict(type="list", elements="path", default=list(_cleanup.DEFAULT_ROOTS)),
            validate_only=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        rules, _roots = _cleanup.check_rules(module.params["rules"], module.params["allowed_roots"])
    except SpecError as exc:
        module.fail_json(msg="%s; nothing removed" % exc)
    if module.params["validate_only"]:
        module.exit_json(changed=False, status="ok", removed_bytes=0, rules=[])

    def runner(argv):
        return module.run_command(argv, environ_update=ENVIRON)

    def which(name):
        return module.get_bin_path(name, required=False)

    result = _cleanup.run_rules(rules, check_mode=module.check_mode, runner=runner, which=which)
    for rule in result["rules"]:
        for error in rule["errors"]:
            module.warn("rule %r: %s" % (rule["name"], error))
    if module._diff:
        result["diff"] = _diff(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
