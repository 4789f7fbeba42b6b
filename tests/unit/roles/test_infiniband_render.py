"""What the infiniband role writes for each network stack, read back with each stack's own rules where possible."""

import configparser
import os
import shutil
import subprocess
import uuid

import pytest
import yaml

from ansible_collections.gpucluster.ops.plugins.filter.ipoib_addresses import ipoib_addresses

from .rolerender import DEBIAN13, ROLES, RoleRender, trust

INTERFACES = [
    {"name": "ib0", "subnet": "10.20.0.0/16", "mode": "connected", "mtu": 65520},
    {"name": "ib1", "subnet": "fd00:21::/64", "mode": "datagram", "offset": 100},
    {"name": "ib2", "mode": "datagram", "mtu": 2044},
]


def ipoib(host="gpu017", interfaces=None, fabric_mtu=4096):
    return ipoib_addresses([host], {host: {}}, interfaces or INTERFACES, fabric_mtu)[host]


def role(**overrides):
    overrides.setdefault("__infiniband_ipoib", ipoib())
    overrides.setdefault("inventory_hostname", "gpu017")
    return RoleRender("infiniband", "Debian.yml", DEBIAN13, **overrides)


def render_each(template, **overrides):
    """Render a per-interface template once for each interface, as the role's loop does."""
    out = {}
    for interface in role(**overrides).var("__infiniband_ipoib"):
        out[interface["name"]] = role(__infiniband_interface=interface, **overrides).template(template)
    return out


def ini(text):
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str
    parser.read_string(text)
    return parser


def test_addresses_come_from_the_filter():
    interfaces = ipoib()
    assert [i.get("address") for i in interfaces] == ["10.20.0.17/16", "fd00:21::75/64", None]
    assert [i["mtu"] for i in interfaces] == [65520, 4092, 2044]


def test_systemd_networkd_files():
    files = render_each("ipoib.network.j2")
    assert all(text.startswith("#") for text in files.values())
    ib0 = ini(files["ib0"])
    assert ib0["Match"]["Name"] == "ib0"
    assert ib0["Link"]["MTUBytes"] == "65520"
    assert ib0["Link"]["RequiredForOnline"] == "no"
    assert ib0["Network"]["Address"] == "10.20.0.17/16"
    assert ib0["Network"]["LinkLocalAddressing"] == "no"
    assert ib0["Network"]["ConfigureWithoutCarrier"] == "yes"
    # systemd 252 and 257 both ignore an [IPoIB] section in a .network file: the mode comes from udev instead
    assert not ib0.has_section("IPoIB")
    ib1 = ini(files["ib1"])
    assert ib1["Network"]["Address"] == "fd00:21::75/64" and ib1["Network"]["LinkLocalAddressing"] == "ipv6"
    ib2 = ini(files["ib2"])
    assert ib2["Link"]["MTUBytes"] == "2044" and "Address" not in ib2["Network"]


