# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Xid watcher's model: follow the node's kernel log, tell the lines that take a GPU out, and requeue the jobs
that ran on that GPU (``bin/gpucluster-xid-watch``, installed by the health_check role; docs/xid-watch.md).

- **Following** the source the checker reads (``sources.kernel_log``): ``file:/path`` is followed as ``tail -F``
  does: new complete lines from a saved (inode, offset); a file replaced under the path (logrotate's create, a
  rename) is read to its end first, then the new one from its start; a file cut shorter than the offset
  (copytruncate) is read from its start. ``journal`` (and ``dmesg``, which cannot be followed by position) is
  followed through ``journalctl -k -f -o json`` from the saved cursor (``--after-cursor``), journald's own position
  that rotation does not move. Without a saved position the watcher starts at the end: old lines are the periodic
  check's, never acted on again; a restart goes on from where the last run stopped, so a line written while it was
  down is acted on once.
- **Which lines act**: an event acts when the checker's own rules (``_health_checks.check_xid`` and
  ``check_driver_log``, with the node's ignore list and overrides) rate it ``error`` on its own: Xid 79 (fallen off
  the bus), 48, 94/95, the catalogue's reset and reboot classes, a driver-reported ``Fatal``, ``GPU has fallen off
  the bus`` and the GSP and init failures. One source for what drains: the same line drains the node at the next
  periodic check anyway; the watcher only does it now.
- **Which jobs**: the failed GPU's PCI bus id (from the line) names its minor number through the checker's last
  reports (``nvidia-smi -q`` lists a GPU before it falls off the bus, not after: the watcher keeps the last map it
  saw); gres.conf's ``File=/dev/nvidiaN`` order turns the minor into Slurm's GRES index, which ``scontrol -o -d show
  job`` prints per node (``GRES=gpu:a100:2(IDX:0-1)``). Jobs running, suspended or completing on the node whose
  index set holds the failed one are requeued when they are batch jobs that allow it (``Requeue=1``; gpu-job's
  default); a job that already failed after the fault (a CUDA error in the second after the Xid) is requeued as
  well. Jobs on the node's other GPUs run on. Each job touched is told in its comment. Nothing is requeued while
  the node is in service (the breaker refused the drain, or the checker did not agree): a requeued job would come
  back to the same GPU.

Standard library only (node code); nothing here raises on odd input, the caller's I/O aside.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as checks
from ansible_collections.gpucluster.ops.plugins.module_utils import _kernlog
from ansible_collections.gpucluster.ops.plugins.module_utils._cdi import gres_minors
from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import normalize_bus_id
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import job_gpu_indexes, record_fields

STATE_VERSION = 1
# Actions kept in the state file (the newest), for a person and the bench.
ACTIONS_KEPT = 50
# A job that ended this long before the fault's stamp did not run into it.
END_SLACK_S = 5
# The states of a job that still holds the node's GPUs, and those of one that ended because of the fault.
HOLDING_STATES = ("RUNNING", "SUSPENDED")
FAILED_STATES = ("FAILED", "NODE_FAIL")
# A job still completing cannot be requeued (Slurm: "Job is in transition state"): looked at again once it is not.
COMPLETING = "COMPLETING"
COMMENT_MAX = 1000
# Lines of a GPU the watcher acted on this recently do not act again (an Xid storm); the node is drained by then.
COOLDOWN_S = 120
COMMENT_PREFIX = "gpucluster-xid-watch:"
# Where a node's gres.conf is: where a configless slurmd keeps what slurmctld sent it (/run/slurm/conf on Slurm 23.02+,
# <SlurmdSpoolDir>/conf-cache with Debian's SlurmdSpoolDir on 22.05), else beside slurm.conf. The role passes the
# one it knows (--gres-conf).
GRES_CONF_PATHS = ("/run/slurm/conf/gres.conf", "/var/lib/slurm/slurmd/conf-cache/gres.conf", "/etc/slurm/gres.conf")
_READ_CHUNK = 1 << 20


# -- the state file ---------------------------------------------------------------------------------------------------

def new_state(source):
    return {"version": STATE_VERSION, "source": source, "inode": None, "offset": None, "cursor": None,
            "gpu_minors": {}, "acted": {}, "actions": []}


