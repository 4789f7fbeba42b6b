#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time report of the last `make molecule` run against the budget in molecule/budget.yml.

Reads what scripts/molecule.sh leaves in .cache/molecule-logs: `run` (when, which commit, how many at a time, the
wall time), `results` (each scenario's result and time), `<scenario>.log` (molecule's output, each line prefixed
with the seconds since the scenario started: molecule's "[<scenario> > <action>] Executing" and "... Executed: ..."
lines time its stages) and `<scenario>.junit.xml` (the testinfra verifier's JUnit file: a test module's time is
its test cases' times summed, so fixture setup and teardown are in it). `make test` adds `make-test` (start and end).
Where the CPU went: `<scenario>.cpu` (the controller-side CPU of the scenario's molecule run, from bash's `times`) and,
for the shared cluster scenarios, `<scenario>.cpu.jsonl` (tests/support/cpu_account.py: the containers' CPU before
verify, then each test module's controller and node CPU, then the verify session's controller CPU).

It is a report: being over budget is said, never an error. Exit status 0 unless an argument or the README's
markers are wrong (--readme).

  scripts/time-report.py             the report (scripts/molecule.sh prints it at the end; make time-report)
  scripts/time-report.py --summary   only the budget lines (make test prints them at its end)
  scripts/time-report.py --markdown  README's time table, written from the last run, on stdout
  scripts/time-report.py --readme    the same table written into README.md between its time-table markers
"""

import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- time-table:begin"
END = "<!-- time-table:end -->"
# The molecule stages in the order a test sequence runs them; others (side_effect, cleanup, ...) follow as found.
STAGE_ORDER = ["destroy", "syntax", "create", "prepare", "check", "converge", "idempotence", "verify"]
STAMPED = re.compile(r"^\s*(\d+(?:\.\d+)?) (.*)$")
MARK = re.compile(r"\[(?P<scenario>[^\]]+?) > (?P<action>[\w-]+)\] (?:(?P<start>Executing)|Executed: (?P<state>.*))$")
RESULT = re.compile(r"^(?P<scenario>\S+)\s+(?P<result>passed|FAILED)\s+(?P<seconds>\d+) s")
GENERATED_KEYS = ("`make test`", "`make molecule`")


# ---------------------------------------------------------------------------------------------------------- reading
def read_keyvalues(path):
    """A file of key=value lines (scripts/molecule.sh's `run`, the Makefile's `make-test`) as a dict; {} if absent."""
    values = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep:
                    values[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    return values


def read_results(path):
    """scripts/molecule.sh's results: [(scenario, 'passed' | 'FAILED', seconds)] in the file's order."""
    results = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = RESULT.match(line)
                if m:
                    results.append((m.group("scenario"), m.group("result"), int(m.group("seconds"))))
    except FileNotFoundError:
        pass
    return results


def read_stages(path, scenario=None):
    """Molecule's stages in a timestamped scenario log: {"stages": {action: seconds}, "states": {action: last state},
    "order": [action, ...], "stamped": bool, "end": last timestamp}. A stage runs from its "Executing" line to its
    "Executed: ..." line, or to the next stage's start or the log's last line when that never came (failed, killed).
    A stage that runs twice (destroy, first and last) is summed."""
    info = {"stages": {}, "states": {}, "order": [], "stamped": False, "end": None}
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return info
    open_action, open_at = None, None

    def close(at, state):
        info["stages"][open_action] = info["stages"].get(open_action, 0.0) + max(0.0, at - open_at)
        info["states"][open_action] = state

    with f:
        for line in f:
            m = STAMPED.match(line.rstrip("\n"))
            if not m:
                continue
            at, text = float(m.group(1)), m.group(2)
            info["stamped"] = True
            info["end"] = at
            mark = MARK.search(text)
            if not mark or (scenario and mark.group("scenario") != scenario):
                continue
            action = mark.group("action")
            if mark.group("start"):
                if open_action is not None:
                    close(at, "unfinished")
                open_action, open_at = action, at
                if action not in info["order"]:
                    info["order"].append(action)
            elif action == open_action:
                close(at, mark.group("state").strip())
                open_action = None
    if open_action is not None:
        close(info["end"], "unfinished")
    return info


def module_of(case):
    """The test module (file name) of a JUnit <testcase>: its `file` attribute (junit_family=xunit1), else the
    last `test_*` part of its classname (pytest writes the module path with dots, then any class)."""
    file_attr = case.get("file")
    if file_attr:
        return os.path.basename(file_attr)
    parts = (case.get("classname") or "").split(".")
    for part in reversed(parts):
        if part.startswith("test_") or part.endswith("_test"):
            return part + ".py"
    return case.get("classname") or "(unknown)"


def read_junit(path):
    """A JUnit file as {"modules": {module: {"seconds", "tests", "failed", "skipped", "failures": [test name, ...]}},
    "order": [...], "session": pytest's own total (collection included) or None}; None when the file is absent or
    unreadable."""
    try:
        tree = ET.parse(path)
    except (FileNotFoundError, ET.ParseError):
        return None
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    modules, order, session = {}, [], None
    for suite in suites:
        try:
            session = (session or 0.0) + float(suite.get("time", ""))
        except ValueError:
            pass
        for case in suite.iter("testcase"):
            name = module_of(case)
            if name not in modules:
                modules[name] = {"seconds": 0.0, "tests": 0, "failed": 0, "skipped": 0, "failures": []}
                order.append(name)
            mod = modules[name]
            try:
                mod["seconds"] += float(case.get("time", "0") or 0)
            except ValueError:
                pass
            mod["tests"] += 1
            if case.find("failure") is not None or case.find("error") is not None:
                mod["failed"] += 1
                mod["failures"].append(case.get("name") or "(unnamed)")
            elif case.find("skipped") is not None:
                mod["skipped"] += 1
    return {"modules": modules, "order": order, "session": session}


def read_cpu_records(path):
    """A cluster scenario's <scenario>.cpu.jsonl as {"modules": {module: record}, "start": line or None, "end": line
    or None}; None when absent. A line that is not JSON is left out (the file of a session cut short)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    found = {"modules": {}, "start": None, "end": None}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("session") in ("start", "end"):
            found[record["session"]] = record
        elif isinstance(record.get("module"), str):
            found["modules"][record["module"]] = record
    return found


