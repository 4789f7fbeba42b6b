# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a Slurm configuration directory before it reaches a live controller.

Standard library only (it runs on controllers without Ansible). ``check_config_dir(path)`` reads slurm.conf (and
what it includes), gres.conf, topology.conf and cgroup.conf the way Slurm's parser does and returns a list of
problems ``{"file", "line", "key", "message", "severity"}`` (severity ``error`` or ``warning``). It never raises
on file content.

What it finds, beyond what ``scontrol`` parses (see docs/slurm-config.md): unknown keys of Slurm 22.05 or 24.11,
bad values of typed keys (numbers, booleans, times, enumerations, plugin names), malformed hostlists, duplicate
node or partition names, partitions and switches that name undefined nodes, ``Gres=`` without ``GresTypes``,
non-numeric GRES counts (``gpu:a100:eight``), gres.conf and slurm.conf disagreeing per node on GRES types or counts,
``topology/tree`` without topology.conf, ``gres/gpu`` TRES in use without ``AccountingStorageTRES`` tracking it,
Include lines that are missing or leave the directory, and what slurmctld itself refuses or resets although the
type is right (no ClusterName, SlurmctldHost or partition, ports outside 1-65535, SrunPortRange it ignores, job id and
count limits, node counts of 0, CPUs matching no socket/core/thread product; keys.VALUE_RANGES). Several of these start a daemon that then misbehaves
(docs: "Configs that start but are wrong"), and a partition naming an undefined node kills a running slurmctld on
``scontrol reconfigure``.
"""

from __future__ import absolute_import, division, print_function

import os
import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist
from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_keys as keys
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_conf_parse import ConfigReader, problem
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SLURM_TIME_RE

__metaclass__ = type

FILES = ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf")

_BOOLEANS = ("yes", "no", "true", "false", "1", "0", "up", "down")
_INFINITE = ("infinite", "unlimited")
_NUMBER = re.compile(r"^\+?[0-9]+$")
_TIME = SLURM_TIME_RE                  # Slurm's own syntax: a bare number is minutes here
_COUNT = re.compile(r"^([0-9]+)([KMGTP]?)$", re.IGNORECASE)
_CORES = re.compile(r"^[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*$")
_TRES_GRES = re.compile(r"(gres/[A-Za-z0-9_.:-]+)\s*=", re.IGNORECASE)
_LIMITS = {"u16": 0xFFFF, "u32": 0xFFFFFFFF, "u64": 0xFFFFFFFFFFFFFFFF}
_MULTIPLIERS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}


def normalize_version(version):
    """Return "22.05", "24.11" or None (any of them) for a version string such as "24.11.5"; ValueError otherwise."""
    if version in (None, "", "any"):
        return None
    text = str(version).strip()
    major_minor = ".".join(text.split(".")[:2])
    if major_minor not in keys.VERSIONS:
        raise ValueError("unsupported Slurm version %r: use one of %s or 'any'" % (version, ", ".join(keys.VERSIONS)))
    return major_minor


class _Context(object):
    """What the checks share: the version, the problem list and what slurm.conf defines."""

    def __init__(self, directory, version, required_tres, allow_plugins):
        self.directory = directory
        self.version = version
        self.required_tres = [t.lower() for t in required_tres or ()]
        self.allow_plugins = set(allow_plugins or ())
        self.problems = []
        self.nodes = {}             # node name -> (file, line)
        self.node_gres = {}         # node name -> [(name, type, count)]
        self.nodesets = set()
        self.top = {}               # lower key -> Statement (last one)
        self.gres_lines = []        # [(Statement, [(name, type, count)])] of NodeName lines with Gres

    def add(self, file_name, line, key, message, severity="error"):
        self.problems.append(problem(file_name, line, key, message, severity))

    def known(self, versions):
        return self.version is None or self.version in versions


# ---------------------------------------------------------------------------------------------------------------------
# Values


def _check_number(kind, value):
    if value.lower() in _INFINITE:
        return None
    if not _NUMBER.match(value):
        return "%r is not a number" % value
    if int(value) > _LIMITS[kind]:
        return "%s is larger than %d" % (value, _LIMITS[kind])
    return None


def _check_enum(choices, value):
    if value.lower() not in [c.lower() for c in choices]:
        return "%r is not one of %s" % (value, ", ".join(choices))
    return None


def _check_list(choices, value):
    for item in value.split(","):
        if item.lower() not in [c.lower() for c in choices]:
            return "%r is not one of %s" % (item, ", ".join(choices))
    return None


def _check_time(value):
    if value.lower() in _INFINITE or _TIME.match(value):
        return None
    return ("%r is not a Slurm time (minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, "
            "days-hours:minutes:seconds, UNLIMITED)" % value)


def _plugin_names(family, version):
    both, only22, only24 = keys.PLUGINS.get(family, ("", "", ""))
    names = set(both.split()) | {"none"}
    if version in (None, "22.05"):
        names |= set(only22.split())
    if version in (None, "24.11"):
        names |= set(only24.split())
    return names


def _check_plugin(ctx, family, value, prefix_optional=False):
    name = value
    if "/" in value:
        given_family, name = value.split("/", 1)
        if given_family != family:
            return "%r is not a %s plugin (expected %s/NAME)" % (value, family, family)
    elif not prefix_optional:
        return "%r is not a plugin name (expected %s/NAME)" % (value, family)
    if name in _plugin_names(family, ctx.version) or "%s/%s" % (family, name) in ctx.allow_plugins:
        return None
    known = ", ".join("%s/%s" % (family, n) for n in sorted(_plugin_names(family, ctx.version)))
    return "%r is not a plugin of Slurm %s (known: %s)" % (value, ctx.version or "22.05 or 24.11", known)


def _check_plugins(ctx, family, value):
    for item in value.split(","):
        error = _check_plugin(ctx, family, item, prefix_optional=True)
        if error:
            return error
    return None


def _check_select_params(ctx, value, allowed_resources):
    items = value.split(",")
    resources = [i for i in items if i.lower() in [r.lower() for r in allowed_resources]]
    if len(resources) != 1:
        return "%r needs exactly one of %s" % (value, ", ".join(allowed_resources))
    modifiers = set()
    for version, names in keys.SELECT_MODIFIERS.items():
        if ctx.version in (None, version):
            modifiers |= {n.lower() for n in names}
    for item in items:
        if item not in resources and item.lower() not in modifiers:
            return "%r is not a SelectTypeParameters value of Slurm %s" % (item, ctx.version or "22.05 or 24.11")
    return None


def _check_oversubscribe(value):
    mode, _sep, count = value.partition(":")
    if mode.upper() not in keys.OVERSUBSCRIBE or (count and (mode.upper() not in ("FORCE", "YES") or not count.isdigit())):
        return "%r is not EXCLUSIVE, NO, YES[:count] or FORCE[:count]" % value
    return None


def parse_gres(value):
    """Parse a node's ``Gres=`` value: ([(name, type or None, count)], [error])."""
    entries, errors = [], []
    if value.lower() in ("", "(null)"):
        return entries, errors
    for item in value.split(","):
        item = re.sub(r"\([^)]*\)$", "", item)
        parts = item.split(":")
        if not parts[0] or len(parts) > 3:
            errors.append("%r is not NAME[:TYPE][:COUNT]" % item)
            continue
        gres_type, count = None, "1"
        if len(parts) == 2:
            count, gres_type = (parts[1], None) if _COUNT.match(parts[1]) else ("1", parts[1])
        elif len(parts) == 3:
            gres_type, count = parts[1], parts[2]
        match = _COUNT.match(count)
        if not match:
            errors.append("count %r in %r is not a number (Slurm reads it as another GRES type)" % (count, item))
            continue
        entries.append((parts[0], gres_type, int(match.group(1)) * _MULTIPLIERS[match.group(2).upper()]))
    return entries, errors


