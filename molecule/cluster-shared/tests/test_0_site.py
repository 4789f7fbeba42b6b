"""The whole site run, as it left the cluster: molecule converges the cluster with playbooks/site.yml, reruns it
requiring changed=0 on every host (idempotence; on Debian 12 this module reruns the parts that differ there), and
this module, the first, asserts the result: every node's services running (and the roles gpucluster_site_skip_roles
leaves out absent), sinfo listing every compute node with its GRES and partitions, Prometheus's targets up, and the
faulty node drained by slurmd's health check.

The faulty node is the one whose host_vars give its simulator faults at prepare time (host_vars/*.yml): the site
runs with the fault present, and the health check drains the node under the owner health with the checker's codes.
This module asserts the state the converge left, so it starts without the reset (CONVERGE_STATE below); on a kept
cluster that a reset has touched since (the fault cleared, the node resumed), it puts the converge-time faults back
and waits for the drain first. The reset after it clears the fault and resumes the node for the next modules.
"""

import json
import re
import time

import pytest

import alerting
from bad_input import changed_tasks, recap
from conftest import (GPUSIM_UNITS, expected_partitions, faults_of, health_report, node_records, reset_since_converge,
                      set_faults, slurm_nodes)

# conftest.known_state: no reset before this module on a cluster no reset has touched since the converge.
CONVERGE_STATE = True

HEAD_UNITS = ("munge", "slurmctld")
# On the database host (the head on Debian 12; the backup controller on Debian 13) and on every backup controller.
DATABASE_UNITS = ("munge", "mariadb", "slurmdbd")
CONTROLLER_UNITS = ("munge", "slurmctld")
GPU_UNITS = ("munge", "slurmd", "gpucluster-health.timer")
# The monitoring role's units (roles/monitoring/vars/main.yml), and dcgm-exporter's (roles/dcgm_exporter).
PROMETHEUS, NODE_EXPORTER, GRAFANA = "prometheus", "prometheus-node-exporter", "grafana-server"
ALERTMANAGER = "prometheus-alertmanager"
DCGM_EXPORTER = "dcgm-exporter"
# Units no role of the site manages: running if a site installs them beside the collection's.
OPTIONAL_HEAD_UNITS = ()
PROMETHEUS_TARGETS = "http://localhost:9090/api/v1/targets"
GET = "python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' %s"
# Prometheus scrapes every 30 s (monitoring_scrape_interval): a target not scraped yet is "unknown" until then.
SCRAPE_WAIT_S = 75


def _interval(scenario):
    return scenario.group_vars["all"]["slurm_health_check_interval"]


def _drained(ctl, hosts):
    return {n: r for n, r in node_records(ctl, hosts).items() if "DRAIN" in r["State"]}


def _wait(probe, timeout):
    deadline = time.monotonic() + timeout
    seen = probe()
    while not seen and time.monotonic() < deadline:
        time.sleep(2)
        seen = probe()
    return seen


@pytest.fixture(scope="module", autouse=True)
def converge_state(scenario, ctl, known_state):
    """The state the site run left: on a cluster a reset has touched since, the converge-time faults put back and
    their nodes drained again by the health check (the same mechanism as at converge time)."""
    del known_state  # ordering only: the reset (when it runs) comes first
    faulty = scenario.converge_faults
    assert faulty, "no host_vars of this cluster give a node simulated faults: the site run has no faulty node"
    if not reset_since_converge(ctl):
        return
    for host, faults in faulty.items():
        set_faults(scenario, host, faults)
    _wait(lambda: sorted(_drained(ctl, list(faulty))) == sorted(faulty), 3 * _interval(scenario) + 30)
    print("test_0: a reset ran since the converge: the converge-time faults on %s were put back" % ", ".join(faulty))


@pytest.fixture(scope="module")
def faulty(scenario):
    nodes = sorted(scenario.converge_faults)
    assert set(nodes) <= set(scenario.compute), ("the faulty node must be a compute node", nodes)
    assert len(nodes) < len(scenario.compute), "at least one compute node must be healthy"
    return nodes


def test_the_head_node_runs_its_services(scenario):
    head = scenario.host(scenario.controller)
    skipped = scenario.skipped_roles(scenario.controller)
    wanted = list(HEAD_UNITS)
    if "monitoring" in skipped:
        assert not head.package("prometheus").is_installed, "monitoring is left out here, yet Prometheus is installed"
    else:
        wanted += [PROMETHEUS, NODE_EXPORTER, ALERTMANAGER]
    # Grafana is installed only from monitoring_grafana_apt_url; this cluster's inventory sets none.
    wanted += [u for u in (GRAFANA,) + OPTIONAL_HEAD_UNITS if _installed(head, u)]
    assert [u for u in wanted if not head.service(u).is_running] == [], wanted
    assert [u for u in wanted if not head.service(u).is_enabled] == [], wanted


