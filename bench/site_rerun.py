# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: what a site.yml run that changes nothing costs, on the lab and projected to 400 GPU nodes.

On a converged inventory (the lab after `make lab`, by default), it runs:

1. the floor, measured in the same run: a play of one `ansible.builtin.ping` task and one of 21 on every host, so
   that (second - first) / 20 is the cost of one minimal task on every host, Ansible's start-up aside;
2. `playbooks/site.yml` again, timed, with a bench-only callback (bench/callback_plugins) that records every task
   result: tasks per host by status, the time per role, and the changed results (a converged inventory must have
   none; they are listed).

It prints the wall time and the controller's CPU (getrusage of the ansible-playbook process tree) of each, the
run's tasks per host, and a projection for 400 GPU nodes from a 2-core controller:

- CPU bound: the controller's CPU per task result measured here x the results a GPU node has x 400, plus the other
  hosts' share, over the controller's cores (--cores, 2);
- latency bound: for each GPU node task, its median time on the lab's GPU nodes, times ceil(400 / forks);
- the projection is the larger of the two.

Targets (issue 24): the rerun on the lab <= 180 s, the projection <= 900 s. The ratios to the floor are the figures
to compare between machines; the absolute seconds are a loaded machine's. Nothing is asserted.

    .venv/bin/python bench/site_rerun.py [-i inventories/lab] [--converge] [--forks 25] [--cores 2] [--keep DIR]
    [--extra ANSIBLE_PLAYBOOK_ARG ...]

