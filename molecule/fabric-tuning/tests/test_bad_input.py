"""Bad inventory input fails in preflight with the host, variable and value, and leaves the node as it was.

Runs the real ansible-playbook with an inventory of its own (both instances, so that the address checks see the whole
fabric) limited to the Debian 13 instance, once per case, and compares the roles' files and packages before and after.
"""

import pytest
import yaml

from bad_input import assert_refused_before_change, docker_hosts, inventory_hosts, run_playbook, snapshot

TARGET = "deb13-fabric-tuning"
WATCHED = ["/etc/udev/rules.d/70-gpucluster-ipoib.rules", "/etc/systemd/network/60-gpucluster-*",
           "/etc/network/interfaces.d/gpucluster-*", "/etc/opensm/*", "/etc/default/opensm",
           "/etc/default/grub.d/90-gpucluster-node-tuning.cfg", "/etc/sysctl.d/91-gpucluster-node-tuning.conf",
           "/etc/systemd/system/*/90-gpucluster-node-tuning.conf", "/usr/local/sbin/gpucluster-node-tuning",
           "/etc/systemd/system/gpucluster-node-tuning.service"]
ALSO = "dpkg-query -W sl 2>&1 || true; ls -d /etc/systemd/system/*.service.d"
GOOD = {"infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/24"}]}
# Every case also asks for changes that must not happen.
CHANGES = {
    "infiniband": {"infiniband_extra_packages": ["sl"],
                   "infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/24"},
                                                   {"name": "ib7", "subnet": "10.27.0.0/24"}]},
    "node_tuning": {"node_tuning_kernel_cmdline_extra": ["nosmt"], "node_tuning_sysctl_extra": {"vm.swappiness": 5},
                    "node_tuning_oom_protected_services": ["ssh", "chrony"]},
}
CASES = [
    ("datagram-mtu", "infiniband", {"infiniband_ipoib_interfaces": [
        {"name": "ib0", "subnet": "10.20.0.0/24", "mode": "datagram", "mtu": 65520}]}, {},
     ["host %s" % TARGET, "infiniband_ipoib_interfaces[0] (ib0): mtu 65520", "datagram", "4092"]),
    ("address-collision", "infiniband", {}, {"infiniband_node_index": 5},
     ["hosts deb12-fabric-tuning and deb13-fabric-tuning both get 10.20.0.5", "infiniband_node_index"]),
    ("subnet-exhausted", "infiniband", {"infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/29"}]}, {},
     ["subnet 10.20.0.0/29 is exhausted", "deb12-fabric-tuning (infiniband_node_index 12",
      "deb13-fabric-tuning (infiniband_node_index 13"]),
    ("unknown-backend", "infiniband", {"infiniband_network_backend": "wicked"}, {},
     ["infiniband_network_backend", "wicked"]),
    ("sysctl-conflict", "node_tuning", {"node_baseline_sysctl": {"vm.zone_reclaim_mode": 1}}, {},
     ["host %s" % TARGET, "node_baseline_sysctl and node_tuning_sysctl", "vm.zone_reclaim_mode"]),
    ("pci-option", "node_tuning", {"node_tuning_pci_options": ["realloc noaer"]}, {},
     ["host %s" % TARGET, "node_tuning_pci_options", "realloc noaer"]),
    ("memlock-value", "node_tuning", {"node_tuning_service_memlock": "lots"}, {},
     ["host %s" % TARGET, "node_tuning_service_memlock is 'lots'"]),
]


@pytest.mark.parametrize("name,role,extra,hostvars,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, role, extra, hostvars, expect):
    group_vars = dict(GOOD, **CHANGES[role])
    group_vars.update(extra)
    inventory = {"all": {"vars": group_vars, "hosts": docker_hosts(inventory_hosts(), hostvars)}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    playbook = [{"name": "Bad input", "hosts": "all", "gather_facts": False,
                 "roles": [{"role": "gpucluster.ops.%s" % role}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))

    before = {TARGET: snapshot(TARGET, WATCHED, ALSO)}
    rc, out = run_playbook(tmp_path / "inventory.yml", tmp_path / "play.yml", limit=TARGET)
    after = {TARGET: snapshot(TARGET, WATCHED, ALSO)}
    assert_refused_before_change(name, rc, out, [role], expect, before, after)
