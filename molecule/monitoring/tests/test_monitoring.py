"""Prometheus, node_exporter, dcgm-exporter and the alert rules, on a monitoring host and a simulated GPU node."""

import csv
import io
import json
import re
import shlex
import time

import pytest
import testinfra
import yaml

HEAD, GPU = "deb13-monitoring", "deb12-monitoring"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def _is(host, group):
    return group in host.ansible.get_variables()["group_names"]


def _get(host, url):
    """The body of an HTTP GET made from inside the node."""
    script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    return host.check_output("python3 -c %s %s" % (shlex.quote(script), shlex.quote(url)))


def _query(head, promql):
    answer = json.loads(_get(head, "http://localhost:9090/api/v1/query?query=" + _quote_url(promql)))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _quote_url(text):
    from urllib.parse import quote
    return quote(text, safe="")


def _wait(what, check, timeout=90):
    """Poll check() until it returns something true; fail with the last value."""
    deadline, value = time.time() + timeout, None
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(3)
    pytest.fail("%s: not seen within %d s (last: %r)" % (what, timeout, value))


def _gpu_node():
    return testinfra.get_host("docker://" + GPU)


# Every node -----------------------------------------------------------------------------------------------------

def test_node_exporter_runs_with_the_textfile_collector(host):
    service = host.service("prometheus-node-exporter")
    assert service.is_enabled and service.is_running
    args = host.file("/etc/default/prometheus-node-exporter").content_string
    assert "--collector.textfile.directory=%s" % TEXTFILE_DIR in args
    assert host.socket("tcp://0.0.0.0:9100").is_listening or host.socket("tcp://:::9100").is_listening
    assert "node_exporter_build_info" in _get(host, "http://localhost:9100/metrics")


# The GPU node ---------------------------------------------------------------------------------------------------

