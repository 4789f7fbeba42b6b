"""Booking GPU time: bin/gpu-job reserve through bin/gpu-reserve (run via a fake sudo), the policy's refusals, and
the policy built from user_tools_booking. Fake scontrol and sudo on PATH record every call: a refusal runs no
scontrol create."""

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
import json, os, sys
# gpu-reserve gives scontrol a clean environment: the files lie beside the fake's directory.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
os.environ.update(FAKE_LOG=os.path.join(HERE, "log"), FAKE_SHOWN=os.path.join(HERE, "shown"))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:3] == ["show", "reservation"]:
    sys.stdout.write(open(os.environ["FAKE_SHOWN"]).read())
elif sys.argv[1] == "create":
    name = [a for a in sys.argv if a.startswith("reservationname=")][0].split("=", 1)[1]
    start = [a for a in sys.argv if a.startswith("starttime=")][0].split("=", 1)[1]
    end = start[:11] + "23:59:59"
    count = [a for a in sys.argv if a.startswith("nodecnt=")][0].split("=", 1)[1]
    with open(os.environ["FAKE_SHOWN"], "a") as shown:
        shown.write("ReservationName=%%s StartTime=%%s EndTime=%%s Duration=01:00:00 Nodes=dgx01 NodeCnt=%%s "
                    "PartitionName=a100 Flags= Users=(null) Accounts=training State=INACTIVE\n" %% (name, start, end, count))
'''
# sudo -n PROGRAM ARGS...: run it (unprivileged here, so gpu-reserve takes --config from the test).
FAKE_SUDO = r'''#!/bin/sh
echo "sudo $*" >> "$FAKE_LOG"
shift
unset SUDO_USER
exec "$@" --config "$GPU_JOB_CONFIG"
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
    return dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=str(tmp_path / "log"),
                FAKE_SHOWN=str(tmp_path / "shown"), GPU_JOB_CONFIG=str(tmp_path / "gpu-job.json"))


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


def test_the_helper_takes_no_other_form(env):
    proc = subprocess.run([sys.executable, "-I", "-S", os.path.join(ROOT, "bin", "gpu-reserve"), "delete", "x"],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and not os.path.exists(env["FAKE_LOG"]), proc.stderr


def test_submit_runs_the_job_in_the_reservation(env):
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
