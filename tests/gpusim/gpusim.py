#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpusim: a GPU node simulator for the lab and the tests (never for a real node).

It stands in for ``nvidia-smi``, ``ibstat``, ``ibstatus``, ``dcgmi``, ``all_reduce_perf``, ``nv-fabricmanager
--version`` (and ``systemctl is-active nvidia-fabricmanager``) inside a container without GPUs or InfiniBand, and
prints what the real tools print for a hardware profile with injected faults. Run it as ``gpusim.py <tool> ARGS``
or through a symlink named after the tool; ``gpusim.py setup``, ``gpusim.py bundle DIR``, ``gpusim.py faults`` and
``gpusim.py service UNIT`` (the long-running process of a simulated systemd unit) are its own commands.

Simulated services: where the profile says ``"services": "systemd"`` (install.yml writes that on NVSwitch nodes
with systemd), the fabric manager, nvidia-persistenced and the DCGM host engine are real systemd units running
``gpusim service``; what they do (running or not, when the fabric manager last started) is read back from
``$GPUSIM_ROOT/run`` and ``$GPUSIM_ROOT/state`` by every tool call, and every start and stop is logged in
``$GPUSIM_LOG_DIR/services.log``.

Design: a profile (JSON: a table of GPU attributes plus the node's layout) builds a node state (one dict per GPU,
one per InfiniBand device, a list of kernel log events); each fault changes that state; one renderer per output
format reads the state. So every output shows a fault the same way. Nothing here is random: the same profile and
faults give byte-identical output for a given time (``GPUSIM_NOW`` or ``bundle --captured-at``).

Standard library only, Python 3.8 and newer. ``main(argv, env=None)`` returns ``(rc, stdout, stderr)``.
"""

# Every tool call is a new process (a health check runs several, slurmd runs the check every few seconds in the
# tests), so what only a few commands need is imported where it is used: uuid (platform), socket, signal, shutil
# and xml.sax.saxutils (urllib, http.client, email) cost more to import than most tool calls take to answer.
import copy
import datetime
import hashlib
import json
import os
import re
import stat
import sys

PROFILE_ENV = "GPUSIM_PROFILE"
DEFAULT_PROFILE_PATH = "/etc/gpusim/profile.json"
DEFAULT_ROOT = "/opt/gpusim"
DEFAULT_DEV_DIR = "/dev"
DEFAULT_LOG_DIR = "/var/log/gpusim"
TOOLS = ("nvidia-smi", "ibstat", "ibstatus", "dcgmi", "all_reduce_perf", "nv-fabricmanager", "systemctl")
NA = "N/A"
DEPRECATED = "Requested functionality has been deprecated"
# The namespace of the GPUs' UUIDs (uuid5 below), as bytes.
UUID_NAMESPACE = bytes.fromhex("6b1d3c1e8f0a4f7e9a516a0d5b7c2e11")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
NV_MAJOR = 195
NVIDIACTL_MINOR = 255
# The InfiniBand verbs devices: /dev/infiniband/uverbsN, char 231, minor 192 + N (as the kernel's ib_uverbs makes them).
UVERBS_MAJOR = 231
UVERBS_MINOR_BASE = 192
FM_UNIT = "nvidia-fabricmanager"
PERSISTENCED_UNIT = "nvidia-persistenced"
DCGM_UNIT = "nvidia-dcgm"
# The simulated units (systemd, "services": "systemd" in the profile); each holds the GPUs while it runs, as the
# real daemons do (a GPU reset is refused until they are stopped).
SERVICE_UNITS = (FM_UNIT, PERSISTENCED_UNIT, DCGM_UNIT)
SERVICES_LOG = "services.log"
# CUDA version that each driver branch reports ("CUDA Version" in nvidia-smi).
CUDA_FOR_BRANCH = {470: "11.4", 525: "12.0", 535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6",
                   565: "12.7", 570: "12.8", 575: "12.9", 580: "13.0", 590: "13.1", 595: "13.2"}


class SimError(Exception):
    """A tool invocation that fails the way the real tool does: text on stdout/stderr and an exit code."""

    def __init__(self, rc, stdout="", stderr=""):
        super(SimError, self).__init__(stderr or stdout)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


# ----------------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------------

def version_tuple(text):
    """(550, 127, 5) from "550.127.05"; non-numeric parts end the tuple."""
    parts = []
    for piece in str(text).split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


DPKG_STATUS = "/var/lib/dpkg/status"


def installed_driver(package, env):
    """The upstream version ("535.216.03" of "535.216.03-2~bpo12+1") of the installed Debian package that carries
    the user-space driver (the profile's "driver_package", such as libnvidia-ml1), or None: no such key, package not
    installed, or no dpkg status ($GPUSIM_DPKG_STATUS, default /var/lib/dpkg/status)."""
    if not package:
        return None
    try:
        with open(env.get("GPUSIM_DPKG_STATUS", DPKG_STATUS), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    for stanza in re.split(r"\n\n+", text):
        if not stanza.lstrip("\n").startswith("Package: %s\n" % package):
            continue
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.M))
        match = re.match(r"(?:[0-9]+:)?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", fields.get("Version", ""))
        if fields.get("Status", "").endswith(" installed") and match:
            return match.group(1)
    return None


def uuid5(namespace, name):
    """str(uuid.uuid5(UUID(bytes=namespace), name)), without importing uuid (RFC 4122: SHA-1, version 5)."""
    raw = bytearray(hashlib.sha1(namespace + name.encode("utf-8")).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return "%s-%s-%s-%s-%s" % (text[:8], text[8:12], text[12:16], text[16:20], text[20:])


def xml_escape(text):
    """xml.sax.saxutils.escape(text): &, < and > as entities."""
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def digest(*parts):
    """A stable integer from the parts (same input, same number, on every machine and Python version)."""
    text = "\x1f".join(str(p) for p in parts)
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], 16)


def spread(seed, low, high):
    """A stable integer in [low, high] chosen by the seed."""
    return low + digest(*seed) % (high - low + 1)


def deep_merge(base, override):
    """A copy of base with override merged in: mappings merge key by key, everything else is replaced."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def yes_no(flag):
    """Yes/No as nvidia-smi writes booleans."""
    return "Yes" if flag else "No"


def enabled(flag):
    """Enabled/Disabled, or N/A for an unsupported setting (None)."""
    if flag is None:
        return NA
    return "Enabled" if flag else "Disabled"


def active(flag):
    """Active/Not Active for clock event reasons."""
    return "Active" if flag else "Not Active"


def with_unit(value, unit, fmt="%s"):
    """'81559 MiB' from (81559, 'MiB'); N/A stays N/A."""
    if value is None:
        return NA
    return (fmt % value) + " " + unit


def short_bus(bus_id):
    """'0000:18:00' (kernel log form, lower case) from '00000000:18:00.0'."""
    domain, bus, rest = bus_id.split(":")
    return "%s:%s:%s" % (domain[-4:], bus, rest.split(".")[0])


def ctime(moment):
    """'Fri Jun 21 02:03:08 2024' as nvidia-smi prints a time (English names whatever the locale)."""
    return "%s %s %2d %s %d" % (DAYS[moment.weekday()], MONTHS[moment.month - 1], moment.day,
                                moment.strftime("%H:%M:%S"), moment.year)


def iso_utc(moment):
    """'2026-11-30T07:00:00Z'."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    """A timezone-aware UTC datetime from ISO 8601 text ('2026-11-30T07:00:00Z', '...+01:00', '2026-11-30')."""
    text = text.strip().replace("Z", "+00:00")
    if re.search(r"[+-]\d{4}$", text):
        text = text[:-2] + ":" + text[-2:]
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise SimError(2, stderr="gpusim: not an ISO 8601 time: %r\n" % text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).replace(microsecond=0)


def now_from(env):
    """The simulated 'now': $GPUSIM_NOW when set (tests, bundles), else the clock."""
    if env.get("GPUSIM_NOW"):
        return parse_time(env["GPUSIM_NOW"])
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


# ----------------------------------------------------------------------------------------------------------------
# Profiles
# ----------------------------------------------------------------------------------------------------------------

def profile_dirs(env):
    """Where profiles are looked up by name: $GPUSIM_PROFILE_DIR, then next to this script, then one level up."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if env.get("GPUSIM_PROFILE_DIR"):
        dirs.append(env["GPUSIM_PROFILE_DIR"])
    dirs.extend([os.path.join(here, "profiles"), os.path.join(os.path.dirname(here), "profiles")])
    return dirs


def find_profile(name, env):
    """The path of a profile given by name ('h100-sxm-8') or path."""
    if os.path.sep in name or name.endswith(".json"):
        return name
    for directory in profile_dirs(env):
        path = os.path.join(directory, name + ".json")
        if os.path.exists(path):
            return path
    raise SimError(2, stderr="gpusim: no profile named %r (looked in %s)\n" % (name, ", ".join(profile_dirs(env))))


def read_profile(path, env, seen=()):
    """A profile from a JSON file; a "base" key names a profile whose fields this one overrides."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError) as error:
        raise SimError(2, stderr="gpusim: cannot read profile %s: %s\n" % (path, error))
    except ValueError as error:
        raise SimError(2, stderr="gpusim: profile %s is not JSON: %s\n" % (path, error))
    if not isinstance(data, dict):
        raise SimError(2, stderr="gpusim: profile %s must be a JSON object\n" % path)
    base = data.pop("base", None)
    if base:
        if base in seen:
            raise SimError(2, stderr="gpusim: profile %s: base %r loops\n" % (path, base))
        data = deep_merge(read_profile(find_profile(base, env), env, seen + (base,)), data)
    return data


def load_profile(env, path=None):
    """The profile for this run: the given path or name, $GPUSIM_PROFILE, or /etc/gpusim/profile.json."""
    where = path or env.get(PROFILE_ENV) or DEFAULT_PROFILE_PATH
    return read_profile(find_profile(where, env), env)


def gpu_bus_ids(profile):
    """The GPUs' PCI bus ids, as many as gpu_count (extra ones are made up after the listed ones)."""
    count = int(profile.get("gpu_count", len(profile.get("bus_ids", []))))
    bus_ids = [b.upper().replace("0X", "0x") for b in profile.get("bus_ids", [])][:count]
    next_bus = 0xE0
    while len(bus_ids) < count:
        candidate = "00000000:%02X:00.0" % next_bus
        next_bus += 1
        if candidate not in bus_ids:
            bus_ids.append(candidate)
    return sorted(bus_ids)


# ----------------------------------------------------------------------------------------------------------------
# Node state: what the faults change and the renderers read
# ----------------------------------------------------------------------------------------------------------------

REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
           "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting")
# NVML's bit for each clock event reason (clocks_event_reasons.active in --query-gpu is the OR of these).
REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
               "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
               "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
ECC_KEYS = ("sram_corr", "sram_unc_parity", "sram_unc_secded", "dram_corr", "dram_unc")


def new_ecc_counts():
    """Zeroed ECC counters of one kind (volatile or aggregate)."""
    return dict((key, 0) for key in ECC_KEYS)


def new_gpu(profile, hostname, index, bus_id):
    """The healthy state of one GPU, from the profile's GPU table and its place on the board."""
    model = profile["gpu"]
    clocks = model["clocks"]
    seed = (hostname, index)
    module_ids = profile.get("module_ids") or []
    numa = (profile.get("gpu_numa") or [])
    switches = profile.get("gpu_pcie_switch") or []
    remap_banks = model.get("row_remap_banks")
    gpu = {
        "index": index, "minor": index, "slot": index, "bus_id": bus_id, "model": model, "name": model["name"],
        "uuid": "GPU-%s" % uuid5(UUID_NAMESPACE, "%s/%d" % (hostname, index)),
        "serial": "%s%09d" % (model.get("serial_prefix", "1652"), digest("serial", *seed) % 10 ** 9),
        "pdi": "0x%016x" % digest("pdi", *seed),
        "module_id": module_ids[index] if index < len(module_ids) else index + 1,
        "numa": numa[index] if index < len(numa) else 0,
        "pcie_switch": switches[index] if index < len(switches) else index,
        "lost": False, "persistence": True, "perf": "P0",
        "mig": [False, False] if model.get("mig_capable") else [None, None],
        "ecc_mode": [True, True],
        "ecc": {"volatile": new_ecc_counts(), "aggregate": new_ecc_counts()},
        "retired": None if remap_banks else {"sbe": 0, "dbe": 0, "pending": False},
        "remap": {"corr": 0, "unc": 0, "pending": False, "failure": False,
                  "hist": {"max": remap_banks, "high": 0, "partial": 0, "low": 0, "none": 0}} if remap_banks else None,
        "pcie": {"gen": model["pcie_gen_max"], "gen_max": model["pcie_gen_max"], "width": model["pcie_width_max"],
                 "width_max": model["pcie_width_max"], "replays": 0},
        "temp": spread(("temp",) + seed, model["temp_idle_c"], model["temp_idle_c"] + 5),
        "memory_temp": None if model.get("memory_temp_idle_c") is None else spread(
            ("mtemp",) + seed, model["memory_temp_idle_c"], model["memory_temp_idle_c"] + 4),
        "power": {"draw": model["power_idle_w"] + spread(("power",) + seed, 0, 600) / 100.0,
                  "limit": float(model["power_default_w"]), "requested": float(model["power_default_w"])},
        "clocks": {"graphics": clocks["graphics_idle"], "sm": clocks["graphics_idle"],
                   "memory": clocks["memory_max"], "video": clocks["video_idle"]},
        "reasons": dict((name, name == "gpu_idle") for name in REASONS),
        "util": {"gpu": 0, "memory": 0},
        "memory_used": 1,
        "fabric": None,
        "nvlinks": [{"active": True, "replay": 0, "recovery": 0, "crc": 0}
                    for _link in range(model.get("nvlink_links") or 0)],
    }
    if model.get("fabric_state") and profile.get("nvswitch"):
        gpu["fabric"] = {"state": "Completed", "status": "Success", "clique": "0",
                         "cluster": "00000000-0000-0000-0000-000000000000"}
    return gpu


IB_ERROR_COUNTERS = ("VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
                     "local_link_integrity_errors", "port_rcv_constraint_errors", "port_rcv_errors",
                     "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
                     "port_xmit_constraint_errors", "port_xmit_discards", "symbol_error")
IB_TRAFFIC_COUNTERS = ("multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_data", "port_rcv_packets",
                       "port_xmit_data", "port_xmit_packets", "port_xmit_wait", "unicast_rcv_packets",
                       "unicast_xmit_packets")
IB_HW_COUNTERS = ("duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "out_of_buffer",
                  "out_of_sequence", "packet_seq_err", "req_cqe_error", "req_cqe_flush_error",
                  "req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error",
                  "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err", "roce_adp_retrans",
                  "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps", "roce_slow_restart_trans",
                  "rx_atomic_requests", "rx_dct_connect", "rx_icrc_encapsulated", "rx_read_requests",
                  "rx_write_requests")


def node_guid(hostname, name):
    """A ConnectX-like node GUID (Mellanox OUI a0:88:c2) that stays the same for a host and device name."""
    return 0xa088c20300000000 | (digest("guid", hostname, name) & 0xFFFFFF)


def new_ib_device(spec, hostname):
    """The healthy state of one InfiniBand/RoCE device from the profile's table."""
    guid = node_guid(hostname, spec["name"])
    ports = []
    for number in range(1, int(spec.get("ports", 1)) + 1):
        ethernet = spec.get("link_layer", "InfiniBand") == "Ethernet"
        ports.append({
            "port": number, "state": "Active", "phys_state": "LinkUp",
            "rate": spec["rate"], "rate_desc": spec["rate_desc"],
            "link_layer": spec.get("link_layer", "InfiniBand"),
            "lid": 0 if ethernet else int(spec.get("lid", 1)) + number - 1,
            "sm_lid": 0 if ethernet else int(spec.get("sm_lid", 1)),
            "cap_mask": "0x00010000" if ethernet else spec.get("cap_mask", "0xa751e848"),
            "counters": dict((name, 0) for name in IB_ERROR_COUNTERS),
        })
    return {"name": spec["name"], "hca_type": spec["hca_type"], "fw_ver": spec["fw_ver"],
            "board_id": spec.get("board_id", "MT_0000000000"), "node_guid": guid, "netdev": spec.get("netdev"),
            "numa": spec.get("numa", 0), "pcie_switch": spec.get("pcie_switch", -1), "ports": ports}


