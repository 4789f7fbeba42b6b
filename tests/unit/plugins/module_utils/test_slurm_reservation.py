"""_slurm_reservation: reading scontrol show reservation -o (Slurm 22.05 and 24.11 shapes), checking the options,
comparing (start time now, flags Slurm adds itself, IGNORE_JOBS) and the scontrol arguments of each change."""

import datetime

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_reservation as resv
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SlurmOutputError, SpecError

NOW = datetime.datetime(2026, 12, 1, 10, 0, 0)

# Shaped like Slurm 22.05.8 (Debian 12): Watts=n/a; IGNORE_JOBS kept after updates.
SLURM_2205 = (
    "ReservationName=maint-a StartTime=2026-12-01T09:30:00 EndTime=2026-12-01T13:30:00 Duration=04:00:00 "
    "Nodes=gpu[01-02] NodeCnt=2 CoreCnt=12 Features=(null) PartitionName=(null) Flags=MAINT,IGNORE_JOBS,SPEC_NODES "
    "TRES=cpu=12 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a "
    "MaxStartDelay=(null)\n"
    "ReservationName=book-b StartTime=2027-01-05T08:00:00 EndTime=2027-01-06T10:00:00 Duration=1-02:00:00 "
    "Nodes=gpu02 NodeCnt=1 CoreCnt=8 Features=(null) PartitionName=research Flags=IGNORE_JOBS TRES=cpu=8 "
    "Users=(null) Groups=(null) Accounts=root,team-a Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a "
    "MaxStartDelay=(null)\n")

# Shaped like Slurm 24.11 (Debian 13): no Watts; an empty Flags=; IGNORE_JOBS gone after an update.
SLURM_2411 = (
    "ReservationName=maint-a StartTime=2026-12-01T09:27:38 EndTime=2026-12-01T14:27:38 Duration=05:00:00 "
    "Nodes=gpu[01-02] NodeCnt=2 CoreCnt=12 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=12 "
    "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n"
    "ReservationName=future-c StartTime=2027-01-05T08:00:00 EndTime=2027-01-05T10:00:00 Duration=02:00:00 "
    "Nodes=gpu01 NodeCnt=1 CoreCnt=4 Features=(null) PartitionName=dev Flags= TRES=cpu=4 Users=root Groups=(null) "
    "Accounts=root Licenses=(null) State=INACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n")


def params(**given):
    base = dict(name="maint-a", state="present", nodes=None, node_count=None, partition=None, start_time="now",
                duration=None, end_time=None, flags=None, users=None, accounts=None)
    base.update(given)
    return base


def want(**given):
    base = dict(nodes=["gpu[01-02]"], duration="4h", users=["root"], flags=["maint", "ignore_jobs"])
    base.update(given)
    return resv.check_spec(params(**base), NOW)


# ---- parsing -----------------------------------------------------------------------------------------------------

def test_slurm_2205_shape():
    first, second = resv.parse_reservations(SLURM_2205)
    assert first == {"name": "maint-a", "start_time": "2026-12-01T09:30:00", "end_time": "2026-12-01T13:30:00",
                     "duration_s": 14400, "nodes": "gpu[01-02]", "node_list": ["gpu01", "gpu02"], "node_count": 2,
                     "flags": ["MAINT", "IGNORE_JOBS", "SPEC_NODES"], "users": ["root"], "accounts": [],
                     "partition": None, "state": "ACTIVE"}
    assert second["duration_s"] == 26 * 3600 and second["accounts"] == ["root", "team-a"] and second["users"] == []
    assert second["partition"] == "research" and second["state"] == "INACTIVE" and second["flags"] == ["IGNORE_JOBS"]


def test_slurm_2411_shape_with_empty_flags():
    first, second = resv.parse_reservations(SLURM_2411)
    assert first["flags"] == ["MAINT", "SPEC_NODES"] and first["duration_s"] == 5 * 3600
    assert second["flags"] == [] and second["partition"] == "dev" and second["node_list"] == ["gpu01"]
    assert second["users"] == ["root"] and second["accounts"] == ["root"]


