"""_cleanup on a temp tree: ages by os.utime, the file and entry units, symlinks out of the tree, a file held open by
a child process, another filesystem (st_dev faked), check mode removing nothing, the checks of the rules (/, paths
outside allowed_roots, NUL bytes, '..' and system trees refused, allow_system_tree), and container images through
fake docker/podman/ctr programs on PATH. The races (a directory swapped for a symlink) are in test_cleanup_races.py."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _cleanup
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError

DAY = 86400
NOW = time.time()


def write(path, days, size=10):
    """A file of ``size`` bytes modified ``days`` ago (parents made)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"x" * size)
    age(path, days)
    return path


def age(path, days):
    os.utime(path, (NOW - days * DAY, NOW - days * DAY), follow_symlinks=not os.path.islink(path))


@pytest.fixture
def root(tmp_path):
    return str(tmp_path)


def files_rule(paths, **extra):
    return dict(dict(name="r", kind="files", paths=paths, age="7d"), **extra)


def run(root, *rules, **kwargs):
    checked, _roots = _cleanup.check_rules(list(rules), [root])
    return _cleanup.run_rules(checked, now=NOW, **kwargs)


def removed(result, index=0):
    return sorted(item["path"] for item in result["rules"][index]["removed"])


# ---- the file unit -----------------------------------------------------------------------------------------------

def test_old_files_go_new_files_and_directories_stay(root):
    old = write(os.path.join(root, "a", "old.log"), 10, size=100)
    new = write(os.path.join(root, "a", "new.log"), 1)
    deep = write(os.path.join(root, "a", "b", "c", "deep.log"), 30, size=5)
    result = run(root, files_rule([root]))
    rule = result["rules"][0]
    assert removed(result) == sorted([old, deep])
    assert (rule["removed_count"], rule["removed_bytes"], result["removed_bytes"]) == (2, 105, 105)
    assert result["changed"] and result["status"] == "ok" and rule["errors"] == [] and rule["skipped"] == []
    assert os.path.exists(new) and not os.path.exists(old) and not os.path.exists(deep)
    assert os.path.isdir(os.path.join(root, "a", "b", "c")) and os.path.isdir(root)


def test_check_mode_removes_nothing_and_says_what_it_would(root):
    old = write(os.path.join(root, "old.log"), 10)
    result = run(root, files_rule([root]), check_mode=True)
    assert removed(result) == [old] and result["changed"] and os.path.exists(old)


def test_a_second_run_changes_nothing(root):
    write(os.path.join(root, "old.log"), 10)
    run(root, files_rule([root]))
    result = run(root, files_rule([root]))
    assert not result["changed"] and result["removed_bytes"] == 0 and result["rules"][0]["removed"] == []


def test_patterns_match_the_file_name(root):
    core = write(os.path.join(root, "sub", "core.1234"), 10)
    other = write(os.path.join(root, "sub", "notes.txt"), 10)
    result = run(root, files_rule([root], patterns=["core.*", "*.crash"]))
    assert removed(result) == [core] and os.path.exists(other)


def test_symlinks_are_not_followed_but_an_old_symlink_goes(root, tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("outside"))
    precious = write(os.path.join(outside, "precious"), 100)
    tree = os.path.join(root, "tree")
    os.makedirs(tree)
    os.symlink(outside, os.path.join(tree, "dirlink"))
    os.symlink(precious, os.path.join(tree, "filelink"))
    age(os.path.join(tree, "dirlink"), 10)
    age(os.path.join(tree, "filelink"), 10)
    result = run(root, files_rule([tree]))
    assert removed(result) == sorted([os.path.join(tree, "dirlink"), os.path.join(tree, "filelink")])
    assert result["rules"][0]["removed_bytes"] == 0
    assert os.path.exists(precious) and os.path.isdir(outside)


def test_a_listed_path_that_is_a_symlink_is_not_followed(root):
    real = os.path.join(root, "real")
    old = write(os.path.join(real, "old"), 10)
    os.symlink(real, os.path.join(root, "link"))
    result = run(root, files_rule([os.path.join(root, "link")]))
    why = "symlink: a listed path that is a symlink is not followed"
    assert result["rules"][0]["skipped"] == [{"path": os.path.join(root, "link"), "why": why}]
    assert os.path.exists(old) and not result["changed"]


