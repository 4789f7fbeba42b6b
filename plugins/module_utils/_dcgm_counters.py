# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dcgm-exporter's counters file (``-f``, "collectors" CSV): check it before dcgm-exporter reads it.

dcgm-exporter reads one record per line, ``DCGM FIELD, Prometheus metric type, help message``; lines that start
with ``#`` and blank lines are skipped, spaces around the fields are ignored. A wrong line makes dcgm-exporter
exit at start ("malformed CSV", an unknown field or type), so the file is checked where it is written, with no
dcgm-exporter and no DCGM at hand.

``check_counters(text)`` returns ``{"counters": [{"line", "field", "type", "help"}], "problems": [{"line",
"message"}]}``; ``format_problem(item)`` prints one problem. Standard library only (runs on the nodes, by
``bin/dcgm-counters-check``); nothing here raises on any input.
"""

import re

# DCGM field identifiers (DCGM_FI_DEV_GPU_TEMP, DCGM_FI_PROF_PCIE_TX_BYTES) and dcgm-exporter's own fields
# (DCGM_EXP_XID_ERRORS_COUNT).
FIELD_RE = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
# Metric types dcgm-exporter knows: gauges and counters become metrics, labels become labels of the others.
TYPES = ("gauge", "counter", "label")
_MAX_HELP = 300


def _problem(line, message):
    return {"line": line, "message": message}


def _split(raw):
    """The fields of one record: dcgm-exporter's CSV reader splits on commas and trims spaces around fields."""
    return [part.strip() for part in raw.split(",")]


def check_counters(text):
    """Read a counters file; every line that dcgm-exporter would refuse (or silently misread) is a problem."""
    counters, problems, seen = [], [], {}
    if not isinstance(text, str):
        return {"counters": [], "problems": [_problem(0, "the file is not text")]}
    if "\x00" in text:
        problems.append(_problem(0, "the file holds NUL bytes"))
        return {"counters": [], "problems": problems}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if '"' in line:
            problems.append(_problem(number, "quotes are not allowed (the help text cannot hold a comma either)"))
            continue
        parts = _split(line)
        if len(parts) != 3:
            problems.append(_problem(number, "expected 3 comma-separated fields (DCGM field, type, help), found %d"
                                     % len(parts)))
            continue
        field, kind, help_text = parts
        if not FIELD_RE.match(field):
            problems.append(_problem(number, "%r is not a DCGM field name such as DCGM_FI_DEV_GPU_TEMP" % field))
            continue
        if kind not in TYPES:
            problems.append(_problem(number, "%s: type %r is not one of %s" % (field, kind, ", ".join(TYPES))))
            continue
        if not help_text:
            problems.append(_problem(number, "%s: the help message is empty" % field))
            continue
        if len(help_text) > _MAX_HELP:
            problems.append(_problem(number, "%s: the help message is longer than %d characters" % (field, _MAX_HELP)))
            continue
        if field in seen:
            problems.append(_problem(number, "%s is listed twice (first on line %d)" % (field, seen[field])))
            continue
        seen[field] = number
        counters.append({"line": number, "field": field, "type": kind, "help": help_text})
    if not problems and not [c for c in counters if c["type"] != "label"]:
        problems.append(_problem(0, "no gauge or counter: dcgm-exporter would export nothing"))
    return {"counters": counters, "problems": problems}


def format_problem(item, path="counters"):
    """``path:line: message`` (line 0: the file as a whole)."""
    return "%s:%d: %s" % (path, item["line"], item["message"])
