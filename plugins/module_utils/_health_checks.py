# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Node health rules: turn a snapshot of parsed tool outputs into findings.

A *snapshot* is a dict with the parsed inputs (see docs/health-model.md) under these keys, each optional:
``nvsmi`` (inventory from ``nvidia-smi -q -x``), ``nvlink`` (``nvlink -s``), ``nvlink_errors`` (``nvlink -e``),
``ib`` (``/sys/class/infiniband`` or ``ibstat``), ``kernel`` (kernel log events), ``fabricmanager`` (the
``systemctl is-active`` word), ``fabricmanager_version`` (``nv-fabricmanager --version``), ``dcgm`` (``dcgmi
diag``), ``nccl`` (``all_reduce_perf``), ``previous`` (counters from the previous run, for rising-counter checks),
``now`` (epoch the time windows count back from), and ``failures``: ``{input name: {"rc": int, "stderr": str}}``
for commands that failed or were missing.

Every check is a function ``(snapshot, config) -> [finding]`` and is registered in ``CHECKS`` with the lowest level
(quick, standard, deep) it runs at. Codes are stable: monitoring, Slurm drain reasons and runbooks key on them.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.ops.plugins.module_utils._xid_catalog import (
    ACT_FATAL, ACT_NONFATAL, ACT_NVLINK5_FATAL, ACT_NVLINK5_NONFATAL, DRIVER_EVENTS, NVLINK5_CODES, XID_CATALOG,
    recovery_action,
)

SEVERITIES = ("ok", "info", "warning", "error", "unknown")
LEVELS = ("quick", "standard", "deep")

DEFAULT_THRESHOLDS = {
    # temperatures: warn this many degrees below the GPU's own slowdown threshold, error at it
    "gpu_temp_margin_c": 5,
    "gpu_temp_warn_c": 87,          # used when the GPU does not report its slowdown threshold
    "memory_temp_warn_c": 95,       # HBM: slowdown starts around 95-105 C depending on the part
    "power_over_limit_pct": 2.0,   # the average draw above the enforced limit: capping is not holding
    "ecc_correctable_volatile_warn": 10000,
    "retired_pages_total_error": 60,  # NVIDIA's field guidance: replace the board at 60 retired pages
    "nvlink_replay_warn": 1000,
    "nvlink_recovery_warn": 10,
    "nvlink_crc_warn": 1000,
    "nvlink_counter_increase_warn": 100,
    "ib_symbol_error_increase_warn": 100,
    "ib_flap_window_s": 3600,
    "ib_flap_warn": 2,              # lost-carrier events in the window
    "ib_flap_error": 6,
    "xid_window_s": 86400,
    "nccl_busbw_min_gbps": None,    # deep level; no default: depends on the system
}

# Xid codes that mean the GPU needs a reset or a reboot (or RMA), and those that usually mean a user program failed:
# both from the Xid catalogue (_xid_catalog, NVIDIA's catalog for drivers R570-R590), not a second list. A snapshot's
# "xid_catalog" overrides the catalogue entry for a code.
XID_ERROR_CODES = frozenset(code for code, entry in XID_CATALOG.items() if entry["severity"] == "error")
XID_APPLICATION_CODES = frozenset(code for code, entry in XID_CATALOG.items() if entry["class"] == "application")

_ACTIONS = {
    "reset": "drain the node, let running jobs finish or requeue them, then reset the GPU (nvidia-smi -r) or reboot",
    "reboot": "drain the node and reboot it",
    "rma": "drain the node and open a hardware case (RMA) with the vendor, quoting the GPU serial and this finding",
    "investigate": "look at the node; drain it if the problem persists",
}


def finding(check, code, severity, target, message, action=""):
    """Build one finding dict."""
    if severity not in SEVERITIES:
        raise ValueError("unknown severity %r" % (severity,))
    return {"check": check, "code": code, "severity": severity, "target": target, "message": message,
            "action": action}


# How bad each severity is for the node's overall status: an error outranks an input that could not be read.
_WORST_ORDER = ("ok", "info", "warning", "unknown", "error")


def worst(findings):
    """The worst severity among findings ("ok" when there are none); error > unknown > warning > info > ok."""
    worst_rank = 0
    for item in findings:
        worst_rank = max(worst_rank, _WORST_ORDER.index(item["severity"]))
    return _WORST_ORDER[worst_rank]


def exit_code(findings):
    """0 ok/info, 1 warning, 2 error, 3 unknown (error wins over unknown, unknown over warning)."""
    severities = {f["severity"] for f in findings}
    if "error" in severities:
        return 2
    if "unknown" in severities:
        return 3
    if "warning" in severities:
        return 1
    return 0


def merged_thresholds(config):
    """Default thresholds overridden by config['thresholds']."""
    merged = dict(DEFAULT_THRESHOLDS)
    merged.update((config or {}).get("thresholds") or {})
    return merged


def _expected(config):
    return (config or {}).get("expected") or {}


def _gpu_target(gpu):
    return "gpu%s" % gpu.get("index", "?")


def _gpu_label(gpu):
    return "GPU %s (%s)" % (gpu.get("index", "?"), gpu.get("bus_id") or "unknown bus id")


def _gpus(snapshot):
    return ((snapshot.get("nvsmi") or {}).get("gpus")) or []


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------------------------------------------
# Driver, NVML and inventory
# --------------------------------------------------------------------------------------------------------------

_NVSMI_ERRORS = {
    "driver_mismatch": ("GPU-NVML-MISMATCH", "the NVIDIA kernel module and user-space library versions differ "
                        "(usually a driver upgrade without a reboot)", "reboot"),
    "nvml_init": ("GPU-DRIVER-NOT-LOADED", "NVML cannot talk to the NVIDIA driver", "reboot"),
    "no_devices": ("GPU-NO-DEVICES", "nvidia-smi found no GPU", "investigate"),
    "gpu_lost": ("GPU-FALLEN-OFF-BUS", "a GPU is lost to the driver", "reboot"),
}


