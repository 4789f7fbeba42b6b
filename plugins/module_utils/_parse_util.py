# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Value normalisation shared by the health parsers (nvidia-smi, NVLink, InfiniBand, kernel log, DCGM, NCCL).

Standard library only; runs on the nodes (Python 3.8+, 3.9+ under ansible-core 2.20 and later). Nothing here raises on bad input: the converters return
``None`` for "not available" values and, when given an ``unreadable`` list, append a short note for values that are
present but cannot be read (``"gpu 3: temperature/gpu_temp value 'abc' is not a number"``).

Public helpers:

- ``to_text(data)``: ``str`` from ``str``/``bytes``/anything (never raises).
- ``clean_text(data)``: ``to_text`` plus line cleanup: CRLF/CR, ANSI escapes, trailing spaces, markdown ``> `` quotes.
- ``strip_ansi(text)``: remove ANSI/VT100 escape sequences.
- ``na_to_none(value)``: stripped string, or ``None`` for N/A, Not Supported, Unknown, deprecated and empty values.
- ``strip_unit(value)``: number text without its unit suffix (``"81559 MiB"`` -> ``"81559"``).
- ``to_int(value, unreadable, what)``, ``to_float(...)``, ``to_bool(...)``: typed values or ``None``.
- ``normalize_bus_id(value)``: PCI bus id in nvidia-smi's long upper-case form ``00000000:18:00.0``, or ``None``.
- ``split_key_value(line)``: ``(key, value)`` of a ``Key : value`` line.
- ``sum_or_none(values)``: sum of the values that are not ``None``; ``None`` when all are.
- ``new_error(kind, message, **fields)``: an entry for a parser's ``errors`` list.
- ``new_result(**keys)``: a result dict with empty ``errors`` and ``unreadable`` lists.
- ``cap_notes(notes, limit)``: the first ``limit`` notes plus a count of the rest (keeps results small).
- ``read_bounded(path, max_bytes)``: a regular file's bytes with a size cap, or the reason it cannot be read (a
  FIFO, a device, a directory, a symlink loop, too large), in bounded time and memory.
