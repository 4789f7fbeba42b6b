"""playbooks/rolling_upgrade.yml on Debian 12, where the GPU nodes (declared NVSwitch) took driver 550.54.15 with its
fabric manager and NSCQ from NVIDIA's repository through the site mirror on the head node (the repository twin,
group_vars/debian12.yml): the operator moves the pin to 550.90.07, the next version of the branch, reruns
playbooks/mirror.yml (the new version joins the mirror, the old one stays for the rollback) and upgrades. A real
package upgrade of driver and fabric manager together, which the simulator then reports (it reads the installed
libnvidia-ml1). Three compute nodes (the spare is the third), one node per batch: the canary runs
a job that the drain waits for (it ends COMPLETED, and the packages change only after it ended), is upgraded,
checked against the new version and resumed; the second batch's node keeps reporting the old driver (a simulated
upgrade that did not take), so it fails the check, stays drained with the reason, and the run stops with the third
node untouched. --check shows the plan and changes nothing; the same playbook with the old version rolls the failed
node back."""

import json
import os
import re
import time

import pytest

from conftest import ROOT, node_records, set_faults, slurm_nodes, spare_inventory

pytestmark = pytest.mark.release("debian12")
SPARE_IN_SLURM = True

OLD, NEW = "550.54.15", "550.90.07"
DRIVER_PACKAGE = "libnvidia-ml1"
FABRIC_MANAGER = "nvidia-fabricmanager-550"


def _installed(scenario, host):
    """The driver's package version, which the fabric manager's must equal."""
    driver = scenario.host(host).check_output("dpkg-query -W -f '${Version}' %s" % DRIVER_PACKAGE)
    fabric_manager = scenario.host(host).check_output("dpkg-query -W -f '${Version}' %s" % FABRIC_MANAGER)
    assert fabric_manager == driver, (host, driver, fabric_manager)
    return driver


def _records(ctl, hosts, timeout=20):
    """node_records once Slurm has heard from every node again: right after a resume, slurmctld shows the node
    IDLE+NOT_RESPONDING until its next contact (within a second or two on this cluster)."""
    deadline = time.monotonic() + timeout
    records = node_records(ctl, hosts)
    while any("NOT_RESPONDING" in r["State"] for r in records.values()) and time.monotonic() < deadline:
        time.sleep(1)
        records = node_records(ctl, hosts)
    return records


def _reported(scenario, host):
    return scenario.host(host).check_output(
        "/opt/gpusim/bin/nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u")


def _upgrade(scenario, tmp_path, version, args=(), limit=None, **extra):
    extra_vars = dict({"nvidia_driver_version": version, "rolling_upgrade_confirm": False,
                       "rolling_upgrade_max_unavailable": 1, "rolling_upgrade_drain_deadline": "5m",
                       "health_sweep_report_dir": str(tmp_path / "reports")}, **extra)
    return scenario.playbook(tmp_path, os.path.join(ROOT, "playbooks", "rolling_upgrade.yml"), extra_inventory=spare_inventory(scenario),
                             extra_vars=extra_vars, args=args, limit=limit)


@pytest.fixture(scope="module")
def nodes(scenario, ctl, spare_added, tmp_path_factory):
    """The three compute nodes in the playbook's order, every one at the old version (a kept cluster may have
    been upgraded by an earlier run of this module: it is put back with the playbook first)."""
    hosts = sorted(scenario.compute + [spare_added])
    assert slurm_nodes(ctl) == hosts
    # the new pin joins the site mirror first (what the mirror held stays: the rollback needs it)
    rc, out = scenario.playbook(tmp_path_factory.mktemp("mirror"), os.path.join(ROOT, "playbooks", "mirror.yml"),
                                extra_inventory=spare_inventory(scenario),
                                extra_vars={"nvidia_driver_version": NEW, "mirror_nodes": "gpu_nodes"})
    assert rc == 0, out
    held = scenario.host(scenario.controller).check_output("ls /srv/gpucluster-mirror/cuda/debian12/x86_64")
    assert "%s_%s-1_amd64.deb" % (FABRIC_MANAGER, OLD) in held and "%s_%s-1_amd64.deb" % (FABRIC_MANAGER, NEW) in held
    if any(not _installed(scenario, h).startswith(OLD + "-") for h in hosts):
        rc, out = _upgrade(scenario, tmp_path_factory.mktemp("back"), OLD, rolling_upgrade_canary=False,
                           rolling_upgrade_serial="100%", rolling_upgrade_max_unavailable="100%")
        assert rc == 0, out
    return hosts


def test_check_mode_shows_the_plan_and_changes_nothing(scenario, ctl, nodes, tmp_path):
    canary, second, third = nodes
    before = {h: _installed(scenario, h) for h in nodes}
    rc, out = _upgrade(scenario, tmp_path, NEW, args=["--check"])
    assert rc == 0, out
    for number, host in enumerate(nodes, 1):
        canary_note = r" \(canary\)" if number == 1 else ""
        pattern = r"batch %d%s: %s \{\"driver\": \"%s\"" % (number, canary_note, re.escape(host), re.escape(OLD))
        assert re.search(pattern, out), out
    assert '"targets": {"driver": "%s"}' % NEW in out or "driver: %s" % NEW in out, out
    assert {h: _installed(scenario, h) for h in nodes} == before
    assert all(r["State"] == "IDLE" for r in node_records(ctl, nodes).values())
    assert not (tmp_path / "reports").exists()


