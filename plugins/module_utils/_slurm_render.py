# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render slurm.conf NodeName/PartitionName lines, gres.conf and topology.conf from an Ansible inventory.

Standard library only; the filters in plugins/filter wrap these functions and turn ``SlurmRenderError`` into
``AnsibleFilterError``. Every function is called once on the controller for the whole cluster: hosts whose lines
would be identical are folded into one line with a Slurm hostlist, so the output grows with node types and
switches, not with nodes. The rules (GPU type names, CPU affinity to Slurm core ids, memory, topology) are in
docs/slurm-config.md.
"""

from __future__ import absolute_import, division, print_function

import collections
import functools
import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_conf_parse import parse_pairs
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_config_check import parse_gres
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_keys import SLURM_CONF
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError, time_limit

__metaclass__ = type

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
GRES_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_MODEL_TOKEN = re.compile(r"^[a-z]{1,3}[0-9]{1,4}[a-z]{0,2}$")
_MEMORY_IN_NAME = re.compile(r"([0-9]+)\s*GB", re.IGNORECASE)
_CPU_LIST = re.compile(r"^[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*$")

DEFAULTS = {
    "memory_reserve_percent": 3,      # of memtotal, kept for the OS, page cache and daemons
    "memory_reserve_min_mib": 1024,
    "memory_round_mib": 1024,         # RealMemory is rounded down to this, so identical nodes fold together
}
CPU_NUMBERING = ("split", "adjacent")
AUTODETECT = ("nvml", "off")


class SlurmRenderError(ValueError):
    """Bad or missing inventory data; the message names the host, the variable and the value."""


# One GPU as the filters use it; tuples are shared between hosts with the same hardware (the caches below).
Gpu = collections.namedtuple("Gpu", "minor type name memory affinity")


# ---------------------------------------------------------------------------------------------------------------------
# Small validators


def _int(host, variable, value, minimum=1):
    """Return value as an int >= minimum; accept ints and decimal strings, never booleans."""
    if type(value) is int and value >= minimum:  # pylint: disable=unidiomatic-typecheck  # fast path; excludes bool
        return value
    if isinstance(value, bool) or value is None:
        raise SlurmRenderError("host %s: %s is %r, which is not an integer >= %d" % (host, variable, value, minimum))
    text = str(value).strip()
    if not re.match(r"^[0-9]+$", text) or int(text) < minimum:
        raise SlurmRenderError("host %s: %s is %r, which is not an integer >= %d" % (host, variable, value, minimum))
    return int(text)


def _name_list(host, variable, value):
    """A list of feature-like names (a comma string is accepted too)."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise SlurmRenderError("host %s: %s is %r, which is not a list of names" % (host, variable, value))
    for item in value:
        if not isinstance(item, str) or not NAME_RE.match(item):
            raise SlurmRenderError("host %s: %s has %r, which is not a name of [A-Za-z0-9_.-]" % (host, variable, item))
    return list(value)


def slurm_time(value, where):
    """A partition time limit as slurm.conf takes it (``_slurm_values.time_limit``: a bare number is refused)."""
    try:
        return time_limit(value, where)
    except SpecError as exc:
        raise SlurmRenderError(str(exc))


def _hostvars_of(hostvars, host):
    try:
        return hostvars[host]
    except KeyError:
        raise SlurmRenderError("host %s: not in hostvars" % host)


def _facts(hv):
    facts = hv.get("ansible_facts") if hasattr(hv, "get") else None
    return facts if isinstance(facts, dict) or hasattr(facts, "get") else {}


def node_name(host, hv):
    """The Slurm NodeName of an inventory host: slurm_node_name, else the inventory name up to the first dot."""
    name = hv.get("slurm_node_name") if hasattr(hv, "get") else None
    name = str(name) if name not in (None, "") else str(host).split(".", 1)[0]
    if not NAME_RE.match(name):
        raise SlurmRenderError("host %s: the Slurm node name %r is not of [A-Za-z0-9_.-] (set slurm_node_name)" % (host, name))
    return name


def _host_list(hosts):
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise SlurmRenderError("expected a list of inventory host names, got %r" % (hosts,))
    return [str(h) for h in hosts]


# ---------------------------------------------------------------------------------------------------------------------
# GPU types


def gpu_type(product_name, type_map=None):
    """Short Slurm GPU type for an NVIDIA product name; ``type_map`` (product name -> type) wins.

    Rule: the first token of the lower-cased name (spaces as ``_``, split at ``_`` and ``-``) that looks like a model
    (letters, digits, up to two letters: a100, h100, h200, l40s, a10g, v100s, gh200, a5000); when there is none, all
    tokens joined with ``_``. The result is always part of the name that AutoDetect=nvml reports, which Slurm needs
    when it checks gres.conf types against the detected GPUs.
    """
    return _gpu_type(str(product_name), tuple(sorted((str(k), str(v)) for k, v in (type_map or {}).items())))


@functools.lru_cache(maxsize=1024)
def _gpu_type(product_name, map_items):
    for name, gres_type in map_items:
        if " ".join(name.lower().split()) == " ".join(product_name.lower().split()):
            return gres_type
    underscored = "_".join(str(product_name).lower().split())
    tokens = [t for t in re.split(r"[_-]", underscored) if t]
    for token in tokens:
        if _MODEL_TOKEN.match(token):
            return token
    return "_".join(t for t in tokens if t not in ("nvidia",)) or underscored


def _gpus_of(hv):
    facts = _facts(hv)
    gpus = facts.get("gpucluster_gpus") if hasattr(facts, "get") else None
    if gpus is None and hasattr(hv, "get"):
        gpus = hv.get("gpucluster_gpus")
    return gpus