def _check_bool(value):
    return None if value.lower() in _BOOLEANS else "%r is not a boolean (yes, no, true, false, 1, 0)" % value


def _check_float(value):
    return None if re.match(r"^[0-9]+(\.[0-9]*)?$", value) else "%r is not a number" % value


def _check_features(value):
    return None if all(value.split(",")) else "%r has an empty feature name" % value


def _check_port(value):
    """SlurmdPort: 1-65535. slurmd binds the number modulo 65536 (70000 listens on 4464) and 0 on a random port."""
    if not _NUMBER.match(value):
        return "%r is not a port number" % value
    if not 1 <= int(value) <= 65535:
        return ("port %s is outside 1-65535 (Slurm takes it modulo 65536: 70000 becomes port 4464, 0 a random port)"
                % value)
    return None


def _check_port_range(value):
    """SlurmctldPort: PORT or FIRST-LAST within 1-65535 (slurmctld: "Invalid SlurmctldPort 0", "... 6820-6817")."""
    match = re.match(r"^([0-9]+)(?:-([0-9]+))?$", value)
    if not match:
        return "%r is not a port or port range" % value
    first, last = int(match.group(1)), int(match.group(2) or match.group(1))
    if first < 1 or last > 65535:
        return ("%s is outside 1-65535 (slurmctld stops on 0: \"Invalid SlurmctldPort\"; above 65535 it listens on the "
                "port modulo 65536: 70000 becomes 4464)" % value)
    if last < first:
        return "%s runs backwards (slurmctld stops: \"Invalid SlurmctldPort %s\")" % (value, value)
    return None


def _check_srun_ports(value):
    """SrunPortRange: MIN-MAX with MIN < MAX <= 65533, else Slurm ignores it silently."""
    match = re.match(r"^([0-9]+)-([0-9]+)$", value)
    if not match or not int(match.group(1)) < int(match.group(2)) <= keys.SRUN_PORT_MAX:
        return ("%r is not MIN-MAX with MIN < MAX <= %d; Slurm ignores it without an error (scontrol show config: "
                "SrunPortRange = 0-0; srun then listens on random ports, outside the range a firewall opens)" % (value, keys.SRUN_PORT_MAX))
    return None


def _node_ports(value):
    """The ports of a NodeName Port= value (a number, FIRST-LAST, or a bracketed list); ValueError when malformed."""
    inner = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    ports = []
    for item in inner.split(","):
        match = re.match(r"^([0-9]+)(?:-([0-9]+))?$", item)
        if not match:
            raise ValueError("%r is not a port, FIRST-LAST or [list] (slurmctld stops: \"Invalid Port %s\")" % (value, value))
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first or first < 1 or last > 65535:
            raise ValueError("%r is outside 1-65535 (slurmctld stops: \"Invalid Port %s\")" % (value, value))
        ports.extend(range(first, last + 1))
    return ports


