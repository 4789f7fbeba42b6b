"""The molecule scenarios' bad-input cases whose verdict depends only on variables, without containers.

Each case runs the real ansible-playbook: the role applied as site.yml applies it (its own argument-spec validation,
defaults and vars), with the case's variables and the same changes that must not happen as the molecule case, against
the scenario's hosts (several where the check is inventory-wide: addresses across the fabric, partitions naming
groups). It asserts what the molecule case asserts: the run fails in the role's argument-spec validation or a task of
its tasks/preflight.yml, on every host of the run, and the output names the host, the variable and the value.

Nothing can change, here or on any node (tests/support/offline_preflight.py has the details):

- the run is tagged ``<role>_preflight``, so only the validation and the preflight can run (the first test below
  holds the roles' task files to that), and the test fails if the output shows any other task;
- every host, localhost included, has the offline_node connection (tests/support/connection_plugins), forced by
  the extra vars: it never runs a process or copies a file, answers setup with the facts the case supplies (those of
  the scenario's containers, other hosts' included) and the preflight's read-only probes (such as the kernel's
  fs.nr_open) from canned data, and refuses everything else, which fails the test;
- a preflight that let the input through ends the tagged run with rc 0 instead of 2, and the test fails.

What the molecule scenarios keep end to end (those run here too, but for the two whose verdict is the node's):

- node-baseline: above-nr-open; fabric-tuning: address-collision; monitoring: grafana-password-placeholder (and
  dcgm-unavailable, which depends on what the node's apt offers, so it has no unit test here), in Debian 13's
  cluster (molecule/cluster-shared/tests/test_1_monitoring.py).
- team-quota: calendar depends on what the node's systemd-analyze can parse, so it has no unit test here.
- the shared cluster (molecule/cluster-shared/tests/test_4_bad_input.py, Debian 12): slurm's gres-count-not-a-number
  and team_quota's calendar.

The last test shows why dcgm-unavailable and calendar stay end to end: offline, their preflight asks the node a
question (apt, systemd-analyze) that only the node can answer.
"""

import copy
import hashlib
import os

import pytest
import yaml

from bad_input import MUST_NOT_CHANGE, recap
from offline_preflight import (DEBIAN12_CONTAINER, DEBIAN13_CONTAINER, assert_refused_offline, molecule_inventory,
                               offline_hosts, run_offline, run_roles)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = ["node_baseline", "infiniband", "node_tuning", "monitoring", "dcgm", "dcgm_exporter", "slurm", "team_quota"]


