"""Booking GPU time (docs/gpu-job.md#booking-gpu-time): the inventory's DAILY reservation reconciled by site.yml's
play "Slurm reservations", and gpu-job reserve on the login node through the sudo-run helper bin/gpu-reserve.

A booking within the policy (group_vars/all.yml: at most 8 GPUs for a team, 4 h, 14 days ahead, half the dev
partition's 16 GPUs) is created as a reservation of one whole node for the team's account and runs a job submitted
with --reservation; one over the policy, one in the past and one over a maintenance reservation are refused with the
reason and book nothing. Slurm 22.05 refuses GPU (GRES) reservations, so bookings are whole nodes on both releases.
"""

import datetime
import re
import time

import pytest

from test_6_maintenance import reservations
from test_7_maintenance_schedule import recap_changed

TAGS = ["--tags", "reservations,user_tools"]
# The login node needs no container runtime here: the job only has to start inside the booking.
NO_RUNTIME = {"user_tools_install_runtime": False}
DECLARED = "inv-training-night"
BOOK_AHEAD_S = 40


def as_user(host, user, command):
    """(rc, stdout + stderr) of a command run by a cluster user on the login node."""
    result = host.run("su %s -c %s" % (user, "'" + command.replace("'", "'\"'\"'") + "'"))
    return result.rc, result.stdout + result.stderr


def at(when):
    return when.strftime("%Y-%m-%dT%H:%M")


@pytest.fixture(scope="module")
def site(scenario, tmp_path_factory):
    """The reservations and user_tools parts of site.yml, run twice: (first output, second output)."""
    first = scenario.playbook(tmp_path_factory.mktemp("booking"), extra_vars=NO_RUNTIME, args=TAGS)
    assert first[0] == 0, first[1]
    second = scenario.playbook(tmp_path_factory.mktemp("booking-again"), extra_vars=NO_RUNTIME, args=TAGS)
    assert second[0] == 0, second[1]
    return first[1], second[1]


@pytest.fixture(scope="module")
def login(scenario):
    return scenario.host(scenario.only("slurm_login"))


def controller_now(ctl):
    return datetime.datetime.strptime(ctl.check_output("date +%Y-%m-%dT%H:%M:%S"), "%Y-%m-%dT%H:%M:%S")


def test_the_daily_reservation_exists_as_declared_and_a_second_run_changes_nothing(ctl, site):
    shown = reservations(ctl)[DECLARED]
    assert shown["StartTime"] == "2030-01-01T20:00:00" and shown["Duration"] == "10:00:00", shown
    assert shown["Flags"] == "DAILY" and shown["NodeCnt"] == "1" and shown["PartitionName"] == "research", shown
    assert shown["Accounts"] == "research", shown
    assert recap_changed(site[1]) == 0, site[1]


def test_a_booking_within_policy_is_created_and_runs_a_job(ctl, login, site):
    del site
    # To the second, 40 s ahead: time enough to book it under load, and the job waits no longer than that (a start
    # on the minute two minutes ahead waited 60 to 120 s).
    start = controller_now(ctl) + datetime.timedelta(seconds=BOOK_AHEAD_S)
    rc, out = as_user(login, "alice", "gpu-job reserve --gpus 8 --start %s --duration 30m"
                      % start.strftime("%Y-%m-%dT%H:%M:%S"))
    assert rc == 0, out
    name = re.search(r"booked (book-research-alice-\S+):", out).group(1)
    shown = reservations(ctl)[name]
    assert shown["Accounts"] == "research" and shown["NodeCnt"] == "1" and shown["PartitionName"] == "dev", shown
    assert shown["StartTime"] == start.strftime("%Y-%m-%dT%H:%M:%S") and shown["Duration"] == "00:30:00", shown
    rc, out = as_user(login, "alice", "gpu-job reservations")
    assert rc == 0 and name in out, out
    rc, out = as_user(login, "alice", "cd /tmp && gpu-job submit --name in-booking --gpus 8 --image busybox:1 "
                                      "--command true --time 5m --reservation %s" % name)
    assert rc == 0, out
    job = re.search(r"submitted job (\d+)", out).group(1)
    record = ""
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        record = ctl.check_output("scontrol show job -o %s || sacct -n -P -X -j %s -o State,Reservation,NodeList"
                                  % (job, job))
        if "Reservation=%s" % name in record and "JobState=PENDING" not in record or "|%s|" % name in record:
            break
        time.sleep(3)
    assert "JobState=PENDING" not in record and name in record, record
    assert shown["Nodes"] in record, (shown, record)


