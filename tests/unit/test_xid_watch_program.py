"""bin/gpucluster-xid-watch run as the program it is, with a fake Slurm and a fake health wrapper: a fatal Xid drains
the node and requeues the job on that GPU only (its comment says why), a job that does not allow a requeue is told,
nothing is requeued while the node stays in service, and a second run does not act on the same line again."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WATCH = os.path.join(ROOT, "bin", "gpucluster-xid-watch")
NODE = "gpu01"
XID79 = ("2026-12-07T08:40:01+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:0f:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")
# Real `scontrol -o -d show job` lines of Slurm 24.11 (the test cluster's), shortened.
JOB = ("JobId=%(id)s JobName=wrap UserId=alice(2001) GroupId=alice(2001) Account=research QOS=research "
       "JobState=%(state)s Reason=None Dependency=(null) Requeue=%(requeue)s Restarts=0 BatchFlag=1 Reboot=0 "
       "ExitCode=0:0 StartTime=2026-12-07T08:19:09 EndTime=2026-12-07T08:24:09 NodeList=gpu01 BatchHost=gpu01 "
       "JOB_GRES=gpu:a100:2   Nodes=gpu01 CPU_IDs=0 Mem=512 GRES=gpu:a100:%(n)d(IDX:%(idx)s) MinCPUsNode=1 "
       "Comment=(null) WorkDir=/tmp")
JOBS = {"3": {"id": "3", "state": "RUNNING", "requeue": 1, "n": 2, "idx": "0-1"},
        "4": {"id": "4", "state": "RUNNING", "requeue": 1, "n": 4, "idx": "2-5"},
        "5": {"id": "5", "state": "RUNNING", "requeue": 0, "n": 1, "idx": "1"}}

FAKE = r'''#!%(python)s
import json, os, sys
base = os.environ["FAKE_DIR"]
with open(os.path.join(base, "calls.log"), "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
state = json.load(open(os.path.join(base, "slurm.json")))
prog, args = os.path.basename(sys.argv[0]), sys.argv[1:]
if prog == "squeue":
    print("\n".join(sorted(state["jobs"])))
elif prog == "health":
    if state["drain"]:
        state["node_state"] = "MIXED+DRAIN"
        json.dump(state, open(os.path.join(base, "slurm.json"), "w"))
    sys.stderr.write("slurm: drain gpu01: gpucluster-health: GPU-FALLEN-OFF-BUS gpu1\n")
    sys.exit(2)
elif args[:2] == ["show", "node"]:
    print("NodeName=gpu01 Arch=x86_64 State=%%s Reason=x [root@2026-12-07T08:40:02]" %% state["node_state"])
elif args[:4] == ["-o", "-d", "show", "job"]:
    print(state["jobs"][args[4]])
elif args[0] == "requeue" and os.environ.get("FAIL_REQUEUE"):
    sys.exit("scontrol: error: Job is in transition state")
elif args[0] in ("update", "requeue"):
    pass
else:
    sys.exit("fake: unknown call %%r" %% args)
'''


def setup(tmp_path, drain=True):
    for name in ("squeue", "scontrol", "health"):
        path = tmp_path / name
        path.write_text(FAKE % {"python": sys.executable})
        path.chmod(0o755)
    (tmp_path / "slurm.json").write_text(json.dumps({
        "drain": drain, "node_state": "MIXED", "jobs": {k: JOB % v for k, v in JOBS.items()}}))
    (tmp_path / "gres.conf").write_text("NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia[0-7]\n")
    (tmp_path / "kern.log").write_text("2026-12-07T07:00:00+00:00 gpu01 kernel: NVRM: loading NVIDIA UNIX\n")
    (tmp_path / "slurm-last.json").write_text(json.dumps({"gpus": [
        {"index": i, "minor_number": i, "bus_id": "00000000:%02X:00.0" % bus} for i, bus in enumerate((7, 15))]}))
    (tmp_path / "health.json").write_text(json.dumps({
        "node": NODE, "sources": {"kernel_log": "file:%s" % (tmp_path / "kern.log")},
        "state_file": str(tmp_path / "state.json")}))


def watch(tmp_path, *extra, env=None):
    argv = [sys.executable, WATCH, "--config", str(tmp_path / "health.json"), "--once",
            "--health-program", str(tmp_path / "health"), "--gres-conf", str(tmp_path / "gres.conf"),
            "--scontrol", str(tmp_path / "scontrol"), "--squeue", str(tmp_path / "squeue")] + list(extra)
    done = subprocess.run(argv, env=dict(os.environ, FAKE_DIR=str(tmp_path), **(env or {})), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def calls(tmp_path):
    path = tmp_path / "calls.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def state(tmp_path):
    return json.loads((tmp_path / "xid-watch.json").read_text())


def test_a_fatal_xid_drains_and_requeues_the_job_on_that_gpu_only(tmp_path):
    setup(tmp_path)
    assert "from its end" in watch(tmp_path)          # first run: the position is the end, nothing acted on
    assert calls(tmp_path) == []
    with open(tmp_path / "kern.log", "a") as handle:
        handle.write(XID79)
    out = watch(tmp_path)
    made = calls(tmp_path)
    assert made[0] == ["health"]
    requeues = [c for c in made if c[:2] == ["scontrol", "requeue"]]
    assert requeues == [["scontrol", "requeue", "3"]], made
    comments = {c[2]: c[3] for c in made if c[:2] == ["scontrol", "update"]}
    assert sorted(comments) == ["jobid=3", "jobid=5"], made
    assert comments["jobid=3"].startswith("comment=gpucluster-xid-watch: requeued at ")
    assert "GPU index 1 (00000000:0F:00.0, /dev/nvidia1) of gpu01 failed (GPU-FALLEN-OFF-BUS)" in comments["jobid=3"]
    assert "not requeued (it was submitted with --no-requeue)" in comments["jobid=5"]
    assert "job 3 (alice): requeued" in out
    action = state(tmp_path)["actions"][-1]
    assert action["drained"] and action["requeued"] == ["3"] and action["told"] == ["5"], action
    assert oct(os.stat(tmp_path / "xid-watch.json").st_mode & 0o777) == "0o600"
    # run again: the line is behind the saved position
    before = len(calls(tmp_path))
    watch(tmp_path)
    assert len(calls(tmp_path)) == before and len(state(tmp_path)["actions"]) == 1


def test_nothing_is_requeued_while_the_node_stays_in_service(tmp_path):
    setup(tmp_path, drain=False)            # the breaker refused the drain
    watch(tmp_path)
    with open(tmp_path / "kern.log", "a") as handle:
        handle.write(XID79)
    out = watch(tmp_path)
    assert "still in service" in out
    assert not [c for c in calls(tmp_path) if c[:2] in (["scontrol", "requeue"], ["scontrol", "update"])]
    assert state(tmp_path)["actions"][-1]["drained"] is False


def test_no_requeue_tells_the_jobs_only(tmp_path):
    setup(tmp_path)
    watch(tmp_path, "--no-requeue")
    with open(tmp_path / "kern.log", "a") as handle:
        handle.write(XID79)
    watch(tmp_path, "--no-requeue")
    made = calls(tmp_path)
    assert not [c for c in made if c[:2] == ["scontrol", "requeue"]]
    assert [c[2] for c in made if c[:2] == ["scontrol", "update"]] == ["jobid=3", "jobid=5"]


def test_a_failed_requeue_is_said_in_the_comment_not_hidden(tmp_path):
    setup(tmp_path)
    watch(tmp_path)
    with open(tmp_path / "kern.log", "a") as handle:
        handle.write(XID79)
    out = watch(tmp_path, env={"FAIL_REQUEUE": "1"})
    comments = {c[2]: c[3] for c in calls(tmp_path) if c[:2] == ["scontrol", "update"]}
    assert "not requeued (scontrol requeue: scontrol: error: Job is in transition state)" in comments["jobid=3"]
    action = state(tmp_path)["actions"][-1]
    assert action["requeued"] == [] and action["told"] == ["3", "5"] and action["problems"], action
    assert "job 3 (alice): not requeued" in out
