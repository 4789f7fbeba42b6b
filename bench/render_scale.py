# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the Slurm config filters scale with the number of nodes.

Part a: the filters alone, on in-memory hostvars of generated clusters. Each node has 8 x A100 80GB, 2 x 32 cores
x 2 threads (128 CPUs) and 1 TiB. There are two node types (the second has an nvme feature), two partitions,
leaves of 32 nodes and 4 spines under one top switch. It measures wall time (median of --repeat), peak Python memory
(tracemalloc, a separate run) and output lines per file. The target is under 5 s for all four files at 10,000 nodes.

Part b: end to end. The same cluster becomes an inventory file of that many hosts in groups (hardware declared in
group variables, as a limited run needs), and ansible-playbook runs the slurm role's render step (tasks_from: render)
on localhost as the controller and shows the rendered files (read back from the JSON callback). Each size runs the
render and a one-task playbook on the same inventory (Ansible's floor: what it costs before any rendering) --repeat
times, alternately, so that the load of a shared machine falls on both alike. It measures the wall time, the CPU time
(user + system of the ansible-playbook process tree) and the peak memory (its largest resident set), all from
getrusage(RUSAGE_CHILDREN) of a fresh process per run, and prints the median of each with the ratio of the render's
to the floor's, and the lines of the files. Each size is measured twice: the step alone (with no facts it gathers the
controller's minimal facts, a module run), and with the controller's facts known (a jsonfile fact cache filled by one
untimed run, for the render and the floor alike), which is how a site run reaches it after its preflight. The
target is a ratio: the render's CPU time at most 1.5x the floor's at 10,000 nodes (the wall ratio is printed beside
it; on a loaded machine wall time also counts the waits for a CPU).
Absolute seconds are printed, never judged.

Run from the checkout with the project's virtualenv: .venv/bin/python bench/render_scale.py [--sizes 50,400]
[--parts ab]. Part b needs `make setup` (the collection link in .cache/collections). No test runs the benchmark; the
unit tests run the same render step (tests/support/render_step.py) on small inventories.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import yaml

TARGET_SECONDS = 5.0
DEFAULT_SIZES = (50, 400, 4000, 10000)
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# Part b: the render's cost (CPU time) at most this many times a one-task playbook's on the same inventory (issue 24).
TARGET_RATIO = 1.5
TARGET_NODES = 10000
# Part b measures the step twice: run alone (it gathers the controller's minimal facts) and with the facts known.
VARIANTS = ("alone", "facts known")


# The checkout as ansible_collections.gpucluster.ops (bin/_gpucluster_bootstrap.py); Ansible itself comes from the venv.
sys.path.insert(0, os.path.join(ROOT, "bin"))
import _gpucluster_bootstrap  # noqa: E402,F401  pylint: disable=import-error,unused-import,wrong-import-position

from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import slurm_gres_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import slurm_node_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_partition_lines import slurm_partition_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_topology_lines import slurm_topology_lines  # noqa: E402
from ansible_collections.gpucluster.ops.tests.support.render_step import (  # noqa: E402
    COLLECTIONS, render_argv, render_env, rendered_files, write_render_play)


def _gpus():
    return [{"minor_number": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
             "cpu_affinity": "0-31,64-95" if i < 4 else "32-63,96-127"} for i in range(8)]


def generate_cluster(nodes):
    """In-memory inventory of ``nodes`` GPU nodes: (hosts, hostvars, groups, partitions, fabric)."""
    hosts = ["gpu%05d" % i for i in range(1, nodes + 1)]
    half = nodes // 2
    groups = {"gpu_a": hosts[:half], "gpu_b": hosts[half:]}
    hostvars = {}
    for index, host in enumerate(hosts):
        facts = {"processor_count": 2, "processor_cores": 32, "processor_threads_per_core": 2, "processor_vcpus": 128,
                 "memtotal_mb": 1031800 + index % 7, "gpucluster_gpus": _gpus()}
        hostvars[host] = {"ansible_facts": facts, "slurm_node_features": ["a100", "ib"] + (["nvme"] if index >= half else [])}
    partitions = [{"name": "batch", "groups": ["gpu_a", "gpu_b"], "default": True, "max_time": "2-00:00:00"},
                  {"name": "nvme", "groups": ["gpu_b"], "max_time": "12:00:00", "priority_tier": 10}]
    leaves = [{"name": "leaf%04d" % (j + 1), "nodes": hosts[j * 32:(j + 1) * 32]} for j in range((nodes + 31) // 32)]
    spines = [{"name": "spine%d" % (k + 1), "switches": [leaf["name"] for leaf in leaves[k::4]]} for k in range(4)
              if leaves[k::4]]
    fabric = {"leaves": leaves, "spines": spines, "top": "core1"}
    return hosts, hostvars, groups, partitions, fabric


def render_all(cluster):
    """Run the four filters as the slurm role does; return {file: lines}."""
    hosts, hostvars, groups, partitions, fabric = cluster
    return {
        "slurm.conf": slurm_node_lines(hosts, hostvars) + slurm_partition_lines(partitions, groups, hostvars),
        "gres.conf": slurm_gres_lines(hosts, hostvars),
        "topology.conf": slurm_topology_lines(fabric),
    }


def _timed(cluster, repeat):
    times = []
    for _attempt in range(repeat):
        start = time.perf_counter()
        output = render_all(cluster)
        times.append(time.perf_counter() - start)
    return statistics.median(times), output


def _peak_mib(cluster):
    tracemalloc.start()
    render_all(cluster)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1024.0 / 1024.0


def part_a(sizes, repeat):
    """Filters alone: one row per cluster size; returns the rows."""
    rows = []
    for nodes in sizes:
        cluster = generate_cluster(nodes)
        seconds, output = _timed(cluster, repeat)
        rows.append({"nodes": nodes, "seconds": seconds, "peak_mib": _peak_mib(cluster),
                     "slurm.conf": len(output["slurm.conf"]), "gres.conf": len(output["gres.conf"]),
                     "topology.conf": len(output["topology.conf"])})
    return rows


def print_table(title, rows):
    """Print rows as a fixed-width table."""
    print(title)
    print("%8s %10s %10s %11s %10s %14s" % ("nodes", "wall s", "peak MiB", "slurm.conf", "gres.conf", "topology.conf"))
    for row in rows:
        print("%8d %10.3f %10.1f %11d %10d %14d" % (row["nodes"], row["seconds"], row["peak_mib"], row["slurm.conf"],
                                                    row["gres.conf"], row["topology.conf"]))


NODE_TYPE = {"slurm_node_cpus": 128, "slurm_node_sockets": 2, "slurm_node_cores_per_socket": 32,
             "slurm_node_threads_per_core": 2, "slurm_node_real_memory": 1000448,
             "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}]}
BASELINE_PLAY = """- name: Ansible alone on the same inventory
  hosts: slurm_controller
  gather_facts: false
  tasks:
    - name: Count the compute nodes
      ansible.builtin.debug:
        msg: "{{ groups['slurm_compute'] | length }}"
"""


def generate_inventory(nodes):
    """The part-a cluster as an Ansible inventory (a dict for YAML): hardware in group variables."""
    hosts, _hostvars, groups, partitions, fabric = generate_cluster(nodes)
    half = nodes // 2
    type_a = dict(NODE_TYPE, slurm_node_features=["a100", "ib"])
    type_b = dict(NODE_TYPE, slurm_node_features=["a100", "ib", "nvme"])
    leaves = [{"name": leaf["name"], "nodes": _fold(leaf["nodes"])} for leaf in fabric["leaves"]]
    return {"all": {
        "vars": {"slurm_cluster_name": "bench", "slurm_partitions": partitions, "slurm_health_check": False,
                 "slurm_fabric": {"leaves": leaves, "spines": fabric["spines"], "top": fabric["top"]}},
        "children": {
            "slurm_controller": {"hosts": {"localhost": {"ansible_connection": "local",
                                                         "ansible_python_interpreter": sys.executable}}},
            "slurm_database": {"hosts": {"db01": None}},
            "slurm_compute": {"children": {
                "gpu_a": {"hosts": dict.fromkeys(hosts[:half]), "vars": type_a},
                "gpu_b": {"hosts": dict.fromkeys(hosts[half:]), "vars": type_b}}},
        }}}, groups


def _fold(names):
    from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import fold  # noqa: E402  pylint: disable=import-outside-toplevel
    return fold(names)


def measure_child(argv):
    """Run argv; print {seconds, cpu_seconds, peak_mib, rc} of it and its descendants as JSON (called in a process of
    its own, so that getrusage(RUSAGE_CHILDREN) counts this run only)."""
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                      "peak_mib": usage.ru_maxrss / 1024.0, "rc": proc.returncode,
                      "stdout": proc.stdout.decode("utf-8", "replace"),
                      "stderr": proc.stderr.decode("utf-8", "replace")[-4000:]}))


def _measured(argv, env):
    """Wall time and peak RSS of argv's process tree, measured in a fresh process so that runs do not mix."""
    helper = subprocess.run([sys.executable, os.path.realpath(__file__), "--measure-child", "--"] + argv, env=env,
                            stdout=subprocess.PIPE, check=True)
    result = json.loads(helper.stdout)
    if result["rc"] != 0:
        details = (" ".join(argv), result["rc"], result["stdout"][-4000:], result["stderr"])
        raise RuntimeError("%s failed (rc %d):\n%s%s" % details)
    return result


def _ansible_env():
    if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "gpucluster", "ops")):
        raise SystemExit("part b needs the collection link of `make setup` in %s" % COLLECTIONS)
    return render_env(ANSIBLE_FORCE_COLOR="0")


