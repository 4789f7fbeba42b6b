# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Xid watcher's model: following a kernel log across rotation, truncation and restarts, the lines that act (the
checker's own rules), the journal's records, the jobs on a failed GPU."""

import json
import os
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _xid_watch as watch

XID79 = ("2026-12-07T08:40:01+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
         "GPU has fallen off the bus.")
XID13 = ("2026-12-07T08:40:02+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, "
         "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address")
OTHER = "2026-12-07T08:40:03+00:00 gpu01 kernel: usb 1-1: new high-speed USB device number 2"


def _follow(path, state=None):
    state = state if state is not None else watch.new_state("file:%s" % path)
    return watch.FileFollower(str(path), state), state


def test_a_new_watcher_starts_at_the_end_and_hands_out_only_new_complete_lines(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(XID79 + "\n")
    follower, state = _follow(log)
    assert follower.read() == []          # the old Xid is the periodic check's
    with open(log, "a") as handle:
        handle.write(OTHER + "\n" + XID13[:40])   # the second line is still being written
    assert follower.read() == [OTHER]
    with open(log, "a") as handle:
        handle.write(XID13[40:] + "\n")
    assert follower.read() == [XID13]
    assert state["offset"] == log.stat().st_size and state["inode"] == log.stat().st_ino


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(OTHER + "\n")
    follower, _state = _follow(log)
    follower.read()
    with open(log, "a") as handle:
        handle.write(XID13 + "\n")        # written just before logrotate moves the file
    os.rename(log, tmp_path / "kern.log.1")
    assert follower.read() == [XID13]     # the path is gone for a moment: the old file is read to its end
    log.write_text(XID79 + "\n")
    assert follower.read() == [XID79]
    assert follower.read() == []


def test_a_file_cut_shorter_in_place_is_read_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(OTHER + "\n" + OTHER + "\n")
    follower, _state = _follow(log)
    follower.read()
    with open(log, "r+") as handle:       # copytruncate
        handle.truncate(0)
    with open(log, "a") as handle:
        handle.write(XID79 + "\n")
    assert follower.read() == [XID79]


def test_a_restart_goes_on_from_the_saved_position_without_reading_old_lines_again(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(XID79 + "\n")
    follower, state = _follow(log)
    follower.read()
    follower.close()
    saved = json.loads(json.dumps(state))
    with open(log, "a") as handle:        # written while the watcher was down
        handle.write(XID13 + "\n")
    follower, state = _follow(log, saved)
    assert follower.read() == [XID13]
    follower.close()
    # rotated while it was down: the new file is new lines, from its start
    saved = json.loads(json.dumps(state))
    os.rename(log, tmp_path / "kern.log.1")
    log.write_text(OTHER + "\n")
    follower, _state = _follow(log, saved)
    assert follower.read() == [OTHER]


def test_state_of_another_source_or_unreadable_starts_afresh(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(dict(watch.new_state("file:/a"), offset=10, inode=3)))
    assert watch.load_state(str(path), "file:/a")["offset"] == 10
    assert watch.load_state(str(path), "journal")["offset"] is None
    path.write_text("{not json")
    assert watch.load_state(str(path), "file:/a") == watch.new_state("file:/a")


def test_the_lines_that_act_are_those_the_checker_rates_error():
    acting = watch.acting_events([OTHER, XID13, XID79], {})
    assert [(e["code"], e["finding"]["code"], e["bus_id"]) for e in acting] == [
        (79, "GPU-FALLEN-OFF-BUS", "00000000:3B:00.0")]
    # an old stamp still acts: the line is new to the watcher (restarts replay what came while it was down)
    old = XID79.replace("2026-12-07", "2020-01-01")
    assert len(watch.acting_events([old], {"xid": {"window_s": 60}})) == 1
    # the node's ignore list is the checker's
    assert watch.acting_events([XID79], {"xid": {"ignore": [79]}}) == []
    # a GPU fallen off the bus without an Xid line, and Xid 48
    lost = "2026-12-07T08:40:01+00:00 gpu01 kernel: NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus."
    x48 = "2026-12-07T08:40:01+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=x, An uncorrectable " \
          "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
    assert [e["bus_id"] for e in watch.acting_events([lost, x48], {})] == ["00000000:5E:00.0"] * 2


def test_journal_records_become_lines_the_parser_reads():
    record = {"__CURSOR": "s=abc;i=42", "__REALTIME_TIMESTAMP": "1796632801000000", "_HOSTNAME": "gpu01",
              "MESSAGE": XID79.split("kernel: ", 1)[1]}
    cursor, line = watch.journal_line(json.dumps(record))
    assert cursor == "s=abc;i=42"
    assert [e["code"] for e in watch.acting_events([line], {})] == [79]
    assert watch.journal_line("not json") == (None, None)
    assert watch.journal_line(json.dumps(dict(record, MESSAGE=list(b"NVRM: x"))))[1].endswith("kernel: NVRM: x")
    assert watch.journal_argv("journalctl", None)[-2:] == ["-n", "0"]
    assert watch.journal_argv("journalctl", "s=1")[-2:] == ["--after-cursor", "s=1"]


def test_the_gres_index_of_a_minor_follows_gres_conf_order():
    gres = "NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia1\nNodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia[0,2-3]\n" \
           "NodeName=gpu02 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
    assert [watch.gres_index(gres, "gpu02", m)[0] for m in (0, 1, 7, 8)] == [0, 1, 7, None]
    # where Slurm's order cannot be told for sure: no index, and why
    assert watch.gres_index(gres, "gpu01", 1) == (
        None, "gres.conf names the GPU files of gpu01 out of minor order (/dev/nvidia1, /dev/nvidia0, /dev/nvidia2, "
              "/dev/nvidia3)")
    assert "AutoDetect=nvml" in watch.gres_index("AutoDetect=nvml\n", "gpu01", 0)[1]
    assert "MultipleFiles" in watch.gres_index("NodeName=gpu01 AutoDetect=off Name=gpu MultipleFiles=/dev/nvidia0,"
                                               "/dev/nvidia-caps/nvidia-cap21\n", "gpu01", 0)[1]
    assert watch.gpu_minors_of_report({"gpus": [{"bus_id": "00000000:3B:00.0", "minor_number": 1},
                                                {"bus_id": "0000:5e:00.0", "minor_number": None}]}) == {
        "00000000:3B:00.0": 1}


def _job(job_id, state, idx, requeue=True, batch=True, end="Unknown", node="gpu01", target=None):
    return {"id": job_id, "target": target or job_id, "name": "j", "user": "alice", "state": state, "requeue": requeue, "batch": batch, "end": end,
            "comment": None, "gres": {node: set(idx)}}


def test_the_plan_touches_only_the_jobs_on_the_failed_gpu():
    fault = time.time()
    ended = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(fault + 2))
    long_ago = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(fault - 600))
    jobs = [_job("10", "RUNNING", [0, 1]), _job("11", "RUNNING", [2, 3, 4, 5]), _job("12", "RUNNING", [1], requeue=False),
            _job("13", "RUNNING", [1], batch=False), _job("14", "FAILED", [1], end=ended),
            _job("15", "FAILED", [1], end=long_ago), _job("16", "PENDING", []), _job("17", "RUNNING", [1], node="gpu02"),
            _job("18", "COMPLETING", [1]), _job("20", "RUNNING", [1], target="19"), _job("21", "RUNNING", [1], target="19")]
    decided = [(job["target"], what) for job, what, _why in watch.plan(jobs, "gpu01", [1], fault)]
    # a heterogeneous job's components are requeued once, through their leader
    assert decided == [("10", "requeue"), ("12", "tell"), ("13", "tell"), ("14", "requeue"), ("18", "wait"),
                       ("19", "requeue")]


def test_a_job_line_gives_its_gpu_indexes_per_node_and_only_its_gpus():
    line = ("JobId=124 HetJobId=123 HetJobOffset=1 JobName=x UserId=alice(2001) JobState=RUNNING Requeue=1 "
            "BatchFlag=1 EndTime=2026-12-07T09:00:00 Comment=(null) JOB_GRES=gpu:a100:2,nic:1   "
            "Nodes=gpu[01-02] CPU_IDs=0-1 Mem=512 GRES=gpu:a100:1(IDX:3),nic:1(IDX:1)   "
            "Nodes=gpu03 CPU_IDs=0 Mem=512 GRES=gpu:2(IDX:0,2) MinCPUsNode=1")
    job = watch.parse_job(line)
    assert (job["id"], job["target"], job["user"], job["comment"]) == ("124", "123", "alice", None)
    assert job["gres"] == {"gpu01": {3}, "gpu02": {3}, "gpu03": {0, 2}}


def test_our_note_goes_before_the_users_own_comment_and_replaces_an_earlier_one():
    assert watch.comment_for({"comment": None}, "gpucluster-xid-watch: a") == "gpucluster-xid-watch: a"
    mine = watch.comment_for({"comment": "exp 42"}, "gpucluster-xid-watch: a")
    assert mine == "gpucluster-xid-watch: a | exp 42"
    assert watch.comment_for({"comment": mine}, "gpucluster-xid-watch: b") == "gpucluster-xid-watch: b | exp 42"
    assert len(watch.comment_for({"comment": "x" * 5000}, "gpucluster-xid-watch: c")) == watch.COMMENT_MAX


def test_lines_of_a_gpu_acted_on_moments_ago_do_not_act_again():
    events = [{"bus_id": "A"}, {"bus_id": "B"}, {"bus_id": None}]
    assert watch.fresh_events(events, {"A": 1000.0}, 1060.0) == [{"bus_id": "B"}, {"bus_id": None}]
    assert watch.fresh_events(events, {"A": 1000.0}, 1000.0 + watch.COOLDOWN_S) == events


FAKE_JOURNALCTL = r'''#!%(python)s
import json, sys, time
args = sys.argv[1:]
with open(%(log)r, "a") as f:
    f.write(json.dumps(args) + "\n")
def record(n):
    return json.dumps({"__CURSOR": "s=x;i=%%d" %% n, "__REALTIME_TIMESTAMP": "1796632801000000", "_HOSTNAME": "gpu01",
                       "MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."})
if "-f" not in args:            # -n 1: the newest kernel message when the watcher starts
    print(record(1))
    sys.exit(0)
after = int(args[args.index("--after-cursor") + 1].split("i=")[1]) if "--after-cursor" in args else 0
for n in range(after + 1, 4):
    print(record(n), flush=True)
print("journalctl: a warning that is not a record", flush=True)
time.sleep(30)
'''


def test_the_journal_is_followed_from_its_saved_cursor(tmp_path):
    import sys  # pylint: disable=import-outside-toplevel
    log = tmp_path / "argv.log"
    fake = tmp_path / "journalctl"
    fake.write_text(FAKE_JOURNALCTL % {"python": sys.executable, "log": str(log)})
    fake.chmod(0o755)
    state = watch.new_state("journal")
    follower = watch.follower("journal", state, str(fake))
    lines = []
    deadline = time.monotonic() + 20
    while (len(lines) < 2 or not follower.notes) and time.monotonic() < deadline:
        lines += follower.read()
        follower.wait(0.2)
    follower.close()
    # started after the newest message there was (i=1): the two that came later, not the one before
    assert [e["code"] for e in watch.acting_events(lines, {})] == [79, 79]
    assert state["cursor"] == "s=x;i=3"
    assert follower.notes == ["%s: journalctl: a warning that is not a record" % fake]
    follower = watch.follower("journal", state, str(fake))
    follower.read()
    deadline = time.monotonic() + 20
    while len(log.read_text().splitlines()) < 3 and time.monotonic() < deadline:
        follower.wait(0.1)
    follower.close()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][:3] == ["-k", "-n", "1"], calls
    assert calls[1][-2:] == ["--after-cursor", "s=x;i=1"] and calls[2][-2:] == ["--after-cursor", "s=x;i=3"], calls
