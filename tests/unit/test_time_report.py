"""scripts/time-report.py: molecule's stages timed from a timestamped log, test modules from JUnit files, everything
against the budget, and README's time table written between its markers (synthetic runs in tmp_path)."""

import importlib.util
import os
import re
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("time_report", os.path.join(ROOT, "scripts", "time-report.py"))
tr = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tr)

BUDGET = """\
---
make_test: 1800
molecule: 600
scenarios:
  alpha: 100
  beta: 50
modules:
  alpha:
    test_one.py: 10
    test_two: 1
"""


def stamped(scenario, stages, start=0.5):
    """A log as scripts/molecule.sh writes it: [(action, seconds, state)], each stage's lines stamped."""
    t = start
    lines = [f"{t:8.1f} INFO     Found config file .config/molecule/config.yml"]
    for action, seconds, state in stages:
        lines.append(f"{t:8.1f} INFO     [{scenario} > {action}] Executing")
        if action == "verify":
            lines.append(f"{t:8.1f} INFO     [{scenario} > verify] Executing Testinfra tests found in tests/...")
        lines.append(f"{t + seconds / 2:8.1f} TASK [something] ****")
        t += seconds
        if state:
            lines.append(f"{t:8.1f} INFO     [{scenario} > {action}] Executed: {state}")
    return "\n".join(lines) + "\n"


def junit(cases, suite_time=None):
    """[(classname, name, time, outcome)] as pytest's xunit2 JUnit file."""
    body = []
    for classname, name, time, outcome in cases:
        inner = {"failed": "<failure message='x'/>", "skipped": "<skipped message='s'/>"}.get(outcome, "")
        body.append(f'<testcase classname="{classname}" name="{name}" time="{time}">{inner}</testcase>')
    total = suite_time if suite_time is not None else sum(c[2] for c in cases) + 1
    return (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="{len(cases)}" '
            f'time="{total}">{"".join(body)}</testsuite></testsuites>')


def make_run(tmp_path, results, logs=None, junits=None, run=None, scenarios=("alpha", "beta", "gamma"),
             budget=BUDGET, make_test=None):
    """A project root with molecule/<scenario>/molecule.yml and the files of one run in .cache/molecule-logs."""
    root = tmp_path / "root"
    for name in scenarios:
        (root / "molecule" / name).mkdir(parents=True)
        (root / "molecule" / name / "molecule.yml").write_text("---\n")
    (root / "molecule" / "budget.yml").write_text(budget)
    logdir = root / ".cache" / "molecule-logs"
    logdir.mkdir(parents=True)
    (logdir / "results").write_text("".join(
        f"{name:<24} {result}  {seconds:4d} s\n" for name, result, seconds in results))
    run_values = {"started": "2025-12-01T10:00:00Z", "start_epoch": "1000", "commit": "abc1234", "jobs": "2",
                  "load_start": "0.5 0.4 0.3", "selection": "all", "wall_s": "150", "end_epoch": "1150",
                  "load_end": "1.5 1.0 0.8"}
    run_values.update(run or {})
    (logdir / "run").write_text("".join(f"{k}={v}\n" for k, v in run_values.items() if v is not None))
    for name, text in (logs or {}).items():
        (logdir / f"{name}.log").write_text(text)
    for name, text in (junits or {}).items():
        (logdir / f"{name}.junit.xml").write_text(text)
    if make_test:
        (logdir / "make-test").write_text("".join(f"{k}={v}\n" for k, v in make_test.items()))
    return root, logdir


def collect(root, logdir):
    return tr.collect(str(logdir), str(root / "molecule" / "budget.yml"), root=str(root))


ALPHA_LOG = stamped("alpha", [("destroy", 2, "Successful"), ("create", 10, "Successful"),
                              ("converge", 40, "Successful"), ("verify", 20, "Successful"),
                              ("destroy", 3, "Successful")])
