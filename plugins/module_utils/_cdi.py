# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's CDI spec for its NVIDIA GPUs (the Container Device Interface podman reads from /etc/cdi), and the
devices of one Slurm allocation in it.

Standard library only: the module ``gpucluster.ops.gpu_cdi_spec`` builds the spec on the node, and
``bin/gpu-job-container`` (run in every gpu-job step) picks the allocation's devices from it. A spec is JSON, which
is YAML too: podman reads it from ``/etc/cdi/nvidia.yaml``, and the helper reads it without a YAML parser.

What a spec holds is what ``nvidia-ctk cdi generate`` writes: one device per GPU named by its UUID and one named by
its index (``nvidia.com/gpu=GPU-...``, ``nvidia.com/gpu=0``) with the GPU's device node, ``all``, and edits every
device shares: the control device nodes (``nvidiactl``, ``nvidia-uvm``...), the driver's user-space files mounted
read-only, and a createContainer hook that makes the container's dynamic loader find them (ldcache). A spec with
device nodes only gives a container where CUDA cannot start: without driver libraries ``build`` refuses.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import re

from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import expand

__metaclass__ = type

CDI_VERSION = "0.5.0"
KIND = "nvidia.com/gpu"
GPU_NODE_RE = re.compile(r"^/dev/nvidia([0-9]+)\Z")
UUID_RE = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]{8,}\Z")
# The control devices a CUDA program opens beside its GPUs, where the node has them.
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
# The driver's programs a container gets (nvidia-ctk mounts the same ones), at /usr/bin/<name>.
PROGRAMS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server")
# A library file of a driver package: libX.so.<version> (the SONAME links are made by ldconfig in the container).
LIBRARY_RE = re.compile(r"^lib[A-Za-z0-9_+-]+\.so\.[0-9][0-9.]*\Z")
HOOK_TIMEOUT_S = 30
LIBRARY_DIRS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/")


class CDIError(ValueError):
    """A spec that cannot be built or read; the message names what and the value."""


def driver_files(listing):
    """The driver's libraries and programs from ``{package: [path, ...]}`` (dpkg-query -L of the driver packages):
    ``(libraries, programs)``, each a sorted list of paths (programs as ``(path, name)``)."""
    libraries, programs = set(), {}
    for package in sorted(listing):
        for path in listing[package] or []:
            name = os.path.basename(path)
            if LIBRARY_RE.match(name) and path.startswith(LIBRARY_DIRS):
                libraries.add(path)
            elif name in PROGRAMS and ("/bin/" in path or "/nvidia/" in path):
                programs.setdefault(name, path)
    return sorted(libraries), sorted((path, name) for name, path in programs.items())


def build(gpus, libraries, programs, control_nodes, hook):
    """The spec (a dict) for ``gpus`` ([{index, minor_number, uuid}]), the driver's ``libraries`` (host paths,
    mounted at the same path), ``programs`` ([(host path, name)], mounted at /usr/bin/<name>), the control device
    nodes present on the node, and ``hook`` (the ldcache program's path). Raises ``CDIError``."""
    if not libraries or not [p for p in libraries if os.path.basename(p).startswith("libcuda.so.")]:
        raise CDIError("the driver packages installed no libcuda.so.<version> (%s): a container with the GPUs' device "
                       "nodes but not the driver's libraries cannot start CUDA" % (", ".join(libraries) or "no library"))
    devices, nodes = [], []
    seen = set()
    for gpu in sorted(gpus, key=lambda g: (g.get("index") if g.get("index") is not None else -1)):
        index, minor, uuid = gpu.get("index"), gpu.get("minor_number"), gpu.get("uuid")
        if not isinstance(index, int) or not isinstance(minor, int) or not isinstance(uuid, str) \
                or not UUID_RE.match(uuid):
            raise CDIError("GPU %r has no index, minor number or UUID nvidia-smi could read" % (gpu,))
        if minor in seen:
            raise CDIError("two GPUs have the minor number %d" % minor)
        seen.add(minor)
        node = {"path": "/dev/nvidia%d" % minor}
        nodes.append(node)
        for name in (uuid, str(index)):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [dict(node)]}})
    if not devices:
        raise CDIError("nvidia-smi lists no GPU on this node")
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [dict(n) for n in nodes]}})
    mounts = [{"hostPath": path, "containerPath": path, "options": ["ro", "nosuid", "nodev", "bind"]}
              for path in libraries]
    mounts += [{"hostPath": path, "containerPath": "/usr/bin/" + name, "options": ["ro", "nosuid", "nodev", "bind"]}
               for path, name in programs]
    folders = sorted(set(os.path.dirname(path) for path in libraries))
    args = [os.path.basename(hook)]
    for folder in folders:
        args += ["--folder", folder]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": path} for path in control_nodes],
            "mounts": mounts,
            # A fixed environment (never the container's) and a time limit for the program the runtime runs.
            "hooks": [{"hookName": "createContainer", "path": hook, "args": args,
                       "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": HOOK_TIMEOUT_S}],
        },
    }