def _seconds(value, where, warnings):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        warnings.append(f"{where}: {value!r} is not a number of seconds; taken as no budget")
        return None
    return value


def read_budget(path):
    """molecule/budget.yml as {"make_test", "molecule", "scenarios": {name: s}, "modules": {scenario: {module: s}},
    "warnings": [...]}. A missing file or entry is no budget; a wrong one is a warning, never an error."""
    budget = {"make_test": None, "molecule": None, "scenarios": {}, "modules": {}, "warnings": []}
    warnings = budget["warnings"]
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        warnings.append(f"{path}: no budget file; every time is reported without a budget")
        return budget
    except yaml.YAMLError as e:
        warnings.append(f"{path}: not YAML ({e}); every time is reported without a budget")
        return budget
    if not isinstance(data, dict):
        warnings.append(f"{path}: not a mapping; every time is reported without a budget")
        return budget
    for key in ("make_test", "molecule"):
        if data.get(key) is not None:
            budget[key] = _seconds(data[key], key, warnings)
    scenarios = data.get("scenarios") or {}
    if not isinstance(scenarios, dict):
        warnings.append("scenarios: not a mapping of scenario: seconds")
        scenarios = {}
    for name, value in scenarios.items():
        seconds = _seconds(value, f"scenarios.{name}", warnings)
        if seconds is not None:
            budget["scenarios"][str(name)] = seconds
    modules = data.get("modules") or {}
    if not isinstance(modules, dict):
        warnings.append("modules: not a mapping of scenario: {module: seconds}")
        modules = {}
    for scenario, entries in modules.items():
        if not isinstance(entries, dict):
            warnings.append(f"modules.{scenario}: not a mapping of module: seconds")
            continue
        for module, value in entries.items():
            seconds = _seconds(value, f"modules.{scenario}.{module}", warnings)
            if seconds is not None:
                name = str(module) if str(module).endswith(".py") else f"{module}.py"
                budget["modules"].setdefault(str(scenario), {})[name] = seconds
    for key in sorted(set(data) - {"make_test", "molecule", "scenarios", "modules"}):
        warnings.append(f"{key}: unknown key (make_test, molecule, scenarios, modules)")
    return budget