ALPHA_JUNIT = junit([("molecule.alpha.tests.test_one", "test_a[ansible://x]", 4.5, "passed"),
                     ("molecule.alpha.tests.test_one.TestClass", "test_b", 7.0, "failed"),
                     ("molecule.alpha.tests.test_two", "test_c", 0.25, "skipped")], suite_time=13.0)


# ------------------------------------------------------------------------------------------------------ the log
def test_stages_are_timed_from_the_markers_and_both_destroys_are_summed(tmp_path):
    log = tmp_path / "alpha.log"
    log.write_text(ALPHA_LOG)
    info = tr.read_stages(str(log), "alpha")
    assert info["stamped"]
    assert info["order"] == ["destroy", "create", "converge", "verify"]
    assert info["stages"] == pytest.approx({"destroy": 5, "create": 10, "converge": 40, "verify": 20})
    assert set(info["states"].values()) == {"Successful"}


def test_a_stage_that_never_finished_runs_to_the_next_start_or_the_last_line(tmp_path):
    log = tmp_path / "alpha.log"
    log.write_text(stamped("alpha", [("create", 10, "Successful"), ("converge", 30, None)])
                   + "    45.0 fatal: [x]: FAILED!\n"
                   + stamped("alpha", [("destroy", 5, "Successful")], start=50.0))
    info = tr.read_stages(str(log), "alpha")
    assert info["stages"] == pytest.approx({"create": 10, "converge": 50 - 10.5, "destroy": 5})
    assert info["states"]["converge"] == "unfinished"
    log.write_text(stamped("alpha", [("create", 10, "Successful"), ("converge", 30, None)]) + "    60.0 killed\n")
    info = tr.read_stages(str(log), "alpha")
    assert info["stages"]["converge"] == pytest.approx(60 - 10.5)


def test_other_scenarios_markers_and_the_verifier_message_start_no_stage(tmp_path):
    log = tmp_path / "alpha.log"
    log.write_text("     1.0 INFO     [beta > create] Executing\n"
                   "     2.0 INFO     [alpha > verify] Executing\n"
                   "     3.0 INFO     [alpha > verify] Executing Testinfra tests found in /x/tests/...\n"
                   "     9.0 INFO     [alpha > verify] Executed: Successful\n")
    info = tr.read_stages(str(log), "alpha")
    assert info["stages"] == pytest.approx({"verify": 7.0})


def test_a_log_without_timestamps_has_no_stage_times(tmp_path):
    log = tmp_path / "alpha.log"
    log.write_text("INFO     [alpha > create] Executing\nINFO     [alpha > create] Executed: Successful\n")
    assert tr.read_stages(str(log), "alpha")["stamped"] is False
    assert tr.read_stages(str(tmp_path / "absent.log"), "alpha")["stages"] == {}