def _check_node_ports(value):
    try:
        _node_ports(value)
    except ValueError as exc:
        return str(exc)
    return None


# kind -> check(ctx, value) returning an error message or None
_KIND_CHECKS = {
    "str": lambda ctx, value: None,
    "bool": lambda ctx, value: _check_bool(value),
    "float": lambda ctx, value: _check_float(value),
    "time": lambda ctx, value: _check_time(value),
    "debug_level": lambda ctx, value: None if value.isdigit() else _check_enum(keys.DEBUG_LEVELS, value),
    "acct_enforce": lambda ctx, value: _check_list(keys.ACCOUNTING_ENFORCE, value),
    "rlimits": lambda ctx, value: _check_list(keys.RLIMITS, value),
    "preempt_mode": lambda ctx, value: _check_list(keys.PREEMPT_MODES, value),
    "oversubscribe": lambda ctx, value: _check_oversubscribe(value),
    "port": lambda ctx, value: _check_port(value),
    "port_range": lambda ctx, value: _check_port_range(value),
    "node_ports": lambda ctx, value: _check_node_ports(value),
    "srun_ports": lambda ctx, value: _check_srun_ports(value),
    "select_params": lambda ctx, value: _check_select_params(ctx, value, keys.SELECT_RESOURCES),
    "part_select_params": lambda ctx, value: _check_select_params(ctx, value, keys.PARTITION_SELECT),
    "mpi": lambda ctx, value: _check_plugin(ctx, "mpi", value, prefix_optional=True),
    "gres": lambda ctx, value: (parse_gres(value)[1] or [None])[0],
    "features": lambda ctx, value: _check_features(value),
    "removed": lambda ctx, value: "removed from Slurm: slurmctld stops on it; delete the line",
    "defunct": lambda ctx, value: "defunct: Slurm ignores it with an error; delete the line",
    "u16": lambda ctx, value: _check_number("u16", value),
    "u32": lambda ctx, value: _check_number("u32", value),
    "u64": lambda ctx, value: _check_number("u64", value),
}
_FAMILY_CHECKS = {
    "enum": lambda ctx, family, value: _check_enum(family.split(","), value),
    "plugin": _check_plugin,
    "plugins": _check_plugins,
}


def _check_value(ctx, kind, value):
    """Return an error message for ``value`` of a key of ``kind``, or None."""
    if kind in _KIND_CHECKS:
        return _KIND_CHECKS[kind](ctx, value)
    prefix, _sep, family = kind.partition(":")
    if prefix in _FAMILY_CHECKS:
        return _FAMILY_CHECKS[prefix](ctx, family, value)
    return None


# Lower-case indexes of the module-level key tables, keyed by id(): only tables that live as long as the module may be
# passed to _lookup (a temporary dict's id can be reused by the next one, which would then get a stale index).
_INDEXES = {}


def _lookup(ctx, table, key):
    """Return (canonical key, kind) of ``key`` in ``table`` for the version, or (None, error message)."""
    index = _INDEXES.get(id(table))
    if index is None:
        index = _INDEXES[id(table)] = dict((name.lower(), (name, kind, versions)) for name, (kind, versions) in table.items())
    found = index.get(key.lower())
    if found is None:
        return None, "unknown key %s" % key
    name, kind, versions = found
    if not ctx.known(versions):
        return None, "%s is not a key of Slurm %s (only %s)" % (key, ctx.version, ", ".join(versions))
    return name, kind


def _check_pair(ctx, table, stmt, key, value):
    """Check that ``key`` exists for the version and that ``value`` fits its kind."""
    name, kind = _lookup(ctx, table, key)
    if name is None:
        ctx.add(stmt.file, stmt.line, key, kind)
        return
    error = _check_value(ctx, kind, value)
    if error:
        ctx.add(stmt.file, stmt.line, name, error, "warning" if kind == "defunct" else "error")


def _fold_text(names):
    """Names as a hostlist for a message; a plain list when they cannot be folded (odd characters)."""
    try:
        return _hostlist.fold(names)
    except _hostlist.HostlistError:
        return ",".join(sorted(set(names)))


def _hostlist_names(ctx, stmt, key, value):
    """Expand a hostlist value; report and return [] when Slurm would reject it."""
    try:
        return _hostlist.expand(value, allow_suffix=ctx.version == "24.11")
    except _hostlist.HostlistError as exc:
        ctx.add(stmt.file, stmt.line, key, "malformed hostlist: %s" % exc)
        return []


# ---------------------------------------------------------------------------------------------------------------------
# slurm.conf


def _check_slurm_statements(ctx, statements):
    seen_top = {}
    node_defaults = {}
    partitions = {}
    defaults = []
    for stmt in statements:
        lower = stmt.key.lower()
        if lower == "nodename":
            node_defaults = _check_node_line(ctx, stmt, node_defaults)
        elif lower == "partitionname":
            _check_partition_line(ctx, stmt, partitions, defaults)
        elif lower in ("downnodes", "nodeset"):
            _check_line_pairs(ctx, stmt, keys.SLURM_CONF["DownNodes" if lower == "downnodes" else "NodeSet"])
            if lower == "nodeset":
                ctx.nodesets.add(stmt.value)
        elif lower == "frontendname":
            _check_frontend_line(ctx, stmt)
        elif lower == "slurmctldhost":
            continue
        else:
            _check_top_pair(ctx, stmt, seen_top)
    if len(defaults) > 1:
        first = defaults[0]
        for stmt in defaults[1:]:
            ctx.add(stmt.file, stmt.line, "Default", "partition %s is Default=YES too (first: %s at %s:%d); Slurm keeps only one"
                    % (stmt.value, first.value, first.file, first.line))