def existing_scenarios(root):
    """The scenarios in molecule/ (directories with a molecule.yml)."""
    base = os.path.join(root, "molecule")
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if os.path.isfile(os.path.join(base, n, "molecule.yml")))


def collect(logs, budget_path, root=ROOT):
    """Everything the report says, from the files of the last run."""
    run = read_keyvalues(os.path.join(logs, "run"))
    budget = read_budget(budget_path)
    scenarios = []
    for name, result, seconds in sorted(read_results(os.path.join(logs, "results"))):
        stages = read_stages(os.path.join(logs, f"{name}.log"), name)
        junit = read_junit(os.path.join(logs, f"{name}.junit.xml"))
        cpu = {"controller": _int(read_keyvalues(os.path.join(logs, f"{name}.cpu")).get("controller_cpu_s")),
               "records": read_cpu_records(os.path.join(logs, f"{name}.cpu.jsonl"))}
        scenarios.append({"name": name, "result": result, "seconds": seconds, "stages": stages, "junit": junit,
                          "cpu": cpu,
                          "budget": budget["scenarios"].get(name),
                          "module_budget": budget["modules"].get(name, {})})
    wall = _int(run.get("wall_s"))
    make_test = read_keyvalues(os.path.join(logs, "make-test"))
    make_test_s = None
    # scripts/make-test.sh runs the checks beside the scenarios and records their own time (older runs: before them)
    checks_s = _int(make_test.get("checks_s"))
    mt_start, mt_end = _int(make_test.get("start_epoch")), _int(make_test.get("end_epoch"))
    run_start, run_end = _int(run.get("start_epoch")), _int(run.get("end_epoch"))
    # Only a `make test` that contains this molecule run, and that got to its end.
    if None not in (mt_start, mt_end, run_start, run_end) and mt_start <= run_start and run_end <= mt_end:
        make_test_s = mt_end - mt_start
    present = existing_scenarios(root)
    run_names = {s["name"] for s in scenarios}
    full = bool(scenarios) and (run.get("selection") == "all" or set(present) <= run_names)
    return {"run": run, "budget": budget, "scenarios": scenarios, "wall": wall, "full": full, "present": present,
            "make_test": make_test_s, "checks": checks_s if make_test_s is not None else None,
            "stale_budget": sorted(set(budget["scenarios"]) - set(present)),
            "no_budget": sorted(n for n in run_names if n not in budget["scenarios"])}


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# -------------------------------------------------------------------------------------------------------- reporting
def pct(seconds, budget):
    return f"{100 * seconds / budget:.0f}%" if budget else "no budget"


def fmt_duration(seconds):
    """'17 min 29 s' (or '45 s', '30 min')."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")


def stage_columns(scenarios):
    seen = []
    for s in scenarios:
        for action in s["stages"]["order"]:
            if action not in seen:
                seen.append(action)
    return [a for a in STAGE_ORDER if a in seen] + [a for a in seen if a not in STAGE_ORDER]


def table(rows, right=()):
    """Plain text columns; the columns whose index is in `right` are right-aligned."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def verdicts(data):
    """[(over: bool, text)] for the molecule wall time (or the scenarios run, on a partial run), make test, and
    every scenario and module over its budget."""
    out = []
    budget = data["budget"]
    if data["full"] and data["wall"] is not None:
        if budget["molecule"]:
            over = data["wall"] > budget["molecule"]
            out.append((over, f"molecule wall time {data['wall']} s of {budget['molecule']} s "
                              f"({pct(data['wall'], budget['molecule'])})"))
        else:
            out.append((False, f"molecule wall time {data['wall']} s (no budget)"))
    elif data["scenarios"]:
        timed = [s for s in data["scenarios"] if s["budget"]]
        if len(timed) > 1:   # one scenario has its own line below
            spent, allowed = sum(s["seconds"] for s in timed), sum(s["budget"] for s in timed)
            out.append((spent > allowed, f"the scenarios run: {spent} s of their {allowed} s "
                                         f"({pct(spent, allowed)}; partial run, the molecule budget is for all)"))
    if data["make_test"] is not None:
        allowed = budget["make_test"]
        out.append((bool(allowed) and data["make_test"] > allowed,
                    f"make test {data['make_test']} s of {allowed} s ({pct(data['make_test'], allowed)})"
                    if allowed else f"make test {data['make_test']} s (no budget)"))
    for s in data["scenarios"]:
        if s["budget"] and s["seconds"] > s["budget"]:
            out.append((True, f"{s['name']} {s['seconds']} s of {s['budget']} s ({pct(s['seconds'], s['budget'])})"))
        for module, seconds in module_times(s):
            allowed = s["module_budget"].get(module)
            if allowed and seconds > allowed:
                out.append((True, f"{s['name']} {module} {seconds:.1f} s of {allowed} s ({pct(seconds, allowed)})"))
    return out


