# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node looks like to a role, observed again and compared with what a role's last no-change run saw.

The node side of gpucluster.ops.role_state (standard library only). An observation is a small dict naming what to
look at: ``{"kind": "file", "path": ...}``, ``{"kind": "tree", "path": ...}``, ``{"kind": "package", "name": ...}``,
``{"kind": "unit", "name": ...}`` or ``{"kind": "command", "argv": [...]}``. ``observe_all`` gives each one's value,
or an error; ``compare`` names the first observation whose value is not the recorded one. A command is run only when
``read_only_command`` accepts it: the same rule the controller applies before it records one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _ib

FORMAT = 1
KINDS = ("file", "tree", "package", "unit", "command", "age", "ib")
COMMAND_TIMEOUT = 60
TREE_LIMIT = 20000

# Programs (and the subcommands or options that keep them read-only) whose output a role reads to decide what to do.
# Anything else a role runs is not replayed: the role is not recorded and runs in full every time.
_READ_ONLY = (
    (("dpkg-query",), None),
    (("apt-cache", "policy"), None),
    (("apt-cache", "madison"), None),
    (("apt-cache", "show"), None),
    (("rpm", "-q"), None),
    (("lspci",), None),
    (("grep",), None),
    (("cat",), None),
    (("uname",), None),
    (("sha256sum",), None),
    (("udevadm", "--version"), None),
    (("ip", "-j", "addr", "show"), None),
    (("ip", "addr", "show"), None),
    (("systemctl", "show"), None),
    (("systemctl", "is-active"), None),
    (("systemctl", "is-enabled"), None),
    (("systemctl", "cat"), None),
    (("systemctl", "list-units"), None),
    (("systemctl", "list-unit-files"), None),
    (("systemd-analyze", "calendar"), None),
    (("nvidia-smi",), re.compile(r"^(--query-[a-z-]+=[a-z_.,]+|--format=[a-z,]+|-q|-L|--id=[0-9,]+)$")),
    (("scontrol", "--version"), None),
    (("scontrol", "show"), None),
    (("scontrol", "-o", "show"), None),
    (("sinfo",), None),
    (("podman", "info"), None),
    (("sysctl", "-n"), re.compile(r"^[a-z0-9_][a-z0-9_.\-/]*$")),
    (("sysctl",), re.compile(r"^[a-z0-9_][a-z0-9_.\-/]*$")),
)
_SH_COMMAND_V = ["sh", "-c", 'command -v "$1"', "sh"]