`--converge` runs site.yml once first (not timed), for an inventory that is up but not converged.
"""

import argparse
import collections
import configparser
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
TARGET_RERUN_S = 180.0
TARGET_PROJECTED_S = 900.0
FLEET_NODES = 400
FLOOR_TASKS = 20


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def enabled_callbacks(env):
    """The callbacks the run's configuration enables: ANSIBLE_CALLBACKS_ENABLED, else its ansible.cfg's
    callbacks_enabled (Ansible's own order of precedence)."""
    value = env.get("ANSIBLE_CALLBACKS_ENABLED")
    if value is None:
        parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
        parser.read(env["ANSIBLE_CONFIG"])
        value = parser.get("defaults", "callbacks_enabled", fallback="")
    return [name.strip() for name in value.split(",") if name.strip()]


def run_playbook(argv, env, log_path):
    """Run ansible-playbook; return (rc, wall seconds, controller CPU seconds)."""
    cpu_before = _children_cpu()
    start = time.perf_counter()
    with open(log_path, "ab") as log:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return proc.returncode, time.perf_counter() - start, _children_cpu() - cpu_before


def floor_play(path, tasks):
    lines = ["- name: The floor (%d minimal tasks)" % tasks, "  hosts: all", "  gather_facts: false", "  tasks:"]
    for index in range(tasks):
        lines += ["    - name: Ping %d" % index, "      ansible.builtin.ping:"]
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("\n".join(lines) + "\n")


def read_stats(path):
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def host_groups(inventory, env):
    """{group: [hosts]} from ansible-inventory."""
    out = subprocess.run(["ansible-inventory", "-i", inventory, "--list"], cwd=ROOT, env=env, check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    data = json.loads(out)
    groups = {}

    def walk(name):
        if name in groups:
            return groups[name]
        entry = data.get(name, {})
        hosts = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            hosts += [h for h in walk(child) if h not in hosts]
        groups[name] = hosts
        return hosts

    walk("all")
    for name in data:
        if name != "_meta":
            walk(name)
    return groups


def summarise(records, gpu_nodes):
    """Per-host status counts, per-role seconds and counts on GPU nodes, changed results, GPU task medians."""
    per_host = collections.defaultdict(collections.Counter)
    per_role = collections.defaultdict(lambda: [0, 0.0])
    changed = []
    task_times = collections.defaultdict(list)
    for rec in records:
        per_host[rec["host"]][rec["status"]] += 1
        if rec["status"] == "changed":
            changed.append(rec)
        if rec["host"] in gpu_nodes and rec["status"] != "skipped":
            key = rec["role"] or "(play: %s)" % rec["play"]
            per_role[key][0] += 1
            per_role[key][1] += rec["seconds"] or 0.0
            task_times[(rec["play"], rec["task"])].append(rec["seconds"] or 0.0)
    return per_host, per_role, changed, task_times


def project(results, ctl_cpu, per_host, gpu_nodes, task_times, forks, cores):
    """The 400-GPU-node projection: (cpu bound s, latency bound s, per-result CPU s)."""
    per_result = ctl_cpu / results if results else 0.0
    gpu_results = statistics.mean(sum(per_host[h].values()) for h in gpu_nodes) if gpu_nodes else 0.0
    other_results = results - gpu_results * len(gpu_nodes)
    cpu_bound = per_result * (gpu_results * FLEET_NODES + other_results) / cores
    batches = math.ceil(FLEET_NODES / forks)
    latency_bound = sum(statistics.median(times) for times in task_times.values()) * batches
    return cpu_bound, latency_bound, per_result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("-i", "--inventory", default="inventories/lab")
    parser.add_argument("--converge", action="store_true", help="run site.yml once first (untimed)")
    parser.add_argument("--forks", type=int, default=25, help="forks for the 400-node projection's batches")
    parser.add_argument("--cores", type=int, default=2, help="the projected controller's cores")
    parser.add_argument("--gpu-group", default="gpu_nodes")
    parser.add_argument("--keep", help="a directory to keep the logs and the task records in")
    parser.add_argument("--extra", action="append", default=[], help="one more ansible-playbook argument")
    args = parser.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="site-rerun-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".cache", "collections"))
    env["ANSIBLE_CALLBACK_PLUGINS"] = os.path.join(ROOT, "bench", "callback_plugins")
    # The recording callback beside the configuration's own (the preload callback of ansible.cfg among them), not
    # instead of them: the run is timed as an operator's run is.
    env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(
        enabled_callbacks(env) + ["gpucluster.ops.gpucluster_task_stats", "gpucluster_task_stats"])
    playbook = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
                if os.path.exists(os.path.join(ROOT, ".venv", "bin", "ansible-playbook")) else "ansible-playbook"]
    base = playbook + ["-i", args.inventory] + args.extra
    groups = host_groups(args.inventory, env)
    gpu_nodes = groups.get(args.gpu_group, [])
    log = os.path.join(work, "ansible.log")
    try:
        if args.converge:
            rc, wall, _cpu = run_playbook(base + ["playbooks/site.yml"], env, log)
            print("converge: rc %d, %.0f s" % (rc, wall))
            if rc:
                sys.exit("the converging run failed (rc %d): see %s" % (rc, log))
        floors = {}
        for tasks in (1, FLOOR_TASKS + 1):
            path = os.path.join(work, "floor-%d.yml" % tasks)
            floor_play(path, tasks)
            env["GPUCLUSTER_TASK_STATS"] = os.path.join(work, "floor-%d.jsonl" % tasks)
            rc, wall, cpu = run_playbook(base + [path], env, log)
            if rc:
                sys.exit("the floor playbook failed (rc %d): see %s" % (rc, log))
            floors[tasks] = (wall, cpu)
        hosts = len(groups.get("all", []))
        floor_task_wall = (floors[FLOOR_TASKS + 1][0] - floors[1][0]) / FLOOR_TASKS
        floor_task_cpu = (floors[FLOOR_TASKS + 1][1] - floors[1][1]) / FLOOR_TASKS / max(hosts, 1)

        stats = os.path.join(work, "site.jsonl")
        env["GPUCLUSTER_TASK_STATS"] = stats
        rc, wall, cpu = run_playbook(base + ["playbooks/site.yml"], env, log)
        records = read_stats(stats) if os.path.exists(stats) else []
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    per_host, per_role, changed, task_times = summarise(records, set(gpu_nodes))
    results = len(records)
    cpu_bound, latency_bound, per_result = project(results, cpu, per_host, gpu_nodes, task_times, args.forks,
                                                   args.cores)
    projected = max(cpu_bound, latency_bound)

    print("inventory %s: %d hosts, %d in %s; %d cores here" % (args.inventory, hosts, len(gpu_nodes), args.gpu_group,
                                                               os.cpu_count()))
    print("floor: one ping on every host %.1f s wall; one more minimal task %.2f s wall, %.3f s controller CPU per host"
          % (floors[1][0], floor_task_wall, floor_task_cpu))
    print("site.yml rerun: rc %d, %.1f s wall (%.1fx the floor's start-up + %d minimal tasks), %.1f s controller CPU"
          % (rc, wall, wall / (floors[1][0] + floor_task_wall * max(len(task_times), 1)), len(task_times), cpu))
    print("%-22s %6s %8s %8s %8s %8s" % ("host", "tasks", "ok", "changed", "skipped", "failed"))
    for host in sorted(per_host):
        counts = per_host[host]
        print("%-22s %6d %8d %8d %8d %8d" % (host, sum(counts.values()), counts["ok"], counts["changed"],
                                             counts["skipped"], counts["failed"] + counts["unreachable"]))
    print("GPU nodes' executed tasks by role (count, seconds summed over the GPU nodes):")
    for role, (count, seconds) in sorted(per_role.items(), key=lambda item: -item[1][1]):
        print("  %-40s %5d %8.1f" % (role, count, seconds))
    if changed:
        print("changed results (a converged inventory should have none): %d" % len(changed))
        for rec in changed[:20]:
            print("  %s | %s | %s" % (rec["host"], rec["role"], rec["task"]))
    print("controller CPU per task result: %.3f s (%.1fx the minimal task's %.3f s)"
          % (per_result, per_result / floor_task_cpu if floor_task_cpu else 0.0, floor_task_cpu))
    print("projection, %d GPU nodes, %d cores, forks %d: CPU bound %.0f s, latency bound %.0f s -> %.0f s"
          % (FLEET_NODES, args.cores, args.forks, cpu_bound, latency_bound, projected))
    print("targets: rerun on the lab <= %.0f s (%s: %.0f s); projected <= %.0f s (%s: %.0f s)"
          % (TARGET_RERUN_S, "met" if wall <= TARGET_RERUN_S else "missed", wall, TARGET_PROJECTED_S,
             "met" if projected <= TARGET_PROJECTED_S else "missed", projected))
    return 0 if rc == 0 else rc


if __name__ == "__main__":
    sys.exit(main())