def test_an_allowed_root_that_is_a_symlink_is_resolved_when_checked(root):
    real = os.path.join(root, "lustre", "scratch")
    old = write(os.path.join(real, "jobs", "old"), 10)
    link = os.path.join(root, "scratch")
    os.symlink(real, link)
    checked, _roots = _cleanup.check_rules([files_rule([os.path.join(link, "jobs")])], [link])
    assert checked[0]["targets"] == [(os.path.join(link, "jobs"), ["*"], real, "jobs")]
    result = _cleanup.run_rules(checked, now=NOW)
    assert removed(result) == [os.path.join(link, "jobs", "old")] and not os.path.exists(old)


def test_a_listed_path_resolving_out_of_the_roots_is_refused(root, tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("outside"))
    os.symlink(outside, os.path.join(root, "escape"))
    with pytest.raises(SpecError, match="resolves through a symlink to %s/x, outside the allowed roots" % outside):
        _cleanup.check_rules([files_rule([os.path.join(root, "escape", "x")])], [root])


@pytest.fixture
def held_open(root):
    """A file held open by a child process (its pid file says when it has opened it)."""
    path = write(os.path.join(root, "busy", "held.log"), 10)
    ready = os.path.join(root, "ready")
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); "
                              "open(sys.argv[2], 'w').close(); time.sleep(60)", path, ready])
    try:
        for _attempt in range(200):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        os.unlink(ready)
        yield path
    finally:
        child.kill()
        child.wait()


def test_a_file_held_open_is_skipped_as_in_use(root, held_open):
    other = write(os.path.join(root, "busy", "free.log"), 10)
    result = run(root, files_rule([root]))
    assert result["rules"][0]["skipped"] == [{"path": held_open, "why": "in_use"}]
    assert removed(result) == [other] and os.path.exists(held_open)


def test_an_entry_holding_an_open_file_is_skipped_whole(root, held_open):
    jobs = os.path.join(root)
    age(os.path.dirname(held_open), 10)
    result = run(root, files_rule([jobs], unit="entry"))
    why = "in_use: %s is open" % held_open
    assert result["rules"][0]["skipped"] == [{"path": os.path.dirname(held_open), "why": why}]
    assert os.path.exists(held_open) and not result["changed"]


def test_unreadable_open_files_remove_nothing_and_say_unknown(root):
    old = write(os.path.join(root, "old"), 10)
    result = run(root, files_rule([root]), proc=os.path.join(root, "no-proc"))
    assert result["status"] == "unknown" and not result["changed"] and os.path.exists(old)
    assert "cannot read the open files" in result["rules"][0]["errors"][0]


def test_another_filesystem_below_a_path_is_not_entered(root, monkeypatch):
    mount = os.path.join(root, "mnt")
    inside = write(os.path.join(mount, "old"), 10)
    here = write(os.path.join(root, "old"), 10)
    real = _cleanup._lstat

    def lstat(name, dir_fd, path):
        st = real(name, dir_fd, path)
        if path == mount:
            values = list(st)
            values[stat.ST_DEV] = st.st_dev + 1
            return os.stat_result(values)
        return st
    monkeypatch.setattr(_cleanup, "_lstat", lstat)
    result = run(root, files_rule([root]))
    assert removed(result) == [here] and os.path.exists(inside)
    assert result["rules"][0]["skipped"] == [{"path": mount, "why": "other filesystem"}]
    age(mount, 10)
    result = run(root, files_rule([root], unit="entry"))
    assert result["rules"][0]["skipped"] == [{"path": mount, "why": "other filesystem"}] and os.path.exists(inside)


def test_missing_paths_are_reported_not_errors(root):
    result = run(root, files_rule([os.path.join(root, "nope")]))
    assert result["rules"][0]["missing_paths"] == [os.path.join(root, "nope")] and result["status"] == "ok"


def test_a_listed_file_is_an_error(root):
    path = write(os.path.join(root, "file"), 10)
    result = run(root, files_rule([path]))
    assert result["rules"][0]["errors"] == ["%s is not a directory" % path] and result["status"] == "unknown"


