"""The infiniband role's IPoIB settings, applied by the network stacks on this machine's real kernel.

Each case makes a network namespace of its own with a veth pair named ib0/ib1 (stand-ins for IPoIB devices, which
need hardware), runs the real role there (ansible-playbook, tags infiniband_configure) inside a private mount
namespace whose /etc is an overlay and whose /run is a tmpfs, so that the host's files stay untouched, then lets the
backend apply what the role wrote:

- systemd-networkd: a private systemd-networkd in the namespace reads the role's .network files;
- ifupdown: ifup reads the role's interfaces.d files (this machine's ifup, or one unpacked from Debian's package).

The interfaces must then have the MTU and address the role set. Needs root, iproute2, overlayfs and (for networkd)
systemd-networkd; skips otherwise. The namespace and the temporary tree are removed at the end.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.path.join(ROOT, ".cache", "netns-test")
NETWORKD = next((p for p in ("/lib/systemd/systemd-networkd", "/usr/lib/systemd/systemd-networkd") if os.path.exists(p)),
                None)
INTERFACES = [
    {"name": "ib0", "subnet": "10.20.0.0/24", "mode": "connected", "mtu": 65520},
    {"name": "ib1", "subnet": "10.21.0.0/24", "mode": "datagram", "offset": 100},
]
# gpu007: node index 7
WANT = {"ib0": (65520, "10.20.0.7/24"), "ib1": (4092, "10.21.0.107/24")}

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(not shutil.which("ip"), reason="iproute2 (ip) is not installed"),
]


def _run(argv, check=False, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=check, **kwargs)


@pytest.fixture
def netns():
    name = "gpc-ipoib-%d" % os.getpid()
    _run(["ip", "netns", "del", name])
    made = _run(["ip", "netns", "add", name])
    if made.returncode != 0:
        pytest.skip("cannot make a network namespace here: %s" % made.stderr.strip())
    try:
        for interface in ("ib0", "ib1"):
            peer = _run(["ip", "-n", name, "link", "add", interface, "type", "veth", "peer", "name", interface + "peer"])
            assert peer.returncode == 0, peer.stderr
            assert _run(["ip", "-n", name, "link", "set", interface + "peer", "up"]).returncode == 0
        yield name
    finally:
        pids = _run(["ip", "netns", "pids", name]).stdout.split()
        for pid in pids:
            _run(["kill", "-9", pid])
        _run(["ip", "netns", "del", name])
    assert name not in _run(["ip", "netns", "list"]).stdout


def _ifup_dir():
    """A directory holding ifup: this machine's, or Debian's package unpacked into .cache (apt-get download)."""
    if shutil.which("ifup"):
        return os.path.dirname(shutil.which("ifup"))
    unpacked = os.path.join(CACHE, "ifupdown")
    found = glob.glob(os.path.join(unpacked, "*", "ifup")) + glob.glob(os.path.join(unpacked, "usr", "sbin", "ifup"))
    if not found:
        os.makedirs(CACHE, exist_ok=True)
        download = _run(["apt-get", "download", "ifupdown"], cwd=CACHE)
        debs = sorted(glob.glob(os.path.join(CACHE, "ifupdown_*.deb")))
        if download.returncode != 0 or not debs:
            return None
        if _run(["dpkg-deb", "-x", debs[-1], unpacked]).returncode != 0:
            return None
        found = glob.glob(os.path.join(unpacked, "*", "ifup")) + glob.glob(os.path.join(unpacked, "usr", "sbin", "ifup"))
    return os.path.dirname(found[0]) if found else None


SCRIPT = r"""
set -eu
work=$1 backend=$2
mkdir -p "$work/etc-upper" "$work/etc-work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$work/etc-upper,workdir=$work/etc-work" /etc
mount -t tmpfs tmpfs /run
mkdir -p /run/network
# a read-only /sys tells systemd-networkd that no udev will announce the links
mount -o bind,remount,ro /sys
ansible-playbook -i "$work/inventory.yml" "$work/play.yml" --tags infiniband_configure >"$work/ansible.log" 2>&1
case $backend in
systemd-networkd)
    mkdir -p /run/systemd/netif
    chown systemd-network:systemd-network /run/systemd/netif 2>/dev/null || true
    SYSTEMD_LOG_TARGET=console "$NETWORKD" >"$work/backend.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 60); do
        if ip -o addr show dev ib0 | grep -q 10.20.0. && ip -o addr show dev ib1 | grep -q 10.21.0.; then break; fi
        sleep 0.5
    done
    kill "$pid"
    wait "$pid" || true
    ;;
