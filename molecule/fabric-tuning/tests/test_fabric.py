"""Verify infiniband on a converged container: packages, the IPoIB files read back and applied by the network stacks
themselves to veth pairs named like the IPoIB interfaces, the udev mode rule, opensm, and the role's notes."""

import json
import time

import pytest

# What the scenario's inventory asks for (node index 12 or 13 from the container's name).
WANT = {
    "debian12": {"backend": "systemd-networkd", "ib0": ("10.20.0.12/24", 65520, "connected"),
                 "ib1": ("10.21.0.112/24", 4092, "datagram")},
    "debian13": {"backend": "ifupdown", "ib0": ("10.20.0.13/24", 65520, "connected"),
                 "ib1": ("10.21.0.200/24", 2044, "datagram")},
}


def group(host):
    groups = host.ansible.get_variables()["group_names"]
    return "debian12" if "debian12" in groups else "debian13"


def link(host, name):
    data = json.loads(host.check_output("ip -j addr show dev %s" % name))[0]
    return data["mtu"], ["%s/%d" % (a["local"], a["prefixlen"]) for a in data.get("addr_info", [])]


@pytest.fixture
def veths(host):
    """veth pairs named ib0 and ib1 (peers up), removed afterwards: stand-ins the network stacks can configure."""
    def remove():
        for name in ("ib0", "ib1"):
            host.run("ip link del %s 2>/dev/null" % name)
    remove()
    for name in ("ib0", "ib1"):
        host.check_output("ip link add %s type veth peer name %speer && ip link set %speer up" % (name, name, name))
    yield
    remove()


@pytest.mark.parametrize("package", ["rdma-core", "infiniband-diags", "ibverbs-utils", "perftest"])
def test_rdma_packages(host, package):
    assert host.package(package).is_installed


def test_udev_mode_rule(host):
    rules = host.file("/etc/udev/rules.d/70-gpucluster-ipoib.rules")
    assert rules.mode == 0o644 and rules.content_string.startswith("#")
    assert 'KERNEL=="ib0", ATTR{type}=="32", ATTR{mode}="connected"' in rules.content_string
    assert 'KERNEL=="ib1", ATTR{type}=="32", ATTR{mode}="datagram"' in rules.content_string
    if group(host) == "debian13":  # udevadm verify exists from systemd 254 on
        out = host.run("udevadm verify --resolve-names=never /etc/udev/rules.d/70-gpucluster-ipoib.rules")
        assert out.rc == 0, out.stderr


def test_networkd_applies_the_files(host, veths):
    if group(host) != "debian12":
        pytest.skip("systemd-networkd is the stack of the Debian 12 instance")
    want = WANT["debian12"]
    for name in ("ib0", "ib1"):
        conf = host.file("/etc/systemd/network/60-gpucluster-%s.network" % name)
        assert conf.exists and conf.content_string.startswith("#")
    assert host.service("systemd-networkd").is_enabled
    host.check_output("systemctl start systemd-networkd && networkctl reload")
    deadline = time.time() + 60
    while time.time() < deadline:
        states = host.check_output("networkctl list --no-legend --no-pager")
        if all(" configured" in line for line in states.splitlines() if line.split()[1] in ("ib0", "ib1")) \
                and link(host, "ib0")[1] and link(host, "ib1")[1]:
            break
        time.sleep(1)
    for name in ("ib0", "ib1"):
        address, mtu, _mode = want[name]
        assert link(host, name) == (mtu, [address]), host.run("networkctl status %s --no-pager" % name).stdout
    # networkd's own parser reports unknown sections or keys in the journal when it loads a file
    journal = host.check_output("journalctl -u systemd-networkd --no-pager -o cat")
    complaints = [line for line in journal.splitlines() if "60-gpucluster-" in line
                  and any(word in line for word in ("Unknown", "Ignoring", "Failed", "Invalid", "not valid"))]
    assert complaints == []


def test_ifupdown_applies_the_files(host, veths):
    if group(host) != "debian13":
        pytest.skip("ifupdown is the stack of the Debian 13 instance")
    want = WANT["debian13"]
    assert host.package("ifupdown").is_installed
    # /etc/network/interfaces reads the role's files, and ifupdown parses them
    assert set(host.check_output("ifquery --list --allow=hotplug").split()) >= {"ib0", "ib1"}
    for name in ("ib0", "ib1"):
        assert "mtu: %d" % want[name][1] in host.check_output("ifquery %s" % name).splitlines()
    host.check_output("ifup ib0 ib1")
    try:
        for name in ("ib0", "ib1"):
            address, mtu, _mode = want[name]
            assert link(host, name) == (mtu, [address])
    finally:
        host.run("ifdown ib0 ib1")


def test_opensm_configured_on_the_chosen_node(host):
    if group(host) != "debian13":
        assert not host.package("opensm").is_installed
        return
    assert host.package("opensm").is_installed
    assert 'PORTS="ALL"' in host.file("/etc/default/opensm").content_string
    assert "sm_priority 14\n" in host.file("/etc/opensm/opensm.conf").content_string
    # the scenario's Debian 13 fabric has a 2048-byte IB MTU: opensm's code 4
    assert "Default=0x7fff, ipoib, mtu=4 : ALL=full ;" in host.file("/etc/opensm/partitions.conf").content_string
    assert host.service("opensm").is_enabled
    assert not host.service("opensm").is_running  # no InfiniBand port in a container


def test_the_role_says_what_did_not_apply(host):
    notes = json.loads(host.file("/root/gpucluster-notes.json").content_string)
    fabric = [n for n in notes if n.startswith("infiniband:")]
    want = WANT[group(host)]
    assert any("not applied: a container has no InfiniBand device" in n and want["backend"] in n
               and want["ib0"][0] in n and "MTU 65520" in n for n in fabric), fabric
    assert any("no InfiniBand port here (container)" in n for n in fabric), fabric