def _load(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


# Tasks outside tasks/preflight.yml that carry the preflight tag: the node_exporter entry point's own checks (it also
# runs alone, on the GPU nodes), reached only after the preflight passed. They change nothing: a facts include and an
# assert.
PREFLIGHT_TAGGED_ELSEWHERE = {
    "monitoring": {("node_exporter.yml", "Gather the facts node_exporter needs", "ansible.builtin.include_role"),
                   ("node_exporter.yml", "Check the node_exporter settings", "ansible.builtin.assert")},
}


def _tasks_of(tasks):
    """The tasks of a task list in order, those of blocks after their block."""
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks_of(task.get(key))


@pytest.mark.parametrize("role", ROLES)
def test_the_preflight_tag_selects_the_preflight_and_it_comes_first(role):
    """What the tagged run proves holds for the role's real run: the preflight is main.yml's first task, and no task
    outside it carries its tag (nor 'always') but the read-only ones listed above, so the tag stops where the
    preflight ends."""
    tasks = _load("roles", role, "tasks", "main.yml")
    assert tasks[0]["ansible.builtin.import_tasks"] == "preflight.yml", role
    assert role + "_preflight" in tasks[0]["tags"]
    tagged = set()
    for name in sorted(os.listdir(os.path.join(ROOT, "roles", role, "tasks"))):
        others = list(_tasks_of(_load("roles", role, "tasks", name)))[name == "main.yml":]
        for task in others if name != "preflight.yml" else []:
            tags = task.get("tags") or []
            if {role + "_preflight", "always"} & set([tags] if isinstance(tags, str) else tags):
                tagged.add((name, task.get("name"), next(key for key in task if key.startswith("ansible."))))
    assert tagged == PREFLIGHT_TAGGED_ELSEWHERE.get(role, set()), role
    for _name, task, module in tagged:
        assert module in ("ansible.builtin.assert", "ansible.builtin.include_role"), task


# --- the harness itself: nothing runs anywhere -------------------------------------------------------------------

def test_nothing_runs_on_any_host_not_even_on_this_machine(tmp_path):
    """A command on the node, one delegated to localhost (the one place where a test run could change something)
    and a file copy: each is refused and makes its host unreachable, and nothing is written."""
    marker = tmp_path / "touched"
    touch = {"argv": ["touch", str(marker)]}
    play = [{"name": "Try to change things", "hosts": "node1", "gather_facts": False, "ignore_unreachable": True,
             "tasks": [{"name": "Write a file on the node", "ansible.builtin.command": touch},
                       {"name": "Write a file here", "ansible.builtin.command": touch, "delegate_to": "localhost"},
                       {"name": "Copy a file", "ansible.builtin.copy": {"content": "x", "dest": str(marker)}}]}]
    rc, out, calls = run_offline(tmp_path, {"all": {"hosts": offline_hosts({"node1": DEBIAN13_CONTAINER})}}, play)
    assert rc == 0 and recap(out)["node1"]["ignored"] == 3, out       # three unreachable tasks, ignored
    refused = [c["refused"] for c in calls if c.get("refused")]
    assert len(refused) == 3 and not [c for c in calls if c.get("answered")], calls
    assert refused[0].startswith("no canned answer for command") and refused[1] == refused[0], refused
    assert refused[2].startswith("the command"), refused               # copy's first step, a shell on the node
    assert [c["host"] for c in calls] == ["node1", "localhost", "node1"], calls
    assert not marker.exists()


def test_a_preflight_that_passes_fails_the_case(tmp_path):
    """Good input: the tagged run ends after the preflight with rc 0, which a case does not accept."""
    rc, out, calls = run_roles(tmp_path, _baseline_inventory(), [("all", ["node_baseline"])],
                               dict(BASELINE_GOOD, **BASELINE_CHANGES))
    assert rc == 0, out
    assert "Install the base packages" not in out
    with pytest.raises(AssertionError, match="expected failed hosts"):
        assert_refused_offline("good", rc, out, calls, ["node_baseline"], [], ["deb12-node-baseline"])


# --- node-baseline (molecule/node-baseline/tests/test_bad_input.py) ----------------------------------------------

BASELINE_HOSTS = {"deb12-node-baseline": DEBIAN12_CONTAINER, "deb13-node-baseline": DEBIAN13_CONTAINER}
# The probes of the node_baseline preflight: the kernel's fs.nr_open (1048576, the kernel's default), and sysctl -n
# for each key of node_baseline_sysctl.
BASELINE_ANSWERS = [
    {"module": "slurp", "args": {"src": "/proc/sys/fs/nr_open"},
     "result": {"content": "MTA0ODU3Ngo=", "encoding": "base64", "source": "/proc/sys/fs/nr_open"}},
    {"module": "command", "args": {"argv": ["sysctl", "-n", "vm.overcommit_ratio"]},
     "result": {"rc": 0, "stdout": "50", "stderr": "", "stdout_lines": ["50"], "cmd": ["sysctl"]}},
]
BASELINE_CHANGES = MUST_NOT_CHANGE["node_baseline"]
BASELINE_GOOD = {"node_baseline_cluster_name": "molecule"}
# (id, extra vars, host vars of both hosts, texts of the molecule case, and here also the host and the value)
BASELINE_CASES = [
    ("wrong-type", {"node_baseline_limits_nofile_hard": "lots"}, {},
     ["node_baseline_limits_nofile_hard",
      "argument 'node_baseline_limits_nofile_hard' is of type str and we were unable to convert to int",
      "fatal: [deb12-node-baseline]", "fatal: [deb13-node-baseline]"]),
    ("missing-required", {"node_baseline_cluster_name": None}, {},
     ["node_baseline_cluster_name", "missing required arguments: node_baseline_cluster_name"]),
    ("above-nr-open", {"node_baseline_limits_nofile_hard": 2000000000}, {},
     ["node_baseline_limits_nofile_hard", "host deb13-node-baseline: limits are inconsistent",
      "node_baseline_limits_nofile_hard=2000000000", "fs.nr_open=1048576"]),
    ("bad-cluster-name", {"node_baseline_cluster_name": "Lab Cluster"}, {},
     ["node_baseline_cluster_name", "host deb12-node-baseline: node_baseline_cluster_name is 'Lab Cluster'"]),
    ("sysctl-list-value", {"node_baseline_sysctl": {"vm.swappiness": [1, 2]}}, {},
     ["node_baseline_sysctl", "host deb13-node-baseline: node_baseline_sysctl['vm.swappiness'] = [1, 2]"]),
    ("bad-limit-entry", {"node_baseline_limits_extra": [{"domain": "*", "type": "soft", "item": "memlok",
                                                         "value": 1}]}, {},
     ["node_baseline_limits_extra", "host deb12-node-baseline: node_baseline_limits_extra[0] is", "'memlok'"]),
    ("address-not-ip", {}, {"node_baseline_address": "10.0.0.300"},
     ["node_baseline_address", "node_baseline_address is '10.0.0.300', which is not an IP address"]),
]


def _baseline_inventory(hostvars=None):
    """Both hosts, with their host variables only (so that a variable can be missing), as in the molecule case."""
    return {"all": {"hosts": offline_hosts(BASELINE_HOSTS, BASELINE_ANSWERS, **(hostvars or {}))}}


def _run_baseline(tmp_path, _name, extra, hostvars, _expect):
    variables = dict(BASELINE_GOOD, **BASELINE_CHANGES)
    variables.update(extra)
    variables = {k: v for k, v in variables.items() if v is not None}
    return run_roles(tmp_path, _baseline_inventory(hostvars), [("all", ["node_baseline"])], variables)


@pytest.mark.parametrize("name,extra,hostvars,expect", BASELINE_CASES, ids=[c[0] for c in BASELINE_CASES])
def test_node_baseline(tmp_path, name, extra, hostvars, expect):
    rc, out, calls = _run_baseline(tmp_path, name, extra, hostvars, expect)
    assert_refused_offline(name, rc, out, calls, ["node_baseline"], expect, sorted(BASELINE_HOSTS))


# --- fabric-tuning (molecule/fabric-tuning/tests/test_bad_input.py) ----------------------------------------------

FABRIC_TARGET = "deb13-fabric-tuning"
FABRIC_HOSTS = {"deb12-fabric-tuning": DEBIAN12_CONTAINER, FABRIC_TARGET: DEBIAN13_CONTAINER}
FABRIC_GOOD = {"infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/24"}]}
# Every case also asks for changes that must not happen.
FABRIC_CHANGES = {role: MUST_NOT_CHANGE[role] for role in ("infiniband", "node_tuning")}
FABRIC_CASES = [
    ("datagram-mtu", "infiniband", {"infiniband_ipoib_interfaces": [
        {"name": "ib0", "subnet": "10.20.0.0/24", "mode": "datagram", "mtu": 65520}]}, {},
     ["host %s" % FABRIC_TARGET, "infiniband_ipoib_interfaces[0] (ib0): mtu 65520", "datagram", "4092"]),
    ("address-collision", "infiniband", {}, {"infiniband_node_index": 5},
     ["hosts deb12-fabric-tuning and deb13-fabric-tuning both get 10.20.0.5", "infiniband_node_index"]),
    ("subnet-exhausted", "infiniband", {"infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/29"}]}, {},
     ["subnet 10.20.0.0/29 is exhausted", "deb12-fabric-tuning (infiniband_node_index 12",
      "deb13-fabric-tuning (infiniband_node_index 13"]),
    ("unknown-backend", "infiniband", {"infiniband_network_backend": "wicked"}, {},
     ["infiniband_network_backend", "wicked", "fatal: [%s]" % FABRIC_TARGET,
      "value of infiniband_network_backend must be one of: auto, systemd-networkd", "got: wicked"]),
    ("sysctl-conflict", "node_tuning", {"node_baseline_sysctl": {"vm.zone_reclaim_mode": 1}}, {},
     ["host %s" % FABRIC_TARGET, "node_baseline_sysctl and node_tuning_sysctl", "vm.zone_reclaim_mode"]),
    ("pci-option", "node_tuning", {"node_tuning_pci_options": ["realloc noaer"]}, {},
     ["host %s" % FABRIC_TARGET, "node_tuning_pci_options", "realloc noaer"]),
    ("memlock-value", "node_tuning", {"node_tuning_service_memlock": "lots"}, {},
     ["host %s" % FABRIC_TARGET, "node_tuning_service_memlock is 'lots'"]),
]


