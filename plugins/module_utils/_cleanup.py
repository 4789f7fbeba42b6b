# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Disk cleanup on a node: old files and job scratch directories, the package manager's downloads, old container
images. What the node_cleanup module runs; standard library only (it runs on the nodes: Python 3.8+, 3.9+ under ansible-core 2.20 and later).

``check_rules`` checks every rule before anything is removed and raises ``SpecError`` naming ``rules[i].key`` and the
value; ``run_rules`` then runs them (or, in check mode, lists what each would remove).

Safety, for the files rules, against the users who own the directories cleaned (issue 46): the walk is by file
descriptors, never by path. Each listed path is opened from '/' to its allowed root (resolved when the rules are
checked) and on, one directory at a time, each with O_NOFOLLOW|O_DIRECTORY relative to the one before (a parent
swapped for a symlink since the check is not followed); below it, each directory is opened the same way relative to
its verified parent and must still be the directory that was looked at (``st_dev``, ``st_ino``); files are looked at
(``fstatat``, no symlink followed) and unlinked relative to their directory's descriptor, right after checking they
are still the same file. A directory swapped for a symlink during the walk is thus never entered, and an unlink
removes at most a name in the directory that was checked: nothing outside the listed path. A symlink itself may be
removed when old. Nothing below a listed path on another filesystem (``st_dev``) is touched; a listed path itself is
never removed; a file that a process holds open (``/proc/*/fd``), or a scratch directory that holds one or is a
process's working directory, is skipped as ``in_use``; a file that vanishes meanwhile is not an error.

The checks refuse every bad path by name (relative, with a NUL byte or a '..' component), '/' and, as an allowed root
or a rule's path, a system tree (``SYSTEM_TREES``: /etc, /usr, /home, /var/lib ..., also one a path resolves to or
holds) unless the rule sets ``allow_system_tree: true``.
"""

from __future__ import absolute_import, division, print_function

import calendar
import errno
import fnmatch
import json
import os
import re
import shutil
import stat
import subprocess
import time

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError, parse_duration

__metaclass__ = type

DEFAULT_ROOTS = ["/scratch", "/tmp", "/var/tmp", "/var/log", "/var/crash", "/var/lib/systemd/coredump",
                 "/var/cache/apt", "/var/cache/dnf", "/var/cache/yum"]
KINDS = ("files", "package_cache", "container_images")
UNITS = ("file", "entry")
RUNTIMES = ("docker", "podman", "containerd")
REFUSED_NAMESPACES = ("k8s.io",)
CAP = 200                      # entries of ``removed`` and ``skipped`` returned per rule; all are counted
KEYS = {
    "files": ("name", "kind", "paths", "age", "patterns", "unit", "allow_system_tree"),
    "package_cache": ("name", "kind", "age"),
    "container_images": ("name", "kind", "runtime", "age", "keep", "namespace"),
}
# The package managers' downloaded packages: (directory, file name globs). Each that exists is cleaned.
PACKAGE_CACHES = [
    ("/var/cache/apt/archives", ["*.deb"]),
    ("/var/cache/apt/archives/partial", ["*"]),
    ("/var/cache/dnf", ["*.rpm"]),
    ("/var/cache/yum", ["*.rpm"]),
]
_CLI = {"docker": "docker", "podman": "podman", "containerd": "ctr"}
_SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
               "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4}
_CREATED_RE = re.compile(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.\d+)?\s*(Z|[+-]\d\d:?\d\d)?(?:\s+\w+)?$")

# The system's own trees: never an allowed root, nor below one or holding one (/var holds /var/lib), unless a rule
# sets allow_system_tree. /lib* (lib32, lib64, libx32 ...) are matched by name. Below them, these may be cleaned.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/opt", "/proc", "/root", "/run", "/sbin", "/snap",
                "/srv", "/sys", "/usr", "/var/lib", "/var/mail", "/var/run", "/var/spool")
SYSTEM_TREE_EXCEPTIONS = ("/var/lib/systemd/coredump",)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def _lstat(name, dir_fd, path):
    """The lstat of ``name`` in the directory ``dir_fd`` (``path``, its full name, lets a test simulate another
    filesystem)."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def _children(dir_fd, path):
    """The names in the directory ``dir_fd`` (at ``path``), sorted."""
    del path
    return sorted(os.listdir(dir_fd))


def _race_point(point, path):
    """The seam where another process may act: called with ``open`` before a directory is opened, ``unlink`` before
    a file is unlinked and ``rmdir`` before a directory is removed, and ``path``. Does nothing; a test swaps a
    directory for a symlink here, between the check and the act."""


# ---------------------------------------------------------------------------------------------------------------------
# Checking the rules


def _is_str(value):
    return isinstance(value, str) and value.strip() != ""


def _str_list(rule, key, where, default=None):
    value = rule.get(key, default)
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SpecError("%s.%s is %r: give a list of strings" % (where, key, value))
    for item in value:
        if not _is_str(item):
            raise SpecError("%s.%s is %r: every item must be a non-empty string, not %r" % (where, key, value, item))
    return list(value)


def _under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _absolute_dir(value, where):
    """``value`` normalized; a SpecError naming ``where`` for anything but an absolute path without NUL or '..'."""
    if not _is_str(value):
        raise SpecError("%s is %r: give an absolute directory" % (where, value))
    if "\0" in value:
        raise SpecError("%s is %r: a path has no NUL byte" % (where, value))
    if not value.startswith("/"):
        raise SpecError("%s is %r: give an absolute directory" % (where, value))
    if ".." in value.split("/"):
        raise SpecError("%s is %r: a '..' component is refused: give the directory itself" % (where, value))
    path = os.path.normpath(value)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    return path


def system_tree(path):
    """The system tree that ``path`` is, lies below or holds (``/var`` holds ``/var/lib``), or None."""
    if any(_under(path, safe) for safe in SYSTEM_TREE_EXCEPTIONS):
        return None
    for tree in SYSTEM_TREES:
        if _under(path, tree) or _under(tree, path):
            return tree
    match = re.match(r"^/lib[^/]*", path)
    return match.group(0) if match else None


def check_roots(roots, system_trees=False):
    """The allowed roots, normalized; '/', anything not absolute, and (unless ``system_trees``: a rule sets
    ``allow_system_tree``) a system tree, also one a root resolves to, are refused."""
    if roots is None:
        roots = DEFAULT_ROOTS
    if isinstance(roots, str) or not isinstance(roots, (list, tuple)) or not roots:
        raise SpecError("allowed_roots is %r: give a non-empty list of absolute directories" % (roots,))
    checked = []
    for index, root in enumerate(roots):
        path = _absolute_dir(root, "allowed_roots[%d]" % index)
        if path == "/":
            raise SpecError("allowed_roots[%d] is %r: '/' is never an allowed root" % (index, root))
        if not system_trees:
            real = os.path.realpath(path)
            tree = system_tree(path) or system_tree(real)
            if tree:
                resolved = "" if real == path or system_tree(path) else ", which resolves to %s" % real
                raise SpecError("allowed_roots[%d] is %r%s: %s is a system tree, never an allowed root unless a rule "
                                "sets allow_system_tree: true" % (index, root, resolved, tree))
        checked.append(path)
    return checked


def _check_path(value, where, name, roots, system_trees=False):
    """``(path, real root, path below it)``: the listed path, the allowed root it is walked from (the outermost that
    holds it, resolved now) and the rest of the path, walked from there one directory at a time."""
    path = _absolute_dir(value, where)
    said = "rule %r: %s is %r" % (name, where, value)
    if path == "/":
        raise SpecError("%s: '/' is never cleaned (allowed roots: %s)" % (said, ", ".join(roots)))
    holding = [root for root in roots if _under(path, root)]
    if not holding:
        raise SpecError("%s, which is not one of the allowed roots or below one (allowed_roots: %s)"
                        % (said, ", ".join(roots)))
    real = os.path.realpath(path)
    if not any(_under(real, os.path.realpath(root)) for root in roots):
        raise SpecError("%s, which resolves through a symlink to %s, outside the allowed roots (allowed_roots: %s)"
                        % (said, real, ", ".join(roots)))
    tree = system_tree(path) or system_tree(real)
    if tree and not system_trees:
        resolved = "" if real == path or system_tree(path) else ", which resolves to %s" % real
        raise SpecError("%s%s: %s is a system tree; a path in it, or holding it, is cleaned only when the rule sets "
                        "allow_system_tree: true" % (said, resolved, tree))
    root = min(holding, key=len)
    return path, os.path.realpath(root), path[len(root):].strip("/")


def _check_globs(rule, key, where, default):
    globs = _str_list(rule, key, where, default)
    for glob in globs:
        if "\0" in glob:
            raise SpecError("%s.%s has %r: a NUL byte matches no name" % (where, key, glob))
        if key == "patterns" and "/" in glob:
            raise SpecError("%s.%s has %r: a pattern matches a file name, which has no '/'" % (where, key, glob))
    return globs


def check_rule(rule, index, roots, names):
    """One rule, checked and completed with its defaults; raises SpecError naming ``rules[index].key``."""
    where = "rules[%d]" % index
    if not isinstance(rule, dict):
        raise SpecError("%s is %r: each rule is a dict with name, kind and the kind's keys" % (where, rule))
    name = rule.get("name")
    if not _is_str(name):
        raise SpecError("%s.name is %r: each rule needs a name (a non-empty string)" % (where, name))
    if name in names:
        raise SpecError("%s.name is %r: another rule has that name; names must be unique" % (where, name))
    kind = rule.get("kind")
    if kind not in KINDS:
        raise SpecError("%s.kind is %r: give one of %s" % (where, kind, ", ".join(KINDS)))
    unknown = sorted(set(rule) - set(KEYS[kind]))
    if unknown:
        raise SpecError("%s.%s is not a key of a %s rule (its keys: %s)"
                        % (where, unknown[0], kind, ", ".join(KEYS[kind])))
    checked = dict(name=name, kind=kind)
    system_trees = rule.get("allow_system_tree", False)
    if not isinstance(system_trees, bool):
        raise SpecError("%s.allow_system_tree is %r: give true or false" % (where, system_trees))
    age = rule.get("age")
    if kind != "package_cache" and age is None:
        raise SpecError("%s.age is required for a %s rule: give a duration such as '7d'" % (where, kind))
    checked["age"] = parse_duration(age, where + ".age")
    if kind == "files":
        paths = _str_list(rule, "paths", where) if rule.get("paths") is not None else None
        if not paths:
            raise SpecError("%s.paths is %r: a files rule needs a list of absolute directories"
                            % (where, rule.get("paths")))
        listed = [_check_path(p, "%s.paths[%d]" % (where, n), name, roots, system_trees)
                  for n, p in enumerate(paths)]
        checked["paths"] = [path for path, _root, _below in listed]
        checked["patterns"] = _check_globs(rule, "patterns", where, ["*"])
        checked["allow_system_tree"] = system_trees
        # (listed path, patterns, the allowed root it is walked from, resolved now, the path below that root)
        checked["targets"] = [(path, checked["patterns"], root, below) for path, root, below in listed]
        unit = rule.get("unit", "file")
        if unit not in UNITS:
            raise SpecError("%s.unit is %r: give one of %s" % (where, unit, ", ".join(UNITS)))
        checked["unit"] = unit
    elif kind == "package_cache":
        # The caches of this node's package manager (those that exist), each checked against the allowed roots.
        checked["targets"] = []
        for cache, globs in PACKAGE_CACHES:
            if os.path.lexists(cache):
                path, root, below = _check_path(cache, "its package cache", name, roots)
                checked["targets"].append((path, globs, root, below))
    else:
        runtime = rule.get("runtime")
        if runtime not in RUNTIMES:
            raise SpecError("%s.runtime is %r: give one of %s" % (where, runtime, ", ".join(RUNTIMES)))
        checked["runtime"] = runtime
        checked["keep"] = _check_globs(rule, "keep", where, [])
        namespace = rule.get("namespace")
        if namespace is not None and runtime != "containerd":
            raise SpecError("%s.namespace is %r: only a containerd rule has a namespace" % (where, namespace))
        if runtime == "containerd":
            namespace = "default" if namespace is None else namespace
            if not _is_str(namespace) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", namespace):
                raise SpecError("%s.namespace is %r: give a containerd namespace name" % (where, namespace))
            if namespace in REFUSED_NAMESPACES:
                raise SpecError("%s.namespace is %r: the kubelet manages the images of %s; they are never cleaned "
                                "here" % (where, namespace, namespace))
            checked["namespace"] = namespace
    return checked


def check_rules(rules, roots=None):
    """``(rules, roots)`` checked; raises SpecError naming the first bad ``rules[i].key`` or ``allowed_roots``."""
    opted = isinstance(rules, (list, tuple)) and any(
        isinstance(r, dict) and r.get("allow_system_tree") is True for r in rules)
    roots = check_roots(roots, system_trees=opted)
    if isinstance(rules, dict) or not isinstance(rules, (list, tuple)) or not rules:
        raise SpecError("rules is %r: give a non-empty list of rules" % (rules,))
    checked = []
    for index, rule in enumerate(rules):
        checked.append(check_rule(rule, index, roots, [r["name"] for r in checked]))
    return checked, roots


# ---------------------------------------------------------------------------------------------------------------------
# What processes hold open


def open_files(proc="/proc"):
    """``(inodes, cwds, error)``: the (st_dev, st_ino) of every file a process holds open and of every process's
    working directory, read from ``/proc/*/fd`` and ``/proc/*/cwd``; ``error`` says why they could not be read
    (then nothing may be removed). A process that exits meanwhile is fine."""
    inodes, cwds = set(), set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
        os.listdir(os.path.join(proc, "self", "fd"))
    except OSError as exc:
        return None, None, "cannot read the open files of the processes in %s: %s" % (proc, exc)
    unreadable = []
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ESRCH):
                continue
            unreadable.append(pid)
            continue
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue
            inodes.add((st.st_dev, st.st_ino))
        try:
            st = os.stat(os.path.join(proc, pid, "cwd"))
            cwds.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    if unreadable:
        return None, None, ("cannot read the open files of %d processes (pid %s): run as root"
                            % (len(unreadable), ", ".join(unreadable[:5])))
    return inodes, cwds, None


# ---------------------------------------------------------------------------------------------------------------------
# Files


class _Report(object):
    """One rule's result; lists are capped at CAP entries, everything counted."""

    def __init__(self, rule):
        self.result = dict(name=rule["name"], kind=rule["kind"], removed=[], removed_count=0, removed_bytes=0,
                           removed_truncated=0, skipped=[], skipped_truncated=0, missing_paths=[], errors=[])
        self.seen = set()

    def removed(self, path, size, **extra):
        result = self.result
        result["removed_count"] += 1
        result["removed_bytes"] += size
        if len(result["removed"]) < CAP:
            result["removed"].append(dict(extra, path=path, bytes=size))
        else:
            result["removed_truncated"] += 1

    def skipped(self, path, why):
        result = self.result
        if len(result["skipped"]) < CAP:
            result["skipped"].append(dict(path=path, why=why))
        else:
            result["skipped_truncated"] += 1

    def error(self, text):
        self.result["errors"].append(text)


def _vanished(exc):
    return isinstance(exc, OSError) and exc.errno == errno.ENOENT


def _why(exc):
    return getattr(exc, "strerror", None) or exc


class _Replaced(Exception):
    """A directory was swapped (for a symlink, another directory or a file) while the rule ran."""


def _open_dir(name, dir_fd, path, expected=None):
    """A descriptor of the directory ``name`` in the directory ``dir_fd`` (``path`` is its full name, for the
    messages and the seam), never through a symlink (O_NOFOLLOW); with ``expected`` (its lstat), only that very
    directory. Raises ``_Replaced`` when it is no longer that directory, OSError otherwise."""
    _race_point("open", path)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _Replaced(path)
        raise
    if expected is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            os.close(fd)
            raise _Replaced(path)
    return fd


def _listed(dir_fd, top):
    """``([(name, path, lstat)], problems)``: the direct children of the directory ``dir_fd`` (at ``top``), those that
    vanish meanwhile left out."""
    try:
        names = _children(dir_fd, top)
    except OSError as exc:
        return [], [] if _vanished(exc) else ["cannot list %s: %s" % (top, _why(exc))]
    children, problems = [], []
    for name in names:
        path = os.path.join(top, name)
        try:
            children.append((name, path, _lstat(name, dir_fd, path)))
        except OSError as exc:
            if not _vanished(exc):
                problems.append("cannot read %s: %s" % (path, _why(exc)))
    return children, problems


def _reported(dir_fd, top, report):
    children, problems = _listed(dir_fd, top)
    for problem in problems:
        report.error(problem)
    return children


REPLACED = "replaced while the rule ran (by a symlink or another directory): not entered"


def _walk_files(dir_fd, top, dev, report):
    """``(directory fd, name, path, lstat)`` of every non-directory below the directory ``dir_fd``, each directory
    opened relative to its verified parent, not descending symlinks nor other filesystems."""
    for name, path, st in _reported(dir_fd, top, report):
        if not stat.S_ISDIR(st.st_mode):
            yield dir_fd, name, path, st
            continue
        if st.st_dev != dev:
            report.skipped(path, "other filesystem")
            continue
        try:
            fd = _open_dir(name, dir_fd, path, st)
        except _Replaced:
            report.skipped(path, REPLACED)
            continue
        except OSError as exc:
            if not _vanished(exc):
                report.error("cannot open %s: %s" % (path, _why(exc)))
            continue
        try:
            yield from _walk_files(fd, path, dev, report)
        finally:
            os.close(fd)


def _unlink(dir_fd, name, path, st):
    """Unlink ``name`` in the directory ``dir_fd`` if it is still the file ``st`` (never a directory, never through
    a symlink): None when done or vanished, else why not."""
    try:
        now = _lstat(name, dir_fd, path)
        if stat.S_ISDIR(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return "replaced while the rule ran: not removed"
        _race_point("unlink", path)
        os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        return None if _vanished(exc) else "cannot remove %s: %s" % (path, _why(exc))
    return None


def _remove_file(dir_fd, name, path, st, report):
    why = _unlink(dir_fd, name, path, st)
    if why is None:
        return True
    if why.startswith("replaced"):
        report.skipped(path, why)
    else:
        report.error(why)
    return False


def _file_unit(top_fd, top, dev, rule, cutoff, busy, check_mode, report):
    for dir_fd, name, path, st in _walk_files(top_fd, top, dev, report):
        if path in report.seen or not any(fnmatch.fnmatchcase(name, p) for p in rule["patterns"]):
            continue
        report.seen.add(path)
        if st.st_mtime >= cutoff:
            continue
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            report.skipped(path, "not a regular file or symlink")
            continue
        if (st.st_dev, st.st_ino) in busy[0]:
            report.skipped(path, "in_use")
            continue
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        if check_mode or _remove_file(dir_fd, name, path, st, report):
            report.removed(path, size)


def _scan(dir_fd, name, here, here_st, entry, dev, busy, seen):
    """Why the entry ``entry`` may not go, or None; ``seen`` collects ``[newest mtime, bytes]`` of all of it
    (directories opened relative to their verified parent, no symlink followed)."""
    if here_st.st_dev != dev:
        return "other filesystem" if here == entry else "holds another filesystem at %s" % here
    if (here_st.st_dev, here_st.st_ino) in busy[0]:
        return "in_use" if here == entry else "in_use: %s is open" % here
    seen[0] = max(seen[0], here_st.st_mtime)
    if not stat.S_ISDIR(here_st.st_mode):
        seen[1] += here_st.st_size if stat.S_ISREG(here_st.st_mode) else 0
        return None
    if (here_st.st_dev, here_st.st_ino) in busy[1]:
        return "in_use: %s is a process's working directory" % here
    try:
        fd = _open_dir(name, dir_fd, here, here_st)
    except _Replaced:
        return "%s was %s" % (here, REPLACED)
    except OSError as exc:
        return None if _vanished(exc) else "cannot open %s: %s" % (here, _why(exc))
    try:
        children, problems = _listed(fd, here)
        if problems:
            return problems[0]
        for child_name, child, child_st in children:
            why = _scan(fd, child_name, child, child_st, entry, dev, busy, seen)
            if why:
                return why
    finally:
        os.close(fd)
    return None


def _remove_tree(dir_fd, name, path, st, dev, problems):
    """Remove the directory ``name`` of ``dir_fd`` with all it holds, through directory descriptors (what shutil.rmtree
    does on Linux, which Python 3.8 cannot do relative to a directory descriptor), never following a symlink nor
    entering another filesystem."""
    try:
        fd = _open_dir(name, dir_fd, path, st)
    except _Replaced:
        problems.append("%s was %s" % (path, REPLACED))
        return
    except OSError as exc:
        if not _vanished(exc):
            problems.append("cannot open %s: %s" % (path, _why(exc)))
        return
    try:
        children, listing = _listed(fd, path)
        problems.extend(listing)
        for child_name, child, child_st in children:
            if not stat.S_ISDIR(child_st.st_mode):
                why = _unlink(fd, child_name, child, child_st)
                if why:
                    problems.append(why if why.startswith("cannot") else "%s %s" % (child, why))
            elif child_st.st_dev != dev:
                problems.append("%s is another filesystem: not removed" % child)
            else:
                _remove_tree(fd, child_name, child, child_st, dev, problems)
    finally:
        os.close(fd)
    try:
        _race_point("rmdir", path)
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        if not _vanished(exc):
            problems.append("cannot remove %s: %s" % (path, _why(exc)))


def _remove_entry(dir_fd, name, path, st, dev, report):
    if not stat.S_ISDIR(st.st_mode):
        return _remove_file(dir_fd, name, path, st, report)
    problems = []
    _remove_tree(dir_fd, name, path, st, dev, problems)
    for problem in problems[:5]:
        report.error(problem)
    if len(problems) > 5:
        report.error("... and %d more errors removing %s" % (len(problems) - 5, path))
    return not problems


def _entry_unit(top_fd, top, dev, rule, cutoff, busy, check_mode, report):
    for name, path, st in _reported(top_fd, top, report):
        if not any(fnmatch.fnmatchcase(name, p) for p in rule["patterns"]):
            continue
        if st.st_mtime >= cutoff and not stat.S_ISDIR(st.st_mode):
            continue
        seen = [st.st_mtime, 0]
        why = _scan(top_fd, name, path, st, path, dev, busy, seen)
        newest, size = seen
        if newest >= cutoff:
            continue
        if why is None and not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            why = "not a directory, regular file or symlink"
        if why:
            report.skipped(path, why)
        elif check_mode or _remove_entry(top_fd, name, path, st, dev, report):
            report.removed(path, size)


def _open_target(top, real_root, below, report):
    """A descriptor of the listed path ``top``, opened from '/' to its allowed root (as it resolved when the rules
    were checked) and on to ``top`` one directory at a time, each relative to the one before, none through a symlink:
    a parent swapped since the check is not followed. None, with what happened reported, when it cannot be."""
    in_root = [part for part in real_root.split("/") if part]
    parts = in_root + [part for part in below.split("/") if part]
    fd = os.open("/", _DIR_FLAGS)
    here = ""
    try:
        for index, part in enumerate(parts):
            here = here + "/" + part
            last, at_root = index == len(parts) - 1, index < len(in_root)
            shown = top if last else here
            try:
                st = _lstat(part, fd, here)
                if stat.S_ISLNK(st.st_mode):
                    if at_root:
                        report.error("%s, on the way to the allowed root %s, is now a symlink (it was not when the "
                                     "rules were checked): %s not cleaned" % (here, real_root, top))
                    elif last:
                        report.skipped(top, "symlink: a listed path that is a symlink is not followed")
                    else:
                        report.skipped(top, "symlink: %s, on the way from the allowed root to it, is a symlink; "
                                            "not followed" % here)
                    return None
                if not stat.S_ISDIR(st.st_mode):
                    report.error("%s is not a directory" % shown)
                    return None
                next_fd = _open_dir(part, fd, here, st)
            except _Replaced:
                report.error("%s was replaced while the rule ran: %s not cleaned" % (here, top))
                return None
            except OSError as exc:
                if _vanished(exc):
                    report.result["missing_paths"].append(top)
                else:
                    report.error("cannot read %s: %s" % (shown, _why(exc)))
                return None
            os.close(fd)
            fd = next_fd
        result, fd = fd, None
        return result
    finally:
        if fd is not None:
            os.close(fd)


def _run_files(rule, targets, now, busy, check_mode, report):
    if not targets:
        return
    if busy[2]:
        report.error(busy[2] + "; nothing removed")
        return
    cutoff = now - (rule["age"] or 0)
    for top, patterns, real_root, below in targets:
        top_fd = _open_target(top, real_root, below, report)
        if top_fd is None:
            continue
        try:
            dev = os.fstat(top_fd).st_dev
            unit = dict(rule, patterns=patterns)
            if rule.get("unit") == "entry":
                _entry_unit(top_fd, top, dev, unit, cutoff, busy, check_mode, report)
            else:
                _file_unit(top_fd, top, dev, unit, cutoff, busy, check_mode, report)
        except RecursionError:
            report.error("%s: the tree below it is too deep to walk; the rest of it was not cleaned" % top)
        finally:
            os.close(top_fd)


# ---------------------------------------------------------------------------------------------------------------------
# Container images


def _epoch(text):
    """Seconds since the epoch from an RFC 3339 time as docker, podman and containerd print it; None if unreadable."""
    match = _CREATED_RE.match((text or "").strip())
    if not match:
        return None
    seconds = calendar.timegm(time.strptime(match.group(1) + " " + match.group(2), "%Y-%m-%d %H:%M:%S"))
    zone = (match.group(3) or "Z").replace(":", "")
    if zone != "Z":
        offset = int(zone[1:3]) * 3600 + int(zone[3:5]) * 60
        seconds -= offset if zone[0] == "+" else -offset
    return seconds


def _bytes(number, unit):
    try:
        return int(float(number) * _SIZE_UNITS[unit.lower()])
    except (KeyError, ValueError):
        return None


def _short(image_id):
    image_id = image_id or ""
    return image_id[len("sha256:"):] if image_id.startswith("sha256:") else image_id


class _CommandError(Exception):
    pass


def _call(runner, argv):
    rc, out, err = runner(argv)
    if rc != 0:
        raise _CommandError("%s exited %d: %s" % (" ".join(argv[:4]), rc, (err or out or "").strip()))
    return out


def _json(runner, argv):
    out = _call(runner, argv)
    try:
        return json.loads(out)
    except ValueError:
        raise _CommandError("%s printed no JSON: %r" % (" ".join(argv[:4]), out[:200]))


def _engine_images(cli, runner):
    """docker/podman: [{id, names, created, bytes}] and the set of image ids any container uses."""
    ids = []
    for line in _call(runner, [cli, "image", "ls", "--quiet", "--no-trunc"]).splitlines():
        if line.strip() and line.strip() not in ids:
            ids.append(line.strip())
    images = []
    if ids:
        for item in _json(runner, [cli, "image", "inspect"] + ids):
            names = [t for t in (item.get("RepoTags") or []) if t and t != "<none>:<none>"]
            images.append(dict(id=_short(item.get("Id")), digest=item.get("Id"), names=names,
                               created=_epoch(item.get("Created")),
                               created_text=item.get("Created"), bytes=item.get("Size") or 0))
    containers = [c.strip() for c in _call(runner, [cli, "container", "ls", "--all", "--quiet", "--no-trunc"])
                  .splitlines() if c.strip()]
    used = {}
    if containers:
        for item in _json(runner, [cli, "container", "inspect"] + containers):
            used.setdefault(_short(item.get("Image")), item.get("Id", "")[:12])
    return images, used


def _ctr_created(cli, namespace, runner, digest):
    """The creation time of a containerd image from its config, through its index or manifest; None if unreadable."""
    for _depth in range(3):
        try:
            doc = _json(runner, [cli, "-n", namespace, "content", "get", digest])
        except _CommandError:
            return None
        if "config" in doc:
            try:
                config = _json(runner, [cli, "-n", namespace, "content", "get", doc["config"]["digest"]])
            except (_CommandError, KeyError, TypeError):
                return None
            return config.get("created") if isinstance(config, dict) else None
        manifests = [m.get("digest") for m in doc.get("manifests") or [] if isinstance(m, dict)]
        present = [d for d in manifests if d and runner([cli, "-n", namespace, "content", "get", d])[0] == 0]
        if not present:
            return None
        digest = present[0]
    return None


def _ctr_images(cli, namespace, runner):
    """containerd (ctr): the images of a namespace by digest, and the digests its containers use."""
    by_digest = {}
    lines = _call(runner, [cli, "-n", namespace, "images", "ls"]).splitlines()
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 5:
            continue
        ref, digest, size = fields[0], fields[2], _bytes(fields[3], fields[4])
        image = by_digest.setdefault(digest, dict(id=_short(digest), digest=digest, names=[], bytes=size or 0))
        image["names"].append(ref)
    images = []
    for digest, image in sorted(by_digest.items()):
        text = _ctr_created(cli, namespace, runner, digest)
        images.append(dict(image, created=_epoch(text), created_text=text))
    refs = dict((name, image["id"]) for image in images for name in image["names"])
    used = {}
    for line in _call(runner, [cli, "-n", namespace, "containers", "ls"]).splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 2 and fields[1] in refs:
            used.setdefault(refs[fields[1]], fields[0][:12])
    return images, used


def _run_images(rule, now, runner, which, check_mode, report):
    runtime = rule["runtime"]
    cli = which(_CLI[runtime])
    if not cli:
        report.error("%s is not installed (no %s on PATH): cannot tell which images are old" % (runtime, _CLI[runtime]))
        return
    try:
        if runtime == "containerd":
            images, used = _ctr_images(cli, rule["namespace"], runner)
        else:
            images, used = _engine_images(cli, runner)
    except _CommandError as exc:
        report.error("cannot list the %s images: %s" % (runtime, exc))
        return
    cutoff = now - rule["age"]
    for image in images:
        label = ", ".join(image["names"]) or image["id"]
        if image["created"] is None:
            report.error("%s: cannot read its creation time %r" % (label, image["created_text"]))
            continue
        if image["created"] >= cutoff:
            continue
        kept = [g for g in rule["keep"] for n in (image["names"] or ["<none>:<none>"]) if fnmatch.fnmatchcase(n, g)]
        if kept:
            report.skipped(label, "kept: matches %r" % kept[0])
            continue
        if image["id"] in used:
            report.skipped(label, "used by container %s" % used[image["id"]])
            continue
        if not check_mode:
            names = image["names"] or [image.get("digest") or image["id"]]
            if runtime == "containerd":
                argv = [cli, "-n", rule["namespace"], "images", "rm"] + names
            else:
                argv = [cli, "image", "rm"] + names
            rc, out, err = runner(argv)
            if rc != 0:
                text = (err or out or "").strip()
                if re.search(r"conflict|dependent child|in use|being used", text, re.I):
                    report.skipped(label, "%s refused: %s" % (runtime, text))
                else:
                    report.error("cannot remove %s: %s image rm exited %d: %s" % (label, runtime, rc, text))
                continue
        report.removed(label, image["bytes"], id=image["id"])


# ---------------------------------------------------------------------------------------------------------------------
# Running the rules


def default_runner(argv):
    """Run ``argv`` with LC_ALL=C; ``(rc, stdout, stderr)``."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        # the rules also run outside a module (the unit tests, a dry run by hand); the module passes its run_command
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,  # pylint: disable=ansible-bad-function
                                universal_newlines=True)
    except OSError as exc:
        return 127, "", str(exc)
    out, err = proc.communicate()
    return proc.returncode, out, err


def run_rules(rules, check_mode=False, runner=None, which=None, now=None, proc="/proc"):
    """Run checked rules (``check_rules``); the module's result: changed, rules, removed_bytes, status."""
    now = time.time() if now is None else now
    runner = runner or default_runner
    which = which or shutil.which
    busy = None
    results = []
    for rule in rules:
        report = _Report(rule)
        if rule["kind"] == "container_images":
            _run_images(rule, now, runner, which, check_mode, report)
        else:
            if busy is None:
                busy = open_files(proc)
            if rule["kind"] == "package_cache" and not rule["targets"]:
                report.error("no package cache found (looked for %s)" % ", ".join(p for p, _g in PACKAGE_CACHES))
            _run_files(rule, rule["targets"], now, busy, check_mode, report)
        results.append(report.result)
    return dict(changed=any(r["removed_count"] for r in results), rules=results,
                removed_bytes=sum(r["removed_bytes"] for r in results),
                status="unknown" if any(r["errors"] for r in results) else "ok")