def _type_map(host, hv, type_map):
    merged = {}
    for where, value in (("gpu_type_map", type_map), ("slurm_gpu_type_map", hv.get("slurm_gpu_type_map"))):
        if value in (None, ""):
            continue
        if not hasattr(value, "items"):
            raise SlurmRenderError("host %s: %s is %r, not a mapping of product name to GPU type" % (host, where, value))
        merged.update((str(k), str(v)) for k, v in value.items())
    return merged


def _fact_gpus(host, hv, type_map):
    """A tuple of Gpu from gathered GPU facts, sorted by minor number, or None when there are none."""
    gpus = _gpus_of(hv)
    if gpus is None:
        return None
    if not isinstance(gpus, (list, tuple)):
        raise SlurmRenderError("host %s: gpucluster_gpus is %r, not a list of GPUs" % (host, gpus))
    signature = []
    for index, gpu in enumerate(gpus):
        if not hasattr(gpu, "get"):
            raise SlurmRenderError("host %s: gpucluster_gpus[%d] is %r, not a GPU" % (host, index, gpu))
        fields = []
        for field in ("minor_number", "name", "memory_total_mib", "cpu_affinity"):
            value = gpu.get(field)
            if not isinstance(value, (str, int, float, type(None))):
                raise SlurmRenderError("host %s: gpucluster_gpus[%d].%s is %r, not a single value" % (host, index, field, value))
            fields.append(value)
        mig = gpu.get("mig_mode")
        fields.append(bool(mig.get("current")) if hasattr(mig, "get") else False)
        signature.append(tuple(fields))
    try:
        return _fact_gpu_list(tuple(signature), tuple(sorted((str(k), str(v)) for k, v in type_map.items())))
    except _GpuError as exc:
        raise SlurmRenderError("host %s: gpucluster_gpus[%d]: %s" % (host, exc.index, exc))


class _GpuError(SlurmRenderError):
    def __init__(self, index, message):
        super(_GpuError, self).__init__(message)
        self.index = index


@functools.lru_cache(maxsize=1024)
def _fact_gpu_list(signature, map_items):
    """Validated GPUs (cached: a cluster has few kinds of node, so hosts share the result)."""
    result = []
    for index, (minor, name, memory, affinity, mig) in enumerate(signature):
        if mig:
            raise _GpuError(index, "MIG is enabled; Slurm needs AutoDetect=nvml for MIG devices: set slurm_gres_autodetect: "
                                   "nvml and slurm_node_gres")
        if not name:
            raise _GpuError(index, "no product name: set slurm_node_gres")
        if isinstance(minor, bool) or not re.match(r"^[0-9]+$", str(minor)):
            raise _GpuError(index, "minor_number is %r, not a device number (/dev/nvidiaN): set slurm_node_gres" % (minor,))
        gres_type = _gpu_type(str(name), map_items)
        if not NAME_RE.match(gres_type):
            raise _GpuError(index, "GPU type %r for %r is not of [A-Za-z0-9_.-] (set slurm_gpu_type_map)" % (gres_type, name))
        memory = int(memory) if re.match(r"^[0-9]+$", str(memory)) else None
        result.append(Gpu(int(minor), gres_type, str(name), memory, affinity))
    return tuple(sorted(result, key=lambda g: g.minor))


# ---------------------------------------------------------------------------------------------------------------------
# Node data


def _declared_gres(host, hv):
    """slurm_node_gres as [(name, type or None, count)], or None when not set."""
    value = hv.get("slurm_node_gres")
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise SlurmRenderError("host %s: slurm_node_gres is %r, not a list of {name, type, count}" % (host, value))
    entries = []
    for index, item in enumerate(value):
        where = "slurm_node_gres[%d]" % index
        if not hasattr(item, "get"):
            raise SlurmRenderError("host %s: %s is %r, not a {name, type, count} mapping" % (host, where, item))
        name = item.get("name", "gpu")
        if not isinstance(name, str) or not GRES_NAME_RE.match(name):
            raise SlurmRenderError("host %s: %s.name is %r, which is not a GRES name" % (host, where, name))
        gres_type = item.get("type")
        if gres_type is not None and (not isinstance(gres_type, str) or not NAME_RE.match(gres_type)):
            raise SlurmRenderError("host %s: %s.type is %r, which is not of [A-Za-z0-9_.-]" % (host, where, gres_type))
        count = item.get("count")
        if count is None:
            raise SlurmRenderError("host %s: %s has no count" % (host, where))
        entries.append((name, gres_type, _int(host, where + ".count", count)))
    return entries


@functools.lru_cache(maxsize=1024)
def _gres_from_gpus(gpus):
    counts = {}
    for gpu in gpus:
        counts[gpu.type] = counts.get(gpu.type, 0) + 1
    return [("gpu", t, counts[t]) for t in sorted(counts)]


