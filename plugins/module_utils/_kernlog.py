# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU and fabric events from kernel logs: NVIDIA Xid, NVSwitch SXid and IB link flaps (see docs/health-model.md).

``parse_kernel_log(text, since_epoch=None, ...)`` returns::

    {"events": [{"kind": "xid" | "sxid" | "link_down" | "link_up", "code", "bus_id", "device", "pid", "process",
                 "sxid_fatal", "message", "epoch", "uptime_s", "raw"}],
     "latest_epoch": float | None, "errors": [...], "unreadable": [...]}

It reads every prefix style a node produces: ``dmesg`` (``[ 1234.567890]``), ``dmesg -T``
(``[Sun Feb 23 16:24:18 2025]``), ``dmesg --time-format iso``, ``dmesg --decode`` (``kern  :warn  :``), syslog
(``Jun 11 08:09:10 host kernel:``), ``journalctl -o short-iso``/``short-precise``/``short-monotonic``/``short-unix``,
and bare lines. Stamps without a zone (syslog, ``dmesg -T``, ``short-precise``) are local time unless
``utc_offset_s`` is given; syslog stamps have no year: it comes from ``year``, else from ``reference_epoch`` (default:
now), going one year back for dates that would lie in the future.

``XID_CATALOG`` maps Xid codes to ``{"name", "class", "severity", "action"}``, from NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors). Severity ``error`` when the catalog asks for a GPU reset, a reboot or a
hardware workflow, or when the Xid reports a memory fault (48, 64, 92, 94, 95, 140, ...); ``warning`` for
application faults (13, 31, 43, 45, ...), engine exceptions the application restart clears, informational events and
Xid 63 (a row remap that waits for a reset: drain when convenient; the nvidia-smi ``remapped_rows.pending`` check
covers it too). ``xid_info(code)`` answers for unknown codes as well (``class: unknown``, ``severity: warning``).