def test_molecule_sh_stamps_lines_the_way_the_report_reads_them(tmp_path):
    """The stamp() function of scripts/molecule.sh itself, on a few lines (one without a newline at the end)."""
    script = open(os.path.join(ROOT, "scripts", "molecule.sh"), encoding="utf-8").read()
    func = re.search(r"^stamp\(\) \{\n.*?^\}\n", script, re.S | re.M).group(0)
    out = subprocess.run(
        ["bash", "-c", func + 't0=${EPOCHREALTIME/[.,]/}; t0=$((t0 - 12300000)); '
                              'printf "INFO     [alpha > create] Executing\\n  indented\\nlast" | stamp "$t0"'],
        capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 3
    assert [tr.STAMPED.match(line).group(2) for line in lines] == [
        "INFO     [alpha > create] Executing", "  indented", "last"]
    assert 12.3 <= float(tr.STAMPED.match(lines[0]).group(1)) < 20


def _molecule_sh_function(name):
    script = open(os.path.join(ROOT, "scripts", "molecule.sh"), encoding="utf-8").read()
    return re.search(r"^%s\(\) \{\n.*?^\}\n" % name, script, re.S | re.M).group(0)


def test_molecule_sh_gives_a_scenarios_containers_the_cpu_weight_of_its_nice_level():
    """cpu_shares() of scripts/molecule.sh: the kernel's weight table (1024 at nice 0, 655 at 2, 110 at 10)."""
    loop = "for n in 0 2 4 10 40; do cpu_shares $n; done"
    out = subprocess.run(["bash", "-c", _molecule_sh_function("cpu_shares") + loop],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1024", "655", "419", "110", "2"]


def test_molecule_sh_names_the_containers_of_a_scenario_from_the_base_config(tmp_path):
    """share_containers() of scripts/molecule.sh, with docker a stand-in that records its arguments: a scenario
    without platforms of its own gets the base config's, named for the scenario; nothing happens before the log shows
    the prepare stage, nor for the normal weight."""
    root = tmp_path / "repo"
    (root / "molecule" / "alpha").mkdir(parents=True)
    (root / "molecule" / "alpha" / "molecule.yml").write_text("provisioner: {name: ansible}\n")
    (root / ".config" / "molecule").mkdir(parents=True)
    (root / ".config" / "molecule" / "config.yml").write_text(
        "platforms:\n  - name: deb12-${MOLECULE_SCENARIO_NAME}\n  - name: deb13-${MOLECULE_SCENARIO_NAME}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\necho \"$@\" >> %s\n" % (tmp_path / "docker.args"))
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "alpha.log"
    log.write_text("INFO     [alpha > prepare] Executing\n")
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    func = _molecule_sh_function("share_containers")
    subprocess.run(["bash", "-c", func + 'share_containers alpha 1024 "$1"; share_containers alpha 655 "$1"', "-",
                    str(log)], cwd=str(root), env=env, check=True, timeout=60)
    assert (tmp_path / "docker.args").read_text() == "update --cpu-shares 655 deb12-alpha deb13-alpha\n"


# ----------------------------------------------------------------------------------------------------- JUnit
def test_junit_times_are_summed_per_module_and_outcomes_counted(tmp_path):
    path = tmp_path / "alpha.junit.xml"
    path.write_text(ALPHA_JUNIT)
    result = tr.read_junit(str(path))
    assert result["order"] == ["test_one.py", "test_two.py"]
    assert result["modules"]["test_one.py"] == {"seconds": pytest.approx(11.5), "tests": 2, "failed": 1,
                                                "skipped": 0, "failures": ["test_b"]}
    assert result["modules"]["test_two.py"]["skipped"] == 1
    assert result["session"] == pytest.approx(13.0)


def test_junit_file_attribute_wins_and_a_broken_file_is_none(tmp_path):
    path = tmp_path / "x.junit.xml"
    path.write_text('<testsuite time="2"><testcase classname="a.b" file="tests/test_3_add_node.py" name="t" '
                    'time="2"/></testsuite>')
    assert tr.read_junit(str(path))["order"] == ["test_3_add_node.py"]
    path.write_text("<testsuites><testsuite")
    assert tr.read_junit(str(path)) is None
    assert tr.read_junit(str(tmp_path / "absent.xml")) is None


# ----------------------------------------------------------------------------------------------------- budget
def test_budget_is_read_and_wrong_entries_are_warnings(tmp_path):
    path = tmp_path / "budget.yml"
    path.write_text(BUDGET)
    budget = tr.read_budget(str(path))
    assert (budget["make_test"], budget["molecule"]) == (1800, 600)
    assert budget["scenarios"] == {"alpha": 100, "beta": 50}
    assert budget["modules"] == {"alpha": {"test_one.py": 10, "test_two.py": 1}}
    assert budget["warnings"] == []
    path.write_text("molecule: soon\nscenarios: {alpha: -1, beta: true, gamma: 30}\nextra: 1\n")
    budget = tr.read_budget(str(path))
    assert budget["molecule"] is None
    assert budget["scenarios"] == {"gamma": 30}
    assert len(budget["warnings"]) == 4
    assert tr.read_budget(str(tmp_path / "absent.yml"))["warnings"]


def test_the_projects_budget_file_reads_without_warnings():
    budget = tr.read_budget(os.path.join(ROOT, "molecule", "budget.yml"))
    assert budget["warnings"] == []
    assert budget["make_test"] == 3000    # 50 minutes on a quiet machine with warm caches
    assert budget["molecule"] and budget["molecule"] < budget["make_test"]


def test_the_shared_verifier_writes_the_junit_file_the_report_reads():
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml"), encoding="utf-8") as f:
        options = yaml.safe_load(f)["verifier"]["options"]
    assert options["junitxml"] == \
        "${MOLECULE_PROJECT_DIRECTORY}/.cache/molecule-logs/${MOLECULE_SCENARIO_NAME}.junit.xml"


# ----------------------------------------------------------------------------------------------------- report
def test_report_has_stages_modules_budgets_and_a_verdict(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80), ("gamma", "passed", 30), ("beta", "FAILED", 70)],
                            logs={"alpha": ALPHA_LOG}, junits={"alpha": ALPHA_JUNIT})
    data = collect(root, logdir)
    assert data["full"]
    text = "\n".join(tr.report_lines(data, str(root / "molecule" / "budget.yml")))
    rows = {line.split()[0]: line.split() for line in text.splitlines() if re.match(r"\w+\s+(passed|FAILED)\s", line)}
    assert rows["alpha"][:7] == ["alpha", "passed", "80", "s", "100", "s", "80%"]
    # destroy create converge verify, other = 80 - 75, and no controller CPU recorded (no alpha.cpu)
    assert rows["alpha"][7:] == ["5", "10", "40", "20", "5", "-"]
    assert rows["gamma"][5] == "no" and "no budget for: gamma" in text
    assert re.search(r"alpha\s+test_one.py\s+2 \(1 failed\)\s+11.5 s\s+10 s\s+115%", text)
    assert re.search(r"alpha\s+test_two.py\s+1\s+0.2 s\s+1 s\s+25%", text)
    assert "no JUnit file for beta, gamma" in text
    assert "molecule wall time 150 s (2 min 30 s), 2 at a time; budget 600 s: 25%" in text
    verdict = [line for line in text.splitlines() if line.startswith("time budget:")]
    assert verdict == ["time budget: OVER: alpha test_one.py 11.5 s of 10 s (115%); beta 70 s of 50 s (140%)"]


