"""Fault 3 (issue 23): slurmdbd is down for a while. Jobs still start, run and finish (slurmctld queues their
accounting records); sacct cannot answer meanwhile; once slurmdbd is back, accounting catches up (every job there,
once) and the teams' quotas are enforced as before (a job over development's GPU limit is refused).

Debian 12 only: slurmctld's accounting queue is the same mechanism on 22.05 and 24.11; it moved off Debian 13's
longer chain.
"""

import time

import pytest

import faults

pytestmark = pytest.mark.release("debian12")

FAULT_TEST = True
DOWN_S = 25


def test_jobs_run_without_slurmdbd_and_accounting_catches_up(scenario, ctl):
    db = scenario.host(scenario.database)
    db.check_output("systemctl stop slurmdbd")
    stopped_at = time.monotonic()
    try:
        jobs = [faults.sbatch(ctl, user, "--time=10 --gpus=1", "sleep 5") for user in ("alice", "bob")]
        for job in jobs:
            faults.wait_for("job %s completed without slurmdbd" % job, faults.job_in(ctl, job, "COMPLETED"), 120)
        during = faults.sacct_rows(ctl, jobs)
        time.sleep(max(0, DOWN_S - (time.monotonic() - stopped_at)))     # down for a while, not only for the jobs
        down_for = time.monotonic() - stopped_at
    finally:
        db.check_output("systemctl start slurmdbd")
    # sacct reads slurmdbd: while it is down it fails (None) rather than showing the jobs
    assert during is None or sorted(r[:2] for r in during) != sorted((j, "COMPLETED") for j in jobs), during
    rows = []

    def accounted():
        rows[:] = faults.sacct_rows(ctl, jobs) or []
        return sorted(r[:2] for r in rows) == sorted((j, "COMPLETED") for j in jobs), rows
    caught_up = faults.wait_for("accounting caught up", accounted, 180)
    refused = ctl.run("su bob -c \"sbatch --parsable --chdir=/tmp -o /dev/null --time=10 --gpus=9 --wrap='sleep 1'\"")
    assert refused.rc != 0 and "QOSGrpGRES" in refused.stdout + refused.stderr, (refused.stdout, refused.stderr)
    faults.report(
        "slurmdbd down",
        "stopped slurmdbd on %s for %.0f s while jobs %s ran" % (scenario.database, down_for, ", ".join(jobs)),
        ["both jobs COMPLETED with slurmdbd down; sacct then said: %r" % (during,),
         "%.0f s after slurmdbd was started: sacct %s, each once" % (caught_up, rows),
         "bob's 9-GPU job refused again by development's limit: %s" % refused.stderr.strip()])