def check_driver(snapshot, config):
    """NVML reachable, driver and CUDA versions as expected."""
    found = []
    nvsmi = snapshot.get("nvsmi")
    failure = (snapshot.get("failures") or {}).get("nvsmi")
    if nvsmi is None:
        if failure and not failure.get("unreadable"):
            why = "rc %s: %s" % (failure.get("rc"), first_line(failure.get("stderr")))
            found.append(finding("driver", "GPU-NVSMI-FAILED", "error", "node", "nvidia-smi did not run: " + why,
                                 "check that the NVIDIA driver and nvidia-smi are installed; " + _ACTIONS["reboot"]))
        return found
    for error in nvsmi.get("errors") or []:
        kind = error.get("kind")
        if kind in _NVSMI_ERRORS:
            code, text, action = _NVSMI_ERRORS[kind]
            found.append(finding("driver", code, "error", "node", "%s: %s" % (text, error.get("message", "")),
                                 _ACTIONS[action]))
    expected = _expected(config)
    want_driver = expected.get("driver_version")
    have_driver = nvsmi.get("driver_version")
    if want_driver and have_driver and not _version_matches(have_driver, want_driver):
        found.append(finding("driver", "GPU-DRIVER-VERSION", "error", "node",
                             "driver %s is installed, %s is expected" % (have_driver, want_driver),
                             "install the expected driver (nvidia_driver role) and reboot"))
    want_cuda = expected.get("cuda_version")
    have_cuda = nvsmi.get("cuda_version")
    if want_cuda and have_cuda and not _version_matches(have_cuda, want_cuda):
        found.append(finding("driver", "GPU-CUDA-VERSION", "warning", "node",
                             "the driver supports CUDA %s, %s is expected" % (have_cuda, want_cuda),
                             "install the driver branch that matches the expected CUDA version"))
    return found


def _version_matches(have, want):
    """'550' matches 550.127.05; '550.127' matches 550.127.05; an exact version must match exactly."""
    have, want = str(have).strip(), str(want).strip()
    return have == want or have.startswith(want + ".")


def first_line(text):
    """The first non-blank line of a tool's output, stripped and cut to 200 characters."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no output)"


def check_inventory(snapshot, config):
    """GPU count and model against what the inventory expects; GPUs the driver lost; no inventory at all."""
    nvsmi = snapshot.get("nvsmi")
    if nvsmi is None:
        return []
    found = []
    gpus = _gpus(snapshot)
    expected = _expected(config)
    partial = _partial(snapshot, "nvsmi")
    lost = [e for e in nvsmi.get("errors") or [] if e.get("kind") == "device_handle"]
    for error in lost:
        found.append(finding("inventory", "GPU-FALLEN-OFF-BUS", "error", error.get("bus_id") or "node",
                             "the driver cannot reach the GPU at %s: %s" % (error.get("bus_id") or "?",
                                                                            error.get("message", "")),
                             _ACTIONS["reboot"] + "; if it stays lost after the reboot, " + _ACTIONS["rma"]))
    if not gpus and not any(judged_error("nvsmi", e) for e in nvsmi.get("errors") or []):
        found.append(finding("inventory", "CHECK-NO-GPU-INVENTORY", "unknown", "node",
                             "nvidia-smi listed no GPU and said nothing about why: nothing to judge",
                             "run nvidia-smi -q -x by hand on the node"))
    want_count = expected.get("gpu_count")
    if isinstance(want_count, int) and not isinstance(want_count, bool):
        have = len(gpus)
        if have < want_count and partial and not lost:
            found.append(finding("inventory", "CHECK-INPUT-PARTIAL", "unknown", "nvsmi",
                                 "only %d of %d expected GPU(s) are in nvidia-smi's output, which %s" % (
                                     have, want_count, _partial_why(snapshot, "nvsmi")),
                                 "run nvidia-smi -q -x by hand; a hung nvidia-smi is often a wedged GPU"))
        elif have < want_count and not lost:
            found.append(finding("inventory", "GPU-COUNT-LOW", "error", "node",
                                 "%d GPU(s) visible, %d expected" % (have, want_count),
                                 "look for a GPU missing from lspci or fallen off the bus; " + _ACTIONS["reboot"]))
        elif have > want_count:
            found.append(finding("inventory", "GPU-COUNT-HIGH", "warning", "node",
                                 "%d GPU(s) visible, %d expected" % (have, want_count),
                                 "correct the node's group in the inventory"))
    want_model = expected.get("gpu_model")
    if want_model:
        odd = [g for g in gpus if g.get("name") and not _model_matches(g["name"], want_model)]
        for gpu in odd:
            found.append(finding("inventory", "GPU-MODEL-MISMATCH", "error", _gpu_target(gpu),
                                 "%s is a %s, %s expected" % (_gpu_label(gpu), gpu["name"], want_model),
                                 "correct the node's group in the inventory, or the hardware"))
    return found


def _partial(snapshot, name):
    """Whether an input's command failed or its output was cut short (what is missing from it is unknown)."""
    return bool((snapshot.get("partial") or {}).get(name)) or name in (snapshot.get("failures") or {})


def _partial_why(snapshot, name):
    failure = (snapshot.get("failures") or {}).get(name)
    if failure:
        return "failed (rc %s: %s)" % (failure.get("rc"), first_line(failure.get("stderr")))
    return "could not be read in full"


def _expected_gpu_indices(snapshot, config):
    """The GPU indices an NVLink output must cover: nvidia-smi's inventory, else 0..gpu_count-1."""
    indices = [g.get("index") for g in _gpus(snapshot) if isinstance(g.get("index"), int)]
    if indices:
        return sorted(set(indices))
    count = _expected(config).get("gpu_count")
    return list(range(count)) if isinstance(count, int) and not isinstance(count, bool) else []


def _model_matches(name, want):
    return name.strip().lower() == str(want).strip().lower() or str(want).strip().lower() in name.lower()


# --------------------------------------------------------------------------------------------------------------
# Per-GPU state from nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------------------

def check_modes(snapshot, config):
    """Persistence, ECC and MIG modes."""
    found = []
    expected = _expected(config)
    want_persistence = expected.get("persistence_mode", True)
    want_ecc = expected.get("ecc_mode", True)
    want_mig = expected.get("mig_mode")
    for gpu in _gpus(snapshot):
        target, label = _gpu_target(gpu), _gpu_label(gpu)
        if want_persistence and gpu.get("persistence_mode") is False:
            found.append(finding("modes", "GPU-PERSISTENCE-OFF", "warning", target,
                                 "%s has persistence mode off (slow job starts, lost state between jobs)" % label,
                                 "enable nvidia-persistenced (nvidia_driver role)"))
        ecc = gpu.get("ecc_mode") or {}
        if want_ecc and ecc.get("current") is False:
            found.append(finding("modes", "GPU-ECC-DISABLED", "error", target,
                                 "%s runs with ECC disabled" % label,
                                 "nvidia-smi -i %s -e 1, then reset the GPU or reboot" % gpu.get("index", "N")))
        if ecc.get("pending") is not None and ecc.get("current") is not None and ecc["pending"] != ecc["current"]:
            found.append(finding("modes", "GPU-ECC-PENDING", "warning", target,
                                 "%s has an ECC mode change pending (%s -> %s)" % (
                                     label, _onoff(ecc["current"]), _onoff(ecc["pending"])),
                                 _ACTIONS["reset"]))
        mig = gpu.get("mig_mode") or {}
        if want_mig is not None and mig.get("current") is not None and mig["current"] != bool(want_mig):
            found.append(finding("modes", "GPU-MIG-MODE", "warning", target,
                                 "%s has MIG %s, %s expected" % (label, _onoff(mig["current"]), _onoff(want_mig)),
                                 "set the MIG mode in the inventory or on the GPU"))
    return found


