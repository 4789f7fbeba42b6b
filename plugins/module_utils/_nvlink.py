# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for ``nvidia-smi nvlink -s``, ``nvidia-smi nvlink -e`` and ``nvidia-smi topo -m``.

Results follow docs/health-model.md, section "NVLink and topology"; the parsers never raise. Standard library only.

Public: ``parse_nvlink_status(text)``, ``parse_nvlink_errors(text)``, ``parse_topo_matrix(text)``.
"""

import re

try:
    from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
        cap_notes, clean_text, na_to_none, new_error, new_result, to_float, to_int)
    from ansible_collections.gpucluster.ops.plugins.module_utils._nvsmi import match_tool_error
except ImportError:  # loaded by path next to _parse_util.py (bin/gpucluster-health)
    from _parse_util import (  # type: ignore  # pylint: disable=import-error
        cap_notes, clean_text, na_to_none, new_error, new_result, to_float, to_int)
    from _nvsmi import match_tool_error  # type: ignore  # pylint: disable=import-error

__all__ = ["parse_nvlink_errors", "parse_nvlink_status", "parse_topo_matrix"]

_GPU_HEADER_RE = re.compile(r"^GPU\s+(\d+)\s*:\s*(.*?)\s*(?:\(\s*UUID\s*:\s*([^)]*?)\s*\))?$")
_LINK_RE = re.compile(r"^Link\s+(\d+)\s*:\s*(.*)$", re.IGNORECASE)
_COUNTER_RE = re.compile(r"^(.*?\S)\s*:\s*(\S.*)$")
_ALL_INACTIVE_RE = re.compile(r"Unable to retrieve NVLink information as all links are inactive", re.IGNORECASE)
_MIG_RE = re.compile(r"not supported for Devices in MIG mode", re.IGNORECASE)
_NO_NVLINK_RE = re.compile(r"does not have or support NVLink", re.IGNORECASE)
_INACTIVE_WORDS = frozenset(("<inactive>", "inactive", "<disabled>", "disabled", "down", "off", "<off>"))

# nvlink -e counter labels. Drivers from 450 on print one "CRC Errors" counter, the flit CRC counter (NVML
# NVML_NVLINK_ERROR_DL_CRC_FLIT); older drivers and some tools print data and flit CRC separately. Other labels
# (newer drivers print more) become snake_case keys without the "_errors" suffix.
_COUNTER_KEYS = {
    "replay errors": "replay", "recovery errors": "recovery", "crc errors": "crc_flit",
    "crc flit errors": "crc_flit", "flit crc errors": "crc_flit", "crc data errors": "crc_data",
    "data crc errors": "crc_data", "ecc errors": "ecc",
}

_TOPO_LABELS = (("cpu affinity", "cpu_affinity"), ("numa affinity", "numa_affinity"), ("gpu numa id", "gpu_numa_id"))
_TOPO_LABEL_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID", re.IGNORECASE)
_DEVICE_RE = re.compile(r"^(?:GPU\d+|NIC\d+|NVSwitch\d+|[a-z][a-z0-9]*_(?:bond_)?\d+)$")
_TOPO_CELL_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|C2C|N/A)$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def _nvlink_error(line, gpu_index):
    """An ``errors`` entry for an nvidia-smi NVLink error line (with the GPU it follows), or ``None``."""
    if _ALL_INACTIVE_RE.search(line):
        return new_error("all_inactive", line, index=gpu_index)
    if _MIG_RE.search(line):
        return new_error("mig_unsupported", line, index=gpu_index)
    error = match_tool_error(line)
    if error is not None:
        error["index"] = gpu_index
    return error


def _walk_gpu_blocks(text, result, on_link_line):
    """Read ``GPU n: name (UUID: ...)`` headers and their ``Link n: ...`` lines into ``result["gpus"]``.

    ``on_link_line(gpu, link, rest, number)`` handles one link line; other lines are errors or unreadable.
    """
    gpu = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if not stripped:
            continue
        header = _GPU_HEADER_RE.match(stripped)
        link = _LINK_RE.match(stripped)
        if header:
            gpu = {"index": int(header.group(1)), "name": na_to_none(header.group(2)), "uuid": na_to_none(header.group(3)),
                   "supported": True, "links": []}
            result["gpus"].append(gpu)
        elif gpu is not None and _NO_NVLINK_RE.search(stripped):
            gpu["supported"] = False
        elif link and gpu is not None:
            on_link_line(gpu, int(link.group(1)), link.group(2).strip(), number)
        else:
            error = _nvlink_error(stripped, gpu["index"] if gpu else None)
            if error is not None:
                result["errors"].append(error)
            else:
                result["unreadable"].append("line %d: not a GPU header or link line: %r" % (number, stripped[:60]))
    result["unreadable"] = cap_notes(result["unreadable"], 20)
    return result


def parse_nvlink_status(text):
    """Links of ``nvidia-smi nvlink -s`` (all GPUs or ``-i N``): ``{"gpus": [{"index", "name", "uuid", "supported",
    "links": [{"link", "active", "speed_gbps"}]}], "errors", "unreadable"}``.

    ``<inactive>`` links are ``active: False``; empty output (GPUs without NVLink) is ``gpus: []`` without an error,
    and so is "Device does not have or support Nvlink" (that GPU gets ``supported: False``);
    "all links are inactive" and "not supported for Devices in MIG mode" are errors ``all_inactive`` and
    ``mig_unsupported`` with the ``index`` of the GPU they follow. Never raises.
    """
    result = new_result(gpus=[])
    try:
        _walk_gpu_blocks(clean_text(text), result, lambda gpu, link, rest, number: gpu["links"].append(
            _link_status(link, rest, number, gpu, result["unreadable"])))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("nvlink status: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _link_status(link, rest, number, gpu, unreadable):
    """One link of ``nvlink -s``: a speed means active, ``<inactive>`` (and similar words) inactive."""
    if rest.lower() in _INACTIVE_WORDS:
        return {"link": link, "active": False, "speed_gbps": None}
    speed = to_float(rest, unreadable, "line %d: gpu %d link %d speed" % (number, gpu["index"], link))
    return {"link": link, "active": speed is not None, "speed_gbps": speed}


def parse_nvlink_errors(text):
    """Error counters of ``nvidia-smi nvlink -e``: ``{"gpus": [{"index", "name", "uuid", "supported", "links": [{"link",
    "counters": {"replay", "recovery", "crc_flit", "crc_data", ...}}]}], "errors", "unreadable"}``.

    Counters are ``int`` (``float`` for rates such as a BER), ``None`` for N/A; only the counters the output has
    are present. Never raises.
    """
    result = new_result(gpus=[])
    try:
        _walk_gpu_blocks(clean_text(text), result, lambda gpu, link, rest, number: _add_counter(
            gpu, link, rest, number, result["unreadable"]))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("nvlink errors: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _counter_key(label):
    """Model key of an ``nvlink -e`` counter label (``"Replay Errors"`` -> ``"replay"``)."""
    name = " ".join(label.lower().split())
    if name in _COUNTER_KEYS:
        return _COUNTER_KEYS[name]
    key = re.sub(r"[^a-z0-9]+", "_", name).strip("_")
    if key.endswith("_errors") and key != "_errors":
        key = key[:-len("_errors")]
    return key or "unnamed"


def _add_counter(gpu, link, rest, number, unreadable):
    """Store ``Link n: <label>: <value>`` in the GPU's link entry."""
    match = _COUNTER_RE.match(rest)
    if not match:
        unreadable.append("line %d: gpu %d link %d: no 'counter: value' in %r" % (number, gpu["index"], link, rest[:40]))
        return
    what = "line %d: gpu %d link %d %s" % (number, gpu["index"], link, match.group(1))
    value = to_int(match.group(2), None)
    if value is None and na_to_none(match.group(2)) is not None:
        value = to_float(match.group(2), unreadable, what)
    entries = [entry for entry in gpu["links"] if entry["link"] == link]
    if entries:
        entry = entries[0]
    else:
        entry = {"link": link, "counters": {}}
        gpu["links"].append(entry)
    entry["counters"][_counter_key(match.group(1))] = value


