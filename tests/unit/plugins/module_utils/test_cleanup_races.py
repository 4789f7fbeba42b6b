"""node_cleanup against the users who own the directories it cleans (issue 46): a directory swapped for a symlink
between the check and the act, through the seam ``_cleanup._race_point`` (deterministic), a listed path's parent
swapped between the rule check and the run, and a bounded race with an unprivileged attacker (root only) swapping a
directory for a symlink as fast as it can while the cleanup runs. Each shows that nothing outside the root goes."""

import ctypes
import ctypes.util
import errno
import os
import pwd
import select
import shutil
import tempfile
import time

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _cleanup

DAY = 86400
NOW = time.time()
LIBC = "libc.so.6"      # what the shipped policy's "*.[0-9]" pattern matches


def write(path, days=30, size=10):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"x" * size)
    os.utime(path, (NOW - days * DAY, NOW - days * DAY))
    return path


def run(root, paths, check_mode=False, **extra):
    rule = dict(dict(name="logs", kind="files", paths=paths, patterns=["*.[0-9]"], age="7d"), **extra)
    checked, _roots = _cleanup.check_rules([rule], [root])
    return _cleanup.run_rules(checked, check_mode=check_mode, now=NOW)


@pytest.fixture
def tree(tmp_path):
    """``root/spool/d/libc.so.6`` (a user's directory and file) and ``outside/libc.so.6``, the system's, both old."""
    root, outside = str(tmp_path / "root"), str(tmp_path / "outside")
    return dict(root=root, spool=os.path.join(root, "spool"), bait=write(os.path.join(root, "spool", "d", LIBC)),
                outside=outside, precious=write(os.path.join(outside, LIBC), size=100))


def swap_for_symlink(path, target):
    """What the attacker does: the directory ``path`` moved aside, a symlink to ``target`` in its place."""
    os.rename(path, path + ".moved")
    os.symlink(target, path)


@pytest.fixture
def seam(monkeypatch):
    """``seam(point, path, act)``: ``act()`` runs once, when the walk reaches ``point`` for ``path``."""
    done = []

    def install(point, path, act):
        def race_point(here_point, here):
            if (here_point, here) == (point, path) and not done:
                done.append(here)
                act()
        monkeypatch.setattr(_cleanup, "_race_point", race_point)
        return done
    return install


# ---- deterministic: a directory swapped for a symlink between the check and the act ----------------------------

def test_a_parent_swapped_for_a_symlink_between_the_check_and_the_unlink_removes_nothing_outside(tree, seam):
    directory, bait = os.path.join(tree["spool"], "d"), tree["bait"]

    def attack():
        swap_for_symlink(directory, tree["outside"])
        # The attack is real: unlinking by path now would remove the system's file.
        assert os.path.samefile(bait, tree["precious"])
    done = seam("unlink", bait, attack)
    result = run(tree["root"], [tree["spool"]])
    assert done == [bait]
    assert os.path.exists(tree["precious"]) and os.listdir(tree["outside"]) == [LIBC]
    # The unlink went to the directory that was checked, now moved aside by the attacker.
    assert os.listdir(directory + ".moved") == [] and os.path.islink(directory)
    assert [item["path"] for item in result["rules"][0]["removed"]] == [bait]


@pytest.mark.parametrize("replacement", ["symlink", "directory"])
def test_a_directory_swapped_between_its_check_and_its_opening_is_not_entered(tree, seam, replacement):
    directory = os.path.join(tree["spool"], "d")

    def attack():
        if replacement == "symlink":
            swap_for_symlink(directory, tree["outside"])
        else:
            os.rename(directory, directory + ".moved")
            os.rename(tree["outside"], directory)
    seam("open", directory, attack)
    result = run(tree["root"], [tree["spool"]])
    rule = result["rules"][0]
    assert rule["removed"] == [] and rule["skipped"] == [{"path": directory, "why": _cleanup.REPLACED}]
    assert os.path.exists(tree["precious"] if replacement == "symlink" else os.path.join(directory, LIBC))