def test_the_database_host_and_the_backup_controllers_run_theirs(scenario):
    units = {scenario.database: list(DATABASE_UNITS)}
    for host in scenario.controllers[1:]:
        units.setdefault(host, []).extend(CONTROLLER_UNITS)
    for host, wanted in units.items():
        node = scenario.host(host)
        assert [u for u in wanted if not (node.service(u).is_running and node.service(u).is_enabled)] == [], (host, wanted)


def _installed(host, unit):
    return host.run("systemctl cat %s.service" % unit).rc == 0


def test_every_gpu_node_runs_its_services(scenario):
    for name in scenario.groups["gpu_nodes"]:
        node, skipped = scenario.host(name), scenario.skipped_roles(name)
        wanted = list(GPU_UNITS)
        for role, unit in (("dcgm_exporter", DCGM_EXPORTER), ("monitoring", NODE_EXPORTER)):
            if role in skipped:
                assert not _installed(node, unit), (name, "%s is left out here, yet %s is installed" % (role, unit))
            else:
                wanted.append(unit)
        assert [u for u in wanted if not node.service(u).is_running] == [], (name, wanted)
        assert [u for u in wanted if not node.service(u).is_enabled] == [], (name, wanted)
        # the simulated NVSwitch node's units (tests/gpusim: started, never enabled, as before a driver reboot)
        if scenario.node_vars(name)["health_check_expected"].get("nvswitch"):
            assert [u for u in GPUSIM_UNITS if not node.service(u).is_running] == [], name


def test_the_spare_node_is_left_alone(scenario):
    spare = scenario.host(scenario.spare)
    assert not spare.service("slurmd").is_running
    assert scenario.spare not in slurm_nodes(scenario.host(scenario.controller))


def _sinfo(ctl):
    """sinfo per node: {node: {partitions, gres, state}} (sinfo --Node lists a node once per partition)."""
    nodes = {}
    for line in ctl.check_output("sinfo --noheader --Node --format='%N|%R|%G|%T'").splitlines():
        name, partition, gres, state = line.split("|")
        node = nodes.setdefault(name, {"partitions": [], "gres": gres, "state": state})
        node["partitions"] = sorted(node["partitions"] + [partition])
    return nodes


def test_sinfo_lists_every_compute_node_with_its_gres_and_partitions(scenario, ctl, faulty):
    nodes = _sinfo(ctl)
    assert sorted(nodes) == scenario.compute, nodes
    for host in scenario.compute:
        gres = scenario.node_vars(host)["slurm_node_gres"][0]
        # 24.11 may add the GPUs' socket binding, "(S:0)"
        assert re.match(r"^gpu:%s:%d(\(S:[^)]*\))?$" % (gres["type"], gres["count"]), nodes[host]["gres"]), nodes[host]
        assert nodes[host]["partitions"] == expected_partitions(scenario, host), nodes[host]
        assert nodes[host]["state"] == ("drained" if host in faulty else "idle"), (host, nodes[host])


def test_the_faulty_node_is_drained_by_the_health_check_with_the_codes(scenario, ctl, faulty):
    # slurmd runs the health check at its start and every slurm_health_check_interval: the drain is there long
    # before the module starts, but a kept cluster's first run may come right after the converge
    _wait(lambda: sorted(_drained(ctl, faulty)) == faulty, 3 * _interval(scenario) + 30)
    records = node_records(ctl, faulty)
    assert sorted(_drained(ctl, faulty)) == faulty, records
    for host in faulty:
        assert faults_of(scenario, host) == scenario.converge_faults[host]
        reason = records[host]["Reason"]
        assert reason.startswith("gpucluster-health: "), records[host]
        report = health_report(scenario, host)
        assert report["status"] == "error", report
        codes = sorted({f["code"] for f in report["findings"] if f["severity"] == "error"})
        # row_remap_pending on GPU 3 (host_vars): the checker's code for it, among the others the fault raises
        assert "GPU-ROW-REMAP-PENDING" in codes, report
        for code in codes:
            assert code in reason, (code, reason)
    healthy = [h for h in scenario.compute if h not in faulty]
    assert all(r["State"] == "IDLE" for r in node_records(ctl, healthy).values()), node_records(ctl, healthy)
    assert ctl.check_output("squeue --noheader --all --format=%i") == ""