def module_times(scenario):
    junit = scenario["junit"]
    if not junit:
        return []
    return [(m, junit["modules"][m]["seconds"]) for m in junit["order"]]


def cpu_line(run):
    """Where the machine's CPU went during the run (scripts/molecule.sh's cpu_record at its start and end), or None."""
    def delta(key):
        start, end = _int(run.get(f"start_{key}")), _int(run.get(f"end_{key}"))
        return None if start is None or end is None or end < start else end - start
    busy, idle, nodes = delta("cpu_busy_s"), delta("cpu_idle_s"), delta("containers_cpu_s")
    if busy is None or idle is None or busy + idle == 0:
        return None
    line = (f"machine CPU during the run: {busy} s busy of {busy + idle} s ({pct(busy, busy + idle)} busy, every core "
            f"and everything on the machine counted)")
    if nodes is not None and nodes <= busy:
        line += (f"; the containers' own {nodes} s ({pct(nodes, busy)} of the busy time), the rest {busy - nodes} s "
                 f"(Ansible, molecule, pytest, docker's clients and anything else on the machine)")
    return line


def _cpu_cell(seconds):
    return "-" if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) else f"{seconds:.0f} s"


def scenario_cpu_lines(scenarios):
    """For each scenario with a CPU record of its verify (the shared clusters): where its CPU went, before verify
    and in it."""
    lines = []
    for s in scenarios:
        cpu = s.get("cpu") or {}
        records = cpu.get("records")
        if not records:
            continue
        parts = []
        controller = cpu.get("controller")
        verify = (records.get("end") or {}).get("controller_cpu_s")
        if isinstance(controller, int) and isinstance(verify, (int, float)) and verify <= controller:
            parts.append(f"controller {controller} s in all, {verify:.0f} s of it in verify and "
                         f"{controller - verify:.0f} s before and after it")
        elif isinstance(verify, (int, float)):
            parts.append(f"controller {verify:.0f} s in verify")
        before = (records.get("start") or {}).get("nodes_cpu_s")
        parts.append("containers " + ("unknown before verify" if not isinstance(before, (int, float))
                                      else f"{before:.0f} s before verify"))
        modules = records["modules"].values()
        known = [r["nodes_cpu_s"] for r in modules if isinstance(r.get("nodes_cpu_s"), (int, float))]
        unknown = sorted(r["module"] for r in modules if not isinstance(r.get("nodes_cpu_s"), (int, float)))
        line = f"  {s['name']} CPU: " + "; ".join(parts)
        line += f", {sum(known):.0f} s in the test modules"
        if unknown:
            line += f" (not counted: {', '.join(unknown)}, a node stopped or unreadable)"
        lines.append(line)
    return lines


FAILURES_NAMED = 10


def failure_lines(data):
    """One line per failed scenario, naming its failed tests (module::test) or, when none failed, the molecule stage
    it stopped in: the end of CI's output, which is all some readers of a run get, says what failed."""
    lines = []
    for s in data["scenarios"]:
        if s["result"] != "FAILED":
            continue
        junit = s["junit"]
        failed = [f"{m}::{t}" for m in (junit["order"] if junit else []) for t in junit["modules"][m]["failures"]]
        if failed:
            # the first few: a cluster whose every test failed would otherwise push the rest out of CI's output tail
            what = f"{len(failed)} test(s) failed: " + ", ".join(failed[:FAILURES_NAMED]) + (
                f" and {len(failed) - FAILURES_NAMED} more" if len(failed) > FAILURES_NAMED else "")
        else:
            states = s["stages"]["states"]
            stage = next((a for a in reversed(s["stages"]["order"]) if states.get(a) != "Successful"), None)
            what = f"in molecule's {stage} stage" if stage else "no failed test or stage found in its log"
        lines.append(f"molecule FAILED: {s['name']}: {what} (.cache/molecule-logs/{s['name']}.log)")
    return lines


