"""bench/site_rerun.py: its task-record callback on a real ansible-playbook run, the per-host counts and the
400-node projection from synthetic records (no timing is asserted)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location("site_rerun", os.path.join(ROOT, "bench", "site_rerun.py"))
sr = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sr)

PLAY = """\
- name: Three results of each kind
  hosts: all
  gather_facts: false
  tasks:
    - name: Unchanged
      ansible.builtin.debug:
        msg: ok
    - name: Changed
      ansible.builtin.command: "true"
      changed_when: true
    - name: Skipped
      ansible.builtin.debug:
        msg: never
      when: false
"""


def record(host, status, task="t", role="r", seconds=1.0, play="p"):
    return {"play": play, "role": role, "task": task, "action": "x", "host": host, "status": status, "seconds": seconds}


def test_callback_records_every_result(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("a ansible_connection=local ansible_python_interpreter=%s\n"
                         "b ansible_connection=local ansible_python_interpreter=%s\n" % (sys.executable, sys.executable))
    stats = tmp_path / "stats.jsonl"
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "bench", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="gpucluster_task_stats", GPUCLUSTER_TASK_STATS=str(stats))
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([ansible, "-i", str(inventory), str(playbook)], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in stats.read_text().splitlines()]
    assert sorted((r["host"], r["task"], r["status"]) for r in records) == [
        ("a", "Changed", "changed"), ("a", "Skipped", "skipped"), ("a", "Unchanged", "ok"),
        ("b", "Changed", "changed"), ("b", "Skipped", "skipped"), ("b", "Unchanged", "ok")]
    assert all(r["play"] == "Three results of each kind" and r["seconds"] is not None and r["seconds"] >= 0
               for r in records)


def test_summary_and_projection():
    records = ([record("gpu1", "ok", task="t%d" % n, seconds=2.0) for n in range(3)]
               + [record("gpu2", "ok", task="t%d" % n, seconds=4.0) for n in range(3)]
               + [record("gpu1", "skipped", task="s"), record("gpu2", "changed", task="c", seconds=1.0)]
               + [record("head", "ok", task="h", role="")])
    per_host, per_role, changed, task_times = sr.summarise(records, {"gpu1", "gpu2"})
    assert per_host["gpu1"]["ok"] == 3 and per_host["gpu1"]["skipped"] == 1 and per_host["head"]["ok"] == 1
    assert [(c["host"], c["task"]) for c in changed] == [("gpu2", "c")]
    # skipped results are not counted as work of the role; the head's task is not a GPU node's
    assert per_role["r"] == [7, 19.0] and "(play: p)" not in per_role
    # 9 results for 9 s of controller CPU: 1 s each; a GPU node has 4 results, the head 1
    cpu_bound, latency_bound, per_result = sr.project(len(records), 9.0, per_host, ["gpu1", "gpu2"], task_times,
                                                      forks=100, cores=2)
    assert per_result == pytest.approx(1.0)
    assert cpu_bound == pytest.approx((4 * 400 + 1) / 2)
    # medians: t0-t2 3 s each, c 1 s: 10 s per batch, 4 batches of 100
    assert latency_bound == pytest.approx(10.0 * 4)


def test_enabled_callbacks_keep_the_configured_ones(tmp_path):
    """The bench's recording callback goes beside the configuration's callbacks (the preload callback of
    ansible.cfg), not instead of them; the environment's list wins over the file's, as in Ansible."""
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nforks = 5\ncallbacks_enabled = gpucluster.ops.preload, profile_tasks  ; two\n")
    assert sr.enabled_callbacks({"ANSIBLE_CONFIG": str(config)}) == ["gpucluster.ops.preload", "profile_tasks"]
    assert sr.enabled_callbacks({"ANSIBLE_CONFIG": str(config), "ANSIBLE_CALLBACKS_ENABLED": "timer"}) == ["timer"]
    config.write_text("[defaults]\nforks = 5\n")
    assert sr.enabled_callbacks({"ANSIBLE_CONFIG": str(config)}) == []
    assert "gpucluster.ops.preload" in sr.enabled_callbacks({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg")})
