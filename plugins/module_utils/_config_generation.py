# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A set of configuration files installed as one generation and switched with one rename(2).

Layout under a directory DIR (for Slurm, /etc/slurm)::

    DIR/<name>                  -> .gpucluster/current/<name>     one symlink per managed file, made once
    DIR/.gpucluster/current     -> gen-<sha>                      the files in use: one symlink, replaced by rename
    DIR/.gpucluster/applied     -> gen-<sha>                      the generation the daemons were last told about
    DIR/.gpucluster/gen-<sha>/  the files of one generation, written in a temporary directory and renamed into place

Every step keeps what a reader of DIR/<name> sees a consistent set (all old or all new files):

1. migration from plain files: a generation holding exactly what is live is made current, then each plain file is
   replaced (rename) by its symlink, which shows the same bytes;
2. the new generation is written complete (fsync) under a temporary name, read back, and renamed to gen-<sha>;
3. a symlink for a file new to the set is made before the switch (it dangles, as the file was absent, until then);
4. current is switched with one rename of a new symlink over it;
5. symlinks of files no longer in the set (dangling since the switch) are removed; old generations are pruned,
   never current, applied or the one before.

A process killed between any two steps leaves an old or a new set live, and the next run finishes the job. The
``applied`` mark is moved by the caller once the daemons re-read the files (mark_applied), so that a run killed
after the switch but before the daemons were told reports a change again (and its handlers run) the next time.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile

STORE = ".gpucluster"
CURRENT = "current"
APPLIED = "applied"
GEN_PREFIX = "gen-"