@pytest.mark.parametrize("text", ["No reservations in the system\n", "", "\n"])
def test_no_reservation(text):
    assert resv.parse_reservations(text) == []


@pytest.mark.parametrize("text", ["Reservation nosuch not found\n", "garbage\n",
                                  "ReservationName=x EndTime=2026-12-01T13:30:00 State=ACTIVE\n",
                                  "ReservationName=x StartTime=a EndTime=b Duration=four State=ACTIVE\n",
                                  "ReservationName=x StartTime=a EndTime=b Duration=1:00:00 Nodes=gpu[2-1] State=A\n"])
def test_unreadable_output_raises(text):
    with pytest.raises(SlurmOutputError):
        resv.parse_reservations(text)


def test_find():
    found = resv.parse_reservations(SLURM_2205)
    assert resv.find(found, "book-b")["name"] == "book-b" and resv.find(found, "nosuch") is None


# ---- the options -------------------------------------------------------------------------------------------------

def test_check_spec_folds_nodes_and_reads_the_duration():
    got = want(nodes=["gpu02", "gpu[01-02]"], flags=["Maint", "IGNORE_JOBS", "maint"])
    assert got["node_list"] == ["gpu02", "gpu01"] and got["duration_s"] == 14400 and got["end_time"] is None
    assert got["flags"] == ["MAINT", "IGNORE_JOBS"] and got["start_time"] == "now" and got["users"] == ["root"]
    assert got["accounts"] is None


def test_check_spec_iso_times():
    got = want(start_time="2027-01-05T08:00", duration=None, end_time="2027-01-05T10:00:30")
    assert got["start_time"] == "2027-01-05T08:00:00" and got["end_time"] == "2027-01-05T10:00:30"
    assert resv.check_spec(params(state="absent"), NOW) is None


@pytest.mark.parametrize("given, message", [
    (dict(name="a b"), "name is 'a b'"),
    (dict(nodes=None), "needs nodes or node_count"),
    (dict(duration=None), "needs duration or end_time"),
    (dict(users=None), "needs users or accounts"),
    (dict(users=[]), "users is [] and accounts is None"),
    (dict(nodes=["gpu[2-1]"]), "nodes: 'gpu[2-1]' is not a node name or hostlist"),
    (dict(nodes=[]), "nodes is []: name at least one node"),
    (dict(nodes=None, node_count=0, partition="gpu"), "node_count is 0"),
    (dict(partition="a b"), "partition is 'a b'"),
    (dict(start_time="tomorrow"), "start_time is 'tomorrow', which is not a time"),
    (dict(start_time="2027-02-30T08:00"), "start_time is '2027-02-30T08:00'"),
    (dict(duration="240"), "duration is '240'"),
    (dict(duration="90s"), "duration is '90s': a reservation lasts whole minutes"),
    (dict(duration=None, end_time="2026-12-01T09:00"), "end_time is '2026-12-01T09:00', which is not after the start"),
    (dict(duration=None, end_time="soon"), "end_time is 'soon'"),
    (dict(flags=["maint", "bogus"]), "flags: 'bogus' is not a reservation flag"),
    (dict(users=["Root!"]), "users: 'Root!' is not a valid name"),
    (dict(accounts=["a", "a"]), "accounts is ['a', 'a']: it names a twice"),
])
def test_bad_options_name_the_option_and_value(given, message):
    with pytest.raises(SpecError) as caught:
        want(**given)
    assert message in str(caught.value)


# ---- comparing ---------------------------------------------------------------------------------------------------

def current(text=SLURM_2205, name="maint-a"):
    return resv.find(resv.parse_reservations(text), name)


def test_a_started_reservation_matches_start_now_and_its_duration():
    assert resv.differences(current(), want(), NOW) == []
    assert resv.plan(current(), want(), NOW)[:2] == ("none", None)