def part_b(sizes, repeat):
    """ansible-playbook with the role's render step on a generated inventory: one row per cluster size."""
    env = _ansible_env()
    playbook = shutil.which("ansible-playbook", path=env["PATH"])
    rows = []
    work = tempfile.mkdtemp(prefix="render-scale-")
    try:
        for nodes in sizes:
            inventory, _groups = generate_inventory(nodes)
            inventory_file = os.path.join(work, "inventory-%d.yml" % nodes)
            with open(inventory_file, "w") as handle:
                yaml.safe_dump(inventory, handle, default_flow_style=False)
            baseline = os.path.join(work, "baseline.yml")
            with open(baseline, "w") as handle:
                handle.write(BASELINE_PLAY)
            render = render_argv(inventory_file, write_render_play(work), playbook=playbook)
            for variant in VARIANTS:
                # "facts known": the controller's facts in a fact cache, filled by one untimed run, as a site run has
                # them from its preflight; "alone": the step run by itself gathers the controller's minimal facts
                variant_env = dict(env)
                if variant == "facts known":
                    variant_env.update(ANSIBLE_CACHE_PLUGIN="jsonfile",
                                       ANSIBLE_CACHE_PLUGIN_CONNECTION=os.path.join(work, "facts-%d" % nodes))
                    _measured(render, variant_env)
                runs, base = [], []
                for _attempt in range(repeat):  # alternately, so that a change of load falls on both
                    runs.append(_measured(render, variant_env))
                    base.append(_measured([playbook, "-i", inventory_file, baseline], variant_env))
                files = rendered_files(runs[-1]["stdout"])
                lines = {name: sum(1 for line in files[name].splitlines() if line.strip() and not line.startswith("#"))
                         for name in ("slurm.conf", "gres.conf", "topology.conf")}
                row = dict(lines, nodes=nodes, runs=repeat, variant=variant)
                for key in ("seconds", "cpu_seconds", "peak_mib"):
                    row[key] = statistics.median(r[key] for r in runs)
                    row["base_" + key] = statistics.median(r[key] for r in base)
                rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _ratio(row, key):
    return row[key] / row["base_" + key] if row["base_" + key] else float("inf")