def _check_top_pair(ctx, stmt, seen_top):
    lower = stmt.key.lower()
    if lower in seen_top:
        earlier = seen_top[lower]
        ctx.add(stmt.file, stmt.line, stmt.key, "set again (first at %s:%d); Slurm uses the last value" % (earlier.file, earlier.line),
                "warning")
    seen_top[lower] = stmt
    ctx.top[lower] = stmt
    _check_pair(ctx, keys.SLURM_CONF["top"], stmt, stmt.key, stmt.value)


def _check_line_pairs(ctx, stmt, table):
    for key, value, _op in stmt.pairs:
        _check_pair(ctx, table, stmt, key, value)


def _check_frontend_line(ctx, stmt):
    allowed = [k.lower() for k in keys.FRONTEND_KEYS]
    for key, _value, _op in stmt.pairs:
        if key.lower() not in allowed:
            ctx.add(stmt.file, stmt.line, key, "unknown key %s on a FrontendName line" % key)


def _missing_name(ctx, stmt):
    """NodeName= or PartitionName= followed by a blank: Slurm takes the next pair as the name. Report it; True if so."""
    if "=" not in stmt.value:
        return False
    ctx.add(stmt.file, stmt.line, stmt.key, "%s has no name: Slurm reads %r as the name and loses that key (slurmctld "
            "starts with a node or partition of that name)" % (stmt.key, stmt.value))
    return True


def _check_node_counts(ctx, stmt, fields, names):
    """Counts Slurm resets (0), CPUs that fit no socket/core/thread product, and Port= counts."""
    label = stmt.value
    for key in keys.NODE_NONZERO:
        value = stmt.get(key)
        if value is not None and _NUMBER.match(value) and int(value) == 0:
            ctx.add(stmt.file, stmt.line, key, "%s=0 is invalid: Slurm resets it to 1 (\"NodeNames=%s %s=0 is invalid, reset "
                    "to 1\")" % (key, label, key))
    numbers = dict((k, int(v)) for k, v in fields.items() if v is not None and _NUMBER.match(v))
    sockets = numbers.get("sockets")
    if sockets is None and "socketsperboard" in numbers:
        sockets = numbers.get("boards", 1) * numbers["socketsperboard"]
    cpus, cores, threads = numbers.get("cpus"), numbers.get("corespersocket"), numbers.get("threadspercore")
    if None not in (cpus, sockets, cores, threads) and 0 not in (sockets, cores, threads) and cpus not in (
            sockets, sockets * cores, sockets * cores * threads):
        ctx.add(stmt.file, stmt.line, "CPUs", "CPUs=%d matches no Sockets (%d), Sockets*CoresPerSocket (%d) or "
                "Sockets*CoresPerSocket*ThreadsPerCore (%d): Slurm resets CPUs" % (cpus, sockets, sockets * cores,
                                                                                   sockets * cores * threads))
    port = stmt.get("Port")
    if port and names and _check_node_ports(port) is None:
        count = len(_node_ports(port))
        if count not in (1, len(names)):
            ctx.add(stmt.file, stmt.line, "Port", "%d ports for %d nodes: slurmctld stops (\"Port count must equal that of "
                    "NodeName records or there must be no more than one\")" % (count, len(names)))


def _check_node_line(ctx, stmt, node_defaults):
    _check_line_pairs(ctx, stmt, keys.SLURM_CONF["NodeName"])
    merged = dict(node_defaults)
    merged.update((k.lower(), v) for k, v, _op in stmt.pairs)
    if stmt.value.upper() == "DEFAULT":
        _check_node_counts(ctx, stmt, {}, [])
        return merged
    if _missing_name(ctx, stmt):
        return node_defaults
    gres_value = stmt.get("Gres", node_defaults.get("gres"))
    gres = parse_gres(gres_value)[0] if gres_value else []
    names = _hostlist_names(ctx, stmt, "NodeName", stmt.value)
    _check_node_counts(ctx, stmt, merged, names)
    for name in names:
        if name in ctx.nodes:
            where = ctx.nodes[name]
            ctx.add(stmt.file, stmt.line, "NodeName", "node %s is defined again (first at %s:%d)" % (name, where[0], where[1]))
            continue
        ctx.nodes[name] = (stmt.file, stmt.line)
        ctx.node_gres[name] = gres
    if gres:
        ctx.gres_lines.append((stmt, gres))
    return node_defaults


def _check_partition_line(ctx, stmt, partitions, defaults):
    _check_line_pairs(ctx, stmt, keys.SLURM_CONF["PartitionName"])
    if stmt.value.upper() == "DEFAULT" or _missing_name(ctx, stmt):
        return
    if stmt.value in partitions:
        earlier = partitions[stmt.value]
        ctx.add(stmt.file, stmt.line, "PartitionName", "partition %s is defined again (first at %s:%d)" % (stmt.value, earlier.file, earlier.line))
    partitions[stmt.value] = stmt
    if (stmt.get("Default") or "").lower() in ("yes", "true", "1", "up"):
        defaults.append(stmt)


