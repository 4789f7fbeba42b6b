"""Bad inventory input fails in preflight with the host, variable and value, and leaves the node as it was: once end
to end.

Runs the real ansible-playbook with an inventory of its own (both instances, so that the address checks see the whole
fabric) limited to the Debian 13 instance, and compares the roles' files and packages before and after. The case kept
here is fabric-wide (the other instance's address collides with this one's, outside --limit) and asks for changes
that must not happen (a package, a second IPoIB interface). The other cases (datagram-mtu, subnet-exhausted,
unknown-backend, and node_tuning's sysctl-conflict, pci-option, memlock-value), and this one, run without a node in
tests/unit/roles/test_bad_input_preflight.py (test_fabric_tuning).
"""

import pytest
import yaml

from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, docker_hosts, inventory_hosts, run_playbook, snapshot

TARGET = "deb13-fabric-tuning"
WATCHED = ["/etc/udev/rules.d/70-gpucluster-ipoib.rules", "/etc/systemd/network/60-gpucluster-*",
           "/etc/network/interfaces.d/gpucluster-*", "/etc/opensm/*", "/etc/default/opensm",
           "/etc/default/grub.d/90-gpucluster-node-tuning.cfg", "/etc/sysctl.d/91-gpucluster-node-tuning.conf",
           "/etc/systemd/system/*/90-gpucluster-node-tuning.conf", "/usr/local/sbin/gpucluster-node-tuning",
           "/etc/systemd/system/gpucluster-node-tuning.service"]
ALSO = "dpkg-query -W sl 2>&1 || true; ls -d /etc/systemd/system/*.service.d"
GOOD = {"infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/24"}]}
# The case also asks for changes that must not happen.
CHANGES = {"infiniband": MUST_NOT_CHANGE["infiniband"]}
CASES = [
    ("address-collision", "infiniband", {}, {"infiniband_node_index": 5},
     ["hosts deb12-fabric-tuning and deb13-fabric-tuning both get 10.20.0.5", "infiniband_node_index"]),
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
