"""slurm_reservation against a fake scontrol (patched run_command): create, update, delete, idempotence, check and
diff mode, the read-back, Slurm 22.05 and 24.11 shapes, and bad input or scontrol failing."""

import datetime

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import slurm_reservation
from ansible_collections.gpucluster.ops.tests.unit.plugins.fake_slurm import FakeSlurm
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

NOW = datetime.datetime(2026, 12, 1, 10, 0, 0)
ABSENT = dict(name="maint-a", state="absent")
MAINT = dict(name="maint-a", nodes=["gpu[01-02]"], duration="4h", flags=["maint", "ignore_jobs"], users=["root"])


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    monkeypatch.setattr(slurm_reservation, "_now", lambda: NOW)


def slurm(version="22.05"):
    fake = FakeSlurm([("gpu%02d" % i, "IDLE", "") for i in range(1, 5)])
    fake.version = version
    fake.resv_now = NOW
    return fake


def run(fake, args, check=False, diff=False):
    if diff:
        args = dict(args, _ansible_diff=True)
    return run_module(slurm_reservation, args, check=check, run_command=fake)


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_create_then_nothing_to_do(version):
    fake = slurm(version)
    result = run(fake, MAINT)
    assert result["changed"] and result["action"] == "created" and not result["failed"]
    assert result["commands"] == [["/usr/bin/scontrol", "create", "reservation", "reservationname=maint-a",
                                   "starttime=now", "duration=04:00:00", "nodes=gpu[01-02]",
                                   "flags=MAINT,IGNORE_JOBS", "users=root"]]
    assert result["reservation"] == {
        "name": "maint-a", "start_time": "2026-12-01T10:00:00", "end_time": "2026-12-01T14:00:00",
        "duration_s": 14400, "nodes": "gpu[01-02]", "node_list": ["gpu01", "gpu02"], "node_count": 2,
        "flags": ["MAINT", "IGNORE_JOBS", "SPEC_NODES"], "users": ["root"], "accounts": [], "partition": None,
        "state": "ACTIVE"}
    assert result["diff"]["before"] == {} and result["diff"]["after"]["nodes"] == "gpu[01-02]"
    fake.resv_now = NOW + datetime.timedelta(hours=1)
    again = run(fake, MAINT)
    assert not again["changed"] and again["action"] == "none" and again["commands"] == []
    assert len(fake.resv_changes()) == 1


def test_check_mode_runs_nothing_and_says_what_it_would():
    fake = slurm()
    result = run(fake, MAINT, check=True, diff=True)
    assert result["changed"] and result["action"] == "created" and fake.resv_changes() == []
    assert result["commands"][0][1:3] == ["create", "reservation"]
    assert result["reservation"]["start_time"] == "2026-12-01T10:00:00"
    assert result["reservation"]["flags"] == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"]
    assert result["diff"]["before"] == {} and result["diff"]["after"]["end_time"] == "2026-12-01T14:00:00"


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_update_duration_and_flags(version):
    fake = slurm(version)
    fake.add_reservation("maint-a", "2026-12-01T09:30:00", "2026-12-01T13:30:00", nodes="gpu[01-02]",
                         flags="MAINT,IGNORE_JOBS,SPEC_NODES", users="root")
    result = run(fake, dict(MAINT, duration="6h", flags=["maint", "daily", "ignore_jobs"]), diff=True)
    assert result["action"] == "updated" and result["changed"]
    assert fake.resv_changes() == [["update", "reservationname=maint-a", "duration=06:00:00", "flags+=DAILY"]]
    assert result["reservation"]["end_time"] == "2026-12-01T15:30:00"
    assert result["diff"]["before"]["duration_s"] == 14400 and result["diff"]["after"]["duration_s"] == 21600
    assert "DAILY" in result["reservation"]["flags"]
    # 24.11 dropped IGNORE_JOBS with the update; it is not compared, so the next run changes nothing
    assert not run(fake, dict(MAINT, duration="6h", flags=["maint", "daily", "ignore_jobs"]))["changed"]


def test_update_in_check_mode_runs_nothing():
    fake = slurm()
    fake.add_reservation("maint-a", "2026-12-01T09:30:00", "2026-12-01T13:30:00", nodes="gpu[01-02]",
                         flags="MAINT,SPEC_NODES", users="root")
    result = run(fake, dict(MAINT, nodes=["gpu[01-03]"], flags=["maint"]), check=True, diff=True)
    assert result["action"] == "updated" and fake.resv_changes() == []
    assert result["commands"] == [["/usr/bin/scontrol", "update", "reservationname=maint-a", "nodes=gpu[01-03]"]]
    assert result["diff"]["before"]["nodes"] == "gpu[01-02]" and result["diff"]["after"]["nodes"] == "gpu[01-03]"