def _onoff(value):
    return "on" if value else "off"


def check_memory(snapshot, config):
    """ECC error counters, retired pages and row remapping."""
    found = []
    limits = merged_thresholds(config)
    for gpu in _gpus(snapshot):
        target, label = _gpu_target(gpu), _gpu_label(gpu)
        ecc = gpu.get("ecc_errors") or {}
        volatile = ecc.get("volatile") or {}
        aggregate = ecc.get("aggregate") or {}
        if (_num(volatile.get("uncorrectable")) or 0) > 0:
            found.append(finding("memory", "GPU-ECC-UNCORRECTABLE-VOLATILE", "error", target,
                                 "%s had %d uncorrectable ECC error(s) since the last driver load" % (
                                     label, volatile["uncorrectable"]),
                                 _ACTIONS["reset"]))
        elif (_num(aggregate.get("uncorrectable")) or 0) > 0:
            found.append(finding("memory", "GPU-ECC-UNCORRECTABLE-AGGREGATE", "warning", target,
                                 "%s has %d uncorrectable ECC error(s) over its lifetime" % (
                                     label, aggregate["uncorrectable"]),
                                 "watch the volatile counter and remapped rows; " + _ACTIONS["investigate"]))
        correctable = _num(volatile.get("correctable"))
        if correctable is not None and correctable >= limits["ecc_correctable_volatile_warn"]:
            found.append(finding("memory", "GPU-ECC-CORRECTABLE-HIGH", "warning", target,
                                 "%s had %d correctable ECC errors since the last driver load" % (label, correctable),
                                 _ACTIONS["investigate"]))
        found.extend(_retired_pages(gpu, target, label, limits))
        found.extend(_remapped_rows(gpu, target, label))
    return found


def _retired_pages(gpu, target, label, limits):
    found = []
    pages = gpu.get("retired_pages") or {}
    if pages.get("pending"):
        found.append(finding("memory", "GPU-RETIRED-PAGES-PENDING", "error", target,
                             "%s has pages waiting to be retired" % label, _ACTIONS["reset"]))
    single, double = _num(pages.get("single_bit")) or 0, _num(pages.get("double_bit")) or 0
    if single + double >= limits["retired_pages_total_error"]:
        found.append(finding("memory", "GPU-RETIRED-PAGES-LIMIT", "error", target,
                             "%s has retired %d pages (%d double-bit), at or above %d" % (
                                 label, single + double, double, limits["retired_pages_total_error"]),
                             _ACTIONS["rma"]))
    elif double > 0:
        found.append(finding("memory", "GPU-RETIRED-PAGES-DBE", "warning", target,
                             "%s has retired %d page(s) for double-bit errors" % (label, double),
                             _ACTIONS["investigate"]))
    return found


def _remapped_rows(gpu, target, label):
    found = []
    rows = gpu.get("remapped_rows") or {}
    if rows.get("failure"):
        found.append(finding("memory", "GPU-ROW-REMAP-FAILURE", "error", target,
                             "%s failed to remap a row: its memory has no spare rows left" % label, _ACTIONS["rma"]))
    if rows.get("pending"):
        found.append(finding("memory", "GPU-ROW-REMAP-PENDING", "error", target,
                             "%s has row remappings pending (%s uncorrectable, %s correctable rows)" % (
                                 label, rows.get("uncorrectable"), rows.get("correctable")),
                             _ACTIONS["reset"]))
    return found


def check_pcie(snapshot, config):
    """PCIe link width (always) and generation (when the GPU is not idle: idle GPUs train down to save power)."""
    found = []
    expected = _expected(config)
    for gpu in _gpus(snapshot):
        target, label = _gpu_target(gpu), _gpu_label(gpu)
        pcie = gpu.get("pcie") or {}
        width, width_max = _num(pcie.get("width_current")), _num(pcie.get("width_max"))
        width_max = expected.get("pcie_width") or width_max
        if width is not None and width_max is not None and width < width_max:
            found.append(finding("pcie", "GPU-PCIE-WIDTH", "error", target,
                                 "%s PCIe link runs at x%d of x%d" % (label, width, width_max),
                                 "reseat the GPU or riser; " + _ACTIONS["investigate"]))
        gen, gen_max = _num(pcie.get("gen_current")), _num(pcie.get("gen_max"))
        gen_max = expected.get("pcie_gen") or gen_max
        reasons = gpu.get("clock_event_reasons") or {}
        idle = reasons.get("gpu_idle") is True or (gpu.get("utilization") or {}).get("gpu_pct") == 0
        if gen is not None and gen_max is not None and gen < gen_max and not idle:
            found.append(finding("pcie", "GPU-PCIE-GEN", "warning", target,
                                 "%s PCIe link runs at Gen%d of Gen%d while busy" % (label, gen, gen_max),
                                 "check the slot's BIOS settings and the riser; " + _ACTIONS["investigate"]))
    return found


def check_thermal_power(snapshot, config):
    """Temperatures against the GPU's own thresholds, power draw and caps, clock event reasons."""
    found = []
    limits = merged_thresholds(config)
    for gpu in _gpus(snapshot):
        found.extend(_temperature(gpu, limits))
        found.extend(_power(gpu, limits))
        found.extend(_clock_reasons(gpu))
    return found


def _temperature(gpu, limits):
    found = []
    target, label = _gpu_target(gpu), _gpu_label(gpu)
    temp = gpu.get("temperature") or {}
    gpu_c, slowdown = _num(temp.get("gpu_c")), _num(temp.get("slowdown_c"))
    margin = limits["gpu_temp_margin_c"]
    tlimit, slow_tlimit = _num(temp.get("tlimit_c")), _num(temp.get("slowdown_tlimit_c"))
    action = "check fans, airflow and the inlet temperature"
    if slowdown is None and tlimit is not None and slow_tlimit is not None:
        # Hopper/Ada on recent drivers: T.Limit headroom, the GPU slows down when it falls to the slowdown value
        if tlimit <= slow_tlimit:
            found.append(finding("thermal", "GPU-TEMP-HIGH", "error", target,
                                 "%s is at its slowdown temperature (T.Limit headroom %d C, slowdown at %d C)" % (
                                     label, tlimit, slow_tlimit), action + "; " + _ACTIONS["investigate"]))
        elif tlimit <= slow_tlimit + margin:
            found.append(finding("thermal", "GPU-TEMP-HIGH", "warning", target,
                                 "%s is %d C from its slowdown temperature (%s C now)" % (
                                     label, tlimit - slow_tlimit, gpu_c if gpu_c is not None else "?"), action))
    elif gpu_c is not None:
        if slowdown is not None and gpu_c >= slowdown:
            found.append(finding("thermal", "GPU-TEMP-HIGH", "error", target,
                                 "%s is at %d C, at or above its slowdown threshold %d C" % (label, gpu_c, slowdown),
                                 action + "; " + _ACTIONS["investigate"]))
        else:
            warn = slowdown - margin if slowdown is not None else limits["gpu_temp_warn_c"]
            if gpu_c >= warn:
                found.append(finding("thermal", "GPU-TEMP-HIGH", "warning", target,
                                     "%s is at %d C (warning from %d C)" % (label, gpu_c, warn), action))
    mem_c = _num(temp.get("memory_c"))
    mem_limit = _num(temp.get("max_memory_c")) or limits["memory_temp_warn_c"]
    if mem_c is not None and mem_c >= mem_limit:
        found.append(finding("thermal", "GPU-MEMORY-TEMP-HIGH", "warning", target,
                             "%s memory is at %d C (limit %d C)" % (label, mem_c, mem_limit),
                             "check cooling; " + _ACTIONS["investigate"]))
    return found


