"""slurm_config_files' main() through the module harness: check mode and diff mode change nothing, a real run
switches the set and reports its actions, the acknowledgement by state=applied, state=absent, bad names refused."""

import os

from ansible_collections.gpucluster.ops.plugins.modules import slurm_config_files
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

OLD = {"slurm.conf": "ClusterName=old\n", "gres.conf": "old\n"}
NEW = {"slurm.conf": "ClusterName=new\n", "gres.conf": "new\n", "cgroup.conf": "c\n"}


def _plain(path, files):
    for name, content in files.items():
        (path / name).write_text(content)


def _args(path, **extra):
    return dict(dict(path=str(path)), **extra)


def test_check_and_diff_mode_change_nothing_and_say_what_would(tmp_path):
    _plain(tmp_path, OLD)
    result = run_module(slurm_config_files, dict(_args(tmp_path, files=NEW), _ansible_diff=True), check=True)
    assert result["changed"] and not result["failed"]
    assert any(a.startswith("migrate the plain files") for a in result["actions"])
    assert {d["before_header"]: (d["before"], d["after"]) for d in result["diff"]} == {
        "slurm.conf": ("ClusterName=old\n", "ClusterName=new\n"), "gres.conf": ("old\n", "new\n"), "cgroup.conf": ("", "c\n")}
    assert sorted(os.listdir(tmp_path)) == ["gres.conf", "slurm.conf"]
    assert not os.path.islink(tmp_path / "slurm.conf")


def test_a_real_run_switches_then_waits_for_the_acknowledgement(tmp_path):
    _plain(tmp_path, OLD)
    result = run_module(slurm_config_files, _args(tmp_path, files=NEW))
    assert result["changed"] and result["generation"].startswith("gen-")
    assert (tmp_path / "cgroup.conf").read_text() == "c\n" and os.path.islink(tmp_path / "cgroup.conf")
    # the daemons were not told yet: a rerun (after a killed run, say) reports the change again
    again = run_module(slurm_config_files, _args(tmp_path, files=NEW))
    assert again["changed"] and again["actions"] == [
        "generation %s not yet applied (the daemons were not told of it)" % result["generation"]]
    assert run_module(slurm_config_files, _args(tmp_path, state="applied"), check=True)["changed"]
    assert run_module(slurm_config_files, _args(tmp_path, state="applied"))["changed"]
    assert not run_module(slurm_config_files, _args(tmp_path, state="applied"))["changed"]
    final = run_module(slurm_config_files, _args(tmp_path, files=NEW))
    assert not final["changed"] and final["actions"] == [] and final["generation"] == result["generation"]


def test_absent_removes_links_and_generations(tmp_path):
    run_module(slurm_config_files, _args(tmp_path, files=NEW))
    assert run_module(slurm_config_files, _args(tmp_path, state="absent"), check=True)["changed"]
    assert os.path.exists(tmp_path / "slurm.conf")
    assert run_module(slurm_config_files, _args(tmp_path, state="absent"))["changed"]
    assert os.listdir(tmp_path) == []
    assert not run_module(slurm_config_files, _args(tmp_path, state="absent"))["changed"]


def test_names_outside_the_managed_ones_are_refused_before_anything_is_written(tmp_path):
    result = run_module(slurm_config_files, _args(tmp_path, files={"../passwd": "x", "slurmdbd.conf": "y"}))
    assert result["failed"] and "../passwd, slurmdbd.conf" in result["msg"]
    assert os.listdir(tmp_path) == []
