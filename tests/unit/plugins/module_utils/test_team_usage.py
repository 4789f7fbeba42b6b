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


# -- cost and off-peak billing (issue 22) -----------------------------------------------------------------------------

def test_sreport_tres_keeps_each_gpu_type():
    found = usage.parse_sreport_tres(fixture("sreport_tres_by_type.txt"))
    assert found["research"][""] == {"gres/gpu": 90, "gres/gpu:a100": 30, "gres/gpu:h100": 60}
    assert usage.parse_sreport_users(fixture("sreport_tres_by_type.txt"))["development"] == {
        "": 600, "bob": 540, "carol": 60}
    assert usage.sreport_tres(["h100", "a100", "a100", ""]) == "gres/gpu,gres/gpu:a100,gres/gpu:h100"


@pytest.mark.parametrize("minutes,prices,cost,why", [
    ({"gres/gpu": 90, "gres/gpu:a100": 30, "gres/gpu:h100": 60}, {"a100": 1.2, "h100": 2.5}, 3.1, None),
    ({"gres/gpu": 600, "gres/gpu:a100": 600}, {"a100": 1.2, "h100": 2.5}, 12.0, None),
    ({"gres/gpu": 0}, {"a100": 1.2}, 0.0, None),                                   # read, and no use: 0
    ({"gres/gpu": 120}, {"a100": 1.2}, None, "no price for GPU type untyped"),     # GPUs of no listed type
    ({"gres/gpu": 120}, {"a100": 1.2, "": 0.5}, 1.0, None),                        # '' prices them
    ({"gres/gpu": 60, "gres/gpu:h100": 60}, {"a100": 1.2}, None, "no price for GPU type h100"),
    ({"gres/gpu": 10, "gres/gpu:a100": 60}, {"a100": 1.2}, None, "more typed GPU-minutes"),
    (None, {"a100": 1.2}, None, "usage not read"),                                 # unknown usage: unknown cost
    ({"gres/gpu": 60}, {}, None, "no prices"),
])
def test_cost_is_gpu_hours_times_price_or_unknown(minutes, prices, cost, why):
    got, reason = usage.cost_of(minutes, prices)
    assert got == cost
    assert (reason is None) if why is None else (why in reason)


def test_report_with_prices_and_billing_budget():
    qos = usage.parse_assoc_mgr_qos(fixture("assoc_mgr_qos_22.05.txt"))
    # An off-peak budget: GrpTRESMins=billing=<GPU-minutes x 1000>; 90 GPU-minutes at the full rate and 60 at 0.5.
    qos["research"]["grp_tres_mins"]["billing"] = (1200000 * 1000, 90 * 1000 + 60 * 500)
    teams = [dict(TEAMS[1], budget_tres="billing", budget_units_per_gpu_minute=1000), TEAMS[0]]
    tres = dict((team, logins[""]) for team, logins in usage.parse_sreport_tres(fixture("sreport_tres_by_type.txt"))
                .items())
    report = usage.team_report(teams, qos, {}, {}, tres_usage=tres, prices={"a100": 1.2, "h100": 2.5},
                               currency="EUR")
    research, development = report
    assert research["used_gpu_hours"] == 2.0 and research["limit_in_slurm"]["gpu_minutes"] == 1200000
    assert research["accounted_gpu_hours"] == 1.5 and research["gpu_hours_by_type"] == {"a100": 0.5, "h100": 1.0}
    assert research["cost"] == round(0.5 * 1.2 + 1.0 * 2.5, 2) and research["currency"] == "EUR"
    assert development["cost"] == 12.0 and development["used_gpu_hours"] == 0.0     # gres/gpu budget as before
    missing = usage.team_report(teams, qos, {}, {}, tres_usage={}, prices={"a100": 1.2})
    assert missing[0]["cost"] is None and missing[0]["accounted_gpu_hours"] is None   # not read: never 0
    table = usage.render_table(report)
    assert table[0].split()[-4:] == ["GPU-h", "since", "cost", "EUR"]
    assert table[2].split()[-2:] == ["1.5", "3.10"]
    text = usage.render_csv(report, "2026-11-26T10:00:00").splitlines()
    assert text[0].split(",")[:3] == ["team", "period", "since"] and text[0].endswith(",generated_at")
    assert text[1].startswith("research,month,,20000,2.0,") and text[1].endswith(",1.5,3.1,EUR,True,2026-11-26T10:00:00")
    assert '"cost": 3.1' in usage.render_json(report)
    plain = usage.render_table(usage.team_report(TEAMS, qos, {}, {}))
    assert "cost" not in " ".join(plain)                                             # no prices: the table of before