def _power(gpu, limits):
    found = []
    target, label = _gpu_target(gpu), _gpu_label(gpu)
    power = gpu.get("power") or {}
    draw, limit = _num(power.get("draw_w")), _num(power.get("limit_w"))
    default = _num(power.get("default_limit_w"))
    if draw is not None and limit:
        if draw > limit * (1 + limits["power_over_limit_pct"] / 100.0):
            found.append(finding("power", "GPU-POWER-OVER-LIMIT", "warning", target,
                                 "%s draws %.0f W, above its %.0f W limit" % (label, draw, limit),
                                 "check the power supplies and the board; " + _ACTIONS["investigate"]))
    if limit and default and limit < default * 0.98:
        found.append(finding("power", "GPU-POWER-CAPPED", "warning", target,
                             "%s is capped at %.0f W, below its default %.0f W" % (label, limit, default),
                             "restore the limit (nvidia-smi -i %s -pl %.0f) unless the cap is intended" % (
                                 gpu.get("index", "N"), default)))
    return found


_CLOCK_REASONS = (
    ("hw_slowdown", "GPU-CLOCK-HW-SLOWDOWN", "error", "hardware slowdown (power brake, thermal or power supply)"),
    ("hw_thermal_slowdown", "GPU-CLOCK-THERMAL", "error", "hardware thermal slowdown"),
    ("hw_power_brake_slowdown", "GPU-CLOCK-POWER-BRAKE", "error", "power brake slowdown (external power signal)"),
    ("sw_thermal_slowdown", "GPU-CLOCK-THERMAL", "warning", "software thermal slowdown"),
)


def _clock_reasons(gpu):
    found = []
    target, label = _gpu_target(gpu), _gpu_label(gpu)
    reasons = gpu.get("clock_event_reasons") or {}
    seen = set()
    for key, code, severity, text in _CLOCK_REASONS:
        if reasons.get(key) and code not in seen:
            seen.add(code)
            found.append(finding("clocks", code, severity, target, "%s clocks are held down: %s" % (label, text),
                                 "check cooling and power delivery; " + _ACTIONS["investigate"]))
    return found


def check_fabric(snapshot, config):
    """NVSwitch systems: fabric manager running and every GPU's fabric registration complete."""
    expected = _expected(config)
    if not expected.get("nvswitch"):
        return []
    found = []
    state = snapshot.get("fabricmanager")
    if state is not None and state.strip() != "active":
        found.append(finding("fabric", "NODE-FABRICMANAGER-DOWN", "error", "node",
                             "nvidia-fabricmanager is %s on an NVSwitch system" % (state.strip() or "not running"),
                             "systemctl restart nvidia-fabricmanager; check its log; the driver and fabric "
                             "manager versions must match"))
    for gpu in _gpus(snapshot):
        fabric = gpu.get("fabric") or {}
        fstate, fstatus = fabric.get("state"), fabric.get("status")
        if fstate is None and fstatus is None:
            continue
        if fstate != "Completed" or (fstatus not in (None, "Success")):
            found.append(finding("fabric", "GPU-FABRIC-INCOMPLETE", "error", _gpu_target(gpu),
                                 "%s fabric registration is %s/%s" % (_gpu_label(gpu), fstate, fstatus),
                                 "restart nvidia-fabricmanager, then reset the GPUs or reboot"))
    return found


def nvswitch_system(snapshot, config):
    """Whether the node is an NVSwitch system: ``expected.nvswitch``, or GPUs in ``nvsmi`` with fabric state."""
    if _expected(config).get("nvswitch"):
        return True
    for gpu in _gpus(snapshot):
        fabric = gpu.get("fabric") or {}
        if fabric.get("state") is not None or fabric.get("status") is not None:
            return True
    return False


def check_fabricmanager_version(snapshot, config):
    """NVSwitch systems: the fabric manager's version equals the loaded driver's (it never starts otherwise).

    The version that cannot be read (no version line in the output) is ``unknown``; a tool that failed or a bundle
    without the file is ``CHECK-INPUT-FAILED`` or ``CHECK-INPUT-MISSING`` (unknown) from the inputs check.
    """
    if not nvswitch_system(snapshot, config):
        return []
    parsed = snapshot.get("fabricmanager_version")
    if parsed is None:
        return []
    have = parsed.get("version")
    driver = (snapshot.get("nvsmi") or {}).get("driver_version")
    if not have:
        why = "; ".join(parsed.get("unreadable") or []) or "no version in its output"
        return [finding("fabric", "FABRICMANAGER-VERSION-UNKNOWN", "unknown", "node",
                        "the fabric manager's version cannot be read (%s), so it cannot be compared with the "
                        "driver's%s" % (why, (" " + driver) if driver else ""),
                        "run nv-fabricmanager --version by hand; fix sources.fabricmanager_version")]
    if not driver or str(have).strip() == str(driver).strip():
        return []   # no driver version: check_driver reports why nvidia-smi gave none
    return [finding("fabric", "FABRICMANAGER-VERSION-MISMATCH", "error", "node",
                    "the fabric manager is version %s, the loaded driver %s: the fabric manager does not start "
                    "unless they are equal, so the GPU fabric stays incomplete" % (have, driver),
                    "install the fabric manager matching driver %s" % driver)]


# --------------------------------------------------------------------------------------------------------------
# NVLink
# --------------------------------------------------------------------------------------------------------------

