# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the Slurm config filters scale with the number of nodes.

Part a: the filters alone, on in-memory hostvars of generated clusters. Each node has 8 x A100 80GB, 2 x 32 cores
x 2 threads (128 CPUs) and 1 TiB. There are two node types (the second has an nvme feature), two partitions,
leaves of 32 nodes and 4 spines under one top switch. It measures wall time (best of --repeat), peak Python memory
(tracemalloc, a separate run) and output lines per file. The target is under 5 s for all four files at 10,000 nodes.

Run from the checkout with the project's virtualenv: .venv/bin/python bench/render_scale.py [--sizes 50,400]
"""

import argparse
import os
import sys
import time
import tracemalloc
import types

TARGET_SECONDS = 5.0
DEFAULT_SIZES = (50, 400, 4000, 10000)


def _bootstrap():
    """Make the checkout importable as ansible_collections.gpucluster.ops (Ansible itself comes from the venv)."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    names = ["ansible_collections", "ansible_collections.gpucluster", "ansible_collections.gpucluster.ops",
             "ansible_collections.gpucluster.ops.plugins"]
    paths = [None, None, root, os.path.join(root, "plugins")]
    for name, path in zip(names, paths):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path] if path else []
            sys.modules[name] = mod


_bootstrap()

from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import slurm_gres_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import slurm_node_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_partition_lines import slurm_partition_lines  # noqa: E402
from ansible_collections.gpucluster.ops.plugins.filter.slurm_topology_lines import slurm_topology_lines  # noqa: E402


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
    best = None
    for _attempt in range(repeat):
        start = time.perf_counter()
        output = render_all(cluster)
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, output


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


PARTS = {"a": ("a: filters alone, in-memory hostvars (lines per file)", part_a)}


def main(argv=None):
    """Run the requested parts; exit 1 when the largest size misses the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs per size; the best one counts")
    parser.add_argument("--parts", default="a", help="parts to run (%s)" % ", ".join(sorted(PARTS)))
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    status = 0
    for part in args.parts:
        title, function = PARTS[part]
        rows = function(sizes, args.repeat)
        print_table(title, rows)
        if rows[-1]["nodes"] >= 10000 and rows[-1]["seconds"] > TARGET_SECONDS:
            print("target missed: %.2f s > %.1f s at %d nodes" % (rows[-1]["seconds"], TARGET_SECONDS, rows[-1]["nodes"]))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