def test_report_is_under_budget_when_everything_is(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80), ("beta", "passed", 40), ("gamma", "passed", 1)])
    lines = tr.summary_lines(collect(root, logdir))
    assert lines[0] == "time budget: under: molecule wall time 150 s of 600 s (25%)"
    assert "not timed in this run" in lines[1]


def test_the_molecule_wall_time_over_its_budget_is_over(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)], run={"wall_s": "601", "selection": "all"})
    assert tr.summary_lines(collect(root, logdir))[0].startswith("time budget: OVER: molecule wall time 601 s")


def test_a_partial_run_compares_the_scenarios_it_ran(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 90), ("beta", "passed", 70)], run={"selection": "named"})
    data = collect(root, logdir)
    assert not data["full"]
    text = "\n".join(tr.report_lines(data, str(root / "molecule" / "budget.yml")))
    assert "partial run (2 of 3 scenarios)" in text
    assert "time budget: OVER: the scenarios run: 160 s of their 150 s (107%; partial run" in text
    root, logdir = make_run(tmp_path / "one", [("beta", "passed", 60)], run={"selection": "named"})
    assert tr.summary_lines(collect(root, logdir))[0] == "time budget: OVER: beta 60 s of 50 s (120%)"


def test_make_test_counts_only_when_it_contains_the_molecule_run(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)], make_test={"start_epoch": 900, "end_epoch": 2000})
    assert collect(root, logdir)["make_test"] == 1100
    assert "make test 1100 s of 1800 s (61%)" in tr.summary_lines(collect(root, logdir))[0]
    (logdir / "make-test").write_text("start_epoch=900\n")                       # make test did not get to its end
    assert collect(root, logdir)["make_test"] is None
    (logdir / "make-test").write_text("start_epoch=1100\nend_epoch=3000\n")      # another, later molecule run
    assert collect(root, logdir)["make_test"] is None


