# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: ipoib_addresses
short_description: Assign IPoIB addresses to the hosts of a fabric from each interface's subnet and each node's index
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - For every host of the input list and every IPoIB interface it has, the address is the subnet's network address
    plus the interface's C(offset) plus the node's index, e.g. C(10.20.0.0/16), offset 0 and node 17 give
    C(10.20.0.17/16).
  - A node's index is its host variable named by O(index_var) when set, otherwise the last number in its inventory
    name (C(gpu017) is 17, C(rack2-gpu05) is 5). A host variable named by O(addresses_var), a mapping of interface
    name to address, pins a host's address instead.
  - A host's interfaces are the first of the host variables named by O(interfaces_var) that it has, otherwise
    O(interfaces) for the hosts in O(default_hosts) and none for the others. Each is
    checked as by P(gpucluster.ops.ipoib_interfaces#filter), so the MTU must suit the mode; an interface without a
    subnet gets no address.
  - All hosts are checked together, and every problem is reported at once with the host names. Problems are two
    hosts given the same address (named with their interfaces), addresses past the end of a subnet (the exhausted
    subnet, its capacity and every host that does not fit), the network or broadcast address, a pinned address
    outside its subnet, and a host without a number in its name and without an index.
  - "The hosts are one fabric, so each interface name is one rail: every host's interface of that name must have the
    same subnet (or none on every host), mode and MTU. Multi-rail hosts have one subnet per rail (C(ib0),
    C(ib1), ...); the comparison is per interface name. A difference is reported with each value and its hosts."
  - Needs the Python library netaddr on the controller.
positional: hostvars
options:
  _input:
    description: The hosts that share the fabric, usually C(groups['all']) or a group of it.
    type: list
    elements: str
    required: true
  interfaces:
    description: The interfaces of the hosts in O(default_hosts) that have none of the O(interfaces_var) variables.
    type: list
    elements: dict
    default: []
  default_hosts:
    description: The hosts that get O(interfaces) when they have no interfaces variable; empty means all of them.
    type: list
    elements: str
    default: []
  fabric_mtu:
    description: The fabric's InfiniBand MTU in bytes (256, 512, 1024, 2048 or 4096); it bounds datagram mode.
    type: int
    default: 4096
  index_var:
    description: The host variable that holds a node's index.
    type: str
    default: infiniband_node_index
  interfaces_var:
    description: The host variable that holds a host's interfaces, or a list of them tried in order.
    type: raw
    default: infiniband_ipoib_interfaces
  addresses_var:
    description: The host variable that pins addresses, a mapping of interface name to address.
    type: str
    default: infiniband_ipoib_addresses
seealso:
  - plugin: gpucluster.ops.ipoib_interfaces
    plugin_type: filter
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Work out this node's IPoIB addresses
  ansible.builtin.set_fact:
    my_ipoib: >-
      {{ (groups['all'] | gpucluster.ops.ipoib_addresses(hostvars, interfaces=infiniband_ipoib_interfaces))
         [inventory_hostname] }}
  vars:
    infiniband_ipoib_interfaces:
      - {name: ib0, subnet: 10.20.0.0/16, mode: connected, mtu: 65520}
      - {name: ib1, subnet: 10.21.0.0/16, offset: 1000}
# gpu017 gets ib0 10.20.0.17/16 and ib1 10.21.3.249/16 (1000 + 17 = 1017 = 3 * 256 + 249)
"""

RETURN = r"""
_value:
  description: A mapping of host name to that host's interfaces (hosts without interfaces map to an empty list).
  type: dict
  contains:
    name:
      description: Interface name.
      type: str
    mode:
      description: C(connected) or C(datagram).
      type: str
    mtu:
      description: MTU in bytes.
      type: int
    subnet:
      description: The subnet in CIDR form; absent when the interface has none.
      type: str
    prefixlen:
      description: The subnet's prefix length; absent when the interface has no subnet.
      type: int
    offset:
      description: The interface's offset.
      type: int
    index:
      description: The node index the address was made from; absent when the address is pinned or there is no subnet.
      type: int
    ip:
      description: The address alone (C(10.20.0.17)); absent when the interface has no subnet.
      type: str
    address:
      description: The address with the prefix length (C(10.20.0.17/16)); absent when the interface has no subnet.
      type: str
"""

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.ipoib_interfaces import check_interfaces
from ansible_collections.gpucluster.ops.plugins.module_utils._ipoib import IPoIBError, check_fabric_mtu
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import check_host_names

try:
    import netaddr
except ImportError:  # pragma: no cover - reported when the filter is used
    netaddr = None

_DIGITS = re.compile(r"[0-9]+")
_MAX_REPORTED = 20
_MAX_HOSTS_NAMED = 5
# What every host's interface of one name (one rail) on the fabric must share.
_RAIL_KEYS = ("subnet", "mode", "mtu")


def _host_var(hv, name):
    try:
        return hv.get(name) if hasattr(hv, "get") else None
    except Exception as exc:  # a host variable that does not template
        raise IPoIBError("could not read %s: %s" % (name, exc))


def _index_of(host, hv, index_var):
    explicit = _host_var(hv, index_var)
    if explicit not in (None, ""):
        if isinstance(explicit, bool) or not re.match(r"^[0-9]+$", str(explicit).strip()):
            raise IPoIBError("host %s: %s is %r: a node index is a whole number >= 0" % (host, index_var, explicit))
        return int(str(explicit).strip())
    numbers = _DIGITS.findall(host.split(".", 1)[0])
    if not numbers:
        raise IPoIBError("host %s: no node index: its name has no number, so set the host variable %s"
                         % (host, index_var))
    return int(numbers[-1])


def _usable(network):
    """First and last usable address of a network, as ints."""
    first, last = network.first, network.last
    if network.version == 4 and network.prefixlen <= 30:
        return first + 1, last - 1
    if network.version == 6 and network.prefixlen <= 126:
        return first + 1, last  # the network address is the subnet-router anycast address
    return first, last


def _describe(network):
    low, high = _usable(network)
    return "%s holds %d usable address(es), %s-%s" % (
        network.cidr, high - low + 1, netaddr.IPAddress(low, network.version), netaddr.IPAddress(high, network.version))


def _pinned(host, interface, value, addresses_var):
    """The pinned address of an interface as an int, checked against its subnet."""
    network = interface["_network"]
    where = "host %s: %s[%s]" % (host, addresses_var, interface["name"])
    text = str(value).strip()
    try:
        given = netaddr.IPNetwork(text) if "/" in text else None
        address = given.ip if given is not None else netaddr.IPAddress(text)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        raise IPoIBError("%s is %r, which is not an IP address" % (where, value))
    if given is not None and given.prefixlen != network.prefixlen:
        raise IPoIBError("%s is %s, but the subnet of %s is %s" % (where, text, interface["name"], network.cidr))
    low, high = _usable(network)
    if address.version != network.version or not low <= int(address) <= high:
        raise IPoIBError("%s is %s, which is not a usable address of %s (%s)"
                         % (where, address, network.cidr, _describe(network)))
    return int(address)


def _interfaces_of(hv, interfaces_vars, default):
    for name in interfaces_vars:
        own = _host_var(hv, name)
        if own is not None:
            return own
    return default


def _assign(hosts, hostvars, interfaces, default_hosts, fabric_mtu, index_var, interfaces_vars, addresses_var):
    """Return ({host: [interface]}, [error]) for all hosts."""
    result, errors = {}, []
    owners = {}       # address int (with version) -> (host, interface)
    overflow = {}     # subnet cidr -> (network, [host (index + offset)])
    parsed = {}       # repr of an interface list -> checked copy, so that hosts sharing group_vars parse once
    rails = {}        # interface name -> key -> value -> [host]
    for host in hosts:
        host = str(host)
        try:
            hv = hostvars[host]
        except KeyError:
            errors.append("host %s: not in hostvars" % host)
            continue
        try:
            default = interfaces if default_hosts is None or host in default_hosts else []
            specs = _interfaces_of(hv, interfaces_vars, default)
            key = repr(specs)
            if key not in parsed:
                parsed[key] = check_interfaces(specs, fabric_mtu, host, interfaces_vars[-1])
            checked = [dict(i) for i in parsed[key]]
            if any("_network" in i for i in checked):
                pins = _host_var(hv, addresses_var) or {}
                if not isinstance(pins, dict):
                    raise IPoIBError("host %s: %s is %r: it maps interface names to addresses"
                                     % (host, addresses_var, pins))
                unknown = sorted(set(pins) - set(i["name"] for i in checked if "_network" in i))
                if unknown:
                    raise IPoIBError("host %s: %s names %s, which is not one of its IPoIB interfaces with a subnet"
                                     % (host, addresses_var, ", ".join(str(u) for u in unknown)))
                index = None if all(i["name"] in pins for i in checked if "_network" in i) \
                    else _index_of(host, hv, index_var)
        except IPoIBError as exc:
            errors.append(str(exc) if str(exc).startswith("host ") else "host %s: %s" % (host, exc))
            continue
        for interface in checked:
            rail = rails.setdefault(interface["name"], {})
            for key in _RAIL_KEYS:
                rail.setdefault(key, {}).setdefault(interface.get(key), []).append(host)
        for interface in checked:
            network = interface.pop("_network", None)
            if network is None:
                continue
            interface["_network"] = network
            try:
                if interface["name"] in pins:
                    value = _pinned(host, interface, pins[interface["name"]], addresses_var)
                else:
                    interface["index"] = index
                    value = network.first + interface["offset"] + index
                    low, high = _usable(network)
                    if value > high:
                        overflow.setdefault(str(network.cidr), (network, []))[1].append(
                            "%s (%s %d + offset %d)" % (host, index_var, index, interface["offset"]))
                        continue
                    if value < low:
                        raise IPoIBError(
                            "host %s: %s gets %s, the network address of %s: node indexes start at 1, or give the "
                            "interface an offset" % (host, interface["name"], netaddr.IPAddress(value, network.version),
                                                     network.cidr))
            except IPoIBError as exc:
                errors.append(str(exc))
                continue
            interface.pop("_network")
            key = (network.version, value)
            if key in owners:
                other_host, other_interface = owners[key]
                errors.append("hosts %s and %s both get %s (%s %s, %s %s): give one of them another %s or pin an "
                              "address in %s" % (other_host, host, netaddr.IPAddress(value, network.version),
                                                 other_host, other_interface, host, interface["name"], index_var,
                                                 addresses_var))
                continue
            owners[key] = (host, interface["name"])
            ip = str(netaddr.IPAddress(value, network.version))
            interface["ip"] = ip
            interface["address"] = "%s/%d" % (ip, network.prefixlen)
        for interface in checked:
            interface.pop("_network", None)
        result[host] = checked
    for cidr in sorted(overflow):
        network, names = overflow[cidr]
        errors.append("subnet %s is exhausted: %s; these hosts do not fit: %s"
                      % (cidr, _describe(network), ", ".join(names)))
    errors.extend(_rail_errors(rails, interfaces_vars[-1]))
    return result, errors


def _hosts_text(hosts):
    shown = ", ".join(hosts[:_MAX_HOSTS_NAMED])
    more = len(hosts) - _MAX_HOSTS_NAMED
    return "%s (%d host%s%s)" % (shown, len(hosts), "" if len(hosts) == 1 else "s", ", ..." if more > 0 else "")


def _rail_errors(rails, variable):
    """One error per interface name (rail) and key whose value differs between the hosts of the fabric.

    Every host's interface of one name is on one IB subnet (the rail), so it needs the same IP subnet (or none on
    every host), the same mode and the same MTU: a host with another subnet cannot reach the others over IPoIB, and
    a connected-mode host whose MTU its peers do not share has its large packets dropped or is throttled to theirs.
    """
    errors = []
    for name in sorted(rails):
        for key in _RAIL_KEYS:
            values = rails[name][key]
            if len(values) < 2:
                continue
            ordered = sorted(values.items(), key=lambda item: (-len(item[1]), str(item[0])))
            described = "; ".join("%s on %s" % ("no subnet" if value is None else "%s %s" % (key, value),
                                                _hosts_text(hosts)) for value, hosts in ordered)
            errors.append("%s: interface %s has different %ss on the hosts of one fabric: %s; the hosts of a fabric "
                          "share each interface's subnet, mode and MTU (per interface name: each rail has its own)"
                          % (variable, name, "subnet" if key == "subnet" else key.upper() if key == "mtu" else key,
                             described))
    return errors


def ipoib_addresses(hosts, hostvars, interfaces=None, fabric_mtu=4096, index_var="infiniband_node_index",
                    interfaces_var="infiniband_ipoib_interfaces", addresses_var="infiniband_ipoib_addresses",
                    default_hosts=None):
    """Return {host: [interface with its address]} for the hosts of a fabric (see DOCUMENTATION)."""
    if netaddr is None:
        raise AnsibleFilterError("ipoib_addresses needs the Python library netaddr on the controller (pip install netaddr)")
    check_host_names(hosts, "ipoib_addresses", refuse=(str, bytes, dict))
    try:
        fabric_mtu = check_fabric_mtu(fabric_mtu, "ipoib_addresses: fabric_mtu")
        interfaces_vars = [interfaces_var] if isinstance(interfaces_var, str) else list(interfaces_var or [])
        if not interfaces_vars or not all(isinstance(v, str) for v in interfaces_vars):
            raise IPoIBError("ipoib_addresses: interfaces_var is %r: a variable name or a list of them" % (interfaces_var,))
        default_hosts = set(str(h) for h in default_hosts) if default_hosts else None
        result, errors = _assign(list(hosts), hostvars, interfaces or [], default_hosts, fabric_mtu, index_var,
                                 interfaces_vars, addresses_var)
    except IPoIBError as exc:
        raise AnsibleFilterError(str(exc))
    if errors:
        more = len(errors) - _MAX_REPORTED
        raise AnsibleFilterError("ipoib_addresses: " + "; ".join(errors[:_MAX_REPORTED])
                                 + ("; and %d more problem(s)" % more if more > 0 else ""))
    return result


class FilterModule(object):
    """gpucluster.ops ipoib_addresses filter."""

    def filters(self):
        return {"ipoib_addresses": ipoib_addresses}
