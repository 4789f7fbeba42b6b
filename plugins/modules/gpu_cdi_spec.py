#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_cdi_spec
short_description: Write the node's CDI spec for its NVIDIA GPUs (the GPUs in users' containers)
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Writes the Container Device Interface spec that podman reads to put GPUs into a container
    (C(podman run --device nvidia.com/gpu=GPU-...)), as JSON, which is YAML too, so that the default
    C(/etc/cdi/nvidia.yaml) serves podman and the job helper of C(gpu-job) alike.
  - With O(generator=nvidia-ctk), the spec is NVIDIA's container toolkit's (C(nvidia-ctk cdi generate --format json)
    with device names by UUID and by index), written only when it differs from the file.
  - With O(generator=gpucluster), on nodes without the toolkit, the module builds the same kind of spec itself from
    C(nvidia-smi -q -x) (each GPU's index, minor number and UUID) and the files the driver packages O(driver_packages)
    installed (C(dpkg-query -L)) - one device per GPU by UUID and one by index with C(/dev/nvidiaN) by minor number,
    C(all), the control device nodes the node has (C(nvidiactl), C(nvidia-uvm), C(nvidia-uvm-tools),
    C(nvidia-modeset)), the driver's libraries mounted read-only at their paths and its programs (C(nvidia-smi)...)
    at C(/usr/bin), and a createContainer hook, O(ldcache_hook), that adds the libraries' folders to the container's
    dynamic loader cache, as nvidia-ctk's update-ldcache hook does.
  - Fails, changing nothing, when nvidia-smi lists no GPU or cannot be read, or when the driver packages installed no
    C(libcuda.so), since a spec with device nodes only gives containers where CUDA cannot start.
  - Rerun it after a driver change (the C(nvidia_driver) role and C(rolling_upgrade.yml) do, through the
    C(container_toolkit) role), since the libraries' paths carry the driver's version.
options:
  dest:
    description: The spec file.
    type: path
    default: /etc/cdi/nvidia.yaml
  generator:
    description: Who makes the spec.
    type: str
    choices: [nvidia-ctk, gpucluster]
    default: gpucluster
  nvidia_ctk:
    description: The nvidia-ctk program (O(generator=nvidia-ctk)).
    type: str
    default: nvidia-ctk
  nvidia_smi:
    description: The nvidia-smi program (O(generator=gpucluster)).
    type: str
    default: nvidia-smi
  driver_packages:
    description:
      - The driver's user-space packages whose libraries and programs containers get (O(generator=gpucluster)); those
        not installed are left out, and at least one must have installed C(libcuda.so.<version>).
    type: list
    elements: str
    default: [libcuda1, libnvidia-ml1, nvidia-smi, libnvidia-ptxjitcompiler1, libnvidia-nvvm4, libnvidia-cfg1,
              libnvidia-allocator1, libnvidia-pkcs11-openssl3]
  ldcache_hook:
    description: The program of the spec's createContainer hook (O(generator=gpucluster)), installed by the role.
    type: path
    default: /usr/local/lib/gpucluster-cdi/bin/gpu-cdi-ldcache
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: Builds the spec and compares it with the file; writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: full
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: debian
seealso:
  - module: gpucluster.ops.gpu_facts
"""

EXAMPLES = r"""
- name: Write the CDI spec of a node without NVIDIA's container toolkit
  gpucluster.ops.gpu_cdi_spec:
    generator: gpucluster

- name: Write the CDI spec with nvidia-ctk
  gpucluster.ops.gpu_cdi_spec:
    generator: nvidia-ctk
"""

RETURN = r"""
devices:
  description: The spec's device names (C(nvidia.com/gpu=<name>)).
  returned: success
  type: list
  elements: str
  sample: [GPU-5b9e3f2a-0c1d-4e8f-9a7b-1c2d3e4f5a6b, "0", all]
gpus:
  description: The minor number of each GPU to its device name (by UUID where the spec has one).
  returned: success
  type: dict
  sample: {"0": GPU-5b9e3f2a-0c1d-4e8f-9a7b-1c2d3e4f5a6b}
libraries:
  description: The host paths of the driver's files the spec mounts.
  returned: success
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _cdi, _nvsmi


def _run(module, argv):
    return module.run_command(["timeout", "120"] + argv, environ_update={"LC_ALL": "C", "LANG": "C"})


def _first_line(text):
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "no output"


def from_nvidia_ctk(module):
    ctk = module.params["nvidia_ctk"]
    argv = [ctk, "cdi", "generate", "--format", "json", "--device-name-strategy", "uuid",
            "--device-name-strategy", "index"]
    rc, out, err = _run(module, argv)
    if rc != 0:
        module.fail_json(msg="%s failed (rc %d): %s" % (" ".join(argv), rc, _first_line(err or out)))
    try:
        return _cdi.loads(out, "the output of %s" % " ".join(argv))
    except _cdi.CDIError as error:
        module.fail_json(msg=str(error))


def installed_files(module, packages):
    rc, out, err = _run(module, ["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Status}\n"] + list(packages))
    present = [line.split("\t")[0] for line in out.splitlines()
               if line.count("\t") == 1 and line.split("\t")[1] == "installed"]
    if rc not in (0, 1):
        module.fail_json(msg="dpkg-query -W %s failed (rc %d): %s" % (" ".join(packages), rc, _first_line(err)))
    listing = {}
    for package in present:
        rc, out, err = _run(module, ["dpkg-query", "-L", package])
        if rc != 0:
            module.fail_json(msg="dpkg-query -L %s failed (rc %d): %s" % (package, rc, _first_line(err)))
        listing[package] = [line.strip() for line in out.splitlines() if line.strip().startswith("/")]
    return listing


def regular_file(path):
    return os.path.isfile(path) and not os.path.islink(path)


def exists(path):
    return os.path.exists(path)


def from_driver(module):
    smi = module.params["nvidia_smi"]
    rc, out, err = _run(module, [smi, "-q", "-x"])
    inventory = _nvsmi.parse_query_xml(out)
    problems = [e.get("message", e.get("kind", "")) for e in inventory.get("errors") or []]
    problems += list(inventory.get("unreadable") or [])
    if rc != 0 or problems or not inventory.get("gpus"):
        module.fail_json(msg="%s -q -x (rc %d) did not list this node's GPUs: %s" % (
            smi, rc, "; ".join(problems) or _first_line(err or out)))
    listing = installed_files(module, module.params["driver_packages"])
    libraries, programs = _cdi.driver_files(listing)
    # The files the packages list, as they are on this node (a package's file list may name one that was removed);
    # the libraries' SONAME links (libcuda.so.1) are made in the container by the ldcache hook, as ldconfig does.
    libraries = [p for p in libraries if regular_file(p)]
    programs = [(p, n) for p, n in programs if regular_file(os.path.realpath(p))]
    control = [p for p in _cdi.CONTROL_NODES if exists(p)]
    try:
        spec = _cdi.build(inventory["gpus"], libraries, programs, control, module.params["ldcache_hook"])
    except _cdi.CDIError as error:
        module.fail_json(msg="%s (driver packages installed here: %s)" % (error, ", ".join(sorted(listing)) or "none"))
    return spec


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", default="/etc/cdi/nvidia.yaml"),
            generator=dict(type="str", choices=["nvidia-ctk", "gpucluster"], default="gpucluster"),
            nvidia_ctk=dict(type="str", default="nvidia-ctk"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            driver_packages=dict(type="list", elements="str", default=[
                "libcuda1", "libnvidia-ml1", "nvidia-smi", "libnvidia-ptxjitcompiler1", "libnvidia-nvvm4",
                "libnvidia-cfg1", "libnvidia-allocator1", "libnvidia-pkcs11-openssl3"]),
            ldcache_hook=dict(type="path", default="/usr/local/lib/gpucluster-cdi/bin/gpu-cdi-ldcache"),
        ),
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    spec = from_nvidia_ctk(module) if module.params["generator"] == "nvidia-ctk" else from_driver(module)
    content = _cdi.dumps(spec)
    try:
        with open(dest) as handle:
            before = handle.read()
    except FileNotFoundError:
        before = None
    except OSError as error:
        module.fail_json(msg="cannot read %s: %s" % (dest, error))
    changed = before != content
    if changed and not module.check_mode:
        directory = os.path.dirname(dest) or "."
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            handle, tmp = tempfile.mkstemp(dir=directory, prefix=".gpucluster-cdi-")
            with os.fdopen(handle, "w") as out:
                out.write(content)
            os.chmod(tmp, 0o644)
        except OSError as error:
            module.fail_json(msg="cannot write %s: %s" % (dest, error))
        module.atomic_move(tmp, dest)
    by_minor = _cdi.devices_by_minor(spec)
    result = dict(
        changed=changed, dest=dest,
        devices=[d.get("name") for d in spec.get("devices") or []],
        gpus=dict((str(minor), name) for minor, name in sorted(by_minor.items())),
        libraries=sorted(m.get("hostPath") for m in (spec.get("containerEdits") or {}).get("mounts") or []
                         if isinstance(m, dict) and m.get("hostPath")),
    )
    # Ansible shows the diff in diff mode only.
    result["diff"] = {"before": before or "", "after": content, "before_header": dest, "after_header": dest}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