def test_no_run_is_said_not_an_error(tmp_path):
    root, logdir = make_run(tmp_path, [])
    (logdir / "run").unlink()
    assert tr.main(["--logs", str(logdir), "--budget", str(root / "molecule" / "budget.yml")]) == 0
    assert "no molecule run to report" in tr.summary_lines(collect(root, logdir))[0]


# ----------------------------------------------------------------------------------------------------- README
README = """\
# title

<!-- time-table:begin: written by scripts/time-report.py --readme -->
| command | measured here | notes |
| --- | --- | --- |
| `make lab` | 5 min by hand | kept |
| `make test` | 23 min by hand | old |
| `molecule/beta` | 44 s old | old beta |
| `molecule/gone` | 10 s old | a scenario since removed |
<!-- time-table:end -->

after
"""


def test_readme_rows_are_written_between_the_markers_and_the_others_kept(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80), ("beta", "FAILED", 70), ("gamma", "passed", 30)],
                            logs={"alpha": ALPHA_LOG}, junits={"alpha": ALPHA_JUNIT})
    readme = tmp_path / "README.md"
    readme.write_text(README)
    tr.write_readme(str(readme), collect(root, logdir))
    text = readme.read_text()
    assert text.startswith("# title\n\n<!-- time-table:begin") and text.endswith("<!-- time-table:end -->\n\nafter\n")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    keys = [tr._row_key(line) for line in rows]
    # make lab kept; make test not timed: kept; make molecule not written (a scenario failed); beta failed: its old
    # row kept; gone: dropped; alpha and gamma written.
    assert keys == ["`make lab`", "`make test`", "`molecule/alpha`", "`molecule/beta`", "`molecule/gamma`"]
    assert rows[0] == "| `make lab` | 5 min by hand | kept |"
    assert rows[1] == "| `make test` | 23 min by hand | old |"
    assert rows[2] == ("| `molecule/alpha` | 80 s of 100 s (80%), 2 at a time (2025-12-01 at abc1234, load 1.5 at the "
                       "end) | destroy 5 s, create 10 s, converge 40 s, verify 20 s; tests: test_one.py 11.5 s, "
                       "test_two.py 0.2 s |")
    assert rows[3] == "| `molecule/beta` | 44 s old | old beta |"
    assert rows[4].startswith("| `molecule/gamma` | 30 s (no budget), 2 at a time")


def readme_rows(tmp_path, make_test):
    """{first cell: row} of README's time table written from a full passing run of three scenarios."""
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80), ("beta", "passed", 40), ("gamma", "passed", 30)],
                            make_test=make_test)
    readme = tmp_path / "README.md"
    readme.write_text(README)
    tr.write_readme(str(readme), collect(root, logdir))
    return {tr._row_key(line): line for line in readme.read_text().splitlines() if line.startswith("| `")}


def test_readme_make_test_and_molecule_rows_come_from_a_full_passing_run(tmp_path):
    rows = readme_rows(tmp_path, {"start_epoch": 900, "end_epoch": 2300})
    assert rows["`make test`"].startswith(
        "| `make test` | 23 min 20 s of the 30 min budget (2025-12-01 at abc1234, load 1.5 at the end): lint, sanity,"
        " unit, integration and build checks 20 min 50 s, the 3 molecule scenarios 2 at a time 2 min 30 s (150 s) |")
    assert rows["`make molecule`"].startswith("| `make molecule` | 2 min 30 s (150 s) of the 10 min budget")
    assert "the longest: alpha 80 s, beta 40 s, gamma 30 s" in rows["`make molecule`"]


def test_readme_make_test_row_with_the_checks_beside_the_scenarios(tmp_path):
    """scripts/make-test.sh runs the checks beside the scenarios and records their own time: the row says so."""
    rows = readme_rows(tmp_path, {"start_epoch": 900, "checks_s": 500, "end_epoch": 1200})
    assert rows["`make test`"].startswith(
        "| `make test` | 5 min of the 30 min budget (2025-12-01 at abc1234, load 1.5 at the end): the 3 molecule "
        "scenarios 2 at a time 2 min 30 s (150 s), and beside them lint, sanity, unit, integration and build checks "
        "8 min 20 s |")


