# -*- coding: utf-8 -*-
"""The generations of Slurm's configuration files: a run killed after any write leaves one whole set live.

Every test kills the install at each of its filesystem writes in turn (the k-th rename, symlink, unlink, mkdir,
rmdir, chmod or file creation raises), checks that what DIR/<name> shows is the old set or the new set, then lets a
second install finish and checks it converged.
"""

import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _config_generation as cg

NAMES = ["slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"]
OLD = {"slurm.conf": "ClusterName=old\n", "gres.conf": "old gres\n", "cgroup.conf": "old cgroup\n",
       "topology.conf": "old topology\n"}
NEW = {"slurm.conf": "ClusterName=new\n", "gres.conf": "new gres\n", "cgroup.conf": "new cgroup\n",
       "topology.conf": "new topology\n"}
WRITES = ["rename", "symlink", "unlink", "mkdir", "rmdir", "chmod", "chown"]


class Killed(BaseException):
    """The process died here (not an OSError: nothing in the code may catch it)."""


def _as_bytes(files):
    return {k: v.encode() for k, v in files.items()}


def _store(tmp_path):
    return cg.Generations(str(tmp_path), NAMES, uid=None, gid=None)


def _plain(tmp_path, files):
    for name, content in files.items():
        (tmp_path / name).write_text(content)
        os.chmod(tmp_path / name, 0o644)


def _kill_at(monkeypatch, k):
    """Make the k-th filesystem write (1-based) raise Killed; return the counter."""
    count = {"n": 0}
    real_open = os.open

    def wrap(real):
        def call(*args, **kwargs):
            count["n"] += 1
            if count["n"] == k:
                raise Killed()
            return real(*args, **kwargs)
        return call

    for name in WRITES:
        monkeypatch.setattr(cg.os, name, wrap(getattr(os, name)))

    def opener(path, flags, *args):
        if flags & (os.O_WRONLY | os.O_RDWR):
            count["n"] += 1
            if count["n"] == k:
                raise Killed()
        return real_open(path, flags, *args)
    monkeypatch.setattr(cg.os, "open", opener)
    return count


def _every_kill_point(tmp_path, monkeypatch, setup, old, new):
    """setup(path) makes the starting state (live: old); install(new) is killed at each write in turn."""
    k = 1
    while True:
        path = tmp_path / ("k%d" % k)
        path.mkdir()
        setup(path)
        assert _store(path).live() == _as_bytes(old)
        with monkeypatch.context() as patch:
            _kill_at(patch, k)
            try:
                _store(path).install(new)
                finished = True
            except Killed:
                finished = False
        live = _store(path).live()
        assert live in (_as_bytes(old), _as_bytes(new)), (k, live)
        # the next run converges, and then has nothing left but the daemons' acknowledgement
        changed, _prev = _store(path).install(new)
        assert _store(path).live() == _as_bytes(new), k
        assert _store(path).plan(new) in ([], ["generation %s not yet applied (the daemons were not told of it)"
                                               % cg.generation_name(new)]), k
        assert _store(path).mark_applied() in (True, False)
        assert _store(path).plan(new) == [] and _store(path).install(new) == (False, cg.generation_name(new))
        assert not [e for e in os.listdir(path / cg.STORE) if ".tmp-" in e or ".bad-" in e], k
        assert not [e for e in os.listdir(path) if ".tmp-" in e], k
        if finished:
            return k
        k += 1


def test_a_kill_anywhere_in_the_migration_from_plain_files_leaves_one_set(tmp_path, monkeypatch):
    steps = _every_kill_point(tmp_path, monkeypatch, lambda p: _plain(p, OLD), OLD, NEW)
    assert steps > 10


def test_a_kill_anywhere_in_a_switch_between_generations_leaves_one_set(tmp_path, monkeypatch):
    def setup(path):
        store = _store(path)
        store.install(OLD)
        store.mark_applied()
    _every_kill_point(tmp_path, monkeypatch, setup, OLD, NEW)


