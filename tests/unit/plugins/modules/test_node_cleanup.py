"""node_cleanup's main() through the module harness: a files rule on a temp tree (check mode, diff mode, for real),
bad rules failing before anything is removed (system trees, NUL, '..', allow_system_tree), a parent swapped for a
symlink between the rule check and the run, and a container_images rule through a patched run_command (LC_ALL=C) or
with its runtime not installed."""

import json
import os
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _cleanup
from ansible_collections.gpucluster.ops.plugins.modules import node_cleanup
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

DAY = 86400


def tree(tmp_path):
    root = tmp_path / "scratch"
    (root / "jobs" / "4711").mkdir(parents=True)
    old = root / "jobs" / "4711" / "out.dat"
    old.write_bytes(b"x" * 42)
    new = root / "fresh.log"
    new.write_text("new")
    then = time.time() - 20 * DAY
    for path in (old, root / "jobs" / "4711"):
        os.utime(str(path), (then, then))
    return root, old, new


def rules(root, **extra):
    return [dict(dict(name="scratch", kind="files", paths=[str(root / "jobs")], unit="entry", age="14d"), **extra)]


def test_check_mode_and_diff_say_what_would_go_and_remove_nothing(tmp_path):
    root, old, _new = tree(tmp_path)
    result = run_module(node_cleanup, dict(rules=rules(root), allowed_roots=[str(root)], _ansible_diff=True),
                        check=True)
    assert not result["failed"] and result["changed"] and result["status"] == "ok"
    assert result["rules"][0]["removed"] == [{"path": str(root / "jobs" / "4711"), "bytes": 42}]
    assert result["removed_bytes"] == 42 and old.exists()
    assert result["diff"] == {"before": "scratch: %s (42 bytes)\n" % (root / "jobs" / "4711"), "after": ""}


def test_for_real_removes_and_a_second_run_changes_nothing(tmp_path):
    root, old, new = tree(tmp_path)
    args = dict(rules=rules(root) + [dict(name="logs", kind="files", paths=[str(root), str(root / "gone")],
                                          age="1d")], allowed_roots=[str(root)])
    result = run_module(node_cleanup, args)
    assert result["changed"] and not old.exists() and new.exists() and (root / "jobs").is_dir()
    assert result["rules"][1]["missing_paths"] == [str(root / "gone")]
    assert "diff" not in result and "warnings" not in result
    again = run_module(node_cleanup, args)
    assert not again["changed"] and again["removed_bytes"] == 0


def test_bad_rules_fail_naming_the_key_and_nothing_is_removed(tmp_path):
    root, old, _new = tree(tmp_path)
    result = run_module(node_cleanup, dict(rules=rules(root) + [dict(name="etc", kind="files", paths=["/etc"],
                                                                     age="1d")],
                                           allowed_roots=[str(root)]))
    assert result["failed"] and old.exists()
    assert result["msg"] == ("rule 'etc': rules[1].paths[0] is '/etc', which is not one of the allowed roots or "
                             "below one (allowed_roots: %s); nothing removed" % root)
    result = run_module(node_cleanup, dict(rules=rules(root, age="14")))
    assert result["failed"] and result["msg"].startswith("rules[0].age is '14': a number in a string is a bare number")


def test_the_default_roots_refuse_root_and_home():
    for path in ("/", "/home/alice"):
        result = run_module(node_cleanup, dict(rules=[dict(name="x", kind="files", paths=[path], age="1d")]))
        assert result["failed"] and "rules[0].paths[0] is %r" % path in result["msg"]


def test_images_through_run_command_with_lc_all_c():
    calls = []
    image = dict(Id="sha256:" + "a" * 64, RepoTags=["app:1"], Created="2020-01-01T00:00:00Z", Size=5)

    def run_command(argv, **kwargs):
        calls.append((argv, kwargs.get("environ_update")))
        if argv[1:3] == ["image", "ls"]:
            return 0, image["Id"] + "\n", ""
        if argv[1:3] == ["image", "inspect"]:
            return 0, json.dumps([image]), ""
        if argv[1:3] == ["container", "ls"]:
            return 0, "", ""
        return 0, "Untagged: app:1\n", ""
    args = dict(rules=[dict(name="img", kind="container_images", runtime="docker", age="30d")])
    result = run_module(node_cleanup, args, check=True, run_command=run_command)
    assert result["changed"] and result["rules"][0]["removed"] == [{"path": "app:1", "bytes": 5, "id": "a" * 64}]
    assert [argv for argv, _env in calls] == [["/usr/bin/docker", "image", "ls", "--quiet", "--no-trunc"],
                                              ["/usr/bin/docker", "image", "inspect", image["Id"]],
                                              ["/usr/bin/docker", "container", "ls", "--all", "--quiet",
                                               "--no-trunc"]]
    assert all(env == {"LC_ALL": "C", "LANG": "C"} for _argv, env in calls)
    calls[:] = []
    result = run_module(node_cleanup, args, run_command=run_command)
    assert calls[-1][0] == ["/usr/bin/docker", "image", "rm", "app:1"] and result["removed_bytes"] == 5