def test_the_removed_list_is_capped_but_all_are_counted(root, monkeypatch):
    monkeypatch.setattr(_cleanup, "CAP", 3)
    for index in range(5):
        write(os.path.join(root, "f%d" % index), 10, size=2)
    rule = run(root, files_rule([root]), check_mode=True)["rules"][0]
    assert (len(rule["removed"]), rule["removed_truncated"], rule["removed_count"], rule["removed_bytes"]) == \
        (3, 2, 5, 10)


# ---- the entry unit ----------------------------------------------------------------------------------------------

def test_an_entry_goes_whole_only_when_its_newest_mtime_is_old(root):
    jobs = os.path.join(root, "jobs")
    write(os.path.join(jobs, "4711", "out", "a.dat"), 20, size=7)
    write(os.path.join(jobs, "4711", "b.dat"), 15, size=3)
    write(os.path.join(jobs, "4712", "old.dat"), 20)
    write(os.path.join(jobs, "4712", "deep", "fresh.dat"), 1)
    loose = write(os.path.join(jobs, "loose.tar"), 9, size=1)
    for directory in ("4711/out", "4711", "4712/deep", "4712"):
        age(os.path.join(jobs, directory), 20)
    result = run(root, files_rule([jobs], unit="entry"))
    rule = result["rules"][0]
    assert rule["removed"] == [{"path": os.path.join(jobs, "4711"), "bytes": 10}, {"path": loose, "bytes": 1}]
    assert not os.path.exists(os.path.join(jobs, "4711")) and os.path.exists(os.path.join(jobs, "4712", "old.dat"))
    assert os.path.isdir(jobs)


def test_an_entry_that_is_a_process_working_directory_is_skipped(root):
    entry = os.path.join(root, "jobs", "4713")
    os.makedirs(entry)
    age(entry, 20)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=entry)
    try:
        time.sleep(0.2)
        rule = run(root, files_rule([os.path.join(root, "jobs")], unit="entry"))["rules"][0]
    finally:
        child.kill()
        child.wait()
    assert rule["skipped"] == [{"path": entry, "why": "in_use: %s is a process's working directory" % entry}]


def test_an_entry_symlink_goes_as_a_link(root, tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("outside"))
    write(os.path.join(outside, "keep"), 30)
    jobs = os.path.join(root, "jobs")
    os.makedirs(jobs)
    link = os.path.join(jobs, "linked")
    os.symlink(outside, link)
    age(link, 30)
    result = run(root, files_rule([jobs], unit="entry"))
    assert removed(result) == [link] and os.path.exists(os.path.join(outside, "keep"))


# ---- package cache -----------------------------------------------------------------------------------------------

def test_package_cache_cleans_downloaded_packages(root, monkeypatch):
    archives = os.path.join(root, "apt", "archives")
    deb = write(os.path.join(archives, "vim_9.1_amd64.deb"), 3)
    partial = write(os.path.join(archives, "partial", "curl_8.deb"), 3)
    stray = write(os.path.join(archives, "partial", "curl_8.deb.FAILED"), 3)
    lock = write(os.path.join(archives, "lock"), 3)
    monkeypatch.setattr(_cleanup, "PACKAGE_CACHES", [(archives, ["*.deb"]), (archives + "/partial", ["*"]),
                                                     (os.path.join(root, "dnf"), ["*.rpm"])])
    result = run(root, dict(name="pkg", kind="package_cache"))
    assert removed(result) == sorted([deb, partial, stray]) and os.path.exists(lock)
    assert result["rules"][0]["missing_paths"] == [] and result["status"] == "ok"
    young = write(os.path.join(archives, "new.deb"), 1)
    result = run(root, dict(name="pkg", kind="package_cache", age="2d"))
    assert removed(result) == [] and os.path.exists(young)


def test_no_package_cache_is_unknown(root, monkeypatch):
    monkeypatch.setattr(_cleanup, "PACKAGE_CACHES", [(os.path.join(root, "none"), ["*.deb"])])
    result = run(root, dict(name="pkg", kind="package_cache"))
    assert result["status"] == "unknown" and "no package cache found" in result["rules"][0]["errors"][0]


