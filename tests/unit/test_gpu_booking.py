"""Booking GPU time: bin/gpu-job reserve and cancel-booking through bin/gpu-reserve (run via a fake sudo), the
policy's refusals, and the policy built from user_tools_booking. Fake scontrol and sudo on PATH record every call: a
refusal runs no scontrol create or delete. Two bookings at once (two helpers started together, a slow scontrol) are
made one after the other under the helper's lock; the caller's TZ changes nothing; an absurd duration is one line."""

import datetime
import json
import os
import pwd
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_booking, _gpu_job
from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_job import JobError
from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
USER = pwd.getpwuid(os.getuid()).pw_name
FAKE_SCONTROL = r'''#!%(python)s
import json, os, sys, time
# gpu-reserve gives scontrol a clean environment: the files lie beside the fake's directory.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
os.environ.update(FAKE_LOG=os.path.join(HERE, "log"), FAKE_SHOWN=os.path.join(HERE, "shown"))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
# Each call: the helper's pid, when it began and ended, and the TZ and time zone scontrol runs in.
began = time.time()
slow = os.path.join(HERE, "slow")
if sys.argv[1:3] == ["show", "reservation"] and os.path.exists(slow):
    time.sleep(float(open(slow).read()))
if sys.argv[1:3] == ["show", "reservation"]:
    sys.stdout.write(open(os.environ["FAKE_SHOWN"]).read())
elif sys.argv[1] == "delete":
    name = sys.argv[2].split("=", 1)[1]
    kept = [l for l in open(os.environ["FAKE_SHOWN"]).readlines() if not l.startswith("ReservationName=%%s " %% name)]
    with open(os.environ["FAKE_SHOWN"], "w") as shown:
        shown.writelines(kept)
elif sys.argv[1] == "create":
    name = [a for a in sys.argv if a.startswith("reservationname=")][0].split("=", 1)[1]
    start = [a for a in sys.argv if a.startswith("starttime=")][0].split("=", 1)[1]
    end = start[:11] + "23:59:59"
    count = [a for a in sys.argv if a.startswith("nodecnt=")][0].split("=", 1)[1]
    account = [a for a in sys.argv if a.startswith("accounts=")][0].split("=", 1)[1]
    with open(os.environ["FAKE_SHOWN"], "a") as shown:
        shown.write("ReservationName=%%s StartTime=%%s EndTime=%%s Duration=01:00:00 Nodes=dgx01 NodeCnt=%%s "
                    "PartitionName=a100 Flags= Users=(null) Accounts=%%s State=INACTIVE\n"
                    %% (name, start, end, count, account))
with open(os.path.join(HERE, "calls"), "a") as calls:
    calls.write(json.dumps({"helper": os.getppid(), "argv": sys.argv[1:3], "began": began, "ended": time.time(),
                            "TZ": os.environ.get("TZ"), "timezone": time.timezone}) + "\n")
'''
# sudo -n PROGRAM ARGS...: run it (unprivileged here, so gpu-reserve takes --config and --lock from the test). Unlike
# the real sudo with the role's rule, it passes the caller's environment on, TZ included: the helper drops TZ itself.
FAKE_SUDO = r'''#!/bin/sh
echo "sudo $*" >> "$FAKE_LOG"
shift
unset SUDO_USER
exec "$@" --config "$GPU_JOB_CONFIG" --lock "$GPU_RESERVE_LOCK"
'''
LATER = (datetime.datetime.now() + datetime.timedelta(days=1)).replace(second=0, microsecond=0)


def config_for(booking):
    model = build({"training": {"max_concurrent": 64, "members": [{"name": USER, "default": True}]},
                   "other": {"members": ["someoneelse"]}}, gpu_types=["a100"])
    cluster = {"nodes": dict(("dgx%02d" % i, {"a100": 8}) for i in range(1, 5)),
               "partitions": {"a100": ["dgx%02d" % i for i in range(1, 5)]}}
    config = _gpu_job.build_config(cluster, [{"name": "a100", "default": True}], model["teams"], model["users"])
    return dict(config, booking=_gpu_booking.build_policy(booking, config, os.path.join(ROOT, "bin", "gpu-reserve")))


