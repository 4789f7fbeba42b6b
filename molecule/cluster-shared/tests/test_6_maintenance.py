"""The scheduled maintenance on the cluster (docs/maintenance.md): playbooks/maintenance_weekly.yml (the health sweep,
version drift against the pins drained under the owner drift, the disk cleanup policy) and
playbooks/maintenance_monthly.yml (batch by batch: a Slurm maintenance reservation, a drain that waits for the running
job, the deep checks, resume of the nodes that pass, the others left drained with their codes, the reservation
deleted). The faults come from the simulator (tests/gpusim): a driver the pin does not name, a failing DCGM test.

slurmd's own health check runs at the quick level, where neither fault shows, so it drains and resumes nothing here.
Debian 13 only: the playbooks and Slurm's commands are the same on both releases; the offline tests
(tests/unit/test_maintenance_playbooks.py) cover the rest of the bad input.
"""

import json
import os
import time
from datetime import datetime, timezone

import pytest

import alerting
from conftest import ROOT, node_records, set_faults
from poller import Poller

pytestmark = pytest.mark.release("debian13")

WEEKLY = os.path.join(ROOT, "playbooks", "maintenance_weekly.yml")
MONTHLY = os.path.join(ROOT, "playbooks", "maintenance_monthly.yml")
# The simulator's driver is 550.127.05: pinned for every node, and the A100 node given another one.
PIN = {"health_sweep_expected": {"driver_version": "550.127.05"}}
DRIFT = [{"name": "driver_version", "value": "550.54.15"}]
DCGM_FAIL = [{"name": "dcgm_fail", "gpu": 2}]
TREE = "/var/tmp/gpucluster-maint-test"
POLICY = [{"name": "job-scratch", "kind": "files", "paths": [TREE + "/scratch"], "unit": "entry", "age": "7d"}]
# Two compute nodes: at most one may be out of service for drift.
HALF = {"health_sweep_max_out_of_service": 0.5}
# An old job's scratch directory and an old loose file (both removed), a fresh job's directory, an old directory
# outside the policy's paths and a link to it from inside them (both kept: the link is newer than the age).
MAKE_TREE = r"""
set -e
rm -rf {tree}; mkdir -p {tree}/scratch/job-old/sub {tree}/scratch/job-new {tree}/outside
head -c 4096 /dev/zero > {tree}/scratch/job-old/sub/data; echo old > {tree}/scratch/job-old/log
echo new > {tree}/scratch/job-new/log; echo loose > {tree}/scratch/old-file; echo keep > {tree}/outside/old
ln -s {tree}/outside {tree}/scratch/link
touch -d '10 days ago' {tree}/scratch/job-old/sub/data {tree}/scratch/job-old/sub {tree}/scratch/job-old/log \
    {tree}/scratch/job-old {tree}/scratch/old-file {tree}/outside/old {tree}/outside
""".format(tree=TREE)
LISTING = "cd %s && find . | sort" % TREE


def states(ctl, scenario):
    return {n: (r["State"], r["Reason"]) for n, r in node_records(ctl, scenario.compute).items()}


def reservations(ctl):
    """{name: {key: value}} from scontrol show reservation -o (nothing when there is none)."""
    found = {}
    for line in ctl.check_output("scontrol show reservation -o").splitlines():
        if line.startswith("ReservationName="):
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            found[fields["ReservationName"]] = fields
    return found


class Watcher(Poller):
    """Polls the reservations and node states on the controller while a playbook runs, once a second."""

    def __init__(self, scenario):
        self.ctl = scenario.host(scenario.controller)
        self.scenario = scenario
        self.seen = {}
        self.states = []
        super(Watcher, self).__init__(self._poll)

    def _poll(self):
        for name, fields in reservations(self.ctl).items():
            self.seen.setdefault(name, fields)
        self.states.append(states(self.ctl, self.scenario))


@pytest.fixture(scope="module")
def nodes(scenario):
    """(the A100 node, the H100 node)."""
    return scenario.groups["gpu_a100"][0], scenario.groups["gpu_h100"][0]


def load(report_dir, name="fleet.json"):
    with open(str(report_dir / name)) as handle:
        return json.load(handle)


