"""Verify node_baseline on a converged node: what a user of the node would see."""

import json

import pytest


@pytest.mark.parametrize("package", ["pciutils", "kmod", "numactl", "chrony", "hwloc-nox", "ethtool", "ipmitool"])
def test_base_packages_installed(host, package):
    assert host.package(package).is_installed


def test_every_instance_resolves_every_other(host):
    inventory = host.ansible.get_variables()
    for name in inventory["groups"]["all"]:
        entry = host.run("getent hosts %s" % name)
        assert entry.rc == 0, "%s does not resolve on %s" % (name, host.backend.get_hostname())
        fqdn = host.run("getent hosts %s.test.internal" % name)
        assert fqdn.rc == 0 and fqdn.stdout.split()[0] == entry.stdout.split()[0]


def test_own_address_is_the_one_listed(host):
    me = host.backend.get_hostname()
    listed = host.check_output("getent hosts %s" % me).split()[0]
    addresses = host.check_output("hostname -I").split()
    assert listed in addresses


def test_extra_hosts_and_docker_entries_kept(host):
    assert host.check_output("getent hosts storage01").split()[0] == "10.99.0.1"
    hosts = host.file("/etc/hosts")
    assert hosts.contains("localhost")
    assert hosts.content_string.count("# BEGIN gpucluster.ops cluster hosts") == 1


def test_limits_file(host):
    limits = host.file("/etc/security/limits.d/90-gpucluster.conf")
    assert limits.user == "root" and limits.group == "root" and limits.mode == 0o644
    lines = [line.split() for line in limits.content_string.splitlines() if line and not line.startswith("#")]
    assert ["*", "hard", "memlock", "unlimited"] in lines
    assert ["root", "soft", "nofile", "65536"] in lines
    assert ["@hpc", "hard", "nproc", "65536"] in lines


def test_sysctl_file(host):
    conf = host.file("/etc/sysctl.d/90-gpucluster-baseline.conf")
    assert conf.mode == 0o644
    assert "vm.swappiness = 10" in conf.content_string
    assert "net.ipv4.tcp_rmem = 4096 87380 16777216" in conf.content_string
    # booleans are written as the kernel's 0/1
    assert "kernel.numa_balancing = 0" in conf.content_string
    assert conf.content_string.startswith("#")


def test_chrony_sources_and_service(host):
    sources = host.file("/etc/chrony/sources.d/gpucluster.sources")
    assert "server ntp1.test.internal iburst" in sources.content_string
    assert "server 10.99.0.123 iburst" in sources.content_string
    # chrony is enabled; in a container it does not run (no CAP_SYS_TIME), which the role reports
    assert host.service("chrony").is_enabled


def test_local_fact(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/gpucluster_node.fact").content_string)
    assert fact["cluster"] == "molecule"
    assert fact["node"] == host.backend.get_hostname()
    assert {"debian12", "debian13"} & set(fact["groups"])
