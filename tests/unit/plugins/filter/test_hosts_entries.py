import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.hosts_entries import FilterModule, hosts_entries


def hv(**hosts):
    return hosts


def test_registered():
    assert FilterModule().filters()["hosts_entries"] is hosts_entries


def test_address_precedence_explicit_then_facts_then_ansible_host():
    hostvars = hv(
        a={"node_baseline_address": "10.0.0.1", "ansible_facts": {"default_ipv4": {"address": "192.168.0.1"}}},
        b={"ansible_facts": {"default_ipv4": {"address": "192.168.0.2"}}, "ansible_host": "10.0.0.99"},
        c={"ansible_host": "10.0.0.3", "ansible_facts": {}},
    )
    entries = hosts_entries(["a", "b", "c"], hostvars)
    assert [(e["host"], e["address"], e["names"]) for e in entries] == [
        ("a", "10.0.0.1", ["a"]), ("b", "192.168.0.2", ["b"]), ("c", "10.0.0.3", ["c"])]


def test_domain_puts_fqdn_first_and_strips_it_from_fqdn_inventory_names():
    hostvars = hv(**{"gpu01": {"ansible_host": "10.0.0.1"}, "gpu02.c.example": {"ansible_host": "10.0.0.2"}})
    entries = hosts_entries(["gpu01", "gpu02.c.example"], hostvars, domain="c.example")
    assert entries[0]["names"] == ["gpu01.c.example", "gpu01"]
    assert entries[1]["names"] == ["gpu02.c.example", "gpu02"]


def test_ipv6_address_is_normalised():
    entries = hosts_entries(["a"], hv(a={"node_baseline_address": "fd00:0::0001"}))
    assert entries[0]["address"] == "fd00::1"


def test_missing_address_names_host_and_variable():
    with pytest.raises(AnsibleFilterError, match=r"host gpu07: no address .*node_baseline_address"):
        hosts_entries(["gpu07"], hv(gpu07={"ansible_host": "gpu07.example", "ansible_facts": {}}))


def test_bad_explicit_address_names_host_variable_and_value():
    with pytest.raises(AnsibleFilterError, match=r"host a: node_baseline_address is '10.0.0.300'"):
        hosts_entries(["a"], hv(a={"node_baseline_address": "10.0.0.300"}))


def test_duplicate_address_names_both_hosts():
    hostvars = hv(a={"ansible_host": "10.0.0.1"}, b={"node_baseline_address": "10.0.0.1"})
    with pytest.raises(AnsibleFilterError, match=r"hosts a and b share the address 10.0.0.1"):
        hosts_entries(["a", "b"], hostvars)


@pytest.mark.parametrize("name", ["-bad", "bad_name", "a" * 64, ""])
def test_invalid_inventory_name(name):
    with pytest.raises(AnsibleFilterError, match="not a valid host name"):
        hosts_entries([name], {name: {"ansible_host": "10.0.0.1"}})


def test_invalid_domain_and_input():
    with pytest.raises(AnsibleFilterError, match="domain"):
        hosts_entries(["a"], hv(a={"ansible_host": "10.0.0.1"}), domain="bad domain")
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        hosts_entries("a", hv(a={}))
    with pytest.raises(AnsibleFilterError, match="not in hostvars"):
        hosts_entries(["zz"], hv(a={}))


def test_custom_address_variable():
    entries = hosts_entries(["a"], hv(a={"mgmt_ip": "10.1.0.1"}), address_var="mgmt_ip")
    assert entries[0]["address"] == "10.1.0.1"