def _check_node_references(ctx, statements):
    """Partitions, DownNodes and NodeSets may only name defined nodes (or nodesets, or ALL)."""
    for stmt in statements:
        lower = stmt.key.lower()
        if lower == "partitionname" and stmt.value.upper() != "DEFAULT":
            value, key = stmt.get("Nodes"), "Nodes"
        elif lower == "downnodes":
            value, key = stmt.value, "DownNodes"
        elif lower == "nodeset":
            value, key = stmt.get("Nodes"), "Nodes"
        else:
            continue
        if not value or value.upper() == "ALL":
            continue
        names = _hostlist_names(ctx, stmt, key, value)
        unknown = [n for n in names if n not in ctx.nodes and n not in ctx.nodesets]
        if unknown:
            ctx.add(stmt.file, stmt.line, key, "%s %s names undefined nodes %s (a reconfigure with this kills slurmctld)"
                    % (stmt.key, stmt.value, _fold_text(unknown)))


def _check_required(ctx, statements):
    """Keys slurmctld cannot start without (messages of slurmctld -D, 22.05.8 and 24.11.5)."""
    cluster = ctx.top.get("clustername")
    if cluster is None:
        ctx.add("slurm.conf", 0, "ClusterName", "no ClusterName: slurmctld stops (\"ClusterName needs to be specified\")")
    elif cluster.value != cluster.value.lower():
        ctx.add(cluster.file, cluster.line, "ClusterName", "Slurm uses the name in lower case (%s): write it so, as sacctmgr "
                "and Include %%c see it" % cluster.value.lower(), "warning")
    if not any(s.key.lower() in ("slurmctldhost", "controlmachine") for s in statements):
        ctx.add("slurm.conf", 0, "SlurmctldHost", "no SlurmctldHost: slurmctld, slurmd and every client stop (\"No "
                "SlurmctldHost defined.\")")
    if not any(s.key.lower() == "partitionname" and s.value.upper() != "DEFAULT" for s in statements):
        if ctx.version == "24.11":
            ctx.add("slurm.conf", 0, "PartitionName", "no partition: Slurm 24.11 starts without a default partition "
                    "(\"default partition not set\"); jobs have nowhere to run", "warning")
        else:
            ctx.add("slurm.conf", 0, "PartitionName", "no partition: Slurm 22.05 stops (\"No PartitionName information "
                    "available!\"), 24.11 starts with no default partition")


def _top_number(ctx, key):
    stmt = ctx.top.get(key.lower())
    if stmt is None or not _NUMBER.match(stmt.value):
        return stmt, None
    return stmt, int(stmt.value)


def _check_ranges(ctx):
    """Numbers inside their type that slurmctld still refuses or resets (keys.VALUE_RANGES), and pairs of keys."""
    for key, (low, high, outcome) in sorted(keys.VALUE_RANGES.items()):
        stmt, number = _top_number(ctx, key)
        if number is None:
            continue
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = "%s-%s" % (low, high) if low is not None and high is not None else (
                "at least %d" % low if low is not None else "at most %d" % high)
            ctx.add(stmt.file, stmt.line, key, "%s=%d must be %s: %s" % (key, number, bounds, outcome))
    first, first_id = _top_number(ctx, "FirstJobId")
    last, last_id = _top_number(ctx, "MaxJobId")
    limit = keys.DEFAULT_MAX_JOB_ID if last is None else last_id
    if first_id is not None and limit is not None and first_id > limit:
        ctx.add(first.file, first.line, "FirstJobId", "FirstJobId=%d is above MaxJobId=%d%s: slurmctld stops (\"FirstJobId > "
                "MaxJobId\")" % (first_id, limit, " (the default)" if last is None else ""))
    for one, other in keys.EXCLUSIVE_KEYS:
        if one.lower() in ctx.top and other.lower() in ctx.top:
            stmt = ctx.top[one.lower()]
            ctx.add(stmt.file, stmt.line, one, "%s and %s exclude each other: Slurm ignores %s (\"%s ignored, since it's "
                    "mutually exclusive with %s\")" % (one, other, one, one, other))
    stmt, timeout = _top_number(ctx, "MessageTimeout")
    if timeout is not None and timeout > 100:
        ctx.add(stmt.file, stmt.line, "MessageTimeout", "MessageTimeout=%d: Slurm logs \"MessageTimeout is too high for "
                "effective fault-tolerance\" (above 100)" % timeout, "warning")


def _check_gres_types(ctx):
    """Every GRES a node declares must be in GresTypes, else Slurm silently drops it."""
    declared = ctx.top.get("grestypes")
    names = {n.strip().lower() for n in declared.value.split(",")} if declared else set()
    for stmt, gres in ctx.gres_lines:
        missing = sorted({name for name, _t, _c in gres if name.lower() not in names})
        if missing:
            ctx.add(stmt.file, stmt.line, "Gres", "Gres=%s needs GresTypes=%s; without it Slurm shows Gres=(null)"
                    % (stmt.get("Gres"), ",".join(missing)))