def _run_fabric(tmp_path, _name, role, extra, hostvars, _expect):
    """Both hosts in the inventory (the address checks see the whole fabric), the run limited to the Debian 13 one,
    the case's variables in the inventory's group_vars as in the molecule case."""
    group_vars = dict(FABRIC_GOOD, **FABRIC_CHANGES[role])
    group_vars.update(extra)
    inventory = {"all": {"vars": group_vars, "hosts": offline_hosts(FABRIC_HOSTS, **hostvars)}}
    return run_roles(tmp_path, inventory, [("all", [role])], limit=FABRIC_TARGET)


@pytest.mark.parametrize("name,role,extra,hostvars,expect", FABRIC_CASES, ids=[c[0] for c in FABRIC_CASES])
def test_fabric_tuning(tmp_path, name, role, extra, hostvars, expect):
    rc, out, calls = _run_fabric(tmp_path, name, role, extra, hostvars, expect)
    assert_refused_offline(name, rc, out, calls, [role], expect, [FABRIC_TARGET])


# --- the GPU stack: the site mirror (docs/dgx-nodes.md) ------------------------------------------------------------
def test_cuda_toolkit_of_nvidias_repository_is_not_asked_of_the_site_mirror(tmp_path):
    """The site mirror holds no CUDA toolkit: cuda_repo (Ubuntu's and Red Hat's method; Debian has only its own
    toolkit) with gpucluster_mirror_url is refused before anything changes."""
    node = "dgx01"
    ubuntu = dict(DEBIAN12_CONTAINER, distribution="Ubuntu", distribution_version="22.04",
                  distribution_major_version="22", distribution_release="jammy", distribution_file_variety="Debian")
    inventory = {"all": {"vars": {"cuda_toolkit_method": "cuda_repo", "cuda_toolkit_versions": ["12.4"],
                                  "gpucluster_mirror_url": "http://mirror01:8080"},
                         "hosts": offline_hosts({node: ubuntu})}}
    rc, out, calls = run_roles(tmp_path, inventory, [("all", ["cuda_toolkit"])])
    assert_refused_offline("cuda-repo-from-the-site-mirror", rc, out, calls, ["cuda_toolkit"], [
        "host %s: cuda_toolkit_method 'cuda_repo' (cuda_toolkit_versions 12.4)" % node,
        "with gpucluster_mirror_url 'http://mirror01:8080': the site mirror of playbooks/mirror.yml holds no"
        " CUDA toolkit"], [node])


