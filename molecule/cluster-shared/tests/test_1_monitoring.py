"""The monitoring roles as the site run left them (Debian 13's cluster, which runs them all): node_exporter with the
textfile collector on every node, dcgm-exporter on the GPU nodes with a counters file its checker passes, DCGM left
out where no repository offers it, Prometheus's rendered and checked config and its tested alert rules, Grafana's
provisioning; and bad input to the monitoring and dcgm roles refused before anything changes. The alerting path (a
fault to the test receiver through Alertmanager, the node label) is test_0_site.py's; the scrape targets up too.

These were the monitoring role scenario's (molecule/monitoring, folded into the cluster by issue 53); its Debian 12
GPU node is left out: Debian 12's cluster skips dcgm_exporter and monitoring (group_vars/debian12.yml).
"""

import csv
import io
import json
import re

import pytest
import yaml

import alerting
from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, snapshot

pytestmark = pytest.mark.release("debian13")

TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
COUNTERS = "/etc/dcgm-exporter/counters.csv"
CHECKER = "/usr/local/lib/gpucluster-dcgm-exporter/bin/dcgm-counters-check"
ALERTS = {"Watchdog", "GpuTemperatureHigh", "GpuXidError", "GpuEccUncorrectable", "GpuRowRemapFailure",
          "GpuNvlinkErrors", "GpuMissing", "GpuMemoryHigh", "GpuPowerAtLimit", "GpuUtilisationLow", "NodeHealthError",
          "NodeHealthWarning", "NodeHealthUnknown", "NodeHealthCheckStale", "ExporterDown"}


def _gpus(scenario, name):
    return scenario.node_vars(name)["health_check_expected"]["gpu_count"]


def test_node_exporter_runs_with_the_textfile_collector_on_every_node(scenario):
    for name in scenario.groups["head_nodes"] + scenario.groups["gpu_nodes"]:
        node = scenario.host(name)
        args = node.file("/etc/default/prometheus-node-exporter").content_string
        assert "--collector.textfile.directory=%s" % TEXTFILE_DIR in args, (name, args)
        assert "node_exporter_build_info" in alerting.get(node, "http://localhost:9100/metrics"), name


def test_node_exporter_serves_the_health_metrics_of_each_gpu_node(scenario):
    for name in scenario.groups["gpu_nodes"]:
        node = scenario.host(name)
        node.run_expect([0], "systemctl start gpucluster-health.service")
        metrics = alerting.get(node, "http://localhost:9100/metrics")
        # node_exporter sorts the labels; the reset left every GPU node healthy
        assert re.search(r'^gpucluster_health_status\{level="standard",node="%s"\} 0$' % name, metrics, re.M), (
            name, [line for line in metrics.splitlines() if line.startswith("gpucluster_health_status")])
        assert re.search(r'^gpucluster_health_gpus\{node="%s"\} %d$' % (name, _gpus(scenario, name)), metrics, re.M)
        assert "node_textfile_scrape_error 0" in metrics


def test_the_counters_file_has_the_standard_set_plus_errors_and_passes_the_checker(scenario):
    for name in scenario.groups["gpu_nodes"]:
        node = scenario.host(name)
        text = node.file(COUNTERS).content_string
        rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r and not r[0].startswith("#")]
        assert all(len(r) == 3 for r in rows), rows
        fields = {r[0]: r[1] for r in rows}
        assert len(fields) == len(rows)
        for field, kind in [("DCGM_FI_DEV_GPU_TEMP", "gauge"), ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
                            ("DCGM_FI_DEV_FB_USED", "gauge"), ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
                            ("DCGM_FI_DEV_XID_ERRORS", "gauge"), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
                            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
                            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter"),
                            ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter"),
                            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter"),
                            ("DCGM_FI_DRIVER_VERSION", "label")]:
            assert fields.get(field) == kind, (name, field)
        out = node.run("%s %s" % (CHECKER, COUNTERS))
        assert out.rc == 0 and "%d metric(s), 1 label(s)" % (len(rows) - 1) in out.stdout, out.stdout + out.stderr