def test_a_directory_swapped_inside_an_entry_being_removed_removes_nothing_outside(tree, seam):
    jobs = os.path.join(tree["root"], "jobs")
    entry, sub = os.path.join(jobs, "4711"), os.path.join(jobs, "4711", "sub")
    core = write(os.path.join(sub, "core.1"))
    for path in (sub, entry):
        os.utime(path, (NOW - 30 * DAY, NOW - 30 * DAY))
    seam("unlink", core, lambda: swap_for_symlink(sub, tree["outside"]))
    result = run(tree["root"], [jobs], unit="entry", patterns=["*"])
    assert os.path.exists(tree["precious"]) and os.listdir(tree["outside"]) == [LIBC]
    assert result["status"] == "unknown" and result["rules"][0]["removed"] == []
    assert "cannot remove %s: Not a directory" % sub in result["rules"][0]["errors"]


def test_check_mode_lists_through_no_symlink_and_removes_nothing(tree):
    os.symlink(tree["outside"], os.path.join(tree["spool"], "lib"))
    result = run(tree["root"], [tree["spool"]], check_mode=True)
    assert [item["path"] for item in result["rules"][0]["removed"]] == [tree["bait"]]
    assert os.path.exists(tree["bait"]) and os.path.exists(tree["precious"])


# ---- deterministic: a parent swapped between the rule check and the run -----------------------------------------

@pytest.mark.parametrize("swapped", ["parent", "listed path"])
def test_a_listed_paths_parent_swapped_after_the_check_is_not_followed(tree, swapped):
    listed = os.path.join(tree["spool"], "d")
    write(os.path.join(tree["outside"], "d", LIBC))
    checked, _roots = _cleanup.check_rules([dict(name="logs", kind="files", paths=[listed], patterns=["*.[0-9]"],
                                                 age="7d")], [tree["root"]])
    if swapped == "parent":
        swap_for_symlink(tree["spool"], tree["outside"])
        why = "symlink: %s, on the way from the allowed root to it, is a symlink; not followed" % tree["spool"]
    else:
        swap_for_symlink(listed, tree["outside"])
        why = "symlink: a listed path that is a symlink is not followed"
    result = _cleanup.run_rules(checked, now=NOW)
    assert result["rules"][0]["skipped"] == [{"path": listed, "why": why}] and not result["changed"]
    assert os.path.exists(tree["precious"]) and os.path.exists(os.path.join(tree["outside"], "d", LIBC))


def test_the_allowed_roots_own_parent_swapped_after_the_check_is_an_error(tmp_path):
    base = tmp_path / "base"
    root = str(base / "root")
    write(os.path.join(root, LIBC))
    decoy = write(str(tmp_path / "decoy" / "root" / LIBC))
    checked, _roots = _cleanup.check_rules([dict(name="logs", kind="files", paths=[root], age="7d")], [root])
    swap_for_symlink(str(base), str(tmp_path / "decoy"))
    result = _cleanup.run_rules(checked, now=NOW)
    assert not result["changed"] and os.path.exists(decoy) and result["status"] == "unknown"
    assert result["rules"][0]["errors"] == ["%s, on the way to the allowed root %s, is now a symlink (it was not when "
                                            "the rules were checked): %s not cleaned" % (base, root, root)]


def test_a_parent_swapped_between_its_check_and_its_opening_at_the_start_is_an_error(tree, seam):
    listed = os.path.join(tree["spool"], "d")
    write(os.path.join(tree["outside"], "d", LIBC))
    seam("open", tree["spool"], lambda: swap_for_symlink(tree["spool"], tree["outside"]))
    result = run(tree["root"], [listed])
    assert result["rules"][0]["errors"] == ["%s was replaced while the rule ran: %s not cleaned"
                                            % (tree["spool"], listed)]
    assert os.path.exists(os.path.join(tree["outside"], "d", LIBC)) and os.path.exists(tree["bait"])


# ---- a bounded race with an unprivileged attacker -------------------------------------------------------------------