def print_table_b(title, rows):
    """Print part b's rows: medians of the render run and of the floor, their ratios, and the lines of each file."""
    print(title)
    header = ("nodes", "facts", "runs", "wall s", "floor s", "wall x", "CPU s", "floor CPU", "CPU x", "target", "MiB",
              "floor MiB", "MiB x", "slurm.conf", "gres.conf", "topology.conf")
    print("%6s %-11s %4s %7s %7s %6s %7s %9s %6s %6s %6s %9s %5s %10s %9s %13s" % header)
    for row in rows:
        print("%6d %-11s %4d %7.2f %7.2f %6.2f %7.2f %9.2f %6.2f %6s %6.0f %9.0f %5.2f %10d %9d %13d" % (
            row["nodes"], row["variant"], row["runs"], row["seconds"], row["base_seconds"], _ratio(row, "seconds"),
            row["cpu_seconds"],
            row["base_cpu_seconds"], _ratio(row, "cpu_seconds"), "%.1fx" % TARGET_RATIO, row["peak_mib"],
            row["base_peak_mib"], _ratio(row, "peak_mib"), row["slurm.conf"], row["gres.conf"], row["topology.conf"]))
    print("(medians of the runs; 'floor': a one-task playbook on the same inventory, run alternately with the render; "
          "'x': render / floor; facts: 'alone' gathers the controller's minimal facts first, as the step run by itself "
          "does, 'facts known' has them in a fact cache, as a site run has them from its preflight (render and floor "
          "alike); slurm.conf lines: keys, NodeName and PartitionName lines)")


def _check_b(rows):
    status = 0
    for last in rows:
        if last["nodes"] < TARGET_NODES:
            continue
        ratio, wall = _ratio(last, "cpu_seconds"), _ratio(last, "seconds")
        verdict = "met" if ratio <= TARGET_RATIO else "missed"
        print("target %s (%s): the render costs %.2fx the floor's CPU time at %d nodes (target <= %.1fx; wall %.2fx, "
              "memory %.2fx)" % (verdict, last["variant"], ratio, last["nodes"], TARGET_RATIO, wall,
                                 _ratio(last, "peak_mib")))
        status |= 0 if verdict == "met" else 1
    return status


def _check_a(rows):
    if rows[-1]["nodes"] >= 10000 and rows[-1]["seconds"] > TARGET_SECONDS:
        print("target missed: %.2f s > %.1f s at %d nodes" % (rows[-1]["seconds"], TARGET_SECONDS, rows[-1]["nodes"]))
        return 1
    return 0


PARTS = {"a": ("a: filters alone, in-memory hostvars (lines per file)", part_a, print_table, _check_a),
         "b": ("b: ansible-playbook, the role's render step on localhost, generated inventory", part_b, print_table_b,
               _check_b)}


def main(argv=None):
    """Run the requested parts; exit 1 when the largest size misses a target."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--measure-child", "--"]:
        measure_child(argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timing runs per size, the median counts (default: 3 for part a, 3 for part b)")
    parser.add_argument("--parts", default="ab", help="parts to run (%s)" % ", ".join(sorted(PARTS)))
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    status = 0
    for part in args.parts:
        title, function, show, check = PARTS[part]
        rows = function(sizes, args.repeat or 3)
        show(title, rows)
        status |= check(rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