def test_a_later_reservation_is_moved_to_now():
    later = dict(current(), start_time="2026-12-01T11:00:00", end_time="2026-12-01T15:00:00", state="INACTIVE")
    assert resv.differences(later, want(), NOW) == ["start_time"]
    action, tail, after, _differ = resv.plan(later, want(), NOW)
    assert action == "updated"
    assert tail == ["update", "reservationname=maint-a", "starttime=now", "duration=04:00:00"]
    assert after["start_time"] == "2026-12-01T10:00:00" and after["end_time"] == "2026-12-01T14:00:00"
    assert after["state"] == "ACTIVE"


def test_an_iso_start_must_equal_to_the_second():
    got = want(start_time="2026-12-01T09:30")
    assert resv.differences(current(), got, NOW) == []
    assert resv.differences(current(), want(start_time="2026-12-01T09:31"), NOW) == ["start_time"]


def test_flags_slurm_adds_and_ignore_jobs_are_not_compared():
    # 24.11 drops IGNORE_JOBS after an update; SPEC_NODES is Slurm's own
    assert resv.differences(current(SLURM_2411), want(duration="5h"), NOW) == []
    assert resv.differences(current(), want(flags=["MAINT"]), NOW) == []
    assert resv.differences(current(), want(flags=[]), NOW) == ["flags"]


def test_flags_update_adds_and_removes():
    _action, tail, after, _differ = resv.plan(current(), want(flags=["daily", "ignore_jobs"]), NOW)
    assert tail == ["update", "reservationname=maint-a", "flags+=DAILY", "flags-=MAINT"]
    assert after["flags"] == ["IGNORE_JOBS", "SPEC_NODES", "DAILY"]


def test_a_longer_duration_keeps_the_start():
    _action, tail, after, differ = resv.plan(current(), want(duration="6h"), NOW)
    assert differ == ["duration_s"] and tail == ["update", "reservationname=maint-a", "duration=06:00:00"]
    assert after["start_time"] == "2026-12-01T09:30:00" and after["end_time"] == "2026-12-01T15:30:00"


def test_nodes_users_accounts_partition_and_end_time():
    got = want(nodes=["gpu[01-03]"], users=[], accounts=["root"], duration=None, end_time="2026-12-01T20:00")
    _action, tail, after, differ = resv.plan(current(), got, NOW)
    assert differ == ["end_time", "nodes", "users", "accounts"]
    assert tail == ["update", "reservationname=maint-a", "endtime=2026-12-01T20:00:00", "nodes=gpu[01-03]",
                    "users=", "accounts=root"]
    assert after["node_count"] == 3 and after["duration_s"] == 37800 and after["users"] == []


def test_options_left_out_are_not_managed():
    got = resv.check_spec(params(nodes=["gpu[01-02]"], duration="4h", accounts=["other"]), NOW)
    assert resv.differences(current(), got, NOW) == ["accounts"]


def test_create_arguments():
    action, tail, after, _differ = resv.plan(None, want(), NOW)
    assert action == "created"
    assert tail == ["create", "reservation", "reservationname=maint-a", "starttime=now", "duration=04:00:00",
                    "nodes=gpu[01-02]", "flags=MAINT,IGNORE_JOBS", "users=root"]
    assert after["flags"] == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"] and after["start_time"] == "2026-12-01T10:00:00"
    count = resv.check_spec(params(node_count=2, partition="gpu", start_time="2027-01-05T08:00",
                                   end_time="2027-01-05T10:00", accounts=["team-a"]), NOW)
    action, tail, after, _differ = resv.plan(None, count, NOW)
    assert tail == ["create", "reservation", "reservationname=maint-a", "starttime=2027-01-05T08:00:00",
                    "endtime=2027-01-05T10:00:00", "nodecnt=2", "partitionname=gpu", "accounts=team-a"]
    assert after["nodes"] is None and after["node_count"] == 2 and after["state"] == "INACTIVE"


