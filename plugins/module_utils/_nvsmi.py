# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for nvidia-smi output: ``-q -x`` (XML), ``-q`` (text) and ``--query-gpu`` (CSV).

All three return the same inventory (docs/health-model.md, section "nvidia-smi") and never raise. The field mapping
lives in one table (``_FIELDS``) with the XML, text and CSV names of each model field, so the formats stay
consistent. Standard library only; ``xml.etree`` is imported when the XML parser first runs.

Public: ``parse_query_xml(text)``, ``parse_query_text(text)``, ``parse_query_csv(text)``, ``QUERY_GPU_FIELDS``,
``find_tool_errors(lines)`` and ``match_tool_error(line)`` (nvidia-smi's own error messages, shared with the
NVLink and topology parsers).
"""

import re

try:
    from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
        cap_notes, clean_text, na_to_none, new_error, new_result, normalize_bus_id, split_key_value, sum_or_none,
        to_bool, to_float, to_int)
except ImportError:  # loaded by path next to _parse_util.py (bin/gpucluster-health)
    from _parse_util import (  # type: ignore  # pylint: disable=import-error
        cap_notes, clean_text, na_to_none, new_error, new_result, normalize_bus_id, split_key_value, sum_or_none,
        to_bool, to_float, to_int)

__all__ = ["QUERY_GPU_FIELDS", "find_tool_errors", "match_tool_error", "parse_query_csv", "parse_query_text", "parse_query_xml"]

# Clock event reasons of the model, in the order nvidia-smi prints them. Key: (XML/CSV suffix, text label).
_CLOCK_REASONS = (
    ("gpu_idle", "idle"),
    ("applications_clocks_setting", "applications clocks setting"),
    ("sw_power_cap", "sw power cap"),
    ("hw_slowdown", "hw slowdown"),
    ("hw_thermal_slowdown", "hw thermal slowdown"),
    ("hw_power_brake_slowdown", "hw power brake slowdown"),
    ("sw_thermal_slowdown", "sw thermal slowdown"),
    ("sync_boost", "sync boost"),
    ("display_clocks_setting", "display clock setting"),
)

#: ``--query-gpu`` fields the checker asks for. Every name is valid from driver 470 on (checked against
#: ``nvidia-smi --help-query-gpu`` of 510 and 590); ``clocks_throttle_reasons.*`` is still accepted by drivers that
#: renamed it ``clocks_event_reasons.*``. Not available as query fields: minor_number, board_id, cuda_version,
#: remapped rows and fabric state before 5xx; the CSV parser reads those when a header names them.
QUERY_GPU_FIELDS = (
    "index", "pci.bus_id", "uuid", "name", "serial", "vbios_version", "driver_version", "count", "timestamp",
    "memory.total", "persistence_mode", "ecc.mode.current", "ecc.mode.pending",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count", "retired_pages.pending",
    "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
    "temperature.gpu", "temperature.memory",
    "power.draw", "enforced.power.limit", "power.limit", "power.default_limit", "power.max_limit",
) + tuple("clocks_throttle_reasons." + key for key, _label in _CLOCK_REASONS if key != "display_clocks_setting") + (
    "utilization.gpu", "utilization.memory", "mig.mode.current", "mig.mode.pending",
)

_FORMATS = {"xml": 0, "text": 1, "csv": 2}

# Model fields: (group or None, key, type, XML paths, text paths, CSV names). Paths are tried in order; the first
# one with a value wins. Text paths are the lower-case section labels of ``nvidia-smi -q`` joined with "/".
_FIELDS = (
    (None, "name", "str", ("product_name",), ("product name",), ("name", "gpu_name")),
    (None, "uuid", "str", ("uuid",), ("gpu uuid",), ("uuid", "gpu_uuid")),
    (None, "serial", "str", ("serial",), ("serial number",), ("serial", "gpu_serial")),
    (None, "vbios_version", "str", ("vbios_version",), ("vbios version",), ("vbios_version",)),
    (None, "board_id", "str", ("board_id",), ("board id",), ()),
    (None, "minor_number", "int", ("minor_number",), ("minor number",), ()),
    (None, "memory_total_mib", "int", ("fb_memory_usage/total",), ("fb memory usage/total",), ("memory.total",)),
    (None, "persistence_mode", "bool", ("persistence_mode",), ("persistence mode",), ("persistence_mode",)),
    ("ecc_mode", "current", "bool", ("ecc_mode/current_ecc",), ("ecc mode/current",), ("ecc.mode.current",)),
    ("ecc_mode", "pending", "bool", ("ecc_mode/pending_ecc",), ("ecc mode/pending",), ("ecc.mode.pending",)),
    ("mig_mode", "current", "bool", ("mig_mode/current_mig",), ("mig mode/current",), ("mig.mode.current",)),
    ("mig_mode", "pending", "bool", ("mig_mode/pending_mig",), ("mig mode/pending",), ("mig.mode.pending",)),
    ("retired_pages", "single_bit", "int", ("retired_pages/multiple_single_bit_retirement/retired_count",),
     ("retired pages/single bit ecc",), ("retired_pages.single_bit_ecc.count", "retired_pages.sbe")),
    ("retired_pages", "double_bit", "int", ("retired_pages/double_bit_retirement/retired_count",),
     ("retired pages/double bit ecc",), ("retired_pages.double_bit.count", "retired_pages.dbe")),
    ("retired_pages", "pending", "bool", ("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
     ("retired pages/pending page blacklist", "retired pages/pending page retirement", "retired pages/pending"),
     ("retired_pages.pending",)),
    ("remapped_rows", "correctable", "int", ("remapped_rows/remapped_row_corr",),
     ("remapped rows/correctable error",), ("remapped_rows.correctable", "remapped_rows.sbe")),
    ("remapped_rows", "uncorrectable", "int", ("remapped_rows/remapped_row_unc",),
     ("remapped rows/uncorrectable error",), ("remapped_rows.uncorrectable", "remapped_rows.dbe")),
    ("remapped_rows", "pending", "bool", ("remapped_rows/remapped_row_pending",), ("remapped rows/pending",),
     ("remapped_rows.pending",)),
    ("remapped_rows", "failure", "bool", ("remapped_rows/remapped_row_failure",),
     ("remapped rows/remapping failure occurred",), ("remapped_rows.failure",)),
    ("pcie", "gen_current", "int", ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
     ("pci/gpu link info/pcie generation/current",), ("pcie.link.gen.current",)),
    ("pcie", "gen_max", "int", ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
     ("pci/gpu link info/pcie generation/max",), ("pcie.link.gen.max",)),
    ("pcie", "gen_device_max", "int", ("pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",),
     ("pci/gpu link info/pcie generation/device max",), ("pcie.link.gen.gpumax",)),
    ("pcie", "gen_host_max", "int", ("pci/pci_gpu_link_info/pcie_gen/max_host_link_gen",),
     ("pci/gpu link info/pcie generation/host max",), ("pcie.link.gen.hostmax",)),
    ("pcie", "width_current", "int", ("pci/pci_gpu_link_info/link_widths/current_link_width",),
     ("pci/gpu link info/link width/current",), ("pcie.link.width.current",)),
    ("pcie", "width_max", "int", ("pci/pci_gpu_link_info/link_widths/max_link_width",),
     ("pci/gpu link info/link width/max",), ("pcie.link.width.max",)),
    ("pcie", "replay_counter", "int", ("pci/replay_counter",), ("pci/replays since reset", "pci/replays"), ()),
    ("temperature", "gpu_c", "int", ("temperature/gpu_temp",), ("temperature/gpu current temp",),
     ("temperature.gpu",)),
    ("temperature", "memory_c", "int", ("temperature/memory_temp",), ("temperature/memory current temp",),
     ("temperature.memory",)),
    ("temperature", "slowdown_c", "int", ("temperature/gpu_temp_slow_threshold",),
     ("temperature/gpu slowdown temp",), ()),
    ("temperature", "shutdown_c", "int", ("temperature/gpu_temp_max_threshold",),
     ("temperature/gpu shutdown temp",), ()),
    ("temperature", "max_operating_c", "int", ("temperature/gpu_temp_max_gpu_threshold",),
     ("temperature/gpu max operating temp",), ()),
    ("temperature", "max_memory_c", "int", ("temperature/gpu_temp_max_mem_threshold",),
     ("temperature/memory max operating temp",), ()),
    ("temperature", "tlimit_c", "int", ("temperature/gpu_temp_tlimit",), ("temperature/gpu t.limit temp",),
     ("temperature.gpu.tlimit",)),
    ("temperature", "slowdown_tlimit_c", "int", ("temperature/gpu_temp_slow_tlimit_threshold",),
     ("temperature/gpu slowdown t.limit temp",), ()),
    ("temperature", "shutdown_tlimit_c", "int", ("temperature/gpu_temp_max_tlimit_threshold",),
     ("temperature/gpu shutdown t.limit temp",), ()),
    ("power", "draw_w", "float",
     ("gpu_power_readings/average_power_draw", "gpu_power_readings/power_draw", "power_readings/power_draw",
      "power_readings/average_power_draw", "gpu_power_readings/instant_power_draw"),
     ("gpu power readings/average power draw", "gpu power readings/power draw", "power readings/power draw",
      "power readings/average power draw", "gpu power readings/instantaneous power draw"),
     ("power.draw", "power.draw.average", "power.draw.instant")),
    ("power", "limit_w", "float",
     ("power_readings/enforced_power_limit", "gpu_power_readings/current_power_limit", "power_readings/power_limit",
      "gpu_power_readings/requested_power_limit"),
     ("power readings/enforced power limit", "gpu power readings/current power limit", "power readings/power limit",
      "gpu power readings/requested power limit"),
     ("enforced.power.limit", "power.limit")),
    ("power", "default_limit_w", "float",
     ("power_readings/default_power_limit", "gpu_power_readings/default_power_limit"),
     ("power readings/default power limit", "gpu power readings/default power limit"), ("power.default_limit",)),
    ("power", "max_limit_w", "float",
     ("power_readings/max_power_limit", "gpu_power_readings/max_power_limit"),
     ("power readings/max power limit", "gpu power readings/max power limit"), ("power.max_limit",)),
    ("fabric", "state", "str", ("fabric/state",), ("fabric/state",), ("fabric.state",)),
    ("fabric", "status", "str", ("fabric/status",), ("fabric/status",), ("fabric.status",)),
    ("utilization", "gpu_pct", "int", ("utilization/gpu_util",), ("utilization/gpu",), ("utilization.gpu",)),
    ("utilization", "memory_pct", "int", ("utilization/memory_util",), ("utilization/memory",),
     ("utilization.memory",)),
)

# ECC counter names per format: SRAM/DRAM (Ampere and later) and single/double bit with per-location parts (older).
_ECC_NAMES = {
    "xml": {"sram_corr": "sram_correctable", "dram_corr": "dram_correctable", "sram_unc": "sram_uncorrectable",
            "sram_unc_parts": ("sram_uncorrectable_parity", "sram_uncorrectable_secded"),
            "dram_unc": "dram_uncorrectable", "sbe": "single_bit", "dbe": "double_bit", "total": "total",
            "parts": ("device_memory", "register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm",
                      "cbu", "sram", "dram"),
            "volatile": "ecc_errors/volatile", "aggregate": "ecc_errors/aggregate"},
    "text": {"sram_corr": "sram correctable", "dram_corr": "dram correctable", "sram_unc": "sram uncorrectable",
             "sram_unc_parts": ("sram uncorrectable parity", "sram uncorrectable sec-ded"),
             "dram_unc": "dram uncorrectable", "sbe": "single bit", "dbe": "double bit", "total": "total",
             "parts": ("device memory", "register file", "l1 cache", "l2 cache", "texture memory", "texture shared",
                       "cbu", "sram", "dram"),
             "volatile": "ecc errors/volatile", "aggregate": "ecc errors/aggregate"},
}


def _top_sections(column, extra):
    """First path segments of the ``_FIELDS`` paths in ``column`` plus ``extra``: the sections a GPU parse reads."""
    tops = set(extra)
    for entry in _FIELDS:
        tops.update(path.split("/")[0] for path in entry[column])
    return frozenset(tops)


_XML_SECTIONS = _top_sections(3, ("ecc_errors", "clocks_event_reasons", "clocks_throttle_reasons"))
_TEXT_READ_SECTIONS = _top_sections(4, ("ecc errors", "clocks event reasons", "clocks throttle reasons", "clocks reasons"))
_ECC_CSV = {("volatile", "correctable"): "ecc.errors.corrected.volatile.total",
            ("volatile", "uncorrectable"): "ecc.errors.uncorrected.volatile.total",
            ("aggregate", "correctable"): "ecc.errors.corrected.aggregate.total",
            ("aggregate", "uncorrectable"): "ecc.errors.uncorrected.aggregate.total"}

# Values that say a GPU (or one reading of it) is in trouble; they read as None and go to the GPU's "errors".
_ERROR_VALUE_RE = re.compile(r"^\s*\[?\s*(?:unknown error|gpu requires reset|gpu is lost|err!|insufficient permissions|"
                             r"uninitialized|timeout|gpu access blocked)", re.IGNORECASE)

# nvidia-smi's own error messages: (regex, kind). The first match wins; the bus id, when present, is group 1.
_BUS = r"([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_TOOL_ERRORS = tuple((re.compile(pattern, re.IGNORECASE), kind) for pattern, kind in (
    (r"Unable to determine the device handle for (?:GPU|gpu)?\s*" + _BUS + r"\s*:?.*GPU is lost", "gpu_lost"),
    (r"Unable to determine the device handle for (?:GPU|gpu)?\s*" + _BUS, "device_handle"),
    (r"Unable to determine the device handle", "device_handle"),
    (r"^(?:GPU\s+)?" + _BUS + r"\s*:\s*GPU is lost", "gpu_lost"),
    (r"Failed to initialize NVML:\s*Driver/library version mismatch", "driver_mismatch"),
    (r"Failed to initialize NVML", "nvml_init"),
    (r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "nvml_init"),
    (r"NVIDIA-SMI couldn't find libnvidia-ml\.so", "nvml_init"),
    (r"^No devices were found", "no_devices"),
    (r"^Unable to (?:query|get|retrieve)\b", "other"),
    (r"is not a valid field to query", "other"),
    (r"^(?:ERROR|Error):", "other"),
))
# Words one of the patterns above needs, looked for (lower case) before the patterns run: most lines are data.
_TOOL_ERROR_HINTS = ("unable to", "failed", "nvidia-smi", "no devices", "gpu is lost", "valid field", "error:", "nvml")
_NVML_VERSION_RE = re.compile(r"^NVML library version:\s*(\S+)", re.IGNORECASE)
_ELISION_RE = re.compile(r"^\s*(?:\[\s*(?:\.\.\.|\u2026)\s*\]|\.\.\.|\u2026)\s*$")
_TEXT_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])$")
_CSV_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")
_CSV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*$")

_MAX_XML_CHARS = 32 * 1024 * 1024
_XML_DROP = ("supported_clocks", "processes", "accounted_processes")
_XML_SKIP = frozenset(_XML_DROP + ("mig_devices",))
_XML_MAX_DEPTH = 12
# Sections a full ``nvidia-smi -q`` GPU block has; a block that lacks "Processes" was cut short.
_TEXT_SECTIONS = ("Persistence Mode", "MIG Mode", "PCI", "FB Memory Usage", "Utilization", "ECC Mode", "ECC Errors",
                  "Retired Pages", "Remapped Rows", "Temperature", "GPU Power Readings", "Clocks Event Reasons")
_TEXT_HEADER_KEYS = frozenset(("timestamp", "driver version", "cuda version", "attached gpus"))
_TEXT_SECTION_ALIASES = {"gpu power readings": ("power readings",), "clocks event reasons": ("clocks throttle reasons",)}


# --------------------------------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------------------------------

def find_tool_errors(lines):
    """nvidia-smi error messages among ``lines`` (cleaned text lines).

    Returns ``(errors, rest)``: ``errors`` are ``{"kind", "message", "bus_id"}`` entries (kinds ``nvml_init``,
    ``driver_mismatch``, ``device_handle``, ``no_devices``, ``gpu_lost``, ``other``); ``rest`` is the list of
    ``(line_number, line)`` pairs (1-based) that are not error messages.
    """
    errors = []
    rest = []
    if not _has_error_hint("\n".join(lines)):
        return errors, list(enumerate(lines, 1))
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        version = _NVML_VERSION_RE.match(stripped)
        if version and errors and errors[-1]["kind"] == "driver_mismatch":
            errors[-1]["nvml_version"] = version.group(1)
            errors[-1]["message"] += "; " + stripped
            continue
        error = match_tool_error(stripped)
        if error is None:
            rest.append((number, line))
        else:
            errors.append(error)
    return errors, rest


def match_tool_error(line):
    """The ``errors`` entry for one stripped line (``{"kind", "message", "bus_id"}``), or ``None`` when the line is
    not an nvidia-smi error message."""
    if not line or len(line) > 400 or not _has_error_hint(line):
        return None
    for pattern, kind in _TOOL_ERRORS:
        match = pattern.search(line)
        if match:
            bus_id = normalize_bus_id(match.group(1)) if match.groups() else None
            return new_error(kind, line, bus_id=bus_id)
    return None


def _has_error_hint(text):
    """``True`` when ``text`` holds a word that nvidia-smi error messages have."""
    lowered = text.lower()
    return any(hint in lowered for hint in _TOOL_ERROR_HINTS)


def _error_value(raw):
    """``True`` when ``raw`` is an error marker such as ``[Unknown Error]`` or ``GPU requires reset``."""
    return _ERROR_VALUE_RE.match(raw) is not None


_CONVERTERS = {"int": to_int, "float": to_float, "bool": to_bool}


class _GpuReader(object):
    """Typed access to one GPU's flat ``path -> raw value`` map, noting bad values and error markers."""

    def __init__(self, values, label, unreadable, gpu_errors):
        self.values = values
        self.label = label
        self.unreadable = unreadable
        self.gpu_errors = gpu_errors

    def raw(self, paths):
        """First present, non-error raw value among ``paths`` (``None`` when there is none)."""
        for path in paths:
            raw = self.values.get(path)
            if raw is None:
                continue
            if _error_value(raw):
                note = "%s: %s" % (path, raw.strip())
                if note not in self.gpu_errors:
                    self.gpu_errors.append(note)
                continue
            if na_to_none(raw) is not None:
                return raw
        return None

    def get(self, paths, kind):
        """Value of the first path with a value, converted to ``kind`` (str, int, float, bool)."""
        for path in paths:
            raw = self.raw((path,))
            if raw is None:
                continue
            if kind == "str":
                value = na_to_none(raw)
            else:
                value = _CONVERTERS[kind](raw, self.unreadable, "%s: %s" % (self.label, path))
            if value is not None:
                return value
        return None

    def count(self, path):
        """Integer counter at ``path`` or ``None``."""
        return self.get((path,), "int")