# ---- checks of the rules -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rules, message", [
    ([], "rules is []: give a non-empty list"),
    (["x"], "rules[0] is 'x': each rule is a dict"),
    ([dict(kind="files")], "rules[0].name is None"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d"), dict(name="a", kind="files", paths=["/tmp"],
                                                                   age="1d")],
     "rules[1].name is 'a': another rule has that name"),
    ([dict(name="a", kind="trash")], "rules[0].kind is 'trash': give one of files, package_cache, container_images"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d", runtime="docker")],
     "rules[0].runtime is not a key of a files rule"),
    ([dict(name="a", kind="files", paths=["/tmp"])], "rules[0].age is required"),
    ([dict(name="a", kind="files", paths=["/tmp"], age=7)], "rules[0].age is 7: a bare number is ambiguous"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="soon")], "rules[0].age is 'soon'"),
    ([dict(name="a", kind="files", age="1d")], "rules[0].paths is None"),
    ([dict(name="a", kind="files", paths="/tmp", age="1d")], "rules[0].paths is '/tmp': give a list"),
    ([dict(name="a", kind="files", paths=["tmp"], age="1d")], "rules[0].paths[0] is 'tmp': give an absolute"),
    ([dict(name="a", kind="files", paths=["/"], age="1d")], "rule 'a': rules[0].paths[0] is '/': '/' is never"),
    ([dict(name="a", kind="files", paths=["/tmp/../etc"], age="1d")],
     "rules[0].paths[0] is '/tmp/../etc': a '..' component is refused: give the directory itself"),
    ([dict(name="a", kind="files", paths=["/var/log/../../etc"], age="1d")],
     "rules[0].paths[0] is '/var/log/../../etc': a '..' component is refused"),
    ([dict(name="a", kind="files", paths=["/tmp/a/.."], age="1d")], "rules[0].paths[0] is '/tmp/a/..': a '..'"),
    ([dict(name="a", kind="files", paths=["/tmp/x\0/etc"], age="1d")],
     "rules[0].paths[0] is '/tmp/x\\x00/etc': a path has no NUL byte"),
    ([dict(name="a", kind="files", paths=["\0"], age="1d")], "rules[0].paths[0] is '\\x00': a path has no NUL"),
    ([dict(name="a", kind="files", paths=["./tmp"], age="1d")], "rules[0].paths[0] is './tmp': give an absolute"),
    ([dict(name="a", kind="files", paths=[""], age="1d")], "rules[0].paths is ['']: every item must be a non-empty string"),
    ([dict(name="a", kind="files", paths=[7], age="1d")], "rules[0].paths is [7]: every item must be"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d", patterns=["core\0"])],
     "rules[0].patterns has 'core\\x00': a NUL byte matches no name"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d", allow_system_tree="yes")],
     "rules[0].allow_system_tree is 'yes': give true or false"),
    ([dict(name="a", kind="package_cache", allow_system_tree=True)],
     "rules[0].allow_system_tree is not a key of a package_cache rule"),
    ([dict(name="a", kind="files", paths=["/home"], age="1d")], "rules[0].paths[0] is '/home', which is not"),
    ([dict(name="a", kind="files", paths=["/tmpfoo"], age="1d")], "rules[0].paths[0] is '/tmpfoo', which is not"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d", unit="job")], "rules[0].unit is 'job'"),
    ([dict(name="a", kind="files", paths=["/tmp"], age="1d", patterns=["a/b"])], "rules[0].patterns has 'a/b'"),
    ([dict(name="a", kind="container_images", age="1d")], "rules[0].runtime is None"),
    ([dict(name="a", kind="container_images", runtime="docker")], "rules[0].age is required"),
    ([dict(name="a", kind="container_images", runtime="docker", age="1d", namespace="x")],
     "rules[0].namespace is 'x': only a containerd rule"),
    ([dict(name="a", kind="container_images", runtime="containerd", age="1d", namespace="k8s.io")],
     "rules[0].namespace is 'k8s.io': the kubelet manages"),
    ([dict(name="a", kind="container_images", runtime="docker", age="1d", keep="nvcr.io/*")],
     "rules[0].keep is 'nvcr.io/*': give a list"),
])
def test_bad_rules_fail_naming_the_key_and_value(rules, message):
    with pytest.raises(SpecError) as caught:
        _cleanup.check_rules(rules)
    assert message in str(caught.value)