def test_node_count_compares_the_count_and_partition():
    got = resv.check_spec(params(node_count=1, partition="research", start_time="2027-01-05T08:00",
                                 duration="26h", accounts=["root", "team-a"]), NOW)
    assert resv.differences(current(name="book-b"), got, NOW) == []
    got = dict(got, node_count=2, partition="gpu")
    assert resv.differences(current(name="book-b"), got, NOW) == ["node_count", "partition"]


def test_delete_and_absent():
    assert resv.plan(current(), None, NOW)[:2] == ("deleted", ["delete", "reservationname=maint-a"])
    assert resv.plan(None, None, NOW)[:2] == ("none", None)


# ---- recurring reservations and the inventory's reservations (issue 21) ------------------------------------------

def test_a_daily_reservation_slurm_moved_on_by_whole_days_keeps_its_start():
    daily = want(start_time="2026-12-01T09:30", flags=["daily"])
    moved = dict(current(), start_time="2026-12-03T09:30:00", end_time="2026-12-03T13:30:00", flags=["DAILY"])
    assert resv.differences(moved, daily, NOW) == []
    assert resv.differences(dict(moved, start_time="2026-12-03T09:31:00"), daily, NOW) == ["start_time"]
    # Not recurring: the same move is a difference.
    assert resv.differences(dict(moved, flags=["MAINT"]), want(start_time="2026-12-01T09:30"), NOW) == ["start_time"]


CLUSTER = {"nodes": {"gpu01": {"a100": 8}, "gpu02": {"h100": 8}, "l01": {"l40s": 4}},
           "partitions": {"dev": ["gpu01", "gpu02"], "mixed": ["gpu01", "l01"]}}


def test_inventory_gpus_become_whole_nodes_of_the_partition():
    specs = resv.inventory_specs([{"name": "inv-night", "accounts": ["research"], "start_time": "2030-01-01T20:00",
                                   "duration": "10h", "gpus": 12, "partition": "dev", "flags": ["daily"]}],
                                 CLUSTER, "inv-", NOW)
    assert specs == [dict(params(name="inv-night", accounts=["research"], start_time="2030-01-01T20:00",
                                 duration="10h", node_count=2, partition="dev", flags=["daily"]))]


@pytest.mark.parametrize("entry,message", [
    ({"name": "night", "accounts": ["a"], "duration": "1h", "node_count": 1, "partition": "dev"},
     "slurm_reservations[name=night]: the name must start with 'inv-'"),
    ({"name": "inv-x", "accounts": ["a"], "duration": "1h", "gpus": 8, "partition": "mixed"},
     "the nodes of partition mixed have 4 or 8 GPUs"),
    ({"name": "inv-x", "accounts": ["a"], "duration": "1h", "gpus": 8, "partition": "dev", "nodes": ["gpu01"]},
     "give one of nodes, node_count and gpus"),
    ({"name": "inv-x", "accounts": ["a"], "duration": "1h", "node_count": 1, "partition": "dev", "colour": 1},
     "unknown key(s) colour"),
    ({"name": "inv-x", "accounts": ["a"], "duration": 90, "node_count": 1, "partition": "dev"},
     "slurm_reservations[name=inv-x]: duration"),
])
def test_a_bad_inventory_reservation_names_the_entry(entry, message):
    with pytest.raises(SpecError) as error:
        resv.inventory_specs([entry], CLUSTER, "inv-", NOW)
    assert message in str(error.value)


def test_the_prune_takes_only_dropped_inventory_reservations_never_maintenance():
    text = SLURM_2205.replace("maint-a", "inv-maint").replace("book-b", "inv-old") + SLURM_2411.replace(
        "maint-a", "maint-z").replace("future-c", "inv-kept")
    assert resv.prunable(text, ["inv-kept"], "inv-") == ["inv-old"]


@pytest.mark.parametrize("prefix", ["book-", "bo", "book-x", ""])
def test_the_inventory_prefix_never_covers_the_bookings(prefix):
    with pytest.raises(SpecError) as error:
        resv.inventory_specs([], CLUSTER, prefix, NOW)
    assert "slurm_reservations_prefix is %r" % prefix in str(error.value)
