"""ipoib_interfaces / ipoib_addresses: MTU and mode rules, address assignment, and the errors for bad input."""

import ipaddress
import time

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.filter.ipoib_addresses import FilterModule as AddressesModule
from ansible_collections.gpucluster.ops.plugins.filter.ipoib_addresses import ipoib_addresses
from ansible_collections.gpucluster.ops.plugins.filter.ipoib_interfaces import FilterModule as InterfacesModule
from ansible_collections.gpucluster.ops.plugins.filter.ipoib_interfaces import ipoib_interfaces
from ansible_collections.gpucluster.ops.plugins.module_utils import _ipoib

IB0 = {"name": "ib0", "subnet": "10.20.0.0/24"}


def test_registered():
    assert AddressesModule().filters()["ipoib_addresses"] is ipoib_addresses
    assert InterfacesModule().filters()["ipoib_interfaces"] is ipoib_interfaces


# --- modes and MTUs -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, fabric, mode, mtu", [
    ({"name": "ib0"}, 4096, "connected", 65520),
    ({"name": "ib0", "mode": "datagram"}, 4096, "datagram", 4092),
    ({"name": "ib0", "mode": "datagram"}, 2048, "datagram", 2044),
    ({"name": "ib0", "mode": "datagram", "mtu": 2044}, 4096, "datagram", 2044),
    ({"name": "ib0", "mode": "connected", "mtu": "9000"}, 4096, "connected", 9000),
    ({"name": "ib0.8001", "mode": None, "mtu": None}, 4096, "connected", 65520),
    ({"name": "ibp65s0f1", "mode": "datagram", "mtu": 1500}, 2048, "datagram", 1500),
])
def test_defaults_and_valid_mtus(spec, fabric, mode, mtu):
    (result,) = ipoib_interfaces([spec], fabric)
    assert (result["mode"], result["mtu"], result["offset"]) == (mode, mtu, 0)
    assert "subnet" not in result


@pytest.mark.parametrize("spec, fabric, words", [
    ({"name": "ib0", "mode": "datagram", "mtu": 65520}, 4096, ["ib0", "65520", "datagram", "4092", "connected mode"]),
    ({"name": "ib0", "mode": "datagram", "mtu": 4092}, 2048, ["4092", "2044", "2048-byte"]),
    ({"name": "ib0", "mode": "connected", "mtu": 65521}, 4096, ["65521", "above 65520"]),
    ({"name": "ib0", "mode": "datagram", "mtu": 70000}, 4096, ["70000", "datagram"]),
    ({"name": "ib0", "mtu": 67}, 4096, ["67", "minimum"]),
    ({"name": "ib0", "mtu": "jumbo"}, 4096, ["'jumbo'", "not a number"]),
    ({"name": "ib0", "mtu": True}, 4096, ["True", "not a number"]),
    ({"name": "ib0", "mode": "reliable"}, 4096, ["'reliable'", "connected or datagram"]),
    ({"name": "ib0", "mtu_bytes": 9000}, 4096, ["mtu_bytes", "unknown key"]),
    ({"name": "ib0/1"}, 4096, ["'ib0/1'", "interface name"]),
    ({"name": "averyveryverylongname"}, 4096, ["interface name"]),
    ({"mode": "connected"}, 4096, ["None", "interface name"]),
    ({"name": "ib0", "offset": -1}, 4096, ["offset", "-1"]),
    ("ib0", 4096, ["'ib0'", "mapping"]),
])
def test_bad_interfaces_name_host_variable_and_value(spec, fabric, words):
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_interfaces([spec], fabric, host="gpu07")
    message = str(err.value)
    assert message.startswith("host gpu07: infiniband_ipoib_interfaces[0]"), message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize("interfaces, words", [
    ("ib0", ["'ib0'", "list"]),
    ({"name": "ib0"}, ["list"]),
    ([{"name": "ib0"}, {"name": "ib0", "mode": "datagram"}], ["[1]", "ib0", "twice"]),
    ([{"name": "ib0", "subnet": "10.20.0.5/16"}], ["10.20.0.5/16", "host bits", "10.20.0.0/16"]),
    ([{"name": "ib0", "subnet": "10.20.0.0"}], ["prefix length"]),
    ([{"name": "ib0", "subnet": "10.20.0.0/33"}], ["10.20.0.0/33", "CIDR"]),
    ([{"name": "ib0", "subnet": "infiniband/16"}], ["infiniband/16"]),
])
def test_bad_interface_lists(interfaces, words):
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_interfaces(interfaces, 4096, host="gpu07", var="my_var")
    for word in ["gpu07", "my_var"] + words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize("fabric", [4000, "big", True, 8192, None])