def test_readme_without_markers_is_refused(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)])
    readme = tmp_path / "README.md"
    readme.write_text("# no table\n")
    with pytest.raises(SystemExit, match="time-table:begin"):
        tr.write_readme(str(readme), collect(root, logdir))
    assert readme.read_text() == "# no table\n"


def test_the_projects_readme_has_the_markers_around_its_table():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    body = text[text.index(tr.BEGIN):text.index(tr.END)].splitlines()[1:]
    assert body[0] == "| command | measured here | notes |"
    assert all(line.startswith("|") for line in body)
    assert any(tr._row_key(line) == "`make lab`" for line in body)


@pytest.mark.parametrize("seconds, text", [(45, "45 s"), (60, "1 min"), (1049, "17 min 29 s"), (1800, "30 min")])
def test_durations(seconds, text):
    assert tr.fmt_duration(seconds) == text


def test_the_report_prints_from_the_command_line(tmp_path, capsys):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)], logs={"alpha": ALPHA_LOG})
    assert tr.main(["--logs", str(logdir), "--budget", str(root / "molecule" / "budget.yml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("molecule time report: run 2025-12-01T10:00:00Z at abc1234, 2 at a time, load 0.5 -> 1.5")
    assert len(re.findall(r"^alpha +passed +80 s", out, re.M)) == 1


def test_the_cpu_line_splits_the_busy_time_between_the_containers_and_the_rest(tmp_path):
    run = {"start_cpu_busy_s": 1000, "end_cpu_busy_s": 1300, "start_cpu_idle_s": 50, "end_cpu_idle_s": 150,
           "start_containers_cpu_s": 10, "end_containers_cpu_s": 130}
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)], run=run)
    text = "\n".join(tr.report_lines(collect(root, logdir), str(root / "molecule" / "budget.yml")))
    assert ("machine CPU during the run: 300 s busy of 400 s (75% busy, every core and everything on the machine "
            "counted); the containers' own 120 s (40% of the busy time), the rest 180 s") in text


def test_no_cpu_line_when_a_value_is_missing_or_unreadable(tmp_path):
    for run in ({}, {"start_cpu_busy_s": 1000, "end_cpu_busy_s": 1300, "start_cpu_idle_s": "-",
                     "end_cpu_idle_s": 150}):
        root, logdir = make_run(tmp_path / str(len(run)), [("alpha", "passed", 80)], run=run)
        text = "\n".join(tr.report_lines(collect(root, logdir), str(root / "molecule" / "budget.yml")))
        assert "machine CPU" not in text


# ----------------------------------------------------------------------------------------- CPU of scenarios and modules
CPU_RECORDS = "\n".join([
    '{"session": "start", "nodes_cpu_s": 900.4, "controller_cpu_s": 2.0}',
    '{"module": "test_one.py", "wall_s": 11.0, "controller_cpu_s": 6.4, "nodes_cpu_s": 3.2}',
    '{"module": "test_two.py", "wall_s": 1.0, "controller_cpu_s": 0.6, "nodes_cpu_s": null}',
    '{"module": "test_cut',   # a line cut short by a session that was killed
    '{"session": "end", "controller_cpu_s": 300.0}']) + "\n"