def check_nvlink(snapshot, config):
    """Links per GPU present and active; without an expected count, inactive links only.

    Every GPU of the inventory must appear in the output: one missing from it is ``unknown``, and so is a link
    count short of the expected one when the command failed or was cut short (the rest of the output was lost).
    """
    expected = _expected(config)
    want = expected.get("nvlinks_per_gpu")
    nvlink = snapshot.get("nvlink")
    if nvlink is None or want == 0:
        return []
    found = []
    partial = _partial(snapshot, "nvlink")
    for error in nvlink.get("errors") or []:
        if error.get("kind") == "all_inactive":
            found.append(finding("nvlink", "GPU-NVLINK-INACTIVE", "error", "node",
                                 "every NVLink is inactive: %s" % error.get("message", ""),
                                 "check nvidia-fabricmanager and the NVSwitch trays; " + _ACTIONS["reboot"]))
        elif error.get("kind") == "mig_unsupported" and want:
            found.append(finding("nvlink", "GPU-NVLINK-MIG", "unknown", "gpu%s" % error.get("index", "?"),
                                 "NVLink cannot be read in MIG mode: %s" % error.get("message", ""),
                                 "set nvlinks_per_gpu: 0 for MIG nodes, or check NVLink with MIG off"))
    gpus = nvlink.get("gpus") or []
    if want and not gpus and not nvlink.get("errors") and not partial:
        found.append(finding("nvlink", "GPU-NVLINK-COUNT", "error", "node",
                             "nvidia-smi nvlink reports no links, %d per GPU expected" % want, _ACTIONS["reboot"]))
    if any(e.get("kind") == "all_inactive" for e in nvlink.get("errors") or []) and not gpus:
        return found
    seen = set()
    for gpu in gpus:
        seen.add(gpu.get("index"))
        target = "gpu%s" % gpu.get("index", "?")
        links = gpu.get("links") or []
        inactive = [link.get("link") for link in links if not link.get("active")]
        if inactive:
            found.append(finding("nvlink", "GPU-NVLINK-INACTIVE", "error", target,
                                 "GPU %s NVLink(s) %s inactive" % (gpu.get("index", "?"),
                                                                   ", ".join(str(i) for i in inactive)),
                                 _ACTIONS["reset"] + "; if the link stays down, " + _ACTIONS["rma"]))
        if want and len(links) < want and partial:
            found.append(finding("nvlink", "CHECK-INPUT-PARTIAL", "unknown", target,
                                 "GPU %s shows %d of %d NVLinks in output that %s" % (
                                     gpu.get("index", "?"), len(links), want, _partial_why(snapshot, "nvlink")),
                                 "run nvidia-smi nvlink -s by hand"))
        elif want and len(links) < want:
            found.append(finding("nvlink", "GPU-NVLINK-COUNT", "error", target,
                                 "GPU %s has %d NVLink(s), %d expected" % (gpu.get("index", "?"), len(links), want),
                                 _ACTIONS["reboot"]))
    if want or partial:
        for index in _expected_gpu_indices(snapshot, config):
            if index not in seen:
                found.append(finding("nvlink", "CHECK-INPUT-PARTIAL", "unknown", "gpu%s" % index,
                                     "GPU %s is missing from the output of nvidia-smi nvlink -s%s" % (
                                         index, (", which " + _partial_why(snapshot, "nvlink")) if partial else ""),
                                     "run nvidia-smi nvlink -s by hand"))
    return found


_NVLINK_COUNTERS = (("replay", "nvlink_replay_warn"), ("recovery", "nvlink_recovery_warn"),
                    ("crc_flit", "nvlink_crc_warn"), ("crc_data", "nvlink_crc_warn"))


def check_nvlink_errors(snapshot, config):
    """NVLink error counters: above an absolute threshold, or rising since the previous run.

    Every GPU of the inventory and every link that ``nvlink -s`` showed must have its counters here; one missing
    is ``unknown``.
    """
    data = snapshot.get("nvlink_errors")
    if data is None or _expected(config).get("nvlinks_per_gpu") == 0:
        return []
    found = []
    limits = merged_thresholds(config)
    previous = (snapshot.get("previous") or {}).get("nvlink_errors") or {}
    partial = _partial(snapshot, "nvlink_errors")
    status_links = {g.get("index"): {l.get("link") for l in g.get("links") or []}
                    for g in (snapshot.get("nvlink") or {}).get("gpus") or []}
    seen = set()
    for gpu in data.get("gpus") or []:
        seen.add(gpu.get("index"))
        have_links = set()
        for link in gpu.get("links") or []:
            have_links.add(link.get("link"))
            key = "gpu%s/link%s" % (gpu.get("index", "?"), link.get("link", "?"))
            counters = link.get("counters") or {}
            for name, limit_key in _NVLINK_COUNTERS:
                value = _num(counters.get(name))
                if value is None:
                    continue
                before = _num((previous.get(key) or {}).get(name))
                rising = before is not None and value - before >= limits["nvlink_counter_increase_warn"]
                if value >= limits[limit_key] or rising:
                    how = ("rose by %d since the last run" % (value - before)) if rising else "is high"
                    found.append(finding("nvlink", "GPU-NVLINK-ERRORS", "warning", key,
                                         "%s %s error counter is %d and %s" % (key, name, value, how),
                                         "watch it; if it keeps rising, " + _ACTIONS["reset"]))
        lacking = sorted(status_links.get(gpu.get("index"), set()) - have_links, key=lambda x: (x is None, x))
        if lacking:
            found.append(finding("nvlink", "CHECK-INPUT-PARTIAL", "unknown", "gpu%s" % gpu.get("index", "?"),
                                 "nvidia-smi nvlink -e has no counters for GPU %s link(s) %s" % (
                                     gpu.get("index", "?"), ", ".join(str(i) for i in lacking)),
                                 "run nvidia-smi nvlink -e by hand"))
    if data.get("gpus") or partial or _expected(config).get("nvlinks_per_gpu"):
        for index in _expected_gpu_indices(snapshot, config):
            if index not in seen and (index in status_links or not status_links):
                found.append(finding("nvlink", "CHECK-INPUT-PARTIAL", "unknown", "gpu%s" % index,
                                     "GPU %s is missing from the output of nvidia-smi nvlink -e%s" % (
                                         index, (", which " + _partial_why(snapshot, "nvlink_errors"))
                                         if partial else ""),
                                     "run nvidia-smi nvlink -e by hand"))
    return found


# --------------------------------------------------------------------------------------------------------------
# Kernel log: Xid and SXid
# --------------------------------------------------------------------------------------------------------------

def check_xid(snapshot, config):
    """Xid and SXid events in the time window, classified; codes on the ignore list are skipped. Xids are grouped per
    code, GPU and the driver's Fatal/Nonfatal word, so a Fatal one is never merged into a Nonfatal one."""
    kernel = snapshot.get("kernel")
    if kernel is None:
        return []
    xid_conf = (config or {}).get("xid") or {}
    ignore = set(xid_conf.get("ignore") or [])
    since = _xid_since(snapshot, config)
    catalog = snapshot.get("xid_catalog") or {}
    grouped = {}
    for event in kernel.get("events") or []:
        if event.get("kind") not in ("xid", "sxid") or event.get("code") in ignore:
            continue
        epoch = event.get("epoch")
        if since is not None and epoch is not None and epoch < since:
            continue
        fatal = event.get("fatal") if event["kind"] == "xid" else None
        key = (event["kind"], event.get("code"), event.get("bus_id") or event.get("device"), fatal)
        grouped.setdefault(key, []).append(event)
    found = []
    by_bus = {gpu.get("bus_id"): _gpu_target(gpu) for gpu in _gpus(snapshot) if gpu.get("bus_id")}
    order = {True: 0, None: 1, False: 2}
    for (kind, code, where, fatal), events in sorted(
            grouped.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2] or "", order.get(kv[0][3], 1))):
        found.append(_xid_finding(kind, code, where, by_bus.get(where, where), events, catalog,
                                  set(xid_conf.get("error_codes") or []), set(xid_conf.get("warning_codes") or []),
                                  fatal))
    return found