def test_the_checker_refuses_what_dcgm_exporter_would_refuse(scenario):
    node = scenario.host(scenario.groups["gpu_nodes"][0])
    bad = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature, in C\\nDCGM_FI_DEV_GPU_UTIL, histogram, x\\n"
    node.run_expect([0], "printf '%s' > /tmp/bad-counters.csv" % bad)
    out = node.run("%s /tmp/bad-counters.csv" % CHECKER)
    assert out.rc == 1
    assert "/tmp/bad-counters.csv:1: expected 3 comma-separated fields" in out.stdout
    assert "/tmp/bad-counters.csv:2: DCGM_FI_DEV_GPU_UTIL: type 'histogram'" in out.stdout


def test_dcgm_exporter_runs_checked_with_its_settings_and_serves_every_gpu(scenario):
    for name in scenario.groups["gpu_nodes"]:
        node = scenario.host(name)
        out = node.run("systemd-analyze verify /etc/systemd/system/dcgm-exporter.service")
        assert out.rc == 0 and "dcgm-exporter.service" not in out.stderr, out.stdout + out.stderr
        unit = node.file("/etc/systemd/system/dcgm-exporter.service").content_string
        assert [line for line in unit.splitlines() if line.startswith("ExecStart=")] == [
            "ExecStart=/usr/local/bin/dcgm-exporter --collectors /etc/dcgm-exporter/counters.csv "
            "--address :9400 --collect-interval 30000 --remote-hostengine-info localhost:5555"]
        assert "Wants=network-online.target nvidia-dcgm.service" in unit
        binary = node.file("/usr/local/bin/dcgm-exporter")
        assert binary.mode == 0o755 and binary.user == "root"
        metrics = alerting.get(node, "http://localhost:9400/metrics")
        temps = re.findall(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)",.*\} \d+', metrics, re.M)
        assert sorted(temps, key=int) == [str(i) for i in range(_gpus(scenario, name))], name


def test_dcgm_is_left_out_where_no_repository_offers_it(scenario):
    for name in scenario.groups["gpu_nodes"]:
        node = scenario.host(name)
        assert node.run("dpkg-query -W 'datacenter-gpu-manager*'").rc != 0, name
        assert not node.file("/etc/apt/preferences.d/gpucluster-dcgm").exists
        assert not node.service("nvidia-dcgm").is_enabled


def test_prometheus_runs_with_the_rendered_and_checked_config(scenario):
    head = scenario.host(scenario.controller)
    head.run_expect([0], "promtool check config /etc/prometheus/prometheus.yml")
    config = yaml.safe_load(head.file("/etc/prometheus/prometheus.yml").content_string)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert sorted(jobs) == ["dcgm", "node", "prometheus"]  # no Slurm exporter group in this inventory
    # a kept cluster: test_8's add_node.yml may have made the spare a target since the converge
    dcgm = [c for c in jobs["dcgm"]["static_configs"] if c["labels"]["instance"] != scenario.spare]
    assert dcgm == [
        {"targets": [name + ":9400"], "labels": {"instance": name, "node": name, "expected_gpus": str(_gpus(scenario, name))}}
        for name in scenario.groups["gpu_nodes"]]
    assert {c["targets"][0] for c in jobs["node"]["static_configs"]} == {h + ":9100" for h in scenario.instances}
    assert config["global"]["scrape_interval"] == scenario.group_vars["all"].get("monitoring_scrape_interval", "30s")


