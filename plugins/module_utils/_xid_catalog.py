# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA Xid catalogue: what each Xid code means and what to do about it (one source for the parser and checks).

Source, checked for drivers R570 to R590 (570.86.15 ... 590.48.01):

- NVIDIA, "Analyzing Xid Errors with the Xid Catalog", GPU Deployment and Management Documentation,
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html , and the spreadsheet it links
  (Xid-Catalog.xlsx, revision of 2025-09-30: sheets "Xids", "Xid 144-150 Decode" with the V1 (< R575) and V2
  (>= R575) IntrInfo decode, "Resolution Buckets"). ``resolution`` below is that catalogue's "Resolution Bucket
  (Immediate Action)"; names are its descriptions (a few shortened).
- The Xid numbers the drivers define, ``src/common/sdk/nvidia/inc/nverror.h`` of NVIDIA/open-gpu-kernel-modules at
  tags 570.86.15, 575.64.05, 580.142 and 590.48.01: R580 adds 173 (C2C_FATAL_LINK_FAILURE), which the catalogue
  does not list yet; 174 (R590) is a silent channel kill that is not logged.
- Message formats: R570-R590 ``kernel_gsp.c``/``osinit.c``/``nv.c``/``gpu.c`` of the same repository (GSP RPC timeout,
  heartbeat, ``RmInitAdapter failed!``, Xid 154 "GPU recovery action changed from 0x.. (..) to 0x.. (..)"); the
  NVLink Xids 144-150 print ``<unit> Fatal|Nonfatal XC<n> i<n> Link <n> (<IntrInfo> <ErrorStatus> ...)`` (seen in
  leptonai/gpud, NVIDIA/NVSentinel and NVIDIA issue reports; printed by the GSP firmware, not the open modules).

Severity rule (``RESOLUTION_SEVERITY``): ``error`` (drain the node) for the buckets that need a GPU reset, a reboot,
a hardware or NVLink workflow, a VM restart or support; ``warning`` for RESTART_APP, IGNORE and the workflows that
follow another Xid. ``STRICTER_THAN_NVIDIA`` lists the codes where we drain although the bucket does not say so, with
the reason. Codes without a bucket in the catalogue (162-172, and 173 from the driver header) carry our own
severity. ``PRE_AMPERE_CODES`` are "Unused" on Ampere and newer but mean hardware faults on older GPUs.

Xid 144-150 (NVLink5): the line's own word decides (``Nonfatal``: warning; ``Fatal``: error); a line without the
word keeps the catalogue's ``error``. Xid 154 names the recovery action the driver now wants
(``recovery_action(message)``): anything but "None" is an error.