def read_only_command(argv):
    """Whether argv is a probe that reads and changes nothing, so that running it again is harmless."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        return False
    if list(argv[:4]) == _SH_COMMAND_V and len(argv) == 5:
        return True
    program = os.path.basename(argv[0])
    words = [program] + list(argv[1:])
    for prefix, rest in _READ_ONLY:
        if tuple(words[:len(prefix)]) == prefix:
            if rest is None:
                return True
            if all(rest.match(a) for a in words[len(prefix):]):
                return True
    return False


def item_key(item):
    """A stable name for an observation: its kind and what it looks at."""
    kind = item.get("kind")
    if kind == "command":
        return "command " + json.dumps(list(item.get("argv") or []))
    if kind in ("package", "unit"):
        return "%s %s" % (kind, item.get("name"))
    if kind == "age":
        return "age %s %s" % (item.get("path"), item.get("seconds"))
    if kind == "ib":
        return "ib %s %s" % (item.get("path"), item.get("ibstat"))
    return "%s %s" % (kind, item.get("path"))


def check_item(item):
    """None when the observation is well formed, else what is wrong with it."""
    if not isinstance(item, dict) or item.get("kind") not in KINDS:
        return "%r: kind must be one of %s" % (item, ", ".join(KINDS))
    kind = item["kind"]
    if kind in ("file", "tree", "age", "ib"):
        path = item.get("path")
        if not isinstance(path, str) or not os.path.isabs(path):
            return "%s: path %r is not absolute" % (kind, path)
        if kind == "age" and (not isinstance(item.get("seconds"), int) or item["seconds"] <= 0):
            return "age %s: seconds %r is not a positive whole number" % (path, item.get("seconds"))
    elif kind in ("package", "unit"):
        name = item.get("name")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9@_.+:\-]+$", name):
            return "%s: name %r is not a package or unit name" % (kind, name)
    elif not read_only_command(item.get("argv")):
        return "command %r is not one of the read-only probes" % (item.get("argv"),)
    return None


def _file(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"state": "absent"}
    value = {"mode": "%04o" % stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}
    if stat.S_ISLNK(st.st_mode):
        value.update(state="link", target=os.readlink(path))
    elif stat.S_ISDIR(st.st_mode):
        value.update(state="directory")
    elif stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        value.update(state="file", sha256=digest.hexdigest())
    else:
        value.update(state="other", type=stat.S_IFMT(st.st_mode))
    return value


def _tree(path):
    """Every entry below path (not following links): name, type, mode, owner, size and mtime, as one digest."""
    if not os.path.lexists(path):
        return {"state": "absent"}
    digest = hashlib.sha256()
    count = 0
    for top, dirs, files in os.walk(path, onerror=_raise):
        dirs.sort()
        for name in sorted(dirs + files):
            entry = os.path.join(top, name)
            st = os.lstat(entry)
            fields = (os.path.relpath(entry, path), st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)
            line = "%s\0%o\0%d\0%d\0%d\0%d\n" % fields
            digest.update(line.encode())
            count += 1
            if count > TREE_LIMIT:
                raise OSError("more than %d entries below %s" % (TREE_LIMIT, path))
    return {"state": "tree", "entries": count, "sha256": digest.hexdigest()}


def _age(path, fallback, seconds):
    """'fresh' while path (else fallback) was modified less than seconds ago, as apt's cache_valid_time reads its
    stamp, else 'stale'."""
    for candidate in (path, fallback):
        if candidate and os.path.exists(candidate):
            return "fresh" if time.time() - os.stat(candidate).st_mtime < seconds else "stale"
    return "stale"


def _ib_ports(root, ibstat):
    """The InfiniBand ports as gpucluster.ops.ib_facts reads them (sysfs, else ibstat), without counters."""
    if os.path.isdir(root):
        parsed = _ib.read_sys_class_infiniband(root, counters=False)
    else:
        program = ibstat if os.path.isabs(ibstat) else _which(ibstat)
        if not program:
            return {"source": "none"}
        rc, out, err = _run([program])
        if rc != 0:
            raise OSError("%s exited %d: %s" % (program, rc, err.decode("utf-8", "replace").strip()))
        parsed = _ib.parse_ibstat(out.decode("utf-8", "replace"))
    if parsed.get("unreadable"):
        raise OSError("; ".join(parsed["unreadable"][:3]))
    return {"ports": _ib.port_states(parsed), "errors": [e.get("message", "") for e in parsed.get("errors") or []]}


def _raise(exc):
    raise exc


def _run(argv):
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=COMMAND_TIMEOUT, check=False, env=dict(os.environ, LC_ALL="C"))
    return proc.returncode, proc.stdout, proc.stderr


def _packages(names):
    """name -> 'want status version' from dpkg, or 'version-release' from rpm; 'absent' when not installed."""
    names = sorted(set(names))
    if not names:
        return {}
    if _which("dpkg-query"):
        rc, out, err = _run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Want} ${db:Status-Status} ${Version}\n"]
                            + names)
        found = {}
        for line in out.decode("utf-8", "replace").splitlines():
            name, value = (line.split("\t", 1) + [""])[:2]
            found[name.split(":")[0]] = value
        if rc not in (0, 1) or (rc == 1 and b"no packages found" not in err):
            raise OSError("dpkg-query exited %d: %s" % (rc, err.decode("utf-8", "replace").strip()))
        return {name: found.get(name, "absent") for name in names}
    if _which("rpm"):
        values = {}
        for name in names:
            rc, out, _err = _run(["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}.%{ARCH}\n", name])
            values[name] = out.decode("utf-8", "replace").strip() if rc == 0 else "absent"
        return values
    raise OSError("neither dpkg-query nor rpm is installed")


UNIT_PROPERTIES = ("LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload", "FragmentPath", "DropInPaths")


def _units(names):
    names = sorted(set(names))
    if not names:
        return {}
    argv = ["systemctl", "show", "--no-pager"] + ["--property=" + p for p in UNIT_PROPERTIES] + ["--"] + names
    rc, out, err = _run(argv)
    if rc != 0:
        raise OSError("systemctl show exited %d: %s" % (rc, err.decode("utf-8", "replace").strip()))
    blocks = out.decode("utf-8", "replace").strip("\n").split("\n\n")
    if len(blocks) != len(names):
        raise OSError("systemctl show gave %d blocks for %d units" % (len(blocks), len(names)))
    return {name: "\n".join(sorted(block.splitlines())) for name, block in zip(names, blocks)}


def _command(argv):
    rc, out, err = _run(list(argv))
    return {"rc": rc, "stdout": hashlib.sha256(out).hexdigest(), "stderr": hashlib.sha256(err).hexdigest()}


def _which(program):
    """The path of program on PATH (and the sbin directories), or None."""
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/usr/sbin", "/sbin", "/usr/local/sbin"]:
        path = os.path.join(directory, program)
        if os.access(path, os.X_OK):
            return path
    return None


def observe_all(items):
    """(values, errors): key -> value for each observation, and key -> why it could not be observed."""
    values, errors = {}, {}
    batched = {"package": [], "unit": []}
    for item in items:
        key = item_key(item)
        problem = check_item(item)
        if problem:
            errors[key] = problem
            continue
        kind = item["kind"]
        if kind in batched:
            batched[kind].append(item["name"])
            continue
        try:
            if kind == "file":
                values[key] = _file(item["path"])
            elif kind == "tree":
                values[key] = _tree(item["path"])
            elif kind == "ib":
                values[key] = _ib_ports(item["path"], item.get("ibstat") or "ibstat")
            elif kind == "age":
                values[key] = _age(item["path"], item.get("fallback"), item["seconds"])
            else:
                values[key] = _command(item["argv"])
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            errors[key] = str(exc) or exc.__class__.__name__
    for kind, reader in (("package", _packages), ("unit", _units)):
        if not batched[kind]:
            continue
        try:
            for name, value in reader(batched[kind]).items():
                values["%s %s" % (kind, name)] = value
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            for name in batched[kind]:
                errors["%s %s" % (kind, name)] = str(exc) or exc.__class__.__name__
    return values, errors


def compare(recorded, current):
    """None when every recorded value is the current one, else the first difference, in words."""
    for key in sorted(recorded):
        if key not in current:
            return "%s: not observed now" % key
        if recorded[key] != current[key]:
            was, now = recorded[key], current[key]
            if isinstance(was, dict) and isinstance(now, dict):
                fields = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
                return "%s: %s" % (key, ", ".join("%s %s -> %s" % (f, was.get(f), now.get(f)) for f in fields))
            if isinstance(was, str) and isinstance(now, str) and "\n" in was + now:
                # a unit's properties, one per line: the lines that differ
                gone = [line for line in was.splitlines() if line not in now.splitlines()]
                came = [line for line in now.splitlines() if line not in was.splitlines()]
                return "%s: %s -> %s" % (key, ", ".join(gone) or "-", ", ".join(came) or "-")
            return "%s: %s -> %s" % (key, was, now)
    return None


def load(path):
    """The record at path: (record, None), or (None, why not)."""
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return None, "no record yet (%s)" % path
    except (OSError, ValueError) as exc:
        return None, "record %s cannot be read: %s" % (path, exc)
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("observed"), dict) \
            or not isinstance(record.get("items"), list) \
            or not isinstance(record.get("wanted"), dict) or not isinstance(record.get("facts", {}), dict):
        return None, "record %s is not a format %d record" % (path, FORMAT)
    return record, None


def save(path, record):
    """Write the record atomically (a temporary file, fsync, rename), readable by root alone."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    data = json.dumps(record, sort_keys=True, indent=1).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