def summary_lines(data):
    lines = []
    budget = data["budget"]
    results = verdicts(data)
    over = [text for is_over, text in results if is_over]
    under = [text for is_over, text in results if not is_over]
    if not data["scenarios"]:
        lines.append("time budget: no molecule run to report (.cache/molecule-logs/results is empty or absent)")
    elif over:
        lines.append("time budget: OVER: " + "; ".join(over))
        if under:
            lines.append("             within: " + "; ".join(under))
    else:
        lines.append("time budget: under: " + "; ".join(under or ["every scenario within its budget"]))
    if data["make_test"] is None and budget["make_test"]:
        lines.append(f"make test budget {budget['make_test']} s ({fmt_duration(budget['make_test'])}) on a quiet "
                     f"machine: not timed in this run (make test times itself)")
    return lines + failure_lines(data)


def report_lines(data, budget_path):
    run, budget = data["run"], data["budget"]
    lines = []
    head = "molecule time report"
    if run:
        more = run.get("jobs_in_verify")
        at_a_time = f"{run.get('jobs', '?')} at a time" + (
            f" ({more} while every running one is in verify)" if more and more != run.get("jobs") else "")
        if run.get("nice_step") not in (None, "0"):
            at_a_time += f", each next one {run['nice_step']} nice levels lower"
        head += (f": run {run.get('started', '?')} at {run.get('commit', '?')}, {at_a_time}, "
                 f"load {run.get('load_start', '?').split(' ')[0]} -> {run.get('load_end', '?').split(' ')[0]}")
    lines.append(head)
    lines.append(f"budget: {os.path.relpath(budget_path, ROOT)} (seconds; a report, not a test)")
    for warning in budget["warnings"]:
        lines.append(f"budget warning: {warning}")
    if not data["scenarios"]:
        lines.extend(summary_lines(data))
        return lines

    columns = stage_columns(data["scenarios"])
    rows = [["scenario", "result", "time", "budget", "%"] + columns + ["other", "ctl CPU"]]
    for s in data["scenarios"]:
        stages = s["stages"]
        cells = [s["name"], s["result"], f"{s['seconds']} s", f"{s['budget']} s" if s["budget"] else "-",
                 pct(s["seconds"], s["budget"])]
        if stages["stamped"]:
            for action in columns:
                seconds = stages["stages"].get(action)
                mark = "" if stages["states"].get(action, "Successful") in ("Successful", "Skipped") else "!"
                cells.append("-" if seconds is None else f"{seconds:.0f}{mark}")
            cells.append(f"{max(0.0, s['seconds'] - sum(stages['stages'].values())):.0f}")
        else:
            cells.extend(["?"] * len(columns) + ["?"])
        controller = s.get("cpu", {}).get("controller")
        cells.append("-" if controller is None else f"{controller} s")
        rows.append(cells)
    lines.append("")
    lines.append("scenarios (stages in s from the log: destroy is both destroys; other is molecule's own start-up;"
                 " ! did not succeed; ctl CPU: the CPU of molecule and all it ran on this machine, the containers'"
                 " own not counted but for the commands tests/support/bin/docker started in them):")
    lines.extend(table(rows, right=set(range(2, len(rows[0])))))
    unstamped = [s["name"] for s in data["scenarios"] if not s["stages"]["stamped"]]
    if unstamped:
        lines.append(f"  no stage times for {', '.join(unstamped)}: "
                     "log missing or not timestamped by scripts/molecule.sh")

    rows = [["scenario", "module", "tests", "time", "budget", "%", "ctl CPU", "nodes CPU"]]
    missing = []
    for s in data["scenarios"]:
        junit = s["junit"]
        if not junit:
            missing.append(s["name"])
            continue
        records = (s.get("cpu", {}).get("records") or {}).get("modules", {})
        for module in junit["order"]:
            mod = junit["modules"][module]
            allowed = s["module_budget"].get(module)
            tests = f"{mod['tests']}" + (f" ({mod['failed']} failed)" if mod["failed"] else "")
            record = records.get(module, {})
            rows.append([s["name"], module, tests, f"{mod['seconds']:.1f} s", f"{allowed} s" if allowed else "-",
                         pct(mod["seconds"], allowed), _cpu_cell(record.get("controller_cpu_s")),
                         _cpu_cell(record.get("nodes_cpu_s"))])
        if junit["session"] is not None:
            rows.append([s["name"], "(pytest in all)", "", f"{junit['session']:.1f} s", "", "", "", ""])
    lines.append("")
    lines.append("test modules (JUnit test case times summed per file: fixture setup and teardown included; CPU of the"
                 " shared cluster's modules, their resets included: ctl is pytest and all it ran on this machine,"
                 " nodes the scenario's containers, - unknown or not measured):")
    if len(rows) > 1:
        lines.extend(table(rows, right={2, 3, 4, 5, 6, 7}))
    lines.extend(scenario_cpu_lines(data["scenarios"]))
    if missing:
        lines.append(f"  no JUnit file for {', '.join(missing)} (verify did not run, or the verifier is not testinfra)")

    lines.append("")
    wall = data["wall"]
    if wall is not None:
        line = f"molecule wall time {wall} s ({fmt_duration(wall)}), {run.get('jobs', '?')} at a time"
        if data["full"]:
            line += f"; budget {budget['molecule']} s: {pct(wall, budget['molecule'])}" if budget["molecule"] else \
                "; no molecule budget"
        else:
            line += (f"; partial run ({len(data['scenarios'])} of {len(data['present'])} scenarios): "
                     f"the molecule budget ({budget['molecule']} s) is for all of them")
        lines.append(line)
    cpu = cpu_line(run)
    if cpu:
        lines.append(cpu)
    if data["make_test"] is not None:
        line = f"make test {data['make_test']} s ({fmt_duration(data['make_test'])})"
        if budget["make_test"]:
            line += f"; budget {budget['make_test']} s: {pct(data['make_test'], budget['make_test'])}"
        lines.append(line)
    if data["no_budget"]:
        lines.append(f"no budget for: {', '.join(data['no_budget'])} "
                     f"(add them to {os.path.relpath(budget_path, ROOT)})")
    if data["stale_budget"]:
        lines.append(f"budgeted, not in molecule/: {', '.join(data['stale_budget'])}")
    lines.extend(summary_lines(data))
    return lines