def _new_gpu():
    """A GPU dict of the model with every value unset."""
    return {
        "index": None, "minor_number": None, "bus_id": None, "uuid": None, "name": None, "serial": None,
        "vbios_version": None, "board_id": None, "memory_total_mib": None, "persistence_mode": None,
        "ecc_mode": {"current": None, "pending": None}, "mig_mode": {"current": None, "pending": None},
        "mig_devices": [],
        "ecc_errors": {"volatile": {"correctable": None, "uncorrectable": None},
                       "aggregate": {"correctable": None, "uncorrectable": None}},
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
        "remapped_rows": {"correctable": None, "uncorrectable": None, "pending": None, "failure": None},
        "pcie": {"gen_current": None, "gen_max": None, "gen_device_max": None, "gen_host_max": None,
                 "width_current": None, "width_max": None, "replay_counter": None},
        "temperature": {"gpu_c": None, "memory_c": None, "slowdown_c": None, "shutdown_c": None,
                        "max_operating_c": None, "max_memory_c": None, "tlimit_c": None,
                        "slowdown_tlimit_c": None, "shutdown_tlimit_c": None},
        "power": {"draw_w": None, "limit_w": None, "default_limit_w": None, "max_limit_w": None},
        "clock_event_reasons": {},
        "fabric": {"state": None, "status": None},
        "utilization": {"gpu_pct": None, "memory_pct": None},
        "errors": [],
    }