def _xid_since(snapshot, config):
    """Start of the Xid time window (epoch), or ``None`` for no window."""
    window = ((config or {}).get("xid") or {}).get("window_s", merged_thresholds(config)["xid_window_s"])
    now = snapshot.get("now")
    return now - window if now is not None and window else None


def _xid_finding(kind, code, where, target, events, catalog, extra_errors, extra_warnings, fatal=None):
    # pylint: disable=too-many-arguments,too-many-branches
    last = events[-1]
    count = len(events)
    word = {True: " (Fatal)", False: " (Nonfatal)"}.get(fatal, "")
    message = "%d %s %s%s event(s) on %s, last: %s" % (count, kind.upper(), code, word, where or "an unknown device",
                                                       last.get("message", "")[:200])
    if kind == "sxid":
        fatal = any(e.get("sxid_fatal") for e in events)
        return finding("xid", "NVSWITCH-SXID-FATAL" if fatal else "NVSWITCH-SXID",
                       "error" if fatal else "warning", where or "nvswitch", message,
                       (_ACTIONS["reboot"] + "; if it repeats, " + _ACTIONS["rma"]) if fatal
                       else _ACTIONS["investigate"])
    entry = catalog.get(code) or XID_CATALOG.get(code) or {}
    action = entry.get("action")
    recovery, recovery_severity = recovery_action(last.get("message")) if code == 154 else (None, None)
    if code in extra_errors:
        severity = "error"
    elif code in extra_warnings:
        severity = "warning"
    elif fatal is False:  # the driver says Nonfatal: a warning, not a reason to drain
        severity = "warning"
        action = ACT_NVLINK5_NONFATAL if code in NVLINK5_CODES else ACT_NONFATAL
    elif fatal is True:
        severity = "error"
        if code in NVLINK5_CODES or entry.get("severity") != "error":
            action = ACT_NVLINK5_FATAL if code in NVLINK5_CODES else ACT_FATAL
    elif recovery_severity is not None:
        severity = recovery_severity
    elif entry.get("severity") in ("warning", "error"):
        severity = entry["severity"]
    else:
        severity = "error" if code in XID_ERROR_CODES else "warning"
    is_app = entry.get("class") == "application" or (not entry and code in XID_APPLICATION_CODES)
    if code == 79:
        code_name = "GPU-FALLEN-OFF-BUS"
    elif recovery is not None and severity == recovery_severity:
        code_name = "GPU-RECOVERY-ACTION"
        message = "%s; recovery action now: %s" % (message, recovery)
        action = ("the driver asks for '%s' on this GPU: drain the node and do it (GPU reset: nvidia-smi -r); the "
                  "Xid before this one says why" % recovery) if severity == "error" else \
            "the driver's recovery action for this GPU is back to None: no action"
    elif is_app and severity == "warning":
        code_name = "GPU-XID-APP"
    else:
        code_name = "GPU-XID-ERROR" if severity == "error" else "GPU-XID-WARNING"
    action = action or (_ACTIONS["reset"] if severity == "error" else
                        "usually a user program fault; look at the job that ran at that time")
    return finding("xid", code_name, severity, target or "node", message, action)


# Finding codes of the driver/GSP failures that the kernel log shows without an Xid line (_kernlog event kinds).
DRIVER_LOG_CODES = {
    "gsp_timeout": "GPU-GSP-TIMEOUT",
    "driver_init_failed": "GPU-DRIVER-INIT-FAILED",
    "gpu_lost": "GPU-FALLEN-OFF-BUS",
}


def check_driver_log(snapshot, config):
    """Driver and GSP failures logged without an Xid line (GSP RPC/heartbeat timeouts, ``RmInitAdapter failed``, a GPU
    fallen off the bus) in the Xid time window, one finding per kind and GPU. A failure that an Xid line of the same
    GPU also reports in the window (119/120, 143, 79; on any GPU when the line names none) is left to check_xid, and a
    line that names no GPU is folded into a finding of the same kind that names one."""
    kernel = snapshot.get("kernel")
    if kernel is None:
        return []
    since = _xid_since(snapshot, config)
    events = [e for e in kernel.get("events") or [] if e.get("kind") in DRIVER_EVENTS or e.get("kind") == "xid"]
    events = [e for e in events if since is None or e.get("epoch") is None or e["epoch"] >= since]
    xid_buses = {}
    for event in events:
        if event["kind"] == "xid":
            xid_buses.setdefault(event.get("code"), set()).add(event.get("bus_id"))
    grouped = {}
    for event in events:
        kind = event["kind"]
        if kind == "xid":
            continue
        bus = event.get("bus_id")
        covering = [xid_buses.get(code, set()) for code in DRIVER_EVENTS[kind]["xids"]]
        if any((bus in buses) if bus else buses for buses in covering):
            continue
        grouped.setdefault((kind, bus or event.get("device") or ""), []).append(event)
    # A line that names no GPU (the GSP boot or heartbeat lines) belongs to the failure a line of the same kind names.
    named = {kind for (kind, _where), group in grouped.items() if group[-1].get("bus_id")}
    grouped = {key: group for key, group in grouped.items() if group[-1].get("bus_id") or key[0] not in named}
    by_bus = {gpu.get("bus_id"): _gpu_target(gpu) for gpu in _gpus(snapshot) if gpu.get("bus_id")}
    found = []
    for (kind, where), group in sorted(grouped.items()):
        facts = DRIVER_EVENTS[kind]
        bus = group[-1].get("bus_id")
        place = where if bus else ("driver instance %s" % where if where else "a GPU the line does not name")
        message = "%d kernel log line(s) without an Xid: %s on %s, last: %s" % (
            len(group), facts["name"], place, group[-1].get("message", "")[:200])
        found.append(finding("driver_log", DRIVER_LOG_CODES[kind], facts["severity"],
                             by_bus.get(bus, bus) if bus else "node", message, facts["action"]))
    return found


# --------------------------------------------------------------------------------------------------------------
# InfiniBand
# --------------------------------------------------------------------------------------------------------------

def _ib_ports(snapshot, link_layer):
    ports = []
    for device in (snapshot.get("ib") or {}).get("devices") or []:
        for port in device.get("ports") or []:
            if link_layer and port.get("link_layer") and port["link_layer"] != link_layer:
                continue
            ports.append(("%s/%s" % (device.get("name"), port.get("port")), device, port))
    return ports


