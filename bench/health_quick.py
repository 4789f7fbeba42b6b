#!/usr/bin/env python
"""Benchmark: the node health checker's own cost for a quick run on an 8-GPU node.

Builds a healthy 8x H100 bundle with the simulator (tests/gpusim), then runs bin/gpucluster-health on it as the
health_check role installs it (python3 -I -S, byte-compiled modules) and prints the CPU time of each whole run,
interpreter start included, and the number of tool invocations a live run makes at each level. Target: under
0.2 s of CPU for a quick run. The figures are printed, never asserted: run it on a quiet machine.

    python3 bench/health_quick.py [--runs 20]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "bin", "gpucluster-health")
GPUSIM = os.path.join(ROOT, "tests", "gpusim", "gpusim.py")
PROFILE = os.path.join(ROOT, "tests", "gpusim", "profiles", "h100-sxm-8.json")
EXPECTED = {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
            "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}


def child_cpu(argv, env=None):
    """CPU seconds (user + system) of one child run, from the kernel's accounting."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, wall, proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        bundle = os.path.join(tmp, "bundle")
        subprocess.run([python, GPUSIM, "bundle", bundle, "--profile", PROFILE], check=True, stdout=subprocess.PIPE)
        config = os.path.join(tmp, "health.json")
        with open(config, "w") as handle:
            json.dump({"expected": EXPECTED}, handle)
        subprocess.run([python, "-I", "-m", "compileall", "-q", os.path.join(ROOT, "plugins", "module_utils")],
                       check=True)

        bare = [child_cpu([python, "-I", "-S", "-c", "pass"])[0] for _run in range(args.runs)]
        argv = [python, "-I", "-S", CHECKER, "--from-dir", bundle, "--config", config, "--level", "quick",
                "--format", "json", "--no-state"]
        runs = []
        for _run in range(args.runs):
            cpu, wall, proc = child_cpu(argv)
            result = json.loads(proc.stdout)
            if result["status"] != "ok":
                raise SystemExit("the healthy bundle is not ok: %s" % result["findings"])
            runs.append((cpu, wall, result["cpu_s"]))

        # Live runs against the simulator's tools: count the commands each level starts.
        tools = os.path.join(tmp, "bin")
        os.makedirs(tools)
        for name in ("nvidia-smi", "ibstat", "dcgmi", "all_reduce_perf"):
            os.symlink(GPUSIM, os.path.join(tools, name))
        env = dict(os.environ, GPUSIM_PROFILE=PROFILE)
        live_config = os.path.join(tmp, "live.json")
        with open(live_config, "w") as handle:
            json.dump({"expected": EXPECTED, "thresholds": {"nccl_busbw_min_gbps": 300},
                       "sources": {"nvidia_smi": os.path.join(tools, "nvidia-smi"),
                                   "ibstat": os.path.join(tools, "ibstat"),
                                   "sys_class_infiniband": os.path.join(bundle, "sys-class-infiniband"),
                                   "kernel_log": "file:" + os.path.join(bundle, "kernel.log"),
                                   "fabricmanager_state": "file:" + os.path.join(bundle, "fabricmanager.state"),
                                   "dcgmi": os.path.join(tools, "dcgmi"),
                                   "all_reduce_perf": os.path.join(tools, "all_reduce_perf")}}, handle)
        calls = {}
        for level in ("quick", "standard", "deep"):
            proc = subprocess.run([python, "-I", "-S", CHECKER, "--config", live_config, "--level", level,
                                   "--format", "json", "--no-state"], stdout=subprocess.PIPE, env=env, check=False)
            calls[level] = json.loads(proc.stdout)["tool_calls"]

    cpu = [r[0] for r in runs]
    print("gpucluster-health quick run on an 8x H100 bundle, %d runs, python3 -I -S, byte-compiled" % args.runs)
    print("  CPU per run, interpreter start included: median %.3f s, min %.3f s, max %.3f s   (target < 0.200 s)"
          % (statistics.median(cpu), min(cpu), max(cpu)))
    print("  wall per run:                            median %.3f s" % statistics.median([r[1] for r in runs]))
    print("  the checker's own CPU (after start-up):  median %.3f s" % statistics.median([r[2] for r in runs]))
    print("  bare interpreter start (python3 -I -S):  median %.3f s" % statistics.median(bare))
    print("  tool invocations per live run: quick %d, standard %d, deep %d" % (
        calls["quick"], calls["standard"], calls["deep"]))
    print("  load average at the end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