def _fill_gpu(reader, fmt):
    """A model GPU from ``reader`` using the ``_FIELDS`` paths of format ``fmt`` (bus id and MIG devices apart)."""
    gpu = _new_gpu()
    gpu["errors"] = reader.gpu_errors
    column = _FORMATS[fmt] + 3
    for entry in _FIELDS:
        group, key, kind = entry[0], entry[1], entry[2]
        value = reader.get(entry[column], kind)
        if group is None:
            gpu[key] = value
        else:
            gpu[group][key] = value
    pcie = gpu["pcie"]
    if pcie["gen_max"] is None:
        pcie["gen_max"] = _min_present(pcie["gen_device_max"], pcie["gen_host_max"])
    gpu["clock_event_reasons"] = _clock_reasons(reader, fmt)
    if fmt == "csv":
        _csv_ecc(reader, gpu)
    else:
        _tree_ecc(reader, gpu, _ECC_NAMES[fmt])
    return gpu


def _min_present(*values):
    """Smallest of the values that are not ``None``."""
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _clock_reason_paths(fmt, key, label):
    """Paths of one clock event reason in format ``fmt`` (new name first, then the older throttle name)."""
    if fmt == "xml":
        return ("clocks_event_reasons/clocks_event_reason_" + key, "clocks_throttle_reasons/clocks_throttle_reason_" + key)
    if fmt == "csv":
        return ("clocks_event_reasons." + key, "clocks_throttle_reasons." + key)
    paths = []
    for section in ("clocks event reasons", "clocks throttle reasons", "clocks reasons"):
        paths.append(section + "/" + label)
        paths.append(section + "/hw slowdown/" + label)
    return tuple(paths)