@pytest.mark.parametrize("roots, message", [
    (["/"], "allowed_roots[0] is '/': '/' is never an allowed root"),
    (["//"], "allowed_roots[0] is '//': '/' is never"),
    (["tmp"], "allowed_roots[0] is 'tmp': give an absolute"),
    ([], "allowed_roots is []"),
    (["/tmp/../etc"], "allowed_roots[0] is '/tmp/../etc': a '..' component is refused"),
    (["/tmp\0"], "allowed_roots[0] is '/tmp\\x00': a path has no NUL byte"),
    (["/etc"], "allowed_roots[0] is '/etc': /etc is a system tree, never an allowed root unless a rule sets "
               "allow_system_tree: true"),
    (["/usr"], "allowed_roots[0] is '/usr': /usr is a system tree"),
    (["/usr/lib/x86_64-linux-gnu"], "is '/usr/lib/x86_64-linux-gnu': /usr is a system tree"),
    (["/home"], "allowed_roots[0] is '/home': /home is a system tree"),
    (["/tmp", "/home/alice"], "allowed_roots[1] is '/home/alice': /home is a system tree"),
    (["/root"], "/root is a system tree"),
    (["/boot"], "/boot is a system tree"),
    (["/bin"], "/bin is a system tree"),
    (["/lib64"], "/lib64 is a system tree"),
    (["/libx32/"], "/libx32 is a system tree"),
    (["/var/lib"], "/var/lib is a system tree"),
    (["/var/lib/docker"], "/var/lib is a system tree"),
    (["/var/lib/systemd"], "/var/lib is a system tree"),
    (["/var"], "allowed_roots[0] is '/var': /var/lib is a system tree"),
    (["/var/spool/slurm"], "/var/spool is a system tree"),
])
def test_bad_roots_fail(roots, message):
    with pytest.raises(SpecError) as caught:
        _cleanup.check_rules([files_rule(["/tmp"])], roots)
    assert message in str(caught.value)


def test_a_root_resolving_into_a_system_tree_is_refused(root):
    os.symlink("/etc", os.path.join(root, "cache"))
    with pytest.raises(SpecError, match="allowed_roots\\[0\\] is '%s/cache', which resolves to /etc: /etc is a system "
                                        "tree" % root):
        _cleanup.check_rules([files_rule([os.path.join(root, "cache")])], [os.path.join(root, "cache")])


def test_a_system_tree_is_cleaned_only_by_a_rule_that_says_so():
    homes = dict(name="homes", kind="files", paths=["/home/scratch"], age="30d", allow_system_tree=True)
    rules, roots = _cleanup.check_rules([homes], ["/home", "/tmp"])
    assert roots == ["/home", "/tmp"] and rules[0]["allow_system_tree"] is True
    assert rules[0]["targets"] == [("/home/scratch", ["*"], os.path.realpath("/home"), "scratch")]
    with pytest.raises(SpecError) as caught:
        _cleanup.check_rules([homes, dict(name="b", kind="files", paths=["/home/b"], age="1d")], ["/home"])
    assert str(caught.value) == ("rule 'b': rules[1].paths[0] is '/home/b': /home is a system tree; a path in it, or "
                                 "holding it, is cleaned only when the rule sets allow_system_tree: true")
    with pytest.raises(SpecError, match="rules\\[0\\].paths\\[0\\] is '/var': /var/lib is a system tree"):
        _cleanup.check_rules([dict(name="a", kind="files", paths=["/var"], age="1d"),
                              dict(homes, paths=["/var/lib/x"])], ["/var"])
    with pytest.raises(SpecError, match="allowed_roots\\[0\\] is '/etc'"):
        _cleanup.check_rules([dict(homes, allow_system_tree=False)], ["/etc"])


