# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for ``_parse_util`` (being written on another branch) used by ``_ib``, ``_kernlog``, ``_dcgm`` and ``_nccl``.

Every helper here has the name, signature and behaviour of its counterpart in ``_parse_util`` so that the merge is
an import swap: ``to_text``, ``clean_text``, ``na_to_none``, ``to_int``, ``to_float``, ``normalize_bus_id``,
``new_error``, ``new_result``. One helper has no counterpart yet: ``append_capped`` (bounded ``unreadable`` lists, so
that a megabyte of random input does not produce a megabyte of notes).

Standard library only, Python 3.6+; nothing here raises on bad input.
"""

import re

NA_VALUES = frozenset((
    "", "n/a", "na", "not supported", "not available", "unknown", "unknown error",
    "requested functionality has been deprecated", "-",
))

UNREADABLE_LIMIT = 50

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_QUOTE_RE = re.compile(r"^[ \t]*>(?: |$)")
_NUMBER_RE = re.compile(r"^([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%/()_.]*(?:/[A-Za-z]+)?)$")
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_BUS_ID_RE = re.compile(
    r"(?:^|[^0-9A-Fa-f:])(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?(?![0-9A-Fa-f.]|:[0-9A-Fa-f])")
_BUS_PREFIX_RE = re.compile(r"^(?:PCI:|GPU|pci@)", re.IGNORECASE)


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


def clean_text(data):
    """Text ready for line parsing: CRLF/CR to LF, ANSI escapes and NUL bytes removed, markdown quote prefixes
    (``> ``) and trailing whitespace stripped from each line. Tabs and leading spaces stay."""
    text = to_text(data)
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text).replace("\x1b", "")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    lines = text.split("\n")
    if ">" in text and any(_QUOTE_RE.match(line) for line in lines):
        lines = [_QUOTE_RE.sub("", line, count=1) for line in lines]
    return "\n".join(line.rstrip() for line in lines)


def na_to_none(value):
    """The stripped string, or ``None`` for "not available" values (``N/A``, ``[N/A]``, ``Not Supported``,
    ``Unknown``, ``[Unknown Error]``, ``Requested functionality has been deprecated``, empty)."""
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
        append_capped(unreadable, "%s value %r %s" % (what or "field", shown, reason))


def to_int(value, unreadable=None, what=None):
    """Integer from ``value`` (unit suffix stripped); ``None`` for N/A values and for values that are not integers
    (those are noted in ``unreadable``)."""
    text = na_to_none(value)
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    if match and _INT_RE.match(match.group(1)):
        return int(match.group(1))
    _note(unreadable, what, value, "is not an integer")
    return None


def to_float(value, unreadable=None, what=None):
    """Float from ``value`` (unit suffix stripped: ``"629.45 W"`` -> ``629.45``); ``None`` for N/A values and for
    values that are not numbers (noted in ``unreadable``)."""
    text = na_to_none(value)
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    if match:
        try:
            return float(match.group(1))
        except (ValueError, OverflowError):
            pass
    _note(unreadable, what, value, "is not a number")
    return None


def normalize_bus_id(value):
    """PCI bus id in nvidia-smi's long upper-case form ``00000000:18:00.0`` from ``0000:18:00.0``, ``18:00.0``,
    ``PCI:0000:18:00`` and the like (function defaults to ``.0``); ``None`` when ``value`` holds no bus id."""
    text = na_to_none(value)
    if text is None:
        return None
    match = _BUS_ID_RE.search(_BUS_PREFIX_RE.sub("", text))
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return "%08X:%02X:%02X.%s" % (int(domain or "0", 16), int(bus, 16), int(device, 16), function or "0")


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
