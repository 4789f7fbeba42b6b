"""Fault 1 (issue 23): the primary slurmctld dies. Its container (the head: slurmctld and the login node) is
stopped while a job runs; the backup controller (deb13-cluster-head2, the same StateSaveLocation on /srv/shared)
takes over within slurm_slurmctld_timeout, the running job completes, a job submitted through the backup runs;
the head boots again, the primary takes control back, and accounting holds both jobs, once each.

Debian 13 only: the backup controller is in that cluster (docs/failover.md).
"""

import time

import pytest

import faults

pytestmark = pytest.mark.release("debian13")
FAULT_TEST = True


@pytest.fixture(scope="module")
def controllers(scenario):
    assert len(scenario.controllers) == 2, scenario.controllers
    return scenario.controllers


def _ping(host):
    """{controller name: UP/DOWN} from `scontrol ping` on host."""
    out = host.run("scontrol ping")
    seen = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if "at" in words and line.rstrip().endswith(("UP", "DOWN")):
            seen[words[words.index("at") + 1]] = words[-1]
    return seen


def test_both_controllers_run_from_one_configuration(scenario, controllers):
    primary, backup = (scenario.host(name) for name in controllers)
    lines = [line for line in primary.check_output("cat /etc/slurm/slurm.conf").splitlines()
             if line.startswith("SlurmctldHost=")]
    assert lines == ["SlurmctldHost=%s" % name for name in controllers], lines
    assert primary.check_output("sha256sum /etc/slurm/slurm.conf").split()[0] == \
        backup.check_output("sha256sum /etc/slurm/slurm.conf").split()[0]
    assert _ping(primary) == {controllers[0]: "UP", controllers[1]: "UP"}
    # the one state directory: what the primary's slurmctld saved there is what the backup sees
    state = scenario.group_vars["debian13"]["slurm_state_save_location"]
    listing = "cd %s && ls job_state node_state && stat -c %%u job_state" % state
    assert primary.check_output(listing) == backup.check_output(listing)


def test_the_backup_takes_over_and_no_job_is_lost(scenario, controllers):
    primary_name, backup_name = controllers
    primary, backup = scenario.host(primary_name), scenario.host(backup_name)
    timeout = scenario.group_vars["debian13"]["slurm_slurmctld_timeout"]
    assert scenario.database != primary_name        # slurmdbd must outlive the primary (docs/failover.md)
    before = faults.sbatch(primary, "alice", "--time=10 --gpus=1", "sleep 45")
    faults.wait_for("the job submitted before the fault running", faults.job_in(primary, before, "RUNNING"), 60)

    faults.stop(primary_name)
    stopped = time.strftime("%H:%M:%S")
    try:
        # The backup answers for the cluster once it took over, with the job it recovered from the shared state.
        # It decides after SlurmctldTimeout without the primary (twice: the first time it cannot tell yet), then
        # starts as the controller in control. Every client call here also pays for the dead head's name, which
        # docker's DNS no longer resolves (Slurm retries the lookup for 10 s), so the backup's own log times it, and
        # a probe makes one call (scontrol ping only if the wait fails).
        probe = faults.job_in(backup, before, "RUNNING", "COMPLETED")

        def in_control():
            ok, record = probe()
            return ok, lambda: (_ping(backup), record)
        took = faults.wait_for("the backup controller in control", in_control, 3 * timeout + 90)
        after = faults.sbatch(backup, "alice", "--time=10 --gpus=1", "sleep 5")
        for job in (before, after):
            faults.wait_for("job %s completed under the backup" % job, faults.job_in(backup, job, "COMPLETED"), 120)
        log = backup.check_output("grep -E 'taking over|Running as primary' /var/log/slurm/slurmctld.log | tail -n 2")
    finally:
        faults.start(scenario, primary_name)
    returned = faults.wait_for("the primary back in control",
                               lambda: (_ping(backup) == {primary_name: "UP", backup_name: "UP"}
                                        and primary.run("squeue -h").rc == 0, _ping(backup)), 180)
    rows = []

    def accounted():
        rows[:] = faults.sacct_rows(primary, [before, after]) or []
        # both sides sorted alike: job ids are strings, and "10" sorts before "9"
        return sorted(r[:2] for r in rows) == sorted([(before, "COMPLETED"), (after, "COMPLETED")]), rows
    caught_up = faults.wait_for("both jobs in accounting, once each", accounted, 180)
    assert primary.run("squeue -h").stdout.strip() == ""
    faults.report(
        "primary slurmctld lost",
        "stopped the container of %s (the primary slurmctld, the login node) at %s while job %s ran; started it "
        "again after both jobs completed" % (primary_name, stopped, before),
        ["backup %s answered with the job %.0f s after the stop (SlurmctldTimeout=%d); its log: %s"
         % (backup_name, took, timeout, " / ".join(log.splitlines())),
         "job %s (submitted before the fault) and job %s (submitted to the backup) COMPLETED" % (before, after),
         "the primary was back in control %.0f s after its boot" % returned,
         "sacct on the primary: %s, each once, %.0f s later" % (rows, caught_up)])


def test_a_planned_hand_over_with_scontrol_takeover(scenario, controllers):
    """docs/failover.md's planned hand-over: scontrol takeover, then the primary's slurmctld started again."""
    primary_name, backup_name = controllers
    primary, backup = scenario.host(primary_name), scenario.host(backup_name)
    faults.ensure_running(scenario)
    primary.check_output("scontrol takeover")
    handed = faults.wait_for("the backup in control, the primary's slurmctld stopped",
                             lambda: (_ping(backup) == {primary_name: "DOWN", backup_name: "UP"}
                                      and backup.run("squeue -h").rc == 0, _ping(backup)), 60)
    job = faults.sbatch(backup, "alice", "--time=10 --gpus=1", "sleep 1")
    primary.check_output("systemctl start slurmctld")
    back = faults.wait_for("both controllers up", lambda: (_ping(backup) == {primary_name: "UP", backup_name: "UP"},
                                                           _ping(backup)), 90)
    # the primary in control: the cluster answers with the backup's slurmctld stopped
    backup.check_output("systemctl stop slurmctld")
    try:
        faults.wait_for("job %s completed under the primary" % job, faults.job_in(primary, job, "COMPLETED"), 90)
    finally:
        backup.check_output("systemctl start slurmctld")
    faults.report("planned hand-over", "scontrol takeover on %s; slurmctld started again there" % primary_name,
                  ["the backup in control and the primary's slurmctld stopped %.0f s later" % handed,
                   "both up %.0f s after the primary's start; with the backup's slurmctld stopped the primary ran "
                   "job %s to completion" % (back, job)])