def test_the_default_roots_are_no_system_tree_but_the_core_dumps_are_below_one():
    assert _cleanup.check_roots(None) == _cleanup.DEFAULT_ROOTS
    assert [_cleanup.system_tree(r) for r in _cleanup.DEFAULT_ROOTS] == [None] * len(_cleanup.DEFAULT_ROOTS)
    assert _cleanup.system_tree("/var/lib/systemd") == "/var/lib" and _cleanup.system_tree("/var/logs") is None
    assert _cleanup.system_tree("/lib32") == "/lib32" and _cleanup.system_tree("/scratch") is None


def test_a_refused_rule_removes_nothing_of_the_good_ones(root):
    old = write(os.path.join(root, "old"), 10)
    with pytest.raises(SpecError):
        _cleanup.check_rules([files_rule([root]), dict(files_rule(["/etc"]), name="b")], [root])
    assert os.path.exists(old)


def test_defaults_are_filled_in():
    rules, roots = _cleanup.check_rules([dict(name="a", kind="files", paths=["/tmp/x/"], age="1h30m"),
                                         dict(name="b", kind="container_images", runtime="containerd", age="30d")])
    assert rules[0] == dict(name="a", kind="files", paths=["/tmp/x"], age=5400, patterns=["*"], unit="file",
                            allow_system_tree=False, targets=[("/tmp/x", ["*"], os.path.realpath("/tmp"), "x")])
    assert rules[1] == dict(name="b", kind="container_images", runtime="containerd", age=30 * DAY, keep=[],
                            namespace="default")
    assert roots == _cleanup.DEFAULT_ROOTS


# ---- container images --------------------------------------------------------------------------------------------

OLD = "2024-01-02T03:04:05.123456789Z"
NEW = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - DAY))

FAKE_ENGINE = r'''#!%(python)s
import json, sys
state = json.load(open(%(state)r))
argv = sys.argv[1:]
open(%(log)r, "a").write(json.dumps(argv) + "\n")
if argv[:2] == ["image", "ls"]:
    print("\n".join(i["Id"] for i in state["images"] for _t in (i["RepoTags"] or [None])))
elif argv[:2] == ["image", "inspect"]:
    print(json.dumps([i for i in state["images"] if i["Id"] in argv[2:]]))
elif argv[:2] == ["container", "ls"]:
    print("\n".join(c["Id"] for c in state["containers"]))
elif argv[:2] == ["container", "inspect"]:
    print(json.dumps([c for c in state["containers"] if c["Id"] in argv[2:]]))
elif argv[:2] == ["image", "rm"]:
    if any(a in state.get("refuse", []) for a in argv[2:]):
        sys.stderr.write("Error response from daemon: conflict: unable to delete (image has dependent child images)\n")
        sys.exit(1)
    print("Untagged: " + " ".join(argv[2:]))
else:
    sys.stderr.write("unknown command %%r\n" %% argv)
    sys.exit(2)
'''


def fake_cli(tmp_path, name, script, state, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / (name + ".json")).write_text(json.dumps(state))
    log = tmp_path / (name + ".log")
    log.write_text("")
    program = bindir / name
    program.write_text(script % dict(python=sys.executable, state=str(tmp_path / (name + ".json")), log=str(log)))
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def image(short, tags, created, size=1000, prefix="sha256:"):
    return dict(Id=prefix + short * 8, RepoTags=tags, Created=created, Size=size)