@pytest.mark.parametrize("why,args,reason", [
    ("over the policy", "--gpus 16 --start {ahead} --duration 1h", "team research may book at most 8 GPUs"),
    ("too long", "--gpus 8 --start {ahead} --duration 5h", "may book at most 04:00:00"),
    ("in the past", "--gpus 8 --start {past} --duration 1h", "which is in the past"),
    ("over a maintenance window", "--gpus 8 --start {maint} --duration 2h", "overlaps the maintenance reservation"),
])
def test_a_booking_against_the_policy_is_refused_with_the_reason(ctl, login, site, why, args, reason):
    del site, why
    now = controller_now(ctl).replace(second=0, minute=0)
    maint = now + datetime.timedelta(days=2)
    ctl.check_output("scontrol create reservation reservationname=maint-booking-test starttime=%s duration=120 "
                     "flags=maint,ignore_jobs nodes=ALL users=root || true" % at(maint + datetime.timedelta(hours=1)))
    before = sorted(reservations(ctl))
    rc, out = as_user(login, "alice", "gpu-job reserve " + args.format(
        ahead=at(now + datetime.timedelta(days=1)), past=at(now - datetime.timedelta(days=1)), maint=at(maint)))
    assert rc == 2 and reason in out and "nothing booked" in out, out
    assert sorted(reservations(ctl)) == before


def test_two_bookings_at_once_never_pass_the_teams_limit_and_the_owner_cancels(ctl, login, site):
    """Issue 46: two concurrent bookings once gave a team twice its limit. Both are started together through the real
    sudo rule; exactly one books, the other is refused; alice then cancels hers."""
    del site
    start = at(controller_now(ctl) + datetime.timedelta(days=3))
    before = sorted(reservations(ctl))
    one = "gpu-job reserve --gpus 8 --start %s --duration 1h" % start
    rc, out = as_user(login, "alice", "cd /tmp && (%s >/tmp/bk1 2>&1; echo rc=$? >>/tmp/bk1) & "
                                      "(%s >/tmp/bk2 2>&1; echo rc=$? >>/tmp/bk2) & wait; cat /tmp/bk1 /tmp/bk2" % (one, one))
    assert rc == 0, out
    assert sorted(re.findall(r"rc=(\d+)", out)) == ["0", "2"], out
    assert "nothing booked" in out, out
    made = sorted(set(reservations(ctl)) - set(before))
    assert len(made) == 1 and made[0].startswith("book-research-alice-"), made
    rc, out = as_user(login, "bob", "gpu-job cancel-booking %s" % made[0])
    assert rc == 2 and "only alice or an admin of team research" in out, out
    rc, out = as_user(login, "alice", "gpu-job cancel-booking %s" % made[0])
    assert rc == 0 and "cancelled booking %s" % made[0] in out, out
    assert sorted(reservations(ctl)) == before


def test_the_callers_time_zone_does_not_reach_the_helper(ctl, login, site):
    """Issue 46: TZ=UTC-14 passed sudo's env_reset and moved the helper's "now" 14 hours on, past max_ahead."""
    del site
    beyond = controller_now(ctl) + datetime.timedelta(days=14, hours=2)
    before = sorted(reservations(ctl))
    rc, out = as_user(login, "alice", "TZ=UTC-14 gpu-job reserve --gpus 8 --start %s --duration 1h" % at(beyond))
    assert rc == 2 and "bookings may start at most" in out and "nothing booked" in out, out
    assert sorted(reservations(ctl)) == before