def test_fabric_mtu_must_be_an_ib_mtu(fabric):
    with pytest.raises(AnsibleFilterError, match="fabric_mtu"):
        ipoib_interfaces([{"name": "ib0"}], fabric)
    with pytest.raises(AnsibleFilterError, match="fabric_mtu"):
        ipoib_addresses(["gpu1"], {"gpu1": {}}, [IB0], fabric)


def test_subnets_are_normalised():
    (result,) = ipoib_interfaces([{"name": "ib0", "subnet": " fd00:20::/64 "}])
    assert (result["subnet"], result["prefixlen"]) == ("fd00:20::/64", 64)


@given(mode=st.sampled_from(_ipoib.MODES), fabric=st.sampled_from(_ipoib.FABRIC_MTUS),
       mtu=st.integers(min_value=-10, max_value=70000))
def test_mtu_rule_property(mode, fabric, mtu):
    """An MTU is accepted exactly when 68 <= mtu <= the mode's ceiling."""
    ceiling = 65520 if mode == "connected" else fabric - 4
    spec = {"name": "ib0", "mode": mode, "mtu": mtu}
    if 68 <= mtu <= ceiling:
        assert ipoib_interfaces([spec], fabric)[0]["mtu"] == mtu
    else:
        with pytest.raises(AnsibleFilterError, match=r"ib0\): mtu %d" % mtu):
            ipoib_interfaces([spec], fabric)


# --- addresses ------------------------------------------------------------------------------------------------

def hosts(*names, **hostvars):
    return list(names), {n: dict(hostvars.get(n, {})) for n in names}


def test_address_is_network_plus_offset_plus_index():
    names, hv = hosts("gpu001", "gpu017", "rack2-gpu05.cluster.internal", "login",
                      login={"infiniband_node_index": 250})
    result = ipoib_addresses(names, hv, [IB0, {"name": "ib1", "subnet": "10.21.0.0/16", "offset": 1000,
                                               "mode": "datagram"}])
    assert [i["address"] for i in result["gpu017"]] == ["10.20.0.17/24", "10.21.3.249/16"]
    assert result["gpu017"][1]["mtu"] == 4092 and result["gpu017"][1]["index"] == 17
    assert result["rack2-gpu05.cluster.internal"][0]["ip"] == "10.20.0.5"
    assert result["login"][0]["address"] == "10.20.0.250/24"
    assert result["gpu001"][0] == {"name": "ib0", "mode": "connected", "mtu": 65520, "offset": 0,
                                   "subnet": "10.20.0.0/24", "prefixlen": 24, "index": 1, "ip": "10.20.0.1",
                                   "address": "10.20.0.1/24"}


def test_host_variables_win_over_the_default_interfaces():
    names, hv = hosts("gpu1", "gpu2", "stor1",
                      gpu2={"infiniband_ipoib_interfaces": [{"name": "ib1", "subnet": "10.20.0.0/24", "offset": 100}]},
                      stor1={"infiniband_ipoib_interfaces": []})
    result = ipoib_addresses(names, hv, [IB0])
    assert result["gpu1"][0]["address"] == "10.20.0.1/24"
    assert [(i["name"], i["ip"]) for i in result["gpu2"]] == [("ib1", "10.20.0.102")]
    assert result["stor1"] == []


def test_pinned_addresses():
    names, hv = hosts("gpu1", "storage", storage={"infiniband_ipoib_addresses": {"ib0": "10.20.0.200"}})
    result = ipoib_addresses(names, hv, [IB0])
    assert result["storage"][0]["address"] == "10.20.0.200/24" and "index" not in result["storage"][0]
    names, hv = hosts("gpu1", "storage", storage={"infiniband_ipoib_addresses": {"ib0": "10.20.0.200/24"}})
    assert ipoib_addresses(names, hv, [IB0])["storage"][0]["ip"] == "10.20.0.200"


def test_interfaces_without_subnet_get_no_address_and_need_no_index():
    names, hv = hosts("login")
    assert ipoib_addresses(names, hv, [{"name": "ib0", "mode": "datagram"}])["login"] == [
        {"name": "ib0", "mode": "datagram", "mtu": 4092, "offset": 0}]


