# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operations playbooks that drain nodes (maintenance_weekly.yml, maintenance_monthly.yml,
nvlink_remediation.yml, rolling_upgrade.yml) without a cluster: bad input stops the run on every host in its first play, naming host,
variable and value, before anything runs: no health check, no Slurm call, no file removed, no report. The nodes are
this machine (a local connection); a fake scontrol logs every call.

The behaviour itself (drift drained, the cleanup, reservations, the wait for a job, the deep checks, the restarts) is
tested on the shared cluster: molecule/cluster-shared/tests/test_6_maintenance.py, test_7_nvlink_remediation.py,
test_9_rolling_upgrade.py.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from logged_scontrol import logged_scontrol_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEEKLY = os.path.join(ROOT, "playbooks", "maintenance_weekly.yml")
MONTHLY = os.path.join(ROOT, "playbooks", "maintenance_monthly.yml")
NVLINK = os.path.join(ROOT, "playbooks", "nvlink_remediation.yml")
UPGRADE = os.path.join(ROOT, "playbooks", "rolling_upgrade.yml")
HOSTS = ("gpu01", "gpu02")


class Run(object):
    """Two local hosts, a controller, a fake scontrol, and runs of a playbook under tmp_path."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.env, self.log = logged_scontrol_env(tmp_path)
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        self.scratch = tmp_path / "scratch"
        self.scratch.mkdir()
        (self.scratch / "old-job").mkdir()
        os.utime(str(self.scratch / "old-job"), (0, 0))
        inventory = {"all": {"children": {
            "gpu_nodes": {"hosts": {h: dict(local) for h in HOSTS}, "vars": {
                "health_check_sources": {"dcgmi": "/nonexistent/dcgmi"},
                "health_check_config_file": str(tmp_path / "no-health.json")}},
            "slurm_controller": {"hosts": {"localhost": dict(local)}}}}}
        self.inventory = tmp_path / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump(inventory))

    def run(self, playbook, extra_vars):
        path = self.tmp / "extra-vars.json"
        path.write_text(json.dumps(dict(extra_vars, health_sweep_report_dir=str(self.tmp / "reports"))))
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(self.inventory),
                "-e", "@%s" % path, playbook]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env,
                              cwd=str(self.tmp), timeout=300, check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")

    def scontrol_calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []


def _assert_stopped_naming(run, rc, out, words, per_host=True):
    assert rc != 0, out
    if per_host:
        for host in HOSTS:
            assert [line for line in out.splitlines() if line.startswith("fatal: [%s]" % host)], (host, out)
            message = out[out.index("host %s:" % host):]
            for word in words:
                assert word in message[:900], (host, word, out)
    else:
        for word in words:
            assert word in out, (word, out)
    # nothing ran past the checks: no health check, no Slurm call, no report, no file removed
    assert "Run the installed health checker" not in out and "Drain the batch" not in out, out
    assert run.scontrol_calls() == []
    assert not (run.tmp / "reports").exists()
    assert (run.scratch / "old-job").is_dir()


MONTHLY_BAD = {
    "no batch": ({"maintenance_batch": 0}, ["maintenance_batch is 0", "a whole number of nodes, 1 or more"]),
    "a batch that is no number": ({"maintenance_batch": "two"}, ["maintenance_batch is \"two\""]),
    "a deadline that is no duration": ({"maintenance_drain_deadline": "soon"},
                                       ["maintenance_drain_deadline is 'soon'", "not a Slurm time or a duration"]),
    "a deadline that is a bare number": ({"maintenance_drain_deadline": 30},
                                         ["maintenance_drain_deadline is 30", "bare number"]),
    "a reservation shorter than the deadline": ({"maintenance_drain_deadline": "2h",
                                                 "maintenance_reservation_duration": "1h"},
                                                ["maintenance_reservation_duration is \"1h\"", "longer than"]),
    "users given as a string": ({"maintenance_reservation_users": "root"},
                                ["maintenance_reservation_users is \"root\"", "a list of one or more user names"]),
    "a reservation prefix with blanks": ({"maintenance_reservation_prefix": "maint window"},
                                         ["maintenance_reservation_prefix is \"maint window\""]),
}


@pytest.mark.parametrize("case", sorted(MONTHLY_BAD))
def test_monthly_bad_input_stops_every_host_before_anything_runs(tmp_path, case):
    run = Run(tmp_path)
    extra, words = MONTHLY_BAD[case]
    rc, out = run.run(MONTHLY, extra)
    _assert_stopped_naming(run, rc, out, words)


def test_monthly_a_node_without_the_deep_check_tools_stops_the_run_naming_the_nodes(tmp_path):
    run = Run(tmp_path)
    rc, out = run.run(MONTHLY, {})
    # one message for the run, naming every node and what it lacks, before any node is drained
    _assert_stopped_naming(run, rc, out, [
        "the monthly deep checks cannot run on gpu01, gpu02", "host gpu01: dcgmi (/nonexistent/dcgmi) is not installed",
        "host gpu02: dcgmi (/nonexistent/dcgmi) is not installed", "No node was drained"], per_host=False)


WEEKLY_BAD = {
    "a drift switch that is no boolean": ({"maintenance_drain_on_drift": "maybe"},
                                          ["maintenance_drain_on_drift is \"maybe\""]),
    "a cleanup path of /": ({"maintenance_cleanup_rules": [
        {"name": "everything", "kind": "files", "paths": ["/"], "age": "7d"}]},
        ["maintenance_cleanup_rules", "'/'"]),
    "a cleanup path outside the allowed roots": ({"maintenance_cleanup_rules": [
        {"name": "etc", "kind": "files", "paths": ["/etc/slurm"], "age": "7d"}]},
        ["maintenance_cleanup_rules", "/etc/slurm", "allowed"]),
    "a cleanup age that is no duration": ({"maintenance_cleanup_rules": [
        {"name": "scratch", "kind": "files", "paths": ["/tmp/scratch"], "age": "a week"}]},
        ["maintenance_cleanup_rules", "'a week'"]),
}


@pytest.mark.parametrize("case", sorted(WEEKLY_BAD))
def test_weekly_bad_input_stops_every_host_before_anything_runs(tmp_path, case):
    run = Run(tmp_path)
    extra, words = WEEKLY_BAD[case]
    rules = extra.get("maintenance_cleanup_rules")
    # the scratch tree of this test is what a valid rule beside the bad one would clean: it must stay
    extra = dict(extra, maintenance_cleanup_rules=[
        {"name": "scratch-here", "kind": "files", "paths": [str(run.scratch)], "unit": "entry", "age": "1d"}
    ] + (rules or []), maintenance_cleanup_allowed_roots=[str(run.tmp), "/tmp"])
    rc, out = run.run(WEEKLY, extra)
    _assert_stopped_naming(run, rc, out, words)


NVLINK_BAD = {
    "no node at a time": ({"nvlink_remediation_max_nodes": 0},
                          ["nvlink_remediation_max_nodes is 0", "a whole number of nodes, 1 or more"]),
    "an unknown node": ({"nvlink_remediation_nodes": "gpu01,gpu99"},
                        ["nvlink_remediation_nodes is \"gpu01,gpu99\"", "gpu99 is not among the hosts"]),
    "a deadline that is no duration": ({"nvlink_remediation_drain_deadline": "later"},
                                       ["nvlink_remediation_drain_deadline is 'later'"]),
    "a reset switch that is no boolean": ({"nvlink_remediation_reset_gpus": "perhaps"},
                                          ["nvlink_remediation_reset_gpus is \"perhaps\""]),
    "a take-over owner that is no owner": ({"nvlink_remediation_take_over": ["Health"]},
                                           ["nvlink_remediation_take_over is [\"Health\"]", "drain owners"]),
}


@pytest.mark.parametrize("case", sorted(NVLINK_BAD))
def test_nvlink_remediation_bad_input_stops_every_host_before_any_drain(tmp_path, case):
    run = Run(tmp_path)
    extra, words = NVLINK_BAD[case]
    rc, out = run.run(NVLINK, extra)
    _assert_stopped_naming(run, rc, out, words)


UPGRADE_GOOD = {"nvidia_driver_version": "535.261.03", "rolling_upgrade_confirm": False}
UPGRADE_BAD = {
    "a batch size of 0": ({"rolling_upgrade_serial": 0},
                          ["rolling_upgrade_serial is 0", "a whole number of nodes (1 or more) or a percentage"]),
    "a batch percentage over 100": ({"rolling_upgrade_serial": "150%"}, ["rolling_upgrade_serial is \"150%\""]),
    "a batch of 0 %": ({"rolling_upgrade_serial": "0%"}, ["rolling_upgrade_serial is \"0%\""]),
    "a cap over 100 %": ({"rolling_upgrade_max_unavailable": "120%"},
                         ["rolling_upgrade_max_unavailable is \"120%\"", "from 1% to 100%"]),
    "a cap of no node": ({"rolling_upgrade_max_unavailable": 0}, ["rolling_upgrade_max_unavailable is 0"]),
    "a failure share over 100": ({"rolling_upgrade_max_fail_percentage": 150},
                                 ["rolling_upgrade_max_fail_percentage is 150", "from 0 to 100"]),
    "a driver version that is not a version": ({"nvidia_driver_version": "latest"},
                                               ["nvidia_driver_version is \"latest\"", "a version such as"]),
    "no driver version": ({"nvidia_driver_version": ""}, ["nvidia_driver_version is \"\"", "a version such as"]),
    "a CUDA version that is not a version": ({"rolling_upgrade_components": ["cuda"], "cuda_toolkit_versions": ["12.x"]},
                                             ["cuda_toolkit_versions is [\"12.x\"]"]),
    "an unknown component": ({"rolling_upgrade_components": ["driver", "kernel"]},
                             ["rolling_upgrade_components is [\"driver\", \"kernel\"]", "kernel is not a component"]),
    "components given as a string": ({"rolling_upgrade_components": "driver"},
                                     ["rolling_upgrade_components is \"driver\"", "must be a list"]),
    "a fabric manager without its driver": ({"rolling_upgrade_components": ["fabricmanager"]},
                                            ["upgraded together with the driver"]),
    "a fabric manager version that differs from the driver's": (
        {"rolling_upgrade_components": ["driver", "fabricmanager"],
         "rolling_upgrade_fabricmanager_version": "535.216.03"},
        ["rolling_upgrade_fabricmanager_version is \"535.216.03\"", "nvidia_driver_version is \"535.261.03\"",
         "the driver's version exactly"]),
    "a canary switch that is no boolean": ({"rolling_upgrade_canary": "sometimes"},
                                           ["rolling_upgrade_canary is \"sometimes\""]),
    "a deadline that is no duration": ({"rolling_upgrade_drain_deadline": "whenever"},
                                       ["rolling_upgrade_drain_deadline is 'whenever'"]),
}


@pytest.mark.parametrize("case", sorted(UPGRADE_BAD))
def test_rolling_upgrade_bad_input_stops_every_host_before_any_drain(tmp_path, case):
    run = Run(tmp_path)
    extra, words = UPGRADE_BAD[case]
    rc, out = run.run(UPGRADE, dict(UPGRADE_GOOD, **extra))
    _assert_stopped_naming(run, rc, out, words)
    assert "Ask the driver role" not in out and "Upgrade the driver" not in out, out