# --- monitoring (molecule/cluster-shared/tests/test_1_monitoring.py) ----------------------------------------------------

HEAD, GPU = "deb13-cluster-head", "deb13-cluster-gpu01"
# Changes that a run must not make when its input is bad.
MONITORING_CHANGES = {HEAD: MUST_NOT_CHANGE["monitoring_head"], GPU: MUST_NOT_CHANGE["monitoring_gpu"]}
# dcgm-unavailable (dcgm, dcgm_when_unavailable: fail) is not here: its verdict is what the node's apt offers.
MONITORING_CASES = [
    # (id, role, host, variables, texts the error must hold)
    ("temperature-500", "monitoring", HEAD, {"monitoring_alert_gpu_temp_c": 500},
     ["host %s: monitoring_alert_gpu_temp_c is 500: it must be a whole number from 30 to 120" % HEAD]),
    ("temperature-not-a-number", "monitoring", HEAD, {"monitoring_alert_gpu_temp_c": "hot"},
     ["monitoring_alert_gpu_temp_c", "fatal: [%s]" % HEAD,
      "argument 'monitoring_alert_gpu_temp_c' is of type str and we were unable to convert to int"]),
    ("temperature-per-model-500", "monitoring", HEAD,
     {"monitoring_alert_gpu_temp_c_by_model": {"NVIDIA H100 80GB HBM3": 87, "NVIDIA A100-SXM4-80GB": 500}},
     ['host %s: monitoring_alert_gpu_temp_c_by_model is {"NVIDIA H100 80GB HBM3": 87, "NVIDIA A100-SXM4-80GB": 500}: '
      'it must map GPU models (dcgm-exporter\'s modelName) to whole numbers from 30 to 120 '
      '(NVIDIA A100-SXM4-80GB: 500)' % HEAD]),
    ("window-not-a-duration", "monitoring", HEAD, {"monitoring_alert_gpu_util_window": "an hour"},
     ['host %s: monitoring_alert_gpu_util_window is "an hour"' % HEAD]),
    ("gpu-count-in-inventory", "monitoring", HEAD, {"health_check_expected": {"gpu_count": "eight"}},
     ["host %s: health_check_expected.gpu_count is 'eight'" % GPU]),
    # Secrets: the error names the variable, never the value.
    ("grafana-default-password", "monitoring", HEAD, {"monitoring_grafana_admin_password": "admin"},
     ["host %s: monitoring_grafana_admin_password must be set (from a vault)" % HEAD]),
    ("grafana-password-placeholder", "monitoring", HEAD,
     {"monitoring_grafana_admin_password": "CHANGE-ME-openssl-rand-hex-24"},
     ["host %s: monitoring_grafana_admin_password is still the example vault's placeholder" % HEAD]),
    ("exporter-without-url", "dcgm_exporter", GPU, {"dcgm_exporter_binary_url": ""},
     ["dcgm_exporter_binary_url", "host %s: dcgm_exporter_method is 'binary'" % GPU,
      "The binary method needs dcgm_exporter_binary_url", "got ''"]),
    ("exporter-bad-counter", "dcgm_exporter", GPU,
     {"dcgm_exporter_extra_counters": [{"field": "gpu_temp", "type": "gauge", "help": "GPU temperature"}]},
     ["dcgm_exporter_extra_counters hold entries dcgm-exporter cannot read"]),
    ("exporter-counter-twice", "dcgm_exporter", GPU,
     {"dcgm_exporter_extra_counters": [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "again"}]},
     ["DCGM_FI_DEV_GPU_TEMP is listed 2 times"]),
]