def test_the_alert_rules_pass_their_unit_tests_and_are_the_tested_ones(scenario):
    head = scenario.host(scenario.controller)
    out = head.run("promtool test rules /etc/prometheus/tests/gpucluster-alerts.test.yml")
    assert out.rc == 0 and "SUCCESS" in out.stdout + out.stderr, out.stdout + out.stderr
    live = head.file("/etc/prometheus/rules/gpucluster-alerts.yml")
    assert live.content_string == head.file("/etc/prometheus/tests/gpucluster-alerts.yml").content_string
    head.run_expect([0], "promtool check rules /etc/prometheus/rules/gpucluster-alerts.yml")
    rules = yaml.safe_load(live.content_string)
    assert {r["alert"] for g in rules["groups"] for r in g["rules"]} == ALERTS


def test_grafana_provisioning_and_dashboard_are_in_place(scenario):
    head = scenario.host(scenario.controller)
    datasource = yaml.safe_load(head.file("/etc/grafana/provisioning/datasources/gpucluster.yml").content_string)
    assert datasource["datasources"][0]["uid"] == "gpucluster-prometheus"
    assert datasource["datasources"][0]["url"] == "http://localhost:9090"
    provider = yaml.safe_load(head.file("/etc/grafana/provisioning/dashboards/gpucluster.yml").content_string)
    dashboard = json.loads(head.file(provider["providers"][0]["options"]["path"] + "/gpucluster-fleet.json").content_string)
    assert dashboard["uid"] == "gpucluster-fleet"
    assert not head.package("grafana").is_installed  # no monitoring_grafana_apt_url here


# Bad input: one case per role end to end (the other cases of both roles run without a node in
# tests/unit/roles/test_bad_input_preflight.py). On the monitoring host a placeholder Grafana password (the shared
# secrets check of roles/_common); on a GPU node dcgm-unavailable, whose verdict is what the node's apt offers, so it
# has no test without a node. Each also asks for changes that must not happen.
WATCHED = {
    "monitoring": ["/etc/prometheus/prometheus.yml", "/etc/prometheus/rules/gpucluster-alerts.yml",
                   "/etc/prometheus/tests/gpucluster-alerts.yml", "/etc/prometheus/tests/gpucluster-alerts.test.yml",
                   "/etc/prometheus/alertmanager.yml", "/etc/default/prometheus", "/etc/default/prometheus-alertmanager",
                   "/etc/default/prometheus-node-exporter", "/etc/grafana/provisioning/datasources/gpucluster.yml"],
    "dcgm": ["/etc/dcgm-exporter/counters.csv", "/etc/systemd/system/dcgm-exporter.service",
             "/usr/local/bin/dcgm-exporter", "/etc/apt/preferences.d/gpucluster-dcgm",
             "/etc/default/prometheus-node-exporter"],
}
CASES = [
    # (id, role, the host's group, variables, text the error must hold ({host} is the host))
    ("grafana-password-placeholder", "monitoring", "head_nodes",
     dict(MUST_NOT_CHANGE["monitoring_head"], monitoring_grafana_admin_password="CHANGE-ME-openssl-rand-hex-24"),
     "host {host}: monitoring_grafana_admin_password is still the example vault's placeholder"),
    ("dcgm-unavailable", "dcgm", "gpu_nodes", dict(MUST_NOT_CHANGE["monitoring_gpu"], dcgm_when_unavailable="fail"),
     "Set dcgm_when_unavailable: skip"),
]
ALSO = "dpkg-query -W 'datacenter-gpu-manager*' prometheus-alertmanager 2>&1 || true"


@pytest.mark.parametrize("name,role,group,variables,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_in_preflight(scenario, tmp_path, name, role, group, variables, expect):
    host = scenario.groups[group][0]
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "Bad input for %s" % role, "hosts": host, "gather_facts": False,
                                     "roles": [{"role": "gpucluster.ops." + role}]}]))
    before = snapshot(host, WATCHED[role], ALSO)
    rc, out = scenario.playbook(tmp_path, str(play), extra_vars=variables)
    after = snapshot(host, WATCHED[role], ALSO)
    assert_refused_before_change(name, rc, out, [role], [expect.format(host=host)], {host: before}, {host: after})