# ------------------------------------------------------------------------------------------------------ README table
def _row(*cells):
    return "| " + " | ".join(cells) + " |"


def _row_key(line):
    cells = line.strip().strip("|").split("|")
    return cells[0].strip() if cells else ""


def _when(run):
    return f"{run.get('started', '?')[:10]} at {run.get('commit', '?')}"


def generated_rows(data):
    """{first cell: row} for the rows the last run can write: `make test` (when make test timed itself),
    `make molecule` (a full run that passed) and one per passed scenario."""
    run, budget = data["run"], data["budget"]
    rows = {}
    passed = [s for s in data["scenarios"] if s["result"] == "passed"]
    longest = ", ".join(f"{s['name']} {s['seconds']} s" for s in sorted(passed, key=lambda s: -s["seconds"])[:4])
    all_passed = data["full"] and len(passed) == len(data["scenarios"])
    load = run.get("load_end", "?").split(" ")[0]
    if data["make_test"] is not None and data["wall"] is not None and all_passed:
        mt, wall = data["make_test"], data["wall"]
        of = f" of the {fmt_duration(budget['make_test'])} budget" if budget["make_test"] else ""
        scenarios = f"the {len(passed)} molecule scenarios {run.get('jobs', '?')} at a time {fmt_duration(wall)} ({wall} s)"
        if data.get("checks") is not None:
            parts = f"{scenarios}, and beside them lint, sanity, unit, integration and build checks " \
                    f"{fmt_duration(data['checks'])}"
        else:
            parts = f"lint, sanity, unit, integration and build checks {fmt_duration(mt - wall)}, {scenarios}"
        rows["`make test`"] = _row(
            "`make test`",
            f"{fmt_duration(mt)}{of} ({_when(run)}, load {load} at the end): {parts}",
            f"the longest scenarios: {longest}. For the edit loop: `make fast`, or `make molecule SCENARIOS=<one>`")
    if data["wall"] is not None and all_passed:
        wall = data["wall"]
        of = f" of the {fmt_duration(budget['molecule'])} budget" if budget["molecule"] else ""
        rows["`make molecule`"] = _row(
            "`make molecule`",
            f"{fmt_duration(wall)} ({wall} s){of}, {len(passed)} scenarios {run.get('jobs', '?')} at a time "
            f"({_when(run)}, load {load} at the end)",
            f"the longest: {longest}; each scenario below")
    alone = len(data["scenarios"]) == 1 or run.get("jobs") == "1"
    for s in passed:
        of = f" of {s['budget']} s ({pct(s['seconds'], s['budget'])})" if s["budget"] else " (no budget)"
        how = "alone" if alone else f"{run.get('jobs', '?')} at a time"
        notes = []
        stages = s["stages"]
        if stages["stamped"]:
            notes.append(", ".join(f"{a} {stages['stages'][a]:.0f} s" for a in stage_columns([s])))
        if s["junit"]:
            notes.append("tests: " + ", ".join(f"{m} {t:.1f} s" for m, t in module_times(s)))
        rows[f"`molecule/{s['name']}`"] = _row(f"`molecule/{s['name']}`",
                                               f"{s['seconds']} s{of}, {how} ({_when(run)}, load {load} at the end)",
                                               "; ".join(notes) or "-")
    return rows