class Node(object):
    """Everything the renderers read: the GPUs, the InfiniBand devices, the kernel log, node-wide conditions."""

    def __init__(self, profile, env):
        self.profile = profile
        self.env = env
        self.now = now_from(env)
        self.hostname = str(profile.get("hostname") or env.get("GPUSIM_HOSTNAME") or os.uname()[1]).split(
            ".", maxsplit=1)[0]
        self.driver = str(profile["driver_version"])
        self.cuda = profile.get("cuda_version")
        packaged = installed_driver(profile.get("driver_package"), env)
        if packaged and packaged != self.driver:
            # The driver the node's packages installed, as NVML reports it (the CUDA version follows the branch).
            self.driver, self.cuda = packaged, None
        self.nvml_error = None          # ("mismatch", library version) or ("not_loaded",)
        self.gpus = [new_gpu(profile, self.hostname, i, bus) for i, bus in enumerate(gpu_bus_ids(profile))]
        self.attached = len(self.gpus)  # what NVML counts (a GPU that fell off the bus still counts)
        self.ib = [new_ib_device(spec, self.hostname) for spec in profile.get("infiniband", [])]
        self.nvswitches = list((profile.get("nvswitch") or {}).get("bus_ids", []))
        self.fabric_manager = "active" if profile.get("nvswitch") and profile.get("fabric_manager", True) else None
        self.events = []                # kernel log lines: {"group", "source", "message", "gpu"}
        self.event_groups = 0           # lines of one group share a time stamp
        self.dcgm_failures = []         # (test name, gpu index, message) injected by dcgm_fail
        self.nccl_factor = 1.0
        self.faults = []
        self.missing = []               # GPUs removed by gpu_missing
        self.fm_version = None          # nv-fabricmanager's version when it differs from the driver's (a fault)
        self.gpu_users = {}             # GPU index (None: every GPU) -> process name, from gpu_in_use
        self.resets = []                # GPUs reset by this nvidia-smi -r (for the services log)
        self.managed = profile.get("services") == "systemd"
        self.root, _dev, self.log_dir = setup_paths(env)
        # Simulated services: the units running now, and the recoverable faults the fabric manager cleared when
        # it last started (keys of fault_key).
        self.running = set(u for u in SERVICE_UNITS if service_pid(self.root, u)) if self.managed else set()
        self.healed = set(read_json(os.path.join(self.root, "state", "fabricmanager-healed.json"), [])
                          if self.managed else [])

    @property
    def fabricmanager_version(self):
        """What nv-fabricmanager --version says: the driver's version unless a fault installed another."""
        return self.fm_version or self.driver

    @property
    def driver_v(self):
        """The driver version as a tuple, for the output layouts that changed between releases."""
        return version_tuple(self.driver)

    @property
    def cuda_version(self):
        """The CUDA version nvidia-smi reports: the profile's, or the one that goes with the driver branch."""
        return self.cuda or CUDA_FOR_BRANCH.get((self.driver_v or (0,))[0], "12.4")

    def visible_gpus(self):
        """GPUs that answer (not fallen off the bus), in NVML order."""
        return [g for g in self.gpus if not g["lost"]]

    def lost_gpus(self):
        """GPUs that fell off the bus: NVML counts them but cannot get a handle."""
        return [g for g in self.gpus if g["lost"]]

    def gpu(self, index):
        """The GPU with this NVML index (fault targets)."""
        for gpu in self.gpus:
            if gpu["index"] == index:
                return gpu
        raise SimError(2, stderr="gpusim: no GPU %s in this profile (%d GPUs)\n" % (index, len(self.gpus)))

    def gpu_in_slot(self, slot):
        """The GPU that was at this NVML index on the full board (before any gpu_missing renumbering)."""
        for gpu in self.gpus:
            if gpu["slot"] == slot:
                return gpu
        raise SimError(2, stderr="gpusim: no GPU %s in this profile (%d GPUs)\n" % (slot, len(self.gpus)))

    def ib_port(self, spec):
        """(device, port) for 'mlx5_2/1' or 'mlx5_2' (port 1)."""
        name, _sep, number = str(spec).partition("/")
        for device in self.ib:
            if device["name"] == name:
                for port in device["ports"]:
                    if port["port"] == int(number or 1):
                        return device, port
        raise SimError(2, stderr="gpusim: no InfiniBand port %s in this profile\n" % spec)

    def add_event(self, source, message, gpu=None, join=False):
        """Queue a kernel log line; join=True gives it the time of the line before (one printk, several lines).

        The first Xid of a GPU is preceded by the driver's identity lines for that GPU, as NVRM prints them.
        """
        if not join:
            self.event_groups += 1
            if gpu is not None and not any(e["gpu"] == gpu["index"] for e in self.events):
                bus = short_bus(gpu["bus_id"]).lower()
                for line in ("NVRM: GPU at PCI:%s: %s" % (bus, gpu["uuid"]),
                             "NVRM: GPU Board Serial Number: %s" % gpu["serial"]):
                    self.events.append({"group": self.event_groups, "source": "kernel", "message": line,
                                        "gpu": gpu["index"]})
        self.events.append({"group": self.event_groups, "source": source, "message": message,
                            "gpu": None if gpu is None else gpu["index"]})


def build_node(profile, env, extra_faults=()):
    """The node for a profile with its faults (profile "faults" plus extra ones) applied."""
    node = Node(profile, env)
    faults = [normalise_fault(f) for f in list(profile.get("faults") or []) + list(extra_faults)]
    # gpu_missing renumbers the GPUs, so it goes last: every fault names GPUs by their index on the full board.
    for fault in sorted(faults, key=lambda f: f["name"] == "gpu_missing"):
        apply_fault(node, fault)
    settle_fabric(node)
    return node


def settle_fabric(node):
    """The fabric manager's state after the faults: a managed node's is its unit's (running or not); elsewhere it
    started at boot unless its version differs from the driver's. Not running: the NVSwitch GPUs' fabric state
    stays In Progress, as on real HGX systems."""
    if node.fabric_manager is None or any(f["name"] == "fabricmanager_down" for f in node.faults):
        return
    if node.managed:
        node.fabric_manager = "active" if FM_UNIT in node.running else (
            "failed" if os.path.exists(os.path.join(node.root, "run", FM_UNIT + ".failed")) else "inactive")
    elif node.fabricmanager_version != node.driver:
        node.fabric_manager = "failed"
    if node.fabric_manager != "active":
        for gpu in node.gpus:
            if gpu["fabric"]:
                gpu["fabric"] = {"state": "In Progress", "status": NA, "clique": NA, "cluster": NA}


def fault_key(fault):
    """A fault's identity for the fabric manager's healed list (name, GPU, value, links)."""
    return json.dumps([fault.get("name"), fault.get("gpu"), str(fault.get("value")), fault.get("links")])


def read_json(path, default):
    """A JSON file's content, or default when it is missing or broken."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return default


def service_pid(root, unit):
    """The pid of a running simulated unit (its pid file names a live process), else None."""
    try:
        with open(os.path.join(root, "run", unit + ".pid")) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
    except (IOError, OSError, ValueError):
        return None
    return pid


# ----------------------------------------------------------------------------------------------------------------
# Faults: each one changes the node state; the renderers then show it everywhere it shows on real hardware
# ----------------------------------------------------------------------------------------------------------------

XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
    31: "Ch 00000007, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_6 faulted @ 0x7f5a_e7504000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000009",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        "0x12bac1c3e0 partition 2, subpartition 1.",
    61: "Internal micro-controller breakpoint/warning (GPU-internal)",
    62: "Internal micro-controller halt",
    63: "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000012bac1c3e0): no spare rows left in the bank, reset gpu.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
         "(0x20800a4c 0x4).",
    120: "GSP task exception",
}
IB_RATE_DESC = {10: "4X SDR", 20: "4X DDR", 25: "1X EDR", 40: "4X QDR", 50: "2X HDR", 56: "4X FDR", 100: "4X EDR",
                200: "4X HDR", 400: "4X NDR", 800: "4X XDR"}


def normalise_fault(fault):
    """A fault as a dict {"name": ..., "gpu": int, "port": str, "value": ...} from a dict or a CLI spec string."""
    if isinstance(fault, dict):
        result = dict(fault)
    else:
        name, _sep, rest = str(fault).partition(":")
        result = {"name": name.strip()}
        for item in filter(None, rest.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                raise SimError(2, stderr="gpusim: fault option %r is not key=value\n" % item)
            result[key.strip()] = value.strip()
    if result.get("name") not in FAULTS:
        raise SimError(2, stderr="gpusim: unknown fault %r (gpusim faults lists them)\n" % result.get("name"))
    for key in ("gpu", "link", "links"):
        if key in result and result[key] is not None:
            try:
                result[key] = int(result[key])
            except (TypeError, ValueError):
                raise SimError(2, stderr="gpusim: fault %s: %s must be an integer\n" % (result["name"], key))
    return result


def apply_fault(node, fault):
    """Change the node the way the named fault does."""
    FAULTS[fault["name"]][1](node, fault)
    node.faults.append(fault)


def _number(fault, default, kind=int):
    value = fault.get("value")
    if value in (None, ""):
        return default
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise SimError(2, stderr="gpusim: fault %s: value %r is not a number\n" % (fault["name"], value))


def _gpu(node, fault):
    return node.gpu(fault.get("gpu", 0))


def xid_line(gpu, code, text, pid=None, name=None):
    """The kernel's Xid line for a GPU ('NVRM: Xid (PCI:0000:18:00): 79, pid=..., name=..., text')."""
    who = "pid='<unknown>', name=<unknown>" if pid is None else "pid=%d, name=%s" % (pid, name)
    return "NVRM: Xid (PCI:%s): %d, %s, %s" % (short_bus(gpu["bus_id"]).lower(), code, who, text)


def add_xid(node, gpu, code, pid=None, name=None):
    """Queue an Xid for the kernel log (multi-line Xids become one record per line, as the journal keeps them)."""
    text = XID_TEXT.get(code, "Xid %d reported by the GPU" % code)
    first, *rest = re.split(r"(?<=\. )(?=MMU Fault|Fault is)", text)
    node.add_event("kernel", xid_line(gpu, code, first, pid, name), gpu)
    for line in rest:
        node.add_event("kernel", line, gpu, join=True)


def _throttle(gpu, reasons, graphics_fraction=0.6):
    gpu["reasons"]["gpu_idle"] = False
    for reason in reasons:
        gpu["reasons"][reason] = True
    clocks = gpu["model"]["clocks"]
    slowed = int(clocks["graphics_max"] * graphics_fraction) // 15 * 15
    gpu["clocks"].update({"graphics": slowed, "sm": slowed, "video": clocks["video_max"]})


def fault_gpu_missing(node, fault):
    """The GPU is gone: not on the bus, not counted by NVML, no /dev node; the others are numbered again."""
    gpu = node.gpu_in_slot(fault.get("gpu", 0))
    node.gpus.remove(gpu)
    node.attached -= 1
    node.missing.append(gpu)
    for index, other in enumerate(node.gpus):
        other["index"] = other["minor"] = index


def fault_fallen_off_bus(node, fault):
    """Xid 79: NVML still counts the GPU but cannot reach it; every nvidia-smi call reports it."""
    gpu = _gpu(node, fault)
    gpu["lost"] = True
    add_xid(node, gpu, 79)
    bus = short_bus(gpu["bus_id"]).lower()
    node.add_event("kernel", "NVRM: GPU %s.0: GPU has fallen off the bus." % bus, gpu, join=True)
    node.add_event("kernel", "NVRM: GPU %s.0: GPU serial number is %s." % (bus, gpu["serial"]), gpu, join=True)


def fault_wrong_model(node, fault):
    """A GPU (or all of them) of another model than the profile says."""
    name = fault.get("value") or node.profile["gpu"].get("wrong_model_name", "NVIDIA H100 PCIe")
    targets = [_gpu(node, fault)] if "gpu" in fault else node.gpus
    for gpu in targets:
        gpu["name"] = name


def fault_driver_version(node, fault):
    """Another driver than the cluster's (the CUDA version and output layout follow the driver)."""
    node.driver = str(fault.get("value") or "535.183.01")
    node.cuda = None


def fault_nvml_mismatch(node, fault):
    """The user-space NVML library is newer than the loaded kernel module: nvidia-smi fails with rc 18."""
    major = node.driver_v[:1] or (550,)
    library = str(fault.get("value") or "%d.144.03" % major[0])
    node.nvml_error = ("mismatch", library)
    for number, line in enumerate(("NVRM: API mismatch: the client has the version %s, but" % library,
                                   "NVRM: this kernel module has the version %s.  Please" % node.driver,
                                   "NVRM: make sure that this kernel module and all NVIDIA driver",
                                   "NVRM: components have the same version.")):
        node.add_event("kernel", line, join=number > 0)


def fault_driver_not_loaded(node, _fault):
    """No NVIDIA kernel module: nvidia-smi cannot talk to the driver (rc 9) and there are no /dev/nvidia* nodes."""
    node.nvml_error = ("not_loaded",)


def fault_persistence_off(node, fault):
    """Persistence mode disabled."""
    _gpu(node, fault)["persistence"] = False


def fault_ecc_disabled(node, fault):
    """ECC off now and after the next reboot."""
    _gpu(node, fault)["ecc_mode"] = [False, False]


def fault_ecc_pending_change(node, fault):
    """ECC on now, off after the next reboot (someone ran nvidia-smi -e 0)."""
    _gpu(node, fault)["ecc_mode"] = [True, False]


def fault_ecc_uncorrectable_volatile(node, fault):
    """Uncorrectable DRAM ECC errors since the driver loaded (Xid 48)."""
    gpu = _gpu(node, fault)
    count = _number(fault, 2)
    gpu["ecc"]["volatile"]["dram_unc"] += count
    gpu["ecc"]["aggregate"]["dram_unc"] += count
    add_xid(node, gpu, 48)


def fault_ecc_uncorrectable_aggregate(node, fault):
    """Uncorrectable DRAM ECC errors in the GPU's lifetime count, none since this boot."""
    _gpu(node, fault)["ecc"]["aggregate"]["dram_unc"] += _number(fault, 4)


def _retired(gpu):
    if gpu["retired"] is None:
        gpu["retired"] = {"sbe": 0, "dbe": 0, "pending": False}
    return gpu["retired"]


def fault_retired_pages_dbe(node, fault):
    """Pages retired for double-bit errors (the pre-Ampere mechanism; shown even on row-remapping GPUs)."""
    _retired(_gpu(node, fault))["dbe"] += _number(fault, 2)


def fault_retired_pages_pending(node, fault):
    """A page is waiting to be retired at the next driver reload."""
    retired = _retired(_gpu(node, fault))
    retired["dbe"] = max(retired["dbe"], 1)
    retired["pending"] = True


def _remap(gpu):
    if gpu["remap"] is None:
        raise SimError(2, stderr="gpusim: %s does not remap rows (no row_remap_banks in the profile)\n" % gpu["name"])
    return gpu["remap"]


def fault_row_remap_pending(node, fault):
    """An uncorrectable error marked a row for remapping; the GPU needs a reset (Xid 48, Xid 63)."""
    gpu = _gpu(node, fault)
    remap = _remap(gpu)
    remap["unc"] += _number(fault, 1)
    remap["pending"] = True
    remap["hist"]["max"] -= 1
    remap["hist"]["high"] += 1
    gpu["ecc"]["volatile"]["dram_unc"] += 1
    gpu["ecc"]["aggregate"]["dram_unc"] += 1
    add_xid(node, gpu, 48)
    add_xid(node, gpu, 63)


def fault_row_remap_failure(node, fault):
    """A bank has no spare rows left: remapping failed (Xid 64)."""
    gpu = _gpu(node, fault)
    remap = _remap(gpu)
    remap["failure"] = True
    remap["unc"] += 1
    remap["hist"]["max"] -= 1
    remap["hist"]["none"] += 1
    gpu["ecc"]["aggregate"]["dram_unc"] += 1
    add_xid(node, gpu, 64)


def _link(node, gpu, fault, default):
    number = fault.get("link", default)
    if not gpu["nvlinks"]:
        raise SimError(2, stderr="gpusim: %s has no NVLink\n" % gpu["name"])
    if not 0 <= number < len(gpu["nvlinks"]):
        raise SimError(2, stderr="gpusim: GPU %d has no NVLink %s\n" % (gpu["index"], number))
    return gpu["nvlinks"][number]


def fault_nvlink_inactive(node, fault):
    """One NVLink of one GPU is down (link = value or "link", default 0)."""
    gpu = _gpu(node, fault)
    fault.setdefault("link", _number(fault, 0))
    _link(node, gpu, fault, 0)["active"] = False


def fault_nvlink_degraded(node, fault):
    """NVLinks of one GPU inactive (links = how many, default 2); value recoverable or persistent.

    recoverable (the default): a start of the simulated fabric manager unit after the fault was set brings them
    back; persistent: they stay inactive after any restart. Without the units both stay inactive.
    """
    gpu = _gpu(node, fault)
    kind = str(fault.get("value") or "recoverable")
    if kind not in ("recoverable", "persistent"):
        raise SimError(2, stderr="gpusim: nvlink_degraded: value must be recoverable or persistent, not %r\n" % kind)
    count = int(fault.get("links") or 2)
    if not gpu["nvlinks"]:
        raise SimError(2, stderr="gpusim: %s has no NVLink\n" % gpu["name"])
    if kind == "recoverable" and fault_key(fault) in node.healed:
        return
    for link in gpu["nvlinks"][:max(1, count)]:
        link["active"] = False