def test_a_run_that_would_upgrade_no_node_fails_saying_why(scenario, ctl, nodes, tmp_path):
    """Issue 44: a run whose every node was refused or not ours exited 0. Every node out of service for an
    administrator: --check says it would upgrade none, counts them per outcome, and fails."""
    for host in nodes:
        ctl.check_output("scontrol update nodename=%s state=drain reason='admin: rack work'" % host)
    try:
        rc, out = _upgrade(scenario, tmp_path, NEW, args=["--check"])
    finally:
        for host in nodes:
            ctl.check_output("scontrol update nodename=%s state=resume" % host)
    assert rc != 0 and "the rolling upgrade would upgrade no node of 3" in out and "3 not_ours" in out, out[-4000:]


def test_rolling_upgrade_waits_for_the_job_upgrades_and_stops_at_the_failed_batch(scenario, ctl, nodes, tmp_path):
    canary, second, third = nodes
    assert _reported(scenario, canary) == OLD
    # the canary runs a job the drain must wait for (long enough to outlast the preflight and one poll of the wait)
    job = ctl.check_output("sbatch --parsable --nodelist=%s --gres=gpu:1 --time=2 -o /dev/null --wrap 'sleep 40'"
                           % canary).split(";")[0]
    deadline = time.monotonic() + 60
    while ctl.check_output("squeue -h -j %s -o %%T" % job) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    # the second batch's upgrade "does not take": its GPUs go on reporting the old driver
    set_faults(scenario, second, [{"name": "driver_version", "value": OLD}])

    rc, out = _upgrade(scenario, tmp_path, NEW)
    assert rc != 0, out
    assert "the rolling upgrade failed on %s and stopped after batch 2" % second in out, out
    report = json.loads((tmp_path / "reports" / "rolling-upgrade.json").read_text())
    summary = report["nodes"]
    assert report["stopped_after_batch"] in (2, "2")
    assert {h: summary[h]["outcome"] for h in nodes} == {canary: "done", second: "failed", third: "untouched"}
    # the wait for the canary's job printed progress (an async poll: every 15 s at this 5m deadline, every minute
    # from 20m on), and the summary's columns are labelled
    flat = " ".join(out.replace("''", "'").split())
    assert "ASYNC POLL on" in out, out
    assert "%s: batch 1, outcome done, before {" % canary in flat, out

    # the job ran to its end, and the canary's packages changed only after it
    assert ctl.check_output("sacct -n -X -P -j %s -o State" % job) == "COMPLETED"
    ended = ctl.check_output("sacct -n -X -P -j %s -o End" % job).replace("T", " ")
    installed_at = scenario.host(canary).check_output(
        "grep ' status installed %s:' /var/log/dpkg.log | tail -n 1 | cut -c1-19" % DRIVER_PACKAGE)
    assert installed_at >= ended, (installed_at, ended)

    # the canary: new package, the simulator reports it, the reboot a container cannot do was detected, resumed
    assert _installed(scenario, canary).startswith(NEW + "-")
    assert _reported(scenario, canary) == NEW
    assert summary[canary]["before"]["driver"] == OLD and summary[canary]["after"]["driver"] == NEW
    assert summary[canary]["reboot"] and "reboot needed" in summary[canary]["reboot"]
    assert "container" in summary[canary]["reboot"]
    records = _records(ctl, nodes)
    assert records[canary]["State"] == "IDLE", records[canary]

    # the second: upgraded on disk, failed the check, drained by the upgrade with the code
    assert _installed(scenario, second).startswith(NEW + "-")
    assert "DRAIN" in records[second]["State"], records[second]
    assert records[second]["Reason"].startswith("gpucluster-upgrade:"), records[second]
    assert "GPU-DRIVER-VERSION" in records[second]["Reason"], records[second]
    assert summary[second]["after"]["driver"] == NEW

    # the third: untouched (never drained, old package)
    assert _installed(scenario, third).startswith(OLD + "-")
    assert records[third]["State"] == "IDLE" and not records[third]["Reason"], records[third]
    assert summary[third]["after"] is None and "stopped after batch 2" in summary[third]["note"]


def test_the_same_playbook_with_the_old_version_rolls_the_failed_node_back(scenario, ctl, nodes, tmp_path):
    second = nodes[1]
    assert "DRAIN" in node_records(ctl, [second])[second]["State"]
    rc, out = _upgrade(scenario, tmp_path, OLD, limit=[second])
    assert rc == 0, out
    assert _installed(scenario, second).startswith(OLD + "-")
    record = _records(ctl, [second])[second]
    assert record["State"] == "IDLE" and not record["Reason"], record
    summary = json.loads((tmp_path / "reports" / "rolling-upgrade.json").read_text())["nodes"]
    assert summary == {second: dict(summary[second], outcome="done", batch=1)}
    assert summary[second]["before"]["driver"] == NEW and summary[second]["after"]["driver"] == OLD