def _check_tres(ctx, statements):
    """gres/gpu limits and weights need the TRES tracked in AccountingStorageTRES."""
    tracked_stmt = ctx.top.get("accountingstoragetres")
    tracked = {t.strip().lower() for t in tracked_stmt.value.split(",")} if tracked_stmt else set()
    uses = [(s, "PriorityWeightTRES", s.value) for s in statements if s.key.lower() == "priorityweighttres"]
    for stmt in statements:
        for key, value, _op in stmt.pairs:
            if key.lower() in ("tresbillingweights", "tresweights"):
                uses.append((stmt, key, value))
    for stmt, key, value in uses:
        for tres in _TRES_GRES.findall(value):
            if tres.lower() not in tracked:
                ctx.add(stmt.file, stmt.line, key, "%s is not tracked: add it to AccountingStorageTRES" % tres)
    for tres in ctx.required_tres:
        if tres not in tracked:
            where = tracked_stmt or None
            ctx.add("slurm.conf", where.line if where else 0, "AccountingStorageTRES",
                    "GPU limits use %s: AccountingStorageTRES must contain it (sacctmgr rejects the limit otherwise)" % tres)


def _check_topology_plugin(ctx):
    stmt = ctx.top.get("topologyplugin")
    if stmt and stmt.value in ("topology/tree", "topology/block"):
        if not os.path.exists(os.path.join(ctx.directory, "topology.conf")):
            ctx.add(stmt.file, stmt.line, "TopologyPlugin", "%s needs topology.conf next to slurm.conf (slurmctld retries 60 s, "
                    "then stops)" % stmt.value)


# ---------------------------------------------------------------------------------------------------------------------
# gres.conf


def _gres_record_nodes(ctx, stmt):
    if stmt.key.lower() == "nodename":
        names = _hostlist_names(ctx, stmt, "NodeName", stmt.value)
        unknown = [n for n in names if n not in ctx.nodes]
        if unknown and ctx.nodes:
            ctx.add(stmt.file, stmt.line, "NodeName", "names nodes that slurm.conf does not define: %s" % _fold_text(unknown))
        return names
    return list(ctx.nodes)


def _gres_record(ctx, stmt):
    """Return (nodes, record dict) for one gres.conf line; record has name, type, count, autodetect."""
    fields = dict((k.lower(), v) for k, v, _op in stmt.pairs)
    if stmt.key.lower() == "name":
        fields["name"] = stmt.value
    files = fields.get("file") or fields.get("files")
    record = {"name": fields.get("name"), "type": fields.get("type"), "count": None, "autodetect": fields.get("autodetect"),
              "file": bool(files or fields.get("multiplefiles"))}
    if files:
        try:
            record["count"] = len(_hostlist.expand(files))
        except _hostlist.HostlistError as exc:
            ctx.add(stmt.file, stmt.line, "File", "malformed device list: %s" % exc)
        if fields.get("multiplefiles"):
            ctx.add(stmt.file, stmt.line, "MultipleFiles", "File and MultipleFiles exclude each other (slurmd stops)")
    if fields.get("multiplefiles"):
        record["count"] = 1
    _gres_count(ctx, stmt, fields, record)
    cores = fields.get("cores") or fields.get("cpus")
    if cores and not _CORES.match(cores):
        ctx.add(stmt.file, stmt.line, "Cores", "%r is not a list of core ids and ranges" % cores)
    return _gres_record_nodes(ctx, stmt), record


def _gres_count(ctx, stmt, fields, record):
    if "count" not in fields:
        if record["count"] is None:
            record["count"] = 1
        return
    match = _COUNT.match(fields["count"])
    if not match:
        ctx.add(stmt.file, stmt.line, "Count", "%r is not a number (slurmd stops)" % fields["count"])
        return
    count = int(match.group(1)) * _MULTIPLIERS[match.group(2).upper()]
    if record["count"] is not None and count != record["count"] and (record["name"] or "").lower() == "gpu":
        ctx.add(stmt.file, stmt.line, "Count", "Count=%d but File= lists %d devices (slurmd stops)" % (count, record["count"]))
    record["count"] = count


def _check_gres_keys(ctx, stmt):
    top = [k.lower() for k in keys.GRES_CONF_TOP]
    allowed = [k.lower() for k in keys.GRES_CONF_RECORD]
    if stmt.key.lower() not in top:
        ctx.add(stmt.file, stmt.line, stmt.key, "unknown key %s in gres.conf (slurmd stops)" % stmt.key)
        return False
    for key, value, _op in stmt.pairs:
        if key.lower() not in allowed:
            ctx.add(stmt.file, stmt.line, key, "unknown key %s in gres.conf (slurmd stops)" % key)
        elif key.lower() == "autodetect":
            _check_autodetect(ctx, stmt, value)
    if stmt.key.lower() == "autodetect":
        _check_autodetect(ctx, stmt, stmt.value)
    return True


def _check_autodetect(ctx, stmt, value):
    allowed = set()
    for version, names in keys.GRES_AUTODETECT.items():
        if ctx.version in (None, version):
            allowed |= set(names)
    if value.lower() not in allowed:
        ctx.add(stmt.file, stmt.line, "AutoDetect", "%r is not one of %s" % (value, ", ".join(sorted(allowed))))