def parse_topo_matrix(text):
    """``nvidia-smi topo -m``: ``{"devices": ["GPU0", ..., "NIC0"], "matrix": {"GPU0": {"GPU0": "X", "GPU1":
    "NV18", ...}}, "cpu_affinity": {"GPU0": "0-47"}, "numa_affinity": {"GPU0": "0"}, "gpu_numa_id": {"GPU0": None},
    "nic_names": {"NIC0": "mlx5_0"}, "errors", "unreadable"}``.

    Tab- or space-separated, ANSI escapes in the header, with or without the ``NIC Legend:`` block. Affinity values
    ``N/A`` are ``None``. Never raises.
    """
    result = new_result(devices=[], matrix={}, cpu_affinity={}, numa_affinity={}, gpu_numa_id={}, nic_names={})
    try:
        _parse_topo_into(result, clean_text(text))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("topo: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _parse_topo_into(result, text):
    """Fill ``result`` from cleaned ``topo -m`` text."""
    lines = text.split("\n")
    header_at = _topo_header_index(lines)
    if header_at is None:
        _topo_no_matrix(result, lines)
        return
    devices, labels = _topo_columns(lines[header_at])
    result["devices"] = devices
    in_legend = False
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.endswith("Legend:"):
            in_legend = True
            continue
        legend = _NIC_LEGEND_RE.match(line)
        if legend:
            result["nic_names"][legend.group(1)] = legend.group(2)
        elif stripped.split(None, 1)[0] in devices and not in_legend:
            _topo_row(result, line, devices, labels, number)
        elif not in_legend:
            _topo_other_line(result, stripped, number)


def _topo_no_matrix(result, lines):
    """No header line: the output is an nvidia-smi error or something else."""
    for line in lines:
        error = match_tool_error(line.strip()) if line.strip() else None
        if error is not None:
            result["errors"].append(error)
    if not result["errors"] and any(line.strip() for line in lines):
        result["unreadable"].append("topo: no matrix header (a line of device names such as GPU0 GPU1) found")


def _topo_other_line(result, stripped, number):
    """A line outside the matrix and the legend: an nvidia-smi error or unreadable."""
    error = match_tool_error(stripped)
    if error is not None:
        result["errors"].append(error)
    elif len(result["unreadable"]) < 20:
        result["unreadable"].append("topo: line %d is not a matrix row: %r" % (number, stripped[:60]))


def _topo_header_index(lines):
    """Index of the header line: device names (GPU0 ...) first, then the affinity labels."""
    for index, line in enumerate(lines):
        tokens = _TOPO_LABEL_RE.split(line)[0].split()
        if len(tokens) >= 1 and all(_DEVICE_RE.match(token) for token in tokens):
            if len(tokens) >= 2 or _TOPO_LABEL_RE.search(line) or line[:1].isspace():
                return index
    return None


def _topo_columns(header):
    """``(devices, affinity labels)`` of the header line; labels are model keys (``cpu_affinity`` ...)."""
    parts = _TOPO_LABEL_RE.split(header)
    devices = parts[0].split()
    labels = []
    for match in _TOPO_LABEL_RE.finditer(header):
        name = " ".join(match.group(0).lower().split())
        labels.extend(key for label, key in _TOPO_LABELS if label == name)
    return devices, labels


def _topo_row(result, line, devices, labels, number):
    """One matrix row: link types to each device, then the affinity values."""
    if "\t" in line:
        cells = [cell.strip() for cell in line.split("\t")]
        cells = [cells[0]] + [cell for cell in cells[1:] if cell]
    else:
        cells = line.split()
    name, values = cells[0], cells[1:]
    links = values[:len(devices)]
    if len(links) < len(devices):
        result["unreadable"].append("topo: line %d: row %s has %d of %d link cells" % (number, name, len(links), len(devices)))
    row = result["matrix"].setdefault(name, {})
    for device, cell in zip(devices, links):
        row[device] = cell
        if not _TOPO_CELL_RE.match(cell) and len(result["unreadable"]) < 20:
            result["unreadable"].append("topo: line %d: %s/%s link type %r is not known" % (number, name, device, cell[:20]))
    for key, value in zip(labels, values[len(devices):]):
        result[key][name] = na_to_none(value)