@pytest.mark.release("debian13")
def test_prometheus_scrapes_every_target_of_the_site(scenario):
    """Every job the monitoring role configures, with the targets the inventory names, health "up" for each host
    that the site gives the exporter (node_exporter: the head and GPU nodes; dcgm-exporter: the GPU nodes)."""
    head = scenario.host(scenario.controller)
    gpu = scenario.groups["gpu_nodes"]
    # monitoring_node_exporter_group is "all": the spare is a node target too, down until add_node.yml installs
    # node_exporter there (the site runs no role on it).
    wanted = {"prometheus": {scenario.controller}, "node": set(scenario.instances), "dcgm": set(gpu)}
    up_wanted = {"prometheus": {scenario.controller}, "node": set(scenario.groups["head_nodes"]) | set(gpu),
                 "dcgm": set(gpu)}

    def targets():
        active = json.loads(head.check_output(GET % PROMETHEUS_TARGETS))["data"]["activeTargets"]
        found = {}
        for target in active:
            found.setdefault(target["labels"]["job"], {})[target["labels"]["instance"]] = (
                target["health"], target.get("lastError", ""))
        return found

    def scraped():
        found = targets()
        return found if all(found.get(job, {}).get(h, ("unknown",))[0] != "unknown"
                            for job, hosts in up_wanted.items() for h in hosts) else {}

    found = _wait(scraped, SCRAPE_WAIT_S) or targets()
    jobs = {job: set(hosts) for job, hosts in found.items()}
    if reset_since_converge(head):
        # a kept cluster: test_8's add_node.yml may have made the spare a target of more jobs since the converge
        jobs = {job: hosts - {scenario.spare} for job, hosts in jobs.items()}
        wanted = {job: hosts - {scenario.spare} for job, hosts in wanted.items()}
    assert jobs == wanted, found
    down = {(job, h): found[job][h] for job, hosts in up_wanted.items() for h in hosts if found[job][h][0] != "up"}
    assert down == {}, down


@pytest.mark.release("debian13")
def test_the_faulty_nodes_alert_and_the_watchdog_reach_a_person_through_alertmanager(scenario, faulty):
    """Prometheus sends its alerts to Alertmanager, whose config (from the inventory, amtool-checked) routes them to
    the test webhook receiver on the head: the Watchdog arrives, and so does the faulty node's NodeHealthError,
    carrying the node label that every exporter's series of the node carry."""
    head = scenario.host(scenario.controller)
    config = head.file("/etc/prometheus/alertmanager.yml")
    assert (config.user, config.group, config.mode) == ("root", "prometheus", 0o640)
    head.run_expect([0], "amtool check-config /etc/prometheus/alertmanager.yml")
    prometheus = head.check_output(GET % "http://localhost:9090/api/v1/alertmanagers")
    assert json.loads(prometheus)["data"]["activeAlertmanagers"] == [
        {"url": "http://localhost:9093/api/v2/alerts"}], prometheus

    def arrived():
        firing = {(a["labels"]["alertname"], a["labels"].get("node"), a["receiver"])
                  for a in alerting.received(head) if a["status"] == "firing"}
        wanted = {("Watchdog", None, "test-webhook")} | {("NodeHealthError", h, "test-webhook") for h in faulty}
        return firing if wanted <= firing else None

    # scrape (30 s), rule evaluation (30 s), then Alertmanager's group_wait (1 s in this inventory)
    assert _wait(arrived, 2 * SCRAPE_WAIT_S), alerting.received(head)[-10:]
    # One matcher covers a node: its node_exporter's and dcgm-exporter's series carry its node label.
    query = "http://localhost:9090/api/v1/query?query=count%%20by%%20(job)%%20(%%7Bnode%%3D%%22%s%%22%%7D)" % faulty[0]
    jobs = {r["metric"]["job"] for r in json.loads(alerting.get(head, query))["data"]["result"]}
    assert jobs == {"node", "dcgm"}, jobs


# Debian 13's cluster runs everything, and molecule's idempotence stage reruns the whole site there. Debian 12's
# rerun covers what only its cluster shows (the scenarios of one role already rerun theirs on a Debian 12 container):
# Slurm 22.05 with local configuration files, the team quotas on its sacctmgr, the health check with its Slurm
# wrapper, and the GPU stack from NVIDIA's repositories through the site mirror (test_0_nvidia_repository.py). The
# parts are site.yml's tags (docs/playbooks.md).
DEBIAN12_RERUN_TAGS = "health,slurm,quota,gpu_stack"


@pytest.mark.release("debian12")
def test_a_second_run_of_the_parts_that_differ_on_debian12_changes_nothing(scenario, tmp_path):
    rc, out = scenario.playbook(tmp_path, args=["--tags", DEBIAN12_RERUN_TAGS])
    assert rc == 0, out
    counters = recap(out)
    assert set(scenario.groups["head_nodes"]) | set(scenario.groups["gpu_nodes"]) <= set(counters), counters
    assert all(c["changed"] == 0 for c in counters.values()), changed_tasks(out)
    # the parts ran: Slurm on every node, the quotas on the controller, the GPU stack's roles on the GPU nodes
    for role in ["slurm", "team_quota", "nvidia_driver", "nccl", "container_toolkit", "dcgm"]:
        assert "TASK [gpucluster.ops.%s : " % role in out, (role, out)
