#!/usr/bin/env python
"""Benchmark: from a fatal Xid line to the drain and to the requeue of the job on that GPU, on the kept test cluster.

Needs a kept Debian 13 or 12 cluster (`make cluster CLUSTER=deb13`); reaches its containers with `docker exec`. Each
run: a 2-GPU batch job (GRES indexes 0-1) starts on the first GPU node, then an Xid 79 on GPU 1 is written to the
node's simulated kernel log (the simulator rotates the log with the new line, as it does in the tests), and the
clock runs from that moment to the node seen drained and to the job seen requeued, polled through scontrol on the
controller. The floor is the probe's own latency (one scontrol
round trip through docker exec, measured in the same run); the watcher's own figures (its state file) are printed
beside. The target is 30 s from the line to the requeue. The figures are printed, never asserted: run it on a quiet
machine. Each run puts the node back (faults cleared, the health wrapper resumes it, the job cancelled).

    python3 bench/fault_to_requeue.py [--cluster deb13] [--runs 3]
"""

import argparse
import json
import shlex
import statistics
import subprocess
import time

TARGET_S = 30.0
FAULT = [{"name": "xid_error", "gpu": 1, "value": 79}]
SET_FAULTS = ("import json, sys\npath = '/etc/gpusim/profile.json'\nprofile = json.load(open(path))\n"
              "profile['faults'] = json.loads(sys.argv[1])\njson.dump(profile, open(path, 'w'), indent=2)\n")


def sh(container, command, check=True):
    done = subprocess.run(["docker", "exec", container, "sh", "-c", command], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if check and done.returncode != 0:
        raise SystemExit("%s: %s failed: %s" % (container, command, done.stderr.strip() or done.stdout.strip()))
    return done.stdout


def set_faults(node, faults):
    sh(node, "python3 -c %s %s && /opt/gpusim/bin/gpusim setup --profile /etc/gpusim/profile.json >/dev/null"
       % (shlex.quote(SET_FAULTS), shlex.quote(json.dumps(faults))))


def node_state(head, node):
    return sh(head, "scontrol -o show node %s" % node).split(" State=", 1)[1].split()[0]


def job_restarts(head, job):
    out = sh(head, "scontrol -o show job %s" % job)
    return int(out.split(" Restarts=", 1)[1].split()[0])


def until(probe, timeout=90.0, interval=0.1):
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if probe():
            return time.monotonic()
        time.sleep(interval)
    raise SystemExit("not within %d s" % timeout)


def one_run(head, first):
    job = sh(head, "su alice -c \"cd /tmp && sbatch --parsable -A research -q research -p dev -w %s "
                   "--gpus-per-node=2 --time=5 -o /dev/null --wrap 'sleep 300'\"" % first).strip().split(";")[0]
    until(lambda: " JobState=RUNNING " in sh(head, "scontrol -o show job %s" % job))
    try:
        began = time.monotonic()
        set_faults(first, FAULT)
        drained = until(lambda: "DRAIN" in node_state(head, first))
        requeued = until(lambda: job_restarts(head, job) >= 1)
        action = json.loads(sh(first, "cat /var/lib/gpucluster-health/xid-watch.json"))["actions"][-1]
    finally:
        sh(head, "scancel %s" % job, check=False)
        set_faults(first, [])
        sh(first, "/usr/local/sbin/gpucluster-health-slurm", check=False)
        until(lambda: "DRAIN" not in node_state(head, first), timeout=30)
    return drained - began, requeued - began, action


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="deb13")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    head, first = ("%s-cluster-%s" % (args.cluster, n) for n in ("head", "gpu01"))
    out = [line.split()[0] for line in sh(head, "sinfo -h -N -o '%N %t'").splitlines()
           if any(mark in line.split()[1] for mark in ("drain", "drng", "down", "fail"))]
    if out:
        raise SystemExit("out of service: %s; the breaker may refuse the drain: reset the cluster first (make "
                         "cluster-test runs the reset)" % ", ".join(sorted(set(out))))
    floor = []
    for _run in range(5):
        began = time.monotonic()
        node_state(head, first)
        floor.append(time.monotonic() - began)
    drains, requeues, watcher = [], [], []
    for number in range(args.runs):
        drain_s, requeue_s, action = one_run(head, first)
        drains.append(drain_s)
        requeues.append(requeue_s)
        watcher.append(action)
        print("run %d: fault-to-drain %.2f s, fault-to-requeue %.2f s (the watcher's own: drain %.2f s, requeue %s s "
              "after it saw the line)" % (number + 1, drain_s, requeue_s, action.get("drain_s"), action.get("requeue_s")))
    probe = statistics.median(floor)
    for name, values in (("fault-to-drain", drains), ("fault-to-requeue", requeues)):
        median = statistics.median(values)
        print("%-17s median %.2f s  max %.2f s  target <= %.0f s  (%.2f of the target; %.0f x the probe's floor "
              "of %.3f s)" % (name, median, max(values), TARGET_S, median / TARGET_S, median / probe, probe))


if __name__ == "__main__":
    main()