def test_node_exporter_serves_the_health_metrics_of_the_gpu_node(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    host.run_expect([0], "systemctl start gpucluster-health.service")
    assert host.file(TEXTFILE_DIR + "/gpucluster_health.prom").exists
    metrics = _get(host, "http://localhost:9100/metrics")
    # node_exporter sorts the labels; the pending row remap of GPU 3 makes the node's status an error (2).
    assert re.search(r'^gpucluster_health_status\{level="standard",node="%s"\} 2$' % GPU, metrics, re.M), metrics
    assert re.search(r'^gpucluster_health_gpus\{node="%s"\} 8$' % GPU, metrics, re.M)
    assert re.search(r'^gpucluster_health_finding\{code="GPU-ROW-REMAP-PENDING",node="%s",severity="error",target="gpu3"\} 1$'
                     % GPU, metrics, re.M)
    assert "node_textfile_scrape_error 0" in metrics


def test_counters_file_has_the_standard_set_plus_errors_and_passes_the_checker(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    text = host.file("/etc/dcgm-exporter/counters.csv").content_string
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
        assert fields.get(field) == kind, field
    checker = "/usr/local/lib/gpucluster-dcgm-exporter/bin/dcgm-counters-check"
    out = host.run(checker + " /etc/dcgm-exporter/counters.csv")
    assert out.rc == 0 and "%d metric(s), 1 label(s)" % (len(rows) - 1) in out.stdout, out.stdout + out.stderr


def test_the_checker_refuses_what_dcgm_exporter_would_refuse(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    bad = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature, in C\\nDCGM_FI_DEV_GPU_UTIL, histogram, x\\n"
    host.run_expect([0], "printf '%s' > /tmp/bad-counters.csv" % bad)
    out = host.run("/usr/local/lib/gpucluster-dcgm-exporter/bin/dcgm-counters-check /tmp/bad-counters.csv")
    assert out.rc == 1
    assert "/tmp/bad-counters.csv:1: expected 3 comma-separated fields" in out.stdout
    assert "/tmp/bad-counters.csv:2: DCGM_FI_DEV_GPU_UTIL: type 'histogram'" in out.stdout


def test_dcgm_exporter_unit_passes_systemd_analyze_and_carries_the_settings(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    out = host.run("systemd-analyze verify /etc/systemd/system/dcgm-exporter.service")
    assert out.rc == 0, out.stdout + out.stderr
    assert "dcgm-exporter.service" not in out.stderr, out.stderr
    unit = host.file("/etc/systemd/system/dcgm-exporter.service").content_string
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == ["ExecStart=/usr/local/bin/dcgm-exporter --collectors /etc/dcgm-exporter/counters.csv "
                          "--address :9400 --collect-interval 30000 --remote-hostengine-info localhost:5555"]
    assert "Wants=network-online.target nvidia-dcgm.service" in unit
    binary = host.file("/usr/local/bin/dcgm-exporter")
    assert binary.mode == 0o755 and binary.user == "root"


def test_dcgm_exporter_serves_the_gpus_on_9400(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    service = host.service("dcgm-exporter")
    assert service.is_enabled and service.is_running
    metrics = _get(host, "http://localhost:9400/metrics")
    temps = re.findall(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d)",.*\} \d+', metrics, re.M)
    assert sorted(temps) == [str(i) for i in range(8)]


def test_dcgm_is_left_out_where_no_repository_offers_it(host):
    if not _is(host, "gpu_nodes"):
        pytest.skip("GPU node only")
    assert host.run("dpkg-query -W 'datacenter-gpu-manager*'").rc != 0
    assert not host.file("/etc/apt/preferences.d/gpucluster-dcgm").exists
    assert not host.service("nvidia-dcgm").is_enabled


# The monitoring host --------------------------------------------------------------------------------------------

def test_prometheus_runs_with_the_rendered_and_checked_config(host):
    if not _is(host, "head_nodes"):
        pytest.skip("monitoring host only")
    service = host.service("prometheus")
    assert service.is_enabled and service.is_running
    host.run_expect([0], "promtool check config /etc/prometheus/prometheus.yml")
    config = yaml.safe_load(host.file("/etc/prometheus/prometheus.yml").content_string)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert sorted(jobs) == ["dcgm", "node", "prometheus"]  # no Slurm exporter group in this inventory
    assert jobs["dcgm"]["static_configs"] == [{"targets": [GPU + ":9400"],
                                               "labels": {"instance": GPU, "expected_gpus": "8"}}]
    assert {c["targets"][0] for c in jobs["node"]["static_configs"]} == {GPU + ":9100", HEAD + ":9100"}
    assert config["global"]["scrape_interval"] == "5s"


def test_the_alert_rules_pass_their_unit_tests_and_are_the_tested_ones(host):
    if not _is(host, "head_nodes"):
        pytest.skip("monitoring host only")
    out = host.run("promtool test rules /etc/prometheus/tests/gpucluster-alerts.test.yml")
    assert out.rc == 0 and "SUCCESS" in out.stdout + out.stderr, out.stdout + out.stderr
    live = host.file("/etc/prometheus/rules/gpucluster-alerts.yml")
    assert live.content_string == host.file("/etc/prometheus/tests/gpucluster-alerts.yml").content_string
    host.run_expect([0], "promtool check rules /etc/prometheus/rules/gpucluster-alerts.yml")
    rules = yaml.safe_load(live.content_string)
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"GpuTemperatureHigh", "GpuXidError", "GpuEccUncorrectable", "GpuRowRemapFailure", "GpuNvlinkErrors",
            "GpuMissing", "GpuMemoryHigh", "GpuPowerAtLimit", "GpuUtilisationLow", "NodeHealthError",
            "NodeHealthWarning", "NodeHealthUnknown", "NodeHealthCheckStale", "ExporterDown"} == alerts


def test_the_targets_api_lists_every_endpoint_up(host):
    if not _is(host, "head_nodes"):
        pytest.skip("monitoring host only")

    def targets():
        answer = json.loads(_get(host, "http://localhost:9090/api/v1/targets"))["data"]["activeTargets"]
        found = {(t["labels"]["job"], t["labels"]["instance"], t["scrapeUrl"], t["health"]) for t in answer}
        return found if all(t[3] == "up" for t in found) and len(found) == 4 else None

    assert _wait("all targets up", targets) == {
        ("prometheus", HEAD, "http://localhost:9090/metrics", "up"),
        ("node", HEAD, "http://%s:9100/metrics" % HEAD, "up"),
        ("node", GPU, "http://%s:9100/metrics" % GPU, "up"),
        ("dcgm", GPU, "http://%s:9400/metrics" % GPU, "up"),
    }


def test_prometheus_sees_the_gpus_and_fires_the_health_alert(host):
    if not _is(host, "head_nodes"):
        pytest.skip("monitoring host only")
    _gpu_node().run_expect([0], "systemctl start gpucluster-health.service")
    status = _wait("the GPU node's health status", lambda: _query(host, 'gpucluster_health_status{instance="%s"}' % GPU))
    assert status[0]["value"][1] == "2" and status[0]["metric"]["job"] == "node"
    gpus = _wait("8 GPUs", lambda: _query(host, 'count(DCGM_FI_DEV_GPU_TEMP{instance="%s"}) == 8' % GPU))
    assert gpus[0]["value"][1] == "8"

    def firing():
        alerts = json.loads(_get(host, "http://localhost:9090/api/v1/alerts"))["data"]["alerts"]
        return [a for a in alerts if a["state"] == "firing"]

    alerts = _wait("NodeHealthError firing", lambda: [a for a in firing() if a["labels"]["alertname"] == "NodeHealthError"])
    assert alerts[0]["labels"]["node"] == GPU and alerts[0]["labels"]["severity"] == "critical"
    # A healthy rest: the GPUs are all there, cool and without errors, every exporter answers.
    names = {a["labels"]["alertname"] for a in firing()}
    assert not names & {"GpuMissing", "GpuTemperatureHigh", "GpuXidError", "GpuEccUncorrectable", "ExporterDown"}, names


def test_grafana_provisioning_and_dashboard_are_in_place(host):
    if not _is(host, "head_nodes"):
        pytest.skip("monitoring host only")
    datasource = yaml.safe_load(host.file("/etc/grafana/provisioning/datasources/gpucluster.yml").content_string)
    assert datasource["datasources"][0]["uid"] == "gpucluster-prometheus"
    assert datasource["datasources"][0]["url"] == "http://localhost:9090"
    provider = yaml.safe_load(host.file("/etc/grafana/provisioning/dashboards/gpucluster.yml").content_string)
    path = provider["providers"][0]["options"]["path"]
    dashboard = json.loads(host.file(path + "/gpucluster-fleet.json").content_string)
    assert dashboard["uid"] == "gpucluster-fleet"
    assert not host.package("grafana").is_installed  # no monitoring_grafana_apt_url here
