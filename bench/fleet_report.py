# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: the fleet report of a 400-node sweep of 8-GPU nodes (gpucluster.ops.fleet_report's work).

Builds the made-up fleet of tests/support/fleet_records.py (400 nodes x 8 H100 in four groups, a few faulty, drifting
or unreachable), then times the report the module writes: the model (_fleet.build, with a previous report to diff
against), fleet.json, fleet.html and rma.csv, best of --repeat. Each figure is set against a floor measured in the
same run on the same fleet:

- time: a JSON round trip of the records (json.dumps + json.loads), the least any step that receives them does
  (Ansible hands the module its arguments as JSON);
- page size: the bare grid, one row per node and one cell per GPU with only its colour class, the least a page
  that shows every GPU's state can hold.

The page must stay under 2 MB (tests/unit/plugins/module_utils/test_fleet.py asserts it); the rest is printed, never
asserted: run it on a quiet machine.

    .venv/bin/python bench/fleet_report.py [--nodes 400] [--gpus 8] [--repeat 5]
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, ".cache", "collections")]

import fleet_records  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet, _fleet_html  # noqa: E402  pylint: disable=wrong-import-position


def best(repeat, work):
    """The shortest wall time of ``repeat`` runs of work() and its last result."""
    times, result = [], None
    for _round in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def bare_grid(report):
    rows = []
    for entry in report["nodes"].values():
        cells = "".join('<td class="s-%s"></td>' % g["status"] for g in entry["gpus"])
        rows.append("<tr><td>%s</td>%s</tr>" % (entry["host"], cells))
    return "<!DOCTYPE html><table>%s</table>" % "".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    nodes = fleet_records.fleet(args.nodes, args.gpus)
    previous = json.loads(_fleet.to_json(_fleet.build(nodes, created_at="2026-11-30T06:00:00Z")))

    floor_s, _copy = best(args.repeat, lambda: json.loads(json.dumps(nodes)))

    def whole():
        report = _fleet.build(nodes, previous=previous, previous_path="previous/fleet.json",
                              created_at="2026-12-01T06:00:00Z", options={"level": "quick"})
        return report, _fleet.to_json(report), _fleet_html.render(report), _fleet.rma_csv(report)

    build_s, report = best(args.repeat, lambda: _fleet.build(nodes, previous=previous, created_at="x"))
    html_s, page = best(args.repeat, lambda: _fleet_html.render(report))
    whole_s, (report, document, page, rma) = best(args.repeat, whole)
    floor_page = bare_grid(report)
    size = len(page.encode("utf-8"))
    floor_size = len(floor_page.encode("utf-8"))
    print("fleet: %d nodes x %d GPUs, %d findings (%d fleet-level), %d RMA rows, summary %s" % (
        args.nodes, args.gpus, sum(len(e["findings"]) for e in report["nodes"].values()),
        len(report["fleet_findings"]), len(report["rma"]), json.dumps(report["summary"], sort_keys=True)))
    print("time, best of %d:" % args.repeat)
    print("  floor (JSON round trip of the records) %8.1f ms" % (floor_s * 1000))
    print("  model (_fleet.build with a diff)       %8.1f ms  %5.1fx the floor" % (build_s * 1000, build_s / floor_s))
    print("  page (_fleet_html.render)              %8.1f ms  %5.1fx the floor" % (html_s * 1000, html_s / floor_s))
    print("  whole report (model, JSON, page, CSV)  %8.1f ms  %5.1fx the floor" % (whole_s * 1000, whole_s / floor_s))
    print("size:")
    print("  floor (bare grid)                      %8.1f KiB" % (floor_size / 1024.0))
    print("  fleet.html                             %8.1f KiB  %5.1fx the floor, %s 2 MiB" % (
        size / 1024.0, size / float(floor_size), "under" if size < 2 * 1024 * 1024 else "OVER"))
    print("  fleet.json                             %8.1f KiB" % (len(document.encode("utf-8")) / 1024.0))
    print("  rma.csv                                %8.1f KiB" % (len(rma.encode("utf-8")) / 1024.0))
    return 0 if size < 2 * 1024 * 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