def _clock_reasons(reader, fmt):
    """``{reason: bool}`` for the reasons the input has (N/A ones left out)."""
    reasons = {}
    for key, label in _CLOCK_REASONS:
        value = reader.get(_clock_reason_paths(fmt, key, label), "bool")
        if value is not None:
            reasons[key] = value
    return reasons


def _tree_ecc(reader, gpu, names):
    """ECC totals from XML/text counters: SRAM + DRAM (new schemas) or single/double bit totals (old ones)."""
    for side in ("volatile", "aggregate"):
        base = names[side] + "/"
        sram_unc = reader.count(base + names["sram_unc"])
        if sram_unc is None:
            sram_unc = sum_or_none(reader.count(base + part) for part in names["sram_unc_parts"])
        correctable = sum_or_none((reader.count(base + names["sram_corr"]), reader.count(base + names["dram_corr"])))
        uncorrectable = sum_or_none((sram_unc, reader.count(base + names["dram_unc"])))
        if correctable is None and uncorrectable is None:
            correctable = _bit_total(reader, base + names["sbe"] + "/", names)
            uncorrectable = _bit_total(reader, base + names["dbe"] + "/", names)
        gpu["ecc_errors"][side] = {"correctable": correctable, "uncorrectable": uncorrectable}


def _bit_total(reader, base, names):
    """Old-schema single/double bit count: the ``total`` counter, else the sum of the per-location counters."""
    total = reader.count(base + names["total"])
    if total is not None:
        return total
    return sum_or_none(reader.count(base + part) for part in names["parts"])