def test_the_cpu_of_the_scenario_and_of_each_module_is_reported(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80), ("beta", "passed", 40), ("gamma", "passed", 30)],
                            logs={"alpha": ALPHA_LOG}, junits={"alpha": ALPHA_JUNIT})
    (logdir / "alpha.cpu").write_text("controller_cpu_s=1200\n")
    (logdir / "alpha.cpu.jsonl").write_text(CPU_RECORDS)
    text = "\n".join(tr.report_lines(collect(root, logdir), str(root / "molecule" / "budget.yml")))
    assert re.search(r"^alpha +passed +80 s .* 5 +1200 s$", text, re.M)
    assert re.search(r"^beta +passed +40 s .* -$", text, re.M)
    assert re.search(r"alpha\s+test_one.py\s+2 \(1 failed\)\s+11.5 s\s+10 s\s+115%\s+6 s\s+3 s$", text, re.M)
    # the nodes' CPU of a module during which a node stopped is unknown, never a guess
    assert re.search(r"alpha\s+test_two.py\s+1\s+0.2 s\s+1 s\s+25%\s+1 s\s+-$", text, re.M)
    assert ("  alpha CPU: controller 1200 s in all, 300 s of it in verify and 900 s before and after it; containers "
            "900 s before verify, 3 s in the test modules (not counted: test_two.py, a node stopped or unreadable)"
            ) in text


def test_cpu_records_of_a_session_that_never_started_say_unknown(tmp_path):
    root, logdir = make_run(tmp_path, [("alpha", "passed", 80)], logs={"alpha": ALPHA_LOG},
                            junits={"alpha": ALPHA_JUNIT})
    (logdir / "alpha.cpu.jsonl").write_text('{"session": "start", "nodes_cpu_s": null, "controller_cpu_s": 1}\n')
    text = "\n".join(tr.report_lines(collect(root, logdir), str(root / "molecule" / "budget.yml")))
    assert "  alpha CPU: containers unknown before verify, 0 s in the test modules" in text
    assert tr.read_cpu_records(str(logdir / "absent.cpu.jsonl")) is None


def test_molecule_sh_records_each_scenarios_controller_cpu_from_bash_times(tmp_path):
    """The awk program of scripts/molecule.sh, run on the output of bash's `times` as the script runs it."""
    with open(os.path.join(ROOT, "scripts", "molecule.sh")) as handle:
        text = handle.read()
    program = re.search(r"awk '(NR == 2 .*?)' \"\$logs/\$s.times\"", text, re.S).group(1)
    (tmp_path / "times").write_text("0m0.011s 0m0.004s\n1m2.500s 0m10.400s\n")
    out = subprocess.run(["awk", program, str(tmp_path / "times")], capture_output=True, text=True, check=True)
    assert out.stdout == "controller_cpu_s=73\n"


def test_the_summary_names_what_failed(tmp_path):
    beta_log = stamped("beta", [("destroy", 2, "Successful"), ("create", 10, "Successful"),
                                ("converge", 40, "Failed: Ansible return code was 2")])
    root, logdir = make_run(tmp_path, [("alpha", "FAILED", 80), ("beta", "FAILED", 52), ("gamma", "passed", 1)],
                            logs={"alpha": ALPHA_LOG, "beta": beta_log}, junits={"alpha": ALPHA_JUNIT})
    lines = tr.summary_lines(collect(root, logdir))
    assert lines[-2:] == [
        "molecule FAILED: alpha: 1 test(s) failed: test_one.py::test_b (.cache/molecule-logs/alpha.log)",
        "molecule FAILED: beta: in molecule's converge stage (.cache/molecule-logs/beta.log)"]
    root, logdir = make_run(tmp_path / "ok", [("alpha", "passed", 80)])
    assert not [line for line in tr.summary_lines(collect(root, logdir)) if "FAILED" in line]


def test_the_summary_names_the_first_ten_failed_tests_and_counts_the_rest(tmp_path):
    cases = [("molecule.alpha.tests.test_one", "test_%02d" % i, 1.0, "failed") for i in range(12)]
    root, logdir = make_run(tmp_path, [("alpha", "FAILED", 80)], logs={"alpha": ALPHA_LOG},
                            junits={"alpha": junit(cases)})
    line = tr.summary_lines(collect(root, logdir))[-1]
    assert line.startswith("molecule FAILED: alpha: 12 test(s) failed: test_one.py::test_00, ")
    assert "test_one.py::test_09 and 2 more (" in line and "test_10" not in line