@pytest.mark.parametrize("runtime, prefix", [("docker", "sha256:"), ("podman", "")])
def test_engine_images_old_unused_not_kept_go(tmp_path, monkeypatch, runtime, prefix):
    state = dict(images=[image("a", ["app:1", "app:old"], OLD, 100), image("b", ["app:2"], NEW),
                         image("c", ["nvcr.io/nvidia/cuda:12.4"], OLD), image("d", ["db:1"], OLD),
                         image("e", [], OLD, 7), image("f", ["base:1"], OLD)],
                 containers=[dict(Id="c0ffee" * 10, Image=prefix + "d" * 8)], refuse=["base:1"])
    state["images"] = [dict(i, Id=prefix + i["Id"][len("sha256:"):]) for i in state["images"]]
    calls = fake_cli(tmp_path, runtime, FAKE_ENGINE, state, monkeypatch)
    rule = dict(name="img", kind="container_images", runtime=runtime, age="30d", keep=["nvcr.io/nvidia/cuda:*"])
    result = run(str(tmp_path), rule, check_mode=True)
    assert [i["path"] for i in result["rules"][0]["removed"]] == ["app:1, app:old", "e" * 8, "base:1"]
    assert not any(c[:2] == ["image", "rm"] for c in calls())
    result = run(str(tmp_path), rule)
    rule_result = result["rules"][0]
    removals = [c[2:] for c in calls() if c[:2] == ["image", "rm"]]
    assert removals == [["app:1", "app:old"], [prefix + "e" * 8], ["base:1"]]
    assert rule_result["removed"] == [{"path": "app:1, app:old", "bytes": 100, "id": "a" * 8},
                                      {"path": "e" * 8, "bytes": 7, "id": "e" * 8}]
    assert rule_result["skipped"][:2] == [{"path": "nvcr.io/nvidia/cuda:12.4", "why": "kept: matches "
                                                                                      "'nvcr.io/nvidia/cuda:*'"},
                                          {"path": "db:1", "why": "used by container c0ffeec0ffee"}]
    assert rule_result["skipped"][2]["why"].startswith("%s refused: Error response from daemon: conflict" % runtime)
    assert result["status"] == "ok" and result["removed_bytes"] == 107


def test_a_runtime_not_installed_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run(str(tmp_path), dict(name="img", kind="container_images", runtime="podman", age="30d"))
    assert result["status"] == "unknown" and not result["changed"]
    assert result["rules"][0]["errors"] == ["podman is not installed (no podman on PATH): cannot tell which images "
                                            "are old"]


def test_a_runtime_that_fails_is_unknown(tmp_path, monkeypatch):
    fake_cli(tmp_path, "docker", "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2; exit 1\n%(python)s"
             "%(state)s%(log)s\n", {}, monkeypatch)
    result = run(str(tmp_path), dict(name="img", kind="container_images", runtime="docker", age="30d"))
    assert result["status"] == "unknown"
    assert "Cannot connect to the Docker daemon" in result["rules"][0]["errors"][0]


def test_an_unreadable_creation_time_is_an_error_not_a_removal(tmp_path, monkeypatch):
    state = dict(images=[image("a", ["app:1"], "yesterday")], containers=[])
    calls = fake_cli(tmp_path, "docker", FAKE_ENGINE, state, monkeypatch)
    result = run(str(tmp_path), dict(name="img", kind="container_images", runtime="docker", age="1d"))
    assert result["status"] == "unknown" and "cannot read its creation time 'yesterday'" in \
        result["rules"][0]["errors"][0]
    assert not any(c[:2] == ["image", "rm"] for c in calls())


FAKE_CTR = r'''#!%(python)s
import json, sys
state = json.load(open(%(state)r))
argv = sys.argv[1:]
open(%(log)r, "a").write(json.dumps(argv) + "\n")
assert argv[:2] == ["-n", "default"], argv
argv = argv[2:]
if argv[:2] == ["images", "ls"]:
    print("REF TYPE DIGEST SIZE PLATFORMS LABELS")
    for ref, digest, size in state["images"]:
        print("%%s application/vnd.oci.image.index.v1+json %%s %%s linux/amd64,linux/arm64 -" %% (ref, digest, size))
elif argv[:2] == ["content", "get"]:
    if argv[2] not in state["content"]:
        sys.stderr.write("ctr: content digest %%s: not found\n" %% argv[2])
        sys.exit(1)
    print(json.dumps(state["content"][argv[2]]))
elif argv[:2] == ["containers", "ls"]:
    print("CONTAINER IMAGE RUNTIME")
    for name, ref in state["containers"]:
        print("%%s %%s io.containerd.runc.v2" %% (name, ref))
elif argv[:2] == ["images", "rm"]:
    print("\n".join(argv[2:]))
else:
    sys.exit(2)
'''