def _csv_ecc(reader, gpu):
    """ECC totals from the ``ecc.errors.*.total`` query fields."""
    for (side, key), name in _ECC_CSV.items():
        gpu["ecc_errors"][side][key] = reader.count(name)


def _finish(result, gpus):
    """Sort GPUs by bus id, number them in that order and bound the ``unreadable`` list."""
    gpus.sort(key=lambda gpu: (gpu["bus_id"] is None, gpu["bus_id"] or ""))
    for index, gpu in enumerate(gpus):
        gpu["index"] = index
    result["gpus"] = gpus
    result["unreadable"] = cap_notes(result["unreadable"])
    return result


def _new_inventory(source):
    """Empty inventory of the model."""
    return new_result(source=source, driver_version=None, cuda_version=None, attached_gpus=None, timestamp=None,
                      gpus=[])


def _note_other_lines(result, numbered_lines, what):
    """Note non-empty lines that are neither data nor tool errors (at most a few, then a count)."""
    leftover = [(n, line.strip()) for n, line in numbered_lines if line.strip()]
    for number, line in leftover[:3]:
        result["unreadable"].append("line %d: %s %r" % (number, what, line[:60]))
    if len(leftover) > 3:
        result["unreadable"].append("%d more lines %s" % (len(leftover) - 3, what))


# --------------------------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------------------------