@pytest.mark.parametrize("subnet, index, ip", [
    ("10.20.0.0/31", 0, "10.20.0.0"),
    ("10.20.0.0/31", 1, "10.20.0.1"),
    ("10.20.0.7/32", 0, "10.20.0.7"),
    ("fd00::/64", 1, "fd00::1"),
    ("fd00::/64", 65536, "fd00::1:0"),
])
def test_small_and_ipv6_subnets(subnet, index, ip):
    names, hv = hosts("n", n={"infiniband_node_index": index})
    assert ipoib_addresses(names, hv, [{"name": "ib0", "subnet": subnet}])["n"][0]["ip"] == ip


def test_collision_names_both_hosts_and_interfaces():
    names, hv = hosts("rack1-gpu05", "rack2-gpu05")
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv, [IB0])
    message = str(err.value)
    assert "hosts rack1-gpu05 and rack2-gpu05 both get 10.20.0.5" in message
    assert "rack1-gpu05 ib0, rack2-gpu05 ib0" in message and "infiniband_node_index" in message


def test_collision_between_an_index_and_a_pinned_address():
    names, hv = hosts("gpu9", "storage", storage={"infiniband_ipoib_addresses": {"ib0": "10.20.0.9"}})
    with pytest.raises(AnsibleFilterError, match="hosts gpu9 and storage both get 10.20.0.9"):
        ipoib_addresses(names, hv, [IB0])


def test_collision_across_interfaces_through_offsets():
    names, hv = hosts("gpu1", "gpu101")
    with pytest.raises(AnsibleFilterError, match=r"gpu1 ib1, gpu101 ib0"):
        ipoib_addresses(names, hv, [IB0, {"name": "ib1", "subnet": "10.20.0.0/24", "offset": 100}])


def test_exhausted_subnet_names_every_host_that_does_not_fit():
    names, hv = hosts("gpu250", "gpu254", "gpu255", "gpu300", "gpu1")
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv, [IB0])
    message = str(err.value)
    assert "subnet 10.20.0.0/24 is exhausted" in message
    assert "254 usable address(es), 10.20.0.1-10.20.0.254" in message
    assert "gpu255 (infiniband_node_index 255 + offset 0), gpu300 (infiniband_node_index 300 + offset 0)" in message
    assert "gpu254 (" not in message and "gpu250 (" not in message


def test_offset_can_exhaust_a_subnet():
    names, hv = hosts("gpu10")
    with pytest.raises(AnsibleFilterError, match=r"10.20.0.0/24 is exhausted.*gpu10 \(infiniband_node_index 10 \+ offset 250\)"):
        ipoib_addresses(names, hv, [dict(IB0, offset=250)])


@pytest.mark.parametrize("name, hostvars, words", [
    ("login", {}, ["host login", "no node index", "infiniband_node_index"]),
    ("gpu0", {}, ["host gpu0", "network address of 10.20.0.0/24"]),
    ("gpu1", {"infiniband_node_index": "first"}, ["host gpu1", "infiniband_node_index is 'first'"]),
    ("gpu1", {"infiniband_node_index": -3}, ["host gpu1", "-3"]),
    ("gpu1", {"infiniband_node_index": True}, ["host gpu1", "True"]),
    ("gpu1", {"infiniband_ipoib_addresses": {"ib0": "10.30.0.1"}}, ["host gpu1", "10.30.0.1", "not a usable address"]),
    ("gpu1", {"infiniband_ipoib_addresses": {"ib0": "10.20.0.255"}}, ["10.20.0.255", "not a usable"]),
    ("gpu1", {"infiniband_ipoib_addresses": {"ib0": "10.20.0.9/16"}}, ["10.20.0.9/16", "subnet of ib0 is 10.20.0.0/24"]),
    ("gpu1", {"infiniband_ipoib_addresses": {"ib0": "ten"}}, ["'ten'", "not an IP address"]),
    ("gpu1", {"infiniband_ipoib_addresses": {"ib3": "10.20.0.9"}}, ["ib3", "not one of its IPoIB interfaces"]),
    ("gpu1", {"infiniband_ipoib_addresses": ["10.20.0.9"]}, ["maps interface names"]),
    ("gpu1", {"infiniband_ipoib_interfaces": [{"name": "ib0", "mode": "datagram", "mtu": 65520}]},
     ["host gpu1: infiniband_ipoib_interfaces[0] (ib0): mtu 65520"]),
])
def test_bad_host_input_names_the_host(name, hostvars, words):
    names, hv = hosts(name, **{name: hostvars})
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv, [IB0])
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_all_problems_are_reported_at_once():
    names, hv = hosts("login", "a5", "b5", "gpu900")
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv, [IB0])
    message = str(err.value)
    assert "host login" in message and "a5 and b5" in message and "gpu900" in message