def _cpu_layout(host, hv):
    """Return (cpus, sockets, cores_per_socket, threads_per_core); the last three may all be None."""
    facts = _facts(hv)
    found = {}
    for key, variable, fact in (("sockets", "slurm_node_sockets", "processor_count"),
                                ("cores", "slurm_node_cores_per_socket", "processor_cores"),
                                ("threads", "slurm_node_threads_per_core", "processor_threads_per_core")):
        if hv.get(variable) is not None:
            found[key] = _int(host, variable, hv.get(variable))
        elif facts.get(fact) is not None:
            found[key] = _int(host, "ansible_facts['%s']" % fact, facts.get(fact))
    if 0 < len(found) < 3:
        missing = [v for k, v in (("sockets", "slurm_node_sockets"), ("cores", "slurm_node_cores_per_socket"),
                                  ("threads", "slurm_node_threads_per_core")) if k not in found]
        raise SlurmRenderError("host %s: incomplete CPU layout: set %s (or gather hardware facts)" % (host, ", ".join(missing)))
    cpus = _cpu_count(host, hv, facts, found)
    if found:
        full = found["sockets"] * found["cores"] * found["threads"]
        if cpus not in (full, found["sockets"] * found["cores"]):
            raise SlurmRenderError("host %s: CPUs=%d does not match sockets %d x cores %d x threads %d: fix slurm_node_cpus or the "
                                   "slurm_node_sockets/cores_per_socket/threads_per_core variables"
                                   % (host, cpus, found["sockets"], found["cores"], found["threads"]))
        return cpus, found["sockets"], found["cores"], found["threads"]
    return cpus, None, None, None


def _cpu_count(host, hv, facts, layout):
    if hv.get("slurm_node_cpus") is not None:
        return _int(host, "slurm_node_cpus", hv.get("slurm_node_cpus"))
    if facts.get("processor_vcpus") is not None:
        return _int(host, "ansible_facts['processor_vcpus']", facts.get("processor_vcpus"))
    if layout:
        return layout["sockets"] * layout["cores"] * layout["threads"]
    raise SlurmRenderError("host %s: no CPU count: set slurm_node_cpus or gather hardware facts "
                           "(ansible_facts['processor_vcpus'] is missing)" % host)


