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
import re
import select
import subprocess
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as checks
from ansible_collections.gpucluster.ops.plugins.module_utils import _kernlog
from ansible_collections.gpucluster.ops.plugins.module_utils._cdi import GPU_NODE_RE, gres_gpu_files
from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import expand
from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import normalize_bus_id

STATE_VERSION = 1
# Actions kept in the state file (the newest), for a person and the bench.
ACTIONS_KEPT = 50
# A job that ended this long before the fault's stamp did not run into it.
END_SLACK_S = 5
# The states of a job that still holds the node's GPUs, and those of one that ended because of the fault.
HOLDING_STATES = ("RUNNING", "SUSPENDED", "COMPLETING")
FAILED_STATES = ("FAILED", "NODE_FAIL")
COMMENT_PREFIX = "gpucluster-xid-watch:"
# Where a node's gres.conf is: beside slurm.conf, or where a configless slurmd keeps what slurmctld sent it.
GRES_CONF_PATHS = ("/etc/slurm/gres.conf", "/run/slurm/conf/gres.conf")
_READ_CHUNK = 1 << 20


# -- the state file ---------------------------------------------------------------------------------------------------

def new_state(source):
    return {"version": STATE_VERSION, "source": source, "inode": None, "offset": None, "cursor": None,
            "gpu_minors": {}, "actions": []}


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
    if not isinstance(fresh["gpu_minors"], dict) or not isinstance(fresh["actions"], list):
        fresh["gpu_minors"], fresh["actions"] = {}, []
    return fresh


def remember(state, action):
    state["actions"] = (state.get("actions") or [])[-(ACTIONS_KEPT - 1):] + [action]


# -- following a file -------------------------------------------------------------------------------------------------