def dumps(spec):
    """The file's content: JSON (YAML 1.2 too), keys in a fixed order, so that an unchanged node rewrites nothing."""
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def loads(text, where):
    try:
        spec = json.loads(text)
    except ValueError as error:
        raise CDIError("%s is not a JSON CDI spec (%s): rerun the container_toolkit role" % (where, error))
    if not isinstance(spec, dict) or spec.get("kind") != KIND or not isinstance(spec.get("devices"), list):
        raise CDIError("%s is not a CDI spec of kind %s: rerun the container_toolkit role" % (where, KIND))
    return spec


def devices_by_minor(spec):
    """``{minor: CDI device name}`` for the spec's GPUs, the UUID name where the spec has one (else the index)."""
    found = {}
    for device in spec.get("devices") or []:
        name = device.get("name")
        paths = [n.get("path") for n in (device.get("containerEdits") or {}).get("deviceNodes") or []
                 if isinstance(n, dict)]
        minors = [int(m.group(1)) for m in (GPU_NODE_RE.match(p or "") for p in paths) if m]
        if len(minors) != 1 or not isinstance(name, str):
            continue
        if minors[0] not in found or (UUID_RE.match(name) and not UUID_RE.match(found[minors[0]])):
            found[minors[0]] = name
    return found


def gres_records(text):
    """gres.conf records as dicts (lower-case keys), one per line, ``#`` comments and line continuations removed."""
    records = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        record = {}
        for word in line.split():
            key, _sep, value = word.partition("=")
            record[key.lower()] = value
        records.append(record)
    return records


def gres_gpu_files(text, node):
    """The device files of ``node``'s GPUs in gres.conf order (Slurm's GRES index is the position in this list).
    Records with ``NodeName=`` apply to the nodes it names; records without it to every node."""
    files = []
    for record in gres_records(text):
        if record.get("name") != "gpu" or not record.get("file"):
            continue
        names = record.get("nodename")
        if names and node not in expand(names):
            continue
        files += expand(record["file"])
    return files


def gres_minors(gres_text, node):
    """``(minors, None)``: the minor numbers of ``node``'s GPUs in Slurm's GRES index order (index ``i`` is
    ``/dev/nvidia<minors[i]>``); ``(None, why)`` where that cannot be told for sure: gres.conf detects the GPUs
    (``AutoDetect``, where slurmd orders them itself), has MIG or other multi-file GPUs (``MultipleFiles``), names
    them out of minor order or names none for the node."""
    records = [r for r in gres_records(gres_text or "") if not r.get("nodename") or node in expand(r["nodename"])]
    autodetect = [r["autodetect"] for r in records if r.get("autodetect", "off").lower() not in ("off", "")]
    if autodetect:
        return None, "gres.conf detects the GPUs (AutoDetect=%s): slurmd orders them itself" % autodetect[0]
    if any(r.get("multiplefiles") for r in records if r.get("name") == "gpu"):
        return None, "gres.conf has GPUs with MultipleFiles= (MIG): a GRES index is not a whole GPU"
    files = gres_gpu_files(gres_text or "", node)
    minors = [int(GPU_NODE_RE.match(f).group(1)) if GPU_NODE_RE.match(f) else None for f in files]
    if not files:
        return None, "gres.conf names no GPU files for %s" % node
    if None in minors or minors != sorted(minors):
        return None, "gres.conf names the GPU files of %s out of minor order (%s)" % (node, ", ".join(files))
    return minors, None


def allocation(spec, gres_text, node, gpu_ids, where="the CDI spec"):
    """The CDI device names (``nvidia.com/gpu=<uuid>``) of the GPUs Slurm allocated to this step on ``node``.

    ``gpu_ids`` is SLURM_STEP_GPUS: Slurm writes there, for each allocated GPU, the number of its device file
    (``/dev/nvidia3`` gives 3; src/plugins/gres/common/gres_common.c, ``dev_num``), which is the GPU's minor number;
    empty for a step without GPUs. Where ``gres_text`` (the node's gres.conf) names device files for ``node``, each
    allocated one must be among them (AutoDetect=nvml names none: slurmd found the files itself). Raises
    ``CDIError`` when a value is not a device number or the spec has no device for it."""
    ids = [i.strip() for i in (gpu_ids or "").split(",") if i.strip()]
    if not ids:
        return []
    if ids == ["NoDevFiles"]:
        raise CDIError("Slurm gave the GPUs of this job on %s without device files (NoDevFiles): gres.conf must name "
                       "them (File=/dev/nvidia[0-7]) or detect them (AutoDetect=nvml)" % node)
    files = [f for f in gres_gpu_files(gres_text or "", node) if GPU_NODE_RE.match(f)]
    by_minor = devices_by_minor(spec)
    names = []
    for raw in ids:
        if not raw.isdigit():
            raise CDIError("Slurm allocated GPU %r on %s: not the number of a /dev/nvidiaN device" % (raw, node))
        path = "/dev/nvidia%d" % int(raw)
        if files and path not in files:
            raise CDIError("Slurm allocated %s on %s, which this node's gres.conf does not name (%s)"
                           % (path, node, ", ".join(files)))
        if int(raw) not in by_minor:
            raise CDIError("%s has no device for %s (a GPU of this job on %s): rerun the container_toolkit role"
                           % (where, path, node))
        names.append("%s=%s" % (KIND, by_minor[int(raw)]))
    return names