POLICY = {"partition": "a100", "max_gpus": 16, "max_duration": "4h", "max_ahead": "14d", "max_share": 0.5,
          "teams": {"other": {"max_gpus": 8}},
          "maintenance_windows": [{"start": (LATER + datetime.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"),
                                   "end": (LATER + datetime.timedelta(days=2, hours=4)).strftime("%Y-%m-%dT%H:%M"),
                                   "reason": "firmware"}]}


@pytest.fixture(name="env")
def _env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL % {"python": sys.executable}), ("sudo", FAKE_SUDO)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    (tmp_path / "gpu-job.json").write_text(json.dumps(config_for(POLICY)))
    (tmp_path / "shown").write_text("")
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=str(tmp_path / "log"),
               FAKE_SHOWN=str(tmp_path / "shown"), GPU_JOB_CONFIG=str(tmp_path / "gpu-job.json"),
               GPU_RESERVE_LOCK=str(tmp_path / "lock" / "gpu-reserve.lock"))
    env.pop("TZ", None)
    return env


def gpu_job(env, *args):
    proc = subprocess.run([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-job")] + list(args), env=env,
                          capture_output=True, text=True, check=False)
    calls = open(env["FAKE_LOG"]).read().splitlines() if os.path.exists(env["FAKE_LOG"]) else []
    return proc.returncode, proc.stdout + proc.stderr, calls


def at(when):
    return when.strftime("%Y-%m-%dT%H:%M")


def test_a_booking_within_policy_books_whole_nodes_for_the_team(env):
    rc, out, calls = gpu_job(env, "reserve", "--gpus", "12", "--start", at(LATER), "--duration", "2h")
    assert rc == 0, out
    name = "book-training-%s-%s" % (USER, LATER.strftime("%Y%m%dT%H%M"))
    assert "booked %s: 16 GPU(s) (2 node(s)" % name in out
    assert calls[0].startswith("sudo -n %s create --gpus 12 --start" % os.path.join(ROOT, "bin", "gpu-reserve"))
    create = [json.loads(c) for c in calls[1:] if c.startswith("[\"create")]
    assert create == [["create", "reservation", "reservationname=" + name, "starttime=" + LATER.strftime(
        "%Y-%m-%dT%H:%M:%S"), "duration=02:00:00", "nodecnt=2", "partitionname=a100", "accounts=training"]]
    rc, out, _calls = gpu_job(env, "reservations")
    assert rc == 0 and name in out and "team training" in out, out


@pytest.mark.parametrize("args,reason", [
    (["--gpus", "24"], "team training may book at most 16 GPUs at once"),
    (["--duration", "5h"], "may book at most 04:00:00"),
    (["--start", at(LATER - datetime.timedelta(days=2))], "which is in the past"),
    (["--start", at(LATER + datetime.timedelta(days=20))], "at most 14-00:00:00 ahead"),
    (["--start", at(LATER + datetime.timedelta(days=2, hours=1))], "overlaps the maintenance window"),
    (["--team", "other"], "is not a member of team other"),
    (["--gpus", "eight"], "--gpus is 'eight'"),
    (["--duration", "90"], "--duration"),
])
def test_a_booking_against_the_policy_is_refused_and_books_nothing(env, args, reason):
    request = dict(zip(["--gpus", "--start", "--duration"], ["8", at(LATER), "1h"]))
    request.update(zip(args[::2], args[1::2]))
    rc, out, calls = gpu_job(env, "reserve", *[x for kv in request.items() for x in kv])
    assert rc == 2 and reason in out, out
    assert not [c for c in calls if "create" in c and not c.startswith("sudo")], calls


def test_the_share_of_the_partition_counts_every_booking(env):
    assert gpu_job(env, "reserve", "--gpus", "16", "--start", at(LATER), "--duration", "1h")[0] == 0
    config = json.load(open(env["GPU_JOB_CONFIG"]))
    config["users"][USER]["teams"].append("other")
    with open(env["GPU_JOB_CONFIG"], "w") as handle:
        json.dump(config, handle)
    rc, out, _calls = gpu_job(env, "reserve", "--gpus", "8", "--start", at(LATER), "--duration", "1h", "--team", "other")
    assert rc == 2 and "at most 16 of partition a100's 32 GPUs may be booked at once, and 16 are booked" in out, out


def test_a_maintenance_reservation_refuses_an_overlapping_booking(env):
    with open(env["FAKE_SHOWN"], "w") as shown:
        shown.write("ReservationName=maint-1 StartTime=%s:00 EndTime=%s:00 Duration=02:00:00 Nodes=dgx01 NodeCnt=1 "
                    "Flags=MAINT,SPEC_NODES Users=root Accounts=(null) State=INACTIVE\n"
                    % (at(LATER), at(LATER + datetime.timedelta(hours=2))))
    rc, out, _calls = gpu_job(env, "reserve", "--gpus", "8", "--start", at(LATER), "--duration", "1h")
    assert rc == 2 and "overlaps the maintenance reservation maint-1" in out, out


@pytest.mark.parametrize("args", [["delete", "x"], ["cancel"], ["cancel", "a", "b"], ["create", "--gpus", "8"]])
def test_the_helper_takes_no_other_form(env, args):
    proc = subprocess.run([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-reserve")] + args,
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and not os.path.exists(env["FAKE_LOG"]), proc.stderr
    assert proc.stderr.count("\n") == 1 and "gpu-reserve cancel NAME" in proc.stderr, proc.stderr


def test_submit_runs_the_job_in_the_reservation(env):
    # issue 45: a reservation Slurm does not have is refused, also with --dry-run
    rc, out, _calls = gpu_job(env, "submit", "--name", "x", "--gpus", "8", "--image", "pytorch:2.4", "--command",
                              "true", "--reservation", "book-training-me-1", "--dry-run")
    assert rc == 2 and "Slurm has no such reservation" in out, out
    with open(env["FAKE_SHOWN"], "w") as shown:
        shown.write("ReservationName=book-training-me-1 StartTime=%s:00 EndTime=%s:00 Duration=01:00:00 Nodes=dgx01 "
                    "NodeCnt=1 PartitionName=a100 Flags= Users=(null) Accounts=training State=INACTIVE\n"
                    % (at(LATER), at(LATER + datetime.timedelta(hours=1))))
    rc, out, _calls = gpu_job(env, "submit", "--name", "x", "--gpus", "8", "--image", "pytorch:2.4", "--command",
                              "true", "--reservation", "book-training-me-1", "--dry-run")
    assert rc == 0 and "\n#SBATCH --reservation=book-training-me-1\n" in out, out
    rc, out, _calls = gpu_job(env, "submit", "--name", "x", "--gpus", "8", "--image", "pytorch:2.4", "--command",
                              "true", "--reservation", "bad name;", "--dry-run")
    assert rc == 2 and "--reservation is 'bad name;'" in out, out


@pytest.mark.parametrize("booking,message", [
    ({"partition": "nope"}, "user_tools_booking.max_gpus is missing"),
    (dict(POLICY, partition="nope"), "user_tools_booking.partition is 'nope'"),
    (dict(POLICY, max_share=1.5), "user_tools_booking.max_share is 1.5"),
    (dict(POLICY, teams={"ghost": {}}), "user_tools_booking.teams.ghost: no such team"),
    (dict(POLICY, max_duration=90), "user_tools_booking.max_duration"),
    (dict(POLICY, colour="red"), "unknown key(s) colour"),
    (dict(POLICY, maintenance_windows=[{"start": "2026-01-02T00:00", "end": "2026-01-01T00:00"}]), "is not after"),
    (dict(POLICY, max_ahead="99999999999d"), "user_tools_booking.max_ahead is '99999999999d': at most 3650-00:00:00"),
    (dict(POLICY, teams={"training": {"max_duration": "99999999999d"}}),
     "user_tools_booking.teams.training.max_duration is '99999999999d': at most 3650-00:00:00"),
    (dict(POLICY, teams={"training": {"admins": ["someoneelse"]}}),
     "user_tools_booking.teams.training.admins: 'someoneelse' is not a member of team training (members: %s)" % USER),
    (dict(POLICY, teams={"training": {"admins": USER}}),
     "user_tools_booking.teams.training.admins is %r: a list" % USER),
    (dict(POLICY, teams={"training": {"owner": USER}}), "a mapping of max_gpus, max_duration, admins"),
])
def test_a_bad_policy_names_the_variable_and_the_value(booking, message):
    with pytest.raises(JobError) as error:
        config_for(booking)
    assert message in str(error.value)


def test_no_policy_turns_booking_off(env):
    with open(env["GPU_JOB_CONFIG"], "w") as handle:
        json.dump(config_for({}), handle)
    rc, out, calls = gpu_job(env, "reserve", "--gpus", "8", "--start", at(LATER), "--duration", "1h")
    assert rc == 2 and "booking is not enabled" in out and not calls, out


# ---- bookings under one lock, in the cluster's time, bounded; cancelling -------------------------------------------

def cluster_now():
    """The system's local time, as the helper reads it (no TZ in the environment)."""
    env = dict(os.environ)
    env.pop("TZ", None)
    out = subprocess.run([sys.executable, "-c", "import datetime, time; print(datetime.datetime.now().strftime("
                          "'%Y-%m-%dT%H:%M:%S'), time.timezone)"], env=env, capture_output=True, text=True, check=True)
    stamp, zone = out.stdout.split()
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S"), int(zone)


def scontrol_calls(tmp_path):
    path = tmp_path / "calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def shown_line(name, team, start):
    return ("ReservationName=%s StartTime=%s:00 EndTime=%s:00 Duration=01:00:00 Nodes=dgx01 NodeCnt=1 "
            "PartitionName=a100 Flags= Users=(null) Accounts=%s State=INACTIVE\n"
            % (name, at(start), at(start + datetime.timedelta(hours=1)), team))


def test_two_bookings_at_once_never_exceed_the_team_limit(env, tmp_path):
    # Two helpers started together, each asking for the team's whole limit over overlapping times, with an scontrol
    # that takes a second to list the reservations: without the lock both would read none and both book (32 GPUs).
    (tmp_path / "slow").write_text("1.0")
    day = (cluster_now()[0] + datetime.timedelta(days=1)).replace(hour=10, minute=0, second=0)
    procs = [subprocess.Popen([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-job"), "reserve", "--gpus",
                               "16", "--start", at(day + datetime.timedelta(minutes=30 * i)), "--duration", "2h"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
    outs = [proc.communicate(timeout=120)[0] for proc in procs]
    results = sorted(zip([proc.returncode for proc in procs], outs))
    assert [rc for rc, _out in results] == [0, 2], outs
    assert "team training may book at most 16 GPUs at once, and has 16 booked then" in results[1][1], outs
    creates = [c for c in open(env["FAKE_LOG"]).read().splitlines() if c.startswith('["create"')]
    assert len(creates) == 1, creates
    assert len(open(env["FAKE_SHOWN"]).read().splitlines()) == 1
    # One after the other: every scontrol call of the first helper ended before the second helper's first began.
    calls = scontrol_calls(tmp_path)
    helpers = sorted(set(c["helper"] for c in calls), key=lambda h: min(c["began"] for c in calls if c["helper"] == h))
    assert len(helpers) == 2, calls
    first, second = [[c for c in calls if c["helper"] == h] for h in helpers]
    assert [c["argv"][0] for c in first] == ["show", "create", "show"], first
    assert max(c["ended"] for c in first) <= min(c["began"] for c in second), calls


@pytest.mark.parametrize("ahead,expect", [
    # UTC-14 puts the caller's clock 14 hours ahead of UTC: "now" would be past this start, and 14 days and an hour
    # ahead would be within max_ahead.
    (datetime.timedelta(hours=2), "booked book-training-"),
    (datetime.timedelta(days=14, hours=1), "bookings may start at most 14-00:00:00 ahead"),
    (datetime.timedelta(minutes=-30), "which is in the past (now "),
])
def test_the_callers_tz_changes_neither_now_nor_the_times(env, tmp_path, ahead, expect):
    now, zone = cluster_now()
    start = (now + ahead).replace(second=0)
    rc, out, calls = gpu_job(dict(env, TZ="UTC-14"), "reserve", "--gpus", "8", "--start", at(start), "--duration",
                             "1h")
    assert rc == (0 if expect.startswith("booked") else 2) and expect in out, out
    if rc == 0:
        create = [json.loads(c) for c in calls if c.startswith('["create"')]
        assert create[0][3] == "starttime=%s:00" % at(start), create
        assert "%s:00 to " % at(start) in out, out
    if "now " in expect:
        said = datetime.datetime.strptime(out.split("(now ")[1][:19], "%Y-%m-%dT%H:%M:%S")
        assert abs((said - now).total_seconds()) < 120, (said, now)
    # scontrol reads StartTime and prints times in the system's zone too: it never sees the caller's TZ.
    assert scontrol_calls(tmp_path) and all(c["TZ"] is None and c["timezone"] == zone for c in scontrol_calls(tmp_path))


@pytest.mark.parametrize("args,reason", [
    (["--duration", "99999999999d"], "--duration is '99999999999d': team training may book at most 04:00:00 at a time"),
    (["--duration", "99999999999-00:00:00"], "team training may book at most 04:00:00 at a time"),
    (["--duration", "9999999999999999999999h"], "team training may book at most 04:00:00 at a time"),
    (["--start", "9999-12-31T23:59"], "bookings may start at most 14-00:00:00 ahead"),
])
def test_an_absurd_request_is_refused_in_one_line(env, args, reason):
    request = dict(zip(["--gpus", "--start", "--duration"], ["8", at(LATER), "1h"]))
    request.update(zip(args[::2], args[1::2]))
    argv = [x for kv in request.items() for x in kv]
    rc, out, calls = gpu_job(env, "reserve", *argv)
    assert rc == 2 and out.startswith("gpu-reserve: refused, nothing booked: ") and reason in out, out
    assert out.count("\n") == 1 and "Traceback" not in out, out
    assert not [c for c in calls if c.startswith('["create"')], calls
    # The helper alone, as sudo runs it.
    proc = subprocess.run([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-reserve"), "create"] + argv + [
        "--team", "training", "--config", env["GPU_JOB_CONFIG"], "--lock", env["GPU_RESERVE_LOCK"]], env=env,
        capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and reason in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_check_request_refuses_an_absurd_duration_before_any_date_arithmetic():
    config = config_for(POLICY)
    with pytest.raises(JobError) as error:
        _gpu_booking.check_request(config, USER, {"gpus": "8", "start": "9999-12-31T23:59", "duration": "99999999999d",
                                                  "team": None}, [], datetime.datetime(9999, 12, 31, 23, 0))
    assert "team training may book at most 04:00:00 at a time" in str(error.value)


def test_the_owner_cancels_a_booking(env):
    rc, out, _calls = gpu_job(env, "reserve", "--gpus", "8", "--start", at(LATER), "--duration", "1h")
    assert rc == 0, out
    name = "book-training-%s-%s" % (USER, LATER.strftime("%Y%m%dT%H%M"))
    rc, out, calls = gpu_job(env, "cancel-booking", name)
    assert rc == 0 and "cancelled booking %s (%s's, team training, %s:00 to " % (name, USER, at(LATER)) in out, out
    assert "sudo -n %s cancel %s" % (os.path.join(ROOT, "bin", "gpu-reserve"), name) in calls, calls
    assert json.dumps(["delete", "reservationname=" + name]) in calls, calls
    assert name not in open(env["FAKE_SHOWN"]).read()
    rc, out, _calls = gpu_job(env, "reservations")
    assert rc == 0 and name not in out, out


@pytest.mark.parametrize("owner,team,admins,allowed", [
    ("someoneelse", "other", [], False),        # another user, of another team
    ("bob", "training", [], False),             # another user of the team, not its admin
    ("bob", "training", [USER], True),          # the team's admin
    ("someoneelse", "other", [USER], False),    # an admin of another team
])
def test_only_the_owner_or_a_team_admin_cancels(env, owner, team, admins, allowed):
    with open(env["GPU_JOB_CONFIG"], "w") as handle:
        json.dump(config_for(dict(POLICY, teams={"other": {"max_gpus": 8}, "training": {"admins": admins}})), handle)
    name = "book-%s-%s-%s" % (team, owner, LATER.strftime("%Y%m%dT%H%M"))
    with open(env["FAKE_SHOWN"], "w") as shown:
        shown.write(shown_line(name, team, LATER))
    rc, out, calls = gpu_job(env, "cancel-booking", name)
    deleted = [c for c in calls if c.startswith('["delete"')]
    if allowed:
        assert rc == 0 and "cancelled booking %s (%s's, team %s" % (name, owner, team) in out and deleted, out
    else:
        said = "refused, nothing cancelled: booking %s is %s's, for team %s: only %s or an admin of team %s" % (
            name, owner, team, owner, team)
        assert rc == 2 and said in out, out
        assert not deleted and name in open(env["FAKE_SHOWN"]).read(), calls


@pytest.mark.parametrize("name,reason,via_sudo", [
    ("maint-1", "'maint-1' is not a booking", False),
    ("--config=/tmp/mine", "is not a booking", False),
    ("book-training-%s-20300101T1000" % USER, "there is no booking book-training-%s-20300101T1000" % USER, True),
])
def test_cancelling_what_is_not_a_booking_is_refused(env, name, reason, via_sudo):
    with open(env["FAKE_SHOWN"], "w") as shown:
        shown.write(shown_line("maint-1", "training", LATER))
    rc, out, calls = gpu_job(env, "cancel-booking", "--", name)
    assert rc == 2 and reason in out, out
    assert bool([c for c in calls if c.startswith("sudo")]) == via_sudo, calls
    assert not [c for c in calls if c.startswith('["delete"')], calls
    proc = subprocess.run([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-reserve"), "cancel", "--config",
                           env["GPU_JOB_CONFIG"], "--lock", env["GPU_RESERVE_LOCK"], "--", name], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "nothing cancelled" in proc.stderr, proc.stderr