class FileFollower:
    """New complete lines of a log file across rotation (create or copytruncate) and restarts.

    ``state`` holds ``inode`` and ``offset``: the position after the last complete line handed out. ``offset`` None:
    start at the end of the file as it is now."""

    def __init__(self, path, state):
        self.path = path
        self.state = state
        self.handle = None
        self.inode = None

    def _open(self):
        """Open the path; where it is the saved file, at the saved offset; a file cut shorter from its start; a new
        file (another inode: rotated while the watcher was down) from its start; no saved position: at its end."""
        try:
            handle = open(self.path, "rb")  # pylint: disable=consider-using-with
        except (IOError, OSError):
            return False
        info = os.fstat(handle.fileno())
        offset = self.state.get("offset")
        if offset is None:
            offset = info.st_size
        elif self.state.get("inode") != info.st_ino or info.st_size < offset:
            offset = 0
        handle.seek(offset)
        self.handle, self.inode = handle, info.st_ino
        self.state.update({"inode": info.st_ino, "offset": offset})
        return True

    def _read_complete(self):
        """The complete lines after the offset (a line still being written waits for its newline)."""
        self.handle.seek(self.state["offset"])
        data = self.handle.read(_READ_CHUNK)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= _READ_CHUNK:  # one line longer than a chunk: skip it rather than stall on it
                self.state["offset"] += len(data)
            return []
        self.state["offset"] += end + 1
        return data[:end].decode("utf-8", "replace").split("\n")

    def read(self):
        """Every new complete line since the last call (``[]`` when there are none or the file is missing)."""
        if self.handle is None and not self._open():
            return []
        lines = self._drain()
        try:
            info = os.stat(self.path)
        except (IOError, OSError):
            return lines    # rotated away and not yet created again: keep the old file until the new one is there
        current = os.fstat(self.handle.fileno())
        if info.st_ino != self.inode:
            lines += self._drain()          # what was written to the old file before it was replaced
            self.handle.close()
            self.handle = None
            self.state.update({"inode": None, "offset": 0})
            if self._open():
                lines += self._drain()
        elif current.st_size < self.state["offset"]:
            self.state["offset"] = 0        # truncated in place (copytruncate)
            lines += self._drain()
        return lines

    def _drain(self):
        lines = []
        while True:
            chunk = self._read_complete()
            if not chunk:
                return lines
            lines += chunk

    def wait(self, timeout_s):
        time.sleep(timeout_s)

    def close(self):
        if self.handle is not None:
            self.handle.close()
            self.handle = None


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
    """New kernel messages from ``journalctl -k -f -o json``; ``state["cursor"]`` is the last one handed out."""

    def __init__(self, state, journalctl="journalctl"):
        self.state = state
        self.journalctl = journalctl
        self.proc = None
        self.buffer = b""

    def _start(self):
        try:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                journal_argv(self.journalctl, self.state.get("cursor")), stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
        except OSError:
            self.proc = None

    def read(self):
        """The lines journalctl has printed since the last call."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
            if self.proc is None:
                return []
        while self._ready(0):
            chunk = os.read(self.proc.stdout.fileno(), _READ_CHUNK)
            if not chunk:
                break
            self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        lines = []
        for raw in complete:
            cursor, line = journal_line(raw.decode("utf-8", "replace"))
            if cursor is not None:
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
    """Slurm's GRES index of ``/dev/nvidia<minor>`` on ``node`` (its place among gres.conf's GPU files); ``None``
    where gres.conf names no GPU files for the node (AutoDetect) or not this one."""
    files = [f for f in gres_gpu_files(gres_text or "", node) if GPU_NODE_RE.match(f)]
    path = "/dev/nvidia%d" % minor
    return files.index(path) if path in files else None


_RECORD_KEY_RE = re.compile(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)")
_NODE_GRES_RE = re.compile(r"(?:^| )Nodes=(?P<nodes>\S+) CPU_IDs=\S+ Mem=\S+ GRES=(?P<gres>\S*)")
_IDX_RE = re.compile(r"\(IDX:(?P<idx>[0-9,\-]*)\)")


def parse_job(line):
    """One line of ``scontrol -o -d show job``: ``{"id", "state", "requeue", "batch", "end", "gres": {node: {idx}}}``
    (``gres``: the GPU indexes of the job on each node, from the detail fields ``Nodes=... GRES=gpu:x:2(IDX:0-1)``)."""
    fields = {}
    for part in _RECORD_KEY_RE.split(line.strip()):
        key, sep, value = part.partition("=")
        if sep:
            fields.setdefault(key, value)
    gres = {}
    for match in _NODE_GRES_RE.finditer(line):
        indexes = set()
        for idx in _IDX_RE.finditer(match.group("gres")):
            indexes |= set(_ranges(idx.group("idx")))
        for node in expand(match.group("nodes")):
            gres.setdefault(node, set()).update(indexes)
    return {"id": fields.get("JobId"), "name": fields.get("JobName"), "user": fields.get("UserId", "").split("(")[0],
            "state": fields.get("JobState", ""), "requeue": fields.get("Requeue") == "1",
            "batch": fields.get("BatchFlag") == "1", "end": fields.get("EndTime"), "comment": fields.get("Comment"),
            "gres": gres}


def _ranges(text):
    for part in text.split(","):
        low, _sep, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            yield from range(int(low), int(high or low) + 1)


def _epoch(slurm_time):
    """``2026-12-07T08:10:16`` (Slurm's local time) as epoch seconds; ``None`` for Unknown/None/odd values."""
    try:
        return time.mktime(time.strptime(slurm_time or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def plan(jobs, node, failed, fault_epoch):
    """What to do with each job on ``node`` whose GPUs include a ``failed`` GRES index:
    ``[(job, "requeue" | "tell", why)]``; jobs on the node's other GPUs are not listed."""
    decided = []
    for job in jobs:
        on_failed = sorted((job["gres"].get(node) or set()) & set(failed))
        if not on_failed:
            continue
        state = job["state"].split()[0] if job["state"] else ""
        if state in FAILED_STATES:
            end = _epoch(job["end"])
            if end is None or fault_epoch is None or end < fault_epoch - END_SLACK_S:
                continue
        elif state not in HOLDING_STATES:
            continue
        if not job["batch"]:
            decided.append((job, "tell", "an interactive job (srun/salloc) cannot be requeued"))
        elif not job["requeue"]:
            decided.append((job, "tell", "it was submitted with --no-requeue"))
        else:
            decided.append((job, "requeue", "on GPU index %s" % ",".join(str(i) for i in on_failed)))
    return decided
