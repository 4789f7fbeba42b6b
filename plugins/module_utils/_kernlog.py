# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU and fabric events from kernel logs: NVIDIA Xid, NVSwitch SXid, GPU driver/GSP failures without an Xid line and
IB link flaps (see docs/health-model.md).

``parse_kernel_log(text, since_epoch=None, ...)`` returns::

    {"events": [{"kind": "xid" | "sxid" | "gsp_timeout" | "driver_init_failed" | "gpu_lost" | "link_down" | "link_up",
                 "code", "bus_id", "device", "pid", "process", "fatal", "sxid_fatal", "message", "epoch", "uptime_s",
                 "raw"}],
     "latest_epoch": float | None, "errors": [...], "unreadable": [...]}

``fatal`` is the driver's own word: ``True`` for an Xid or SXid line that says ``Fatal``, ``False`` for ``Nonfatal``
(also ``Non-fatal``, any case), ``None`` when it says neither. The word counts where the driver puts it: first in the
message (SXid ``20034, Fatal, Link 46 ...``) or after the unit of the NVLink Xids 144-150
(``145, RLW_REMAP Nonfatal XC0 i0 Link 02 (0x... 0x...)``); "fatal" elsewhere in a message (Xid 74's ``NVLink: fatal
error detected``) is text, not the severity field.

Driver and GSP failures that come without an Xid line are events too, ``bus_id`` from the line when it names one
(``NVRM: GPU 0000:01:00.0: ...``, ``... for GPU at PCI:0000:9b:00 ...``) and ``device`` the driver's instance
(``GPU4``) when it names one: ``gsp_timeout`` (GSP RPC timeout, ``GSP RM``/``LibOS heartbeat timed out``, the GSP
timeout banner, the rate-limiting notice that says the GPU likely needs a reset), ``driver_init_failed``
(``RmInitAdapter failed! (0x..:0x..:..)``, ``rm_init_adapter failed``, ``Cannot initialize GSP firmware RM``,
``unexpected WPR2 already up``) and ``gpu_lost`` (``GPU has fallen off the bus.`` without an Xid).

It reads every prefix style a node produces: ``dmesg`` (``[ 1234.567890]``), ``dmesg -T``
(``[Sun Feb 23 16:24:18 2025]``), ``dmesg --time-format iso``, ``dmesg --decode`` (``kern  :warn  :``), syslog
(``Jun 11 08:09:10 host kernel:``), ``journalctl -o short-iso``/``short-precise``/``short-monotonic``/``short-unix``,
and bare lines. Stamps without a zone (syslog, ``dmesg -T``, ``short-precise``) are local time unless
``utc_offset_s`` is given; syslog stamps have no year: it comes from ``year``, else from ``reference_epoch`` (default:
now), going one year back for dates that would lie in the future.