def parse_query_xml(text):
    """Inventory from ``nvidia-smi -q -x`` output (DTD v9 to v13), see docs/health-model.md.

    Error lines around the XML (NVML init failures, "Unable to determine the device handle ...") go to ``errors``;
    malformed or truncated XML keeps the ``<gpu>`` elements completed before the damage and notes the problem in
    ``unreadable``. Never raises.
    """
    result = _new_inventory("xml")
    try:
        _parse_xml_into(result, clean_text(text))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("xml: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _parse_xml_into(result, text):
    """Fill ``result`` from cleaned ``-q -x`` text."""
    start = _xml_start(text)
    end = text.rfind("</nvidia_smi_log>", max(start, 0))
    end = len(text) if start < 0 or end < 0 else end + len("</nvidia_smi_log>")
    errors, rest = _outside_errors(text, start, end)
    result["errors"].extend(errors)
    if start < 0:
        if not errors and any(line.strip() for _n, line in rest):
            result["unreadable"].append("xml: no <nvidia_smi_log> document in the input")
        return
    _note_other_lines(result, rest, "outside the XML document")
    document = text[start:end]
    if len(document) > _MAX_XML_CHARS:
        result["unreadable"].append("xml: document of %d characters is too large" % len(document))
        return
    if "<!ENTITY" in document:
        result["unreadable"].append("xml: entity declarations are not accepted")
        return
    root, gpu_elements = _parse_document(document, result["unreadable"])
    if root is None:
        return
    if root.tag != "nvidia_smi_log":
        result["unreadable"].append("xml: root element <%s> is not <nvidia_smi_log>" % root.tag[:40])
        return
    _xml_header(root, result)
    gpus = [_xml_gpu(element, position, result["unreadable"]) for position, element in enumerate(gpu_elements)]
    _finish(result, gpus)


def _outside_errors(text, start, end):
    """``find_tool_errors`` over the lines before ``start`` and after ``end`` (all lines when ``start`` is -1)."""
    if start < 0:
        return find_tool_errors(text.split("\n"))
    errors, rest = find_tool_errors(text[:start].split("\n"))
    after_errors, after_rest = find_tool_errors(text[end:].split("\n"))
    offset = text.count("\n", 0, end)
    return errors + after_errors, rest + [(number + offset, line) for number, line in after_rest]


def _xml_start(text):
    """Offset of the XML document (declaration, DOCTYPE or root element) in ``text``, -1 when there is none."""
    offsets = [text.find(marker) for marker in ("<?xml", "<!DOCTYPE nvidia_smi_log", "<nvidia_smi_log")]
    offsets = [offset for offset in offsets if offset >= 0]
    return min(offsets) if offsets else -1


def _parse_document(document, unreadable):
    """``(root, [<gpu> elements])``: a whole-document parse, or the salvage of a damaged document."""
    from xml.etree import ElementTree  # pylint: disable=import-outside-toplevel

    for tag in _XML_DROP:
        document = _drop_elements(document, tag)
    try:
        root = ElementTree.fromstring(document)
    except ElementTree.ParseError:
        return _pull_parse(ElementTree, document, unreadable)
    return root, root.findall("gpu")


def _drop_elements(document, tag):
    """``document`` without the complete ``<tag>...</tag>`` elements (large lists the model does not use)."""
    opening, closing = "<%s>" % tag, "</%s>" % tag
    if opening not in document:
        return document
    parts = []
    position = 0
    while True:
        start = document.find(opening, position)
        end = document.find(closing, start) if start >= 0 else -1
        if start < 0 or end < 0:
            parts.append(document[position:])
            return "".join(parts)
        parts.append(document[position:start])
        position = end + len(closing)


def _pull_parse(ElementTree, document, unreadable):  # pylint: disable=invalid-name
    """``(root, [<gpu> elements completed])`` read incrementally so that a damaged document keeps its good part."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    root = None
    gpus = []
    depth = 0
    error = None
    try:
        parser.feed(document)
        parser.close()
    except ElementTree.ParseError as exc:
        error = exc  # an error inside the document comes again from read_events(), after the events before it
    try:
        for event, element in parser.read_events():
            if event == "start":
                depth += 1
                root = element if root is None else root
            else:
                depth -= 1
                if depth == 1 and element.tag == "gpu":
                    gpus.append(element)
    except ElementTree.ParseError as exc:
        error = exc
    if error is not None:
        unreadable.append("xml: %s (%d complete <gpu> elements read before it)" % (error, len(gpus)))
    if root is None and not unreadable:
        unreadable.append("xml: no XML element in the input")
    return root, gpus


def _xml_header(root, result):
    """Driver/CUDA versions, attached GPU count and timestamp from the root's children."""
    values = {child.tag: (child.text or "").strip() for child in root if len(child) == 0}
    result["driver_version"] = na_to_none(values.get("driver_version"))
    result["cuda_version"] = na_to_none(values.get("cuda_version"))
    result["timestamp"] = na_to_none(values.get("timestamp"))
    result["attached_gpus"] = to_int(values.get("attached_gpus"), result["unreadable"], "xml: <attached_gpus>")


def _xml_flatten(element, sections=None):
    """``{"temperature/gpu_temp": "38 C", ...}`` for one ``<gpu>``: the top-level ``sections`` given (all without),
    lists and supported clocks left out."""
    values = {}
    stack = [(child, child.tag, 1) for child in element if sections is None or child.tag in sections]
    while stack:
        node, path, depth = stack.pop()
        text = node.text
        if text is not None:
            text = text.strip()
            if text and path not in values:
                values[path] = text
        if depth < _XML_MAX_DEPTH and node.tag not in _XML_SKIP:
            for child in node:
                stack.append((child, path + "/" + child.tag, depth + 1))
    return values


def _xml_gpu(element, position, unreadable):
    """Model GPU from one ``<gpu>`` element."""
    values = _xml_flatten(element, _XML_SECTIONS)
    bus_id = normalize_bus_id(element.get("id")) or normalize_bus_id(values.get("pci/pci_bus_id"))
    label = "gpu %s" % (bus_id or "#%d" % position)
    if bus_id is None:
        unreadable.append("%s: no PCI bus id" % label)
    reader = _GpuReader(values, label, unreadable, [])
    gpu = _fill_gpu(reader, "xml")
    gpu["bus_id"] = bus_id
    gpu["mig_devices"] = [_xml_mig_device(device, reader) for device in element.findall("mig_devices/mig_device")]
    return gpu


def _xml_mig_device(element, parent):
    """One ``<mig_device>`` as a model MIG device."""
    values = _xml_flatten(element)
    reader = _GpuReader(values, parent.label + " mig device", parent.unreadable, parent.gpu_errors)
    return {"gpu_instance_id": reader.count("gpu_instance_id"), "compute_instance_id": reader.count("compute_instance_id"),
            "index": reader.count("index"), "profile": reader.get(("profile", "name"), "str"),
            "memory_total_mib": reader.count("fb_memory_usage/total")}


# --------------------------------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------------------------------

def parse_query_text(text):
    """Inventory from ``nvidia-smi -q`` text (also ``-q -d ...`` subsets), see docs/health-model.md.

    Sections are read by indentation. Excerpt elisions (``[...]``) and GPU blocks cut short are noted in
    ``unreadable`` with the sections that are missing. Never raises.
    """
    result = _new_inventory("text")
    try:
        _parse_text_into(result, clean_text(text))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("text: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _parse_text_into(result, text):
    """Fill ``result`` from cleaned ``-q`` text."""
    errors, rest = find_tool_errors(text.split("\n"))
    result["errors"].extend(errors)
    root = _text_tree(rest, result["unreadable"])
    header = {}
    gpus = []
    for node in root[2]:
        match = _TEXT_GPU_RE.match(node[3])
        if match:
            gpus.append(_text_gpu(node, normalize_bus_id(match.group(1)), result["unreadable"]))
        elif node[1] is not None:
            header[node[0]] = node[1]
    result["driver_version"] = na_to_none(header.get("driver version"))
    result["cuda_version"] = na_to_none(header.get("cuda version"))
    result["timestamp"] = na_to_none(header.get("timestamp"))
    result["attached_gpus"] = to_int(header.get("attached gpus"), result["unreadable"], "text: Attached GPUs")
    if not gpus and not errors and not _TEXT_HEADER_KEYS.intersection(header) and any(line.strip() for _n, line in rest):
        result["unreadable"].append("text: no nvidia-smi -q header or GPU section in the input")
    _finish(result, gpus)


def _text_tree(numbered_lines, unreadable):
    """Tree of ``[key, value, children, label]`` nodes from indented ``Key : value`` lines (keys lower-cased)."""
    root = ["", None, [], ""]
    stack = [(-1, root)]
    for number, line in numbered_lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("====="):
            continue
        if stripped[0] in "[.\u2026" and _ELISION_RE.match(stripped):
            unreadable.append("text: line %d is an elision %r: the lines left out are missing" % (number, stripped))
            continue
        if "\t" in line:
            line = line.expandtabs(4)
        indent = len(line) - len(line.lstrip(" "))
        label, value = _text_key_value(stripped)
        key = label.lower()
        node = [" ".join(key.split()) if "  " in key else key, value, [], label]
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1][2].append(node)
        stack.append((indent, node))
    return root


def _text_key_value(stripped):
    """``(key, value)`` of a stripped ``-q`` line; ``Key<padding> : value`` is the common, fast case."""
    pos = stripped.find(" : ")
    if pos >= 0:
        return stripped[:pos].rstrip(), stripped[pos + 3:].lstrip()
    return split_key_value(stripped)


def _text_flatten(node, sections=None):
    """``{"temperature/gpu current temp": "44 C", ...}`` for one GPU block: the top-level ``sections`` given (all
    without); the first occurrence of a path wins."""
    values = {}
    stack = [(child, child[0]) for child in reversed(node[2]) if sections is None or child[0] in sections]
    while stack:
        child, path = stack.pop()
        if child[1] is not None and path not in values:
            values[path] = child[1]
        for grandchild in reversed(child[2]):
            stack.append((grandchild, path + "/" + grandchild[0]))
    return values


def _text_gpu(node, bus_id, unreadable):
    """Model GPU from one ``GPU 00000000:18:00.0`` block."""
    values = _text_flatten(node, _TEXT_READ_SECTIONS)
    bus_id = bus_id or normalize_bus_id(values.get("pci/bus id"))
    label = "gpu %s" % bus_id
    reader = _GpuReader(values, label, unreadable, [])
    gpu = _fill_gpu(reader, "text")
    gpu["bus_id"] = bus_id
    gpu["mig_devices"] = [_text_mig_device(device, reader) for device in _text_mig_nodes(node)]
    _note_text_truncation(node, label, unreadable)
    return gpu


def _text_mig_nodes(node):
    """The ``MIG Device`` blocks of a GPU block: top-level (drivers 550+) or inside ``MIG Devices`` (older)."""
    found = []
    for child in node[2]:
        if child[0] == "mig device":
            found.append(child)
        elif child[0] == "mig devices":
            found.extend(grandchild for grandchild in child[2] if grandchild[0] == "mig device")
    return found


def _text_mig_device(node, parent):
    """One ``MIG Device`` block as a model MIG device."""
    values = _text_flatten(node)
    reader = _GpuReader(values, parent.label + " mig device", parent.unreadable, parent.gpu_errors)
    return {"gpu_instance_id": reader.count("gpu instance id"), "compute_instance_id": reader.count("compute instance id"),
            "index": reader.count("index"), "profile": reader.get(("profile", "name"), "str"),
            "memory_total_mib": reader.get(("fb memory usage/total", "shared fb memory usage/total"), "int")}


def _note_text_truncation(node, label, unreadable):
    """Note a full ``-q`` GPU block (it has "Product Name") that ends before its "Processes" section."""
    keys = set(child[0] for child in node[2])
    if "product name" not in keys or "processes" in keys:
        return
    missing = [name for name in _TEXT_SECTIONS
               if name.lower() not in keys and not keys.intersection(_TEXT_SECTION_ALIASES.get(name.lower(), ()))]
    unreadable.append("%s: GPU section is cut short (no Processes section); missing: %s"
                      % (label, ", ".join(missing) or "nothing the model reads"))


# --------------------------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv
# --------------------------------------------------------------------------------------------------------------------

def parse_query_csv(text):
    """Inventory from ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``, see docs/health-model.md.

    Columns are mapped by header name (units in brackets removed); without a header the columns must be
    ``QUERY_GPU_FIELDS`` in order. Fields the query lacks stay ``None``. Never raises.
    """
    result = _new_inventory("csv")
    try:
        _parse_csv_into(result, clean_text(text))
    except Exception as exc:  # pylint: disable=broad-except
        result["unreadable"].append("csv: internal parser error %s: %s" % (type(exc).__name__, exc))
    return result


def _parse_csv_into(result, text):
    """Fill ``result`` from cleaned CSV text."""
    errors, rest = find_tool_errors(text.split("\n"))
    result["errors"].extend(errors)
    rows = [(number, [cell.strip() for cell in line.split(",")]) for number, line in rest if line.strip()]
    if not rows:
        return
    names = _csv_header(rows[0][1])
    if names is not None:
        rows = rows[1:]
    elif len(rows[0][1]) == len(QUERY_GPU_FIELDS):
        names = list(QUERY_GPU_FIELDS)
    else:
        result["unreadable"].append("csv: line %d is neither a --query-gpu header nor a noheader row of the %d "
                                    "QUERY_GPU_FIELDS columns" % (rows[0][0], len(QUERY_GPU_FIELDS)))
        return
    gpus = []
    for number, cells in rows:
        if len(cells) != len(names):
            result["unreadable"].append("csv: line %d has %d columns, the header %d" % (number, len(cells), len(names)))
            continue
        gpus.append(_csv_gpu(dict(zip(names, cells)), number, result))
    _finish(result, gpus)


def _csv_header(cells):
    """Field names of a header row (units such as `` [MiB]`` removed), or ``None`` when ``cells`` is data."""
    names = [_CSV_UNIT_RE.sub("", cell) for cell in cells]
    if not all(_CSV_NAME_RE.match(name) for name in names):
        return None
    known = set(QUERY_GPU_FIELDS)
    if not any(name in known or name.startswith(("clocks_event_reasons.", "gpu_")) for name in names):
        return None
    return names


def _csv_gpu(values, number, result):
    """Model GPU from one CSV row; the row's driver version, count and timestamp fill the inventory's header."""
    bus_id = normalize_bus_id(values.get("pci.bus_id") or values.get("gpu_bus_id"))
    label = "gpu %s" % (bus_id or "on line %d" % number)
    if bus_id is None:
        result["unreadable"].append("csv: line %d: no pci.bus_id" % number)
    reader = _GpuReader(values, label, result["unreadable"], [])
    gpu = _fill_gpu(reader, "csv")
    gpu["bus_id"] = bus_id
    for key, field, kind in (("driver_version", "driver_version", "str"), ("timestamp", "timestamp", "str"),
                             ("attached_gpus", "count", "int")):
        if result[key] is None:
            result[key] = reader.get((field,), kind)
    return gpu
