# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: hosts_entries
short_description: /etc/hosts entries for the hosts of an inventory group
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Builds one entry per host, with its address and names, for a cluster-wide C(/etc/hosts).
  - The address of a host is its host variable named by O(address_var) when set, else its gathered
    C(ansible_facts['default_ipv4']['address']), else C(ansible_host) when that is an IP address.
  - Fails with an error that names the host and the variable when a host has no usable address, an address is not an
    IP address, a name is not a valid host name, or two hosts share an address.
positional: hostvars
options:
  _input:
    description: Inventory host names, usually C(groups['all']).
    type: list
    elements: str
    required: true
  domain:
    description: DNS domain; when set, each host is listed as C(<host>.<domain> <host>).
    type: str
    default: ""
  address_var:
    description: Name of the host variable that holds an explicit address.
    type: str
    default: node_baseline_address
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Write the cluster hosts
  ansible.builtin.blockinfile:
    path: /etc/hosts
    block: |
      {% for e in groups['all'] | gpucluster.ops.hosts_entries(hostvars, domain='cluster.local') %}
      {{ e.address }} {{ e.names | join(' ') }}
      {% endfor %}
"""

RETURN = r"""
_value:
  description: One entry per host, in input order.
  type: list
  elements: dict
  contains:
    host:
      description: Inventory host name.
      type: str
    address:
      description: IPv4 or IPv6 address.
      type: str
    names:
      description: Names for the address, the fully qualified one first.
      type: list
      elements: str
"""

import ipaddress

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import check_host_names, valid_hostname


def _is_ip(value):
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def _address_of(host, hv, address_var):
    explicit = hv.get(address_var) if hasattr(hv, "get") else None
    if explicit not in (None, ""):
        if not _is_ip(explicit):
            raise AnsibleFilterError(
                "host %s: %s is %r, which is not an IP address" % (host, address_var, explicit))
        return str(ipaddress.ip_address(str(explicit)))
    facts = hv.get("ansible_facts") or {}
    default_ipv4 = facts.get("default_ipv4") or {}
    if default_ipv4.get("address"):
        return default_ipv4["address"]
    ansible_host = hv.get("ansible_host")
    if ansible_host and _is_ip(ansible_host):
        return str(ansible_host)
    raise AnsibleFilterError(
        "host %s: no address for /etc/hosts: set the host variable %s, or gather its network facts "
        "(ansible_facts['default_ipv4'] is missing and ansible_host %r is not an IP address)"
        % (host, address_var, ansible_host))


def hosts_entries(hostnames, hostvars, domain="", address_var="node_baseline_address"):
    """Return [{host, address, names}] for the given inventory hosts."""
    check_host_names(hostnames, "hosts_entries")
    domain = (domain or "").strip(".")
    if domain and not valid_hostname(domain):
        raise AnsibleFilterError("hosts_entries: domain %r is not a valid DNS domain" % (domain,))
    entries = []
    seen = {}
    for host in hostnames:
        host = str(host)
        if not valid_hostname(host):
            raise AnsibleFilterError("host %s: the inventory name is not a valid host name (RFC 1123)" % host)
        try:
            hv = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("host %s: not in hostvars" % host)
        address = _address_of(host, hv, address_var)
        if address in seen:
            raise AnsibleFilterError(
                "hosts %s and %s share the address %s (set %s to tell them apart)"
                % (seen[address], host, address, address_var))
        seen[address] = host
        short = host.split(".", maxsplit=1)[0] if domain and host.endswith("." + domain) else host
        names = ["%s.%s" % (short, domain), short] if domain else [host]
        entries.append({"host": host, "address": address, "names": names})
    return entries


class FilterModule(object):
    """gpucluster.ops hosts_entries filter."""

    def filters(self):
        return {"hosts_entries": hosts_entries}