def test_ifupdown_stanzas():
    files = render_each("ipoib.ifupdown.j2")
    lines = {name: [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
             for name, text in files.items()}
    assert lines["ib0"] == ["allow-hotplug ib0", "iface ib0 inet static", "address 10.20.0.17/16", "mtu 65520"]
    assert lines["ib1"] == ["allow-hotplug ib1", "iface ib1 inet6 static", "address fd00:21::75/64", "mtu 4092"]
    assert lines["ib2"] == ["allow-hotplug ib2", "iface ib2 inet manual", "mtu 2044"]


def test_networkmanager_keyfiles():
    files = render_each("ipoib.nmconnection.j2")
    ib0 = ini(files["ib0"])
    assert ib0["connection"]["type"] == "infiniband"
    assert ib0["connection"]["interface-name"] == "ib0"
    assert ib0["connection"]["id"] == "gpucluster-ib0"
    assert uuid.UUID(ib0["connection"]["uuid"])
    assert ib0["infiniband"]["transport-mode"] == "connected" and ib0["infiniband"]["mtu"] == "65520"
    assert ib0["ipv4"]["method"] == "manual" and ib0["ipv4"]["address1"] == "10.20.0.17/16"
    assert ib0["ipv6"]["method"] == "disabled"
    ib1 = ini(files["ib1"])
    assert ib1["infiniband"]["transport-mode"] == "datagram" and ib1["infiniband"]["mtu"] == "4092"
    assert ib1["ipv4"]["method"] == "disabled" and ib1["ipv6"]["address1"] == "fd00:21::75/64"
    assert ini(files["ib2"])["ipv4"]["method"] == "disabled"
    # the UUID is stable per host and interface, so that a re-run changes nothing
    assert ini(render_each("ipoib.nmconnection.j2")["ib0"])["connection"]["uuid"] == ib0["connection"]["uuid"]
    assert ini(render_each("ipoib.nmconnection.j2", inventory_hostname="gpu018")["ib0"])["connection"]["uuid"] != ib0["connection"]["uuid"]


def test_netplan_file():
    text = role().template("ipoib.netplan.yaml.j2")
    assert text.startswith("#")
    data = yaml.safe_load(text)
    assert data["network"]["version"] == 2
    ethernets = data["network"]["ethernets"]
    assert ethernets["ib0"] == {"mtu": 65520, "infiniband-mode": "connected", "optional": True, "dhcp4": False,
                                "dhcp6": False, "addresses": ["10.20.0.17/16"]}
    assert ethernets["ib1"]["infiniband-mode"] == "datagram" and ethernets["ib1"]["addresses"] == ["fd00:21::75/64"]
    assert "addresses" not in ethernets["ib2"]


@pytest.mark.skipif(not shutil.which("netplan"), reason="netplan is not installed here")
def test_netplan_generate_accepts_the_file(tmp_path):
    (tmp_path / "etc" / "netplan").mkdir(parents=True)
    target = tmp_path / "etc" / "netplan" / "60-gpucluster-ipoib.yaml"
    target.write_text(role().template("ipoib.netplan.yaml.j2"))
    target.chmod(0o600)
    proc = subprocess.run(["netplan", "generate", "--root-dir", str(tmp_path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def test_udev_mode_rule():
    text = role().template("ipoib-mode.rules.j2")
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == [
        'ACTION=="add|change", SUBSYSTEM=="net", KERNEL=="ib0", ATTR{type}=="32", ATTR{mode}="connected"',
        'ACTION=="add|change", SUBSYSTEM=="net", KERNEL=="ib1", ATTR{type}=="32", ATTR{mode}="datagram"',
        'ACTION=="add|change", SUBSYSTEM=="net", KERNEL=="ib2", ATTR{type}=="32", ATTR{mode}="datagram"',
    ]


def test_backend_file_lists():
    r = role()
    files = r.var("__infiniband_backend_files")
    assert files["systemd-networkd"] == ["/etc/systemd/network/60-gpucluster-%s.network" % i for i in ("ib0", "ib1", "ib2")]
    assert files["ifupdown"] == ["/etc/network/interfaces.d/gpucluster-%s" % i for i in ("ib0", "ib1", "ib2")]
    assert files["networkmanager"][0] == "/etc/NetworkManager/system-connections/gpucluster-ib0.nmconnection"
    assert files["netplan"] == ["/etc/netplan/60-gpucluster-ipoib.yaml"]
    assert role(__infiniband_ipoib=[]).var("__infiniband_backend_files")["netplan"] == []


@pytest.mark.parametrize("fabric, code", [(4096, 5), (2048, 4), (1024, 3)])
def test_opensm_files(fabric, code):
    r = role(infiniband_fabric_mtu=fabric, infiniband_opensm_priority=14,
             infiniband_opensm_ports=["0x0002c90300a1b2c3", "0x0002c90300a1b2c4"])
    assert "Default=0x7fff, ipoib, mtu=%d : ALL=full ;" % code in r.template("partitions.conf.j2")
    conf = r.template("opensm.conf.j2")
    assert "sm_priority 14\n" in conf and "partition_config_file /etc/opensm/partitions.conf" in conf
    assert 'PORTS="0x0002c90300a1b2c3 0x0002c90300a1b2c4"' in r.template("opensm.default.j2")
    assert 'PORTS="ALL"' in role().template("opensm.default.j2")


def test_ofed_mirror_source_and_key():
    r = role(infiniband_stack="ofed", infiniband_ofed_mirror_url="http://mirror.internal/doca/2.9.1/debian12/x86_64/")
    source = r.template("ofed.sources.j2")
    assert "URIs: http://mirror.internal/doca/2.9.1/debian12/x86_64/\n" in source
    assert "Suites: ./\n" in source and "Signed-By: /etc/apt/keyrings/gpucluster-ofed.asc" in source
    assert r.var("__infiniband_ofed_key_url") == "http://mirror.internal/doca/2.9.1/debian12/x86_64/GPG-KEY-Mellanox.pub"
    trusted = role(infiniband_stack="ofed", infiniband_ofed_mirror_url="file:///srv/ofed", infiniband_ofed_repo_trusted=True)
    assert "Trusted: yes" in trusted.template("ofed.sources.j2")
    keyed = role(infiniband_ofed_mirror_url="http://m/x", infiniband_ofed_repo_key_url="https://keys.internal/k.pub")
    assert keyed.var("__infiniband_ofed_key_url") == "https://keys.internal/k.pub"


def _choose_task():
    with open(os.path.join(ROLES, "infiniband", "tasks", "preflight.yml")) as handle:
        tasks = yaml.safe_load(handle)
    return next(t for t in tasks if t["name"] == "Choose the network stack")


def _probe(paths, netplan_files=0):
    return {"results": [{"item": p, "stat": {"exists": p in paths}} for p in
                        ("/usr/sbin/netplan", "/sbin/ifup", "/etc/network/interfaces")]}, {"matched": netplan_files}


@pytest.mark.parametrize("choice, services, paths, netplan_files, expected", [
    ("auto", {}, ["/usr/sbin/netplan"], 1, "netplan"),
    ("auto", {}, [], 1, "systemd-networkd"),  # netplan files, but no netplan program
    ("auto", {"NetworkManager.service": {"state": "running", "status": "enabled"}}, ["/sbin/ifup"], 0, "networkmanager"),
    ("auto", {"systemd-networkd.service": {"state": "stopped", "status": "enabled"}}, [], 0, "systemd-networkd"),
    ("auto", {"systemd-networkd.service": {"state": "stopped", "status": "disabled"}},
     ["/sbin/ifup", "/etc/network/interfaces"], 0, "ifupdown"),
    ("auto", {}, ["/sbin/ifup"], 0, "systemd-networkd"),
    ("ifupdown", {"NetworkManager.service": {"state": "running", "status": "enabled"}}, [], 0, "ifupdown"),
])
def test_network_stack_detection(choice, services, paths, netplan_files, expected):
    task = _choose_task()
    probe_paths, probe_netplan = _probe(paths, netplan_files)
    facts = dict(DEBIAN13, services=services)
    r = RoleRender("infiniband", "Debian.yml", facts, infiniband_network_backend=choice,
                   __infiniband_probe_paths=probe_paths, __infiniband_probe_netplan=probe_netplan,
                   **trust(task["vars"]))
    assert r.templar.template(trust(task["ansible.builtin.set_fact"]["__infiniband_backend"])).strip() == expected
