"""Fault 2 (issue 23): a compute node dies while it runs a requeueable batch job. Its container is killed (a power
loss: faults.kill, so that nothing on it stops in order and its health check cannot drain it on the way down); slurmctld
sets it DOWN ("Not responding") after slurm_slurmd_timeout and requeues the job (JobRequeue=1), which runs again
from its start on the other node once its last credential expired (AuthInfo's cred_expire: 30 s in the scenario's
group_vars/all.yml, 120 s by default) and completes. An operator drains the dead node before it returns (docs/failover.md:
ReturnToService=2 would otherwise put it back in service at its first registration); once it is back, the health
check wrapper runs on it and leaves that drain alone, since it did not make it.

Debian 12 only (the same Slurm mechanism on both releases; one of the two pays the minutes, and Debian 13's cluster
has the longer chain of the two).
"""

import time

import pytest

import faults
from conftest import health_report, node_records

pytestmark = pytest.mark.release("debian12")
FAULT_TEST = True
OPERATOR_REASON = "operator: node died, inspect before use"


def test_a_job_on_a_dead_node_is_requeued_and_completes_elsewhere(scenario, ctl):
    timeout = scenario.group_vars[scenario.release]["slurm_slurmd_timeout"]
    interval = scenario.group_vars["all"]["slurm_health_check_interval"]
    # prints each start, so the rerun shows in its output (on the node it ran on)
    job = faults.sbatch(ctl, "alice", "--requeue --time=10 --gpus=1 --nodes=1",
                        "echo start $SLURM_RESTART_COUNT $(hostname); sleep 40; echo done", output="/tmp/requeue-%j.out")
    faults.wait_for("the job running", faults.job_in(ctl, job, "RUNNING"), 60)
    dead = faults.job_record(ctl, job)["NodeList"]
    assert dead in scenario.compute, dead
    other = [h for h in scenario.compute if h != dead][0]

    faults.kill(dead)

    def is_down():
        record = node_records(ctl, [dead])[dead]
        return "DOWN" in record["State"], record
    down = faults.wait_for("%s DOWN" % dead, is_down, timeout + 90)
    down_reason = node_records(ctl, [dead])[dead]["Reason"]
    assert down_reason.startswith("Not responding"), down_reason

    faults.wait_for("the job rerun on %s and completed" % other, faults.job_in(ctl, job, "COMPLETED"), 240)
    final = faults.job_record(ctl, job)
    assert final["NodeList"] == other and final["Restarts"] == "1", final
    output = scenario.host(other).check_output("cat /tmp/requeue-%s.out" % job)
    assert output.splitlines()[0] == "start 1 %s" % other and output.splitlines()[-1] == "done", output
    rows = faults.sacct_rows(ctl, [job])
    assert [r[1] for r in rows][-1] == "COMPLETED" and len(rows) == 2, rows

    # the operator's drain of the dead node, then the node back: it registers and stays drained
    ctl.check_output("scontrol update nodename=%s state=drain reason='%s'" % (dead, OPERATOR_REASON))
    faults.start(scenario, dead)
    report_file = "/var/lib/gpucluster-health/slurm-last.json"
    booted = time.monotonic()
    faults.wait_for("%s registered again" % dead,
                    lambda: ("NOT_RESPONDING" not in node_records(ctl, [dead])[dead]["State"]
                             and "DOWN" not in node_records(ctl, [dead])[dead]["State"]
                             and "*" not in ctl.check_output("sinfo -h -n %s -o %%T" % dead),
                             node_records(ctl, [dead])[dead]), 120)
    node = scenario.host(dead)
    runs, seen = 0, node.run("stat -c %%Y %s" % report_file).stdout
    while runs < 2 and time.monotonic() - booted < 4 * interval + 60:
        time.sleep(2)
        now = node.run("stat -c %%Y %s" % report_file).stdout
        if now != seen:
            runs, seen = runs + 1, now
    assert runs == 2, "the health check did not run twice on %s within %d s" % (dead, 4 * interval + 60)
    record = node_records(ctl, [dead])[dead]
    assert "DRAIN" in record["State"] and record["Reason"].startswith(OPERATOR_REASON), record
    assert health_report(scenario, dead)["status"] == "ok"
    faults.report(
        "compute node lost mid-job",
        "killed the container of %s while requeueable job %s ran there; drained it as an operator, started it" % (dead, job),
        ["%s DOWN with reason %r %.0f s after the stop (SlurmdTimeout=%d)" % (dead, down_reason, down, timeout),
         "job %s requeued, rerun from its start on %s (Restarts=1, its output: %r), COMPLETED" % (job, other, output),
         "sacct: %s" % rows,
         "back, %s registered and stayed %s (%r) through 2 health check runs that reported ok" % (
             dead, record["State"], record["Reason"])])
