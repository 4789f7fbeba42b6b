# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Results of ``dcgmi diag`` (see docs/health-model.md).

``parse_dcgmi_diag(text, level=None)`` reads the JSON output (``dcgmi diag -r N -j``: the DCGM 2.x/3.x
``"DCGM GPU Diagnostic"`` document with ``gpu_ids``, and the 3.x/4.x ``"DCGM Diagnostic"`` document with
``entity_group``/``entity_id`` results and ``test_summary``) and the text table (``| GPU Memory | Pass - GPUs: 1, 2 |``
rows, continuation rows that hold a second status or the rest of a wrapped message, ``Warning``/``Info``/``Error``
rows, a ``Metadata`` section (DCGM 3.x: versions, not tests), unterminated tables, old labels such as ``Blacklist``
and ``Page Retirement``). It returns::

    {"level": int | None, "results": [{"test", "category", "status": "pass"|"fail"|"warn"|"skip", "gpus", "message"}],
     "errors": [...], "unreadable": [...]}

One result per test and status: a test that passed on GPUs 1-7 and failed on GPU 0 gives two results. Test names
are kept as the tool prints them. ``level`` is the ``level`` argument (the ``-r`` the caller ran), else 1 when every
result is a Deployment test, else ``None``. A table ``Error`` row that follows no test (the diagnostic stopped
early, e.g. "GPU 3 has uncorrectable memory errors and row remappings are pending") is a ``fail`` result of test
``Error``. Standard library only; nothing here raises.
"""

import json
import re

from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
    append_capped, clean_text, new_error, new_result, to_text,
)

_STATUS_WORDS = {
    "pass": "pass", "passed": "pass", "success": "pass",
    "fail": "fail", "failed": "fail", "failure": "fail", "error": "fail",
    "warn": "warn", "warning": "warn",
    "skip": "skip", "skipped": "skip", "not run": "skip", "notrun": "skip", "n/a": "skip", "not applicable": "skip",
}
_NOTE_LABELS = frozenset(("warning", "info", "error"))

_STATUS_CELL_RE = re.compile(
    r"^(?P<status>Pass(?:ed)?|Fail(?:ed)?|Warn(?:ing)?|Skip(?:ped)?|Not Run|N/A)\b\s*"
    r"(?:-\s*(?:All\s*)?(?:GPUs?\s*:?\s*(?P<gpus>[\d,\s]*))?)?$", re.IGNORECASE)
_CATEGORY_RE = re.compile(r"^[|+]-+\s+(?P<category>[A-Za-z][A-Za-z /&-]*?)\s+-+[+|]")
_BORDER_RE = re.compile(r"^\+[-=+]*$")
_GPU_MENTION_RE = re.compile(r"\bGPU\s*(?P<gpu>\d{1,4})\b")
_HOSTENGINE_RE = re.compile(r"host ?engine|connect", re.IGNORECASE)


def normalize_status(value):
    """``pass``/``fail``/``warn``/``skip`` from ``PASS``, ``Fail``, ``Warning``, ``SKIPPED``, ``Not Run``...;
    ``None`` for anything else."""
    return _STATUS_WORDS.get(" ".join(to_text(value).lower().split()))


def new_test_result(test, category, status, gpus=None, message=None):
    """A result of the model; ``gpus`` is a sorted list or ``None`` when the output names no GPU."""
    return {"test": test, "category": category, "status": status, "gpus": sorted(set(gpus)) if gpus else None,
            "message": message or None}


def _join_messages(messages):
    """Distinct non-empty messages, in order, joined with ``"; "``; ``None`` without any."""
    seen = []
    for message in messages:
        text = " ".join(to_text(message).split())
        if text and text not in seen:
            seen.append(text)
    return "; ".join(seen) or None


def _add_message(result, message):
    """Append ``message`` to a result's message."""
    result["message"] = _join_messages([result["message"], message])


def _infer_level(results):
    """1 when every result is a Deployment test (``-r 1`` runs only those); ``None`` otherwise."""
    if results and all((result["category"] or "").lower() == "deployment" for result in results):
        return 1
    return None


def _error_kind(line):
    """Kind of a ``dcgmi`` error line."""
    if "command not found" in line:
        return "not_installed"
    if _HOSTENGINE_RE.search(line):
        return "no_hostengine"
    if "unsupported" in line.lower():
        return "unsupported"
    return "diag_error"


# ---------------------------------------------------------------- JSON


