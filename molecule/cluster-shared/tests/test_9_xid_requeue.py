"""A job that survives its GPU (docs/xid-watch.md): the health_check role's Xid watcher follows the simulated kernel log
(the file the checker reads here, the journal on metal); an Xid 79 on GPU 1 of a node under a running gpu-job drains
the node at once (through the health check's Slurm wrapper and its breaker) and requeues that job, which completes on
the other A100 node; a job on GPU 5 of the same node finishes where it was; sacct keeps both runs of the requeued
job. A restart of the watcher does not act on the line again.

The spare node (an A100 node like the first) is in Slurm for this module: test_8_add_node.py added it just before, so
the reset between the modules keeps it (SPARE_IN_SLURM). Debian 13 only: gpu-job's container runtime is there.
"""

import json
import re
import shlex
import time

import pytest

from conftest import _wait, node_records, set_faults
from gpu_jobs import IMAGE, allocated, as_user, job_id, load_image, sacct

pytestmark = pytest.mark.release("debian13")
SPARE_IN_SLURM = True

STATE = "/var/lib/gpucluster-health/xid-watch.json"
PIN = "operator: test_9 starts its jobs on one node"


@pytest.fixture(scope="module")
def nodes(scenario, ctl, spare_added):
    """(the node whose GPU fails, the other A100 node the job moves to), the test image on both for alice."""
    first = scenario.groups["gpu_a100"][0]
    assert first in scenario.compute and spare_added != first
    load_image(scenario, ctl, [first, spare_added])
    return first, spare_added


def job_field(ctl, job, field):
    out = ctl.check_output("scontrol -o show job %s" % job)
    found = re.search(r"(?:^| )%s=(.*?)(?= [A-Za-z/:_]+=|$)" % field, out)
    return found.group(1) if found else None


def watcher_actions(scenario, host):
    return json.loads(scenario.host(host).check_output("cat %s" % STATE))["actions"]


def test_an_xid_79_requeues_the_job_on_that_gpu_and_only_that_job(scenario, ctl, nodes):
    first, spare = nodes
    others = sorted(set(scenario.compute + [spare]) - {first})
    before = len(watcher_actions(scenario, first))
    # the jobs start on the first node: an operator holds the others for a moment
    ctl.check_output("scontrol update nodename=%s state=drain reason=%s" % (",".join(others), shlex.quote(PIN)))
    survivor = job_id(as_user(ctl, "alice", "gpu-job submit --name survivor --gpus 2 --gpu-type a100 --image %s "
                                            "--time 5m --command 'sleep 15'" % IMAGE))
    _wait("job %s running" % survivor, lambda: (sacct(ctl, survivor, "State")[:1] == ["RUNNING"],
                                                sacct(ctl, survivor, "State")))
    out = as_user(ctl, "alice", "cd /tmp && sbatch --parsable -A research -q research -p dev -w %s "
                  "--gpus-per-node=a100:4 --time=5 -o /dev/null --wrap 'sleep 40'" % first)
    assert out.rc == 0, out.stdout + out.stderr
    neighbour = out.stdout.strip().split(";")[0]
    _wait("job %s running" % neighbour, lambda: (sacct(ctl, neighbour, "State")[:1] == ["RUNNING"],
                                                 sacct(ctl, neighbour, "State")))
    # gres.conf's File= order is the minor number and nvidia-smi's index here: GRES index n is GPU n
    assert allocated(ctl, survivor) == [0, 1] and allocated(ctl, neighbour) == [2, 3, 4, 5]
    ctl.check_output("scontrol update nodename=%s state=resume" % ",".join(others))

    set_faults(scenario, first, [{"name": "xid_error", "gpu": 1, "value": 79}])
    _wait("%s drained" % first, lambda: ("DRAIN" in node_records(ctl, [first])[first]["State"],
                                         node_records(ctl, [first])[first]), timeout=60)
    assert "GPU-FALLEN-OFF-BUS gpu1" in node_records(ctl, [first])[first]["Reason"]
    _wait("job %s requeued" % survivor, lambda: (job_field(ctl, survivor, "Restarts") == "1",
                                                 job_field(ctl, survivor, "JobState")), timeout=60)
    comment = job_field(ctl, survivor, "Comment")
    assert comment.startswith("gpucluster-xid-watch: requeued at ") and "GPU index 1 " in comment, comment
    assert "of %s failed (GPU-FALLEN-OFF-BUS)" % first in comment, comment

    # a restart of the watcher reads on from where it stopped: the line is not acted on again
    scenario.host(first).check_output("systemctl restart gpucluster-xid-watch")
    time.sleep(3)
    actions = watcher_actions(scenario, first)
    assert len(actions) == before + 1, actions
    assert actions[-1]["requeued"] == [survivor] and actions[-1]["drained"], actions[-1]

    # Slurm holds a requeued job for its requeue delay (about 30 s), then it runs on the other A100 node
    _wait("job %s completed" % survivor, lambda: (sacct(ctl, survivor, "State")[:1] == ["COMPLETED"],
                                                  sacct(ctl, survivor, "State")), timeout=150)
    _wait("job %s completed" % neighbour, lambda: (sacct(ctl, neighbour, "State")[:1] == ["COMPLETED"],
                                                   sacct(ctl, neighbour, "State")), timeout=60)
    runs = ctl.check_output("sacct -n -P -X -D -j %s -o State,NodeList,ExitCode" % survivor).split()
    assert runs == ["REQUEUED|%s|0:0" % first, "COMPLETED|%s|0:0" % spare], runs
    assert ctl.check_output("sacct -n -P -X -D -j %s -o State,NodeList,ExitCode" % neighbour).split() == [
        "COMPLETED|%s|0:0" % first]
    assert job_field(ctl, neighbour, "Restarts") in ("0", None)
