# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: ipoib_interfaces
short_description: Check IPoIB interface descriptions (mode, MTU, subnet) and fill in their defaults
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Takes a list of IPoIB interfaces as written in inventory and returns it checked, with the defaults filled in.
  - Each interface is a mapping with C(name) (required, e.g. C(ib0)), C(mode) (C(connected) or C(datagram), default
    C(connected)), C(mtu) (default the mode's largest), C(subnet) (an IPv4 or IPv6 network in CIDR form) and
    C(offset) (a number added to each node's index when addresses are assigned, default 0).
  - The MTU must suit the mode. Connected mode carries up to 65520 bytes. Datagram mode carries the fabric's IB MTU
    less the 4-byte IPoIB header, so at most 4092 on a 4096-byte fabric and 2044 on a 2048-byte one; C(65520) in
    datagram mode is an error.
  - Fails with an error that names the host, the variable, the interface and the bad value. Unknown keys, a subnet
    with host bits set, a duplicated interface name and an MTU below 68 are errors too.
  - Needs the Python library netaddr on the controller.
positional: fabric_mtu
options:
  _input:
    description: The interfaces, usually C(infiniband_ipoib_interfaces).
    type: list
    elements: dict
    required: true
  fabric_mtu:
    description: The fabric's InfiniBand MTU in bytes (256, 512, 1024, 2048 or 4096); it bounds datagram mode.
    type: int
    default: 4096
  host:
    description: The host the interfaces belong to, for the error messages.
    type: str
    default: ""
  var:
    description: The name of the variable the interfaces come from, for the error messages.
    type: str
    default: infiniband_ipoib_interfaces
seealso:
  - plugin: gpucluster.ops.ipoib_addresses
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Check the IPoIB interfaces of this host
  ansible.builtin.set_fact:
    ipoib: "{{ infiniband_ipoib_interfaces | gpucluster.ops.ipoib_interfaces(4096, host=inventory_hostname) }}"
  vars:
    infiniband_ipoib_interfaces:
      - {name: ib0, subnet: 10.20.0.0/16}                  # connected, MTU 65520
      - {name: ib1, subnet: 10.21.0.0/16, mode: datagram}  # MTU 4092
"""

RETURN = r"""
_value:
  description: The interfaces in input order, each with every key set.
  type: list
  elements: dict
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
    offset:
      description: Added to the node index when addresses are assigned.
      type: int
    subnet:
      description: The subnet in CIDR form (normalised, e.g. C(10.20.0.0/16)); absent when none was given.
      type: str
    prefixlen:
      description: The subnet's prefix length; absent when no subnet was given.
      type: int
"""

from ansible_collections.gpucluster.ops.plugins.module_utils._ipoib import IPoIBError, check_fabric_mtu, normalize_interfaces
from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import filter_errors

try:
    import netaddr
except ImportError:  # pragma: no cover - reported when the filter is used
    netaddr = None


def parse_subnet(subnet, where):
    """A netaddr.IPNetwork from CIDR text; raises IPoIBError naming where and the value."""
    if netaddr is None:
        raise IPoIBError("%s: the ipoib filters need the Python library netaddr on the controller "
                         "(pip install netaddr)" % where)
    text = str(subnet).strip()
    if "/" not in text:
        raise IPoIBError("%s: subnet %r needs a prefix length, e.g. 10.20.0.0/16" % (where, subnet))
    try:
        network = netaddr.IPNetwork(text)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        raise IPoIBError("%s: subnet %r is not an IPv4 or IPv6 network in CIDR form" % (where, subnet))
    if network.ip != network.network:
        raise IPoIBError("%s: subnet %s has host bits set (did you mean %s/%d?)"
                         % (where, text, network.network, network.prefixlen))
    return network


def check_interfaces(interfaces, fabric_mtu=4096, host="", var="infiniband_ipoib_interfaces"):
    """Normalise the interfaces of one host; subnets become (netaddr network, its CIDR text). Raises IPoIBError."""
    prefix = ("host %s: %s" % (host, var)) if host else var
    fabric_mtu = check_fabric_mtu(fabric_mtu, ("host %s: fabric_mtu" % host) if host else "fabric_mtu")
    result = normalize_interfaces(interfaces, fabric_mtu, prefix)
    for number, interface in enumerate(result):
        if "subnet" in interface:
            network = parse_subnet(interface["subnet"], "%s[%d] (%s)" % (prefix, number, interface["name"]))
            interface["subnet"] = str(network.cidr)
            interface["prefixlen"] = network.prefixlen
            interface["_network"] = network
    return result


@filter_errors(IPoIBError)
def ipoib_interfaces(interfaces, fabric_mtu=4096, host="", var="infiniband_ipoib_interfaces"):
    """Return the interfaces checked and completed (see DOCUMENTATION)."""
    checked = check_interfaces(interfaces, fabric_mtu, host, var)
    for interface in checked:
        interface.pop("_network", None)
    return checked


class FilterModule(object):
    """gpucluster.ops ipoib_interfaces filter."""

    def filters(self):
        return {"ipoib_interfaces": ipoib_interfaces}
