"""slurm_team_usage main() on captured scontrol output (tests/unit/fixtures/slurm) and sreport lines, through a
patched run_command."""

import datetime
import os
import re

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import slurm_team_usage
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")
TEAMS = [{"name": "development", "period": "month", "gpu_hours": 5000, "max_concurrent": 8,
          "members": [{"name": "bob", "default": False}, {"name": "carol", "default": False}]},
         {"name": "research", "period": "week", "gpu_hours": 20000, "max_concurrent": 16, "members": ["alice"]}]
SREPORT = {"development": "development||gres/gpu|600\ndevelopment|bob|gres/gpu|540\ndevelopment|carol|gres/gpu|60\n",
           "research": "research||gres/gpu|90\nresearch|alice|gres/gpu|90\n"}


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def gpu_tres(line, key):
    """(limit or None, used) of gres/gpu in the ``key=`` field of an assoc_mgr line, read with a regex."""
    field = re.search(r"\b%s=(\S*)" % key, line).group(1)
    limit, used = re.search(r"(?:^|,)gres/gpu=(\w+)\((\d+)\)", field).groups()
    return (None if limit == "N" else int(limit)), int(used)


def qos_line(text, name):
    return [line for line in text.splitlines() if line.startswith("QOS=%s(" % name)][0]


class FakeSlurm(object):
    """scontrol show assoc_mgr and sreport answering with ``assoc`` and the SREPORT lines of the accounts asked."""

    def __init__(self, assoc=(0, fixture("assoc_mgr_qos_22.05.txt"), ""), sreport=None):
        self.assoc = assoc
        self.sreport = sreport
        self.calls = []

    def __call__(self, argv, environ_update=None, **_kwargs):
        assert environ_update == {"LC_ALL": "C"}
        self.calls.append(list(argv))
        if argv[0] == "/usr/bin/scontrol":
            assert argv[1:] == ["-o", "show", "assoc_mgr", "flags=qos"]
            return self.assoc
        assert argv[0] == "/usr/bin/sreport"
        if self.sreport is not None:
            return self.sreport
        accounts = [a for a in argv if a.startswith("accounts=")][0][len("accounts="):].split(",")
        return 0, "".join(SREPORT[a] for a in accounts), ""


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("capture", ["assoc_mgr_qos_22.05.txt", "assoc_mgr_qos_24.11.txt"])
def test_report_is_the_counters_of_the_capture(tmp_path, capture, check):
    (tmp_path / "week.last-reset").write_text("2026-11-23T06:00:00+0100\n")
    slurm = FakeSlurm(assoc=(0, fixture(capture), ""))
    result = run_module(slurm_team_usage, {"teams": TEAMS, "state_dir": str(tmp_path)}, check=check,
                        run_command=slurm)
    assert result["failed"] is False and result["changed"] is False
    text = fixture(capture)
    by_team = {entry["team"]: entry for entry in result["report"]}
    for team in TEAMS:
        entry, line = by_team[team["name"]], qos_line(text, team["name"])
        limit_minutes, used_minutes = gpu_tres(line, "GrpTRESMins")
        max_gpus, in_use = gpu_tres(line, "GrpTRES")
        assert entry["found"] is True and entry["budget_gpu_hours"] == team["gpu_hours"]
        assert entry["limit_in_slurm"] == {"gpu_minutes": limit_minutes, "max_concurrent": max_gpus}
        assert entry["gpus_in_use"] == in_use and entry["used_gpu_hours"] == round(used_minutes / 60.0, 2)
        assert entry["remaining_gpu_hours"] == round((limit_minutes - used_minutes) / 60.0, 2)
    assert by_team["research"]["since"] == "2026-11-23T06:00:00"                # the reset timer's record
    month = by_team["development"]["since"]                                      # no record: the period start
    assert month.endswith("-01T00:00:00") and month[:7] == result["generated_at"][:7]
    assert by_team["development"]["members"] == [{"user": "bob", "gpu_hours": 9.0}, {"user": "carol", "gpu_hours": 1.0}]
    assert by_team["research"]["members"] == [{"user": "alice", "gpu_hours": 1.5}]
    assert result["table"][0].split()[:2] == ["team", "period"] and all(isinstance(t, str) for t in result["table"])
    # one sreport per start time, in start order
    starts = [[a for a in call if a.startswith(("start=", "accounts="))] for call in slurm.calls[1:]]
    assert sorted(starts) == sorted([["start=2026-11-23T06:00:00", "accounts=research"],
                                     ["start=" + month, "accounts=development"]])
    assert all(call[1:7] == ["-n", "-P", "-t", "minutes", "cluster", "AccountUtilizationByUser"]
               for call in slurm.calls[1:])