def _run_monitoring(tmp_path, _name, role, instance, variables, _expect):
    """Debian 13's cluster's inventory (its nodes, their groups and group_vars), only the role under test on one
    node, the case's variables as extra vars, as in the cluster's case."""
    with open(os.path.join(ROOT, "tests", "dcgm_exporter_sim", "dcgm-exporter-sim"), "rb") as handle:
        checksum = "sha256:" + hashlib.sha256(handle.read()).hexdigest()
    extra = dict(MONITORING_CHANGES[instance], dcgm_exporter_binary_checksum=checksum)
    extra.update(variables)
    return run_roles(tmp_path, molecule_inventory("cluster-deb13"), [(instance, [role])], extra)


@pytest.mark.parametrize("name,role,instance,variables,expect", MONITORING_CASES, ids=[c[0] for c in MONITORING_CASES])
def test_monitoring(tmp_path, name, role, instance, variables, expect):
    rc, out, calls = _run_monitoring(tmp_path, name, role, instance, variables, expect)
    assert_refused_offline(name, rc, out, calls, [role], expect, [instance])
    if name == "grafana-password-placeholder":
        assert variables["monitoring_grafana_admin_password"] not in out          # the value is never shown


# --- slurm (the shared cluster's bad input, Debian 12: cluster-deb12) -----------------------------------------------