def load_state(path, source):
    """The saved state for ``source``; a new one where there is none, it is unreadable or it is another source's
    (a changed ``kernel_log`` starts at the end of the new source)."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (IOError, OSError, ValueError):
        return new_state(source)
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or state.get("source") != source:
        return new_state(source)
    fresh = new_state(source)
    fresh.update({k: state[k] for k in fresh if k in state})
    if not isinstance(fresh["gpu_minors"], dict) or not isinstance(fresh["acted"], dict) \
            or not isinstance(fresh["actions"], list):
        fresh["gpu_minors"], fresh["acted"], fresh["actions"] = {}, {}, []
    return fresh


def remember(state, action):
    state["actions"] = (state.get("actions") or [])[-(ACTIONS_KEPT - 1):] + [action]


# -- following a file -------------------------------------------------------------------------------------------------

class FileFollower:
    """New complete lines of a log file across rotation (create or copytruncate) and restarts.

    ``state`` holds ``inode`` and ``offset``: the position after the last complete line handed out. ``offset`` None:
    start at the end of the file as it is now (a file that does not exist yet is read from its start once it does)."""

    def __init__(self, path, state):
        self.path = path
        self.state = state
        self.handle = None
        self.inode = None
        self.notes = []

    def _open(self):
        """Open the path; where it is the saved file, at the saved offset; a file cut shorter from its start; a new
        file (another inode: rotated while the watcher was down) from its start, after the rest of the saved file
        where logrotate left it beside (``<path>.1``); no saved position: at its end. Returns the lines of the saved
        file's rest, or ``None`` when the path cannot be opened."""
        try:
            handle = open(self.path, "rb")  # pylint: disable=consider-using-with
        except (IOError, OSError):
            if self.state.get("offset") is None:
                self.state.update({"inode": None, "offset": 0})   # created later: all of it is new
            return None
        info = os.fstat(handle.fileno())
        offset, rest = self.state.get("offset"), []
        if offset is None:
            offset = info.st_size
        elif self.state.get("inode") is not None and self.state["inode"] != info.st_ino:
            rest = self._rotated_rest(offset)
            offset = 0
        elif info.st_size < offset:
            offset = 0
        handle.seek(offset)
        self.handle, self.inode = handle, info.st_ino
        self.state.update({"inode": info.st_ino, "offset": offset})
        return rest

    def _rotated_rest(self, offset):
        """The lines after ``offset`` of the saved file, where logrotate renamed it to ``<path>.1``."""
        try:
            with open(self.path + ".1", "rb") as old:
                if os.fstat(old.fileno()).st_ino != self.state["inode"]:
                    return []
                old.seek(offset)
                data = old.read()
        except (IOError, OSError):
            return []
        return _lines(data, final=True)

    def _read_complete(self, final=False):
        """The complete lines after the offset (a line still being written waits for its newline; ``final``: the
        file will not grow, its last line counts without one)."""
        self.handle.seek(self.state["offset"])
        data = self.handle.read(_READ_CHUNK)
        end = data.rfind(b"\n")
        if final and data and end < len(data) - 1 and len(data) < _READ_CHUNK:
            self.state["offset"] += len(data)
            return _lines(data, final=True)
        if end < 0:
            if len(data) >= _READ_CHUNK:  # one line longer than a chunk: skip it rather than stall on it
                self.state["offset"] += len(data)
            return []
        self.state["offset"] += end + 1
        return _lines(data[:end + 1])

    def read(self):
        """Every new complete line since the last call (``[]`` when there are none or the file is missing)."""
        lines = []
        if self.handle is None:
            rest = self._open()
            if rest is None:
                return []
            lines += rest
        lines += self._drain()
        try:
            info = os.stat(self.path)
        except (IOError, OSError):
            return lines    # rotated away and not yet created again: keep the old file until the new one is there
        current = os.fstat(self.handle.fileno())
        if info.st_ino != self.inode:
            lines += self._drain(final=True)    # what was written to the old file before it was replaced
            self.handle.close()
            self.handle = None
            self.state.update({"inode": None, "offset": 0})
            if self._open() is not None:
                lines += self._drain()
        elif current.st_size < self.state["offset"]:
            self.state["offset"] = 0        # truncated in place (copytruncate)
            lines += self._drain()
        return lines

    def _drain(self, final=False):
        lines = []
        while True:
            chunk = self._read_complete(final)
            if not chunk:
                return lines
            lines += chunk

    def wait(self, timeout_s):
        time.sleep(timeout_s)

    def close(self):
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _lines(data, final=False):
    """Bytes of whole lines as text lines (``final``: a last line without its newline counts too)."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif not final:
        lines.pop()
    return lines


# -- following the journal -------------------------------------------------------------------------------------------

def journal_argv(journalctl, cursor):
    """``journalctl`` following the kernel's messages as JSON from ``cursor`` (after it), or from now on."""
    argv = [journalctl, "-k", "-f", "-o", "json", "--no-pager"]
    return argv + (["--after-cursor", cursor] if cursor else ["-n", "0"])


