"""The molecule scenarios' shared bad-input checks (tests/support/bad_input.py) pass a refused run and fail every way a
run can break the rule: wrong exit code, a failure outside preflight, a change, a host left out, an unnamed mistake.
So do the offline ones of the unit tests (tests/support/offline_preflight.py), and besides a task beyond the
preflight or a question the offline host could not answer."""

import pytest

from bad_input import (assert_refused_before_change, assert_refused_in_preflight, failed_tasks, preflight_task_names,
                       recap, started_tasks, task_names)
from offline_preflight import assert_refused_offline

GOOD_RUN = """
PLAY [Converge] ****************************************************************

TASK [gpucluster.ops.node_baseline : Validating arguments against arg spec 'main' - The node baseline] ***
ok: [deb12-x]
ok: [deb13-x]

TASK [gpucluster.ops.node_baseline : Check the cluster name] *******************
fatal: [deb12-x]: FAILED! => changed=false
  msg: 'host deb12-x: node_baseline_cluster_name is ''Lab Cluster'': use lower-case letters'
fatal: [deb13-x]: FAILED! => changed=false
  msg: 'host deb13-x: node_baseline_cluster_name is ''Lab Cluster'': use lower-case letters'

PLAY RECAP *********************************************************************
deb12-x                    : ok=1    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
deb13-x                    : ok=1    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
"""
SAME = {"deb12-x": "a", "deb13-x": "b"}
EXPECT = ["node_baseline_cluster_name is 'Lab Cluster'"]


def _check(rc=2, out=GOOD_RUN, expect=None, before=None, after=None, run_hosts=None):
    assert_refused_before_change("case", rc, out, ["node_baseline"], EXPECT if expect is None else expect,
                                 before or SAME, after or SAME, run_hosts)


def test_a_refused_run_passes():
    _check()


def test_recap_and_failed_tasks_are_read():
    assert recap(GOOD_RUN)["deb13-x"] == {"ok": 1, "changed": 0, "unreachable": 0, "failed": 1, "skipped": 0,
                                          "rescued": 0, "ignored": 0}
    assert failed_tasks(GOOD_RUN) == {"Check the cluster name"}


def test_preflight_names_follow_imports():
    names = preflight_task_names("slurm")
    assert "Check the munge key" in names
    assert "Render the Slurm configuration on the controller" in names      # from render.yml, imported
    assert "Check the cluster name" in preflight_task_names("node_baseline")


def test_task_names_reads_nested_blocks(tmp_path):
    (tmp_path / "inner.yml").write_text("- name: Inner\n  ansible.builtin.debug: {}\n")
    (tmp_path / "outer.yml").write_text(
        "- name: Outer\n  block:\n    - name: In a block\n      ansible.builtin.debug: {}\n"
        "  rescue:\n    - name: In a rescue\n      ansible.builtin.debug: {}\n"
        "- name: Import\n  ansible.builtin.import_tasks: inner.yml\n")
    assert task_names(str(tmp_path / "outer.yml")) == {"Outer", "In a block", "In a rescue", "Import", "Inner"}


@pytest.mark.parametrize("rc", [0, 1, 4])
def test_a_run_that_did_not_fail_its_hosts_fails(rc):
    with pytest.raises(AssertionError, match="expected failed hosts"):
        _check(rc=rc)


def test_an_unnamed_mistake_fails():
    with pytest.raises(AssertionError, match="does not say"):
        _check(expect=["node_baseline_cluster_name is 'lab'"])


def test_a_failure_outside_preflight_fails():
    out = GOOD_RUN.replace("TASK [gpucluster.ops.node_baseline : Check the cluster name]",
                           "TASK [gpucluster.ops.node_baseline : Install the base packages]")
    with pytest.raises(AssertionError, match="failed outside preflight"):
        _check(out=out)


def test_a_change_fails():
    with pytest.raises(AssertionError, match="changed deb13-x"):
        _check(after={"deb12-x": "a", "deb13-x": "c"})


def test_a_changed_counter_fails():
    out = GOOD_RUN.replace("deb12-x                    : ok=1    changed=0", "deb12-x                    : ok=1    changed=1")
    with pytest.raises(AssertionError):
        _check(out=out)


def test_a_host_missing_from_the_recap_fails():
    out = "\n".join(line for line in GOOD_RUN.splitlines() if not line.startswith("deb13-x "))
    with pytest.raises(AssertionError, match="not in the play recap"):
        _check(out=out)


def test_a_host_outside_the_run_is_only_held_unchanged():
    before = dict(SAME, spare="c")
    _check(before=before, after=dict(before), run_hosts=["deb12-x", "deb13-x"])
    with pytest.raises(AssertionError, match="changed spare"):
        _check(before=before, after=dict(before, spare="d"), run_hosts=["deb12-x", "deb13-x"])
    with pytest.raises(AssertionError, match="spare is not in the play recap"):
        _check(before=before, after=dict(before))


def test_preflight_task_names_follow_the_shared_task_files_a_preflight_includes():
    """The monitoring and slurm preflights include roles/_common's secrets check: its refusal is a preflight one."""
    for role in ("monitoring", "slurm"):
        names = preflight_task_names(role)
        assert "Refuse secrets that are still the example vault's placeholder" in names, role
        assert "Gather the fact subsets the role needs" in names, role   # roles/_common tasks_from: facts
    assert "Fail on every problem of the team model" in preflight_task_names("team_quota")


def test_started_tasks_are_read_in_order():
    assert started_tasks(GOOD_RUN) == ["Validating arguments against arg spec 'main' - The node baseline",
                                       "Check the cluster name"]


def test_the_run_checks_hold_without_snapshots():
    assert_refused_in_preflight("case", 2, GOOD_RUN, ["node_baseline"], EXPECT, ["deb12-x", "deb13-x"])
    with pytest.raises(AssertionError, match="spare is not in the play recap"):
        assert_refused_in_preflight("case", 2, GOOD_RUN, ["node_baseline"], EXPECT, ["deb12-x", "spare"])


def _offline(out=GOOD_RUN, calls=()):
    assert_refused_offline("case", 2, out, list(calls), ["node_baseline"], EXPECT, ["deb12-x", "deb13-x"])


def test_an_offline_refused_run_passes():
    _offline(calls=[{"module": "setup", "answered": True, "host": "deb12-x"}])


def test_an_offline_run_that_asked_what_a_host_cannot_answer_fails():
    with pytest.raises(AssertionError, match="cannot answer"):
        _offline(calls=[{"module": "apt", "refused": "no canned answer for apt {}", "host": "deb12-x"}])


def test_an_offline_run_with_a_task_beyond_the_preflight_fails():
    install = "TASK [gpucluster.ops.node_baseline : Install the base packages] ***\n\n"
    out = GOOD_RUN.replace("PLAY RECAP", install + "PLAY RECAP")
    with pytest.raises(AssertionError, match="tasks beyond the preflight started: \\['Install the base packages'\\]"):
        _offline(out=out)