def test_containerd_images_through_ctr(tmp_path, monkeypatch):
    content = {
        "sha256:idx1": {"manifests": [{"digest": "sha256:arm"}, {"digest": "sha256:man1"}]},
        "sha256:man1": {"config": {"digest": "sha256:cfg1"}},
        "sha256:cfg1": {"created": OLD},
        "sha256:man2": {"config": {"digest": "sha256:cfg2"}},
        "sha256:cfg2": {"created": OLD},
        "sha256:man3": {"config": {"digest": "sha256:cfg3"}},
        "sha256:cfg3": {"created": NEW},
    }
    state = dict(images=[["docker.io/library/old:1", "sha256:idx1", "3.5 MiB"],
                         ["docker.io/library/old:alias", "sha256:idx1", "3.5 MiB"],
                         ["docker.io/library/used:1", "sha256:man2", "1.0 KiB"],
                         ["docker.io/library/new:1", "sha256:man3", "2 B"]],
                 content=content, containers=[["job1", "docker.io/library/used:1"]])
    calls = fake_cli(tmp_path, "ctr", FAKE_CTR, state, monkeypatch)
    result = run(str(tmp_path), dict(name="img", kind="container_images", runtime="containerd", age="30d"))
    rule = result["rules"][0]
    assert rule["removed"] == [{"path": "docker.io/library/old:1, docker.io/library/old:alias",
                                "bytes": int(3.5 * 1024 * 1024), "id": "idx1"}]
    assert rule["skipped"] == [{"path": "docker.io/library/used:1", "why": "used by container job1"}]
    assert [c for c in calls() if c[2:4] == ["images", "rm"]] == [
        ["-n", "default", "images", "rm", "docker.io/library/old:1", "docker.io/library/old:alias"]]
    assert result["status"] == "ok"


def test_epoch_reads_the_runtimes_times():
    assert _cleanup._epoch("1970-01-01T00:00:10Z") == 10
    assert _cleanup._epoch("1970-01-01T01:00:10.5+01:00") == 10
    assert _cleanup._epoch("1970-01-01 00:00:10 +0000 UTC") == 10
    assert _cleanup._epoch("soon") is None


def test_default_runner_runs_with_lc_all_c():
    rc, out, _err = _cleanup.default_runner([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"])
    assert (rc, out.strip()) == (0, "C")
    assert _cleanup.default_runner(["/nonexistent/program"])[0] == 127


def test_an_entry_is_removed_through_directory_fds_not_following_symlinks(root, tmp_path_factory):
    """What shutil.rmtree does on Linux (avoids_symlink_attacks), relative to the listed path's descriptor: a symlink
    inside an entry goes as a link, what it points to stays."""
    outside = str(tmp_path_factory.mktemp("outside"))
    precious = write(os.path.join(outside, "precious"), 30)
    entry = os.path.join(root, "jobs", "4715")
    write(os.path.join(entry, "deep", "a"), 30)
    os.symlink(outside, os.path.join(entry, "deep", "out"))
    os.symlink(precious, os.path.join(entry, "file"))
    for path in (os.path.join(entry, "deep", "out"), os.path.join(entry, "file"), os.path.join(entry, "deep"), entry):
        age(path, 30)
    result = run(root, files_rule([os.path.join(root, "jobs")], unit="entry"))
    assert removed(result) == [entry] and result["status"] == "ok" and not os.path.lexists(entry)
    assert os.path.exists(precious) and os.listdir(outside) == ["precious"]


def test_a_directory_that_cannot_be_listed_is_an_error_or_skips_its_entry(root, monkeypatch):
    locked = os.path.join(root, "jobs", "4714", "locked")
    write(os.path.join(locked, "a"), 30)
    for directory in (locked, os.path.dirname(locked)):
        age(directory, 30)
    real = _cleanup._children

    def children(dir_fd, path):
        if path == locked:
            raise PermissionError(13, "Permission denied")
        return real(dir_fd, path)
    monkeypatch.setattr(_cleanup, "_children", children)
    rule = run(root, files_rule([os.path.join(root, "jobs")], unit="entry"))["rules"][0]
    assert rule["skipped"] == [{"path": os.path.dirname(locked), "why": "cannot list %s: Permission denied" % locked}]
    result = run(root, files_rule([root]))
    assert result["status"] == "unknown" and result["rules"][0]["errors"] == [
        "cannot list %s: Permission denied" % locked]
    assert os.path.exists(os.path.join(locked, "a"))