def run(scenario, tmp_path, playbook, name, extra_vars=None, args=()):
    report_dir = tmp_path / "reports" / name
    extra_vars = dict(extra_vars or {}, health_sweep_report_dir=str(report_dir))
    rc, out = scenario.playbook(tmp_path, playbook, extra_vars=extra_vars, args=args)
    return rc, out, report_dir


# ---- weekly ------------------------------------------------------------------------------------------------------

def test_weekly_reports_and_drains_the_drift_and_cleans_only_what_the_policy_names(scenario, ctl, nodes, tmp_path):
    a100, h100 = nodes
    set_faults(scenario, a100, DRIFT)
    hosts = [scenario.host(h) for h in nodes]
    for host in hosts:
        host.check_output("sh -c %s" % _quote(MAKE_TREE))
    before = [host.check_output(LISTING) for host in hosts]
    weekly = dict(PIN, maintenance_drain_on_drift=True, maintenance_cleanup_rules=POLICY, **HALF)

    # --check: no drain, no file removed, no report; it says what it would do
    slurm_before = states(ctl, scenario)
    rc, out, report_dir = run(scenario, tmp_path, WEEKLY, "check", weekly, args=["--check"])
    assert rc == 0, out
    assert states(ctl, scenario) == slurm_before
    assert [host.check_output(LISTING) for host in hosts] == before
    assert not report_dir.exists()
    assert "rule job-scratch: removed 2 entries, " in " ".join(out.split()), out
    assert a100 in out.split("Show the drift and what was done about it")[1].split("drained:")[1].split("not_ours")[0]

    rc, out, report_dir = run(scenario, tmp_path, WEEKLY, "weekly", weekly)
    assert rc == 0, out
    # the drift is in the fleet report, and the drifted node is drained under the owner drift
    report = load(report_dir)
    drift = [f for f in report["nodes"][a100]["findings"] if f["code"] == "FLEET-DRIFT-DRIVER"]
    assert drift and "550.54.15" in drift[0]["message"] and "550.127.05" in drift[0]["message"], drift
    assert not [f for f in report["nodes"][h100]["findings"] if f["code"].startswith("FLEET-DRIFT-")]
    record = node_records(ctl, [a100])[a100]
    assert "DRAIN" in record["State"], record
    assert record["Reason"].startswith("gpucluster-drift: version drift from the pins: DRIVER ["), record
    assert node_records(ctl, [h100])[h100]["State"] == "IDLE"
    # only the old entries under the policy's path are gone: the old job's directory and the old loose file
    for host, listing in zip(hosts, before):
        removed = sorted(set(listing.split()) - set(host.check_output(LISTING).split()))
        assert removed == ["./scratch/job-old", "./scratch/job-old/log", "./scratch/job-old/sub",
                           "./scratch/job-old/sub/data", "./scratch/old-file"], removed
        assert host.file(TREE + "/outside/old").exists and host.file(TREE + "/scratch/link").is_symlink
    cleanup = load(report_dir, "cleanup.json")
    rule = cleanup[a100]["rules"][0]
    assert rule["name"] == "job-scratch" and rule["removed_count"] == 2 and rule["removed_bytes"] >= 4096, rule
    assert sorted(r["path"] for r in rule["removed"]) == [TREE + "/scratch/job-old", TREE + "/scratch/old-file"]

    # the driver matches the pin again: the next weekly run resumes the node
    set_faults(scenario, a100, [])
    rc, out, _report_dir = run(scenario, tmp_path, WEEKLY, "healed", dict(weekly, maintenance_cleanup_rules=[]))
    assert rc == 0, out
    record = node_records(ctl, [a100])[a100]
    assert "DRAIN" not in record["State"] and not record["Reason"], (record, out)
    for host in hosts:
        host.check_output("rm -rf %s" % TREE)


# ---- monthly -----------------------------------------------------------------------------------------------------

def _iso(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)