def test_a_runtime_not_installed_is_unknown_with_a_warning():
    result = run_module(node_cleanup, dict(rules=[dict(name="img", kind="container_images", runtime="podman",
                                                       age="30d")]), missing=("podman",))
    assert not result["failed"] and not result["changed"] and result["status"] == "unknown"
    assert result["warnings"] == ["rule 'img': podman is not installed (no podman on PATH): cannot tell which "
                                  "images are old"]


def test_validate_only_checks_the_rules_and_touches_no_file(tmp_path):
    root, old, _new = tree(tmp_path)
    result = run_module(node_cleanup, dict(rules=rules(root), allowed_roots=[str(root)], validate_only=True))
    assert not result["failed"] and not result["changed"] and result["rules"] == [] and old.exists()
    bad = run_module(node_cleanup, dict(rules=rules(root, age="soon"), allowed_roots=[str(root)], validate_only=True))
    assert bad["failed"] and "rules[0].age is 'soon'" in bad["msg"] and old.exists()


def test_system_trees_bad_paths_fail_naming_the_key_and_a_rule_may_opt_in(tmp_path):
    root, old, _new = tree(tmp_path)
    result = run_module(node_cleanup, dict(rules=rules(root), allowed_roots=[str(root), "/home"]))
    assert result["failed"] and old.exists()
    assert result["msg"] == ("allowed_roots[1] is '/home': /home is a system tree, never an allowed root unless a rule "
                             "sets allow_system_tree: true; nothing removed")
    homes = dict(name="homes", kind="files", paths=["/home/scratch"], age="30d", allow_system_tree=True)
    result = run_module(node_cleanup, dict(rules=rules(root) + [homes], allowed_roots=[str(root), "/home"],
                                           validate_only=True))
    assert not result["failed"] and result["status"] == "ok"
    for path, said in (("/tmp/a\0b", "a path has no NUL byte"), ("/tmp/../etc", "a '..' component is refused"),
                       ("tmp/x", "give an absolute directory")):
        result = run_module(node_cleanup, dict(rules=[dict(name="x", kind="files", paths=[path], age="1d")]))
        assert result["failed"] and result["msg"] == "rules[0].paths[0] is %r: %s%s; nothing removed" % (
            path, said, ": give the directory itself" if ".." in path else "")


def test_a_parent_swapped_for_a_symlink_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The module walks by descriptors from the allowed root: a listed path's parent swapped for a symlink between
    the rule check and the run is skipped, not followed."""
    root, old, _new = tree(tmp_path)
    outside = tmp_path / "outside"
    (outside / "4711").mkdir(parents=True)
    precious = outside / "4711" / "out.dat"
    precious.write_text("keep")
    then = time.time() - 20 * DAY
    os.utime(str(precious), (then, then))
    real = _cleanup.check_rules

    def check_then_swap(*args):
        checked = real(*args)
        (root / "jobs").rename(root / "jobs.moved")
        (root / "jobs").symlink_to(outside)
        return checked
    monkeypatch.setattr(_cleanup, "check_rules", check_then_swap)
    args = dict(rules=[dict(name="s", kind="files", paths=[str(root / "jobs" / "4711")], age="1d")],
                allowed_roots=[str(root)])
    result = run_module(node_cleanup, args)
    assert not result["failed"] and not result["changed"] and precious.exists()
    assert result["rules"][0]["skipped"] == [{"path": str(root / "jobs" / "4711"), "why": (
        "symlink: %s, on the way from the allowed root to it, is a symlink; not followed" % (root / "jobs"))}]
    assert (root / "jobs.moved" / "4711" / "out.dat").exists() and old.name == "out.dat"