def journal_line(text, host="localhost"):
    """One ``journalctl -o json`` record as ``(cursor, short-iso line)``; ``(None, None)`` for what is not one."""
    try:
        record = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(record, dict) or "__CURSOR" not in record:
        return None, None
    message = record.get("MESSAGE")
    if isinstance(message, list):  # journald gives a message that is not valid UTF-8 as a list of bytes
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(message, str):
        return record["__CURSOR"], None
    try:
        stamp = int(record.get("__REALTIME_TIMESTAMP")) / 1e6
    except (TypeError, ValueError):
        stamp = time.time()
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + ".%06d+00:00" % int(stamp % 1 * 1e6)
    return record["__CURSOR"], "%s %s kernel: %s" % (iso, record.get("_HOSTNAME") or host, message)


class JournalFollower:
    """New kernel messages from ``journalctl -k -f -o json``; ``state["cursor"]`` is the last one handed out. Without
    a saved cursor it starts after the newest kernel message there is (so that a restart before the next one still
    goes on from there). What journalctl says that is not a record, and its exits, go to ``notes``; a journalctl
    that exits is started again at most every ``RESPAWN_S`` seconds."""

    RESPAWN_S = 10.0

    def __init__(self, state, journalctl="journalctl"):
        self.state = state
        self.journalctl = journalctl
        self.proc = None
        self.buffer = b""
        self.notes = []
        self.started = None

    def _start(self):
        if self.started is not None and time.monotonic() - self.started < self.RESPAWN_S:
            return
        self.started = time.monotonic()
        if not self.state.get("cursor"):
            self.state["cursor"] = self._newest_cursor()
        try:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with,ansible-bad-function
                journal_argv(self.journalctl, self.state.get("cursor")), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT)
        except OSError as error:
            self.notes.append("cannot run %s: %s" % (self.journalctl, error))
            self.proc = None

    def _newest_cursor(self):
        try:
            done = subprocess.run(  # pylint: disable=ansible-bad-function
                [self.journalctl, "-k", "-n", "1", "-o", "json", "--no-pager"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            self.notes.append("cannot run %s: %s" % (self.journalctl, error))
            return None
        cursors = [journal_line(line)[0] for line in done.stdout.decode("utf-8", "replace").splitlines()]
        return next((c for c in reversed(cursors) if c), None)

    def read(self):
        """The lines journalctl has printed since the last call."""
        if self.proc is not None and self.proc.poll() is not None:
            self._collect()
            self.notes.append("%s exited with %s; starting it again" % (self.journalctl, self.proc.returncode))
            self.close()
        if self.proc is None:
            self._start()
            if self.proc is None:
                return []
        return self._collect()

    def _collect(self):
        while self._ready(0):
            chunk = os.read(self.proc.stdout.fileno(), _READ_CHUNK)
            if not chunk:
                break
            self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        lines = []
        for raw in complete:
            text = raw.decode("utf-8", "replace")
            cursor, line = journal_line(text)
            if cursor is None:
                if text.strip():
                    self.notes.append("%s: %s" % (self.journalctl, text.strip()[:300]))
                continue
            self.state["cursor"] = cursor
            if line is not None:
                lines.append(line)
        return lines

    def _ready(self, timeout_s):
        return bool(select.select([self.proc.stdout], [], [], timeout_s)[0])

    def wait(self, timeout_s):
        """Until journalctl prints something or ``timeout_s`` passes."""
        if self.proc is None or self.proc.poll() is not None:
            time.sleep(timeout_s)
        else:
            self._ready(timeout_s)

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc.stdout.close()
            self.proc = None
        self.buffer = b""


def follower(source, state, journalctl="journalctl"):
    if source.startswith("file:"):
        return FileFollower(source[len("file:"):], state)
    return JournalFollower(state, journalctl)


# -- which lines act --------------------------------------------------------------------------------------------------

def acting_events(lines, config, now=None):
    """The events of ``lines`` the checker rates ``error`` on their own, each with ``finding`` (the checker's)."""
    parsed = _kernlog.parse_kernel_log("\n".join(lines) + "\n")
    found = []
    for event in parsed["events"]:
        if event["kind"] not in ("xid",) + tuple(checks.DRIVER_LOG_CODES):
            continue
        snapshot = {"kernel": {"events": [event]}, "now": now if now is not None else time.time(),
                    "xid_catalog": {}}
        # no time window here: a line is new because it was just written, whatever its stamp says
        window_free = dict(config or {}, xid=dict((config or {}).get("xid") or {}, window_s=0))
        rated = checks.check_xid(snapshot, window_free) + checks.check_driver_log(snapshot, window_free)
        errors = [f for f in rated if f["severity"] == "error"]
        if errors:
            found.append(dict(event, finding=errors[0]))
    return found


# -- which GPU, which jobs -------------------------------------------------------------------------------------------

def gpu_minors_of_report(report):
    """``{bus_id: minor}`` of a checker report's GPUs (``gpus[].bus_id``, ``minor_number``)."""
    found = {}
    for gpu in (report or {}).get("gpus") or []:
        bus, minor = normalize_bus_id(gpu.get("bus_id") or ""), gpu.get("minor_number")
        if bus and isinstance(minor, int) and not isinstance(minor, bool):
            found[bus] = minor
    return found


def gres_conf_path(candidates=GRES_CONF_PATHS):
    """The first of ``candidates`` that exists (the first one where none does, for the error to name)."""
    return next((path for path in candidates if os.path.exists(path)), candidates[0])


def gres_index(gres_text, node, minor):
    """``(index, None)``: Slurm's GRES index of ``/dev/nvidia<minor>`` on ``node``, its place among gres.conf's GPU
    files; ``(None, why)`` where that cannot be told for sure: gres.conf detects the GPUs (``AutoDetect``, where
    slurmd orders them itself), has MIG or other multi-file GPUs (``MultipleFiles``), names them out of minor order,
    or does not name this one."""
    minors, why = gres_minors(gres_text, node)
    if why:
        return None, why
    if minor not in minors:
        return None, "/dev/nvidia%d is not among gres.conf's GPU files for %s" % (minor, node)
    return minors.index(minor), None


def parse_job(line):
    """One line of ``scontrol -o -d show job``: ``{"id", "target", "state", "requeue", "batch", "end", "comment",
    "gres": {node: {idx}}}``. ``gres``: the GPU indexes of the job on each node, from the detail fields ``Nodes=...
    GRES=gpu:x:2(IDX:0-1)``; ``target``: what ``scontrol requeue`` takes, the leader of a heterogeneous job."""
    fields = record_fields(line)
    gres = job_gpu_indexes(line)
    comment = fields.get("Comment")
    return {"id": fields.get("JobId"), "target": fields.get("HetJobId") or fields.get("JobId"),
            "name": fields.get("JobName"), "user": fields.get("UserId", "").split("(")[0],
            "state": fields.get("JobState", ""), "requeue": fields.get("Requeue") == "1",
            "batch": fields.get("BatchFlag") == "1", "end": fields.get("EndTime"),
            "comment": None if comment in (None, "(null)") else comment, "gres": gres}


def comment_for(job, text, limit=COMMENT_MAX):
    """Our note first, then the job's own comment (kept, cut where the whole would pass ``limit``); a note of ours
    from an earlier fault is replaced."""
    own = job.get("comment") or ""
    if own.startswith(COMMENT_PREFIX):
        own = own.split(" | ", 1)[1] if " | " in own else ""
    whole = "%s | %s" % (text, own) if own else text
    return whole[:limit]


def _epoch(slurm_time):
    """``2026-12-07T08:10:16`` (Slurm's local time) as epoch seconds; ``None`` for Unknown/None/odd values."""
    try:
        return time.mktime(time.strptime(slurm_time or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def plan(jobs, node, failed, fault_epoch):
    """What to do with each job on ``node`` whose GPUs include a ``failed`` GRES index:
    ``[(job, "requeue" | "tell" | "wait", why)]`` (``wait``: still completing, to be looked at again), one entry per
    job Slurm requeues (the components of a heterogeneous job are one); jobs on the node's other GPUs are not listed."""
    decided, seen = [], set()
    for job in jobs:
        on_failed = sorted((job["gres"].get(node) or set()) & set(failed))
        if not on_failed or job["target"] in seen:
            continue
        state = job["state"].split()[0] if job["state"] else ""
        if state in FAILED_STATES:
            end = _epoch(job["end"])
            if end is None or fault_epoch is None or end < fault_epoch - END_SLACK_S:
                continue
        elif state == COMPLETING:
            seen.add(job["target"])
            decided.append((job, "wait", "it is completing"))
            continue
        elif state not in HOLDING_STATES:
            continue
        seen.add(job["target"])
        if not job["batch"]:
            decided.append((job, "tell", "an interactive job (srun/salloc) cannot be requeued"))
        elif not job["requeue"]:
            decided.append((job, "tell", "it was submitted with --no-requeue"))
        else:
            decided.append((job, "requeue", "on GPU index %s" % ",".join(str(i) for i in on_failed)))
    return decided


def fresh_events(events, acted, now, cooldown_s=COOLDOWN_S):
    """The events of GPUs not acted on within ``cooldown_s`` (``acted``: ``{bus_id: epoch}`` of the last action per
    GPU, from the state file); an event that names no GPU always counts."""
    return [e for e in events if not e.get("bus_id") or now - (acted.get(e["bus_id"]) or 0) >= cooldown_s]
