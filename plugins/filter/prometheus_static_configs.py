# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: prometheus_static_configs
short_description: Prometheus static_configs entries for the hosts of an inventory group
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Builds one Prometheus C(static_configs) entry per host, a target C(<address>:<port>) with the label C(instance) set
    to the inventory name, so that every metric of a node carries that name whatever address it is scraped at, and the
    label C(node) set to the node's Slurm name (its host variable C(health_check_node_name), else the inventory name), the
    one label that every exporter's series of a node share, which an alert route, an inhibition or a silence matches.
  - The address of a host is its host variable named by O(address_var) when set, else its inventory name (which the
    cluster's C(/etc/hosts) or DNS resolves). The port is the host variable named by O(port_var) when set, else O(port).
  - With O(expected_gpus), each entry also gets an C(expected_gpus) label, the number of GPUs the host should show, from
    its host variable C(monitoring_expected_gpus), else from C(health_check_expected.gpu_count); hosts with neither get
    no such label. The C(GpuMissing) alert compares the GPUs DCGM reports with it.
  - Fails with an error that names the host, the variable and the value when an address, a port or a GPU count is not
    valid, or when two hosts would be scraped at the same address and port.
positional: hostvars
options:
  _input:
    description: Inventory host names, usually C(groups['gpu_nodes']).
    type: list
    elements: str
    required: true
  port:
    description: The exporter's port.
    type: int
    required: true
  port_var:
    description: Name of a host variable that overrides O(port) for that host (empty for none).
    type: str
    default: ""
  address_var:
    description: Name of the host variable that holds the address to scrape.
    type: str
    default: monitoring_scrape_address
  expected_gpus:
    description: Add the C(expected_gpus) label from the inventory.
    type: bool
    default: false
extends_documentation_fragment:
  - gpucluster.ops.hostvars
"""

EXAMPLES = r"""
- name: Render the scrape jobs
  ansible.builtin.set_fact:
    dcgm_static_configs: >-
      {{ groups['gpu_nodes'] | gpucluster.ops.prometheus_static_configs(hostvars, port=9400,
         port_var='dcgm_exporter_port', expected_gpus=true) }}
# [{"targets": ["gpu01:9400"], "labels": {"instance": "gpu01", "node": "gpu01", "expected_gpus": "8"}}, ...]
"""

RETURN = r"""
_value:
  description: One C(static_configs) entry per host, in input order.
  type: list
  elements: dict
  contains:
    targets:
      description: One C(<address>:<port>) (IPv6 addresses in brackets).
      type: list
      elements: str
    labels:
      description: C(instance) (the inventory name), C(node) (the Slurm name) and, with O(expected_gpus), C(expected_gpus)
        where known.
      type: dict
"""

import ipaddress
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import check_host_names, valid_hostname

# A label of a scrape target's host name: as RFC 1123's, with '_' allowed too.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")
_MAX_GPUS = 256


def _host_address(host, value, address_var):
    text = str(value)
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        if not valid_hostname(text, _LABEL):
            raise AnsibleFilterError("host %s: %s is %r, which is neither a host name nor an IP address"
                                     % (host, address_var or "its inventory name", value))
        return text
    return "[%s]" % address if address.version == 6 else str(address)


def _port(host, value, name):
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AnsibleFilterError("host %s: %s is %r, which is not a port (1-65535)" % (host, name, value))
    return int(text)


def _expected(host, hv):
    explicit = hv.get("monitoring_expected_gpus")
    name, value = "monitoring_expected_gpus", explicit
    if explicit in (None, ""):
        expected = hv.get("health_check_expected") or {}
        if not hasattr(expected, "get"):
            return None
        name, value = "health_check_expected.gpu_count", expected.get("gpu_count")
        if value in (None, ""):
            return None
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= _MAX_GPUS:
        raise AnsibleFilterError("host %s: %s is %r, which is not a GPU count (1-%d)" % (host, name, value, _MAX_GPUS))
    return str(int(text))


def prometheus_static_configs(hostnames, hostvars, port=None, port_var="", address_var="monitoring_scrape_address",
                              expected_gpus=False):
    """Return [{targets: [address:port], labels: {instance: host, node: name[, expected_gpus: N]}}] for the hosts."""
    check_host_names(hostnames, "prometheus_static_configs")
    if port is None:
        raise AnsibleFilterError("prometheus_static_configs needs the exporter's port (port=...)")
    default_port = _port("(all)", port, "port")
    entries, seen = [], {}
    for host in hostnames:
        host = str(host)
        try:
            hv = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("host %s is not in the inventory's hostvars" % host)
        explicit = hv.get(address_var) if address_var else None
        if explicit in (None, ""):
            address = _host_address(host, host, "")
        else:
            address = _host_address(host, explicit, address_var)
        host_port = default_port
        if port_var and hv.get(port_var) not in (None, ""):
            host_port = _port(host, hv.get(port_var), port_var)
        target = "%s:%d" % (address, host_port)
        if target in seen:
            raise AnsibleFilterError("hosts %s and %s would both be scraped at %s: give one of them %s"
                                     % (seen[target], host, target, address_var))
        seen[target] = host
        labels = {"instance": host, "node": str(hv.get("health_check_node_name") or host)}
        if expected_gpus:
            count = _expected(host, hv)
            if count is not None:
                labels["expected_gpus"] = count
        entries.append({"targets": [target], "labels": labels})
    return entries


class FilterModule(object):
    """Prometheus scrape targets from the inventory."""

    def filters(self):
        return {"prometheus_static_configs": prometheus_static_configs}
