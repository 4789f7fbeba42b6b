# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""IPoIB interface rules: names, transport modes and the MTUs each mode can carry.

Standard library only (no address arithmetic here: the filters do that with netaddr on the controller).

The kernel's IPoIB driver has two transports:

- ``connected`` (reliable connected, RC): the MTU can be anything up to 65520 bytes (``IPOIB_CM_MTU``:
  64 KiB less the IPoIB and connected-mode headers). This is what NCCL's socket fallback, storage and bulk TCP want.
- ``datagram`` (unreliable datagram, UD): a packet must fit one IB link-layer frame, so the MTU is at most the
  fabric's IB MTU less the 4-byte IPoIB header: 4092 on a 4096-byte fabric, 2044 on a 2048-byte one.

``normalize_interface`` checks one interface description from inventory and fills in the defaults;
``normalize_interfaces`` does a whole list and rejects duplicate names. Both raise ``IPoIBError`` with a message
that names the host, the variable, the interface and the bad value.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

MODES = ("connected", "datagram")
DEFAULT_MODE = "connected"
CONNECTED_MAX_MTU = 65520
IPOIB_HEADER = 4
MIN_MTU = 68  # the IPv4 minimum; the kernel refuses less
FABRIC_MTUS = (256, 512, 1024, 2048, 4096)
KNOWN_KEYS = frozenset(("name", "subnet", "mode", "mtu", "offset"))
# Linux interface names: at most 15 bytes, no '/', ':' or whitespace; '.' only inside (ib0.8001 is a P_Key child).
_IFNAME = re.compile(r"^(?![.])[A-Za-z0-9_.-]{1,15}$")


class IPoIBError(ValueError):
    """An IPoIB interface description that cannot work."""


def datagram_max_mtu(fabric_mtu):
    """The largest IPoIB MTU in datagram mode on a fabric whose IB MTU is ``fabric_mtu``."""
    return int(fabric_mtu) - IPOIB_HEADER


def check_fabric_mtu(fabric_mtu, where="fabric_mtu"):
    """Return the fabric's IB MTU as an int, or raise when it is not one of the IB MTUs."""
    if isinstance(fabric_mtu, bool) or str(fabric_mtu).strip() not in [str(m) for m in FABRIC_MTUS]:
        raise IPoIBError("%s is %r: the InfiniBand MTU is one of %s bytes"
                         % (where, fabric_mtu, ", ".join(str(m) for m in FABRIC_MTUS)))
    return int(str(fabric_mtu).strip())


def max_mtu(mode, fabric_mtu):
    """The largest MTU of a mode."""
    return CONNECTED_MAX_MTU if mode == "connected" else datagram_max_mtu(fabric_mtu)


def _as_int(value):
    """An int from an int or a string of digits; None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value):
        return int(value)
    return None


def normalize_interface(spec, fabric_mtu=4096, where="interface"):
    """Check one interface description and return it with its defaults filled in.

    ``spec`` is a mapping with ``name`` (required), ``mode`` (``connected`` by default), ``mtu`` (the mode's largest
    by default), ``subnet`` and ``offset`` (passed through, checked by the caller). ``where`` starts every message,
    e.g. ``host gpu01: infiniband_ipoib_interfaces[0]``.
    """
    fabric_mtu = check_fabric_mtu(fabric_mtu)
    if not isinstance(spec, dict):
        raise IPoIBError("%s is %r: each interface is a mapping with at least a name, e.g. "
                         "{name: ib0, subnet: 10.20.0.0/16, mode: connected, mtu: 65520}" % (where, spec))
    unknown = sorted(str(k) for k in spec if k not in KNOWN_KEYS)
    if unknown:
        raise IPoIBError("%s has unknown key(s) %s: the keys are %s"
                         % (where, ", ".join(unknown), ", ".join(sorted(KNOWN_KEYS))))
    name = spec.get("name")
    if not isinstance(name, str) or not _IFNAME.match(name):
        raise IPoIBError("%s: name %r is not a Linux interface name (1-15 letters, digits, '_', '-' or '.', "
                         "such as ib0 or ibp65s0)" % (where, name))
    where = "%s (%s)" % (where, name)
    mode = spec.get("mode", DEFAULT_MODE)
    if mode is None:
        mode = DEFAULT_MODE
    if mode not in MODES:
        raise IPoIBError("%s: mode %r is not an IPoIB mode: use connected or datagram" % (where, mode))
    mtu = spec.get("mtu")
    if mtu is None:
        mtu = max_mtu(mode, fabric_mtu)
    value = _as_int(mtu)
    if value is None:
        raise IPoIBError("%s: mtu %r is not a number of bytes" % (where, mtu))
    if value < MIN_MTU:
        raise IPoIBError("%s: mtu %d is below the IPv4 minimum of %d bytes" % (where, value, MIN_MTU))
    if mode == "datagram" and value > datagram_max_mtu(fabric_mtu):
        hint = (" (%d is only possible in connected mode)" % value) if value <= CONNECTED_MAX_MTU else ""
        raise IPoIBError(
            "%s: mtu %d does not fit datagram mode, which carries at most %d bytes on a fabric with a %d-byte IB MTU "
            "(IB MTU less the %d-byte IPoIB header: 4092 on 4096, 2044 on 2048)%s"
            % (where, value, datagram_max_mtu(fabric_mtu), fabric_mtu, IPOIB_HEADER, hint))
    if mode == "connected" and value > CONNECTED_MAX_MTU:
        raise IPoIBError("%s: mtu %d is above %d, the largest MTU of connected mode"
                         % (where, value, CONNECTED_MAX_MTU))
    offset = spec.get("offset", 0)
    offset_value = _as_int(0 if offset is None else offset)
    if offset_value is None or offset_value < 0:
        raise IPoIBError("%s: offset %r must be a whole number >= 0 (added to the node index)" % (where, offset))
    result = {"name": name, "mode": mode, "mtu": value, "offset": offset_value}
    if spec.get("subnet") not in (None, ""):
        result["subnet"] = spec["subnet"]
    return result


def normalize_interfaces(specs, fabric_mtu=4096, where="interfaces"):
    """Check a list of interface descriptions; names must be unique."""
    if specs is None:
        return []
    if isinstance(specs, (str, bytes, dict)) or not isinstance(specs, (list, tuple)):
        raise IPoIBError("%s is %r: it must be a list of interfaces" % (where, specs))
    result = []
    seen = set()
    for number, spec in enumerate(specs):
        interface = normalize_interface(spec, fabric_mtu, "%s[%d]" % (where, number))
        if interface["name"] in seen:
            raise IPoIBError("%s[%d]: interface %s is listed twice" % (where, number, interface["name"]))
        seen.add(interface["name"])
        result.append(interface)
    return result