"""

import math
import os
import re
import stat

__all__ = [
    "DEFAULT_INPUT_MAX_BYTES", "NA_VALUES", "cap_notes", "clean_text", "na_to_none", "new_error", "new_result", "normalize_bus_id", "split_key_value",
    "read_bounded", "strip_ansi", "strip_unit", "sum_or_none", "to_bool", "to_float", "to_int", "to_text",
]

# Values that mean "no value here" in nvidia-smi, DCGM and friends, compared lower-case with brackets removed.
NA_VALUES = frozenset((
    "", "n/a", "na", "not supported", "not available", "unknown", "unknown error",
    "requested functionality has been deprecated", "-",
))

_TRUE_WORDS = frozenset(("enabled", "enable", "active", "yes", "true", "on", "1"))
_FALSE_WORDS = frozenset(("disabled", "disable", "not active", "inactive", "no", "false", "off", "0"))

# CSI sequences (colours, underline: "\x1b[4m"), OSC sequences and two-character escapes.
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_QUOTE_RE = re.compile(r"^>(?: |$)", re.MULTILINE)
_NUMBER_RE = re.compile(r"^([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%/()_.]*(?:/[A-Za-z]+)?)$")
_HEX_RE = re.compile(r"^0[xX]([0-9a-fA-F]+)$")
_BUS_ID_RE = re.compile(
    r"(?:^|[^0-9A-Fa-f:])(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?(?![0-9A-Fa-f.]|:[0-9A-Fa-f])")
_PREFIX_RE = re.compile(r"^(?:PCI:|GPU|pci@)", re.IGNORECASE)

UNREADABLE_LIMIT = 50


def to_text(data):
    """Return ``data`` as ``str``: bytes are decoded as UTF-8 with replacement, ``None`` becomes ``""``."""
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray)):
        return bytes(data).decode("utf-8", "replace")
    try:
        return str(data)
    except Exception:  # pylint: disable=broad-except
        return ""


def strip_ansi(text):
    """Remove ANSI escape sequences (``ESC[4m``, ``ESC[0m``, ...) from ``text``."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text).replace("\x1b", "")


def clean_text(data):
    """Text ready for line parsing: ``to_text``, then CRLF/CR to LF, ANSI escapes removed, NUL bytes removed,
    markdown quote prefixes (``> `` at the start of a line) and trailing whitespace stripped from each line. Tabs and leading spaces stay.
    """
    text = strip_ansi(to_text(data))
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if (text.startswith(">") or "\n>" in text) and _QUOTE_RE.search(text):
        text = _QUOTE_RE.sub("", text)
    if " \n" in text or "\t\n" in text or text.endswith((" ", "\t")):
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def na_to_none(value):
    """Return the stripped string, or ``None`` for "not available" values (``N/A``, ``[N/A]``, ``Not Supported``,
    ``[Not Supported]``, ``Unknown``, ``[Unknown Error]``, ``Requested functionality has been deprecated``, empty)."""
    if value is None:
        return None
    text = to_text(value).strip()
    key = text.lower()
    if key.startswith("[") and key.endswith("]"):
        key = key[1:-1].strip()
    if key in NA_VALUES:
        return None
    return text


def _note(unreadable, what, value, reason):
    """Append ``"<what> value '<value>' <reason>"`` to ``unreadable`` when a list is given."""
    if unreadable is not None:
        shown = to_text(value).strip()
        if len(shown) > 40:
            shown = shown[:37] + "..."
        unreadable.append("%s value %r %s" % (what or "field", shown, reason))


def _number_parts(value):
    """``(number_text, unit)`` of ``value`` or ``None`` when it is not a number with an optional unit."""
    match = _NUMBER_RE.match(value)
    if not match:
        return None
    return match.group(1), match.group(2)


def strip_unit(value):
    """Return the number part of ``"81559 MiB"``, ``"16x"``, ``"26.562 GB/s"``, ``"2560 bank(s)"``, ``"100.00%"``;
    ``None`` for N/A values; the stripped value unchanged when it is not a number with a unit."""
    text = na_to_none(value)
    if text is None:
        return None
    parts = _number_parts(text)
    return parts[0] if parts else text


def to_int(value, unreadable=None, what=None, allow_hex=False):
    """Integer from ``value`` (units stripped, ``"0x1A"`` when ``allow_hex``); ``None`` for N/A values and for values
    that are not integers (those are noted in ``unreadable`` as ``"<what> value 'x' is not a number"``)."""
    text = na_to_none(value)
    if text is None:
        return None
    if allow_hex:
        match = _HEX_RE.match(text)
        if match:
            return int(match.group(1), 16)
    parts = _number_parts(text)
    if parts is None:
        _note(unreadable, what, value, "is not a number")
        return None
    number = parts[0]
    if re.match(r"^[-+]?[0-9]+$", number):
        return int(number)
    try:
        as_float = float(number)
    except (ValueError, OverflowError):
        as_float = None
    if as_float is not None and math.isfinite(as_float) and abs(as_float) < 1e18 and as_float == int(as_float):
        return int(as_float)
    _note(unreadable, what, value, "is not an integer")
    return None


def to_float(value, unreadable=None, what=None):
    """Float from ``value`` (units stripped: ``"629.45 W"`` -> ``629.45``); ``None`` for N/A values and for values
    that are not numbers (noted in ``unreadable``)."""
    text = na_to_none(value)
    if text is None:
        return None
    parts = _number_parts(text)
    if parts is None:
        _note(unreadable, what, value, "is not a number")
        return None
    try:
        return float(parts[0])
    except (ValueError, OverflowError):
        _note(unreadable, what, value, "is not a number")
        return None


def to_bool(value, unreadable=None, what=None):
    """``True`` for Enabled/Active/Yes/True/On/1, ``False`` for Disabled/Not Active/No/False/Off/0, ``None`` for N/A
    values and anything else (noted in ``unreadable``)."""
    text = na_to_none(value)
    if text is None:
        return None
    key = " ".join(text.lower().split())
    if key in _TRUE_WORDS:
        return True
    if key in _FALSE_WORDS:
        return False
    _note(unreadable, what, value, "is not a yes/no value")
    return None


def normalize_bus_id(value):
    """PCI bus id in nvidia-smi's long form, upper-case hex: ``00000000:18:00.0``.

    Accepts ``0000:18:00.0``, ``00000000:18:00.0``, ``18:00.0``, ``PCI:0000:18:00``, ``GPU0000:91:00.0`` (as printed
    in "Unable to determine the device handle for GPU0000:91:00.0") and lower case; the domain defaults to 0 and the
    function to ``.0``. Returns ``None`` when ``value`` holds no bus id.
    """
    text = na_to_none(value)
    if text is None:
        return None
    text = _PREFIX_RE.sub("", text)
    match = _BUS_ID_RE.search(text)
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return "%08X:%02X:%02X.%s" % (int(domain or "0", 16), int(bus, 16), int(device, 16), function or "0")


def split_key_value(line, sep=":"):
    """``("Key", "value")`` from ``"    Key      : value"`` (split at the first ``sep`` followed by a space or the end of
    the line, so ``"Bus Id : 00000000:18:00.0"`` keeps the bus id whole); ``(stripped line, None)`` without one."""
    start = 0
    while True:
        pos = line.find(sep, start)
        if pos < 0:
            return line.strip(), None
        after = line[pos + len(sep):pos + len(sep) + 1]
        if after in ("", " ", "\t"):
            return line[:pos].strip(), line[pos + len(sep):].strip()
        start = pos + len(sep)


def sum_or_none(values):
    """Sum of the values that are not ``None``; ``None`` when there are none."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return sum(present)


def new_error(kind, message, **fields):
    """An entry for a result's ``errors`` list: ``{"kind": kind, "message": message, **fields}``."""
    entry = {"kind": kind, "message": to_text(message).strip()}
    entry.update(fields)
    return entry


def new_result(**keys):
    """A parser result: the given keys plus empty ``errors`` and ``unreadable`` lists."""
    result = dict(keys)
    result["errors"] = []
    result["unreadable"] = []
    return result


def cap_notes(notes, limit=50):
    """``notes`` when it has at most ``limit`` entries, else the first ``limit`` and ``"... and N more"``."""
    if len(notes) <= limit:
        return notes
    return notes[:limit] + ["... and %d more" % (len(notes) - limit)]


def append_capped(items, message, limit=UNREADABLE_LIMIT):
    """Append ``message`` to ``items`` while it holds fewer than ``limit`` entries; past that, keep one last entry
    that counts what was left out (``"... and 12 more"``)."""
    if len(items) < limit:
        items.append(message)
        return
    last = items[-1]
    dropped = 1
    if last.startswith("... and ") and last.endswith(" more"):
        try:
            dropped = int(last[8:-5]) + 1
        except ValueError:
            dropped = 1
        items[-1] = "... and %d more" % dropped
    else:
        items.append("... and 1 more")


# The largest input the health checker reads by default: far above any real tool output (nvidia-smi -q -x of an
# 8-GPU node is about 150 KiB, a day of a busy node's kernel log a few MiB), far below what costs seconds to parse.
DEFAULT_INPUT_MAX_BYTES = 16 * 1024 * 1024

_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_bounded(path, max_bytes=DEFAULT_INPUT_MAX_BYTES):
    """``(bytes, None)`` for a regular file of at most ``max_bytes``, else ``(None, reason)`` (the reason without
    the path: ``"is a FIFO, not a regular file"``); never blocks, never raises, reads at most ``max_bytes + 1`` bytes.

    A FIFO, a device (``/dev/zero``), a socket, a directory, a symlink loop or a file over the cap is refused with
    the reason: the file is opened non-blocking (a FIFO with no writer does not hang the open) and checked with
    ``fstat`` before anything is read. sysfs attributes are regular files and read as usual.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (IOError, OSError) as exc:
        return None, "cannot read (%s)" % (exc.strerror or exc.__class__.__name__)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
            return None, "is %s, not a regular file" % kind
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            return None, "is larger than the %d-byte input cap" % max_bytes
        return b"".join(chunks), None
    except (IOError, OSError) as exc:
        return None, "cannot read (%s)" % (exc.strerror or exc.__class__.__name__)
    finally:
        os.close(fd)