def test_monthly_waits_for_the_job_and_resumes_only_the_nodes_that_pass(scenario, ctl, nodes, tmp_path):
    a100, h100 = nodes
    set_faults(scenario, h100, DCGM_FAIL)
    job = ctl.check_output("sbatch --parsable -w %s -o /dev/null --time=5 --wrap='sleep 30'" % a100).strip()
    deadline = time.monotonic() + 30
    while ctl.check_output("squeue -h -j %s -o %%T" % job).strip() != "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    assert ctl.check_output("squeue -h -j %s -o %%T" % job).strip() == "RUNNING"
    monthly = {"maintenance_batch": 1, "maintenance_drain_deadline": "3m", "maintenance_reservation_duration": "1h"}
    head = scenario.host(scenario.controller)
    started = datetime.now(timezone.utc).replace(microsecond=0)

    with Watcher(scenario) as watched:
        rc, out, report_dir = run(scenario, tmp_path, MONTHLY, "monthly", monthly)
    assert rc == 0, out
    # one maintenance reservation per batch of one node, none left
    assert sorted(r["Nodes"] for r in watched.seen.values()) == sorted(nodes), watched.seen
    for fields in watched.seen.values():
        assert {"MAINT", "IGNORE_JOBS"} <= set(fields["Flags"].split(",")), fields
    assert not reservations(ctl)
    # the A100 node was drained while its job still ran, and the job ended by itself before the node was checked
    assert any("DRAIN" in s[a100][0] and s[a100][0].split("+")[0] in ("ALLOCATED", "MIXED") for s in watched.states), (
        watched.states)
    sacct = ctl.check_output("sacct -n -X -P -j %s -o State,End" % job).strip().split("|")
    assert sacct[0] == "COMPLETED", sacct
    report = load(report_dir)
    checked = report["nodes"][a100]["checked_at"]
    assert _iso(sacct[1]) <= datetime.strptime(checked, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc), (
        sacct, checked)
    # the deep level ran on both; the A100 node passed and is back, the H100 node stays drained with its codes
    assert report["nodes"][a100]["level"] == "deep" and report["nodes"][h100]["level"] == "deep"
    assert not [f for f in report["nodes"][a100]["findings"] if f["severity"] in ("error", "unknown")]
    assert "DCGM-DIAG-FAIL" in [f["code"] for f in report["nodes"][h100]["findings"] if f["severity"] == "error"]
    assert report["options"]["outcomes"] == {a100: "passed", h100: "failed"}, report["options"]
    after = states(ctl, scenario)
    assert after[a100][0] == "IDLE" and not after[a100][1], after
    assert "DRAIN" in after[h100][0], after
    assert after[h100][1].startswith("gpucluster-maintenance: monthly deep checks failed: DCGM-DIAG-FAIL gpu2"), after
    # Each node's alerts were silenced in Alertmanager (its node label) while the batch worked on it, the silence
    # saying who and why, and expired when the batch settled: the node resumed and the node kept drained alike.
    for node in nodes:
        made = alerting.node_silences(head, "maintenance", node, started)
        assert len(made) == 1 and made[0]["status"]["state"] == "expired", made
        assert "gpucluster.ops maintenance run by " in made[0]["comment"], made
        assert "monthly deep checks (gpucluster-maint-" in made[0]["comment"], made
        checked = datetime.strptime(report["nodes"][node]["checked_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert alerting.when(made[0]["startsAt"]).replace(microsecond=0) <= checked <= alerting.when(made[0]["endsAt"]), made
    assert out.count("silenced the alerts of") == 2 and out.count("expired the silences of") == 2, out

    # --check: no reservation, no drain, no deep check, no report, at any time during the run
    with Watcher(scenario) as watched:
        rc, out, report_dir = run(scenario, tmp_path, MONTHLY, "check", monthly, args=["--check"])
    assert rc == 0, out
    assert not watched.seen, watched.seen
    assert all(seen == after for seen in watched.states), watched.states
    assert not report_dir.exists()
    assert "%s: check_mode" % a100 in out and "%s: check_mode" % h100 in out, out
    # and no silence: it says which it would make
    assert out.count("would silence the alerts of") == 2, out
    assert [s for s in alerting.silences(head) if alerting.when(s["startsAt"]) >= started
            and s["status"]["state"] != "expired"] == []


def test_monthly_bad_input_fails_before_anything_changes(scenario, ctl, tmp_path):
    before = states(ctl, scenario)
    rc, out, report_dir = run(scenario, tmp_path, MONTHLY, "bad", {"maintenance_batch": 0})
    assert rc != 0
    assert "maintenance_batch is 0: it must be a whole number of nodes" in out, out
    assert states(ctl, scenario) == before and not reservations(ctl) and not report_dir.exists()


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"