ifupdown)
    mkdir -p /etc/network/if-pre-up.d /etc/network/if-up.d /etc/network/if-down.d /etc/network/if-post-down.d
    ifup --state-dir="$work/ifstate" ib0 ib1 >"$work/backend.log" 2>&1
    ;;
esac
find /etc/systemd/network /etc/network /etc/udev -name '*gpucluster*' | sort >"$work/files.txt"
"""


def _apply(tmp_path, netns, backend, extra_path=""):
    inventory = {"all": {"hosts": {"gpu007": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "infiniband_ipoib_interfaces": INTERFACES, "infiniband_network_backend": backend,
        "infiniband_network_apply": False}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "IPoIB in a network namespace", "hosts": "all", "gather_facts": False,
        "roles": [{"role": "gpucluster.ops.infiniband"}]}]))
    (tmp_path / "apply.sh").write_text(SCRIPT)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_INJECT_FACT_VARS="False",
               NETWORKD=NETWORKD or "", PATH=os.pathsep.join(p for p in (
                   extra_path, os.path.dirname(sys.executable), os.environ.get("PATH", "")) if p))
    proc = _run(["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
                 "sh", str(tmp_path / "apply.sh"), str(tmp_path), backend], env=env, timeout=600)
    logs = "\n".join("--- %s\n%s" % (name, (tmp_path / name).read_text())
                     for name in ("ansible.log", "backend.log") if (tmp_path / name).exists())
    assert proc.returncode == 0, "%s\n%s\n%s" % (proc.stdout, proc.stderr, logs)
    return (tmp_path / "files.txt").read_text().split(), logs


def _links(netns):
    data = json.loads(_run(["ip", "-n", netns, "-j", "addr", "show"], check=True).stdout)
    return {d["ifname"]: (d["mtu"], ["%s/%d" % (a["local"], a["prefixlen"]) for a in d.get("addr_info", [])
                                     if a["family"] == "inet"]) for d in data}


def _check(netns, files, logs, expected_files):
    assert files == expected_files, logs
    links = _links(netns)
    for name, (mtu, address) in WANT.items():
        assert links[name] == (mtu, [address]), "%s: %s\n%s" % (name, links[name], logs)
    # the host's own /etc did not get the role's files
    assert not glob.glob("/etc/systemd/network/60-gpucluster-*") and not os.path.exists("/etc/network/interfaces.d/gpucluster-ib0")


@pytest.mark.skipif(NETWORKD is None, reason="systemd-networkd is not installed")
def test_systemd_networkd_applies_the_roles_mtu_and_address(tmp_path, netns):
    files, logs = _apply(tmp_path, netns, "systemd-networkd")
    _check(netns, files, logs, ["/etc/systemd/network/60-gpucluster-ib0.network",
                                "/etc/systemd/network/60-gpucluster-ib1.network",
                                "/etc/udev/rules.d/70-gpucluster-ipoib.rules"])
    assert "60-gpucluster" not in "".join(line for line in logs.splitlines() if "Unknown" in line or "Ignoring" in line)


def test_ifupdown_applies_the_roles_mtu_and_address(tmp_path, netns):
    ifup = _ifup_dir()
    if ifup is None:
        pytest.skip("ifup is not installed and Debian's ifupdown package could not be downloaded")
    files, logs = _apply(tmp_path, netns, "ifupdown", extra_path=ifup)
    _check(netns, files, logs, ["/etc/network/interfaces.d/gpucluster-ib0", "/etc/network/interfaces.d/gpucluster-ib1",
                                "/etc/udev/rules.d/70-gpucluster-ipoib.rules"])
    # /etc/network/interfaces reads interfaces.d: the role added the line, in the overlay, where it was missing
    written = tmp_path / "etc-upper" / "network" / "interfaces"
    with open(str(written) if written.exists() else "/etc/network/interfaces") as handle:
        assert re.search(r"^\s*source(-directory)?\s+/etc/network/interfaces\.d", handle.read(), re.M)