def test_a_file_new_to_the_set_and_one_dropped_from_it_switch_with_the_rest(tmp_path, monkeypatch):
    old = {k: v for k, v in OLD.items() if k != "topology.conf"}
    new = {k: v for k, v in NEW.items() if k != "cgroup.conf"}

    def setup(path):
        _store(path).install(old)
    _every_kill_point(tmp_path, monkeypatch, setup, old, new)
    path = tmp_path / "k1"
    assert not os.path.lexists(path / "cgroup.conf")
    assert os.readlink(path / "topology.conf") == ".gpucluster/current/topology.conf"


def test_the_files_are_symlinks_into_the_current_generation(tmp_path):
    _plain(tmp_path, OLD)
    store = _store(tmp_path)
    changed, previous = store.install(NEW)
    gen = cg.generation_name(NEW)
    assert changed and previous == cg.generation_name(OLD)
    assert os.readlink(tmp_path / cg.STORE / "current") == gen
    assert os.readlink(tmp_path / cg.STORE / "applied") == cg.generation_name(OLD)  # the daemons run the old ones
    for name in NAMES:
        assert os.readlink(tmp_path / name) == ".gpucluster/current/" + name
        assert (tmp_path / name).read_text() == NEW[name]
        assert oct(os.stat(tmp_path / cg.STORE / gen / name).st_mode & 0o777) == "0o644"
    assert store.plan(NEW) == ["generation %s not yet applied (the daemons were not told of it)" % gen]
    assert store.mark_applied() and not store.mark_applied()
    assert store.plan(NEW) == [] and store.install(NEW) == (False, gen)


def test_migration_of_the_files_already_wanted_needs_no_acknowledgement(tmp_path):
    _plain(tmp_path, NEW)
    store = _store(tmp_path)
    assert store.install(NEW)[0]
    assert store.plan(NEW) == []


def test_old_generations_are_pruned_keeping_current_applied_and_previous(tmp_path):
    store = _store(tmp_path)
    gens = []
    for i in range(5):
        files = dict(NEW, **{"slurm.conf": "ClusterName=c%d\n" % i})
        store.install(files)
        gens.append(cg.generation_name(files))
        if i == 1:
            store.mark_applied()
    left = sorted(e for e in os.listdir(tmp_path / cg.STORE) if e.startswith(cg.GEN_PREFIX))
    assert gens[4] in left and gens[1] in left and gens[3] in left and gens[0] not in left
    assert len(left) <= 4


def test_a_current_generation_changed_by_hand_is_repaired(tmp_path):
    store = _store(tmp_path)
    store.install(NEW)
    store.mark_applied()
    (tmp_path / cg.STORE / cg.generation_name(NEW) / "gres.conf").write_text("edited\n")
    assert "write generation %s" % cg.generation_name(NEW) in store.plan(NEW)
    assert store.install(NEW)[0]
    assert store.live() == _as_bytes(NEW) and store.plan(NEW) == []


def test_remove_takes_the_links_plain_files_and_generations(tmp_path):
    _plain(tmp_path, {"slurm.conf": "x\n"})
    store = _store(tmp_path)
    assert store.remove() and not os.path.lexists(tmp_path / "slurm.conf")
    store.install(NEW)
    assert store.remove() and os.listdir(tmp_path) == [] and not store.remove()


def test_the_generation_name_depends_on_every_name_and_content():
    assert cg.generation_name(NEW) == cg.generation_name(dict(reversed(list(NEW.items()))))
    assert cg.generation_name(NEW) != cg.generation_name(dict(NEW, **{"gres.conf": "new gres \n"}))
    assert cg.generation_name({"a": "bc"}) != cg.generation_name({"ab": "c"})
    assert cg.generation_name(NEW).startswith("gen-") and len(cg.generation_name(NEW)) == 20


@pytest.mark.parametrize("files", [{}, {"slurm.conf": ""}])
def test_empty_sets_and_files(tmp_path, files):
    store = _store(tmp_path)
    store.install(files)
    assert store.live() == _as_bytes(files)