def fault_nvlink_errors(node, fault):
    """High replay, recovery and CRC counters on one NVLink (value = replay count, default 12000)."""
    gpu = _gpu(node, fault)
    count = _number(fault, 12000)
    link = _link(node, gpu, fault, 0)
    link.update({"replay": count, "recovery": max(1, count // 400), "crc": count // 3})


def fault_pcie_downgraded(node, fault):
    """The PCIe link trained narrower (value = width, default half) and slower than the maximum."""
    pcie = _gpu(node, fault)["pcie"]
    pcie["width"] = _number(fault, max(1, pcie["width_max"] // 2))
    pcie["gen"] = max(1, pcie["gen_max"] - 1)


def fault_gpu_hot(node, fault):
    """GPU temperature past the slowdown threshold (value = degrees C); the thermal slowdowns are active."""
    gpu = _gpu(node, fault)
    model = gpu["model"]
    gpu["temp"] = _number(fault, min(model["slowdown_c"] + 3, model["shutdown_c"] - 1))
    _throttle(gpu, ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown"), 0.45)


def fault_memory_hot(node, fault):
    """HBM temperature past its maximum operating temperature (value = degrees C)."""
    gpu = _gpu(node, fault)
    gpu["memory_temp"] = _number(fault, (gpu["model"].get("memory_max_c") or 95) + 3)


def fault_power_over_limit(node, fault):
    """Power draw above the enforced limit (value = watts); the software power cap is active."""
    gpu = _gpu(node, fault)
    gpu["power"]["draw"] = _number(fault, gpu["power"]["limit"] + 28.37, float)
    _throttle(gpu, ("sw_power_cap",), 0.8)


def fault_power_capped(node, fault):
    """Someone set a power limit below the default (value = watts, default 70 %)."""
    gpu = _gpu(node, fault)
    limit = _number(fault, round(gpu["model"]["power_default_w"] * 0.7), float)
    gpu["power"]["limit"] = gpu["power"]["requested"] = limit


def fault_clock_hw_slowdown(node, fault):
    """Hardware slowdown active (e.g. an external power brake or a failing sensor)."""
    _throttle(_gpu(node, fault), ("hw_slowdown",), 0.5)


def fault_clock_thermal(node, fault):
    """Hardware and software thermal slowdown active, the GPU at its slowdown temperature."""
    gpu = _gpu(node, fault)
    gpu["temp"] = gpu["model"]["slowdown_c"]
    _throttle(gpu, ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown"), 0.55)


def fault_clock_power_brake(node, fault):
    """The board's power brake slows the GPU (hardware slowdown + power brake)."""
    _throttle(_gpu(node, fault), ("hw_slowdown", "hw_power_brake_slowdown"), 0.3)


def fault_xid_app(node, fault):
    """An application error: Xid 13 (graphics exception) and Xid 31 (MMU fault)."""
    gpu = _gpu(node, fault)
    add_xid(node, gpu, 13)
    add_xid(node, gpu, 31, pid=2079991, name="python3")


def fault_xid_error(node, fault):
    """An Xid of the given code (value, default 48) in the kernel log."""
    add_xid(node, _gpu(node, fault), _number(fault, 48))


def fault_sxid_fatal(node, fault):
    """A fatal NVSwitch error: SXid 20034 (LTSSM fault) on a switch (value = switch number, default 0)."""
    if not node.nvswitches:
        raise SimError(2, stderr="gpusim: sxid_fatal needs a profile with NVSwitches\n")
    number = _number(fault, 0) % len(node.nvswitches)
    device = "nvidia-nvswitch%d" % number
    bus = node.nvswitches[number][-12:]
    link = fault.get("link", 48)
    node.add_event("kernel", "%s: SXid (PCI:%s): 20034, Fatal, Link %d LTSSM Fault Up" % (device, bus, link))
    node.add_event("kernel", "%s: SXid (PCI:%s): 20034, Severity 1 Engine instance %d Sub-engine instance 00"
                   % (device, bus, link), join=True)
    node.add_event("kernel", "%s: SXid (PCI:%s): 20034, Data {0x10000000, 0x10000000, 0x00000000, 0x10000000, "
                             "0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}" % (device, bus), join=True)


def _port(node, fault):
    return node.ib_port(fault.get("port") or (node.ib[0]["name"] + "/1" if node.ib else "mlx5_0/1"))


def fault_ib_port_down(node, fault):
    """An InfiniBand port is down (value = physical state: Disabled (default) or Polling)."""
    device, port = _port(node, fault)
    ethernet = port["link_layer"] == "Ethernet"
    port.update({"state": "Down", "phys_state": str(fault.get("value") or "Disabled"), "lid": 0, "sm_lid": 0,
                 "rate": 40 if ethernet else 10, "rate_desc": IB_RATE_DESC[40 if ethernet else 10]})
    port["counters"]["link_downed"] += 1
    port["counters"]["symbol_error"] += 7
    if device.get("netdev"):
        node.add_event("systemd-networkd", "%s: lost carrier" % device["netdev"])


def fault_ib_rate_low(node, fault):
    """A port trained below its rate (value = Gb/s, default half: 200 on an NDR port)."""
    _device, port = _port(node, fault)
    rate = _number(fault, port["rate"] // 2)
    port.update({"rate": rate, "rate_desc": IB_RATE_DESC.get(rate, "4X")})


def fault_ib_port_missing(node, fault):
    """A whole HCA is gone (port = its name): not in ibstat, ibstatus, /sys/class/infiniband or topo -m."""
    device, _port_state = _port(node, fault)
    node.ib.remove(device)


def fault_ib_link_flap(node, fault):
    """A port lost and regained its link several times (value = flaps, default 3); link_downed counts them."""
    device, port = _port(node, fault)
    flaps = _number(fault, 3)
    port["counters"]["link_downed"] += flaps
    port["counters"]["link_error_recovery"] += flaps
    netdev = device.get("netdev") or device["name"]
    for _flap in range(flaps):
        node.add_event("systemd-networkd", "%s: lost carrier" % netdev)
        node.add_event("systemd-networkd", "%s: Gained carrier" % netdev)


def fault_fabricmanager_down(node, _fault):
    """nvidia-fabricmanager is not running: GPUs on an NVSwitch fabric stay in fabric state In Progress."""
    node.fabric_manager = "inactive"
    for gpu in node.gpus:
        if gpu["fabric"]:
            gpu["fabric"] = {"state": "In Progress", "status": NA, "clique": NA, "cluster": NA}


def fault_fabricmanager_version(node, fault):
    """nv-fabricmanager is another version (value) than the driver: it never starts, the fabric stays In Progress.

    The default value is 535.183.01, or 550.127.05 on a 535 driver. A running unit keeps running until restarted.
    """
    default = "535.183.01" if not node.driver.startswith("535.") else "550.127.05"
    node.fm_version = str(fault.get("value") or default)


def fault_gpu_in_use(node, fault):
    """A process (value, default python3) holds one GPU (gpu) or every GPU: nvidia-smi -r refuses to reset it."""
    index = _gpu(node, fault)["index"] if fault.get("gpu") is not None else None
    node.gpu_users[index] = str(fault.get("value") or "python3")


def fault_gpu_busy(node, fault):
    """A job's kernels keep the GPU busy: utilisation at value % (default 95) on one GPU (gpu) or every GPU."""
    busy = _number(fault, 95)
    if not 0 <= busy <= 100:
        raise SimError(2, stderr="gpusim: fault gpu_busy: value %r is not a percentage\n" % busy)
    for gpu in [_gpu(node, fault)] if fault.get("gpu") is not None else node.gpus:
        gpu["util"] = {"gpu": busy, "memory": busy // 2}
        gpu["reasons"]["gpu_idle"] = busy == 0


def fault_dcgm_fail(node, fault):
    """A DCGM diagnostic test fails on one GPU (value = test, default Memory)."""
    gpu = _gpu(node, fault)
    test = str(fault.get("value") or "Memory")
    node.dcgm_failures.append((test, gpu["index"], "GPU %d: %s test failed: injected by gpusim (dcgm_fail)"
                               % (gpu["index"], test)))


def fault_nccl_low_bw(node, fault):
    """all_reduce_perf bus bandwidth plateaus at a third of normal (value = the plateau in GB/s)."""
    normal = float((node.profile.get("nccl") or {}).get("busbw_gbps", 100.0))
    node.nccl_factor = _number(fault, normal / 3.0, float) / normal


FAULTS = dict((name, (function.__doc__.strip().split("\n")[0], function)) for name, function in (
    ("gpu_missing", fault_gpu_missing), ("wrong_model", fault_wrong_model),
    ("driver_version", fault_driver_version), ("nvml_mismatch", fault_nvml_mismatch),
    ("driver_not_loaded", fault_driver_not_loaded), ("fallen_off_bus", fault_fallen_off_bus),
    ("persistence_off", fault_persistence_off), ("ecc_disabled", fault_ecc_disabled),
    ("ecc_pending_change", fault_ecc_pending_change),
    ("ecc_uncorrectable_volatile", fault_ecc_uncorrectable_volatile),
    ("ecc_uncorrectable_aggregate", fault_ecc_uncorrectable_aggregate),
    ("retired_pages_dbe", fault_retired_pages_dbe), ("retired_pages_pending", fault_retired_pages_pending),
    ("row_remap_pending", fault_row_remap_pending), ("row_remap_failure", fault_row_remap_failure),
    ("nvlink_inactive", fault_nvlink_inactive), ("nvlink_errors", fault_nvlink_errors),
    ("nvlink_degraded", fault_nvlink_degraded), ("fabricmanager_version", fault_fabricmanager_version),
    ("gpu_in_use", fault_gpu_in_use), ("gpu_busy", fault_gpu_busy),
    ("pcie_downgraded", fault_pcie_downgraded), ("gpu_hot", fault_gpu_hot), ("memory_hot", fault_memory_hot),
    ("power_over_limit", fault_power_over_limit), ("power_capped", fault_power_capped),
    ("clock_hw_slowdown", fault_clock_hw_slowdown), ("clock_thermal", fault_clock_thermal),
    ("clock_power_brake", fault_clock_power_brake), ("xid_app", fault_xid_app), ("xid_error", fault_xid_error),
    ("sxid_fatal", fault_sxid_fatal), ("ib_port_down", fault_ib_port_down), ("ib_rate_low", fault_ib_rate_low),
    ("ib_port_missing", fault_ib_port_missing), ("ib_link_flap", fault_ib_link_flap),
    ("fabricmanager_down", fault_fabricmanager_down), ("dcgm_fail", fault_dcgm_fail),
    ("nccl_low_bw", fault_nccl_low_bw),
))


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi -q and -q -x: one table of fields for both, gated by driver version where the layout changed
# ----------------------------------------------------------------------------------------------------------------

V535_LATE = (535, 104)   # first seen between 535.54 (A100 capture) and 535.129: BBX flush, sparse operation mode
V550 = (550,)            # C2C mode, vGPU heterogeneous mode, PCI class codes, memory power, fabric clique/health
V560 = (560,)            # atomic caps outbound first, Capabilities/EGM
V570 = (570,)            # DTD v13: platform info, recovery action, average/instant power, deprecations, ...
V590 = (590,)            # "GPU Memory Power Readings " (sic, trailing space)
V595 = (595,)            # inactive remapped rows, fabric partition assigned
EMPTY = object()         # an XML element written open and closed on two lines (no processes, empty lists)


class Inner(str):
    """An XML element whose text sits on its own indented line (<mig_devices> None </mig_devices>)."""


class Field(object):
    """One line of -q text and one XML element: tag, label, value (or children), and when it is there."""

    __slots__ = ("tag", "label", "value", "children", "since", "until", "when", "indent")

    def __init__(self, tag, label, value=None, children=None, since=None, until=None, when=None, indent=0):
        self.tag, self.label, self.value, self.children = tag, label, value, children
        self.since, self.until, self.when, self.indent = since, until, when, indent

    def present(self, gpu, ctx):
        """Whether this driver prints the field for this GPU."""
        if self.since and ctx.v < self.since:
            return False
        if self.until and ctx.v >= self.until:
            return False
        return self.when is None or bool(self.when(gpu, ctx))

    def leaf_value(self, gpu, ctx):
        """The value of a leaf, or of a group printed as one value (Remapped Rows : N/A); None for a group."""
        return None if self.value is None else self.value(gpu, ctx)

    def child_fields(self, gpu, ctx):
        """The children (computed ones, like the supported clocks, come from a function)."""
        if callable(self.children):
            return self.children(gpu, ctx)
        return self.children or []


class Ctx(object):
    """What a field's value may look at besides the GPU: the node and the driver version."""

    def __init__(self, node):
        self.node = node
        self.v = node.driver_v


def const(value):
    """A field whose value never changes."""
    return lambda gpu, ctx: value


def hexpair(fmt, key):
    """(XML, text) values for PCI numbers: '18' in XML, '0x18' in text."""
    return lambda gpu, ctx: (fmt % key(gpu), "0x" + fmt % key(gpu))


def model(key, default=NA):
    """A value from the GPU's model table."""
    return lambda gpu, ctx: str(gpu["model"].get(key) if gpu["model"].get(key) is not None else default)


def since_570(old, new):
    """A value that v13 drivers print differently (mostly 'Requested functionality has been deprecated')."""
    return lambda gpu, ctx: new(gpu, ctx) if ctx.v >= V570 else old(gpu, ctx)


def _bus(gpu):
    return int(gpu["bus_id"].split(":")[1], 16)


def _ecc_on(gpu):
    return bool(gpu["ecc_mode"][0])


def ecc_count(kind, *keys):
    """An ECC counter (sum of keys) or N/A when ECC is off."""
    return lambda gpu, ctx: str(sum(gpu["ecc"][kind][k] for k in keys)) if _ecc_on(gpu) else NA


def sram_detail(gpu, ctx):
    """Hopper (and every GPU on v13 drivers) splits uncorrectable SRAM errors into parity and SEC-DED."""
    return bool(gpu["model"].get("ecc_sram_detail")) or ctx.v >= V570


def tlimit(gpu, _ctx):
    """Hopper and Ada report temperature thresholds relative to T.Limit."""
    return gpu["model"].get("temp_scheme") == "tlimit"


def temp_threshold(key, relative):
    """A temperature threshold: absolute degrees, or degrees relative to T.Limit ('-8 C')."""
    def value(gpu, _ctx):
        degrees = gpu["model"].get(key)
        if degrees is None:
            return NA
        if relative:
            degrees = gpu["model"]["tlimit_c"] - degrees
        return "%d C" % degrees
    return value


def tlimit_headroom(gpu, _ctx):
    """GPU T.Limit Temp: how far the GPU is below T.Limit (negative when past it)."""
    if not tlimit(gpu, _ctx):
        return NA
    return "%d C" % (gpu["model"]["tlimit_c"] - gpu["temp"])


def memory_max_threshold(gpu, ctx):
    """Memory max operating temperature (0 C relative on T.Limit GPUs with HBM)."""
    if gpu["memory_temp"] is None and gpu["model"].get("memory_max_c") is None:
        return NA
    return "0 C" if tlimit(gpu, ctx) else "%d C" % gpu["model"]["memory_max_c"]


def watts(key):
    """A power reading of the GPU state in watts."""
    return lambda gpu, ctx: "%.2f W" % gpu["power"][key]


def model_watts(key):
    """A power limit of the model in watts."""
    return lambda gpu, ctx: "%.2f W" % gpu["model"][key]


def clock(key, state=True):
    """A clock in MHz, from the GPU state (current) or the model (max, applications)."""
    if state:
        return lambda gpu, ctx: "%d MHz" % gpu["clocks"][key]
    return lambda gpu, ctx: "%d MHz" % gpu["model"]["clocks"][key]


def deprecated_clock(key):
    """Applications clocks: deprecated on v13 drivers."""
    return since_570(clock(key, state=False), const(DEPRECATED))


def reason(name):
    """One clock event reason."""
    return lambda gpu, ctx: active(gpu["reasons"][name])


def reason_counter(names):
    """Microseconds spent in a clock event reason (v13): a fixed amount while the reason is active."""
    return lambda gpu, ctx: "%d us" % (1250000 if any(gpu["reasons"][n] for n in names) else 0)


def memory_usage(part):
    """FB memory usage in MiB (free = total - reserved - used)."""
    def value(gpu, _ctx):
        total = gpu["model"]["memory_total_mib"]
        reserved = gpu["model"]["memory_reserved_mib"]
        amounts = {"total": total, "reserved": reserved, "used": gpu["memory_used"],
                   "free": total - reserved - gpu["memory_used"]}
        return "%d MiB" % amounts[part]
    return value


def bar1_usage(part):
    """BAR1 memory usage in MiB."""
    def value(gpu, _ctx):
        total = gpu["model"]["bar1_total_mib"]
        return "%d MiB" % {"total": total, "used": 1, "free": total - 1}[part]
    return value


def retired_value(key, kind=None):
    """A retired-pages value; N/A on GPUs that remap rows instead."""
    def value(gpu, _ctx):
        retired = gpu["retired"]
        if retired is None:
            return NA
        if kind == "yn":
            return yes_no(retired[key])
        return str(retired[key])
    return value


def retired_pagelist(key):
    """The retired page list: N/A, empty, or one page per retired page."""
    def value(gpu, _ctx):
        if gpu["retired"] is None:
            return NA
        return None if gpu["retired"][key] else EMPTY
    return value


def retired_pages(key):
    """<retired_page> entries with made-up but stable addresses and times."""
    def pages(gpu, ctx):
        fields = []
        for number in range(gpu["retired"][key]):
            address = "0x%016x" % (digest("page", gpu["uuid"], key, number) % 0x4000000)
            when = ctime(ctx.node.now - datetime.timedelta(days=3 + number, seconds=digest(number) % 80000))
            fields.append(Field("retired_page", None, children=[
                Field("retired_page_address", None, const(address)),
                Field("retired_page_timestamp", None, const(when))]))
        return fields
    return pages


def remap_value(key, fmt="%s"):
    """A remapped-rows value."""
    def value(gpu, _ctx):
        remap = gpu["remap"]
        if isinstance(remap[key], bool):
            return yes_no(remap[key])
        return fmt % remap[key]
    return value


def remap_hist(key):
    """A bank remap availability histogram bucket."""
    return lambda gpu, ctx: "%d bank(s)" % gpu["remap"]["hist"][key]


def fabric(key):
    """A fabric (NVSwitch) value; N/A on GPUs without fabric state."""
    return lambda gpu, ctx: gpu["fabric"][key] if gpu["fabric"] else NA


def supported_clocks(gpu, _ctx):
    """<supported_clocks>: the memory clock and the graphics clocks down from max in 15 MHz steps."""
    clocks = gpu["model"]["clocks"]
    graphics = [Field("supported_graphics_clock", None, const("%d MHz" % mhz))
                for mhz in range(clocks["graphics_max"], clocks["graphics_min"] - 1, -15)]
    return [Field("supported_mem_clock", None, children=[
        Field("value", None, const("%d MHz" % clocks["memory_max"]))] + graphics)]


def _gpu_fields():
    """The per-GPU fields of nvidia-smi -q / -q -x, in the order the driver prints them."""
    e = Field
    ecc_kinds = []
    for kind, label in (("volatile", "Volatile"), ("aggregate", "Aggregate")):
        children = [
            e("sram_correctable", "SRAM Correctable", ecc_count(kind, "sram_corr")),
            e("sram_uncorrectable", "SRAM Uncorrectable", ecc_count(kind, "sram_unc_parity", "sram_unc_secded"),
              when=lambda g, c: not sram_detail(g, c)),
            e("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", ecc_count(kind, "sram_unc_parity"),
              when=sram_detail),
            e("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", ecc_count(kind, "sram_unc_secded"),
              when=sram_detail),
            e("dram_correctable", "DRAM Correctable", ecc_count(kind, "dram_corr")),
            e("dram_uncorrectable", "DRAM Uncorrectable", ecc_count(kind, "dram_unc")),
        ]
        if kind == "aggregate":
            children.append(e("sram_threshold_exceeded", "SRAM Threshold Exceeded",
                              lambda g, c: "No" if _ecc_on(g) else NA, when=sram_detail))
        ecc_kinds.append(e(kind, label, children=children))
    sram_sources = [e(tag, label, lambda g, c: "0" if _ecc_on(g) else NA) for tag, label in (
        ("sram_l2", "SRAM L2"), ("sram_sm", "SRAM SM"), ("sram_microcontroller", "SRAM Microcontroller"),
        ("sram_pcie", "SRAM PCIE"), ("sram_other", "SRAM Other"))]
    atomic_in = e("atomic_caps_inbound", "Atomic Caps Inbound", const(NA))
    atomic_out = e("atomic_caps_outbound", "Atomic Caps Outbound", model("atomic_caps_outbound"))
    power_readings = [
        e("power_state", None, since_570(lambda g, c: g["perf"], const(DEPRECATED))),
        e("power_draw", "Power Draw", watts("draw"), until=V570),
        e("average_power_draw", "Average Power Draw", watts("draw"), since=V570),
        e("instant_power_draw", "Instantaneous Power Draw", watts("draw"), since=V570),
        e("current_power_limit", "Current Power Limit", watts("limit")),
        e("requested_power_limit", "Requested Power Limit", watts("requested")),
        e("default_power_limit", "Default Power Limit", model_watts("power_default_w")),
        e("min_power_limit", "Min Power Limit", model_watts("power_min_w")),
        e("max_power_limit", "Max Power Limit", model_watts("power_max_w")),
    ]
    module_power = [e(f.tag, f.label, const(NA) if f.tag != "power_state" else f.value, since=f.since,
                      until=f.until) for f in power_readings]
    return [
        e("product_name", "Product Name", lambda g, c: g["name"]),
        e("product_brand", "Product Brand", model("brand")),
        e("product_architecture", "Product Architecture", model("architecture")),
        e("display_mode", "Display Mode", since_570(const("Disabled"), const(DEPRECATED))),
        e("display_attached", "Display Attached", const("No"), since=V570),
        e("display_active", "Display Active", const("Disabled")),
        e("persistence_mode", "Persistence Mode", lambda g, c: enabled(g["persistence"])),
        e("addressing_mode", "Addressing Mode", model("addressing_mode", "None")),
        e("mig_mode", "MIG Mode", children=[
            e("current_mig", "Current", lambda g, c: enabled(g["mig"][0])),
            e("pending_mig", "Pending", lambda g, c: enabled(g["mig"][1]))]),
        e("mig_devices", None, const(Inner("None"))),
        e("accounting_mode", "Accounting Mode", const("Disabled")),
        e("accounting_mode_buffer_size", "Accounting Mode Buffer Size", const("4000")),
        e("driver_model", "Driver Model", children=[
            e("current_dm", "Current", const(NA)), e("pending_dm", "Pending", const(NA))]),
        e("serial", "Serial Number", lambda g, c: g["serial"]),
        e("uuid", "GPU UUID", lambda g, c: g["uuid"]),
        e("pdi", "GPU PDI", lambda g, c: g["pdi"], since=V570),
        e("minor_number", "Minor Number", lambda g, c: str(g["minor"])),
        e("vbios_version", "VBIOS Version", model("vbios_version")),
        e("multigpu_board", "MultiGPU Board", const("No")),
        e("board_id", "Board ID", lambda g, c: "0x%x" % (_bus(g) << 8)),
        e("board_part_number", "Board Part Number", model("board_part_number")),
        e("gpu_part_number", "GPU Part Number", model("gpu_part_number")),
        e("gpu_fru_part_number", "FRU Part Number", const(NA)),
        e("gpu_module_id", "Module ID", lambda g, c: str(g["module_id"]), until=V570),
        e("platformInfo", "Platform Info", since=V570, children=[
            e("chassis_serial_number", "Chassis Serial Number", const(NA)),
            e("slot_number", "Slot Number", const(NA)),
            e("tray_index", "Tray Index", const(NA)),
            e("host_id", "Host ID", const(NA)),
            e("peer_type", "Peer Type", const(NA)),
            e("module_id", "Module Id", lambda g, c: str(g["module_id"])),
            e("gpu_fabric_guid", "GPU Fabric GUID", const(NA))]),
        e("inforom_version", "Inforom Version", children=[
            e("img_version", "Image Version", model("inforom_image")),
            e("oem_object", "OEM Object", model("inforom_oem")),
            e("ecc_object", "ECC Object", model("inforom_ecc")),
            e("pwr_object", "Power Management Object", const(NA))]),
        e("inforom_bbx_flush", "Inforom BBX Object Flush", since=V535_LATE, children=[
            e("latest_timestamp", "Latest Timestamp", const(NA)),
            e("latest_duration", "Latest Duration", const(NA))]),
        e("gpu_operation_mode", "GPU Operation Mode", children=[
            e("current_gom", "Current", const(NA)), e("pending_gom", "Pending", const(NA))]),
        e("gsp_firmware_version", "GSP Firmware Version", lambda g, c: c.node.driver, until=V550),
        e("c2c_mode", "GPU C2C Mode", model("c2c_mode"), since=V550),
        e("gpu_virtualization_mode", "GPU Virtualization Mode", children=[
            e("virtualization_mode", "Virtualization Mode", const("None")),
            e("host_vgpu_mode", "Host VGPU Mode", const(NA)),
            e("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode", const(NA), since=V550)]),
        e("gpu_reset_status", "GPU Reset Status", until=V570, children=[
            e("reset_required", "Reset Required", const("No")),
            e("drain_and_reset_recommended", "Drain and Reset Recommended", model("drain_and_reset_recommended"))]),
        e("gpu_recovery_action", "GPU Recovery Action", const("None"), since=V570),
        e("gsp_firmware_version", "GSP Firmware Version", lambda g, c: c.node.driver, since=V550),
        e("ibmnpu", "IBMNPU", children=[e("relaxed_ordering_mode", "Relaxed Ordering Mode", const(NA))]),
        e("pci", "PCI", children=[
            e("pci_bus", "Bus", hexpair("%02X", _bus)),
            e("pci_device", "Device", hexpair("%02X", lambda g: int(g["bus_id"].split(":")[2].split(".")[0], 16))),
            e("pci_domain", "Domain", hexpair("%04X", lambda g: int(g["bus_id"].split(":")[0], 16))),
            e("pci_base_class", "Base Classcode", hexpair("%s", lambda g: "3"), since=V550),
            e("pci_sub_class", "Sub Classcode", hexpair("%s", lambda g: g["model"].get("pci_sub_class", "2")),
              since=V550),
            e("pci_device_id", "Device Id", hexpair("%s", lambda g: g["model"]["pci_device_id"])),
            e("pci_bus_id", "Bus Id", lambda g, c: g["bus_id"]),
            e("pci_sub_system_id", "Sub System Id", hexpair("%s", lambda g: g["model"]["pci_subsystem_id"])),
            e("pci_gpu_link_info", "GPU Link Info", children=[
                e("pcie_gen", "PCIe Generation", children=[
                    e("max_link_gen", "Max", lambda g, c: str(g["pcie"]["gen_max"])),
                    e("current_link_gen", "Current", lambda g, c: str(g["pcie"]["gen"])),
                    e("device_current_link_gen", "Device Current", lambda g, c: str(g["pcie"]["gen"])),
                    e("max_device_link_gen", "Device Max", lambda g, c: str(g["model"]["pcie_gen_max"])),
                    e("max_host_link_gen", "Host Max", model("pcie_host_gen_max"))]),
                e("link_widths", "Link Width", children=[
                    e("max_link_width", "Max", lambda g, c: "%dx" % g["pcie"]["width_max"]),
                    e("current_link_width", "Current", lambda g, c: "%dx" % g["pcie"]["width"])])]),
            e("pci_bridge_chip", "Bridge Chip", children=[
                e("bridge_chip_type", "Type", const(NA)), e("bridge_chip_fw", "Firmware", const(NA))]),
            e("replay_counter", "Replays Since Reset", lambda g, c: str(g["pcie"]["replays"])),
            e("replay_rollover_counter", "Replay Number Rollovers", const("0")),
            e("tx_util", "Tx Throughput", const("0 KB/s")),
            e("rx_util", "Rx Throughput", const("0 KB/s")),
            Field(atomic_in.tag, atomic_in.label, atomic_in.value, until=V560),
            atomic_out,
            Field(atomic_in.tag, atomic_in.label, atomic_in.value, since=V560)]),
        e("fan_speed", "Fan Speed", model("fan_speed")),
        e("performance_state", "Performance State", lambda g, c: g["perf"]),
        e("clocks_event_reasons", "Clocks Event Reasons", children=[
            e("clocks_event_reason_gpu_idle", "Idle", reason("gpu_idle")),
            e("clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting",
              reason("applications_clocks_setting")),
            e("clocks_event_reason_sw_power_cap", "SW Power Cap", reason("sw_power_cap")),
            e("clocks_event_reason_hw_slowdown", "HW Slowdown", reason("hw_slowdown")),
            e("clocks_event_reason_hw_thermal_slowdown", "HW Thermal Slowdown", reason("hw_thermal_slowdown"),
              indent=1),
            e("clocks_event_reason_hw_power_brake_slowdown", "HW Power Brake Slowdown",
              reason("hw_power_brake_slowdown"), indent=1),
            e("clocks_event_reason_sync_boost", "Sync Boost", reason("sync_boost")),
            e("clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", reason("sw_thermal_slowdown")),
            e("clocks_event_reason_display_clocks_setting", "Display Clock Setting",
              reason("display_clocks_setting"))]),
        e("clocks_event_reasons_counters", "Clocks Event Reasons Counters", since=V570, children=[
            e("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", reason_counter(["sw_power_cap"])),
            e("clocks_event_reasons_counters_sync_boost", "Sync Boost", reason_counter(["sync_boost"])),
            e("clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown",
              reason_counter(["sw_thermal_slowdown"])),
            e("clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown",
              reason_counter(["hw_thermal_slowdown"])),
            e("clocks_event_reasons_counters_hw_power_brake", "HW Power Braking",
              reason_counter(["hw_power_brake_slowdown"]))]),
        e("sparse_operation_mode", "Sparse Operation Mode", model("sparse_operation_mode"), since=V535_LATE),
        e("fb_memory_usage", "FB Memory Usage", children=[
            e(part, part.capitalize(), memory_usage(part)) for part in ("total", "reserved", "used", "free")]),
        e("bar1_memory_usage", "BAR1 Memory Usage", children=[
            e(part, part.capitalize(), bar1_usage(part)) for part in ("total", "used", "free")]),
        e("cc_protected_memory_usage", "Conf Compute Protected Memory Usage", children=[
            e(part, part.capitalize(), const("0 MiB")) for part in ("total", "used", "free")]),
        e("compute_mode", "Compute Mode", const("Default")),
        e("utilization", "Utilization", children=[
            e("gpu_util", "Gpu", lambda g, c: "%d %%" % g["util"]["gpu"], until=V570),
            e("gpu_util", "GPU", lambda g, c: "%d %%" % g["util"]["gpu"], since=V570),
            e("memory_util", "Memory", lambda g, c: "%d %%" % g["util"]["memory"]),
            e("encoder_util", "Encoder", const("0 %")),
            e("decoder_util", "Decoder", const("0 %")),
            e("jpeg_util", "JPEG", lambda g, c: "0 %" if g["model"].get("jpeg_ofa", True) else NA),
            e("ofa_util", "OFA", lambda g, c: "0 %" if g["model"].get("jpeg_ofa", True) else NA)]),
        e("encoder_stats", "Encoder Stats", children=[
            e("session_count", "Active Sessions", const("0")), e("average_fps", "Average FPS", const("0")),
            e("average_latency", "Average Latency", const("0"))]),
        e("fbc_stats", "FBC Stats", children=[
            e("session_count", "Active Sessions", const("0")), e("average_fps", "Average FPS", const("0")),
            e("average_latency", "Average Latency", const("0"))]),
        e("dram_encryption_mode", "DRAM Encryption Mode", since=V570, children=[
            e("current_dram_encryption", "Current", const(NA)),
            e("pending_dram_encryption", "Pending", const(NA))]),
        e("ecc_mode", "ECC Mode", children=[
            e("current_ecc", "Current", lambda g, c: enabled(g["ecc_mode"][0])),
            e("pending_ecc", "Pending", lambda g, c: enabled(g["ecc_mode"][1]))]),
        e("ecc_errors", "ECC Errors", children=ecc_kinds + [
            e("aggregate_uncorrectable_sram_sources", "Aggregate Uncorrectable SRAM Sources", children=sram_sources,
              when=sram_detail),
            e("channel_repair_pending", "Channel Repair Pending", const("No"), since=V570),
            e("tpc_repair_pending", "TPC Repair Pending", const("No"), since=V570),
            e("unrepairable_memory", "Unrepairable Memory",
              lambda g, c: "No" if g["remap"] and _ecc_on(g) else NA, since=V570)]),
        e("retired_pages", "Retired Pages", children=[
            e("multiple_single_bit_retirement", None, children=[
                e("retired_count", None, retired_value("sbe")),
                e("retired_pagelist", None, retired_pagelist("sbe"), children=retired_pages("sbe"))]),
            e(None, "Single Bit ECC", retired_value("sbe")),
            e("double_bit_retirement", None, children=[
                e("retired_count", None, retired_value("dbe")),
                e("retired_pagelist", None, retired_pagelist("dbe"), children=retired_pages("dbe"))]),
            e(None, "Double Bit ECC", retired_value("dbe")),
            e("pending_blacklist", "Pending Page Blacklist", retired_value("pending", "yn")),
            e("pending_retirement", None, retired_value("pending", "yn"))]),
        e("remapped_rows", "Remapped Rows", lambda g, c: NA if g["remap"] is None else None, children=[
            e("remapped_row_corr", "Correctable Error", remap_value("corr")),
            e("remapped_row_corr_inactive", "Inactive Correctable Error", const("0"), since=V595),
            e("remapped_row_unc", "Uncorrectable Error", remap_value("unc")),
            e("remapped_row_unc_inactive", "Inactive Uncorrectable Error", const("0"), since=V595),
            e("remapped_row_pending", "Pending", remap_value("pending")),
            e("remapped_row_failure", "Remapping Failure Occurred", remap_value("failure")),
            e("row_remapper_histogram", "Bank Remap Availability Histogram", children=[
                e("row_remapper_histogram_" + key, key.capitalize(), remap_hist(key))
                for key in ("max", "high", "partial", "low", "none")])]),
        e("temperature", "Temperature", children=[
            e("gpu_temp", "GPU Current Temp", lambda g, c: "%d C" % g["temp"]),
            e("gpu_temp_tlimit", "GPU T.Limit Temp", tlimit_headroom),
            e("gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", temp_threshold("shutdown_c", True),
              when=tlimit),
            e("gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", temp_threshold("slowdown_c", True),
              when=tlimit),
            e("gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp",
              temp_threshold("max_operating_c", True), when=tlimit),
            e("gpu_temp_max_threshold", "GPU Shutdown Temp", temp_threshold("shutdown_c", False),
              when=lambda g, c: not tlimit(g, c)),
            e("gpu_temp_slow_threshold", "GPU Slowdown Temp", temp_threshold("slowdown_c", False),
              when=lambda g, c: not tlimit(g, c)),
            e("gpu_temp_max_gpu_threshold", "GPU Max Operating Temp", temp_threshold("max_operating_c", False),
              when=lambda g, c: not tlimit(g, c)),
            e("gpu_target_temperature", "GPU Target Temperature", temp_threshold("target_temp_c", False)),
            e("memory_temp", "Memory Current Temp", lambda g, c: with_unit(g["memory_temp"], "C", "%d")),
            e("gpu_temp_max_mem_tlimit_threshold", "Memory Max Operating T.Limit Temp", memory_max_threshold,
              when=tlimit),
            e("gpu_temp_max_mem_threshold", "Memory Max Operating Temp", memory_max_threshold,
              when=lambda g, c: not tlimit(g, c))]),
        e("supported_gpu_target_temp", None, children=[
            e("gpu_target_temp_min", None, const(NA)), e("gpu_target_temp_max", None, const(NA))]),
        e("gpu_power_readings", "GPU Power Readings", children=power_readings),
        e("gpu_memory_power_readings", "GPU Memory Power Readings", since=V550, until=V590, children=[
            e("power_draw", "Power Draw", const(NA), until=V570),
            e("average_power_draw", "Average Power Draw", const(NA), since=V570),
            e("instant_power_draw", "Instantaneous Power Draw", const(NA), since=V570)]),
        e("gpu_memory_power_readings", "GPU Memory Power Readings ", since=V590, children=[
            e("average_power_draw", "Average Power Draw", const(NA)),
            e("instant_power_draw", "Instantaneous Power Draw", const(NA))]),
        e("module_power_readings", "Module Power Readings", children=module_power),
        e("power_smoothing", "Power Smoothing", const(NA), since=V570),
        e("power_profiles", "Workload Power Profiles", since=V570, children=[
            e("power_profile_requested_profiles", "Requested Profiles", const(NA)),
            e("power_profile_enforced_profiles", "Enforced Profiles", const(NA))]),
        e("edpp_multiplier", "EDPp Multiplier", const(NA), since=V570),
        e("clocks", "Clocks", children=[
            e("graphics_clock", "Graphics", clock("graphics")), e("sm_clock", "SM", clock("sm")),
            e("mem_clock", "Memory", clock("memory")), e("video_clock", "Video", clock("video"))]),
        e("applications_clocks", "Applications Clocks", children=[
            e("graphics_clock", "Graphics", deprecated_clock("applications_graphics")),
            e("mem_clock", "Memory", deprecated_clock("applications_memory"))]),
        e("default_applications_clocks", "Default Applications Clocks", children=[
            e("graphics_clock", "Graphics", deprecated_clock("applications_graphics")),
            e("mem_clock", "Memory", deprecated_clock("applications_memory"))]),
        e("deferred_clocks", "Deferred Clocks", children=[e("mem_clock", "Memory", const(NA))]),
        e("max_clocks", "Max Clocks", children=[
            e("graphics_clock", "Graphics", clock("graphics_max", False)),
            e("sm_clock", "SM", clock("sm_max", False)),
            e("mem_clock", "Memory", clock("memory_max", False)),
            e("video_clock", "Video", clock("video_max", False))]),
        e("max_customer_boost_clocks", "Max Customer Boost Clocks", children=[
            e("graphics_clock", "Graphics", clock("graphics_max", False))]),
        e("clock_policy", "Clock Policy", children=[
            e("auto_boost", "Auto Boost", const(NA)), e("auto_boost_default", "Auto Boost Default", const(NA))]),
        e("voltage", "Voltage", until=V570, children=[e("graphics_volt", "Graphics", model("voltage_idle"))]),
        e("fabric", "Fabric", children=[
            e("state", "State", fabric("state")),
            e("status", "Status", fabric("status")),
            e("cliqueId", "CliqueId", fabric("clique"), since=V550),
            e("clusterUuid", "ClusterUUID", fabric("cluster"), since=V550),
            e("health", "Health", since=V550, children=[
                e("summary", "Summary", const(NA), since=V570),
                e("bandwidth", "Bandwidth", const(NA)),
                e("route_recovery_in_progress", "Route Recovery in progress", const(NA), since=V570),
                e("route_unhealthy", "Route Unhealthy", const(NA), since=V570),
                e("access_timeout_recovery", "Access Timeout Recovery", const(NA), since=V570),
                e("incorrect_configuration", "Incorrect Configuration", const(NA), since=V570),
                e("partition_assigned", "Partition Assigned", const(NA), since=V595)])]),
        e("supported_clocks", None, children=supported_clocks),
        e("processes", "Processes", lambda g, c: EMPTY),
        e("accounted_processes", None, const(EMPTY)),
        e("capabilities", "Capabilities", since=V560, children=[e("egm", "EGM", const("disabled"))]),
    ]


GPU_FIELDS = _gpu_fields()


def xml_lines(fields, gpu, ctx, depth):
    """The XML elements of fields, one tab per level."""
    pad = "\t" * depth
    lines = []
    for field in fields:
        if field.tag is None or not field.present(gpu, ctx):
            continue
        value = field.leaf_value(gpu, ctx)
        if value is EMPTY:
            lines.extend(["%s<%s>" % (pad, field.tag), "%s</%s>" % (pad, field.tag)])
        elif isinstance(value, Inner):
            lines.extend(["%s<%s>" % (pad, field.tag), "%s\t%s" % (pad, value), "%s</%s>" % (pad, field.tag)])
        elif value is not None:
            text = value[0] if isinstance(value, tuple) else value
            lines.append("%s<%s>%s</%s>" % (pad, field.tag, xml_escape(text), field.tag))
        else:
            lines.append("%s<%s>" % (pad, field.tag))
            lines.extend(xml_lines(field.child_fields(gpu, ctx), gpu, ctx, depth + 1))
            lines.append("%s</%s>" % (pad, field.tag))
    return lines


def text_width(ctx):
    """Where the colon of -q text goes: after 42 columns before 570, after 55 from 570 on."""
    return 55 if ctx.v >= V570 else 42


def text_line(key, value, ctx):
    """'    Product Name                          : NVIDIA H100 80GB HBM3'."""
    return "%s: %s" % (key.ljust(text_width(ctx)), value)


def text_lines(fields, gpu, ctx, depth):
    """The -q text lines of fields, four spaces per level."""
    lines = []
    for field in fields:
        if field.label is None or not field.present(gpu, ctx):
            continue
        key = " " * (4 * (depth + field.indent)) + field.label
        value = field.leaf_value(gpu, ctx)
        if value is EMPTY:
            lines.append(text_line(key, "None", ctx))
        elif value is not None:
            lines.append(text_line(key, value[1] if isinstance(value, tuple) else value, ctx))
        else:
            lines.append(key)
            lines.extend(text_lines(field.child_fields(gpu, ctx), gpu, ctx, depth + 1))
    return lines


def render_query_xml(node, gpus):
    """nvidia-smi -q -x."""
    ctx = Ctx(node)
    lines = ['<?xml version="1.0" ?>',
             '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v%d.dtd">' % (13 if ctx.v >= V570 else 12),
             "<nvidia_smi_log>",
             "\t<timestamp>%s</timestamp>" % ctime(node.now),
             "\t<driver_version>%s</driver_version>" % node.driver,
             "\t<cuda_version>%s</cuda_version>" % node.cuda_version,
             "\t<attached_gpus>%d</attached_gpus>" % node.attached]
    for gpu in gpus:
        lines.append('\t<gpu id="%s">' % gpu["bus_id"])
        lines.extend(xml_lines(GPU_FIELDS, gpu, ctx, 2))
        lines.extend(["\t</gpu>", ""])
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


def render_query_text(node, gpus):
    """nvidia-smi -q."""
    ctx = Ctx(node)
    lines = ["", "==============NVSMI LOG==============", "",
             text_line("Timestamp", ctime(node.now), ctx),
             text_line("Driver Version", node.driver, ctx),
             text_line("CUDA Version", node.cuda_version, ctx), "",
             text_line("Attached GPUs", str(node.attached), ctx)]
    for gpu in gpus:
        lines.append("GPU %s" % gpu["bus_id"])
        lines.extend(text_lines(GPU_FIELDS, gpu, ctx, 1))
        lines.append("")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv
# ----------------------------------------------------------------------------------------------------------------

class QueryField(object):
    """One --query-gpu field: its names (canonical first), unit, value (None means [N/A]) and drivers."""

    __slots__ = ("names", "unit", "value", "since", "until")

    def __init__(self, names, value, unit=None, since=None, until=None):
        self.names = tuple(names.split()) if isinstance(names, str) else tuple(names)
        self.value, self.unit, self.since, self.until = value, unit, since, until

    def valid(self, version):
        """Whether this driver knows the field."""
        return not ((self.since and version < self.since) or (self.until and version >= self.until))


def _ecc_csv(kind, direction, part):
    keys = {("corrected", "dram"): ("dram_corr",), ("corrected", "sram"): ("sram_corr",),
            ("uncorrected", "dram"): ("dram_unc",), ("uncorrected", "sram"): ("sram_unc_parity", "sram_unc_secded"),
            ("uncorrected", "sram.parity"): ("sram_unc_parity",), ("uncorrected", "sram.secded"): ("sram_unc_secded",)}
    if part == "device_memory":
        part = "dram"
    if part == "total":
        wanted = keys[(direction, "dram")] + keys[(direction, "sram")]
    else:
        wanted = keys.get((direction, part))

    def value(gpu, _node):
        if wanted is None or not _ecc_on(gpu):
            return None
        return str(sum(gpu["ecc"][kind][k] for k in wanted))
    return value


def _query_fields():
    """Every --query-gpu field gpusim knows."""
    q = QueryField

    def gpu_key(fn):
        return lambda g, n: fn(g)

    def dep(value):
        return lambda g, n: "[%s]" % DEPRECATED if n.driver_v >= V570 else value(g, n)

    def retired(key):
        return lambda g, n: None if g["retired"] is None else (
            yes_no(g["retired"][key]) if key == "pending" else str(g["retired"][key]))

    def remap(key):
        return lambda g, n: None if g["remap"] is None else (
            yes_no(g["remap"][key]) if isinstance(g["remap"][key], bool) else str(g["remap"][key]))

    def hist(key):
        return lambda g, n: None if g["remap"] is None else str(g["remap"]["hist"][key])

    def fab(key, bare=False):
        return lambda g, n: (g["fabric"][key] if g["fabric"] else ("N/A" if bare else None))

    fields = [
        q("timestamp", lambda g, n: n.now.strftime("%Y/%m/%d %H:%M:%S") + ".%03d" % (digest(n.now) % 1000)),
        q("driver_version", lambda g, n: n.driver),
        q("count", lambda g, n: str(n.attached)),
        q("name gpu_name", gpu_key(lambda g: g["name"])),
        q("serial gpu_serial", gpu_key(lambda g: g["serial"])),
        q("uuid gpu_uuid", gpu_key(lambda g: g["uuid"])),
        q("pci.bus_id gpu_bus_id", gpu_key(lambda g: g["bus_id"])),
        q("pci.domain", gpu_key(lambda g: "0x" + g["bus_id"][4:8])),
        q("pci.bus", gpu_key(lambda g: "0x" + g["bus_id"].split(":")[1])),
        q("pci.device", gpu_key(lambda g: "0x" + g["bus_id"].split(":")[2].split(".")[0])),
        q("pci.baseClass", lambda g, n: "0x3", since=V550),
        q("pci.subClass", gpu_key(lambda g: "0x" + g["model"].get("pci_sub_class", "2")), since=V550),
        q("pci.device_id", gpu_key(lambda g: "0x" + g["model"]["pci_device_id"])),
        q("pci.sub_device_id", gpu_key(lambda g: "0x" + g["model"]["pci_subsystem_id"])),
        q("pcie.link.gen.current", gpu_key(lambda g: str(g["pcie"]["gen"]))),
        q("pcie.link.gen.gpucurrent", gpu_key(lambda g: str(g["pcie"]["gen"]))),
        q("pcie.link.gen.max", gpu_key(lambda g: str(g["pcie"]["gen_max"]))),
        q("pcie.link.gen.gpumax", gpu_key(lambda g: str(g["model"]["pcie_gen_max"]))),
        q("pcie.link.gen.hostmax", gpu_key(lambda g: g["model"].get("pcie_host_gen_max"))),
        q("pcie.link.width.current", gpu_key(lambda g: str(g["pcie"]["width"]))),
        q("pcie.link.width.max", gpu_key(lambda g: str(g["pcie"]["width_max"]))),
        q("index", gpu_key(lambda g: str(g["index"]))),
        q("minor_number", gpu_key(lambda g: str(g["minor"]))),
        q("display_mode", dep(lambda g, n: "Disabled")),
        q("display_active", lambda g, n: "Disabled"),
        q("persistence_mode", gpu_key(lambda g: enabled(g["persistence"]))),
        q("accounting.mode", lambda g, n: "Disabled"),
        q("accounting.buffer_size", lambda g, n: "4000"),
        q("driver_model.current", lambda g, n: None),
        q("driver_model.pending", lambda g, n: None),
        q("vbios_version", gpu_key(lambda g: g["model"]["vbios_version"])),
        q("inforom.img inforom.image", gpu_key(lambda g: g["model"]["inforom_image"])),
        q("inforom.oem", gpu_key(lambda g: g["model"]["inforom_oem"])),
        q("inforom.ecc", gpu_key(lambda g: g["model"]["inforom_ecc"])),
        q("inforom.pwr inforom.power", lambda g, n: None),
        q("gom.current gpu_operation_mode.current", lambda g, n: None),
        q("gom.pending gpu_operation_mode.pending", lambda g, n: None),
        q("fan.speed", gpu_key(lambda g: g["model"].get("fan_speed")), unit="%"),
        q("pstate", gpu_key(lambda g: g["perf"])),
        q(("clocks_event_reasons.supported", "clocks_throttle_reasons.supported"),
          lambda g, n: "0x%016X" % sum(REASON_BITS.values())),
        q(("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
          gpu_key(lambda g: "0x%016X" % sum(REASON_BITS[r] for r in REASONS if g["reasons"][r]))),
    ]
    for name in REASONS[:-1]:
        fields.append(q(("clocks_event_reasons." + name, "clocks_throttle_reasons." + name), reason(name)))
    fields += [
        q("memory.total", gpu_key(lambda g: str(g["model"]["memory_total_mib"])), unit="MiB"),
        q("memory.reserved", gpu_key(lambda g: str(g["model"]["memory_reserved_mib"])), unit="MiB"),
        q("memory.used", gpu_key(lambda g: str(g["memory_used"])), unit="MiB"),
        q("memory.free", gpu_key(lambda g: str(g["model"]["memory_total_mib"] - g["model"]["memory_reserved_mib"]
                                               - g["memory_used"])), unit="MiB"),
        q("compute_mode", lambda g, n: "Default"),
        q("compute_cap", gpu_key(lambda g: g["model"]["compute_cap"])),
        q("utilization.gpu", gpu_key(lambda g: str(g["util"]["gpu"])), unit="%"),
        q("utilization.memory", gpu_key(lambda g: str(g["util"]["memory"])), unit="%"),
        q("utilization.encoder", lambda g, n: "0", unit="%"),
        q("utilization.decoder", lambda g, n: "0", unit="%"),
        q("encoder.stats.sessionCount", lambda g, n: "0"),
        q("encoder.stats.averageFps", lambda g, n: "0"),
        q("encoder.stats.averageLatency", lambda g, n: "0"),
        q("ecc.mode.current", gpu_key(lambda g: enabled(g["ecc_mode"][0]))),
        q("ecc.mode.pending", gpu_key(lambda g: enabled(g["ecc_mode"][1]))),
    ]
    for direction in ("corrected", "uncorrected"):
        for kind in ("volatile", "aggregate"):
            for part in ("device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu",
                         "sram", "total"):
                fields.append(q("ecc.errors.%s.%s.%s" % (direction, kind, part), _ecc_csv(kind, direction, part)))
    for kind in ("volatile", "aggregate"):
        for part in ("sram.parity", "sram.secded"):
            fields.append(q("ecc.errors.uncorrected.%s.%s" % (kind, part), _ecc_csv(kind, "uncorrected", part)))
    fields += [
        q("retired_pages.single_bit_ecc.count retired_pages.sbe", retired("sbe")),
        q("retired_pages.double_bit.count retired_pages.dbe", retired("dbe")),
        q("retired_pages.pending", retired("pending")),
        q("remapped_rows.correctable", remap("corr")),
        q("remapped_rows.uncorrectable", remap("unc")),
        q("remapped_rows.pending", remap("pending")),
        q("remapped_rows.failure", remap("failure")),
    ] + [q("remapped_rows.histogram." + key, hist(key)) for key in ("max", "high", "partial", "low", "none")] + [
        q("temperature.gpu", gpu_key(lambda g: str(g["temp"]))),
        q("temperature.gpu.tlimit", lambda g, n: tlimit_headroom(g, None).replace(" C", "")
          if tlimit(g, None) else None),
        q("temperature.memory", gpu_key(lambda g: None if g["memory_temp"] is None else str(g["memory_temp"]))),
        q("power.management", dep(lambda g, n: "Enabled")),
        q("power.draw", gpu_key(lambda g: "%.2f" % g["power"]["draw"]), unit="W"),
        q("power.draw.average gpu.power.draw.average", gpu_key(lambda g: "%.2f" % g["power"]["draw"]), unit="W",
          since=V550),
        q("power.draw.instant gpu.power.draw.instant", gpu_key(lambda g: "%.2f" % g["power"]["draw"]), unit="W",
          since=V550),
        q("power.limit gpu.power.requested_limit", gpu_key(lambda g: "%.2f" % g["power"]["requested"]), unit="W"),
        q("enforced.power.limit gpu.power.current_limit", gpu_key(lambda g: "%.2f" % g["power"]["limit"]),
          unit="W"),
        q("power.default_limit gpu.power.default_limit", gpu_key(lambda g: "%.2f" % g["model"]["power_default_w"]),
          unit="W"),
        q("power.min_limit gpu.power.min_limit", gpu_key(lambda g: "%.2f" % g["model"]["power_min_w"]), unit="W"),
        q("power.max_limit gpu.power.max_limit", gpu_key(lambda g: "%.2f" % g["model"]["power_max_w"]), unit="W"),
        q("clocks.current.graphics clocks.gr", gpu_key(lambda g: str(g["clocks"]["graphics"])), unit="MHz"),
        q("clocks.current.sm clocks.sm", gpu_key(lambda g: str(g["clocks"]["sm"])), unit="MHz"),
        q("clocks.current.memory clocks.mem", gpu_key(lambda g: str(g["clocks"]["memory"])), unit="MHz"),
        q("clocks.current.video clocks.video", gpu_key(lambda g: str(g["clocks"]["video"])), unit="MHz"),
        q("clocks.applications.graphics clocks.applications.gr",
          dep(gpu_key(lambda g: str(g["model"]["clocks"]["applications_graphics"]))), unit="MHz"),
        q("clocks.applications.memory clocks.applications.mem",
          dep(gpu_key(lambda g: str(g["model"]["clocks"]["applications_memory"]))), unit="MHz"),
        q("clocks.default_applications.graphics clocks.default_applications.gr",
          dep(gpu_key(lambda g: str(g["model"]["clocks"]["applications_graphics"]))), unit="MHz"),
        q("clocks.default_applications.memory clocks.default_applications.mem",
          dep(gpu_key(lambda g: str(g["model"]["clocks"]["applications_memory"]))), unit="MHz"),
        q("clocks.max.graphics clocks.max.gr", gpu_key(lambda g: str(g["model"]["clocks"]["graphics_max"])),
          unit="MHz"),
        q("clocks.max.sm", gpu_key(lambda g: str(g["model"]["clocks"]["sm_max"])), unit="MHz"),
        q("clocks.max.memory clocks.max.mem", gpu_key(lambda g: str(g["model"]["clocks"]["memory_max"])),
          unit="MHz"),
        q("mig.mode.current", gpu_key(lambda g: None if g["mig"][0] is None else enabled(g["mig"][0]))),
        q("mig.mode.pending", gpu_key(lambda g: None if g["mig"][1] is None else enabled(g["mig"][1]))),
        q("fabric.state", fab("state"), since=V550),
        q("fabric.status", fab("status"), since=V550),
        q("fabric.cliqueId", fab("clique"), since=V550),
        q("fabric.clusterUuid", fab("cluster"), since=V550),
        q("fabric.health.summary", lambda g, n: "N/A", since=V570),
        q("fabric.health.bandwidth", lambda g, n: "N/A", since=V550),
    ]
    return fields


QUERY_FIELDS = _query_fields()
# The fields a bundle's nvidia-smi-query.csv has unless --query-fields says otherwise.
DEFAULT_QUERY = ("index,pci.bus_id,uuid,name,serial,driver_version,vbios_version,memory.total,memory.used,"
                 "persistence_mode,ecc.mode.current,ecc.mode.pending,ecc.errors.corrected.volatile.total,"
                 "ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,"
                 "ecc.errors.uncorrected.aggregate.total,retired_pages.single_bit_ecc.count,"
                 "retired_pages.double_bit.count,retired_pages.pending,pcie.link.gen.current,pcie.link.gen.max,"
                 "pcie.link.width.current,pcie.link.width.max,temperature.gpu,temperature.memory,power.draw,"
                 "power.limit,enforced.power.limit,power.default_limit,power.max_limit,"
                 "clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,"
                 "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
                 "clocks_event_reasons.sw_thermal_slowdown,utilization.gpu,utilization.memory,mig.mode.current,"
                 "mig.mode.pending")


def find_query_field(name, version):
    """(canonical name, field) for a --query-gpu name on this driver; None when the driver does not know it."""
    for field in QUERY_FIELDS:
        if name in field.names and field.valid(version):
            canonical = field.names[0]
            if version < (535,) and canonical.startswith("clocks_event_reasons."):
                if name.startswith("clocks_event_reasons."):
                    return None   # older drivers only know the clocks_throttle_reasons names
                canonical = name
            return canonical, field
    return None


def render_query_csv(node, gpus, names, header=True, units=True):
    """nvidia-smi --query-gpu=<names> --format=csv[,noheader][,nounits]."""
    fields = []
    for name in names:
        found = find_query_field(name, node.driver_v)
        if found is None:
            raise SimError(2, stdout='Field "%s" is not a valid field to query.\n\n' % name)
        fields.append(found)
    lines = []
    if header:
        lines.append(", ".join(n + (" [%s]" % f.unit if f.unit else "") for n, f in fields))
    for gpu in gpus:
        cells = []
        for _name, field in fields:
            value = field.value(gpu, node)
            if value is None:
                cells.append("[N/A]")
            elif value.startswith("[") or not (units and field.unit):
                cells.append(value)
            else:
                cells.append("%s %s" % (value, field.unit))
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi (default table), -L, --version
# ----------------------------------------------------------------------------------------------------------------

def render_default(node, gpus):
    """Plain nvidia-smi: the summary table (91 columns; two rules moved in the 570 layout)."""
    rule = "+" + "-" * 89 + "+"
    cells = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [ctime(node.now) + "       ", rule,
             "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (
                 node.driver, node.driver, node.cuda_version),
             ("+" if node.driver_v >= V570 else "|") + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for gpu in gpus:
        ecc = str(gpu["ecc"]["volatile"]["dram_unc"] + gpu["ecc"]["volatile"]["sram_unc_parity"]
                  + gpu["ecc"]["volatile"]["sram_unc_secded"]) if _ecc_on(gpu) else NA
        fan = gpu["model"].get("fan_speed") or NA
        mig = NA if gpu["mig"][0] is None else enabled(gpu["mig"][0])
        name = gpu["name"] if len(gpu["name"]) <= 28 else gpu["name"][:25] + "..."
        persistence = "On" if gpu["persistence"] else "Off"
        lines.append("|%4d  %-28s%5s  |   %s %3s |%21s |" % (gpu["index"], name, persistence, gpu["bus_id"], "Off", ecc))
        lines.append("|%4s%6s%6s%16s / %5s |%11s / %9s |%8s%13s |" % (
            fan, "%dC" % gpu["temp"], gpu["perf"], "%dW" % round(gpu["power"]["draw"]),
            "%dW" % round(gpu["power"]["limit"]), "%dMiB" % gpu["memory_used"],
            "%dMiB" % gpu["model"]["memory_total_mib"], "%d%%" % gpu["util"]["gpu"], "Default"))
        lines.append("|%41s|%24s|%21s |" % ("", "", mig))
        lines.append(cells)
    lines += ["", rule,
              "| Processes:" + " " * 78 + "|",
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |"
              if node.driver_v >= V570 else
              "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|",
              "|  No running processes found" + " " * 61 + "|",
              rule]
    return "\n".join(lines) + "\n"


def render_list(node, gpus):
    """nvidia-smi -L."""
    return "".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in gpus)


def render_version(node):
    """nvidia-smi --version."""
    nvml = ".".join(node.driver.split(".")[:2])
    return ("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
            "CUDA Version        : %s\n" % (node.driver, nvml, node.driver, node.cuda_version))


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s / -e, topo -m
# ----------------------------------------------------------------------------------------------------------------

def gpu_title(gpu):
    """'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)' as nvlink and -L print it."""
    return "GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"])


def render_nvlink_status(node, gpus):
    """nvidia-smi nvlink -s: one line per link, '<inactive>' for a link that is down."""
    lines = []
    for gpu in gpus:
        speed = gpu["model"].get("nvlink_speed")
        if not gpu["nvlinks"]:
            if node.driver_v >= V570:   # older drivers print nothing at all for a GPU without NVLink
                lines += [gpu_title(gpu), "Device does not have or support Nvlink"]
            continue
        lines.append(gpu_title(gpu))
        if not any(link["active"] for link in gpu["nvlinks"]):
            lines.append("NVML: Unable to retrieve NVLink information as all links are inactive")
            continue
        for number, link in enumerate(gpu["nvlinks"]):
            lines.append("\t Link %d: %s" % (number, "%s GB/s" % speed if link["active"] else "<inactive>"))
    return "".join(line + "\n" for line in lines)


def render_nvlink_errors(node, gpus):
    """nvidia-smi nvlink -e: replay, recovery and CRC counters per link, a blank line between links."""
    lines = []
    for gpu in gpus:
        if not gpu["nvlinks"]:
            continue
        lines.append(gpu_title(gpu))
        for number, link in enumerate(gpu["nvlinks"]):
            if number:
                lines.append("")
            lines += ["\t Link %d: Replay Errors: %d" % (number, link["replay"]),
                      "\t Link %d: Recovery Errors: %d" % (number, link["recovery"]),
                      "\t Link %d: CRC Errors: %d" % (number, link["crc"])]
    return "".join(line + "\n" for line in lines)


def _pcie_relation(one, other):
    """PIX/PXB/NODE/SYS between two PCIe devices by PCIe switch and NUMA node."""
    if one["pcie_switch"] == other["pcie_switch"] and one["pcie_switch"] >= 0:
        return "PXB"
    return "NODE" if one["numa"] == other["numa"] else "SYS"


def render_topo(node, gpus):
    """nvidia-smi topo -m: GPU and NIC matrix, CPU/NUMA affinity, legend and NIC legend (tab separated)."""
    nics = node.ib
    names = ["GPU%d" % g["index"] for g in gpus] + ["NIC%d" % i for i in range(len(nics))]
    affinity = node.profile.get("cpu_affinity") or {}
    lines = ["\t\x1b[4m" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]
    for row in gpus:
        cells = []
        for col in gpus:
            if col is row:
                cells.append(" X ")
            elif row["nvlinks"] and col["nvlinks"]:
                cells.append("NV%d" % min(sum(l["active"] for l in row["nvlinks"]),
                                          sum(l["active"] for l in col["nvlinks"])))
            else:
                cells.append(_pcie_relation(row, col))
        cells += [_pcie_relation(row, nic) for nic in nics]
        cells += [affinity.get(str(row["numa"]), "0-%d" % 63), str(row["numa"]), "", NA]
        lines.append("\t".join(["GPU%d" % row["index"]] + cells))
    for index, nic in enumerate(nics):
        cells = [_pcie_relation(nic, gpu) for gpu in gpus]
        cells += [" X " if other is nic else _pcie_relation(nic, other) for other in nics]
        lines.append("\t".join(["NIC%d" % index] + cells))
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
              "NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks"]
    if nics:
        lines += ["", "NIC Legend:", ""] + ["  NIC%d: %s" % (i, nic["name"]) for i, nic in enumerate(nics)]
    return "\n".join(lines) + "\n\n"


# ----------------------------------------------------------------------------------------------------------------
# ibstat, ibstatus, /sys/class/infiniband
# ----------------------------------------------------------------------------------------------------------------

SYSFS_STATE = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED"}
SYSFS_PHYS = {"LinkUp": "5: LinkUp", "Disabled": "3: Disabled", "Polling": "2: Polling", "Sleep": "1: Sleep",
              "LinkErrorRecovery": "6: LinkErrorRecovery"}


def port_guid(device, port):
    """The port GUID: the node GUID on InfiniBand, the EUI-64 of the MAC on Ethernet (RoCE) ports."""
    guid = device["node_guid"]
    if port["link_layer"] != "Ethernet":
        return guid
    raw = guid.to_bytes(8, "big")
    mac = raw[:3] + raw[5:]
    return int.from_bytes(bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:], "big")


def render_ibstat(node, names=None):
    """ibstat [CA]: every CA sorted by name as ibstat lists them (mlx5_10 before mlx5_2)."""
    devices = sorted(node.ib, key=lambda d: d["name"])
    if names:
        known = dict((d["name"], d) for d in devices)
        for name in names:
            if name not in known:
                raise SimError(255, stderr="ibpanic: [%d] main: stat of IB device '%s' failed: No such file or "
                                           "directory\n" % (4000 + digest(name) % 60000, name))
        devices = [known[name] for name in names]
    lines = []
    for device in devices:
        lines += ["CA '%s'" % device["name"],
                  "\tCA type: %s" % device["hca_type"],
                  "\tNumber of ports: %d" % len(device["ports"]),
                  "\tFirmware version: %s" % device["fw_ver"],
                  "\tHardware version: 0",
                  "\tNode GUID: 0x%016x" % device["node_guid"],
                  "\tSystem image GUID: 0x%016x" % device["node_guid"]]
        for port in device["ports"]:
            lines += ["\tPort %d:" % port["port"],
                      "\t\tState: %s" % port["state"],
                      "\t\tPhysical state: %s" % port["phys_state"],
                      "\t\tRate: %s" % port["rate"],
                      "\t\tBase lid: %d" % port["lid"],
                      "\t\tLMC: 0",
                      "\t\tSM lid: %d" % port["sm_lid"],
                      "\t\tCapability mask: %s" % port["cap_mask"],
                      "\t\tPort GUID: 0x%016x" % port_guid(device, port),
                      "\t\tLink layer: %s" % port["link_layer"]]
    return "".join(line + "\n" for line in lines)


def render_ibstat_list(node):
    """ibstat -l: the CA names."""
    return "".join(d["name"] + "\n" for d in sorted(node.ib, key=lambda d: d["name"]))


def gid(device, port):
    """The port's default GID (fe80::/64 plus the port GUID) as ibstatus prints it."""
    guid = "%016x" % port_guid(device, port)
    return "fe80:0000:0000:0000:" + ":".join(guid[i:i + 4] for i in range(0, 16, 4))


def render_ibstatus(node, names=None):
    """ibstatus [device ...]: the tab-indented block the ibstatus script prints for every port."""
    lines = []
    for device in sorted(node.ib, key=lambda d: d["name"]):
        if names and device["name"] not in names:
            continue
        for port in device["ports"]:
            lines += ["Infiniband device '%s' port %d status:" % (device["name"], port["port"]),
                      "\tdefault gid:\t %s" % gid(device, port),
                      "\tbase lid:\t 0x%x" % port["lid"],
                      "\tsm lid:\t\t 0x%x" % port["sm_lid"],
                      "\tstate:\t\t %s" % SYSFS_STATE[port["state"]],
                      "\tphys state:\t %s" % SYSFS_PHYS.get(port["phys_state"], port["phys_state"]),
                      "\trate:\t\t %d Gb/sec (%s)" % (port["rate"], port["rate_desc"]),
                      "\tlink_layer:\t %s" % port["link_layer"], ""]
    return "".join(line + "\n" for line in lines)


def sysfs_files(node):
    """{relative path: content} of /sys/class/infiniband for the node (files end with a newline, as in sysfs)."""
    files = {}
    for device in node.ib:
        guid = "%016x" % device["node_guid"]
        base = device["name"] + "/"
        files[base + "fw_ver"] = device["fw_ver"]
        files[base + "hca_type"] = device["hca_type"]
        files[base + "board_id"] = device["board_id"]
        files[base + "node_guid"] = ":".join(guid[i:i + 4] for i in range(0, 16, 4))
        files[base + "sys_image_guid"] = files[base + "node_guid"]
        files[base + "node_type"] = "1: CA"
        for port in device["ports"]:
            pbase = base + "ports/%d/" % port["port"]
            files[pbase + "state"] = SYSFS_STATE[port["state"]]
            files[pbase + "phys_state"] = SYSFS_PHYS.get(port["phys_state"], port["phys_state"])
            files[pbase + "rate"] = "%d Gb/sec (%s)" % (port["rate"], port["rate_desc"])
            files[pbase + "link_layer"] = port["link_layer"]
            files[pbase + "lid"] = "0x%x" % port["lid"]
            files[pbase + "sm_lid"] = "0x%x" % port["sm_lid"]
            files[pbase + "lid_mask_count"] = "0"
            files[pbase + "cap_mask"] = port["cap_mask"]
            seed = (node.hostname, device["name"], port["port"])
            traffic = dict((name, spread((name,) + seed, 10 ** 6, 10 ** 12)) for name in IB_TRAFFIC_COUNTERS)
            traffic["port_xmit_data"] = traffic["port_rcv_data"] = spread(("data",) + seed, 10 ** 11, 10 ** 14)
            for name, value in sorted(list(port["counters"].items()) + list(traffic.items())):
                files[pbase + "counters/" + name] = str(value)
            for name in IB_HW_COUNTERS:
                files[pbase + "hw_counters/" + name] = str(spread(("hw", name) + seed, 0, 9)
                                                           if name in ("lifespan", "roce_adp_retrans") else 0)
    return dict((path, content + "\n") for path, content in files.items())


# ----------------------------------------------------------------------------------------------------------------
# Kernel log (journalctl -o short-iso style) and nvidia-fabricmanager state
# ----------------------------------------------------------------------------------------------------------------

def kernel_log_lines(node):
    """The node's kernel log: the driver load an hour ago, then the fault events, the last a few seconds ago."""
    def stamp(seconds_ago):
        moment = node.now - datetime.timedelta(seconds=seconds_ago)
        return moment.strftime("%Y-%m-%dT%H:%M:%S+00:00")

    def prefix(source):
        if source == "kernel":
            return "%s kernel: " % node.hostname
        return "%s %s[%d]: " % (node.hostname, source, 600 + digest(source) % 400)

    lines = ["%s %sNVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
             "(dvs-builder@U22-I3-B10-02-5)  %s" % (stamp(3600), prefix("kernel"), node.driver,
                                                    ctime(node.now - datetime.timedelta(days=40)))]
    if node.nvml_error == ("not_loaded",):
        lines = []
    groups = node.event_groups
    for event in node.events:
        seconds_ago = 3 * (groups - event["group"]) + 2
        lines.append("%s %s%s" % (stamp(seconds_ago), prefix(event["source"]), event["message"]))
    return lines


def render_kernel_log(node):
    """The kernel log as text."""
    return "".join(line + "\n" for line in kernel_log_lines(node))


def fabricmanager_state(node):
    """(stdout, rc) of systemctl is-active nvidia-fabricmanager."""
    state = node.fabric_manager or "inactive"
    return state + "\n", 0 if state == "active" else 3


# ----------------------------------------------------------------------------------------------------------------
# dcgmi diag (DCGM 3.x text table and JSON)
# ----------------------------------------------------------------------------------------------------------------

DCGM_DEPLOYMENT = ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                   "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom")
# (category, test, lowest level that runs it)
DCGM_PER_GPU = (("Integration", "PCIe", 2), ("Hardware", "GPU Memory", 2), ("Hardware", "Diagnostic", 3),
                ("Stress", "Targeted Stress", 3), ("Stress", "Targeted Power", 3), ("Stress", "Memory Bandwidth", 3),
                ("Hardware", "Memtest", 4), ("Stress", "Pulse Test", 4))
DCGM_ALIASES = {"memory": "GPU Memory", "gpu memory": "GPU Memory", "pcie": "PCIe", "diagnostic": "Diagnostic",
                "targeted stress": "Targeted Stress", "targeted power": "Targeted Power",
                "memory bandwidth": "Memory Bandwidth", "memtest": "Memtest", "pulse test": "Pulse Test"}
DCGM_NVVS_ERROR = 226      # DCGM_ST_NVVS_ERROR (-30) as an exit status: the diagnostic ran and found a failure


def dcgm_findings(node, level):
    """{test: {gpu index or None: (status, message)}} for what the node state makes DCGM report."""
    findings = {}

    def add(test, gpu, status, message):
        findings.setdefault(test, {})[gpu] = (status, message)

    for gpu in node.visible_gpus():
        index = gpu["index"]
        if not gpu["persistence"]:
            add("Persistence Mode", None, "Fail", "Persistence mode for GPU %d is currently disabled. The DCGM "
                "diagnostic requires peristence mode to be enabled. Enable persistence mode by running "
                "\"nvidia-smi -i <gpuId> -pm 1 \" as root." % index)
        remap = gpu["remap"] or {}
        if remap.get("pending"):
            add("Page Retirement/Row Remap", None, "Fail",
                "GPU %d has uncorrectable memory errors and row remappings are pending" % index)
        elif remap.get("failure"):
            add("Page Retirement/Row Remap", None, "Fail", "GPU %d had a row remapping failure" % index)
        elif gpu["ecc"]["volatile"]["dram_unc"] and _ecc_on(gpu):
            add("Page Retirement/Row Remap", None, "Fail", "Detected %d volatile double-bit ECC error(s) in GPU %d."
                % (gpu["ecc"]["volatile"]["dram_unc"], index))
        elif gpu["retired"] and gpu["retired"]["pending"]:
            add("Page Retirement/Row Remap", None, "Fail",
                "GPU %d had uncorrectable memory errors and pending page retirements" % index)
        if level < 2:
            continue
        down = [n for n, link in enumerate(gpu["nvlinks"]) if not link["active"]]
        noisy = [n for n, link in enumerate(gpu["nvlinks"]) if link["replay"] or link["crc"]]
        if gpu["pcie"]["width"] < gpu["pcie"]["width_max"]:
            add("PCIe", index, "Fail", "GPU %d is running at PCI link width %dX, which is below the minimum "
                "allowed link width of %dX (parameter 'min_pci_width')" % (
                    index, gpu["pcie"]["width"], gpu["pcie"]["width_max"]))
        elif down:
            add("PCIe", index, "Fail", "GPU %d's NvLink link %d is currently down" % (index, down[0]))
        elif noisy:
            link = gpu["nvlinks"][noisy[0]]
            add("PCIe", index, "Fail", "Detected %d CRC Flit NvLink errors on GPU %d's NVLink (should be 0)"
                % (link["crc"], index))
        if not _ecc_on(gpu):
            add("GPU Memory", index, "Skip", "Skipping test because ECC is not enabled on GPU %d" % index)
        if gpu["reasons"]["hw_thermal_slowdown"] or gpu["temp"] >= gpu["model"]["slowdown_c"]:
            add("GPU Memory", index, "Fail", "GPU %d Thermal violations totaling 13.3 seconds started at 9.7 "
                "seconds into the test for GPU %d Verify that the cooling on this machine is functional, including "
                "external, thermal material interface, fans, and any other components." % (index, index))
    for test, index, message in node.dcgm_failures:
        add(DCGM_ALIASES.get(test.lower(), test), index, "Fail", message)
    return findings


def dcgm_plan(level):
    """[(category, test, per_gpu)] that dcgmi diag -r level runs."""
    plan = [("Deployment", test, False) for test in DCGM_DEPLOYMENT]
    plan += [(category, test, True) for category, test, lowest in DCGM_PER_GPU if lowest <= level]
    return plan


def dcgm_results(node, level):
    """[(category, test, [(gpu or None, status, message)])] for a run of the given level."""
    findings = dcgm_findings(node, level)
    gpus = [g["index"] for g in node.visible_gpus()]
    results = []
    for category, test, per_gpu in dcgm_plan(level):
        found = findings.get(test, {})
        if per_gpu:
            rows = [(index,) + found.get(index, ("Pass", None)) for index in gpus]
        else:
            failing = [v for k, v in sorted(found.items(), key=lambda kv: str(kv[0]))]
            rows = [(None, "Fail", failing[0][1])] if failing else [(None, "Pass", None)]
        results.append((category, test, rows))
    for test, index, _message in node.dcgm_failures:
        name = DCGM_ALIASES.get(test.lower(), test)
        if not any(t == name for _c, t, _r in results) and name not in DCGM_DEPLOYMENT:
            results.append(("Custom", name, [(i,) + findings[name].get(i, ("Pass", None)) for i in gpus]))
    return results


def _wrap(text, width=45):
    return [text[i:i + width] for i in range(0, len(text), width)] or [""]


def _dcgm_row(name, value):
    return "| %-25s | %-46s |" % (name, value)


def render_dcgm_text(node, level):
    """dcgmi diag -r N: the DCGM 3.x result table."""
    border = "+" + "-" * 27 + "+" + "-" * 48 + "+"
    ids = ",".join(g["model"]["pci_device_id"][:4] for g in node.visible_gpus())
    lines = ["Successfully ran diagnostic for group.", border, _dcgm_row("Diagnostic", "Result"),
             "+" + "=" * 27 + "+" + "=" * 48 + "+",
             "|-----  Metadata  ----------+------------------------------------------------|",
             _dcgm_row("DCGM Version", dcgm_version(node)),
             _dcgm_row("Driver Version Detected", node.driver),
             _dcgm_row("GPU Device IDs Detected", ids[:46])]
    category_seen = None
    for category, test, rows in dcgm_results(node, level):
        if category != category_seen:
            heading = "-----  %s  " % category
            lines.append(("|%s+" if category == "Deployment" else "+%s+") % heading.ljust(27, "-")
                         + "-" * 48 + ("|" if category == "Deployment" else "+"))
            category_seen = category
        lines.extend(_dcgm_test_rows(test, rows))
    lines.append(border)
    return "\n".join(lines) + "\n"


def _dcgm_test_rows(test, rows):
    failed = [r for r in rows if r[1] != "Pass"]
    if rows[0][0] is None:
        status, message = rows[0][1], rows[0][2]
        out = [_dcgm_row(test, status)]
        if message:
            chunks = _wrap(message)
            out.append(_dcgm_row("Error" if status == "Fail" else "Warning", chunks[0]))
            out.extend(_dcgm_row("", chunk) for chunk in chunks[1:])
        return out
    if not failed:
        return [_dcgm_row(test, "Pass - All")]
    passed = [str(r[0]) for r in rows if r[1] == "Pass"]
    out = []
    label = test
    if passed:
        out.append(_dcgm_row(label, "Pass - GPUs: " + ", ".join(passed)))
        label = ""
    for index, status, message in failed:
        out.append(_dcgm_row(label, "%s - GPU: %d" % (status, index)))
        label = ""
        chunks = _wrap(message or "")
        out.append(_dcgm_row("Warning", chunks[0]))
        out.extend(_dcgm_row("", chunk) for chunk in chunks[1:])
    return out


def dcgm_version(node):
    """The DCGM version of the profile."""
    return str((node.profile.get("dcgm") or {}).get("version", "3.3.9"))


def dcgm_json(node, level):
    """dcgmi diag -r N -j as a Python structure (DCGM 3.x: 'DCGM GPU Diagnostic' > test_categories)."""
    categories = []
    for category, test, rows in dcgm_results(node, level):
        if not categories or categories[-1]["category"] != category:
            categories.append({"category": category, "tests": []})
        results = []
        for index, status, message in rows:
            result = {}
            if index is not None:
                result["gpu_ids"] = str(index)
            result["status"] = status
            if message:
                key = "info" if status == "Skip" else "warnings"
                result[key] = [message] if key == "info" else [
                    {"error_category": 2, "error_id": 83, "error_severity": 2, "warning": message}]
            results.append(result)
        categories[-1]["tests"].append({"name": test, "results": results})
    gpus = node.visible_gpus()
    return {"DCGM GPU Diagnostic": {
        "test_categories": categories,
        "version": dcgm_version(node),
        "Driver Version Detected": node.driver,
        "GPU Device IDs": [g["model"]["pci_device_id"][:4] for g in gpus],
        "GPU Device Serials": dict((str(g["index"]), g["serial"]) for g in gpus)}}


def _is_container(value):
    return isinstance(value, dict) and bool(value) or (
        isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value))


def styled_json(value, depth=0):
    """JSON as jsoncpp's StyledStreamWriter (dcgmi) writes it: tabs, sorted keys, '"key" : ', brackets on own lines."""
    pad = "\t" * depth
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key in sorted(value):
            item = value[key]
            joint = " : \n%s\t" % pad if _is_container(item) else " : "
            items.append("%s\t%s%s%s" % (pad, json.dumps(key), joint, styled_json(item, depth + 1)))
        return "{\n%s\n%s}" % (",\n".join(items), pad)
    if isinstance(value, list):
        if not _is_container(value):
            return "[ %s ]" % ", ".join(json.dumps(item) for item in value) if value else "[]"
        items = ["%s\t%s" % (pad, styled_json(item, depth + 1)) for item in value]
        return "[\n%s\n%s]" % (",\n".join(items), pad)
    return json.dumps(value)


def render_dcgm_json(node, level):
    """dcgmi diag -r N -j."""
    return styled_json(dcgm_json(node, level)) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# all_reduce_perf (nccl-tests, one node)
# ----------------------------------------------------------------------------------------------------------------

def parse_size(text):
    """Bytes from '8', '64K', '8G' as nccl-tests reads sizes."""
    match = re.match(r"^(\d+)([KMG]?)B?$", str(text).strip().upper())
    if not match:
        raise SimError(1, stdout="Invalid size specified: %s\n" % text)
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def nccl_options(args):
    """The all_reduce_perf options gpusim understands (-b -e -f -g -n -w -c and their long forms)."""
    options = {"b": 33554432, "e": 33554432, "f": 2, "g": 1, "n": 20, "w": 5, "c": 1}
    names = {"--minbytes": "b", "--maxbytes": "e", "--stepfactor": "f", "--ngpus": "g", "--iters": "n",
             "--warmup_iters": "w", "--check": "c"}
    index = 0
    while index < len(args):
        arg = args[index]
        key = names.get(arg.split("=")[0], arg[1:2] if arg.startswith("-") and len(arg) == 2 else None)
        if key is None or key not in options:
            raise SimError(1, stdout="invalid option -- '%s'\n" % arg.lstrip("-"))
        if "=" in arg:
            value = arg.split("=", 1)[1]
        else:
            index += 1
            value = args[index] if index < len(args) else ""
        options[key] = parse_size(value) if key in ("b", "e") else int(value)
        index += 1
    return options


def nccl_failure(node, gpus_wanted):
    """The CUDA error all_reduce_perf stops with on this node, or None when it can run."""
    if node.nvml_error == ("not_loaded",):
        return "no CUDA-capable device is detected"
    if node.nvml_error:
        return "system has unsupported display driver / cuda driver combination"
    if node.lost_gpus():
        return "unknown error"
    if gpus_wanted > len(node.gpus):
        return "invalid device ordinal"
    if node.fabric_manager not in (None, "active") and any(g["fabric"] for g in node.gpus):
        return "system not yet initialized"
    return None


def nccl_peak_busbw(node, ngpus):
    """The bus bandwidth large messages reach: the profile's plateau, less for NVLinks that are down."""
    if ngpus < 2:
        return 0.0
    plateau = float((node.profile.get("nccl") or {}).get("busbw_gbps", 100.0)) * node.nccl_factor
    links = [sum(l["active"] for l in g["nvlinks"]) / float(len(g["nvlinks"])) for g in node.gpus if g["nvlinks"]]
    return plateau * (min(links) if links else 1.0)


def render_all_reduce(node, args):
    """all_reduce_perf ARGS: the nccl-tests table for one process driving -g GPUs."""
    opts = nccl_options(args)
    lines = ["# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d agg iters: 1 "
             "validation: %d graph: 0" % (opts["g"], opts["b"], opts["e"], opts["f"], opts["w"], opts["n"], opts["c"]),
             "#", "# Using devices"]
    failure = nccl_failure(node, opts["g"])
    if failure:
        raise SimError(2, stdout="\n".join(lines[:2]) + "\n%s: Test CUDA failure common.cu:1033 '%s'\n .. %s pid %d: "
                       "Test failure common.cu:1130\n" % (node.hostname, failure, node.hostname, 41000))
    for rank in range(opts["g"]):
        gpu = node.gpus[rank]
        lines.append("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s" % (
            rank, 41000, node.hostname, rank, short_bus(gpu["bus_id"]).lower(), gpu["name"]))
    version = (node.profile.get("nccl") or {}).get("version", "2.21.5+cuda12.4")
    lines += ["NCCL version %s" % version, "#",
              "#                                                              out-of-place                       "
              "in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
              "  (GB/s)       "]
    size, busbws = opts["b"], []
    factor = 2.0 * (opts["g"] - 1) / opts["g"] if opts["g"] > 1 else 1.0
    peak_algbw = nccl_peak_busbw(node, opts["g"]) / factor      # GB/s, i.e. 1e3 bytes per microsecond
    while size <= opts["e"]:
        row = [size, size // 4, "float", "sum", -1]
        for place in (0, 1):
            micros = (24.0 + 1.3 * place) + (size / (peak_algbw * 1e3) if peak_algbw else 0.0)
            algbw = size / (micros * 1e3)
            row += [_nccl_time(micros), algbw, algbw * factor if opts["g"] > 1 else 0.0, 0]
        busbws.append(row[7])
        lines.append("%12d  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5d  %7s  %6.2f  %6.2f  %5d" % tuple(row))
        size = size * opts["f"] if opts["f"] > 1 else size + opts["b"]
    lines += ["# Out of bounds values : 0 OK",
              "# Avg bus bandwidth    : %g" % round(sum(busbws) / len(busbws) if busbws else 0.0, 4), "#"]
    return "\n".join(lines) + "\n\n"


def _nccl_time(micros):
    if micros >= 10000:
        return "%7.0f" % micros
    if micros >= 100:
        return "%7.1f" % micros
    return "%7.2f" % micros


# ----------------------------------------------------------------------------------------------------------------
# The tools' command lines
# ----------------------------------------------------------------------------------------------------------------

NVSMI_USAGE = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
NVML_ERRORS = {
    "not_loaded": (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                      "the latest NVIDIA driver is installed and running.\n\n"),
    "mismatch": (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: %s\n"),
}
DEVICE_HANDLE_RC = 255   # NVML_ERROR_UNKNOWN ("Unknown Error") maps to nvidia-smi's "other error" exit status


def nvml_check(node):
    """Fail every nvidia-smi call the way a broken driver does."""
    if node.nvml_error:
        rc, text = NVML_ERRORS[node.nvml_error[0]]
        if node.nvml_error[0] == "mismatch":
            text = text % ".".join(node.nvml_error[1].split(".")[:2])
        raise SimError(rc, stdout=text)


def parse_nvsmi_args(args):
    """{'mode': ..., 'id': ..., ...} from nvidia-smi's arguments; SimError for what nvidia-smi would refuse."""
    opts = {"mode": "table", "xml": False, "id": None, "fields": None, "format": None, "sub": None, "flags": set()}
    index = 0
    while index < len(args):
        arg = args[index]
        value = None
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)
        if arg in ("nvlink", "topo") and index == 0:
            opts["sub"] = arg
        elif arg in ("-q", "--query"):
            opts["mode"] = "query"
        elif arg in ("-x", "--xml-format"):
            opts["xml"] = True
        elif arg in ("-L", "--list-gpus"):
            opts["mode"] = "list"
        elif arg == "--version":
            opts["mode"] = "version"
        elif arg in ("-r", "--gpu-reset") and not opts["sub"]:
            opts["mode"] = "reset"
        elif arg in ("-s", "--status", "-e", "--errorcounters", "-m", "--matrix") and opts["sub"]:
            opts["flags"].add(arg.lstrip("-")[0])
        elif arg in ("-i", "--id", "--query-gpu", "--query-compute-apps", "--format"):
            if value is None:
                index += 1
                if index >= len(args):
                    raise SimError(2, stdout=NVSMI_USAGE)
                value = args[index]
            key = {"-i": "id", "--id": "id", "--query-gpu": "fields", "--query-compute-apps": "apps",
                   "--format": "format"}[arg]
            opts[key] = value
        elif arg.startswith("-i") and len(arg) > 2:
            opts["id"] = arg[2:]
        else:
            raise SimError(2, stdout=NVSMI_USAGE)
        index += 1
    if opts["fields"] is not None:
        opts["mode"] = "csv"
    if opts.get("apps") is not None:
        opts["mode"] = "apps"
    return opts


def select_gpus(node, wanted):
    """The GPUs an -i argument names (index, UUID or PCI bus id), all of them without -i."""
    if wanted is None:
        return node.gpus
    wanted = wanted.strip()
    for gpu in node.gpus:
        bus = gpu["bus_id"]
        if wanted in (str(gpu["index"]), gpu["uuid"]) or wanted.upper() in (bus, bus[4:], bus[9:]):
            return [gpu]
    raise SimError(6, stdout="No devices were found\n")


def lost_prefix(gpus):
    """The lines nvidia-smi prints for GPUs it cannot get a handle to."""
    return "".join("Unable to determine the device handle for GPU%s: Unknown Error\n" % g["bus_id"][4:]
                   for g in gpus if g["lost"])


def run_nvidia_smi(node, args):
    """nvidia-smi ARGS -> (rc, stdout, stderr)."""
    if "-h" in args or "--help" in args:
        return 0, "NVIDIA System Management Interface -- v%s\n" % node.driver, ""
    opts = parse_nvsmi_args(args)
    nvml_check(node)
    if opts["mode"] == "version":
        return 0, render_version(node), ""
    selected = select_gpus(node, opts["id"])
    if opts["mode"] == "reset":
        return reset_gpus(node, selected)
    gpus = [g for g in selected if not g["lost"]]
    prefix = lost_prefix(selected)
    rc = DEVICE_HANDLE_RC if prefix else 0
    if opts["sub"] == "nvlink":
        if opts["flags"] & {"e"}:
            return rc, prefix + render_nvlink_errors(node, gpus), ""
        if opts["flags"] & {"s"}:
            return rc, prefix + render_nvlink_status(node, gpus), ""
        raise SimError(2, stdout=NVSMI_USAGE)
    if opts["sub"] == "topo":
        if "m" not in opts["flags"]:
            raise SimError(2, stdout=NVSMI_USAGE)
        return rc, prefix + render_topo(node, gpus), ""
    if opts["mode"] == "csv":
        return rc, prefix + run_query_csv(node, gpus, opts), ""
    if opts["mode"] == "apps":
        return rc, prefix + run_query_apps(node, gpus, opts), ""
    renderers = {"query": render_query_xml if opts["xml"] else render_query_text, "list": render_list,
                 "table": render_default}
    return rc, prefix + renderers[opts["mode"]](node, gpus), ""


RESET_IN_USE_RC = 255


def gpu_holders(node, gpu):
    """What holds a GPU open: the simulated daemons that run, and a gpu_in_use process."""
    holders = sorted(node.running)
    for index in (None, gpu["index"]):
        if index in node.gpu_users:
            holders.append(node.gpu_users[index])
    return holders


def reset_gpus(node, gpus):
    """nvidia-smi -r [-i N]: reset the GPUs, or refuse (exit 255) while any of them is held, naming each one."""
    if node.gpus and any(g["lost"] for g in gpus):
        raise SimError(DEVICE_HANDLE_RC, stdout=lost_prefix(gpus))
    busy = [g for g in gpus if gpu_holders(node, g)]
    if busy:
        many = len(busy) > 1
        why = ("%d %s currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, "
               "graphics application such as an X server, or a monitoring application such as another instance of "
               "nvidia-smi). Please first kill all processes using %s and all compute applications running in the "
               "system.\n") % (len(busy), "devices are" if many else "device is",
                               "these devices" if many else "this device")
        text = ("The following GPUs could not be reset:\n"
                + "".join("  GPU %s: In use by another client\n" % g["bus_id"] for g in busy) + "\n" + why)
        raise SimError(RESET_IN_USE_RC, stdout=text)
    for gpu in gpus:
        log_service_event(node.log_dir, "reset", "gpu%d" % gpu["index"])
    return 0, "".join("GPU %s was successfully reset.\n" % g["bus_id"] for g in gpus), ""


def run_query_csv(node, gpus, opts):
    """--query-gpu=... --format=csv[,noheader][,nounits]."""
    formats = [f.strip() for f in (opts["format"] or "").split(",") if f.strip()]
    if "csv" not in formats or any(f not in ("csv", "noheader", "nounits") for f in formats):
        raise SimError(2, stdout="'--format' switch is missing or invalid\n\n" if not formats else NVSMI_USAGE)
    names = [n.strip() for n in opts["fields"].split(",") if n.strip()]
    return render_query_csv(node, gpus, names, header="noheader" not in formats, units="nounits" not in formats)


COMPUTE_APP_FIELDS = {"pid": "pid", "process_name": "process_name", "name": "process_name", "gpu_uuid": "gpu_uuid",
                      "gpu_bus_id": "gpu_bus_id", "used_memory": "used_gpu_memory [MiB]",
                      "used_gpu_memory": "used_gpu_memory [MiB]"}


def run_query_apps(node, gpus, opts):
    """--query-compute-apps=pid,process_name,... --format=csv[,noheader][,nounits]: the gpu_in_use processes (the
    simulated daemons hold the GPUs but are not compute applications, as on a real node)."""
    formats = [f.strip() for f in (opts["format"] or "").split(",") if f.strip()]
    if "csv" not in formats or any(f not in ("csv", "noheader", "nounits") for f in formats):
        raise SimError(2, stdout="'--format' switch is missing or invalid\n\n" if not formats else NVSMI_USAGE)
    names = [n.strip() for n in opts["apps"].split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPUTE_APP_FIELDS]
    if unknown or not names:
        raise SimError(2, stdout='Field "%s" is not a valid field to query.\n\n' % (unknown or [""])[0])
    lines = [", ".join(COMPUTE_APP_FIELDS[n] for n in names)] if "noheader" not in formats else []
    for gpu in gpus:
        name = node.gpu_users.get(gpu["index"], node.gpu_users.get(None))
        if name is None:
            continue
        values = {"pid": str(4000 + gpu["index"]), "process_name": name, "name": name, "gpu_uuid": gpu["uuid"],
                  "gpu_bus_id": gpu["bus_id"],
                  "used_memory": "1024" if "nounits" in formats else "1024 MiB"}
        values["used_gpu_memory"] = values["used_memory"]
        lines.append(", ".join(values[n] for n in names))
    return "".join(line + "\n" for line in lines)


def run_ibstat(node, args):
    """ibstat [-l] [CA ...]."""
    if "-l" in args or "--list_of_cas" in args:
        return 0, render_ibstat_list(node), ""
    names = [a for a in args if not a.startswith("-") and not a.isdigit()]
    return 0, render_ibstat(node, names), ""


def run_ibstatus(node, args):
    """ibstatus [device ...]."""
    return 0, render_ibstatus(node, set(a.split(":")[0] for a in args)), ""


DCGM_LEVELS = {"1": 1, "2": 2, "3": 3, "4": 4, "short": 1, "medium": 2, "long": 3, "xlong": 4}


def run_dcgmi(node, args):
    """dcgmi diag -r 1|2|3|4 [-j]."""
    if not args or args[0] != "diag":
        raise SimError(255, stdout="gpusim: only 'dcgmi diag -r LEVEL [-j]' is simulated\n")
    level = None
    for index, arg in enumerate(args):
        if arg in ("-r", "--run") and index + 1 < len(args):
            level = DCGM_LEVELS.get(args[index + 1])
        elif arg.startswith("--run="):
            level = DCGM_LEVELS.get(arg.split("=", 1)[1])
    if level is None:
        raise SimError(255, stdout="Error: Invalid value for --run. Valid values are 1, 2, 3, 4 (or short, medium, "
                                   "long, xlong).\n")
    if node.nvml_error or (node.managed and DCGM_UNIT not in node.running):
        raise SimError(235, stdout="Error: unable to establish a connection to the specified host: localhost\n"
                                   "Error: Unable to connect to host engine. Host engine connection "
                                   "invalid/disconnected.\n")
    failed = any(status == "Fail" for _c, _t, rows in dcgm_results(node, level) for _g, status, _m in rows)
    text = render_dcgm_json(node, level) if ("-j" in args or "--json" in args) else render_dcgm_text(node, level)
    return (DCGM_NVVS_ERROR if failed else 0), text, ""


def run_all_reduce(node, args):
    """all_reduce_perf ARGS."""
    return 0, render_all_reduce(node, args), ""


def run_systemctl(node, args):
    """systemctl is-active nvidia-fabricmanager (only that)."""
    if len(args) == 2 and args[0] == "is-active":
        if args[1].replace(".service", "") == FM_UNIT:
            out, rc = fabricmanager_state(node)
            return rc, out, ""
        return 3, "inactive\n", ""
    raise SimError(1, stderr="gpusim: only 'systemctl is-active %s' is simulated\n" % FM_UNIT)


def run_fabricmanager(node, args):
    """nv-fabricmanager --version (the daemon itself runs as gpusim service nvidia-fabricmanager)."""
    if args[:1] in (["--version"], ["-v"]):
        return 0, "Fabric Manager version is : %s\n" % node.fabricmanager_version, ""
    raise SimError(1, stderr="gpusim: only 'nv-fabricmanager --version' is simulated (the daemon is "
                             "'gpusim service %s')\n" % FM_UNIT)


TOOL_RUNNERS = {"nvidia-smi": run_nvidia_smi, "ibstat": run_ibstat, "ibstatus": run_ibstatus, "dcgmi": run_dcgmi,
                "all_reduce_perf": run_all_reduce, "nv-fabricmanager": run_fabricmanager,
                "systemctl": run_systemctl}


def run_tool(tool, args, env, profile=None, faults=()):
    """Run a simulated tool: (rc, stdout, stderr)."""
    try:
        node = build_node(profile if profile is not None else load_profile(env), env, faults)
        return TOOL_RUNNERS[tool](node, list(args))
    except SimError as error:
        return error.rc, error.stdout, error.stderr


# ----------------------------------------------------------------------------------------------------------------
# gpusim setup: device nodes, /sys/class/infiniband, kernel log, fabric manager state (as root, in a container)
# ----------------------------------------------------------------------------------------------------------------

class Changes(object):
    """What setup (or setup --check) changes, in the order it does it."""

    def __init__(self, check):
        self.check = check
        self.changes = []
        self.skipped = []

    def write(self, path, content, rotate=False):
        """Write a file when its content differs; ``rotate``: as a new file renamed over the old one (the kernel log:
        what follows it by position sees a log rotated, as logrotate's create does, never a file rewritten in place)."""
        try:
            with open(path) as handle:
                if handle.read() == content:
                    return
        except (IOError, OSError):
            pass
        self.changes.append("write %s" % path)
        if not self.check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".new" if rotate else path, "w") as handle:
                handle.write(content)
            if rotate:
                os.replace(path + ".new", path)

    def remove(self, path):
        """Remove a file, device node or directory tree."""
        self.changes.append("remove %s" % path)
        if not self.check:
            if os.path.isdir(path) and not os.path.islink(path):
                import shutil  # pylint: disable=import-outside-toplevel
                shutil.rmtree(path)
            else:
                os.unlink(path)


def setup_paths(env):
    """(root, dev dir, log dir): $GPUSIM_ROOT, $GPUSIM_DEV_DIR, $GPUSIM_LOG_DIR or the container defaults."""
    return (env.get("GPUSIM_ROOT", DEFAULT_ROOT), env.get("GPUSIM_DEV_DIR", DEFAULT_DEV_DIR),
            env.get("GPUSIM_LOG_DIR", DEFAULT_LOG_DIR))


def _is_char_node(path, major):
    try:
        mode = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISCHR(mode.st_mode) and os.major(mode.st_rdev) == major


def _sync_char_nodes(directory, pattern, major, wanted, changes):
    """Make ``directory`` hold exactly the character devices ``wanted`` ({name: minor}, char ``major``, mode 0666)
    among its entries that match ``pattern``: the others of that major are removed (as root; skipped otherwise)."""
    present = [n for n in (os.listdir(directory) if os.path.isdir(directory) else []) if re.match(pattern, n)]
    for name in sorted(set(present) - set(wanted)):
        if _is_char_node(os.path.join(directory, name), major):
            changes.remove(os.path.join(directory, name))
    for name, minor in sorted(wanted.items()):
        path = os.path.join(directory, name)
        if _is_char_node(path, major) and os.minor(os.lstat(path).st_rdev) == minor:
            if stat.S_IMODE(os.lstat(path).st_mode) != 0o666:
                changes.changes.append("chmod 0666 %s" % path)
                if not changes.check:
                    os.chmod(path, 0o666)
            continue
        if os.geteuid() != 0:
            changes.skipped.append("mknod %s (not root)" % path)
            continue
        changes.changes.append("mknod %s c %d %d" % (path, major, minor))
        if not changes.check:
            os.makedirs(directory, exist_ok=True)
            if os.path.lexists(path):
                os.unlink(path)
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(path, 0o666)


def setup_device_nodes(node, dev_dir, changes):
    """/dev/nvidiactl and /dev/nvidiaN (char 195, mode 0666) for every GPU the driver knows; none without driver."""
    wanted = {} if node.nvml_error == ("not_loaded",) else dict(
        [("nvidiactl", NVIDIACTL_MINOR)] + [("nvidia%d" % g["minor"], g["minor"]) for g in node.gpus])
    _sync_char_nodes(dev_dir, r"^nvidia(\d+|ctl)$", NV_MAJOR, wanted, changes)


def setup_ib_nodes(node, dev_dir, changes):
    """/dev/infiniband/uverbsN (char 231, 192 + N, mode 0666) for every InfiniBand or RoCE device of the profile, as
    the kernel makes them once the RDMA stack is loaded: what an RDMA program (and a container given the directory)
    opens."""
    wanted = dict(("uverbs%d" % n, UVERBS_MINOR_BASE + n) for n in range(len(node.ib)))
    _sync_char_nodes(os.path.join(dev_dir, "infiniband"), r"^uverbs\d+$", UVERBS_MAJOR, wanted, changes)


def write_tree(files, top, changes):
    """Make the directory top hold exactly these files (relative path -> content)."""
    for path, content in sorted(files.items()):
        changes.write(os.path.join(top, path), content)
    if not os.path.isdir(top):
        if not changes.check:
            os.makedirs(top, exist_ok=True)
        return
    wanted_dirs = set()
    for path in files:
        parts = path.split("/")
        wanted_dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    for dirpath, dirnames, filenames in os.walk(top, topdown=True):
        rel = os.path.relpath(dirpath, top)
        rel = "" if rel == "." else rel + "/"
        for name in list(dirnames):
            if rel + name not in wanted_dirs:
                changes.remove(os.path.join(dirpath, name))
                dirnames.remove(name)
        for name in filenames:
            if rel + name not in files:
                changes.remove(os.path.join(dirpath, name))


def profile_fingerprint(node):
    """What the kernel log depends on besides the time: the profile with its faults, and the host name."""
    text = json.dumps([node.profile, list(node.faults), node.hostname], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_setup(env, options):
    """gpusim setup [--check] [--profile FILE] [--fault SPEC ...]: make the container look like the profile's node."""
    if os.path.isdir("/proc/driver/nvidia") and env.get("GPUSIM_FORCE") != "1":
        raise SimError(1, stderr="gpusim: a real NVIDIA driver is loaded on this machine; refusing to set up a "
                                 "simulated one (GPUSIM_FORCE=1 overrides)\n")
    node = build_node(load_profile(env, options.get("profile")), env, options.get("fault", []))
    root, dev_dir, log_dir = setup_paths(env)
    changes = Changes(bool(options.get("check")))
    setup_device_nodes(node, dev_dir, changes)
    setup_ib_nodes(node, dev_dir, changes)
    write_tree(sysfs_files(node), os.path.join(root, "sys", "class", "infiniband"), changes)
    if node.managed:
        # The fabric manager's unit writes its state; a fault set again after it was cleared needs a new restart.
        healed_path = os.path.join(root, "state", "fabricmanager-healed.json")
        healed = sorted(node.healed & set(fault_key(f) for f in node.faults))
        if os.path.exists(healed_path) and healed != sorted(node.healed):
            changes.write(healed_path, json.dumps(healed) + "\n")
    else:
        changes.write(os.path.join(root, "fabricmanager.state"), fabricmanager_state(node)[0])
    state_path = os.path.join(root, "state", "setup.json")
    fingerprint = profile_fingerprint(node)
    try:
        with open(state_path) as handle:
            previous = json.load(handle).get("fingerprint")
    except (IOError, OSError, ValueError):
        previous = None
    log_path = os.path.join(log_dir, "kern.log")
    if previous != fingerprint or not os.path.exists(log_path):
        changes.write(log_path, render_kernel_log(node), rotate=True)
        changes.write(state_path, json.dumps({"fingerprint": fingerprint, "hostname": node.hostname}) + "\n")
    report = {"changed": bool(changes.changes), "changes": changes.changes, "skipped": changes.skipped,
              "check": changes.check}
    return 0, json.dumps(report, sort_keys=True) + "\n", ""


# ----------------------------------------------------------------------------------------------------------------
# gpusim service UNIT: the process of a simulated systemd unit (fabric manager, nvidia-persistenced, DCGM)
# ----------------------------------------------------------------------------------------------------------------

def log_service_event(log_dir, event, what):
    """Append '<ISO time> <event> <what>' to the services log (start/stop/fail of a unit, reset of a GPU).

    The time is the machine's clock in microseconds, so that a test can order the lines of several nodes. Nothing
    is written where the log directory does not exist (a tool run outside a set-up node).
    """
    if not os.path.isdir(log_dir):
        return
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    with open(os.path.join(log_dir, SERVICES_LOG), "a") as handle:
        handle.write("%s %s %s\n" % (stamp, event, what))


def sd_notify(message):
    """Tell systemd (Type=notify) that the unit is ready; nothing outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    import socket  # pylint: disable=import-outside-toplevel
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode("utf-8"))


def _write_file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def fabricmanager_refusal(node):
    """Why the simulated fabric manager does not start (a version other than the driver's), or None."""
    if any(f["name"] == "fabricmanager_down" for f in node.faults):
        return "fabric manager is disabled on this node (gpusim fault fabricmanager_down)"
    if node.fabricmanager_version != node.driver:
        return ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
                "Please update with matching NVIDIA driver package." % (node.fabricmanager_version, node.driver))
    return None


def run_service(env, options):
    """gpusim service UNIT: start, log, hold the GPUs until SIGTERM, log the stop (the unit's ExecStart)."""
    units = [u[:-len(".service")] if u.endswith(".service") else u for u in options.get("args") or []]
    if len(units) != 1 or units[0] not in SERVICE_UNITS:
        raise SimError(2, stderr="usage: gpusim service %s\n" % "|".join(SERVICE_UNITS))
    unit = units[0]
    import signal  # pylint: disable=import-outside-toplevel
    node = build_node(load_profile(env, options.get("profile")), env)
    run_dir = os.path.join(node.root, "run")
    pid_path = os.path.join(run_dir, unit + ".pid")
    state_path = os.path.join(node.root, "fabricmanager.state")
    if unit == FM_UNIT:
        why = fabricmanager_refusal(node)
        if why:
            _write_file(os.path.join(run_dir, unit + ".failed"), why + "\n")
            _write_file(state_path, "failed\n")
            log_service_event(node.log_dir, "fail", unit)
            raise SimError(1, stderr="%s\n" % why)
        # A start clears what a restart clears: the recoverable faults set now are healed from here on.
        healed = sorted(fault_key(f) for f in node.faults
                        if f["name"] == "nvlink_degraded" and str(f.get("value") or "recoverable") == "recoverable")
        _write_file(os.path.join(node.root, "state", "fabricmanager-healed.json"), json.dumps(healed) + "\n")
        _remove(os.path.join(run_dir, unit + ".failed"))

    def stop(_signum, _frame):
        _remove(pid_path)
        if unit == FM_UNIT:
            _write_file(state_path, "inactive\n")
        log_service_event(node.log_dir, "stop", unit)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if unit == FM_UNIT:
        _write_file(state_path, "active\n")
    log_service_event(node.log_dir, "start", unit)
    # The pid file says the unit runs (the tools read it, the tests wait for it): written once the start is logged,
    # so that a stop sent as soon as it appears is logged after the start (a stop in between was logged alone).
    _write_file(pid_path, "%d\n" % os.getpid())
    sd_notify("READY=1")
    while True:
        signal.pause()


# ----------------------------------------------------------------------------------------------------------------
# gpusim bundle: a replay bundle as the health checker's --collect writes one
# ----------------------------------------------------------------------------------------------------------------

def bundle_commands(node, query_fields, dcgm_level):
    """(file name, tool, args) for every command output of a bundle."""
    gpus = max(1, len(node.gpus))
    return (("nvidia-smi-q.xml", "nvidia-smi", ["-q", "-x"]),
            ("nvidia-smi-q.txt", "nvidia-smi", ["-q"]),
            ("nvidia-smi-query.csv", "nvidia-smi", ["--query-gpu=" + query_fields, "--format=csv"]),
            ("nvlink-status.txt", "nvidia-smi", ["nvlink", "-s"]),
            ("nvlink-errors.txt", "nvidia-smi", ["nvlink", "-e"]),
            ("topo.txt", "nvidia-smi", ["topo", "-m"]),
            ("ibstat.txt", "ibstat", []),
            ("dcgmi-diag.json", "dcgmi", ["diag", "-r", str(dcgm_level), "-j"]),
            ("nccl-all-reduce.txt", "all_reduce_perf", ["-b", "8", "-e", "8G", "-f", "2", "-g", str(gpus)]),
            ("fabricmanager.state", "systemctl", ["is-active", FM_UNIT])) + (
                (("fabricmanager-version.txt", "nv-fabricmanager", ["--version"]),) if node.nvswitches else ())


def write_output(directory, name, result):
    """Write a command's output; a failed command also gets <name>.rc and <name>.stderr."""
    rc, out, err = result
    path = os.path.join(directory, name)
    for stale in (path, path + ".rc", path + ".stderr"):
        if os.path.exists(stale):
            os.unlink(stale)
    written = []
    if rc == 0 or out:
        with open(path, "w") as handle:
            handle.write(out)
        written.append(name)
    if rc != 0:
        with open(path + ".rc", "w") as handle:
            handle.write("%d\n" % rc)
        with open(path + ".stderr", "w") as handle:
            handle.write(err)
        written += [name + ".rc", name + ".stderr"]
    return written


def run_bundle(env, options):
    """gpusim bundle DIR [--profile FILE] [--fault SPEC ...] [--query-fields F,...] [--captured-at ISO]."""
    if not options.get("args"):
        raise SimError(2, stderr="usage: gpusim bundle DIR [--profile FILE] [--fault SPEC ...] "
                                 "[--query-fields F1,F2,...] [--captured-at ISO] [--dcgm-level N]\n")
    directory = options["args"][0]
    env = dict(env)
    env["GPUSIM_NOW"] = iso_utc(parse_time(options["captured-at"]) if options.get("captured-at") else now_from(env))
    profile = load_profile(env, options.get("profile"))
    faults = options.get("fault", [])
    node = build_node(profile, env, faults)
    os.makedirs(directory, exist_ok=True)
    written = []
    for name, tool, args in bundle_commands(node, options.get("query-fields") or DEFAULT_QUERY,
                                            options.get("dcgm-level") or 3):
        written += write_output(directory, name, run_tool(tool, args, env, profile, faults))
    write_tree(sysfs_files(node), os.path.join(directory, "sys-class-infiniband"), Changes(False))
    written += write_output(directory, "kernel.log", (0, render_kernel_log(node), ""))
    written += write_output(directory, "captured_at", (0, env["GPUSIM_NOW"] + "\n", ""))
    written.append("sys-class-infiniband/")
    return 0, "".join("%s\n" % os.path.join(directory, name) for name in written), ""


# ----------------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------------

USAGE = """usage: gpusim TOOL ARGS           run a simulated tool (%s)
       gpusim setup [--check] [--profile FILE] [--fault SPEC ...]
       gpusim bundle DIR [--profile FILE] [--fault SPEC ...] [--query-fields F1,F2,...] [--captured-at ISO]
                         [--dcgm-level N]
       gpusim faults
       gpusim service nvidia-fabricmanager|nvidia-persistenced|nvidia-dcgm   (a simulated unit's process)
A fault SPEC is NAME[:gpu=N][,port=mlx5_2/1][,value=V]. The profile comes from --profile, $GPUSIM_PROFILE or
/etc/gpusim/profile.json; a symlink named after a tool runs that tool.
""" % ", ".join(TOOLS)


def parse_options(args, valued, flags=()):
    """{'args': [...], option: value or [values] for 'fault'} from --option VALUE / --option=VALUE."""
    options = {"args": []}
    index = 0
    while index < len(args):
        arg = args[index]
        name, sep, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in flags:
            options[name] = True
        elif name in valued:
            if not sep:
                index += 1
                if index >= len(args):
                    raise SimError(2, stderr="gpusim: --%s needs a value\n%s" % (name, USAGE))
                value = args[index]
            if name == "fault":
                options.setdefault("fault", []).append(value)
            else:
                options[name] = int(value) if name == "dcgm-level" else value
        elif arg.startswith("-"):
            raise SimError(2, stderr="gpusim: unknown option %s\n%s" % (arg, USAGE))
        else:
            options["args"].append(arg)
        index += 1
    return options


def list_faults():
    """gpusim faults: one line per fault, name and what it does."""
    return 0, "".join("%-28s %s\n" % (name, FAULTS[name][0]) for name in FAULTS), ""


def main(argv, env=None):
    """Run gpusim (or the tool argv[0] is named after): returns (rc, stdout, stderr)."""
    env = dict(os.environ if env is None else env)
    tool = os.path.basename(argv[0])
    if tool.endswith(".py"):
        tool = tool[:-3]
    args = list(argv[1:])
    if tool in TOOL_RUNNERS:
        return run_tool(tool, args, env)
    if not args or args[0] in ("-h", "--help", "help"):
        return (0 if args else 2), USAGE if args else "", "" if args else USAGE
    command, rest = args[0], args[1:]
    try:
        if command in TOOL_RUNNERS:
            return run_tool(command, rest, env)
        if command == "faults":
            return list_faults()
        if command == "setup":
            return run_setup(env, parse_options(rest, ("profile", "fault"), ("check",)))
        if command == "service":
            return run_service(env, parse_options(rest, ("profile",)))
        if command == "bundle":
            return run_bundle(env, parse_options(rest, ("profile", "fault", "query-fields", "captured-at",
                                                        "dcgm-level")))
    except SimError as error:
        return error.rc, error.stdout, error.stderr
    return 2, "", "gpusim: unknown command %r\n%s" % (command, USAGE)


def cli():
    """The command line (this file run as a script, or bin/gpusim as install.yml installs it): print main's output
    and exit with its code."""
    rc, out, err = main(sys.argv)
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.stderr.write(err)
    sys.exit(rc)


if __name__ == "__main__":
    cli()
