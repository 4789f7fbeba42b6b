"""Bad inventory input fails in preflight with the host, variable and value, and leaves the node as it was.

Runs the real ansible-playbook with an inventory of its own (both instances, so that the address checks see the whole
fabric) limited to the Debian 13 instance, once per case, and compares the roles' files and packages before and after.
"""

import os
import re
import subprocess

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = os.path.join(SCENARIO, "..", "..", "roles")
TARGET = "deb13-fabric-tuning"
WATCHED = ("/etc/udev/rules.d/70-gpucluster-ipoib.rules /etc/systemd/network/60-gpucluster-* "
           "/etc/network/interfaces.d/gpucluster-* /etc/opensm/* /etc/default/opensm "
           "/etc/default/grub.d/90-gpucluster-node-tuning.cfg /etc/sysctl.d/91-gpucluster-node-tuning.conf "
           "/etc/systemd/system/*/90-gpucluster-node-tuning.conf /usr/local/sbin/gpucluster-node-tuning "
           "/etc/systemd/system/gpucluster-node-tuning.service")
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


def _instances():
    with open(os.environ["MOLECULE_INVENTORY_FILE"]) as f:
        return sorted(yaml.safe_load(f)["all"]["hosts"])


def _preflight_task_names(role):
    with open(os.path.join(ROLES, role, "tasks", "preflight.yml")) as f:
        return [t["name"] for t in yaml.safe_load(f)]


def _failed_tasks(out):
    current, failed = None, set()
    for line in out.splitlines():
        task = re.match(r"TASK \[(?:[\w.]+ : )?(.+?)\] \**$", line)
        if task:
            current = task.group(1)
        elif line.startswith(("fatal:", "failed:")) and current:
            failed.add(current)
    return failed


def _snapshot(instance):
    script = ("for f in %s; do [ -e \"$f\" ] && sha256sum \"$f\"; done; dpkg-query -W sl 2>&1 || true; "
              "ls -d /etc/systemd/system/*.service.d" % WATCHED)
    return subprocess.run(["docker", "exec", instance, "sh", "-c", script],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name,role,extra,hostvars,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(tmp_path, name, role, extra, hostvars, expect):
    instances = _instances()
    group_vars = dict(GOOD, **CHANGES[role])
    group_vars.update(extra)
    inventory = {"all": {"vars": group_vars,
                         "hosts": {i: dict(hostvars, ansible_connection="community.docker.docker",
                                           ansible_python_interpreter="/usr/bin/python3") for i in instances}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    playbook = [{"name": "Bad input", "hosts": "all", "gather_facts": False,
                 "roles": [{"role": "gpucluster.ops.%s" % role}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))

    before = _snapshot(TARGET)
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), "--limit", TARGET],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    out = proc.stdout + proc.stderr
    after = _snapshot(TARGET)

    assert proc.returncode == 2, "case %s: expected a failed host (rc 2), got rc %d\n%s" % (name, proc.returncode, out)
    flat = re.sub(r"\s+", " ", out)
    for words in expect:
        assert words in flat, "case %s: the error does not say %r\n%s" % (name, words, out)
    failed_tasks = _failed_tasks(out)
    assert failed_tasks, out
    outside = {t for t in failed_tasks if t not in _preflight_task_names(role)
               and not t.startswith("Validating arguments against arg spec 'main'")}
    assert not outside, "case %s failed outside preflight: %s" % (name, outside)
    assert re.search(r"^%s\s+: .*changed=0 .*failed=1" % re.escape(TARGET), out, re.M), out
    assert before == after, "case %s changed %s:\nbefore:\n%s\nafter:\n%s" % (name, TARGET, before, after)