def check_infiniband(snapshot, config):
    """Port count, state, physical state and rate against the inventory; without expected values, ports that are
    Down or Polling (a port whose physical state is Disabled was switched off on purpose and is left alone)."""
    ib = snapshot.get("ib")
    expected = _expected(config)
    if ib is None or expected.get("ib_port_count") == 0:
        return []
    judged = bool(expected.get("ib_port_count") or expected.get("ib_rate_gbps"))
    found = []
    link_layer = expected.get("ib_link_layer", "InfiniBand")
    ports = _ib_ports(snapshot, link_layer)
    want = expected.get("ib_port_count")
    partial = _partial(snapshot, "ib")
    if want and len(ports) < want:
        if partial:
            found.append(finding("infiniband", "CHECK-INPUT-PARTIAL", "unknown", "node",
                                 "%d of %d expected %s port(s) could be read; the input %s" % (
                                     len(ports), want, link_layer, _partial_why(snapshot, "ib")),
                                 "read /sys/class/infiniband (or run ibstat) by hand"))
        else:
            found.append(finding("infiniband", "IB-PORT-COUNT", "error", "node",
                                 "%d %s port(s) found, %d expected" % (len(ports), link_layer, want),
                                 "check that every HCA is seen by lspci and its driver loaded (mlx5_core); "
                                 + _ACTIONS["investigate"]))
    rate_want = expected.get("ib_rate_gbps")
    for target, _device, port in ports:
        state, phys = port.get("state"), port.get("physical_state")
        if not judged and phys == "Disabled":
            continue
        if state is None and phys is None:
            found.append(finding("infiniband", "CHECK-INPUT-PARTIAL", "unknown", target,
                                 "%s has no readable state" % target, "read the port's state by hand"))
        elif state != "Active":
            found.append(finding("infiniband", "IB-PORT-DOWN", "error", target,
                                 "%s is %s (physical state %s)" % (target, state, phys),
                                 "check the cable, the switch port and the subnet manager"))
        elif phys not in (None, "LinkUp"):
            found.append(finding("infiniband", "IB-PORT-DOWN", "error", target,
                                 "%s physical state is %s" % (target, phys), "check the cable and switch port"))
        rate = _num(port.get("rate_gbps"))
        if rate_want and state == "Active" and rate is not None and rate < rate_want:
            found.append(finding("infiniband", "IB-RATE-LOW", "error", target,
                                 "%s runs at %g Gb/s, %g expected" % (target, rate, rate_want),
                                 "reseat or replace the cable; check the switch port speed"))
    return found


def check_ib_flaps(snapshot, config):
    """Link flaps: lost-carrier events in the window, link_downed counters rising, symbol errors rising."""
    found = []
    limits = merged_thresholds(config)
    now = snapshot.get("now")
    kernel = snapshot.get("kernel") or {}
    downs = {}
    for event in kernel.get("events") or []:
        if event.get("kind") != "link_down":
            continue
        epoch = event.get("epoch")
        if now is not None and epoch is not None and epoch < now - limits["ib_flap_window_s"]:
            continue
        downs.setdefault(event.get("device") or "?", []).append(event)
    for device, events in sorted(downs.items()):
        if len(events) >= limits["ib_flap_warn"]:
            severity = "error" if len(events) >= limits["ib_flap_error"] else "warning"
            found.append(finding("infiniband", "IB-LINK-FLAP", severity, device,
                                 "%s lost its link %d times in the last %d s" % (
                                     device, len(events), limits["ib_flap_window_s"]),
                                 "check the cable and the switch port; replace the cable if it keeps flapping"))
    previous = (snapshot.get("previous") or {}).get("ib_counters") or {}
    for target, _device, port in _ib_ports(snapshot, None):
        counters = port.get("counters") or {}
        before = previous.get(target) or {}
        downed, downed_before = _num(counters.get("link_downed")), _num(before.get("link_downed"))
        if downed is not None and downed_before is not None and downed > downed_before:
            found.append(finding("infiniband", "IB-LINK-FLAP", "warning", target,
                                 "%s link_downed rose from %d to %d since the last run" % (
                                     target, downed_before, downed),
                                 "check the cable and the switch port"))
        sym, sym_before = _num(counters.get("symbol_error")), _num(before.get("symbol_error"))
        if sym is not None and sym_before is not None and sym - sym_before >= limits["ib_symbol_error_increase_warn"]:
            found.append(finding("infiniband", "IB-SYMBOL-ERRORS", "warning", target,
                                 "%s symbol errors rose by %d since the last run" % (target, sym - sym_before),
                                 "a marginal cable or transceiver; plan to replace it"))
    return found


# --------------------------------------------------------------------------------------------------------------
# Deep checks: DCGM diagnostics and NCCL bandwidth
# --------------------------------------------------------------------------------------------------------------

def check_dcgm(snapshot, config):
    """dcgmi diag results; a run with no test result at all is ``unknown``, never a pass."""
    dcgm = snapshot.get("dcgm")
    if dcgm is None:
        return []
    found = []
    for error in dcgm.get("errors") or []:
        found.append(finding("dcgm", "DCGM-DIAG-INCOMPLETE", "unknown", "node",
                             "dcgmi diag did not complete: %s" % error.get("message", ""),
                             "check that nvidia-dcgm is running (dcgm role)"))
    results = dcgm.get("results") or []
    if not results and not dcgm.get("errors"):
        found.append(finding("dcgm", "DCGM-DIAG-INCOMPLETE", "unknown", "node",
                             "dcgmi diag gave no test result: nothing was tested",
                             "run dcgmi diag -r 3 by hand; check that nvidia-dcgm is running (dcgm role)"))
    elif results and all(r.get("status") not in ("pass", "fail", "warn") for r in results):
        found.append(finding("dcgm", "DCGM-DIAG-INCOMPLETE", "unknown", "node",
                             "dcgmi diag ran no test (%d result(s), all skipped or not run)" % len(results),
                             "run dcgmi diag -r 3 by hand and look at why the tests were skipped"))
    for result in results:
        status = result.get("status")
        if status not in ("fail", "warn"):
            continue
        gpus = result.get("gpus")
        target = ",".join("gpu%s" % g for g in gpus) if gpus else "node"
        detail = (": " + result["message"]) if result.get("message") else ""
        found.append(finding("dcgm", "DCGM-DIAG-FAIL" if status == "fail" else "DCGM-DIAG-WARN",
                             "error" if status == "fail" else "warning", target,
                             "dcgmi diag %s: %s%s" % (result.get("test"), status, detail),
                             _ACTIONS["rma"] if status == "fail" else _ACTIONS["investigate"]))
    return found