def _json_gpus(item):
    """GPU ids of one JSON result: ``gpu_ids`` (int, ``"0,1,2"``, list) or a GPU ``entity_id``; ``[]`` if none."""
    if "gpu_ids" in item:
        raw = item["gpu_ids"]
        parts = raw if isinstance(raw, list) else to_text(raw).split(",")
        return [int(part) for part in (to_text(p).strip() for p in parts) if part.isdecimal() and len(part) < 6]
    group = to_text(item.get("entity_group", "GPU")).upper()
    entity = item.get("entity_id")
    if group == "GPU" and isinstance(entity, int) and not isinstance(entity, bool):
        return [entity]
    return []


def _json_texts(value):
    """Strings of a JSON ``warnings``/``info`` value: a string, a list of strings or of ``{"warning": ...}``."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    texts = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("warning") or item.get("message") or item.get("info") or ""
        texts.append(to_text(item))
    return texts


class _JsonTest(object):
    """Collects one JSON test's per-GPU results into one model result per status."""

    def __init__(self, name, category, unreadable):
        self.name = name
        self.category = category
        self.unreadable = unreadable
        self.by_status = {}

    def add(self, item):
        """Fold one entry of the test's ``results`` list in."""
        if not isinstance(item, dict):
            return
        status = normalize_status(item.get("status"))
        if status is None:
            append_capped(self.unreadable, "test %s: status %r is not pass/fail/warn/skip" % (self.name, item.get("status")))
            return
        gpus, messages = self.by_status.setdefault(status, ([], []))
        gpus.extend(_json_gpus(item))
        messages.extend(_json_texts(item.get("warnings")))
        if status != "pass":
            messages.extend(_json_texts(item.get("info")))

    def results(self, summary_status):
        """Model results, one per status; the ``test_summary`` status when there were no per-GPU results."""
        if not self.by_status and normalize_status(summary_status):
            self.by_status[normalize_status(summary_status)] = ([], [])
        return [new_test_result(self.name, self.category, status, gpus, _join_messages(messages))
                for status, (gpus, messages) in sorted(self.by_status.items())]


def _json_root(document):
    """The object that holds ``test_categories`` in either JSON shape."""
    for key in ("DCGM GPU Diagnostic", "DCGM Diagnostic"):
        if isinstance(document.get(key), dict):
            return document[key]
    return document


def _json_tests(root):
    """``(category, test)`` pairs of ``test_categories`` (and of a top-level ``tests`` list)."""
    pairs = []
    for category in root.get("test_categories") or []:
        if isinstance(category, dict):
            pairs.extend((category.get("category"), test) for test in category.get("tests") or [])
    pairs.extend((None, test) for test in root.get("tests") or [])
    return [(to_text(category) if category is not None else None, test) for category, test in pairs if isinstance(test, dict)]


def _parse_json(text, result):
    """Read ``dcgmi diag -j`` output (text before the document, such as warnings, is skipped)."""
    start, end = text.find("{"), text.rfind("}")
    try:
        document = json.loads(text[start:end + 1])
    except ValueError as exc:
        append_capped(result["unreadable"], "JSON document not readable: %s" % exc)
        return
    if not isinstance(document, dict):
        append_capped(result["unreadable"], "JSON document is not an object")
        return
    root = _json_root(document)
    for holder in (document, root):
        if holder.get("runtime_error"):
            result["errors"].append(new_error("runtime_error", to_text(holder["runtime_error"])))
    for category, test in _json_tests(root):
        collector = _JsonTest(to_text(test.get("name") or "unknown"), category, result["unreadable"])
        for item in test.get("results") or []:
            collector.add(item)
        summary = test.get("test_summary")
        result["results"].extend(collector.results(summary.get("status") if isinstance(summary, dict) else None))
    _text_errors(text[:start], result)


# ---------------------------------------------------------------- text table


def _cell_chunk(cell):
    """The text of a value cell: one pad space left, two right (DCGM wraps long messages at a fixed width, also
    mid-word, so the chunks of a message are joined without adding spaces)."""
    if cell.endswith("|"):
        return cell[1:-3] if len(cell) > 3 else cell[:-1].strip()
    return cell[1:]