def _check_gres_conf(ctx, statements):
    per_node = {}
    autodetect = {}
    grestypes = ctx.top.get("grestypes")
    gres_names = {n.strip().lower() for n in grestypes.value.split(",")} if grestypes else set()
    for stmt in statements:
        if not _check_gres_keys(ctx, stmt):
            continue
        if stmt.key.lower() == "autodetect":
            autodetect.update((n, stmt.value.lower()) for n in ctx.nodes)
            continue
        nodes, record = _gres_record(ctx, stmt)
        if record["autodetect"]:
            autodetect.update((n, record["autodetect"].lower()) for n in nodes)
        if not record["name"]:
            continue
        if record["name"].lower() not in gres_names:
            ctx.add(stmt.file, stmt.line, "Name", "%s is not in GresTypes of slurm.conf; slurmd ignores this line" % record["name"])
        for node in nodes:
            per_node.setdefault(node, []).append((stmt, record))
    _check_gres_consistency(ctx, per_node)
    _compare_gres(ctx, per_node, autodetect)


def _check_gres_consistency(ctx, per_node):
    """Per node and GRES name, all records have File= or none do, and Type= or none do (slurmd stops otherwise)."""
    reported = set()
    for records in per_node.values():
        by_name = {}
        for stmt, record in records:
            by_name.setdefault(record["name"].lower(), []).append((stmt, record))
        for name, items in by_name.items():
            for field, key in (("type", "Type"), ("file", "File")):
                if len({bool(r[field]) for _s, r in items}) > 1 and (name, field) not in reported:
                    reported.add((name, field))
                    stmt = items[-1][0]
                    ctx.add(stmt.file, stmt.line, key, "some %s records have %s= and others do not (slurmd stops)" % (name, key))


def _gres_totals(entries):
    totals = {}
    for name, gres_type, count in entries:
        key = (name.lower(), (gres_type or "").lower())
        totals[key] = totals.get(key, 0) + count
    return totals


def _compare_gres(ctx, per_node, autodetect):
    """slurm.conf Gres and gres.conf records must agree per node (else slurmd marks the node INVAL)."""
    mismatches = {}
    for node, declared in ctx.node_gres.items():
        records = per_node.get(node, [])
        conf = _gres_totals([(r["name"], r["type"], r["count"] or 0) for _s, r in records])
        want = _gres_totals(declared)
        for name in sorted({n for n, _t in want} | {n for n, _t in conf}):
            found = _gres_difference(name, want, conf, autodetect.get(node, "off"))
            if found:
                where = (records[-1][0].file, records[-1][0].line) if records else ctx.nodes[node]
                mismatches.setdefault(found + where, []).append(node)
    for (message, severity, file_name, line), nodes in sorted(mismatches.items(), key=lambda m: (m[0][3], m[0][0])):
        ctx.add(file_name, line, "Gres", "nodes %s: %s" % (_fold_text(nodes), message), severity)


def _gres_difference(name, want, conf, autodetect):
    """(message, severity) when slurm.conf (want) and gres.conf (conf) disagree on GRES ``name``, else None."""
    want_types = dict((t, c) for (n, t), c in want.items() if n == name)
    conf_types = dict((t, c) for (n, t), c in conf.items() if n == name)
    if not conf_types:
        if name == "gpu" and want_types and autodetect == "off":
            return ("slurm.conf declares gpu but gres.conf has no record for it (slurmd drops file-less GPUs: node INVAL)", "error")
        return None
    if not want_types:
        return ("gres.conf defines %s that slurm.conf does not declare; slurmd ignores them" % _gres_text(name, conf_types), "warning")
    same = sum(conf_types.values()) == want_types[""] if set(want_types) == {""} else want_types == conf_types
    if not same:
        return ("slurm.conf has %s, gres.conf %s" % (_gres_text(name, want_types), _gres_text(name, conf_types)), "error")
    return None


def _gres_text(name, types):
    return ",".join("%s%s:%d" % (name, ":" + t if t else "", c) for t, c in sorted(types.items()))


# ---------------------------------------------------------------------------------------------------------------------
# topology.conf


def _check_topology_conf(ctx, statements):
    table = keys.TOPOLOGY_CONF
    switches = {}
    for stmt in statements:
        name, kind = _lookup(ctx, table, stmt.key)
        if name is None or name not in ("SwitchName", "BlockName", "BlockSizes"):
            ctx.add(stmt.file, stmt.line, stmt.key, kind if name is None else "a line must start with SwitchName= or BlockName=")
            continue
        _check_line_pairs(ctx, stmt, table)
        if name != "SwitchName":
            continue
        if stmt.value in switches:
            ctx.add(stmt.file, stmt.line, "SwitchName", "switch %s is defined again (slurmctld stops)" % stmt.value)
            continue
        if stmt.get("Nodes") and stmt.get("Switches"):
            ctx.add(stmt.file, stmt.line, "SwitchName", "switch %s has both Nodes and Switches" % stmt.value)
        switches[stmt.value] = stmt
    _check_switch_tree(ctx, switches)