def _exchange():
    """renameat2(RENAME_EXCHANGE) through libc (atomic: the attacker's best), or None where there is none."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        return None
    at_fdcwd, exchange = -100, 2

    def swap(first, second):
        if function(at_fdcwd, first.encode(), at_fdcwd, second.encode(), exchange) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return swap


def _attacker(spool, outside, user, stop, report):
    """In a forked child, as ``user``: keep an old ``libc.so.6`` in its own directory ``d`` and swap ``d`` with a
    symlink to ``outside`` as fast as it can, until the pipe ``stop`` reads end of file (the cleanup has run its
    rounds); writes how many swaps it made (or why it failed) to the pipe ``report``."""
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    bait, link = os.path.join(spool, "d"), os.path.join(spool, "l")
    os.mkdir(bait)
    bait_fd = os.open(bait, os.O_RDONLY | os.O_DIRECTORY)
    os.symlink(outside, link)
    swap, swaps = _exchange(), 0
    while not select.select([stop], [], [], 0)[0]:
        for name in (LIBC, "libm.so.6"):
            try:
                os.stat(name, dir_fd=bait_fd)
            except FileNotFoundError:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=bait_fd))
                os.utime(name, (NOW - 30 * DAY, NOW - 30 * DAY), dir_fd=bait_fd)
        for _swap in range(50):
            if swap:
                swap(bait, link)
            else:
                os.rename(bait, bait + ".x")
                os.symlink(outside, bait)
                os.unlink(bait)
                os.rename(bait + ".x", bait)
            swaps += 1
    os.write(report, str(swaps).encode())


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0,
                    reason="the cleanup runs as root against an unprivileged attacker: needs root")
def test_an_unprivileged_attacker_racing_the_walk_deletes_nothing_outside_the_root():
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    base = tempfile.mkdtemp(prefix="gpucluster-cleanup-race-")
    child = stop = None
    try:
        os.chmod(base, 0o755)
        root, outside = os.path.join(base, "log"), os.path.join(base, "lib")
        spool = os.path.join(root, "slurm")        # as /var/log/slurm, owned by the slurm user
        os.makedirs(spool)
        os.chown(spool, user.pw_uid, user.pw_gid)
        precious = [write(os.path.join(outside, name), size=100) for name in (LIBC, "libm.so.6")]
        for path in (root, outside):
            os.chmod(path, 0o755)
        # The race runs for a count of cleanups, not for a time: make test runs the unit tests in a low-weight CPU
        # group beside the scenarios, where 5 s once gave only 4 cleanups. At least 4.5 s and 5 cleanups; at most
        # 120 s, whatever the load.
        reading, report = os.pipe()
        stop_reading, stop = os.pipe()
        child = os.fork()
        if child == 0:
            status = 1
            try:
                os.close(reading)
                os.close(stop)
                _attacker(spool, outside, user, stop_reading, report)
                status = 0
            except BaseException as exc:  # pylint: disable=broad-except
                os.write(report, ("the attacker failed: %r" % exc).encode())
            finally:
                os._exit(status)
        os.close(report)
        os.close(stop_reading)
        runs, taken, escaped = 0, 0, []
        started = time.time()
        while not escaped and (runs < 5 or time.time() < started + 4.5) and time.time() < started + 120:
            result = run(root, [root])
            runs += 1
            for item in result["rules"][0]["removed"]:
                taken += 1
                if not item["path"].startswith(spool + "/"):
                    escaped.append(item["path"])
            escaped.extend(path for path in precious if not os.path.exists(path))
        os.close(stop)
        stop = None
        said = b""
        while True:
            chunk = os.read(reading, 4096)
            if not chunk:
                break
            said += chunk
        os.close(reading)
        _pid, status = os.waitpid(child, 0)
        child = None
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, said.decode()
        swaps = int(said)
        assert escaped == [] and all(os.path.exists(path) for path in precious)
        # The race was run: the attacker swapped, the cleanup ran and took the attacker's own old files.
        assert swaps > 1000 and runs >= 5 and taken > 0, (swaps, runs, taken)
    finally:
        if stop is not None:
            os.close(stop)
        if child:
            try:
                os.kill(child, 9)
                os.waitpid(child, 0)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
        shutil.rmtree(base)