class _TableReader(object):
    """State of the text table: the category, the test whose rows are being read, the note being gathered."""

    def __init__(self, result):
        self.result = result
        self.category = None
        self.test = None
        self.test_results = []
        self.note = None

    def row(self, label, chunk, lineno):
        """One ``| label | value |`` row."""
        if not label:
            self._continuation(chunk, lineno)
            return
        self.flush()
        if label.lower() in _NOTE_LABELS:
            self.note = (label, [chunk])
            return
        if label.lower() == "diagnostic" or (self.category or "").lower() == "metadata":
            return
        self.test = label
        self.test_results = []
        self._status_cell(chunk, lineno)

    def category_row(self, category):
        """A ``|-----  Deployment  ----+...`` separator."""
        self.flush()
        self.category = category
        self.test = None
        self.test_results = []

    def _continuation(self, chunk, lineno):
        """A row without a label: more text of the note, or another status of the current test."""
        if self.note is not None:
            self.note[1].append(chunk)
        elif self.test is not None and _STATUS_CELL_RE.match(chunk.strip()):
            self._status_cell(chunk, lineno)
        elif self.test_results and chunk.strip():
            _add_message(self.test_results[-1], chunk)
        elif chunk.strip():
            append_capped(self.result["unreadable"], "line %d: text %r belongs to no test" % (lineno, chunk.strip()[:40]))

    def _status_cell(self, chunk, lineno):
        """``Pass``, ``Fail - GPU: 0``, ``Pass - GPUs: 1, 2, 3`` for the current test."""
        match = _STATUS_CELL_RE.match(chunk.strip())
        if not match:
            append_capped(self.result["unreadable"], "line %d: test %s: result %r not understood" % (lineno, self.test, chunk.strip()[:40]))
            return
        gpus = [int(gpu) for gpu in re.findall(r"\d{1,4}", match.group("gpus") or "")]
        test_result = new_test_result(self.test, self.category, normalize_status(match.group("status")), gpus)
        self.test_results.append(test_result)
        self.result["results"].append(test_result)

    def flush(self):
        """Attach the gathered ``Warning``/``Info``/``Error`` text to the result it is about."""
        if self.note is None:
            return
        label, chunks = self.note
        self.note = None
        message = " ".join("".join(chunks).split())
        if not message:
            return
        gpus = [int(gpu) for gpu in _GPU_MENTION_RE.findall(message)]
        target = self._note_target(gpus)
        if target is not None:
            _add_message(target, message)
        elif label.lower() != "info":
            status = "fail" if label.lower() == "error" else "warn"
            orphan = new_test_result(label, self.category, status, gpus, message)
            self.result["results"].append(orphan)

    def _note_target(self, gpus):
        """The current test's result for the GPUs a note names (a failed one first), else its last result."""
        for test_result in sorted(self.test_results, key=lambda item: item["status"] == "pass"):
            if gpus and test_result["gpus"] and set(gpus) & set(test_result["gpus"]):
                return test_result
        return self.test_results[-1] if self.test_results else None


def _text_errors(text, result):
    """``Error: ...`` and host engine lines outside the table."""
    for line in text.split("\n"):
        stripped = line.strip()
        lowered = stripped.lower()
        if lowered.startswith("error") or "unable to" in lowered or "command not found" in lowered:
            result["errors"].append(new_error(_error_kind(stripped), stripped))


def _parse_table(text, result):
    """Read the text table of ``dcgmi diag``."""
    reader = _TableReader(result)
    outside = []
    for lineno, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if not stripped.startswith(("|", "+")):
            outside.append(line)
            continue
        category = _CATEGORY_RE.match(stripped)
        if category:
            reader.category_row(category.group("category").strip())
        elif not _BORDER_RE.match(stripped) and stripped.startswith("|"):
            label, _sep, cell = stripped[1:].partition("|")
            reader.row(label.strip(), _cell_chunk(cell), lineno)
    reader.flush()
    _text_errors("\n".join(outside), result)


def parse_dcgmi_diag(text, level=None):
    """Parse ``dcgmi diag`` output, JSON or text table, into the DCGM model."""
    result = new_result(level=level, results=[])
    try:
        text = clean_text(text)
        if text.lstrip().startswith("{") or '"test_categories"' in text or '"DCGM' in text:
            _parse_json(text, result)
        else:
            _parse_table(text, result)
        if result["level"] is None:
            result["level"] = _infer_level(result["results"])
        if not result["results"] and not result["errors"] and text.strip() and not result["unreadable"]:
            append_capped(result["unreadable"], "no dcgmi diag results found")
    except Exception as exc:  # pylint: disable=broad-except
        append_capped(result["unreadable"], "internal error: %s: %s" % (exc.__class__.__name__, exc))
    return result