def _check_switch_tree(ctx, switches):
    children = {}
    leaf_of = {}
    for name, stmt in switches.items():
        if stmt.get("Nodes"):
            _check_leaf(ctx, stmt, leaf_of)
        elif stmt.get("Switches"):
            names = _hostlist_names(ctx, stmt, "Switches", stmt.get("Switches"))
            unknown = [n for n in names if n not in switches or n == name]
            if unknown:
                ctx.add(stmt.file, stmt.line, "Switches", "switch %s names unknown switches %s (slurmctld stops)" % (name, ",".join(unknown)))
            children[name] = [n for n in names if n in switches and n != name]
    if _has_cycle(children):
        first = next(iter(switches.values()))
        ctx.add(first.file, first.line, "Switches", "the switches do not form a tree (slurmctld stops)")
        return
    missing = [n for n in ctx.nodes if n not in leaf_of]
    if missing and leaf_of:
        first = next(iter(switches.values()))
        ctx.add(first.file, first.line, "Nodes", "nodes %s are under no switch (switches lack access to them)" % _fold_text(missing))
    _check_single_root(ctx, switches, children)


def _check_leaf(ctx, stmt, leaf_of):
    for node in _hostlist_names(ctx, stmt, "Nodes", stmt.get("Nodes")):
        if ctx.nodes and node not in ctx.nodes:
            ctx.add(stmt.file, stmt.line, "Nodes", "switch %s names node %s that slurm.conf does not define" % (stmt.value, node))
        elif node in leaf_of:
            ctx.add(stmt.file, stmt.line, "Nodes", "node %s is under switch %s and %s" % (node, leaf_of[node], stmt.value))
        else:
            leaf_of[node] = stmt.value


def _has_cycle(children):
    state = {}

    def visit(name):
        if state.get(name) == 1:
            return True
        if state.get(name) == 2:
            return False
        state[name] = 1
        if any(visit(child) for child in children.get(name, ())):
            return True
        state[name] = 2
        return False

    return any(visit(name) for name in list(children))


def _check_single_root(ctx, switches, children):
    leaves = {n for n, s in switches.items() if s.get("Nodes")}

    def reach(name, seen):
        if name in seen:
            return set()
        seen.add(name)
        found = {name} & leaves
        for child in children.get(name, ()):
            found |= reach(child, seen)
        return found

    if leaves and not any(reach(name, set()) == leaves for name in switches):
        first = next(iter(switches.values()))
        ctx.add(first.file, first.line, "Switches", "no switch reaches every leaf: jobs cannot span the parts of the fabric", "warning")


# ---------------------------------------------------------------------------------------------------------------------
# cgroup.conf


# 24.11 (and "any version") accepts CgroupPlugin=disabled; built once so that _lookup's index of it stays valid.
_CGROUP_CONF_24 = dict(keys.CGROUP_CONF, CgroupPlugin=(keys.CGROUP_PLUGIN_24, keys.BOTH))


def _check_cgroup_conf(ctx, statements):
    table = _CGROUP_CONF_24 if ctx.version in (None, "24.11") else keys.CGROUP_CONF
    for stmt in statements:
        _check_pair(ctx, table, stmt, stmt.key, stmt.value)


# ---------------------------------------------------------------------------------------------------------------------
# Entry point


def _read(ctx, name, line_keys):
    reader = ConfigReader(ctx.directory, line_keys)
    if not reader.read(name):
        return None
    ctx.problems.extend(reader.problems)
    return reader.statements


def check_config_dir(path, version=None, required_tres=(), allow_plugins=()):
    """Check the Slurm config files in directory ``path``; return the problems, errors and warnings.

    version: "22.05", "24.11" (or a full version such as "24.11.5"), or None/"any" for keys of either version.
    required_tres: TRES that limits will use (e.g. ["gres/gpu"]); AccountingStorageTRES must track them.
    allow_plugins: extra plugin names to accept (e.g. ["switch/hpe_slingshot"]) for builds with more plugins.
    """
    ctx = _Context(path, normalize_version(version), required_tres, allow_plugins)
    if not os.path.isdir(path):
        return [problem("", 0, "", "%s is not a directory" % path)]
    slurm = _read(ctx, "slurm.conf", keys.LINE_KEYS)
    if slurm is None:
        return [problem("slurm.conf", 0, "", "no slurm.conf in %s" % path)]
    _check_slurm_statements(ctx, slurm)
    _check_required(ctx, slurm)
    _check_ranges(ctx)
    _check_node_references(ctx, slurm)
    _check_gres_types(ctx)
    _check_tres(ctx, slurm)
    _check_topology_plugin(ctx)
    gres = _read(ctx, "gres.conf", {"name": "Name", "nodename": "NodeName"})
    if gres is not None:
        _check_gres_conf(ctx, gres)
    elif any(name.lower() == "gpu" for entries in ctx.node_gres.values() for name, _t, _c in entries):
        ctx.add("gres.conf", 0, "Gres", "slurm.conf declares gpu GRES but there is no gres.conf (slurmd drops file-less GPUs)")
    topology = _read(ctx, "topology.conf", {"switchname": "SwitchName", "blockname": "BlockName"})
    if topology is not None:
        _check_topology_conf(ctx, topology)
    cgroup = _read(ctx, "cgroup.conf", {})
    if cgroup is not None:
        _check_cgroup_conf(ctx, cgroup)
    order = dict((name, index) for index, name in enumerate(FILES))
    return sorted(ctx.problems, key=lambda p: (order.get(p["file"], len(FILES)), p["file"], p["line"]))


def format_problem(item):
    """One line per problem: ``file:line: key: message`` (warnings say so)."""
    prefix = "warning: " if item.get("severity") == "warning" else ""
    return "%s:%d: %s: %s%s" % (item["file"], item["line"], item["key"] or "-", prefix, item["message"])