def test_bad_arguments():
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        ipoib_addresses("gpu1", {}, [IB0])
    with pytest.raises(AnsibleFilterError, match="host ghost: not in hostvars"):
        ipoib_addresses(["ghost"], {}, [IB0])


@settings(max_examples=60, deadline=None)
@given(prefix=st.integers(min_value=20, max_value=28), offset=st.integers(min_value=0, max_value=40),
       indexes=st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=40, unique=True))
def test_assignment_property(prefix, offset, indexes):
    """Distinct indexes that fit give distinct addresses inside the subnet; those that do not fit are all named."""
    network = ipaddress.ip_network("10.64.0.0/%d" % prefix)
    capacity = network.num_addresses - 2
    names = ["n%d" % i for i in indexes]
    hv = {n: {} for n in names}
    spec = [{"name": "ib0", "subnet": str(network), "offset": offset}]
    fits = [i for i in indexes if i + offset <= capacity]
    if len(fits) == len(indexes):
        result = ipoib_addresses(names, hv, spec)
        ips = [ipaddress.ip_address(result[n][0]["ip"]) for n in names]
        assert len(set(ips)) == len(ips)
        assert all(ip in network and ip not in (network.network_address, network.broadcast_address) for ip in ips)
        assert [int(ip) - int(network.network_address) for ip in ips] == [i + offset for i in indexes]
    else:
        with pytest.raises(AnsibleFilterError) as err:
            ipoib_addresses(names, hv, spec)
        for i in indexes:
            assert (("n%d (" % i) in str(err.value)) == (i + offset > capacity) or "more problem" in str(err.value)


def test_a_thousand_hosts_take_little_time():
    names = ["gpu%04d" % i for i in range(1, 2001)]
    hv = {n: {} for n in names}
    spec = [{"name": "ib0", "subnet": "10.20.0.0/16"}, {"name": "ib1", "subnet": "10.21.0.0/16", "offset": 4000}]
    # CPU time of this process, not wall time: a loaded machine (make test runs the unit tests beside molecule)
    # stretched the wall clock past the bound; a quadratic filter would not fit it in CPU seconds either.
    start = time.process_time()
    result = ipoib_addresses(names, hv, spec)
    assert time.process_time() - start < 2.0
    assert result["gpu2000"][1]["ip"] == "10.21.23.112"


def test_default_interfaces_only_for_default_hosts_and_variables_in_order():
    names, hv = hosts("gpu1", "gpu2", "login", "gpu3",
                      gpu2={"__own": [{"name": "ib1", "subnet": "10.20.0.0/24", "offset": 10}],
                            "infiniband_ipoib_interfaces": [IB0]},
                      gpu3={"infiniband_ipoib_interfaces": [IB0]})
    result = ipoib_addresses(names, hv, [IB0], interfaces_var=["__own", "infiniband_ipoib_interfaces"],
                             default_hosts=["gpu1", "gpu2"])
    assert result["gpu1"][0]["ip"] == "10.20.0.1"
    assert [(i["name"], i["ip"]) for i in result["gpu2"]] == [("ib1", "10.20.0.12")]
    assert result["login"] == []      # not a default host, no variable: no interfaces, so no index needed
    assert result["gpu3"][0]["ip"] == "10.20.0.3"
    with pytest.raises(AnsibleFilterError, match="interfaces_var"):
        ipoib_addresses(names, hv, [IB0], interfaces_var=[1])


# --- one fabric: each interface name (rail) has one subnet, mode and MTU on every host ---------------------------

RAIL0 = {"name": "ib0", "subnet": "10.40.0.0/22", "mode": "connected", "mtu": 65520}
RAIL1 = {"name": "ib1", "subnet": "10.41.0.0/22", "mode": "connected", "mtu": 65520}


def fabric(count=6, **odd):
    """gpu001.. on rails ib0 and ib1; ``odd`` gives some hosts interfaces of their own."""
    names = ["gpu%03d" % i for i in range(1, count + 1)]
    hv = {n: {"infiniband_ipoib_interfaces": [dict(RAIL0), dict(RAIL1)]} for n in names}
    for name, interfaces in odd.items():
        hv.setdefault(name, {})["infiniband_ipoib_interfaces"] = interfaces
    return sorted(hv), hv


def rail_error(names, hv):
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv)
    return str(err.value)