def generation_name(files):
    """gen-<first 16 hex digits of the sha256 over the sorted names and contents>."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name].encode("utf-8") if isinstance(files[name], str) else files[name]
        digest.update(name.encode("utf-8") + b"\0" + str(len(data)).encode("ascii") + b"\0" + data)
    return GEN_PREFIX + digest.hexdigest()[:16]


def _bytes(content):
    return content.encode("utf-8") if isinstance(content, str) else content


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


class Generations:
    """The managed files of one directory. ``names``: every name the caller manages (present or to remove)."""

    def __init__(self, directory, names, mode=0o644, uid=None, gid=None, keep=1):
        self.dir = directory
        self.names = sorted(set(names))
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.keep = keep
        self.store = os.path.join(directory, STORE)

    # --- reading ---------------------------------------------------------------------------------------------------
    def link_target(self, name):
        return os.path.join(STORE, CURRENT, name)

    def current(self):
        """The generation current points at, or None."""
        return _readlink(os.path.join(self.store, CURRENT))

    def applied(self):
        return _readlink(os.path.join(self.store, APPLIED))

    def live(self):
        """What a reader of DIR/<name> sees now: name -> bytes, for the names that resolve."""
        found = {}
        for name in self.names:
            data = _read(os.path.join(self.dir, name))
            if data is not None:
                found[name] = data
        return found

    def generation_ok(self, gen, files):
        """True when DIR/.gpucluster/<gen> holds exactly these files with their contents, mode and owner."""
        path = os.path.join(self.store, gen)
        if os.path.islink(path) or not os.path.isdir(path):
            return False
        if sorted(os.listdir(path)) != sorted(files):
            return False
        for name, content in files.items():
            if not self._file_ok(os.path.join(path, name), _bytes(content)):
                return False
        return True

    def _file_ok(self, path, data):
        try:
            info = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != self.mode:
            return False
        if (self.uid is not None and info.st_uid != self.uid) or (self.gid is not None and info.st_gid != self.gid):
            return False
        return _read(path) == data

    def plan(self, files):
        """What install(files) would do, as a list of short reasons (empty: nothing to do)."""
        gen = generation_name(files)
        todo = []
        plain = [n for n in self.names if os.path.lexists(os.path.join(self.dir, n))
                 and not os.path.islink(os.path.join(self.dir, n))]
        if plain:
            todo.append("migrate the plain files %s to symlinks" % ", ".join(plain))
        if not self.generation_ok(gen, files):
            todo.append("write generation %s" % gen)
        for name in sorted(files):
            if _readlink(os.path.join(self.dir, name)) != self.link_target(name):
                todo.append("link %s" % name)
        if self.current() != gen:
            todo.append("switch current from %s to %s" % (self.current(), gen))
        for name in self.names:
            if name not in files and os.path.lexists(os.path.join(self.dir, name)):
                todo.append("remove %s" % name)
        if files and self.applied() != gen:
            todo.append("generation %s not yet applied (the daemons were not told of it)" % gen)
        return todo

    # --- writing ---------------------------------------------------------------------------------------------------
    def _swap_link(self, path, target):
        """Point the symlink path at target with one rename(2) (over a symlink or a plain file)."""
        parent = os.path.dirname(path)
        tmp = os.path.join(parent, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.rename(tmp, path)
        _fsync_dir(parent)

    def _write_generation(self, gen, files):
        """Write files into a new directory and rename it to gen (the directory exists only complete)."""
        final = os.path.join(self.store, gen)
        tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % gen, dir=self.store)
        os.chmod(tmp, 0o755)
        for name, content in files.items():
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(_bytes(content))
                handle.flush()
                os.fsync(handle.fileno())
            if self.uid is not None or self.gid is not None:
                os.chown(path, -1 if self.uid is None else self.uid, -1 if self.gid is None else self.gid)
            os.chmod(path, self.mode)
        _fsync_dir(tmp)
        for name, content in files.items():
            if _read(os.path.join(tmp, name)) != _bytes(content):
                raise OSError("generation %s: %s does not read back as written" % (gen, name))
        if os.path.lexists(final):
            # a generation of this name that does not verify and is not in use: set aside, then removed
            aside = tempfile.mkdtemp(prefix=".%s.bad-" % gen, dir=self.store)
            os.rename(final, os.path.join(aside, gen))
            _remove_tree(aside)
        os.rename(tmp, final)
        _fsync_dir(self.store)

    def _repair_in_place(self, gen, files):
        """The generation in use was altered by hand: rewrite each file with a rename (no reader sees a part)."""
        path = os.path.join(self.store, gen)
        for entry in os.listdir(path):
            if entry not in files:
                os.unlink(os.path.join(path, entry))
        for name, content in files.items():
            fd, tmp = tempfile.mkstemp(prefix=".%s.tmp-" % name, dir=path)
            with os.fdopen(fd, "wb") as handle:
                handle.write(_bytes(content))
                handle.flush()
                os.fsync(handle.fileno())
            if self.uid is not None or self.gid is not None:
                os.chown(tmp, -1 if self.uid is None else self.uid, -1 if self.gid is None else self.gid)
            os.chmod(tmp, self.mode)
            os.rename(tmp, os.path.join(path, name))
        _fsync_dir(path)

    def _ensure_generation(self, gen, files):
        if self.generation_ok(gen, files):
            return
        if self.current() == gen:
            self._repair_in_place(gen, files)
        else:
            self._write_generation(gen, files)

    def _migrate(self):
        """Plain files in DIR: make what is live a generation, current, and replace each file by its symlink."""
        plain = [n for n in self.names if os.path.lexists(os.path.join(self.dir, n))
                 and not os.path.islink(os.path.join(self.dir, n))]
        if not plain:
            return
        live = self.live()
        gen = generation_name(live)
        self._ensure_generation(gen, live)
        if self.current() != gen:
            # every linked name shows the same bytes in gen (it is what is live), every plain one is not linked yet
            self._swap_link(os.path.join(self.store, CURRENT), gen)
        if self.applied() is None:
            # the daemons run with what was live
            self._swap_link(os.path.join(self.store, APPLIED), gen)
        for name in plain:
            self._swap_link(os.path.join(self.dir, name), self.link_target(name))

    def install(self, files):
        """Make files the live set. Returns (changed, previous generation)."""
        todo = self.plan(files)
        previous = self.current()
        if not todo:
            return False, previous
        if not os.path.isdir(self.store):
            os.mkdir(self.store, 0o755)
            _fsync_dir(self.dir)
        self._migrate()
        previous = self.current()
        gen = generation_name(files)
        self._ensure_generation(gen, files)
        for name in sorted(files):
            if _readlink(os.path.join(self.dir, name)) != self.link_target(name):
                self._swap_link(os.path.join(self.dir, name), self.link_target(name))
        if self.current() != gen:
            self._swap_link(os.path.join(self.store, CURRENT), gen)
        for name in self.names:
            if name not in files and os.path.lexists(os.path.join(self.dir, name)):
                os.unlink(os.path.join(self.dir, name))
        self.prune(keep_also=[previous])
        return True, previous

    def remove(self):
        """None of the names in use here any more: remove their files or symlinks and the generations."""
        changed = False
        for name in self.names:
            if os.path.lexists(os.path.join(self.dir, name)):
                os.unlink(os.path.join(self.dir, name))
                changed = True
        if os.path.lexists(self.store):
            _remove_tree(self.store)
            changed = True
        return changed

    def mark_applied(self):
        """The daemons were told of current: applied -> current. Returns True when it moved."""
        gen = self.current()
        if gen is None or self.applied() == gen:
            return False
        self._swap_link(os.path.join(self.store, APPLIED), gen)
        self.prune()
        return True

    def prune(self, keep_also=()):
        """Remove generations other than current, applied, those in keep_also and the newest `keep` others."""
        if not os.path.isdir(self.store):
            return []
        keep = {self.current(), self.applied()} | set(keep_also)
        entries = os.listdir(self.store)
        stale = [e for e in entries if e.startswith(".") and (".tmp-" in e or ".bad-" in e)]
        gens = [e for e in entries if e.startswith(GEN_PREFIX) and e not in keep]
        gens.sort(key=lambda e: os.lstat(os.path.join(self.store, e)).st_mtime, reverse=True)
        removed = []
        for entry in stale + gens[self.keep:]:
            _remove_tree(os.path.join(self.store, entry))
            removed.append(entry)
        # symlinks a killed run left half made (DIR/.<name>.tmp-<pid>)
        for entry in os.listdir(self.dir):
            if any(entry.startswith(".%s.tmp-" % name) for name in self.names):
                os.unlink(os.path.join(self.dir, entry))
                removed.append(entry)
        return removed


def _remove_tree(path):
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    for entry in os.listdir(path):
        _remove_tree(os.path.join(path, entry))
    os.rmdir(path)