def test_a_later_reservation_is_moved_to_now():
    fake = slurm()
    fake.add_reservation("maint-a", "2026-12-02T08:00:00", "2026-12-02T12:00:00", nodes="gpu[01-02]",
                         flags="MAINT,SPEC_NODES", users="root")
    result = run(fake, MAINT)
    assert fake.resv_changes() == [["update", "reservationname=maint-a", "starttime=now", "duration=04:00:00"]]
    assert result["reservation"]["state"] == "ACTIVE" and result["reservation"]["start_time"] == "2026-12-01T10:00:00"


def test_node_count_with_partition_and_end_time():
    fake = slurm()
    args = dict(name="book-b", node_count=2, partition="gpu", start_time="2027-01-05T08:00",
                end_time="2027-01-05T10:00", accounts=["team-a"])
    result = run(fake, args)
    assert result["action"] == "created" and result["reservation"]["node_count"] == 2
    assert result["reservation"]["state"] == "INACTIVE" and result["reservation"]["partition"] == "gpu"
    assert not run(fake, args)["changed"]


def test_delete_and_absent():
    fake = slurm()
    fake.add_reservation("maint-a", "2026-12-01T09:30:00", "2026-12-01T13:30:00", nodes="gpu01", users="root")
    check = run(fake, ABSENT, check=True, diff=True)
    assert check["action"] == "deleted" and fake.resv_changes() == [] and check["diff"]["after"] == {}
    result = run(fake, ABSENT)
    assert result["changed"] and result["reservation"] is None and fake.reservations == {}
    assert result["commands"] == [["/usr/bin/scontrol", "delete", "reservationname=maint-a"]]
    again = run(fake, ABSENT)
    assert not again["changed"] and again["action"] == "none"


def test_slurm_not_taking_the_change_fails():
    fake = slurm()
    fake.ignore_updates = True
    result = run(fake, MAINT)
    assert result["failed"] and "Slurm did not take the change of reservation maint-a: it is not listed" \
        in result["msg"]
    fake.add_reservation("maint-a", "2026-12-01T09:30:00", "2026-12-01T13:30:00", nodes="gpu[01-02]", users="root")
    result = run(fake, dict(MAINT, duration="6h"))
    assert result["failed"] and "duration_s is 14400, not 21600" in result["msg"]
    result = run(fake, ABSENT)
    assert result["failed"] and "it is still listed" in result["msg"]


def test_scontrol_failing_fails_with_its_stderr():
    fake = slurm()
    fake.add_reservation("maint-a", "2026-12-01T09:30:00", "2026-12-01T13:30:00", nodes="gpu[01-02]", users="root")
    result = run(fake, dict(MAINT, start_time="2026-12-01T11:00"))
    assert result["failed"] and "scontrol update exited 1: Error updating the reservation: Reservation already " \
        "started" in result["msg"]
    assert not result["changed"] and result["reservation"]["start_time"] == "2026-12-01T09:30:00"
    fake.fail[("/usr/bin/scontrol", "show", "reservation")] = (1, "", "slurm_load_reservations error: timeout\n")
    result = run(fake, MAINT)
    assert result["failed"] and "scontrol show reservation -o exited 1: slurm_load_reservations error: timeout" \
        in result["msg"]


def test_unreadable_output_fails():
    fake = slurm()
    fake.fail[("/usr/bin/scontrol", "show", "reservation")] = (0, "Something else\n", "")
    result = run(fake, MAINT)
    assert result["failed"] and "cannot read this line" in result["msg"]


@pytest.mark.parametrize("args, message", [
    (dict(MAINT, duration="240"), "duration is '240'"),
    (dict(MAINT, flags=["mantain"]), "flags: 'mantain' is not a reservation flag"),
    (dict(MAINT, nodes=None, node_count=2), "node_count is 2: it needs partition"),
    (dict(MAINT, end_time="2027-01-01T00:00"), "duration is '4h' and end_time is '2027-01-01T00:00': give one of them"),
    (dict(MAINT, users=None), "needs users or accounts"),
    (dict(MAINT, node_count=2, partition="gpu"), "nodes is ['gpu[01-02]'] and node_count is 2"),
    (dict(MAINT, scontrol="/nonexistent/scontrol"), "scontrol is '/nonexistent/scontrol'"),
])
def test_bad_options_fail_before_running_anything(args, message):
    fake = slurm()
    result = run(fake, args)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert fake.calls == []


def test_scontrol_lookup(tmp_path):
    program = tmp_path / "scontrol"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    fake = slurm()
    result = run(fake, dict(MAINT, scontrol=str(program)))
    assert result["commands"][0][0] == str(program) and fake.calls[0][0] == str(program)
    result = run_module(slurm_reservation, MAINT, run_command=fake, missing=("scontrol",))
    assert result["failed"] and "scontrol" in result["msg"]
