"""The usage report: slurmctld's QOS counters (captured from Slurm 22.05 and 24.11), sreport, periods, the table."""

import datetime
import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _team_usage as usage

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")
TEAMS = [{"name": "development", "period": "month", "gpu_hours": 5000, "max_concurrent": 8,
          "members": [{"name": "bob", "default": False}, {"name": "carol", "default": False}]},
         {"name": "research", "period": "month", "gpu_hours": 20000, "max_concurrent": 16,
          "members": [{"name": "alice", "default": False}]}]


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_assoc_mgr_22_05():
    qos = usage.parse_assoc_mgr_qos(fixture("assoc_mgr_qos_22.05.txt"))
    assert sorted(qos) == ["development", "extra", "normal", "research"]
    assert qos["research"]["grp_tres"]["gres/gpu"] == (16, 4)
    assert qos["research"]["grp_tres_mins"]["gres/gpu"] == (1200000, 2)
    assert qos["research"]["usage_raw"] == 31.0
    assert qos["normal"]["grp_tres"]["gres/gpu"] == (None, 0)


def test_assoc_mgr_24_11():
    qos = usage.parse_assoc_mgr_qos(fixture("assoc_mgr_qos_24.11.txt"))
    assert qos["development"]["grp_tres_mins"]["gres/gpu"] == (300000, 0)
    assert qos["research"]["grp_tres"]["gres/gpumem"] == (None, 0)


@pytest.mark.parametrize("text", ["QOS=a(1) UsageRaw=x GrpTRES= GrpTRESMins= GrpTRESRunMins=",
                                  "QOS=a(1) UsageRaw=0 GrpTRES=gres/gpu=lots GrpTRESMins= GrpTRESRunMins=",
                                  "QOS=a(1) UsageRaw=0",
                                  "something else entirely"])
def test_assoc_mgr_garbage(text):
    with pytest.raises(usage.UsageError):
        usage.parse_assoc_mgr_qos(text)


def test_assoc_mgr_empty():
    assert usage.parse_assoc_mgr_qos("") == {}


def test_sreport():
    text = "research||gres/gpu|180\nresearch|alice|gres/gpu|120\nresearch|carol|gres/gpu|60\n" \
           "development||gres/gpu|0\n"
    assert usage.parse_sreport_users(text) == {"research": {"": 180, "alice": 120, "carol": 60},
                                               "development": {"": 0}}
    with pytest.raises(usage.UsageError):
        usage.parse_sreport_users("research|alice|gres/gpu|many\n")
    with pytest.raises(usage.UsageError):
        usage.parse_sreport_users("research\n")


def test_period_start():
    now = datetime.datetime(2026, 11, 26, 15, 4, 5)      # a Thursday
    assert usage.period_start("month", now) == datetime.datetime(2026, 11, 1)
    assert usage.period_start("week", now) == datetime.datetime(2026, 11, 23)
    assert usage.period_start("day", now) == datetime.datetime(2026, 11, 26)
    with pytest.raises(usage.UsageError):
        usage.period_start("year", now)


def test_report_and_table():
    qos = usage.parse_assoc_mgr_qos(fixture("assoc_mgr_qos_22.05.txt"))
    qos["research"]["grp_tres_mins"]["gres/gpu"] = (1200000, 300000)
    report = usage.team_report(TEAMS + [{"name": "ghost", "period": None, "gpu_hours": None, "max_concurrent": None}],
                               qos, {"research": {"alice": 90}}, {"research": "2026-11-01T00:00:00"})
    research = report[1]
    assert research["used_gpu_hours"] == 5000.0 and research["remaining_gpu_hours"] == 15000.0
    assert research["used_percent"] == 25.0 and research["gpus_in_use"] == 4
    assert research["members"] == [{"user": "alice", "gpu_hours": 1.5}]
    assert research["since"] == "2026-11-01T00:00:00"
    assert research["limit_in_slurm"] == {"gpu_minutes": 1200000, "max_concurrent": 16}
    assert report[2]["found"] is False and report[2]["used_gpu_hours"] is None
    table = usage.render_table(report)
    assert table[0].split() == ["team", "period", "budget", "GPU-h", "used", "GPU-h", "used", "%", "left", "GPU-h",
                                "GPUs", "now"]
    assert table[3].split() == ["research", "month", "20000", "5000.0", "25.0%", "15000.0", "4/16"]
    assert table[4].split() == ["ghost", "-", "-", "-", "-", "-", "-/-"]
    assert "  research/alice: 1.5" in table
    assert table[-1] == "no QOS in slurmctld for: ghost (run the team_quota role)"