@pytest.mark.parametrize("key,value,shown,common", [
    ("subnet", "10.50.0.0/22", "subnet 10.50.0.0/22", "subnet 10.40.0.0/22"),
    ("mode", "datagram", "mode datagram", "mode connected"),
    ("mtu", 9000, "mtu 9000", "mtu 65520"),
])
def test_a_host_whose_rail_differs_from_the_fabric_is_refused(key, value, shown, common):
    odd = dict(RAIL0, **{key: value})
    if key == "mode":
        odd["mtu"] = 4092   # a valid datagram MTU: only the mode differs from the other hosts (and so the MTU)
    names, hv = fabric(head01=[odd, dict(RAIL1)])
    hv["head01"]["infiniband_node_index"] = 250
    message = rail_error(names, hv)
    label = {"subnet": "subnets", "mode": "modes", "mtu": "MTUs"}[key]
    assert ("infiniband_ipoib_interfaces: interface ib0 has different %s on the hosts of one fabric: %s on gpu001, "
            "gpu002, gpu003, gpu004, gpu005 (6 hosts, ...); %s on head01 (1 host)" % (label, common, shown)) in message
    assert "interface ib1" not in message     # ib1 agrees everywhere


def test_each_rail_is_compared_by_itself_so_multi_rail_hosts_pass():
    names, hv = fabric(8)
    result = ipoib_addresses(names, hv)
    assert [i["address"] for i in result["gpu008"]] == ["10.40.0.8/22", "10.41.0.8/22"]


def test_offsets_pins_and_hosts_without_a_rail_are_not_differences():
    names, hv = fabric(4, head01=[dict(RAIL0, offset=250)], storage=[dict(RAIL1, offset=300)], login=[])
    hv["head01"]["infiniband_node_index"] = 1
    hv["storage"]["infiniband_ipoib_addresses"] = {"ib1": "10.41.3.1"}
    result = ipoib_addresses(names, hv)
    assert result["head01"][0]["ip"] == "10.40.0.251" and result["storage"][0]["ip"] == "10.41.3.1"
    assert result["login"] == []


def test_default_mtus_are_compared_as_they_come_out():
    """mtu left out is the mode's largest: 65520 written and left out agree; datagram's 4092 does not."""
    names, hv = fabric(2, gpu003=[{"name": "ib0", "subnet": "10.40.0.0/22"}, dict(RAIL1)])
    ipoib_addresses(names, hv)
    names, hv = fabric(2, gpu003=[{"name": "ib0", "subnet": "10.40.0.0/22", "mode": "datagram"}, dict(RAIL1)])
    message = rail_error(names, hv)
    assert "interface ib0 has different modes" in message and "mode datagram on gpu003 (1 host)" in message
    assert "interface ib0 has different MTUs" in message and "mtu 4092 on gpu003 (1 host)" in message


def test_a_rail_with_a_subnet_on_some_hosts_and_none_on_others_is_refused():
    names, hv = fabric(2, gpu003=[{"name": "ib0", "mode": "connected", "mtu": 65520}, dict(RAIL1)])
    assert ("interface ib0 has different subnets on the hosts of one fabric: subnet 10.40.0.0/22 on gpu001, gpu002 "
            "(2 hosts); no subnet on gpu003 (1 host)") in rail_error(names, hv)


def test_every_differing_rail_and_key_is_reported_at_once():
    names, hv = fabric(3, gpu004=[dict(RAIL0, mtu=2044, mode="datagram"), dict(RAIL1, subnet="10.42.0.0/22")])
    message = rail_error(names, hv)
    for words in ("interface ib0 has different modes", "interface ib0 has different MTUs",
                  "interface ib1 has different subnets"):
        assert words in message
    assert "interface ib0 has different subnets" not in message and "interface ib1 has different modes" not in message


def test_the_fabric_check_names_the_variable_it_reads():
    names, hv = hosts("gpu1", "gpu2", gpu1={"__own": [IB0]}, gpu2={"__own": [dict(IB0, mtu=9000)]})
    with pytest.raises(AnsibleFilterError) as err:
        ipoib_addresses(names, hv, interfaces_var=["__own", "infiniband_ipoib_interfaces"])
    assert "infiniband_ipoib_interfaces: interface ib0 has different MTUs" in str(err.value)


def test_the_fabric_check_stays_fast_on_two_thousand_hosts():
    names, hv = fabric(2000)
    hv["gpu1999"]["infiniband_ipoib_interfaces"] = [dict(RAIL0, mtu=4000), dict(RAIL1)]
    start = time.process_time()  # CPU seconds, as above: the fresh-clone CI's wall clock read 3.2 s under load
    message = rail_error(names, hv)
    assert time.process_time() - start < 3.0
    assert "mtu 65520 on gpu0001" not in message and "mtu 4000 on gpu1999 (1 host)" in message