def test_without_members_only_scontrol_runs_and_a_missing_qos_is_shown():
    slurm = FakeSlurm()
    teams = TEAMS + [{"name": "ghost", "period": None}]
    result = run_module(slurm_team_usage, {"teams": teams, "members": False}, run_command=slurm)
    assert len(slurm.calls) == 1 and result["report"][2]["found"] is False
    assert result["table"][-1] == "no QOS in slurmctld for: ghost (run the team_quota role)"
    assert [m["gpu_hours"] for m in result["report"][0]["members"]] == [0.0, 0.0]


@pytest.mark.parametrize("slurm,message", [
    (FakeSlurm(assoc=(1, "", "slurm_load_assoc_mgr_info error: Unable to contact slurm controller")),
     "scontrol show assoc_mgr failed (rc 1): slurm_load_assoc_mgr_info error: Unable to contact slurm controller"),
    (FakeSlurm(assoc=(0, "something else entirely\n", "")), "no QOS records in the output of scontrol show assoc_mgr"),
    (FakeSlurm(assoc=(0, "QOS=research(2) UsageRaw=x GrpTRES= GrpTRESMins= GrpTRESRunMins=\n", "")),
     "QOS research: UsageRaw is 'x'"),
    (FakeSlurm(sreport=(1, "", "sreport: error: Problem talking to the database")),
     "sreport failed (rc 1): sreport: error: Problem talking to the database"),
    (FakeSlurm(sreport=(0, "research|alice|gres/gpu|many\n", "")), "sreport: used is 'many'"),
])
def test_a_failing_or_garbled_tool_fails_with_its_message(tmp_path, slurm, message):
    result = run_module(slurm_team_usage, {"teams": TEAMS, "state_dir": str(tmp_path)}, run_command=slurm)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert "report" not in result


@pytest.mark.parametrize("teams,message", [
    ([{"period": "month"}], "teams[0] has no name: give the teams list of the team_quotas filter"),
    ([{"name": "a", "period": "year"}], "teams[0] (a): period is 'year'"),
])
def test_bad_teams_fail_before_any_command(teams, message):
    result = run_module(slurm_team_usage, {"teams": teams})      # no run_command: a command would fail the test
    assert result["failed"] and result["msg"] == message


def test_without_scontrol(tmp_path):
    result = run_module(slurm_team_usage, {"teams": TEAMS, "state_dir": str(tmp_path)}, missing=("scontrol",))
    assert result["failed"] and "scontrol" in result["msg"]


def test_an_unreadable_reset_record_counts_from_the_period_start(tmp_path):
    (tmp_path / "week.last-reset").write_text("yesterday\n")
    result = run_module(slurm_team_usage, {"teams": TEAMS, "state_dir": str(tmp_path)}, run_command=FakeSlurm())
    since = datetime.datetime.strptime(result["report"][1]["since"], "%Y-%m-%dT%H:%M:%S")
    now = datetime.datetime.strptime(result["generated_at"], "%Y-%m-%dT%H:%M:%S")
    assert since.weekday() == 0 and since.time() == datetime.time(0) and 0 <= (now - since).days < 7


def test_prices_add_cost_from_sreport_per_gpu_type(tmp_path):
    slurm = FakeSlurm(sreport=(0, fixture("sreport_tres_by_type.txt"), ""))
    result = run_module(slurm_team_usage, {"teams": TEAMS, "state_dir": str(tmp_path), "members": False,
                                           "prices": {"a100": 1.2, "h100": 2.5}, "currency": "USD",
                                           "gpu_types": ["a100", "h100"]}, run_command=slurm)
    assert result["failed"] is False, result.get("msg")
    assert all("gres/gpu,gres/gpu:a100,gres/gpu:h100" in call for call in slurm.calls[1:])
    by_team = dict((e["team"], e) for e in result["report"])
    assert by_team["development"]["cost"] == 10 * 1.2                  # 600 GPU-minutes of a100 = 10 GPU-hours
    assert by_team["research"]["cost"] == round(0.5 * 1.2 + 1.0 * 2.5, 2)
    assert by_team["research"]["currency"] == "USD"
    assert result["csv"].splitlines()[0].startswith("team,period,since,")
    assert len(result["csv"].splitlines()) == 3


def test_a_negative_price_fails_before_any_command():
    result = run_module(slurm_team_usage, {"teams": TEAMS, "prices": {"a100": -1}})
    assert result["failed"] and result["msg"] == "prices.a100 is -1: a price per GPU-hour is a number, 0 or more"
