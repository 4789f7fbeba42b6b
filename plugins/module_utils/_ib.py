# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""InfiniBand port state from ``ibstat``, ``ibstatus`` and ``/sys/class/infiniband`` (see docs/health-model.md).

``parse_ibstat(text)`` reads ``ibstat`` (tab- or space-indented, any number of CAs, an ``ibpanic`` ending) and
``ibstatus`` output; ``read_sys_class_infiniband(path)`` reads the sysfs tree. Both return::

    {"devices": [{"name", "type", "fw_ver", "board_id", "ports": [{"port", "state", "physical_state", "rate_gbps",
                  "link_layer", "counters"}]}],
     "errors": [...], "unreadable": [...]}

States lose their numeric prefix (``4: ACTIVE`` -> ``Active``, ``5: LinkUp`` -> ``LinkUp``). A port's rate is what
the port reports, also when the port is down (ibstat prints ``Rate: 40`` for a disabled port): only ``state`` and
``physical_state`` tell its health. Devices are sorted by name in natural order (``mlx5_2`` before ``mlx5_10``).
Standard library only; nothing here raises.
"""

import os
import re

from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import (
    append_capped, clean_text, na_to_none, new_error, new_result, read_bounded, to_int,
)

# Port states as ibstat prints them, keyed by the sysfs/ibstatus word and number.
_STATES = {
    "down": "Down", "init": "Initializing", "initializing": "Initializing", "armed": "Armed", "active": "Active",
    "active_defer": "ActiveDefer", "activedefer": "ActiveDefer", "nop": "NoChange",
}
_STATE_NUMBERS = {"0": "NoChange", "1": "Down", "2": "Initializing", "3": "Armed", "4": "Active", "5": "ActiveDefer"}
_PHYS_STATES = {
    "sleep": "Sleep", "polling": "Polling", "disabled": "Disabled", "portconfigurationtraining": "PortConfigurationTraining",
    "linkup": "LinkUp", "linkerrorrecovery": "LinkErrorRecovery", "phytest": "PhyTest", "phy test": "PhyTest",
    "nostatechange": "NoStateChange",
}
_PHYS_STATE_NUMBERS = {
    "0": "NoStateChange", "1": "Sleep", "2": "Polling", "3": "Disabled", "4": "PortConfigurationTraining", "5": "LinkUp",
    "6": "LinkErrorRecovery", "7": "PhyTest",
}
_LINK_LAYERS = {"infiniband": "InfiniBand", "ethernet": "Ethernet", "omni-path": "Omni-Path"}

_CA_RE = re.compile(r"^CA '(?P<name>[^']*)'")
_IBSTATUS_RE = re.compile(r"^Infiniband device '(?P<name>[^']*)' port (?P<port>\d+) status:", re.IGNORECASE)
_PORT_RE = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_KEY_VALUE_RE = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<value>.*)$")
_PANIC_RE = re.compile(r"^(?P<tool>ib\w*?)(?P<level>panic|warn):\s*(?P<message>.*)$")
_QUOTED_DEVICE_RE = re.compile(r"device '(?P<name>[^']+)'")
_NUMBERED_RE = re.compile(r"^\s*(?P<number>\d+)\s*:\s*(?P<word>.*)$")
_RATE_RE = re.compile(r"^\s*(?P<rate>\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s|Gbps)?\b")
_NATURAL_SPLIT_RE = re.compile(r"(\d+)")

_DEVICE_KEYS = {"ca type": "type", "firmware version": "fw_ver"}
_PORT_KEYS = {
    "state": "state", "physical state": "physical_state", "phys state": "physical_state", "rate": "rate_gbps",
    "link layer": "link_layer", "link_layer": "link_layer",
}
# Keys ibstat/ibstatus print that the model does not keep.
_IGNORED_KEYS = frozenset((
    "number of ports", "hardware version", "node guid", "system image guid", "base lid", "lmc", "sm lid",
    "capability mask", "port guid", "default gid",
))
_SYSFS_DEVICE_FILES = (("type", "hca_type"), ("fw_ver", "fw_ver"), ("board_id", "board_id"))
_SYSFS_PORT_FILES = (("state", "state"), ("physical_state", "phys_state"), ("rate_gbps", "rate"), ("link_layer", "link_layer"))
_COUNTER_DIRS = ("counters", "hw_counters")
_READ_LIMIT = 4096
# The kernel writes a port's rate as "400 Gb/sec (4X NDR)" (ib_verbs, drivers/infiniband/core/sysfs.c); anything
# else in a sysfs copy is a damaged file, not a rate.
_SYSFS_RATE_RE = re.compile(r"^\d+(?:\.\d+)? Gb/sec \(\d+X(?: [A-Z]+)?\)$")
# It writes state and phys_state as "<number>: <word>" ("4: ACTIVE", "5: LinkUp"): a word alone, a dash or "N/A"
# in a sysfs copy is a damaged file too.
_SYSFS_NUMBERED_RE = re.compile(r"^\d+: \S")


def natural_key(name):
    """Sort key that orders embedded numbers by value: ``mlx5_2`` before ``mlx5_10``."""
    return [int(part) if part.isdigit() else part for part in _NATURAL_SPLIT_RE.split(name)]


def new_device(name):
    """A device entry of the model with every field unknown."""
    return {"name": name, "type": None, "fw_ver": None, "board_id": None, "ports": []}


def new_port(number):
    """A port entry of the model with every field unknown."""
    return {"port": number, "state": None, "physical_state": None, "rate_gbps": None, "link_layer": None, "counters": {}}


def _split_numbered(value):
    """``("4", "ACTIVE")`` from ``"4: ACTIVE"``; ``(None, value)`` without a number."""
    match = _NUMBERED_RE.match(value)
    if match:
        return match.group("number"), match.group("word").strip()
    return None, value.strip()


def _normalize_word(value, words, numbers, what, unreadable):
    """Shared body of the state normalisers: word lookup, then number lookup, else the word as printed."""
    text = na_to_none(value)
    if text is None:
        return None
    number, word = _split_numbered(text)
    known = words.get(word.lower()) or words.get(word.lower().replace(" ", ""))
    if number is not None:
        # sysfs and ibstatus print both ("4: ACTIVE"); a number alone or with a word that is not its own is an
        # output cut short or damaged, never taken on the number's word
        if number in numbers and known == numbers[number]:
            return known
        append_capped(unreadable, "%s value %r: the number and the word do not agree" % (what, text[:40]))
        return None
    if known:
        return known
    if word and re.match(r"^[A-Za-z][\w ]*$", word):
        return word
    append_capped(unreadable, "%s value %r is not a known state" % (what, text[:40]))
    return None


def normalize_state(value, unreadable, what="state"):
    """Port state as ibstat prints it: ``4: ACTIVE`` / ``ACTIVE`` / ``Active`` -> ``Active``, ``1: DOWN`` -> ``Down``."""
    return _normalize_word(value, _STATES, _STATE_NUMBERS, what, unreadable)


def normalize_physical_state(value, unreadable, what="physical state"):
    """Physical port state as ibstat prints it: ``5: LinkUp`` -> ``LinkUp``, ``2: Polling`` -> ``Polling``."""
    return _normalize_word(value, _PHYS_STATES, _PHYS_STATE_NUMBERS, what, unreadable)


def parse_rate(value, unreadable, what="rate"):
    """Gb/s as a float from ``400``, ``200 Gb/sec (4X HDR)``, ``2.5 Gb/sec (1X SDR)``; ``None`` when absent."""
    text = na_to_none(value)
    if text is None:
        return None
    match = _RATE_RE.match(text)
    if match:
        return float(match.group("rate"))
    append_capped(unreadable, "%s value %r is not a rate" % (what, text[:40]))
    return None


def normalize_link_layer(value):
    """``InfiniBand`` / ``Ethernet`` whatever the case; other values as printed; ``None`` when absent."""
    text = na_to_none(value)
    if text is None:
        return None
    return _LINK_LAYERS.get(text.lower(), text)


def _set_port_field(port, field, value, unreadable, where):
    """Store one ibstat/ibstatus/sysfs port value under its model field, normalised."""
    what = "%s %s" % (where, field)
    if field == "state":
        port["state"] = normalize_state(value, unreadable, what)
    elif field == "physical_state":
        port["physical_state"] = normalize_physical_state(value, unreadable, what)
    elif field == "rate_gbps":
        port["rate_gbps"] = parse_rate(value, unreadable, what)
    elif field == "link_layer":
        port["link_layer"] = normalize_link_layer(value)


def _panic_error(line, match):
    """An ``errors`` entry for an ``ibpanic:``/``ibwarn:`` line, naming the device it quotes, if any."""
    device = _QUOTED_DEVICE_RE.search(line)
    kind = "ibpanic" if match.group("level") == "panic" else "ibwarn"
    return new_error(kind, line, device=device.group("name") if device else None)


class _IbstatReader(object):
    """Line-by-line state of ``parse_ibstat``: the device and port being filled."""

    def __init__(self, result):
        self.result = result
        self.devices = {}
        self.device = None
        self.port = None

    def start_device(self, name):
        """Make ``name`` the current device (ibstatus repeats a device once per port)."""
        if name not in self.devices:
            self.devices[name] = new_device(name)
            self.result["devices"].append(self.devices[name])
        self.device = self.devices[name]
        self.port = None

    def start_port(self, number):
        """Make port ``number`` of the current device the current port."""
        self.port = new_port(number)
        self.device["ports"].append(self.port)

    def key_value(self, key, value, lineno):
        """Store a ``Key: value`` line in the current device or port."""
        key = key.lower()
        if key in _IGNORED_KEYS:
            return
        if key in _PORT_KEYS and self.port is not None:
            where = "%s/%s" % (self.device["name"], self.port["port"])
            _set_port_field(self.port, _PORT_KEYS[key], value, self.result["unreadable"], where)
        elif key in _DEVICE_KEYS and self.device is not None:
            self.device[_DEVICE_KEYS[key]] = na_to_none(value)
        elif self.device is None or key in _PORT_KEYS:
            append_capped(self.result["unreadable"], "line %d: %r outside a CA/port block" % (lineno, key[:40]))

    def line(self, line, lineno):
        """Dispatch one cleaned line."""
        match = _CA_RE.match(line)
        if match:
            self.start_device(match.group("name"))
            return
        match = _IBSTATUS_RE.match(line)
        if match:
            self.start_device(match.group("name"))
            self.start_port(int(match.group("port")))
            return
        match = _PORT_RE.match(line)
        if match and self.device is not None:
            self.start_port(int(match.group("port")))
            return
        match = _KEY_VALUE_RE.match(line)
        if match:
            self.key_value(match.group("key"), match.group("value"), lineno)
            return
        match = _PANIC_RE.match(line.strip())
        if match:
            self.result["errors"].append(_panic_error(line.strip(), match))
            return
        append_capped(self.result["unreadable"], "line %d: not ibstat/ibstatus output: %r" % (lineno, line.strip()[:60]))


def parse_ibstat(text):
    """Parse ``ibstat`` or ``ibstatus`` output into the InfiniBand model (``counters`` stays empty).

    An ``ibpanic: ... stat of IB device 'mlx5_8' failed`` line becomes an ``errors`` entry
    ``{"kind": "ibpanic", "message": ..., "device": "mlx5_8"}``; the CAs printed before it are kept.
    """
    result = new_result(devices=[])
    reader = _IbstatReader(result)
    for lineno, line in enumerate(clean_text(text).split("\n"), 1):
        if line.strip():
            reader.line(line, lineno)
    result["devices"].sort(key=lambda device: natural_key(device["name"]))
    return result


def read_sysfs_value(path, unreadable, what):
    """Stripped content of a small sysfs file; ``None`` (and a note) when it is missing, cannot be read, is not a
    regular file (a FIFO or device in a replayed bundle) or is larger than a sysfs attribute can be."""
    data, why = read_bounded(path, _READ_LIMIT)
    if data is None:
        append_capped(unreadable, "%s: %s" % (what, why))
        return None
    return data.decode("utf-8", "replace").strip()


def _list_dir(path, unreadable, what):
    """Sorted entries of a directory; ``[]`` (and a note) when it cannot be listed."""
    try:
        return sorted(os.listdir(path), key=natural_key)
    except (IOError, OSError) as exc:
        append_capped(unreadable, "%s: cannot list (%s)" % (what, exc.strerror or exc.__class__.__name__))
        return []


def _read_counters(port_path, where, unreadable):
    """Integer counters of ``counters/`` and ``hw_counters/``; a name in both keeps ``counters/`` and adds ``hw_``."""
    counters = {}
    for directory in _COUNTER_DIRS:
        dir_path = os.path.join(port_path, directory)
        if not os.path.isdir(dir_path):
            continue
        for name in _list_dir(dir_path, unreadable, "%s/%s" % (where, directory)):
            what = "%s/%s/%s" % (where, directory, name)
            file_path = os.path.join(dir_path, name)
            if not os.path.isfile(file_path):
                continue
            raw = read_sysfs_value(file_path, unreadable, what)
            key = name if name not in counters else "hw_" + name
            counters[key] = _counter_value(raw, unreadable, what)
    return counters


def _counter_value(raw, unreadable, what):
    """An integer counter; ``None`` for missing and ``N/A (no PMA)`` values; ``None`` and a note for the rest."""
    if raw is None or raw.upper().startswith("N/A"):
        return None
    return to_int(raw, unreadable, what)


def _read_port(port_path, number, where, unreadable, counters=True):
    """One ``ports/<n>`` directory as a model port."""
    port = new_port(number)
    for field, file_name in _SYSFS_PORT_FILES:
        raw = read_sysfs_value(os.path.join(port_path, file_name), unreadable, "%s/%s" % (where, file_name))
        if raw == "":
            append_capped(unreadable, "%s/%s: is empty" % (where, file_name))
        elif file_name == "link_layer" and raw.lower() not in _LINK_LAYERS:
            append_capped(unreadable, "%s/link_layer value %r is neither InfiniBand nor Ethernet" % (where, raw[:40]))
        elif file_name in ("state", "phys_state") and raw is not None and not _SYSFS_NUMBERED_RE.match(raw):
            append_capped(unreadable, "%s/%s value %r is not the kernel's '<number>: <word>'" % (
                where, file_name, raw[:40]))
        elif file_name == "rate" and not _SYSFS_RATE_RE.match(raw):
            append_capped(unreadable, "%s/rate value %r is not the kernel's '<n> Gb/sec (<w>X <speed>)'" % (
                where, raw[:40]))
        elif raw is not None:
            _set_port_field(port, field, raw, unreadable, where)
    if counters:
        port["counters"] = _read_counters(port_path, where, unreadable)
    return port


def _read_device(dev_path, name, unreadable, counters=True):
    """One ``/sys/class/infiniband/<dev>`` directory as a model device."""
    device = new_device(name)
    for field, file_name in _SYSFS_DEVICE_FILES:
        device[field] = na_to_none(read_sysfs_value(os.path.join(dev_path, file_name), unreadable, "%s/%s" % (name, file_name)))
    ports_path = os.path.join(dev_path, "ports")
    for entry in _list_dir(ports_path, unreadable, "%s/ports" % name):
        port_path = os.path.join(ports_path, entry)
        if entry.isdecimal() and len(entry) < 6 and os.path.isdir(port_path):
            device["ports"].append(_read_port(port_path, int(entry), "%s/%s" % (name, entry), unreadable, counters))
    return device


def read_sys_class_infiniband(path="/sys/class/infiniband", counters=True):
    """Read a ``/sys/class/infiniband`` tree into the InfiniBand model, with the port counters unless ``counters`` is
    false (the quick health check needs only state, physical state and rate: a few files instead of hundreds).

    Missing or unreadable files give ``None`` and a note in ``unreadable``; counters that are not integers are
    ``None`` with a note (``N/A (no PMA)`` is ``None`` without one). A missing tree is an ``errors`` entry
    ``{"kind": "no_devices", ...}``; an empty one is ``devices: []``.
    """
    result = new_result(devices=[])
    try:
        if not os.path.isdir(path):
            result["errors"].append(new_error("no_devices", "%s does not exist: no InfiniBand devices" % path, path=path))
            return result
        for name in _list_dir(path, result["unreadable"], path):
            dev_path = os.path.join(path, name)
            if os.path.isdir(dev_path):
                result["devices"].append(_read_device(dev_path, name, result["unreadable"], counters))
    except Exception as exc:  # pylint: disable=broad-except
        append_capped(result["unreadable"], "%s: %s" % (path, exc))
    return result