SLURM_WATCHED_CHANGES = MUST_NOT_CHANGE["slurm"]
SLURM = {"c1": "deb12-cluster-gpu01", "c2": "deb12-cluster-gpu02", "ctl": "deb12-cluster-head"}
# The hosts of the Slurm play (slurm_controller:slurm_database:slurm_compute:slurm_login): not the spare gpu03.
SLURM_RUN = ["deb12-cluster-gpu01", "deb12-cluster-gpu02", "deb12-cluster-head"]
# The compute nodes' one probe before the checks: the health check program (the health_check role's wrapper).
SLURM_ANSWERS = [{"module": "stat", "args": {"path": "/usr/local/sbin/gpucluster-health-slurm"},
                  "result": {"stat": {"exists": True, "isreg": True, "executable": True, "mode": "0755"}}}]
SLURM_CASES = [
    # name, host vars of a host, extra vars, strings the output must name (the molecule case's, then more)
    ("node-in-two-exclusive-partitions", {},
     {"slurm_partitions": [{"name": "dev", "groups": ["slurm_compute"], "exclusive_nodes": True},
                           {"name": "research", "groups": ["gpu_h100"], "exclusive_nodes": True}]},
     ["slurm_partitions", "{c2}", "exclusive_nodes",
      "host {ctl} (Slurm controller): slurm_partitions cannot be rendered",
      "node {c2} is in partitions dev and research, which both have exclusive_nodes: true"]),
    ("gres-count-not-a-number", {"{c1}": {"slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}},
     {}, ["slurm_node_gres[0].count", "{c1}", "eight", "host {c1}: slurm_node_gres[0].count is 'eight'"]),
    ("join-drain-owner-not-an-owner", {}, {"slurm_join_drain_owner": "add_node"},
     ["slurm_join_drain_owner", "{c1}", "add_node", 'host {ctl}: slurm_join_drain_owner is "add_node"']),
    ("partition-names-undefined-group", {},
     {"slurm_partitions": [{"name": "dev", "groups": ["slurm_compute_typo"]}]},
     ["slurm_partitions", "{ctl}", "slurm_compute_typo",
      "host {ctl} (Slurm controller): slurm_partitions cannot be rendered",
      "partition dev: inventory group 'slurm_compute_typo' is not defined"]),
    # High availability (issue 23): a second controller is a backup, which needs the state directory declared shared.
    ("backup-controller-without-shared-state", {}, {"slurm_controller_group": "gpu_nodes"},
     ["slurm_state_save_shared", "{c1}", "{c2}", "slurm_state_save_location '/var/lib/slurm/slurmctld'",
      "host {ctl}: slurm_controller_group 'gpu_nodes' has backup controller(s) {c2}"]),
    ("slurmctld-timeout-with-a-unit", {}, {"slurm_slurmctld_timeout": "2m"},
     ["slurm_slurmctld_timeout", "{ctl}", "2m"]),
    # Issue 46: a secret in world-readable slurm.conf, refused by its key's name; PrivateData from a closed list.
    ("secret-in-slurm-conf-extra", {}, {"slurm_conf_extra": {"MaxJobCount": 20000, "AccountingStoragePass": "hunter2"}},
     ["slurm_conf_extra", "{ctl}", "host {ctl}: slurm_conf_extra['AccountingStoragePass'] is a secret",
      "readable by every user"]),
    ("private-data-not-a-kind", {}, {"slurm_private_data": ["jobs", "everything"]},
     ["slurm_private_data", "{ctl}", "everything"]),
    # Issue 45: Slurm cuts a --switches wait to max_switch_wait; a site's SchedulerParameters must keep the role's.
    ("scheduler-parameters-with-another-switch-wait", {},
     {"slurm_config_overrides": {"SchedulerParameters": "bf_continue,max_switch_wait=300"}},
     ["slurm_config_overrides", "{ctl}", "SchedulerParameters to 'bf_continue,max_switch_wait=300', whose "
      "max_switch_wait differs from slurm_max_switch_wait 30m (1800 s)"]),
    ("max-switch-wait-a-bare-number", {}, {"slurm_max_switch_wait": 300},
     ["slurm_max_switch_wait", "{ctl}", "300"]),
    # The inventory's reservations (issue 21): every entry is checked before Slurm is touched.
    ("reservation-name-without-the-prefix", {},
     {"slurm_reservations": [{"name": "training", "accounts": ["research"], "duration": "1h", "node_count": 1,
                              "partition": "dev"}]},
     ["slurm_reservations[name=training]", "{ctl}", "must start with 'inv-'", "host {ctl}: slurm_reservations"]),
    ("reservation-duration-a-bare-number", {},
     {"slurm_reservations": [{"name": "inv-day", "accounts": ["research"], "duration": 90, "gpus": 8,
                              "partition": "dev", "flags": ["daily"]}]},
     ["slurm_reservations[name=inv-day]", "{ctl}", "duration", "90"]),
    ("reservation-flag-unknown", {},
     {"slurm_reservations": [{"name": "inv-day", "accounts": ["research"], "duration": "1h", "gpus": 8,
                              "partition": "dev", "flags": ["nightly"]}]},
     ["slurm_reservations[name=inv-day]", "{ctl}", "'nightly' is not a reservation flag"]),
]


def _run_slurm(tmp_path, _name, hostvars, extra, _expect):
    """The cluster-deb12 scenario's inventory (four hosts, their groups, the shared group_vars), the case's host
    variables on their host (the molecule case adds them with an inventory file of their own: host variables either
    way), the converge play's hosts, as in the molecule case."""
    inventory = molecule_inventory("cluster-deb12", {h: SLURM_ANSWERS for h in SLURM.values()})
    for host, variables in hostvars.items():
        inventory["all"]["hosts"][host.format(**SLURM)].update(variables)
    return run_roles(tmp_path, inventory, [("slurm_controller:slurm_database:slurm_compute:slurm_login", ["slurm"])],
                     dict(SLURM_WATCHED_CHANGES, **extra))


@pytest.mark.parametrize("name,hostvars,extra,expect", SLURM_CASES, ids=[c[0] for c in SLURM_CASES])
def test_slurm(tmp_path, name, hostvars, extra, expect):
    rc, out, calls = _run_slurm(tmp_path, name, hostvars, extra, expect)
    assert_refused_offline(name, rc, out, calls, ["slurm"], [text.format(**SLURM) for text in expect], SLURM_RUN)
    assert "deb12-cluster-gpu03" not in recap(out)         # the spare node is not in the run


def test_a_refused_secret_never_reaches_the_output(tmp_path):
    """The secret's key is named; its value is in no task result, so not in the log either."""
    case = [c for c in SLURM_CASES if c[0] == "secret-in-slurm-conf-extra"][0]
    rc, out, _calls = _run_slurm(tmp_path, *case)
    assert rc != 0 and "AccountingStoragePass" in out and "hunter2" not in out, out[-3000:]


# --- team-quota (the shared cluster's bad input, Debian 12: cluster-deb12) ------------------------------------------

TEAM_QUOTA_HOST = "deb12-cluster-head"
TEAM_QUOTA_VARS = _load("molecule", "cluster-shared", "group_vars", "all.yml")


def _bad_teams():
    teams = copy.deepcopy(TEAM_QUOTA_VARS["team_quota_teams"])
    teams["research"]["gpu_hours"] = "6000/montly"
    teams["research"]["members"] = ["alice", "carol"]          # carol in both teams, no default
    teams["development"]["max_concurrent"] = -8
    teams["development"]["priority"] = "urgent"
    teams["development"]["can_preempt"] = ["development"]
    teams["newteam"] = {"max_concurrent": 4, "members": ["dave"]}   # must not appear (in Slurm, end to end)
    return teams


# calendar (team_quota_reset_on_calendar month: 'first of the month') is not here: its verdict is what the node's
# systemd-analyze can parse.
TEAM_QUOTA_CASES = [
    ("model", {"team_quota_teams": _bad_teams()}, [
        "team_quota_teams.research.gpu_hours is '6000/montly': unknown period 'montly' (did you mean 'month'?)",
        "team_quota_teams.development.max_concurrent is -8: a limit cannot be negative",
        "team_quota_teams.development.priority is 'urgent': unknown priority",
        "team_quota_teams.development.can_preempt: team development cannot preempt itself",
        "user carol is in teams development, research without a default"]),
    # issue 22: a negative price, an off-peak factor above 1, an off-peak window that never opens, bad fair share
    ("fair-share-offpeak-prices", {"team_quota_gpu_prices": {"a100": -1.5, "h100": 2.5},
                                   "team_quota_offpeak": {"factor": 1.5, "open": "*-*-* 20:00:00",
                                                          "close": "*-*-* 20:00:00"},
                                   "team_quota_priority_weight_fairshare": -10,
                                   "team_quota_teams": dict(TEAM_QUOTA_VARS["team_quota_teams"],
                                                            research=dict(TEAM_QUOTA_VARS["team_quota_teams"]
                                                                          ["research"], shares=0))}, [
        "team_quota_gpu_prices.a100 is -1.5: a price per GPU-hour is a number from 0",
        "team_quota_offpeak.factor is 1.5: the off-peak factor is above 0 and at most 1",
        "team_quota_offpeak: open and close are both '*-*-* 20:00:00', so the off-peak window never opens",
        "team_quota_priority_weight_fairshare (PriorityWeightFairshare) is -10",
        "team_quota_teams.research.shares is 0"]),
]


def _run_team_quota(tmp_path, _name, extra, _expect):
    """The cluster-deb12 inventory, the team_quota role on the controller as site.yml runs it, the case's
    variables as extra vars."""
    return run_roles(tmp_path, molecule_inventory("cluster-deb12"), [("slurm_controller", ["team_quota"])], extra)


@pytest.mark.parametrize("name,extra,expect", TEAM_QUOTA_CASES, ids=[c[0] for c in TEAM_QUOTA_CASES])
def test_team_quota(tmp_path, name, extra, expect):
    rc, out, calls = _run_team_quota(tmp_path, name, extra, expect)
    assert_refused_offline(name, rc, out, calls, ["team_quota"], expect + ["host %s:" % TEAM_QUOTA_HOST],
                           [TEAM_QUOTA_HOST])


# --- the cases that stay end to end ------------------------------------------------------------------------------

NEEDS_THE_NODE = [
    # (molecule case, inventory, play, extra vars, the question only the node can answer)
    ("monitoring dcgm-unavailable", lambda: molecule_inventory("cluster-deb13"), [(GPU, ["dcgm"])],
     dict(MONITORING_CHANGES[GPU], dcgm_when_unavailable="fail"), "no canned answer for apt"),
    ("team-quota calendar", lambda: molecule_inventory("cluster-deb12"), [("slurm_controller", ["team_quota"])],
     {"team_quota_reset_on_calendar": {"month": "first of the month"}},
     'no canned answer for command {"argv": ["systemd-analyze", "calendar"'),
]


@pytest.mark.parametrize("case,inventory,plays,extra,question", NEEDS_THE_NODE, ids=[c[0] for c in NEEDS_THE_NODE])
def test_the_cases_left_end_to_end_ask_the_node(tmp_path, case, inventory, plays, extra, question):
    """Why these two have no unit test: their preflight asks the node itself (what apt offers, what systemd parses)
    before it can decide, and an offline host has no answer to give."""
    rc, out, calls = run_roles(tmp_path, inventory(), plays, extra)
    assert rc == 4, out                                               # unreachable, not refused in a check
    refused = [c["refused"] for c in calls if c.get("refused")]
    assert refused and all(r.startswith(question) for r in refused), (case, refused)