Standard library only, Python 3.6+; nothing here raises.
"""

import re
import time

from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
    append_capped, clean_text, new_error, new_result, normalize_bus_id,
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

_ACT_APP = "Restart the application; if it recurs with a known-good application, check the application/CUDA code."
_ACT_ENGINE = "Engine exception: restart the application; contact support if it recurs on this GPU."
_ACT_RESET = "Drain the node and reset the GPU (nvidia-smi -r or reboot); contact support if it recurs."
_ACT_REBOOT = "Drain the node and reboot it (power cycle); contact support if it recurs."
_ACT_INFO = "Informational; no action unless it repeats."
_ACT_NVLINK5 = "NVLink error: decode intrInfo/errorStatus with the Xid 144-150 tab of NVIDIA's Xid catalog; reset the GPU if it is fatal."
_ACT_UNKNOWN = "Unknown Xid: look it up in NVIDIA's Xid catalog for this driver; contact support if it repeats."

XID_CATALOG = {
    8: {
        "name": "GPU stopped processing", "class": "application", "severity": "warning",
        "action": "GPU stopped processing: restart the application; contact support if it recurs."},
    11: {"name": "Invalid or corrupted push buffer stream", "class": "application", "severity": "warning", "action": _ACT_APP},
    13: {
        "name": "Graphics Engine Exception", "class": "application", "severity": "warning",
        "action": "Application fault: restart the application; if it repeats on the same GPC/TPC, run dcgmi diag -r 3 (possible hardware fault)."},
    14: {"name": "Fake or injected error", "class": "driver", "severity": "warning", "action": "Injected test error: no action."},
    25: {"name": "Invalid or illegal push buffer stream", "class": "application", "severity": "warning", "action": _ACT_APP},
    31: {
        "name": "GPU memory page fault", "class": "application", "severity": "warning",
        "action": "Application memory fault: restart the application; if it repeats on the same GPU across jobs, run dcgmi diag -r 3."},
    32: {"name": "Invalid or corrupted push buffer stream", "class": "application", "severity": "warning", "action": _ACT_APP},
    37: {
        "name": "Driver firmware error", "class": "driver", "severity": "warning",
        "action": "Driver firmware error: no action unless it repeats; then update the driver."},
    38: {
        "name": "Driver firmware error", "class": "driver", "severity": "warning",
        "action": "Driver firmware watchdog: no action unless it repeats; then contact support."},
    39: {"name": "Copy Engine Exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    40: {"name": "Copy Engine Exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    41: {"name": "Copy Engine Exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    43: {
        "name": "GPU stopped processing", "class": "application", "severity": "warning",
        "action": "The application hit a software fault and was stopped; no action for the node."},
    44: {"name": "Graphics Engine fault during context switch", "class": "driver", "severity": "warning", "action": _ACT_INFO},
    45: {
        "name": "Preemptive cleanup, due to previous errors", "class": "application", "severity": "warning",
        "action": "Preemptive cleanup after other errors: follow the other Xids; seen alone, restart the fabric manager."},
    46: {"name": "GPU stopped processing", "class": "hardware", "severity": "error", "action": _ACT_RESET},
    48: {
        "name": "Double Bit ECC Error", "class": "memory", "severity": "error",
        "action": "Uncorrectable ECC error: drain the node and reset the GPU; if it recurs, run field diagnostics."},
    54: {
        "name": "Auxiliary power is not connected to the GPU board", "class": "hardware", "severity": "error",
        "action": "Auxiliary power is not connected: check the GPU's power cables and seating."},
    60: {"name": "Video processor exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    62: {"name": "Internal micro-controller halt", "class": "hardware", "severity": "error", "action": _ACT_RESET},
    63: {
        "name": "GPU memory remapping event", "class": "memory", "severity": "warning",
        "action": "Row remapping pending: drain and reset the GPU when convenient to activate it (now if Xid 48 came with it)."},
    64: {
        "name": "GPU memory remapping failure", "class": "memory", "severity": "error",
        "action": "Row remapping failed: drain the node, reset the GPU and contact support (likely RMA)."},
    66: {
        "name": "Illegal access by driver", "class": "driver", "severity": "warning",
        "action": "Illegal register access by the driver: investigate the software; update the driver if it repeats."},
    67: {
        "name": "Illegal access by driver", "class": "driver", "severity": "warning",
        "action": "Illegal register access by the driver: contact support if it repeats."},
    68: {"name": "NVDEC0 Exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    69: {"name": "Graphics Engine class error", "class": "application", "severity": "warning", "action": _ACT_APP},
    70: {"name": "CE3: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    71: {"name": "CE4: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    72: {"name": "CE5: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    74: {
        "name": "NVLINK Error", "class": "nvlink", "severity": "error",
        "action": "NVLink error: drain the node and reset the GPU; check and re-seat the link and run diagnostics if it repeats."},
    75: {"name": "CE6: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    76: {"name": "CE7: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    77: {"name": "CE8: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    78: {
        "name": "vGPU Start Error", "class": "driver", "severity": "error",
        "action": "vGPU failed to start: align guest and host driver versions and the vGPU type."},
    79: {
        "name": "GPU has fallen off the bus", "class": "hardware", "severity": "error",
        "action": "GPU has fallen off the bus: drain the node and reboot it (power cycle); contact support if it recurs."},
    80: {"name": "Corrupted data sent to GPU", "class": "application", "severity": "warning", "action": _ACT_APP},
    82: {"name": "NVJPG0 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    83: {"name": "NVDEC1 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    84: {"name": "NVDEC2 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    85: {"name": "CE9: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    86: {"name": "OFA Exception", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    88: {"name": "NVDEC3 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    89: {"name": "NVDEC4 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    92: {
        "name": "High single-bit ECC error rate", "class": "memory", "severity": "error",
        "action": "High single-bit ECC error rate: watch the ECC and remapped-row counters; contact support if it persists."},
    93: {
        "name": "InfoROM wear limit exceeded", "class": "memory", "severity": "warning",
        "action": "InfoROM wear limit exceeded: contact support at the next maintenance."},
    94: {
        "name": "Contained memory error", "class": "memory", "severity": "error",
        "action": "Contained ECC error: restart the affected application; reset the GPU when convenient to remap the row."},
    95: {
        "name": "Uncontained memory error", "class": "memory", "severity": "error",
        "action": "Uncontained ECC error: drain the node and reset the GPU."},
    96: {"name": "NVDEC5 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    97: {"name": "NVDEC6 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    98: {"name": "NVDEC7 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    99: {"name": "NVJPG1 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    100: {"name": "NVJPG2 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    101: {"name": "NVJPG3 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    102: {"name": "NVJPG4 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    103: {"name": "NVJPG5 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    104: {"name": "NVJPG6 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    105: {"name": "NVJPG7 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    106: {"name": "SMBPBI Test Message", "class": "driver", "severity": "warning", "action": "SMBPBI test message: no action."},
    107: {"name": "SMBPBI Test Message Silent", "class": "driver", "severity": "warning", "action": "SMBPBI test message: no action."},
    109: {"name": "Context Switch Timeout Error", "class": "driver", "severity": "error", "action": _ACT_RESET},
    110: {
        "name": "Security Fault Error", "class": "hardware", "severity": "error",
        "action": "Security fault: drain the node and reset the GPU; investigate the software if it recurs."},
    119: {
        "name": "GSP RPC Timeout", "class": "driver", "severity": "error",
        "action": "GSP RPC timeout: drain the node and reset the GPU; update the driver if it recurs."},
    120: {
        "name": "GSP Error", "class": "driver", "severity": "error",
        "action": "GSP error: drain the node and reset the GPU; update the driver if it recurs."},
    121: {
        "name": "C2C Error", "class": "hardware", "severity": "warning",
        "action": "C2C link corrected errors: no action; contact support if they repeat."},
    126: {"name": "CE10: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    127: {"name": "CE11: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    128: {"name": "CE12: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    129: {"name": "CE13: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    130: {"name": "CE14: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    131: {"name": "CE15: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    132: {"name": "CE16: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    133: {"name": "CE17: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    134: {"name": "CE18: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    135: {"name": "CE19: Unknown Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    136: {
        "name": "Link Training Failed", "class": "nvlink", "severity": "error",
        "action": "NVLink training failed: reset the GPU; check the link's cables and signal integrity."},
    137: {
        "name": "NVLink Privilege Error", "class": "application", "severity": "warning",
        "action": "Illegal NVLink peer access (application bug): run the application under cuda-gdb or compute-sanitizer."},
    139: {"name": "OFA1 Error", "class": "hardware", "severity": "warning", "action": _ACT_ENGINE},
    140: {
        "name": "ECC Unrecovered Error", "class": "memory", "severity": "error",
        "action": "Unrecovered ECC error: drain the node and reset the GPU; contact support if it recurs."},
    141: {"name": "CUDA Fast Path Error", "class": "driver", "severity": "warning", "action": _ACT_INFO},
    142: {"name": "NVENC3 Error", "class": "hardware", "severity": "error", "action": "NVENC3 error: contact support."},
    143: {
        "name": "GPU Initialization Error", "class": "hardware", "severity": "error",
        "action": "GPU initialisation failed: drain the node and reset the GPU; contact support if it recurs."},
    144: {"name": "NVLINK: SAW Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    145: {"name": "NVLINK: RLW Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    146: {"name": "NVLINK: TLW Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    147: {"name": "NVLINK: TREX Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    148: {"name": "NVLINK: NVLPW_CTRL Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    149: {"name": "NVLINK: NETIR Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    150: {"name": "NVLINK: MSE Error", "class": "nvlink", "severity": "error", "action": _ACT_NVLINK5},
    151: {"name": "Key rotation Error", "class": "driver", "severity": "error", "action": "Key rotation error: restart the VM that owns the GPU."},
    154: {
        "name": "GPU Recovery Action Changed", "class": "driver", "severity": "warning",
        "action": "GPU recovery action changed: follow the action it names for the Xid it accompanies."},
    155: {
        "name": "NVLINK: SW Defined Error", "class": "nvlink", "severity": "error",
        "action": "NVLink taken down by software: reset the GPU; find who disabled the link if unexpected."},
    156: {
        "name": "Resource Retirement Event", "class": "memory", "severity": "error",
        "action": "Resource retirement event: reset the GPU to apply the retirement."},
    157: {
        "name": "Resource Retirement Failure", "class": "memory", "severity": "error",
        "action": "Resource retirement failed (no spare resources left): contact support."},
    158: {"name": "GPU Fatal Timeout", "class": "hardware", "severity": "error", "action": _ACT_RESET},
    159: {
        "name": "CHI Non-Data Error", "class": "hardware", "severity": "warning",
        "action": "C2C non-data error: reset the GPU if UVM or vGPU is in use; otherwise no action."},
    160: {
        "name": "Channel Retirement Event", "class": "driver", "severity": "warning",
        "action": "Channel retirement: informational; investigate the software if it repeats."},
    161: {
        "name": "Channel Retirement Failure", "class": "driver", "severity": "warning",
        "action": "Channel retirement failed: investigate the software."},
    162: {
        "name": "Power smoothing circuitry re-engaged", "class": "hardware", "severity": "warning",
        "action": "Power smoothing re-engaged: no action."},
    163: {
        "name": "Power smoothing circuitry disengaged", "class": "hardware", "severity": "warning",
        "action": "Power smoothing disengaged: no reset needed; watch power swings."},
    164: {
        "name": "Power smoothing circuitry low lifetime", "class": "hardware", "severity": "warning",
        "action": "Power smoothing circuitry near end of life: plan GPU replacement if power swings matter."},
    165: {
        "name": "Power smoothing circuitry lifetime exhausted", "class": "hardware", "severity": "warning",
        "action": "Power smoothing circuitry exhausted: replace the GPU if power swings are not acceptable."},
    166: {
        "name": "NVLink traffic before encryption was configured", "class": "nvlink", "severity": "warning",
        "action": "Confidential-computing NVLink traffic before encryption was set up: check the CC configuration."},
    167: {
        "name": "PCIE_FATAL_TIMEOUT", "class": "hardware", "severity": "error",
        "action": "PCIe fatal timeout: drain the node and reset the GPU; check PCIe seating and risers if it recurs."},
    168: {
        "name": "Errors found in write-protected memory region", "class": "memory", "severity": "error",
        "action": "Errors in the write-protected memory region (ECC disabled?): enable ECC and reset the GPU."},
    169: {
        "name": "Internal micro-controller halt", "class": "hardware", "severity": "error",
        "action": "SEC2 micro-controller halted: drain the node and reset the GPU."},
    170: {
        "name": "Interrupt seen in CC mode", "class": "nvlink", "severity": "warning",
        "action": "Confidential-computing NVLink interrupt: check the CC configuration."},
    171: {
        "name": "Uncorrectable DRAM error", "class": "memory", "severity": "error",
        "action": "Uncorrectable DRAM error (details of Xid 48): drain the node and reset the GPU."},
    172: {
        "name": "Uncorrectable SRAM error", "class": "memory", "severity": "error",
        "action": "Uncorrectable SRAM error (details of Xid 48): drain the node and reset the GPU."},
}


def xid_info(code):
    """The ``XID_CATALOG`` entry for ``code`` (an int); unknown codes get class ``unknown`` and severity ``warning``."""
    entry = XID_CATALOG.get(code)
    if entry is not None:
        return entry
    return {"name": "Unknown Xid %s" % code, "class": "unknown", "severity": "warning", "action": _ACT_UNKNOWN}


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
              sxid_fatal=None, message=""):  # pylint: disable=too-many-arguments
    """An event of the model."""
    return {"kind": kind, "code": code, "bus_id": bus_id, "device": device, "pid": pid, "process": process,
            "sxid_fatal": sxid_fatal, "message": message, "epoch": epoch, "uptime_s": uptime_s, "raw": line}


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
    return "Xid" in line or "arrier" in line or "ARRIER" in line or "mlx5" in line


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
        return new_event("xid", line, epoch, uptime, code=int(code), bus_id=_bus_id(bus), pid=_pid(pid),
                         process=_known(name), message=message.strip())

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
                          sxid_fatal=fatal, message=rest)
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
    """Xid, SXid and link flap events of a kernel log, in log order.

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