Standard library only, Python 3.8+ (3.9+ under ansible-core 2.20 and later); nothing here raises.
"""

import re

CATALOG_SOURCE = {
    "title": "NVIDIA Xid Errors: Analyzing Xid Errors with the Xid Catalog",
    "url": "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
    "spreadsheet_revision": "2025-09-30",
    "drivers": "R570-R590",
    "driver_header": "https://github.com/NVIDIA/open-gpu-kernel-modules/blob/590.48.01/src/common/sdk/nvidia/inc/nverror.h",
}

# NVIDIA's resolution buckets (immediate action) and the severity they mean here.
RESOLUTION_SEVERITY = {
    "RESET_GPU": "error", "RESTART_BM": "error", "RESTART_VM": "error", "WORKFLOW_XID_48": "error",
    "WORKFLOW_NVLINK_ERR": "error", "WORKFLOW_NVLINK5_ERR": "error", "CHECK_MECHANICALS": "error",
    "UPDATE_SWFW": "error", "CONTACT_SUPPORT": "error",
    "RESTART_APP": "warning", "IGNORE": "warning", "WORKFLOW_XID_45": "warning", "XID_154": "warning",
    "CHECK_UVM": "warning",
}

# Codes we drain for although NVIDIA's immediate action does not ask for it.
STRICTER_THAN_NVIDIA = {
    92: "a high single-bit ECC rate precedes uncorrectable errors; NVIDIA's investigatory action is CONTACT_SUPPORT",
    94: "the contained error's row waits for a GPU reset to be remapped (NVIDIA: restart the application)",
    157: "no spare resources are left to retire into: the board needs replacing (NVIDIA: contact support)",
}

# "Unused" on Ampere and newer in the catalogue; hardware faults on Volta and older (reset or RMA).
PRE_AMPERE_CODES = frozenset((56, 57, 58, 61, 65, 73, 81, 122, 123, 124))
# Defined by the R570-R590 drivers (nverror.h) but not yet in the catalogue.
DRIVER_HEADER_CODES = frozenset((173,))
NVLINK5_CODES = frozenset(range(144, 151))

_ACT_APP = "Restart the application; if it recurs with a known-good application, check the application/CUDA code."
_ACT_ENGINE = "Engine exception: restart the application; contact support if it recurs on this GPU."
_ACT_RESET = "Drain the node and reset the GPU (nvidia-smi -r or reboot); contact support if it recurs."
_ACT_REBOOT = "Drain the node and reboot it (power cycle); contact support if it recurs."
_ACT_INFO = "Informational; no action unless it repeats."
_ACT_NVLINK5 = "NVLink error: decode intrInfo/errorStatus with the Xid 144-150 tab of NVIDIA's Xid catalog; reset the GPU if it is fatal."
_ACT_UNKNOWN = "Unknown Xid: look it up in NVIDIA's Xid catalog for this driver; contact support if it repeats."
_ACT_LEGACY = "Hardware fault on a pre-Ampere GPU: drain the node and reset the GPU; contact support if it recurs."
ACT_NVLINK5_NONFATAL = ("Nonfatal NVLink error (the driver says so): no reset needed; follow an Xid 154 if one came with it; "
                        "contact support if it repeats on the same link.")
ACT_NVLINK5_FATAL = "Fatal NVLink error: drain the node and reset the GPU; contact support if it recurs on the same link."
ACT_NONFATAL = "The driver reports this Xid as nonfatal: no reset needed; contact support if it repeats."
ACT_FATAL = "The driver reports this Xid as fatal: drain the node and reset the GPU; contact support if it recurs."

# code: (name, class, NVIDIA resolution bucket or None, severity, action)
_ENTRIES = {
    8: ('GPU stopped processing', 'application', 'RESTART_APP', 'warning',
        'GPU stopped processing: restart the application; contact support if it recurs.'),
    11: ('Invalid or corrupted push buffer stream', 'application', 'RESTART_APP', 'warning',
         _ACT_APP),
    13: ('Graphics Engine Exception', 'application', 'RESTART_APP', 'warning',
         'Application fault: restart the application; if it repeats on the same GPC/TPC, run dcgmi diag -r 3 (possible hardware fault).'),
    14: ('Fake or injected error', 'driver', 'IGNORE', 'warning',
         'Injected test error: no action.'),
    25: ('Invalid or illegal push buffer stream', 'application', 'RESTART_APP', 'warning',
         _ACT_APP),
    31: ('GPU memory page fault', 'application', 'RESTART_APP', 'warning',
         'Application memory fault: restart the application; if it repeats on the same GPU across jobs, run dcgmi diag -r 3.'),
    32: ('Invalid or corrupted push buffer stream', 'application', 'RESTART_APP', 'warning',
         _ACT_APP),
    37: ('Driver firmware error', 'driver', 'IGNORE', 'warning',
         'Driver firmware error: no action unless it repeats; then update the driver.'),
    38: ('Driver firmware error', 'driver', 'IGNORE', 'warning',
         'Driver firmware watchdog: no action unless it repeats; then contact support.'),
    39: ('Copy Engine Exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    40: ('Copy Engine Exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    41: ('Copy Engine Exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    43: ('GPU stopped processing', 'application', 'IGNORE', 'warning',
         'The application hit a software fault and was stopped; no action for the node.'),
    44: ('Graphics Engine fault during context switch', 'driver', 'IGNORE', 'warning',
         _ACT_INFO),
    45: ('Preemptive cleanup, due to previous errors', 'application', 'WORKFLOW_XID_45', 'warning',
         'Preemptive cleanup after other errors: follow the other Xids; seen alone, restart the fabric manager.'),
    46: ('GPU stopped processing', 'hardware', 'RESET_GPU', 'error',
         _ACT_RESET),
    48: ('Double Bit ECC Error', 'memory', 'WORKFLOW_XID_48', 'error',
         'Uncorrectable ECC error: drain the node and reset the GPU; if it recurs, run field diagnostics.'),
    54: ('Auxiliary power is not connected to the GPU board', 'hardware', 'CHECK_MECHANICALS', 'error',
         "Auxiliary power is not connected: check the GPU's power cables and seating."),
    60: ('Video processor exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    62: ('Internal micro-controller halt', 'hardware', 'RESET_GPU', 'error',
         _ACT_RESET),
    63: ('GPU memory remapping event', 'memory', 'IGNORE', 'warning',
         'Row remapping pending: drain and reset the GPU when convenient to activate it (now if Xid 48 came with it).'),
    64: ('GPU memory remapping failure', 'memory', 'RESET_GPU', 'error',
         'Row remapping failed: drain the node, reset the GPU and contact support (likely RMA).'),
    66: ('Illegal access by driver', 'driver', 'IGNORE', 'warning',
         'Illegal register access by the driver: investigate the software; update the driver if it repeats.'),
    67: ('Illegal access by driver', 'driver', 'IGNORE', 'warning',
         'Illegal register access by the driver: contact support if it repeats.'),
    68: ('NVDEC0 Exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    69: ('Graphics Engine class error', 'application', 'RESTART_APP', 'warning',
         _ACT_APP),
    70: ('CE3: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    71: ('CE4: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    72: ('CE5: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    74: ('NVLINK Error', 'nvlink', 'WORKFLOW_NVLINK_ERR', 'error',
         'NVLink error: drain the node and reset the GPU; check and re-seat the link and run diagnostics if it repeats.'),
    75: ('CE6: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    76: ('CE7: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    77: ('CE8: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    78: ('vGPU Start Error', 'driver', 'UPDATE_SWFW', 'error',
         'vGPU failed to start: align guest and host driver versions and the vGPU type.'),
    79: ('GPU has fallen off the bus', 'hardware', 'RESTART_BM', 'error',
         'GPU has fallen off the bus: drain the node and reboot it (power cycle); contact support if it recurs.'),
    80: ('Corrupted data sent to GPU', 'application', 'RESTART_APP', 'warning',
         _ACT_APP),
    82: ('NVJPG0 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    83: ('NVDEC1 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    84: ('NVDEC2 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    85: ('CE9: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    86: ('OFA Exception', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    88: ('NVDEC3 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    89: ('NVDEC4 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    92: ('High single-bit ECC error rate', 'memory', 'IGNORE', 'error',
         'High single-bit ECC error rate: watch the ECC and remapped-row counters; contact support if it persists.'),
    93: ('InfoROM wear limit exceeded', 'memory', 'IGNORE', 'warning',
         'InfoROM wear limit exceeded: contact support at the next maintenance.'),
    94: ('Contained memory error', 'memory', 'RESTART_APP', 'error',
         'Contained ECC error: restart the affected application; reset the GPU when convenient to remap the row.'),
    95: ('Uncontained memory error', 'memory', 'RESET_GPU', 'error',
         'Uncontained ECC error: drain the node and reset the GPU.'),
    96: ('NVDEC5 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    97: ('NVDEC6 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    98: ('NVDEC7 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    99: ('NVJPG1 Error', 'hardware', 'RESTART_APP', 'warning',
         _ACT_ENGINE),
    100: ('NVJPG2 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    101: ('NVJPG3 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    102: ('NVJPG4 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    103: ('NVJPG5 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    104: ('NVJPG6 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    105: ('NVJPG7 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    106: ('SMBPBI Test Message', 'driver', 'IGNORE', 'warning',
          'SMBPBI test message: no action.'),
    107: ('SMBPBI Test Message Silent', 'driver', 'IGNORE', 'warning',
          'SMBPBI test message: no action.'),
    109: ('Context Switch Timeout Error', 'driver', 'RESET_GPU', 'error',
          _ACT_RESET),
    110: ('Security Fault Error', 'hardware', 'RESET_GPU', 'error',
          'Security fault: drain the node and reset the GPU; investigate the software if it recurs.'),
    119: ('GSP RPC Timeout', 'driver', 'RESET_GPU', 'error',
          'GSP RPC timeout: drain the node and reset the GPU; update the driver if it recurs.'),
    120: ('GSP Error', 'driver', 'RESET_GPU', 'error',
          'GSP error: drain the node and reset the GPU; update the driver if it recurs.'),
    121: ('C2C Error', 'hardware', 'IGNORE', 'warning',
          'C2C link corrected errors: no action; contact support if they repeat.'),
    126: ('CE10: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    127: ('CE11: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    128: ('CE12: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    129: ('CE13: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    130: ('CE14: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    131: ('CE15: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    132: ('CE16: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    133: ('CE17: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    134: ('CE18: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    135: ('CE19: Unknown Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    136: ('Link Training Failed', 'nvlink', 'RESET_GPU', 'error',
          "NVLink training failed: reset the GPU; check the link's cables and signal integrity."),
    137: ('NVLink Privilege Error', 'application', 'IGNORE', 'warning',
          'Illegal NVLink peer access (application bug): run the application under cuda-gdb or compute-sanitizer.'),
    139: ('OFA1 Error', 'hardware', 'RESTART_APP', 'warning',
          _ACT_ENGINE),
    140: ('ECC Unrecovered Error', 'memory', 'RESET_GPU', 'error',
          'Unrecovered ECC error: drain the node and reset the GPU; contact support if it recurs.'),
    141: ('CUDA Fast Path Error', 'driver', 'IGNORE', 'warning',
          _ACT_INFO),
    142: ('NVENC3 Error', 'hardware', 'CONTACT_SUPPORT', 'error',
          'NVENC3 error: contact support.'),
    143: ('GPU Initialization Error', 'hardware', 'RESET_GPU', 'error',
          'GPU initialisation failed: drain the node and reset the GPU; contact support if it recurs.'),
    144: ('NVLINK: SAW Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    145: ('NVLINK: RLW Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    146: ('NVLINK: TLW Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    147: ('NVLINK: TREX Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    148: ('NVLINK: NVLPW_CTRL Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    149: ('NVLINK: NETIR Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    150: ('NVLINK: MSE Error', 'nvlink', 'WORKFLOW_NVLINK5_ERR', 'error',
          _ACT_NVLINK5),
    151: ('Key rotation Error', 'driver', 'RESTART_VM', 'error',
          'Key rotation error: restart the VM that owns the GPU.'),
    154: ('GPU Recovery Action Changed', 'driver', 'XID_154', 'warning',
          'GPU recovery action changed: follow the action it names for the Xid it accompanies.'),
    155: ('NVLINK: SW Defined Error', 'nvlink', 'RESET_GPU', 'error',
          'NVLink taken down by software: reset the GPU; find who disabled the link if unexpected.'),
    156: ('Resource Retirement Event', 'memory', 'RESET_GPU', 'error',
          'Resource retirement event: reset the GPU to apply the retirement.'),
    157: ('Resource Retirement Failure', 'memory', 'IGNORE', 'error',
          'Resource retirement failed (no spare resources left): contact support.'),
    158: ('GPU Fatal Timeout', 'hardware', 'RESET_GPU', 'error',
          _ACT_RESET),
    159: ('CHI Non-Data Error', 'hardware', 'CHECK_UVM', 'warning',
          'C2C non-data error: reset the GPU if UVM or vGPU is in use; otherwise no action.'),
    160: ('Channel Retirement Event', 'driver', 'IGNORE', 'warning',
          'Channel retirement: informational; investigate the software if it repeats.'),
    161: ('Channel Retirement Failure', 'driver', 'IGNORE', 'warning',
          'Channel retirement failed: investigate the software.'),
    162: ('Power smoothing circuitry re-engaged', 'hardware', None, 'warning',
          'Power smoothing re-engaged: no action.'),
    163: ('Power smoothing circuitry disengaged', 'hardware', None, 'warning',
          'Power smoothing disengaged: no reset needed; watch power swings.'),
    164: ('Power smoothing circuitry low lifetime', 'hardware', None, 'warning',
          'Power smoothing circuitry near end of life: plan GPU replacement if power swings matter.'),
    165: ('Power smoothing circuitry lifetime exhausted', 'hardware', None, 'warning',
          'Power smoothing circuitry exhausted: replace the GPU if power swings are not acceptable.'),
    166: ('NVLink traffic before encryption was configured', 'nvlink', None, 'warning',
          'Confidential-computing NVLink traffic before encryption was set up: check the CC configuration.'),
    167: ('PCIE_FATAL_TIMEOUT', 'hardware', None, 'error',
          'PCIe fatal timeout: drain the node and reset the GPU; check PCIe seating and risers if it recurs.'),
    168: ('Errors found in write-protected memory region', 'memory', None, 'error',
          'Errors in the write-protected memory region (ECC disabled?): enable ECC and reset the GPU.'),
    169: ('Internal micro-controller halt', 'hardware', None, 'error',
          'SEC2 micro-controller halted: drain the node and reset the GPU.'),
    170: ('Interrupt seen in CC mode', 'nvlink', None, 'warning',
          'Confidential-computing NVLink interrupt: check the CC configuration.'),
    171: ('Uncorrectable DRAM error', 'memory', None, 'error',
          'Uncorrectable DRAM error (details of Xid 48): drain the node and reset the GPU.'),
    172: ('Uncorrectable SRAM error', 'memory', None, 'error',
          'Uncorrectable SRAM error (details of Xid 48): drain the node and reset the GPU.'),
    # Pre-Ampere hardware faults ("Unused" on Ampere and newer; names from NVIDIA's older Xid table).
    56: ("Display Engine error", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    57: ("Error programming video memory interface", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    58: ("Unstable video memory interface detected", "memory", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    61: ("Internal micro-controller breakpoint/warning", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    65: ("Video processor exception", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    73: ("NVENC2 Error", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    81: ("VGA Subsystem Error", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    122: ("SPI PMU RPC read failure", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    123: ("SPI PMU RPC write failure", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    124: ("SPI PMU RPC erase failure", "hardware", "CONTACT_SUPPORT", "error", _ACT_LEGACY),
    # R580 and newer drivers (nverror.h); not in the catalogue yet.
    173: ("C2C fatal link failure", "hardware", None, "error",
          "Chip-to-chip (C2C) link failure: drain the node and reboot it; contact support if it recurs."),
}


XID_CATALOG = {
    code: {"name": name, "class": klass, "resolution": resolution, "severity": severity, "action": action}
    for code, (name, klass, resolution, severity, action) in _ENTRIES.items()
}

# GPU and driver failures that the driver logs without an Xid line (the event kinds of ``_kernlog``), the Xids that
# report the same failure when the driver does log one, and what to do.
DRIVER_EVENTS = {
    "gsp_timeout": {
        "name": "GSP firmware timeout (RPC timeout or heartbeat lost)", "xids": (119, 120), "severity": "error",
        "action": "The GPU's GSP firmware stopped answering: drain the node and reset the GPU (nvidia-smi -r) or "
                  "reboot; update the driver if it recurs."},
    "driver_init_failed": {
        "name": "the driver could not initialise the GPU (RmInitAdapter failed)", "xids": (143,), "severity": "error",
        "action": "The GPU is unusable until the driver initialises it: drain the node and reboot it (power cycle if "
                  "it persists); contact support if it recurs."},
    "gpu_lost": {
        "name": "GPU has fallen off the bus", "xids": (79,), "severity": "error", "action": _ACT_REBOOT},
}

_RECOVERY_RE = re.compile(
    r"GPU recovery action changed from 0x[0-9a-fA-F]+ \((?P<old>[^)]*)\) to 0x(?P<new_code>[0-9a-fA-F]+) "
    r"\((?P<new>[^)]*)\)")


def xid_info(code):
    """The ``XID_CATALOG`` entry for ``code`` (an int); unknown codes get class ``unknown`` and severity ``warning``."""
    entry = XID_CATALOG.get(code)
    if entry is not None:
        return entry
    return {"name": "Unknown Xid %s" % code, "class": "unknown", "resolution": None, "severity": "warning",
            "action": _ACT_UNKNOWN}


def recovery_action(message):
    """``(action name, severity)`` that an Xid 154 message names (``"GPU Reset Required"``, ``"error"``):
    ``info`` for "None" (nothing left to do), ``error`` for any other action; ``(None, None)`` when the message is not
    in the driver's format."""
    match = _RECOVERY_RE.search(message or "")
    if not match:
        return None, None
    name = match.group("new").strip()
    if name.lower() == "none" or int(match.group("new_code"), 16) == 0:
        return name, "info"
    return name, "error"
