# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Results of nccl-tests ``all_reduce_perf`` (see docs/health-model.md).

``parse_all_reduce(text)`` reads the current format (``redop root`` columns, ``#wrong`` per phase) and the old one
(no ``root`` column, an ``error`` column holding floats such as ``7e-07``), with ``N/A`` cells, ``NCCL INFO`` and
``NCCL version`` lines between the rows, CRLF line ends and times printed as integers from 10000 us on. It returns::

    {"rows": [{"size_bytes", "count", "type", "redop", "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
               "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong"}],
     "avg_busbw_gbps": float | None, "max_busbw_gbps": float | None, "errors": [...], "unreadable": [...]}

``avg_busbw_gbps`` is what the test printed (``# Avg bus bandwidth``), ``max_busbw_gbps`` the highest out-of-place or
in-place busbw of the rows. Launcher failures (mpirun's "There are not enough slots available" banner, srun errors)
are ``errors`` of kind ``launcher``; ``Test NCCL failure``/``Test CUDA failure`` lines are kinds ``nccl``/``cuda``;
``# Out of bounds values : 3 FAILED`` is kind ``wrong_results``. Standard library only; nothing here raises.
"""

import re

from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
    append_capped, clean_text, na_to_none, new_error, new_result, to_float, to_int,
)

_PHASE_COLUMNS = ("time_us", "algbw", "busbw", "wrong")
# Columns before the per-phase ones, by the number of cells of a row when there is no header to tell.
_PREFIXES_BY_WIDTH = {
    13: ("size", "count", "type", "redop", "root"),
    12: ("size", "count", "type", "redop"),
    11: ("size", "count", "type"),
}

_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S*)")
_OUT_OF_BOUNDS_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d{1,12})\s*(?P<verdict>\w*)")
_LAUNCHER_RE = re.compile(
    r"There are not enough slots available|mpirun (?:noticed|was unable|has exited|detected)|ORTE (?:was unable|has lost)"
    r"|prterun (?:was unable|noticed)|srun: error:|PMIX ERROR|execvp error|command not found|: No such file or directory$")
_TEST_FAILURE_RE = re.compile(r"Test (?P<what>NCCL|CUDA) failure|\bTest failure\b")
_BANNER_LINES = 3


def _prefix_from_header(cells):
    """Column names before the first ``time`` of a ``# size count type redop root time ...`` header."""
    if "time" not in cells:
        return None
    return tuple(cells[:cells.index("time")])


def _wrong_value(text, unreadable, what):
    """``#wrong`` (an int) or the old ``error`` column (a float such as ``7e-07``); ``None`` for ``N/A``."""
    value = na_to_none(text)
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return to_int(value, unreadable, what)
    return to_float(value, unreadable, what)


def _phase(cells, prefix_name, unreadable, what):
    """The four values of one phase (out-of-place or in-place) under the model's names."""
    time_us, algbw, busbw, wrong = cells
    return {
        prefix_name + "_time_us": to_float(time_us, unreadable, what + " time"),
        prefix_name + "_algbw": to_float(algbw, unreadable, what + " algbw"),
        prefix_name + "_busbw": to_float(busbw, unreadable, what + " busbw"),
        prefix_name + "_wrong": _wrong_value(wrong, unreadable, what + " wrong"),
    }


def parse_row(cells, prefix, unreadable, lineno):
    """One result row as a model row, or ``None`` (and a note) when its cells do not fit the columns."""
    prefix = prefix or _PREFIXES_BY_WIDTH.get(len(cells))
    if not prefix or len(cells) != len(prefix) + 2 * len(_PHASE_COLUMNS):
        append_capped(unreadable, "line %d: %d cells do not fit the table's columns" % (lineno, len(cells)))
        return None
    named = dict(zip(prefix, cells))
    what = "line %d" % lineno
    row = {
        "size_bytes": to_int(named.get("size"), unreadable, what + " size"),
        "count": to_int(named.get("count"), unreadable, what + " count"),
        "type": named.get("type"),
        "redop": na_to_none(named.get("redop")),
    }
    if row["size_bytes"] is None:
        return None
    width = len(prefix)
    row.update(_phase(cells[width:width + 4], "oop", unreadable, what + " out-of-place"))
    row.update(_phase(cells[width + 4:width + 8], "ip", unreadable, what + " in-place"))
    return row


def _banner_message(lines, index):
    """A launcher message: its line and the next ones up to a blank line (banners wrap their sentence)."""
    parts = []
    for line in lines[index:index + _BANNER_LINES]:
        if not line.strip() or line.startswith("---"):
            break
        parts.append(line.strip())
    return " ".join(parts)


def _add_error(result, kind, message):
    """Add an error once (every rank of a failed launch prints the same banner)."""
    entry = new_error(kind, message)
    if entry not in result["errors"]:
        result["errors"].append(entry)


def _comment_line(line, result):
    """``# Avg bus bandwidth``, ``# Out of bounds values``; the column header returns its prefix columns."""
    match = _AVG_RE.match(line)
    if match:
        result["avg_busbw_gbps"] = to_float(match.group("value"), result["unreadable"], "Avg bus bandwidth")
        return None
    match = _OUT_OF_BOUNDS_RE.match(line)
    if match and match.group("verdict").upper() != "OK":
        _add_error(result, "wrong_results", line.lstrip("# ").strip())
        return None
    cells = line.lstrip("#").split()
    if "size" in cells and "count" in cells and "busbw" in cells:
        return _prefix_from_header(cells)
    return None


def _other_line(lines, index, result):
    """Launcher and test failure lines; everything else outside the table is ignored."""
    line = lines[index]
    if _LAUNCHER_RE.search(line):
        _add_error(result, "launcher", _banner_message(lines, index))
        return
    match = _TEST_FAILURE_RE.search(line)
    if match:
        kind = (match.group("what") or "test").lower()
        _add_error(result, kind, line.strip())


def _max_busbw(rows):
    """Highest out-of-place or in-place busbw of the rows; ``None`` without any."""
    values = [row[key] for row in rows for key in ("oop_busbw", "ip_busbw") if row.get(key) is not None]
    return max(values) if values else None


def parse_all_reduce(text):
    """Parse ``all_reduce_perf`` output into the NCCL model."""
    result = new_result(rows=[], avg_busbw_gbps=None, max_busbw_gbps=None)
    try:
        lines = clean_text(text).split("\n")
        prefix = None
        for index, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("#"):
                prefix = _comment_line(stripped, result) or prefix
                continue
            cells = stripped.split()
            if cells and cells[0].isdigit():
                row = parse_row(cells, prefix, result["unreadable"], index + 1)
                if row is not None:
                    result["rows"].append(row)
            elif cells:
                _other_line(lines, index, result)
        result["max_busbw_gbps"] = _max_busbw(result["rows"])
        if not result["rows"] and not result["errors"] and any(line.strip() for line in lines) and not result["unreadable"]:
            append_capped(result["unreadable"], "no all_reduce_perf result rows found")
    except Exception as exc:  # pylint: disable=broad-except
        append_capped(result["unreadable"], "internal error: %s: %s" % (exc.__class__.__name__, exc))
    return result