def check_nccl(snapshot, config):
    """nccl-tests all_reduce_perf bus bandwidth against a threshold."""
    nccl = snapshot.get("nccl")
    if nccl is None:
        return []
    found = []
    for error in nccl.get("errors") or []:
        found.append(finding("nccl", "NCCL-TEST-FAILED", "error", "node",
                             "all_reduce_perf failed: %s" % error.get("message", ""),
                             "run it by hand; check NCCL, the GPUs and the launcher"))
    wrong = [r for r in nccl.get("rows") or []
             if (_num(r.get("oop_wrong")) or 0) > 0 or (_num(r.get("ip_wrong")) or 0) > 0]
    if wrong and any(isinstance(r.get("oop_wrong"), int) for r in wrong):
        found.append(finding("nccl", "NCCL-WRONG-RESULTS", "error", "node",
                             "all_reduce_perf reported wrong results at %d size(s)" % len(wrong), _ACTIONS["reset"]))
    minimum = merged_thresholds(config).get("nccl_busbw_min_gbps")
    best = _num(nccl.get("max_busbw_gbps"))
    if nccl.get("rows") and nccl.get("avg_busbw_gbps") is None and not nccl.get("errors"):
        # all_reduce_perf ends with "# Avg bus bandwidth": without it the run was cut short, and the sizes it
        # never reached (the largest, where the bandwidth peaks) are unknown
        found.append(finding("nccl", "CHECK-INPUT-PARTIAL", "unknown", "node",
                             "all_reduce_perf output ends after %d size(s), before its '# Avg bus bandwidth' "
                             "summary" % len(nccl.get("rows") or []), "run it by hand"))
    if minimum and best is not None and best < minimum:
        found.append(finding("nccl", "NCCL-BUSBW-LOW", "error", "node",
                             "all_reduce_perf peak bus bandwidth %.1f GB/s is below %.1f GB/s" % (best, minimum),
                             "check NVLink and the fabric manager (nvlink checks), then " + _ACTIONS["investigate"]))
    elif minimum and best is None and not nccl.get("errors"):
        found.append(finding("nccl", "NCCL-TEST-FAILED", "unknown", "node",
                             "all_reduce_perf gave no bandwidth figure", "run it by hand"))
    return found


# --------------------------------------------------------------------------------------------------------------
# Inputs that could not be read or run

# The tool errors (a parser's ``errors`` kinds) that a check turns into a finding of its own; any other error a tool
# printed ("Unable to query GPU information", a journal permission hint, ibpanic) is CHECK-INPUT-ERROR, unknown.
# None: every error of that input is judged by its check.
JUDGED_ERRORS = {
    "nvsmi": frozenset(("driver_mismatch", "nvml_init", "no_devices", "gpu_lost", "device_handle")),
    "nvlink": frozenset(("all_inactive", "mig_unsupported")),
    "nvlink_errors": frozenset(("all_inactive", "mig_unsupported")),
    "dcgm": None,
    "nccl": None,
}


def judged_error(name, error):
    """Whether a check reports this tool error itself (so it needs no CHECK-INPUT-ERROR)."""
    kinds = JUDGED_ERRORS.get(name, frozenset())
    return kinds is None or (error or {}).get("kind") in kinds
# --------------------------------------------------------------------------------------------------------------


def check_unreadable(snapshot, config):
    """Inputs that failed, were missing, could not be read or parsed, and capture times that cannot be trusted,
    become ``unknown`` findings, so nothing is silently skipped."""
    found = []
    for name, failure in sorted((snapshot.get("failures") or {}).items()):
        if name == "nvsmi" and snapshot.get("nvsmi") is None and not failure.get("unreadable"):
            continue  # check_driver judges an nvidia-smi that ran and gave nothing
        found.append(finding("inputs", "CHECK-INPUT-FAILED", "unknown", name,
                             "%s could not be collected: rc %s: %s" % (name, failure.get("rc"),
                                                                       first_line(failure.get("stderr"))),
                             "install the tool or fix its path in the checker's config"))
    for name in ("nvsmi", "nvlink", "nvlink_errors", "ib", "kernel", "dcgm", "nccl"):
        data = snapshot.get(name)
        for error in (data.get("errors") or []) if isinstance(data, dict) else []:
            if not judged_error(name, error):
                found.append(finding("inputs", "CHECK-INPUT-ERROR", "unknown", name,
                                     "the %s input reports an error: %s" % (name, first_line(error.get("message"))),
                                     "run the tool by hand on the node; fix its permissions or the driver"))
    for filename in snapshot.get("missing") or []:
        found.append(finding("inputs", "CHECK-INPUT-MISSING", "unknown", filename,
                             "the bundle has no %s, which this level and config need" % filename,
                             "capture the bundle again with gpucluster-health --collect"))
    for name in ("nvsmi", "nvlink", "nvlink_errors", "ib", "kernel", "dcgm", "nccl"):
        data = snapshot.get(name)
        if not isinstance(data, dict):
            continue
        for note in data.get("unreadable") or []:
            found.append(finding("inputs", "CHECK-UNREADABLE", "unknown", name,
                                 "could not read part of the %s input: %s" % (name, note),
                                 "report the tool output to the gpucluster.ops developers"))
    for message in snapshot.get("time_problems") or []:
        found.append(finding("inputs", "CHECK-CLOCK", "unknown", "node",
                             message + ("; time windows are not applied, every Xid and flap in the log counts"
                                        if snapshot.get("now") is None else ""),
                             "set the node's clock (chrony) and capture again"))
    return found


CHECKS = (
    ("driver", "quick", check_driver),
    ("inventory", "quick", check_inventory),
    ("modes", "quick", check_modes),
    ("memory", "quick", check_memory),
    ("pcie", "quick", check_pcie),
    ("thermal", "quick", check_thermal_power),
    ("fabric", "quick", check_fabric),
    ("fabric_version", "standard", check_fabricmanager_version),
    ("nvlink", "quick", check_nvlink),
    ("xid", "quick", check_xid),
    ("driver_log", "quick", check_driver_log),
    ("infiniband", "quick", check_infiniband),
    ("ib_flaps", "quick", check_ib_flaps),
    ("nvlink_errors", "standard", check_nvlink_errors),
    ("dcgm", "deep", check_dcgm),
    ("nccl", "deep", check_nccl),
    ("inputs", "quick", check_unreadable),
)


def run_checks(snapshot, config, level="quick"):
    """Run every check up to the level; return findings sorted worst first."""
    if level not in LEVELS:
        raise ValueError("level must be one of %s, not %r" % (", ".join(LEVELS), level))
    allowed = LEVELS[:LEVELS.index(level) + 1]
    found = []
    for _name, check_level, check in CHECKS:
        if check_level in allowed:
            found.extend(check(snapshot, config))
    found.sort(key=lambda f: (-_WORST_ORDER.index(f["severity"]), f["code"], _natural(f["target"])))
    return found


def _natural(text):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text or "")]