``XID_CATALOG`` (re-exported from ``_xid_catalog``, which cites NVIDIA's catalogue for drivers R570-R590) maps Xid
codes to ``{"name", "class", "resolution", "severity", "action"}``; ``xid_info(code)`` answers for unknown codes as
well (``class: unknown``, ``severity: warning``).

Standard library only, Python 3.8+ (3.9+ under ansible-core 2.20 and later); nothing here raises.
"""

import re
import time

from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
    append_capped, clean_text, new_error, new_result, normalize_bus_id,
)
# Re-exported: callers read the catalogue through this module too.
from ansible_collections.gpucluster.ops.plugins.module_utils._xid_catalog import (  # noqa: F401  pylint: disable=unused-import
    CATALOG_SOURCE, XID_CATALOG, xid_info,
)

_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MONTH_ALT = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"

# Line prefixes. Each match ends where the message (or the "host ident:" part of syslog/journal lines) starts.
_DECODE_RE = re.compile(
    r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?")
_UPTIME_RE = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]\s?")
_CTIME_RE = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>" + _MONTH_ALT + r") +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]\s?")
_ISO_RE = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?(?P<tz>Z|[+-]\d\d:?\d\d)?(?:\s+|$)")
_SYSLOG_RE = re.compile(
    r"(?P<mon>" + _MONTH_ALT + r") +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?(?:\s+|$)")
_UNIX_RE = re.compile(r"(?P<unix>\d{9,11}\.\d+)(?:\s+|$)")
# "host ident[pid]: " after a syslog/journal stamp; the ident starts with a letter (not "0000:3b:00.0: ").
_SOURCE_RE = re.compile(r"\S+ [A-Za-z][\w.\-/@]*(?:\[\d+\])?: ")

# Events.
_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<code>\d{1,9})\b,?\s*"
                     r"(?:pid=(?P<pid>'[^']*'|[^,\s]*),?\s*)?(?:name=(?P<name>[^,]*),?\s*)?(?P<message>.*)$")
_SXID_RE = re.compile(r"(?P<device>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<code>\d{1,9})\b,?\s*(?P<rest>.*)$")
_SXID_SEVERITY_RE = re.compile(r"(?P<word>Fatal|Non-fatal|Nonfatal|Non fatal)\b,?\s*", re.IGNORECASE)
_SXID_DETAIL_RE = re.compile(r"(?:Severity \d+ Engine instance|Data \{)")
# The severity field of an Xid message: first, or after the unit of the NVLink Xids 144-150 (``RLW_REMAP Nonfatal``,
# ``NETIR_LINK_EVT/NETIR_LINK_DOWN Fatal``, ``TLW_RX/TLW_RX_PIPE0 Nonfatal``).
_XID_SEVERITY_RE = re.compile(
    r"(?:[A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)*\s+)?(?P<word>(?i:fatal|non-?fatal|non fatal))(?=[\s,.;:(]|$)")
# Driver and GSP failures without an Xid line (kernel_gsp.c, osinit.c, nv.c of drivers R570-R590).
_DRIVER_EVENT_RES = (
    ("gsp_timeout", re.compile(
        r"Timeout (?:after \d+m?s of )?waiting for RPC (?:response )?from (?:GPU\d+ )?GSP"
        r"|(?i:heartbeat timed out)|Rate limiting GSP RPC error prints for GPU|GSP core unresponsive"
        r"|GSP-RM unresponsive|GSP-RM is slow|\*{5,} GSP Timeout \*{5,}"
        r"|sanity check failed 0x[0-9a-fA-F]+ waiting for RPC response from GSP")),
    ("driver_init_failed", re.compile(
        r"RmInitAdapter failed|rm_init_adapter(?:\(\d+\))? failed|Cannot initialize GSP firmware RM"
        r"|unexpected WPR2 already up")),
    ("gpu_lost", re.compile(r"has fallen off the bus")),
)
_DRIVER_HINTS = ("GSP", "eartbeat", "nitAdapter", "nit_adapter", "fallen off", "WPR2")
_DRIVER_BUS_RE = re.compile(
    r"GPU (?:at )?(?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)(?![0-9a-fA-F])")
_GPU_INSTANCE_RE = re.compile(r"\bGPU(?P<inst>\d{1,3})\b")
_CARRIER_RE = re.compile(r"(?:^|\s)(?P<device>[\w.\-@]+): (?P<state>lost|gained) carrier\b", re.IGNORECASE)
_MLX5_LINK_RE = re.compile(
    r"mlx5_(?:core|ib)\S*(?: (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F:.]+))?(?: (?P<device>[\w.\-@]+))?: Link (?P<state>down|up)\b",
    re.IGNORECASE)
_CONTINUATION_RE = re.compile(r"\s*(?:NVRM:\s*)?(?:MMU Fault|Fault is of type|Fault at|ESR |GPC |TPC |SM )")
_TOOL_ERROR_RE = re.compile(r"^(?P<tool>dmesg|journalctl): (?P<message>.*)$")
_JOURNAL_HINT = "Hint: You are currently not seeing messages"
_NO_PERMISSION_RE = re.compile(r"not permitted|permission denied|not seeing messages", re.IGNORECASE)
_UNKNOWN_VALUES = frozenset(("", "<unknown>", "unknown"))

_FUTURE_SLACK_S = 2 * 86400
_TAIL_LINES = 200
_BUS_ID_CACHE = {}
_BUS_ID_CACHE_SIZE = 256


class _Clock(object):
    """Epoch seconds from the stamps of one log, cached per second (a flood of lines shares few distinct seconds)."""

    def __init__(self, year=None, reference_epoch=None, utc_offset_s=None, boot_epoch=None):
        self.reference = time.time() if reference_epoch is None else float(reference_epoch)
        self.year = int(year) if year is not None else None
        self.utc_offset_s = utc_offset_s
        self.boot_epoch = float(boot_epoch) if boot_epoch is not None else None
        self.cache = {}

    def wall(self, year, month, day, hms, offset_s=None):
        """Epoch of a wall-clock second; ``offset_s`` is the stamp's zone, ``None`` for zone-less stamps."""
        if offset_s is None and self.utc_offset_s is not None:
            offset_s = self.utc_offset_s
        fields = (year, month, day, int(hms[0:2]), int(hms[3:5]), int(hms[6:8]), 0, 0, -1)
        try:
            if offset_s is None:
                return time.mktime(fields)
            return float(timegm(year, month, day, fields[3], fields[4], fields[5]) - offset_s)
        except (OverflowError, ValueError):
            return None

    def syslog(self, month_name, day, hms):
        """Epoch of a year-less syslog stamp: the year given, else the reference's, one back if that is the future."""
        key = (month_name, day, hms)
        if key not in self.cache:
            month = _MONTHS[month_name]
            year = self.year if self.year is not None else self._reference_year()
            epoch = self.wall(year, month, int(day), hms)
            if self.year is None and epoch is not None and epoch > self.reference + _FUTURE_SLACK_S:
                epoch = self.wall(year - 1, month, int(day), hms)
            self.cache[key] = epoch
        return self.cache[key]

    def iso(self, date, hms, zone):
        """Epoch of an ISO 8601 stamp; zone-less ones are wall-clock times."""
        key = (date, hms, zone)
        if key not in self.cache:
            self.cache[key] = self.wall(int(date[0:4]), int(date[5:7]), int(date[8:10]), hms, _zone_offset(zone))
        return self.cache[key]

    def ctime(self, month_name, day, hms, year):
        """Epoch of a ``dmesg -T`` stamp (wall-clock time)."""
        key = (month_name, day, hms, year)
        if key not in self.cache:
            self.cache[key] = self.wall(int(year), _MONTHS[month_name], int(day), hms)
        return self.cache[key]

    def _reference_year(self):
        """Year of the reference time in the zone the stamps are read in."""
        if self.utc_offset_s is None:
            return time.localtime(self.reference).tm_year
        return time.gmtime(self.reference + self.utc_offset_s).tm_year


def timegm(year, month, day, hour, minute, second):
    """Seconds since the epoch of a UTC date and time (``calendar.timegm`` without importing ``calendar``, whose
    ``locale`` import costs more than this whole module)."""
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    return ((days * 24 + hour) * 60 + minute) * 60 + second


def _zone_offset(zone):
    """Seconds east of UTC for ``Z``, ``+00:00``, ``-0700``; ``None`` without a zone."""
    if not zone:
        return None
    if zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    offset = int(digits[0:2]) * 3600 + int(digits[2:4]) * 60
    return -offset if zone[0] == "-" else offset


def read_stamp(line, clock):
    """``(epoch, uptime_s, message_start)`` of a log line's time prefix; ``(None, None, 0)`` without one."""
    start = 0
    first = line[:1]
    if first.isupper():
        match = _SYSLOG_RE.match(line)
        if not match:
            return None, None, 0
        month, day, hms, frac = match.group("mon", "day", "hms", "frac")
        return _plus(clock.syslog(month, day, hms), frac), None, match.end()
    if first.islower():
        match = _DECODE_RE.match(line)
        if not match:
            return None, None, 0
        start = match.end()
        first = line[start:start + 1]
    if first == "[":
        return _bracket_stamp(line, start, clock)
    if first.isdigit():
        return _numeric_stamp(line, start, clock)
    return None, None, start


def _bracket_stamp(line, start, clock):
    """``[ 1234.567890]`` (uptime) or ``[Sun Feb 23 16:24:18 2025]`` (``dmesg -T``)."""
    match = _UPTIME_RE.match(line, start)
    if match:
        uptime = float(match.group("up"))
        epoch = clock.boot_epoch + uptime if clock.boot_epoch is not None else None
        return epoch, uptime, match.end()
    match = _CTIME_RE.match(line, start)
    if match:
        return clock.ctime(match.group("mon"), match.group("day"), match.group("hms"), match.group("year")), None, match.end()
    return None, None, start


def _numeric_stamp(line, start, clock):
    """ISO 8601 (``dmesg --time-format iso``, ``short-iso``) or ``short-unix`` seconds."""
    match = _ISO_RE.match(line, start)
    if match:
        date, hms, frac, zone = match.group("date", "hms", "frac", "tz")
        return _plus(clock.iso(date, hms, zone), frac), None, match.end()
    match = _UNIX_RE.match(line, start)
    if match:
        return float(match.group("unix")), None, match.end()
    return None, None, start


def _plus(epoch, fraction):
    """``epoch`` plus the fraction of a second whose digits are ``fraction``; ``None`` when ``epoch`` is."""
    if epoch is None or not fraction:
        return epoch
    return epoch + float("0." + fraction)


def new_event(kind, line, epoch, uptime_s, code=None, bus_id=None, device=None, pid=None, process=None,
              sxid_fatal=None, message="", fatal=None):  # pylint: disable=too-many-arguments
    """An event of the model."""
    return {"kind": kind, "code": code, "bus_id": bus_id, "device": device, "pid": pid, "process": process,
            "fatal": fatal, "sxid_fatal": sxid_fatal, "message": message, "epoch": epoch, "uptime_s": uptime_s,
            "raw": line}


def severity_word(message):
    """``True``/``False`` for a message whose severity field says ``Fatal``/``Nonfatal``; ``None`` otherwise."""
    match = _XID_SEVERITY_RE.match(message)
    if not match:
        return None
    return match.group("word").lower() == "fatal"


def _known(value):
    """``value`` without quotes/backticks; ``None`` for ``<unknown>`` and empty values."""
    if not value:
        return None
    value = value.strip("'\"` ")
    return None if value.lower() in _UNKNOWN_VALUES else value


def _pid(value):
    """Process id as int; ``None`` for ``'<unknown>'`` and the like."""
    return int(value) if value and value.isdecimal() and len(value) < 10 else None


def _inner_uptime(line, start):
    """The kernel's own ``[ 1234.567]`` stamp after a syslog/journal ``host kernel:`` prefix, or ``None``."""
    source = _SOURCE_RE.match(line, start)
    inner = _UPTIME_RE.match(line, source.end()) if source else None
    return float(inner.group("up")) if inner else None


def _bus_id(value):
    """``normalize_bus_id`` with a cache: a flood of Xids names few GPUs."""
    if value not in _BUS_ID_CACHE:
        if len(_BUS_ID_CACHE) >= _BUS_ID_CACHE_SIZE:
            _BUS_ID_CACHE.clear()
        _BUS_ID_CACHE[value] = normalize_bus_id(value)
    return _BUS_ID_CACHE[value]


def _is_candidate(line):
    """Whether a line may hold an event (a cheap test that spares the regexes most lines of a log)."""
    return ("Xid" in line or "arrier" in line or "ARRIER" in line or "mlx5" in line
            or ("NVRM" in line and any(hint in line for hint in _DRIVER_HINTS)))


class _KernelLogReader(object):
    """State of ``parse_kernel_log``: events so far, the Xid that continuation lines extend, the last SXid per
    switch and code (its ``Severity``/``Data`` lines are folded into it)."""

    def __init__(self, result, clock, text):
        self.result = result
        self.clock = clock
        self.text = text
        self.lines = text.split("\n")
        self.events = []
        self.last_sxid = {}

    def read(self):
        """Read the events of every candidate line, then the continuation lines after each Xid."""
        lines = self.lines
        for index in [i for i, line in enumerate(lines) if _is_candidate(line)]:
            event = self.event_line(lines[index], index + 1)
            if event is not None and event["kind"] == "xid":
                self._continuations(event, index + 1)
        if "dmesg: " in self.text or "journalctl: " in self.text or _JOURNAL_HINT in self.text:
            self._tool_errors()

    def latest_epoch(self):
        """Newest of the events' epochs and the last stamped line's (logs are written in time order)."""
        epochs = [event["epoch"] for event in self.events if event["epoch"] is not None]
        tail = [line for line in self.lines[-_TAIL_LINES:] if line]
        for line in reversed(tail):
            epoch, _uptime, start = read_stamp(line, self.clock)
            if start:
                if epoch is not None:
                    epochs.append(epoch)
                break
        return max(epochs) if epochs else None

    def event_line(self, line, lineno):
        """The event of one line (also recorded in ``events``), or ``None``."""
        epoch, uptime, start = read_stamp(line, self.clock)
        event = self._event(line, start, epoch, uptime, lineno)
        if event is not None:
            if uptime is None and start and not line.startswith("NVRM", start):
                event["uptime_s"] = _inner_uptime(line, start)
            self.events.append(event)
        return event

    def _continuations(self, event, index):
        """Fold the continuation lines that follow an Xid line into it."""
        while index < len(self.lines) and self.lines[index] and not _is_candidate(self.lines[index]):
            if not self._continue(event, self.lines[index]):
                return
            index += 1

    def _event(self, line, start, epoch, uptime, lineno):
        """The event a line reports, or ``None``."""
        if "Xid" in line:
            if "SXid" in line:
                return self._sxid(line, start, epoch, uptime, lineno)
            if "NVRM: Xid" in line:
                return self._xid(line, start, epoch, uptime, lineno)
        elif "NVRM" in line:
            return self._driver(line, start, epoch, uptime)
        elif "arrier" in line or "ARRIER" in line:
            return self._carrier(line, start, epoch, uptime)
        elif "mlx5" in line and ("ink " in line or "INK " in line):
            return self._mlx5_link(line, start, epoch, uptime)
        return None

    def _not_understood(self, lineno, what, line):
        """Note a line that names an event but does not have its format."""
        append_capped(self.result["unreadable"], "line %d: %s line not understood: %r" % (lineno, what, line[:80]))

    def _xid(self, line, start, epoch, uptime, lineno):
        """``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., message``."""
        match = _XID_RE.search(line, start)
        if not match:
            self._not_understood(lineno, "Xid", line)
            return None
        bus, code, pid, name, message = match.group("bus", "code", "pid", "name", "message")
        message = message.strip()
        return new_event("xid", line, epoch, uptime, code=int(code), bus_id=_bus_id(bus), pid=_pid(pid),
                         process=_known(name), message=message, fatal=severity_word(message))

    def _driver(self, line, start, epoch, uptime):
        """A driver or GSP failure without an Xid (``NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x40:2028)``,
        ``NVRM: GPU4 _kgspRpcRecvPoll: GSP RM heartbeat timed out``), or ``None``."""
        for kind, regex in _DRIVER_EVENT_RES:
            if regex.search(line, start):
                body = line[line.index("NVRM", start) + 4:].lstrip(": ").strip()
                bus = _DRIVER_BUS_RE.search(line, start)
                instance = _GPU_INSTANCE_RE.search(line, start)
                return new_event(kind, line, epoch, uptime, bus_id=_bus_id(bus.group("bus")) if bus else None,
                                 device="GPU" + instance.group("inst") if instance else None, message=body)
        return None

    def _sxid(self, line, start, epoch, uptime, lineno):
        """``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 46 LTSSM Fault Up``; the ``Severity ...``
        and ``Data {...}`` lines that follow an SXid are folded into it."""
        match = _SXID_RE.search(line, start)
        if not match:
            self._not_understood(lineno, "SXid", line)
            return None
        device, code, rest = match.group("device"), int(match.group("code")), match.group("rest").strip()
        previous = self.last_sxid.get((device, code))
        if previous is not None and _SXID_DETAIL_RE.match(rest):
            previous["message"] = "%s; %s" % (previous["message"], rest)
            previous["raw"] = "%s\n%s" % (previous["raw"], line)
            return None
        severity = _SXID_SEVERITY_RE.match(rest)
        fatal = severity.group("word").lower() == "fatal" if severity else None
        event = new_event("sxid", line, epoch, uptime, code=code, device=device, bus_id=_bus_id(match.group("bus")),
                          sxid_fatal=fatal, fatal=fatal, message=rest)
        self.last_sxid[(device, code)] = event
        return event

    def _carrier(self, line, start, epoch, uptime):
        """systemd-networkd ``ib6: Lost carrier`` / ``ib6: Gained carrier``."""
        match = _CARRIER_RE.search(line, start)
        if not match:
            return None
        kind = "link_down" if match.group("state").lower() == "lost" else "link_up"
        return new_event(kind, line, epoch, uptime, device=match.group("device"), message=line[match.start("device"):].strip())

    def _mlx5_link(self, line, start, epoch, uptime):
        """``mlx5_core 0000:3b:00.0 ib0: Link down`` / ``Link up``."""
        match = _MLX5_LINK_RE.search(line, start)
        if not match:
            return None
        state = match.group("state").lower()
        return new_event("link_down" if state == "down" else "link_up", line, epoch, uptime, device=match.group("device"),
                         bus_id=_bus_id(match.group("pci")) if match.group("pci") else None, message="Link " + state)

    def _continue(self, event, line):
        """Fold a continuation line (``MMU Fault: ...``, ``Fault is of type ...``, ``ESR ...``) into ``event``;
        ``False`` when the line is not one."""
        body = line[read_stamp(line, self.clock)[2]:]
        if not _CONTINUATION_RE.match(body):
            source = _SOURCE_RE.match(body)
            if not source or not _CONTINUATION_RE.match(body, source.end()):
                return False
            body = body[source.end():]
        event["message"] = ("%s %s" % (event["message"], body.strip())).strip()
        event["raw"] = "%s\n%s" % (event["raw"], line)
        return True

    def _tool_errors(self):
        """``dmesg: read kernel buffer failed: Operation not permitted`` and journal permission hints."""
        for line in self.lines:
            if line[:1] in ("d", "j", "H") and (_TOOL_ERROR_RE.match(line) or line.startswith(_JOURNAL_HINT)):
                kind = "permission_denied" if _NO_PERMISSION_RE.search(line) else "tool_error"
                self.result["errors"].append(new_error(kind, line))


def parse_kernel_log(text, since_epoch=None, reference_epoch=None, year=None, utc_offset_s=None, boot_epoch=None):
    """Xid, SXid, driver/GSP failure and link flap events of a kernel log, in log order.

    ``since_epoch``: keep only events at or after it (events without an epoch are kept). ``reference_epoch`` /
    ``year``: where the year of syslog stamps comes from. ``utc_offset_s``: the zone of zone-less stamps (default:
    this machine's local time). ``boot_epoch``: boot time, to give ``dmesg`` uptime stamps an epoch as well.
    ``latest_epoch`` is the newest stamp of the text: the last stamped line's, or an event's if that is newer.
    """
    result = new_result(events=[], latest_epoch=None)
    try:
        reader = _KernelLogReader(result, _Clock(year, reference_epoch, utc_offset_s, boot_epoch), clean_text(text))
        reader.read()
        result["latest_epoch"] = reader.latest_epoch()
        result["events"] = filter_since(reader.events, since_epoch)
    except Exception as exc:  # pylint: disable=broad-except
        append_capped(result["unreadable"], "internal error: %s: %s" % (exc.__class__.__name__, exc))
    return result


def filter_since(events, since_epoch):
    """Events at or after ``since_epoch`` plus those without an epoch; all of them when ``since_epoch`` is ``None``."""
    if since_epoch is None:
        return list(events)
    return [event for event in events if event["epoch"] is None or event["epoch"] >= since_epoch]