def _real_memory(host, hv, options):
    if hv.get("slurm_node_real_memory") is not None:
        return _int(host, "slurm_node_real_memory", hv.get("slurm_node_real_memory"))
    memtotal = _facts(hv).get("memtotal_mb")
    if memtotal is None:
        raise SlurmRenderError("host %s: no memory size: set slurm_node_real_memory (MiB) or gather hardware facts "
                               "(ansible_facts['memtotal_mb'] is missing)" % host)
    memtotal = _int(host, "ansible_facts['memtotal_mb']", memtotal)
    if hv.get("slurm_node_memory_reserve_mib") is not None:
        reserve = _int(host, "slurm_node_memory_reserve_mib", hv.get("slurm_node_memory_reserve_mib"), 0)
    else:
        reserve = max(options["memory_reserve_min_mib"], memtotal * options["memory_reserve_percent"] // 100)
    step = options["memory_round_mib"]
    memory = (memtotal - reserve) // step * step
    if memory < 1:
        raise SlurmRenderError("host %s: memtotal %d MiB minus the reserve %d MiB leaves no memory for jobs: set "
                               "slurm_node_memory_reserve_mib or slurm_node_real_memory" % (host, memtotal, reserve))
    return memory


def _options(memory_reserve_percent, memory_reserve_min_mib, memory_round_mib):
    options = dict(DEFAULTS)
    for key, value in (("memory_reserve_percent", memory_reserve_percent), ("memory_reserve_min_mib", memory_reserve_min_mib),
                       ("memory_round_mib", memory_round_mib)):
        if value is None:
            continue
        minimum = 1 if key == "memory_round_mib" else 0
        if isinstance(value, bool) or not re.match(r"^[0-9]+$", str(value)) or int(value) < minimum:
            raise SlurmRenderError("option %s is %r, which is not an integer >= %d" % (key, value, minimum))
        options[key] = int(value)
    return options


class NodeSpec(object):
    """What one host contributes to slurm.conf and gres.conf."""

    __slots__ = ("host", "name", "cpus", "sockets", "cores", "threads", "memory", "gres", "gpus", "features", "weight")

    def __init__(self, **kwargs):
        for key in self.__slots__:
            setattr(self, key, kwargs.get(key))


def _expected_gpu_count(host, hv):
    """health_check_expected.gpu_count of a host as an int, or None when it does not set one."""
    expected = hv.get("health_check_expected")
    if expected is None or not hasattr(expected, "get"):
        return None
    count = expected.get("gpu_count")
    if count is None:
        return None
    return int(_int(host, "health_check_expected.gpu_count", count, 0))


def node_gres(host, hv, type_map=None):
    """(gres, gpus) of one host: its GRES as [(name, type or None, count)] and its gathered GPUs (or None).

    slurm_node_gres wins over the GPUs of gpucluster_gpus; with both, their GPU counts must agree. The GPU count must
    also be the host's health_check_expected.gpu_count where it sets one: the health check drains a node whose GPU
    count differs from it, so a GRES count that differs describes a node Slurm would schedule and then lose.
    """
    gpus = _fact_gpus(host, hv, _type_map(host, hv, type_map))
    gres = _declared_gres(host, hv)
    declared = gres is not None
    if gres is None:
        gres = _gres_from_gpus(gpus) if gpus else []
    elif gpus is not None:
        count = sum(c for n, _t, c in gres if n == "gpu")
        if count != len(gpus):
            raise SlurmRenderError("host %s: slurm_node_gres declares %d GPUs but the gathered facts list %d (%s)"
                                   % (host, count, len(gpus), ", ".join(sorted({g.name for g in gpus})) or "none"))
    expected = _expected_gpu_count(host, hv)
    count = sum(int(c) for n, _t, c in gres if n == "gpu")
    if expected is not None and count != expected:
        source = ("slurm_node_gres is %s" % _gres_text(gres) if declared
                  else "the gathered facts (gpucluster_gpus) give Gres=%s" % _gres_text(gres) if gpus
                  else "neither slurm_node_gres nor gathered GPU facts (gpucluster_gpus) give it a GPU")
        raise SlurmRenderError("host %s: %s (%d GPUs), but health_check_expected.gpu_count is %d: the GPU GRES count "
                               "and the health check's expected count must agree" % (host, source, count, expected))
    return gres, gpus


def node_spec(host, hv, options, type_map=None, need_memory=True):
    """Collect and validate one host's node data (variables win over facts); memory is None unless need_memory."""
    cpus, sockets, cores, threads = _cpu_layout(host, hv)
    gres, gpus = node_gres(host, hv, type_map)
    features = _name_list(host, "slurm_node_features", hv.get("slurm_node_features")) if hv.get("slurm_node_features") is not None else []
    weight = _int(host, "slurm_node_weight", hv.get("slurm_node_weight"), 0) if hv.get("slurm_node_weight") is not None else None
    return NodeSpec(host=host, name=node_name(host, hv), cpus=cpus, sockets=sockets, cores=cores, threads=threads,
                    memory=_real_memory(host, hv, options) if need_memory else None, gres=gres, gpus=gpus, features=features, weight=weight)


def _gres_text(gres):
    return ",".join("%s%s:%d" % (name, ":" + t if t else "", count) for name, t, count in gres)


def _node_attributes(spec):
    parts = ["CPUs=%d" % spec.cpus]
    if spec.sockets is not None:
        parts.append("Sockets=%d CoresPerSocket=%d ThreadsPerCore=%d" % (spec.sockets, spec.cores, spec.threads))
    parts.append("RealMemory=%d" % spec.memory)
    if spec.gres:
        parts.append("Gres=%s" % _gres_text(spec.gres))
    if spec.features:
        parts.append("Features=%s" % ",".join(spec.features))
    if spec.weight is not None:
        parts.append("Weight=%d" % spec.weight)
    return " ".join(parts)


def _check_type_variants(specs):
    """Two GPU models of different memory size must not share a type (e.g. A100 40GB and 80GB as 'a100')."""
    seen = {}
    checked = set()
    for spec in specs:
        if not spec.gpus or spec.gpus in checked:
            continue
        checked.add(spec.gpus)
        for gpu in set(spec.gpus):
            memory = gpu.memory
            if memory is None:
                match = _MEMORY_IN_NAME.search(gpu.name)
                memory = int(match.group(1)) * 1024 if match else None
            if memory is None:
                continue
            other = seen.setdefault(gpu.type, (spec.host, gpu.name, memory))
            if abs(other[2] - memory) > 0.1 * max(other[2], memory):
                raise SlurmRenderError("hosts %s (%s) and %s (%s) both map to GPU type %r but differ in memory: set "
                                       "slurm_gpu_type_map to tell them apart, e.g. {%r: %r}"
                                       % (other[0], other[1], spec.host, gpu.name, gpu.type, gpu.name,
                                          "_".join(gpu.name.lower().split()).replace("nvidia_", "")))


def fold_lines(keyed, first_key):
    """Fold [(node name, rest of line)] into '<first_key>=<hostlist> <rest>' lines, in Slurm's node order."""
    groups = {}
    for name, rest in keyed:
        groups.setdefault(rest, []).append(name)
    order = dict((name, index) for index, name in enumerate(_hostlist.sorted_names([n for n, _r in keyed])))
    lines = []
    for rest, names in sorted(groups.items(), key=lambda item: min(order[n] for n in item[1])):
        lines.append(("%s=%s %s" % (first_key, _hostlist.fold(names), rest)).rstrip())
    return lines


def _unique_names(specs):
    seen = {}
    for spec in specs:
        if spec.name in seen:
            raise SlurmRenderError("hosts %s and %s have the same Slurm node name %s (set slurm_node_name)" % (seen[spec.name], spec.host, spec.name))
        seen[spec.name] = spec.host


def node_specs(hosts, hostvars, options, type_map=None, need_memory=True):
    """NodeSpec of every host, validated across hosts (unique names, GPU type variants).

    Where the hosts' variables can say which of their values a call read (the slurm_render action's view: ``reads``,
    ``same_values``), a host whose values for those variables are the very objects another host's spec was made
    from (its group's, read untemplated) gets a copy of that spec with its own name, not a new one.
    """
    specs, made = [], []
    for host in _host_list(hosts):
        hv = _hostvars_of(hostvars, host)
        reads = getattr(hv, "reads", None)
        spec = None
        if reads is not None:
            for read, first in made:
                if hv.same_values(read):
                    spec = NodeSpec(**dict((k, getattr(first, k)) for k in NodeSpec.__slots__))
                    spec.host, spec.name = host, node_name(host, hv)
                    break
        if spec is None:
            if reads is None:
                spec = node_spec(host, hv, options, type_map, need_memory)
            else:
                with reads() as read:
                    spec = node_spec(host, hv, options, type_map, need_memory)
                if read.shareable and len(made) < 64:
                    made.append((read, spec))
        specs.append(spec)
    _unique_names(specs)
    _check_type_variants(specs)
    return specs


def node_lines(hosts, hostvars, gpu_type_map=None, memory_reserve_percent=None, memory_reserve_min_mib=None, memory_round_mib=None):
    """NodeName lines for slurm.conf, one per distinct node description."""
    options = _options(memory_reserve_percent, memory_reserve_min_mib, memory_round_mib)
    return node_lines_of(node_specs(hosts, hostvars, options, gpu_type_map))


def node_lines_of(specs):
    """NodeName lines of NodeSpecs collected with memory (node_specs)."""
    return fold_lines([(s.name, _node_attributes(s)) for s in specs], "NodeName")


# ---------------------------------------------------------------------------------------------------------------------
# gres.conf


def cores_of(host, spec, gpu_index, affinity, numbering):
    """Slurm core ids (``Cores=``) for a GPU's CPU affinity, or None when it cannot be known.

    numbering "split": Linux's usual order, CPU ids 0..S*C-1 are one thread of every core (socket by socket) and the
    sibling threads follow in the same order, so core = cpu mod (S*C). "adjacent": the threads of a core have
    consecutive ids, so core = cpu div T.
    """
    if affinity is None or spec.sockets is None:
        return None
    try:
        return _core_ids(str(affinity).strip(), spec.sockets, spec.cores, spec.threads, numbering)
    except SlurmRenderError as exc:
        raise SlurmRenderError("host %s: GPU %d cpu_affinity %r %s" % (host, gpu_index, affinity, exc))


@functools.lru_cache(maxsize=1024)
def _core_ids(text, sockets, cores, threads, numbering):
    if text.upper() in ("", "N/A", "[N/A]", "NONE"):
        return None
    if not _CPU_LIST.match(text):
        raise SlurmRenderError("is not a CPU list such as 0-47,96-143")
    ids = set()
    for part in text.split(","):
        low, _sep, high = part.partition("-")
        ids.update(range(int(low), int(high or low) + 1))
    cores_total = sockets * cores
    if max(ids) >= cores_total * threads:
        raise SlurmRenderError("names CPUs beyond the %d the node has" % (cores_total * threads))
    core_ids = {cpu % cores_total for cpu in ids} if numbering == "split" else {cpu // threads for cpu in ids}
    return _ranges(sorted(core_ids))


def _ranges(numbers):
    parts = []
    start = prev = numbers[0]
    for number in numbers[1:] + [None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if number is not None:
            start = prev = number
    return ",".join(parts)


@functools.lru_cache(maxsize=1024)
def _device_files(minors):
    return _hostlist.fold(["/dev/nvidia%d" % m for m in sorted(minors)])


def _gpu_records(host, hv, spec):
    """gres.conf records (without NodeName) of one host."""
    numbering = hv.get("slurm_gres_cpu_numbering") or "split"
    if numbering not in CPU_NUMBERING:
        raise SlurmRenderError("host %s: slurm_gres_cpu_numbering is %r, not one of %s" % (host, numbering, ", ".join(CPU_NUMBERING)))
    declared_gpu = [(t, c) for n, t, c in spec.gres if n == "gpu"]
    gpus = spec.gpus
    if gpus and declared_gpu and sorted(declared_gpu) != sorted((t, c) for _n, t, c in _gres_from_gpus(gpus)):
        if len(declared_gpu) == 1:
            gpus = tuple(g._replace(type=declared_gpu[0][0]) for g in gpus)
        else:
            gpus = None
    if not gpus:
        gpus, minor = [], 0
        for gres_type, count in declared_gpu:
            gpus.extend(Gpu(minor + i, gres_type, None, None, None) for i in range(count))
            minor += count
    groups = {}
    for index, gpu in enumerate(gpus):
        cores = cores_of(host, spec, index, gpu.affinity, numbering)
        groups.setdefault((gpu.type or "", cores or ""), []).append(gpu.minor)
    records = []
    for (gres_type, cores), minors in sorted(groups.items(), key=lambda item: min(item[1])):
        record = "Name=gpu%s File=%s" % (" Type=%s" % gres_type if gres_type else "", _device_files(tuple(minors)))
        records.append(record + (" Cores=%s" % cores if cores else ""))
    for name, gres_type, count in spec.gres:
        if name != "gpu":
            records.append("Name=%s%s Count=%d" % (name, " Type=%s" % gres_type if gres_type else "", count))
    return tuple(records)


def _autodetect_of(host, hv, default):
    value = hv.get("slurm_gres_autodetect", default)
    value = "off" if value in (None, False, "") else str(value).lower()
    if value not in AUTODETECT:
        raise SlurmRenderError("host %s: slurm_gres_autodetect is %r, not one of %s" % (host, value, ", ".join(AUTODETECT)))
    return value


def _check_autodetect_types(spec):
    """With AutoDetect=nvml, Slurm matches a configured type against the detected name: it must be part of it."""
    for gpu in spec.gpus or ():
        detected = "_".join(gpu.name.lower().split())
        if gpu.type.lower() not in detected:
            raise SlurmRenderError("host %s: GPU type %r is not part of %r, the name AutoDetect=nvml reports: the node would "
                                   "be INVAL; set slurm_gpu_type_map[%r] to a part of it" % (spec.host, gpu.type, detected, gpu.name))


def gres_lines(hosts, hostvars, autodetect=None, gpu_type_map=None):
    """gres.conf lines: ``NodeName=<hostlist> Name=gpu Type=<t> File=/dev/nvidia[..] [Cores=..]`` or AutoDetect=nvml."""
    return gres_lines_of(node_specs(hosts, hostvars, DEFAULTS, gpu_type_map, need_memory=False), hostvars, autodetect)


def gres_lines_of(specs, hostvars, autodetect=None):
    """gres.conf lines of NodeSpecs (node_specs, with or without memory) and the hosts' slurm_gres_* variables.

    The records of hosts with the same GRES, GPUs, CPU layout and numbering are worked out once (a cluster has few
    kinds of node); a host whose records fail is never cached, so its error names it.
    """
    keyed, records_of = [], {}
    for spec in specs:
        host = spec.host
        hv = _hostvars_of(hostvars, host)
        if not spec.gres:
            continue
        if _autodetect_of(host, hv, autodetect) == "nvml":
            _check_autodetect_types(spec)
            keyed.append((spec.name, ("AutoDetect=nvml",)))
            continue
        numbering = hv.get("slurm_gres_cpu_numbering")
        if not isinstance(numbering, (str, type(None))):
            keyed.append((spec.name, _gpu_records(host, hv, spec)))  # fails, naming the value
            continue
        key = (numbering, tuple(spec.gres), spec.gpus, spec.sockets, spec.cores, spec.threads)
        records = records_of.get(key)
        if records is None:
            records = records_of[key] = _gpu_records(host, hv, spec)
        keyed.append((spec.name, records))
    lines = []
    for line in fold_lines([(name, "\n".join(records)) for name, records in keyed], "NodeName"):
        head, _sep, rest = line.partition(" ")
        lines.extend("%s %s" % (head, record) for record in rest.split("\n"))
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# Partitions

PARTITION_FIELDS = (
    ("default", "Default"), ("max_time", "MaxTime"), ("default_time", "DefaultTime"), ("qos", "QOS"),
    ("allow_accounts", "AllowAccounts"), ("allow_qos", "AllowQos"), ("priority_tier", "PriorityTier"),
    ("oversubscribe", "OverSubscribe"), ("preempt_mode", "PreemptMode"), ("state", "State"),
)
_PARTITION_KEYS = ({"name", "groups", "nodes", "extra", "exclusive_nodes", "def_mem_per_gpu"}
                   | {f for f, _k in PARTITION_FIELDS})
# A partition's own default memory, where its extra keys set one: Slurm takes one DefMemPer* of a partition.
_DEF_MEM_KEYS = ("defmempercpu", "defmempergpu", "defmempernode")
_PREEMPT = ("OFF", "CANCEL", "GANG", "REQUEUE", "SUSPEND", "WITHIN", "PRIORITY")
_STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")


def _partition_value(name, field, value):
    where = "partition %s: %s" % (name, field)
    if field in ("max_time", "default_time"):
        return slurm_time(value, where)
    if field == "default":
        if not isinstance(value, bool):
            raise SlurmRenderError("%s is %r, not true or false" % (where, value))
        return "YES" if value else "NO"
    if field == "priority_tier":
        return str(_int("(partition %s)" % name, "priority_tier", value, 0))
    if field in ("allow_accounts", "allow_qos"):
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        if not items or not all(isinstance(i, str) and NAME_RE.match(i) for i in items):
            raise SlurmRenderError("%s is %r, not a list of names" % (where, value))
        return ",".join(items)
    return _partition_enum(where, field, value)


def _partition_enum(where, field, value):
    text = str(value).upper() if not isinstance(value, bool) else ("YES" if value else "NO")
    if field == "oversubscribe" and re.match(r"^(EXCLUSIVE|NO|(YES|FORCE)(:[0-9]+)?)$", text):
        return text
    if field == "preempt_mode" and text and all(part in _PREEMPT for part in text.split(",")):
        return text
    if field == "state" and text in _STATES:
        return text
    if field == "qos" and NAME_RE.match(str(value)):
        return str(value)
    raise SlurmRenderError("%s is %r, which Slurm does not accept" % (where, value))


def _fold(where, names):
    try:
        return _hostlist.fold(names)
    except _hostlist.HostlistError as exc:
        raise SlurmRenderError("%s: %s" % (where, exc))


def _partition_nodes(part, groups, names_of):
    name = part["name"]
    members = []
    wanted = part.get("groups") or []
    if not isinstance(wanted, (list, tuple)) or not all(isinstance(g, str) for g in wanted):
        raise SlurmRenderError("partition %s: groups is %r, not a list of inventory group names" % (name, wanted))
    for group in wanted:
        if group not in groups:
            raise SlurmRenderError("partition %s: inventory group %r is not defined" % (name, group))
        members.extend(names_of(h) for h in groups[group])
    nodes = part.get("nodes")
    if nodes:
        if isinstance(nodes, (list, tuple)) and not all(isinstance(n, str) for n in nodes) or not isinstance(nodes, (str, list, tuple)):
            raise SlurmRenderError("partition %s: nodes is %r, not a hostlist or a list of node names" % (name, nodes))
        expr = nodes if isinstance(nodes, str) else ",".join(nodes)
        try:
            members.extend(_hostlist.expand(expr))
        except _hostlist.HostlistError as exc:
            raise SlurmRenderError("partition %s: nodes %r: %s" % (name, nodes, exc))
    if not members:
        raise SlurmRenderError("partition %s has no nodes (groups %r, nodes %r)" % (name, part.get("groups"), nodes))
    return members


def _partition_extra(name, extra):
    known = dict((k.lower(), k) for k in SLURM_CONF["PartitionName"])
    parts = []
    for key in sorted(extra or {}):
        if str(key).lower() not in known:
            raise SlurmRenderError("partition %s: extra key %r is not a PartitionName key of Slurm" % (name, key))
        value = extra[key]
        value = ("YES" if value else "NO") if isinstance(value, bool) else str(value)
        if not value or re.search(r"\s", value):
            raise SlurmRenderError("partition %s: extra %s is %r (empty or has blanks)" % (name, key, extra[key]))
        parts.append("%s=%s" % (known[str(key).lower()], value))
    return parts


def memory_per_gpu(node_lines):
    """{node name: RealMemory // GPUs} of the NodeName lines whose nodes have GPUs (their Gres gpu counts), read
    with the configuration checker's own parsers."""
    found = {}
    for line in node_lines or []:
        pairs, _rest = parse_pairs(str(line))
        words = dict((key.lower(), value) for key, value, _op in pairs)
        gres, _errors = parse_gres(words.get("gres", ""))
        gpus = sum(count for name, _type, count in gres if name == "gpu")
        if "nodename" in words and gpus and words.get("realmemory", "").isdigit():
            for name in _hostlist.expand(words["nodename"]):
                found[name] = int(words["realmemory"]) // gpus
    return found


def _def_mem_per_gpu(name, part, members, memory):
    """The partition's DefMemPerGPU word: its def_mem_per_gpu, else the least RealMemory per GPU of its GPU nodes
    (so that a job gets memory by the GPUs it asks for, never a whole node's for one GPU), else none (no GPU node,
    or the partition's extra sets a DefMemPer* of its own)."""
    if part.get("def_mem_per_gpu") is not None:
        return "DefMemPerGPU=%d" % _int("(partition %s)" % name, "def_mem_per_gpu", part["def_mem_per_gpu"], 1)
    if not memory or set(str(k).lower() for k in (part.get("extra") or {})) & set(_DEF_MEM_KEYS):
        return None
    shares = [memory[member] for member in members if member in memory]
    return "DefMemPerGPU=%d" % min(shares) if shares else None


def _partition_line(part, groups, names_of, memory=None):
    if not hasattr(part, "get") or not part.get("name"):
        raise SlurmRenderError("partition %r has no name" % (part,))
    name = str(part["name"])
    if not NAME_RE.match(name):
        raise SlurmRenderError("partition name %r is not of [A-Za-z0-9_.-]" % name)
    unknown = sorted(set(part) - _PARTITION_KEYS)
    if unknown:
        raise SlurmRenderError("partition %s: unknown fields %s" % (name, ", ".join(unknown)))
    members = _partition_nodes(part, groups, names_of)
    words = ["PartitionName=%s" % name, "Nodes=%s" % _fold("partition %s" % name, members)]
    for field, key in PARTITION_FIELDS:
        if part.get(field) is not None:
            words.append("%s=%s" % (key, _partition_value(name, field, part[field])))
    def_mem = _def_mem_per_gpu(name, part, members, memory)
    if def_mem:
        words.append(def_mem)
    words.extend(_partition_extra(name, part.get("extra")))
    return " ".join(words), members


def partition_lines(partitions, groups, hostvars=None, names=None, node_lines=None):
    """PartitionName lines from the slurm_partitions list; node names from inventory groups or hostlists (``names``:
    {inventory host: node name} already known, such as the node specs', read again from hostvars for no host).
    With ``node_lines`` (the NodeName lines), a partition with GPU nodes gets DefMemPerGPU (memory_per_gpu)."""
    return [line for line, _name, _members in partitions_of(partitions, groups, hostvars, names, node_lines)]


def partitions_of(partitions, groups, hostvars=None, names=None, node_lines=None):
    """[(PartitionName line, partition name, [node names])] of the slurm_partitions list, checked as a whole."""
    if not isinstance(partitions, (list, tuple)):
        raise SlurmRenderError("slurm_partitions is %r, not a list" % (partitions,))
    names = names or {}

    def names_of(host):
        known = names.get(host)
        if known is not None:
            return known
        return node_name(host, _hostvars_of(hostvars, host)) if hostvars is not None else str(host).split(".", 1)[0]

    memory = memory_per_gpu(node_lines) if node_lines else None
    lines, seen, defaults, exclusive = [], set(), [], {}
    for part in partitions:
        line, members = _partition_line(part, groups, names_of, memory)
        name = str(part["name"])
        if name in seen:
            raise SlurmRenderError("partition %s is defined twice" % name)
        seen.add(name)
        if part.get("default"):
            defaults.append(name)
        if part.get("exclusive_nodes"):
            for member in members:
                if member in exclusive and exclusive[member] != name:
                    raise SlurmRenderError("node %s is in partitions %s and %s, which both have exclusive_nodes: true"
                                           % (member, exclusive[member], name))
                exclusive[member] = name
        lines.append((line, name, members))
    if len(defaults) > 1:
        raise SlurmRenderError("partitions %s are all default: true; Slurm has one default partition" % ", ".join(defaults))
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# The cluster's GPUs (for checks of other models against the cluster, such as the team quotas)


def cluster_gpus(hosts, hostvars, partitions=None, groups=None, gpu_type_map=None, undeclared_ok=False):
    """The GPUs of each compute node and the nodes of each partition, as slurm.conf declares them.

    Returns ``{"nodes": {node name: {GPU type: count}}, "partitions": {name: [node names]}}``; GPUs without a type
    count under ``""``. The GRES are those of the node lines (node_gres: slurm_node_gres or gathered GPU facts, and
    health_check_expected.gpu_count must agree); the partitions those of partition_lines (``partitions`` None: no
    partitions are reported). Nothing about CPUs or memory is read, so no hardware facts are needed.

    ``undeclared_ok``: a host with neither ``slurm_node_gres`` nor gathered GPU facts is not judged but listed under
    ``undeclared`` (a check that runs before the GPU facts are gathered); otherwise it counts as a node without GPUs.
    """
    nodes, owners, undeclared = {}, {}, []
    for host in _host_list(hosts):
        hv = _hostvars_of(hostvars, host)
        if undeclared_ok and _declared_gres(host, hv) is None and not _fact_gpus(host, hv, _type_map(host, hv, gpu_type_map)):
            undeclared.append(host)
            continue
        gres, _gpus = node_gres(host, hv, gpu_type_map)
        name = node_name(host, hv)
        if name in owners:
            raise SlurmRenderError("hosts %s and %s have the same Slurm node name %s (set slurm_node_name)"
                                   % (owners[name], host, name))
        owners[name] = host
        counts = {}
        for gres_name, gres_type, count in gres:
            if gres_name == "gpu":
                counts[gres_type or ""] = counts.get(gres_type or "", 0) + int(count)
        nodes[name] = counts
    found = {}
    if partitions is not None:
        for _line, name, members in partitions_of(partitions, groups or {}, hostvars):
            found[name] = sorted(set(members))
    return {"nodes": nodes, "partitions": found, "undeclared": undeclared}


# ---------------------------------------------------------------------------------------------------------------------
# topology.conf


def _names(where, value):
    expr = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value or "")
    try:
        names = _hostlist.expand(expr)
    except _hostlist.HostlistError as exc:
        raise SlurmRenderError("%s: %s" % (where, exc))
    if not names:
        raise SlurmRenderError("%s is empty" % where)
    return names


def _switch_name(value, where):
    name = str(value or "")
    if not NAME_RE.match(name) or len(name) > 64:
        raise SlurmRenderError("%s: switch name %r is not of [A-Za-z0-9_.-] (64 characters at most)" % (where, value))
    return name


def _entries(fabric, field):
    value = fabric.get(field) or []
    if not isinstance(value, (list, tuple)):
        raise SlurmRenderError("fabric.%s is %r, not a list" % (field, value))
    return value


def _topology_leaves(fabric, known_nodes):
    leaves, node_leaf = {}, {}
    for index, leaf in enumerate(_entries(fabric, "leaves")):
        name = _switch_name(leaf.get("name") if hasattr(leaf, "get") else None, "fabric.leaves[%d]" % index)
        if name in leaves:
            raise SlurmRenderError("fabric: switch %s is defined twice" % name)
        nodes = _names("fabric leaf %s nodes" % name, leaf.get("nodes"))
        for node in nodes:
            if node in node_leaf:
                raise SlurmRenderError("fabric: node %s is under leaves %s and %s" % (node, node_leaf[node], name))
            if known_nodes is not None and node not in known_nodes:
                raise SlurmRenderError("fabric leaf %s: node %s is not a Slurm node of the inventory" % (name, node))
            node_leaf[node] = name
        leaves[name] = nodes
    if not leaves:
        raise SlurmRenderError("fabric has no leaves")
    return leaves


def _topology_spines(fabric, leaves):
    spines = {}
    for index, spine in enumerate(_entries(fabric, "spines")):
        name = _switch_name(spine.get("name") if hasattr(spine, "get") else None, "fabric.spines[%d]" % index)
        if name in spines or name in leaves:
            raise SlurmRenderError("fabric: switch %s is defined twice" % name)
        children = _names("fabric spine %s switches" % name, spine.get("switches"))
        unknown = [c for c in children if c not in leaves]
        if unknown:
            raise SlurmRenderError("fabric spine %s: %s not a leaf of the fabric" % (name, ", ".join(unknown) + (" is" if len(unknown) == 1 else " are")))
        spines[name] = children
    return spines


def topology_lines(fabric, known_nodes=None):
    """topology.conf lines for topology/tree from ``{leaves: [{name, nodes}], spines: [{name, switches}], top: name}``.

    A fabric whose leaves no single switch reaches is an error (Slurm would only warn, and jobs could not span the
    parts): add ``top`` (a switch above all spines), or set ``allow_partitioned: true`` for separate islands.
    """
    if not hasattr(fabric, "get"):
        raise SlurmRenderError("fabric is %r, not a mapping with leaves and spines" % (fabric,))
    unknown = sorted(set(fabric) - {"leaves", "spines", "top", "allow_partitioned"})
    if unknown:
        raise SlurmRenderError("fabric: unknown fields %s" % ", ".join(unknown))
    known = set(known_nodes) if known_nodes is not None else None
    leaves = _topology_leaves(fabric, known)
    spines = _topology_spines(fabric, leaves)
    lines = ["SwitchName=%s Nodes=%s" % (name, _fold("fabric leaf %s" % name, nodes)) for name, nodes in leaves.items()]
    lines.extend("SwitchName=%s Switches=%s" % (name, _fold("fabric spine %s" % name, children)) for name, children in spines.items())
    tops = list(spines) or list(leaves)
    if fabric.get("top"):
        top = _switch_name(fabric["top"], "fabric.top")
        if top in leaves or top in spines:
            raise SlurmRenderError("fabric: top switch %s is also a leaf or spine" % top)
        lines.append("SwitchName=%s Switches=%s" % (top, _hostlist.fold(tops)))
        tops = [top]
    _check_reach(fabric, leaves, spines, tops)
    return lines


def _check_reach(fabric, leaves, spines, tops):
    under_spine = {leaf for children in spines.values() for leaf in children}
    if spines:
        orphans = [leaf for leaf in leaves if leaf not in under_spine]
        if orphans:
            raise SlurmRenderError("fabric: leaves %s are under no spine" % _hostlist.fold(orphans))
    if len(tops) == 1 or fabric.get("allow_partitioned"):
        return
    if spines and any(set(children) == set(leaves) for children in spines.values()):
        return
    raise SlurmRenderError("fabric: no single switch reaches every leaf (%s are separate tops), so Slurm could not run a job "
                           "across them: set fabric.top to a switch above them, or allow_partitioned: true" % _hostlist.fold(tops))