def markdown_table(data, old_lines=()):
    """README's time table: the header, the rows the generator does not own (`make lab`, kept as they are), then
    `make test`, `make molecule` and a row per scenario: written from the last run where it has them, else kept
    (a scenario row only while molecule/<name> exists)."""
    old = {}
    foreign = []
    for line in old_lines:
        if not line.strip().startswith("|"):
            continue
        key = _row_key(line)
        if key in ("command", "") or set(key) <= set("-: "):
            continue
        if key in GENERATED_KEYS or key.startswith("`molecule/"):
            old[key] = line.rstrip("\n")
        else:
            foreign.append(line.rstrip("\n"))
    new = generated_rows(data)
    merged = {**old, **new}
    present = set(data["present"])
    lines = [_row("command", "measured here", "notes"), _row("---", "---", "---")] + foreign
    for key in GENERATED_KEYS:
        if key in merged:
            lines.append(merged[key])
    for key in sorted(k for k in merged if k.startswith("`molecule/")):
        if key[len("`molecule/"):-1] in present:
            lines.append(merged[key])
    return lines


def write_readme(path, data):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find(BEGIN)
    end = text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no '{BEGIN} ... -->' line followed by '{END}'")
    body_start = text.index("\n", start) + 1
    old_lines = text[body_start:end].splitlines()
    table_lines = markdown_table(data, old_lines)
    new_text = text[:body_start] + "\n".join(table_lines) + "\n" + text[end:]
    if new_text != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new_text)
    return table_lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--logs", default=os.path.join(ROOT, ".cache", "molecule-logs"),
                        help="the run's files (default: .cache/molecule-logs)")
    parser.add_argument("--budget", default=os.path.join(ROOT, "molecule", "budget.yml"),
                        help="the budget (default: molecule/budget.yml)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--summary", action="store_true", help="only the budget lines")
    mode.add_argument("--markdown", action="store_true", help="README's time table on stdout")
    mode.add_argument("--readme", nargs="?", const=os.path.join(ROOT, "README.md"), metavar="FILE",
                      help="write README's time table between its markers (default: README.md)")
    args = parser.parse_args(argv)
    data = collect(args.logs, args.budget)
    if args.readme:
        lines = write_readme(args.readme, data)
        print(f"{os.path.relpath(args.readme)}: time table written from the last run ({len(lines) - 2} rows)")
    elif args.markdown:
        readme = os.path.join(ROOT, "README.md")
        old = []
        if os.path.exists(readme):
            with open(readme, encoding="utf-8") as f:
                text = f.read()
            if BEGIN in text and END in text:
                old = text[text.index("\n", text.index(BEGIN)) + 1:text.index(END)].splitlines()
        print("\n".join(markdown_table(data, old)))
    elif args.summary:
        print("\n".join(summary_lines(data)))
    else:
        print("\n".join(report_lines(data, args.budget)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
