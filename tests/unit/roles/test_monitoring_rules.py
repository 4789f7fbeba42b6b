"""The monitoring role's alert rules and their promtool unit tests, rendered from the thresholds as the role does.

promtool runs where it is installed (Debian: the prometheus or promtool package; or PROMTOOL=/path): the rules pass
their tests for the default thresholds and for other ones, and the tests catch rules that do not match them.
"""

import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpucluster.ops.plugins.filter.prometheus_static_configs import prometheus_static_configs

from .promql import health_metrics, known_metrics, metric_names
from .rolerender import DEBIAN13, RoleRender

PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool")
needs_promtool = pytest.mark.skipif(not PROMTOOL, reason="promtool is not installed (apt-get install prometheus)")
ALERTS = {"Watchdog", "GpuTemperatureHigh", "GpuXidError", "GpuEccUncorrectable", "GpuRowRemapFailure", "GpuNvlinkErrors",
          "GpuMissing", "GpuMemoryHigh", "GpuPowerAtLimit", "GpuUtilisationLow", "NodeHealthError",
          "NodeHealthWarning", "NodeHealthUnknown", "NodeHealthCheckStale", "ExporterDown", "SlurmNodeDrainedByAdmin",
          "SlurmBreakerReached", "SlurmMetricsMissing", "GpuPowerBrake", "GpuHardwareSlowdown"}
RECORDS = {"gpucluster:job_gpu_utilisation", "gpucluster:account_gpus_allocated", "gpucluster:account_gpus_busy",
           "gpucluster:account_gpu_utilisation:avg", "gpucluster:account_gpus_idle", "gpucluster:job_gpus_allocated",
           "gpucluster:job_gpus_idle", "gpucluster:slurm_jobs_known"}
OTHER_THRESHOLDS = dict(
    monitoring_alert_gpu_temp_c=78, monitoring_alert_gpu_memory_used_pct=95, monitoring_alert_gpu_power_limit_pct=100,
    monitoring_alert_gpu_util_low_pct=10, monitoring_alert_gpu_util_window="2h", monitoring_gpu_busy_util_pct=50,
    monitoring_alert_xid_ignore=[], monitoring_alert_ecc_dbe_max=3, monitoring_alert_nvlink_errors_max=250,
    monitoring_alert_nvlink_window="10m", monitoring_alert_health_stale_s=600, monitoring_alert_for="90s",
    monitoring_alert_gpu_memory_for="1h", monitoring_alert_gpu_power_for="30m", monitoring_alert_exporter_down_for="1d",
    monitoring_alert_gpu_slowdown_for="2m",
    monitoring_alert_gpu_temp_c_by_model={"NVIDIA H100 80GB HBM3": 88, "NVIDIA A100-SXM4-80GB": 76})


def render(tmp_path, counts=(8,), rules_overrides=None, **overrides):
    """Write the rules and their tests as the role does (the tests beside the rules); returns their paths."""
    staged = str(tmp_path / "gpucluster-alerts.yml")
    tests = tmp_path / "gpucluster-alerts.test.yml"
    variables = dict(overrides, __monitoring_expected_gpu_counts=list(counts), __monitoring_staged_rules_file=staged)
    (tmp_path / "gpucluster-alerts.yml").write_text(
        RoleRender("monitoring", None, DEBIAN13, **dict(variables, **(rules_overrides or {})))
        .template("gpucluster-alerts.yml.j2"))
    tests.write_text(RoleRender("monitoring", None, DEBIAN13, **variables).template("gpucluster-alerts.test.yml.j2"))
    return staged, str(tests)


def rules_of(path):
    with open(path) as handle:
        document = yaml.safe_load(handle)
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("overrides", [{}, OTHER_THRESHOLDS], ids=["defaults", "other-thresholds"])
def test_every_alert_is_there_with_a_severity_and_its_texts(tmp_path, overrides):
    rules, _tests = render(tmp_path, **overrides)
    found = rules_of(rules)
    assert {r["alert"] for r in found if "alert" in r} == ALERTS
    assert {r["record"] for r in found if "record" in r} == RECORDS
    for rule in (r for r in found if "alert" in r):
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule


def test_the_thresholds_reach_the_expressions(tmp_path):
    rules, _tests = render(tmp_path, **OTHER_THRESHOLDS)
    by_name = {r.get("alert") or r["record"]: r for r in rules_of(rules)}
    temperature = [r["expr"] for r in rules_of(rules) if r.get("alert") == "GpuTemperatureHigh"]
    assert temperature == [
        'DCGM_FI_DEV_GPU_TEMP >= 78 unless (DCGM_FI_DEV_GPU_TEMP{modelName="NVIDIA A100-SXM4-80GB"} or '
        'DCGM_FI_DEV_GPU_TEMP{modelName="NVIDIA H100 80GB HBM3"})',
        'DCGM_FI_DEV_GPU_TEMP{modelName="NVIDIA A100-SXM4-80GB"} >= 76',
        'DCGM_FI_DEV_GPU_TEMP{modelName="NVIDIA H100 80GB HBM3"} >= 88']
    assert [r["expr"] for r in rules_of(render(tmp_path)[0]) if r.get("alert") == "GpuTemperatureHigh"] == [
        "DCGM_FI_DEV_GPU_TEMP >= 85"]
    assert by_name["GpuPowerBrake"]["for"] == by_name["GpuHardwareSlowdown"]["for"] == "2m"
    assert by_name["GpuTemperatureHigh"]["for"] == "90s"
    assert by_name["GpuXidError"]["expr"] == "DCGM_FI_DEV_XID_ERRORS > 0"
    assert "[10m]" in by_name["GpuNvlinkErrors"]["expr"] and by_name["GpuNvlinkErrors"]["expr"].endswith("> 250")
    assert by_name["NodeHealthCheckStale"]["expr"] == "time() - gpucluster_health_last_run_timestamp_seconds > 600"
    assert by_name["gpucluster:account_gpus_busy"]["expr"].startswith(
        "count by (account) (gpucluster:job_gpu_utilisation >= 50)")
    assert by_name["gpucluster:job_gpus_idle"]["expr"].startswith(
        "count by (jobid, account, user) (gpucluster:job_gpu_utilisation < 50)")
    assert "offset 2h" in by_name["GpuUtilisationLow"]["expr"] and "< 10 " in by_name["GpuUtilisationLow"]["expr"]


def test_ignored_xids_are_left_out_of_the_expression(tmp_path):
    rules, _tests = render(tmp_path)
    xid = [r for r in rules_of(rules) if r.get("alert") == "GpuXidError"][0]
    assert xid["expr"] == ("DCGM_FI_DEV_XID_ERRORS > 0 and DCGM_FI_DEV_XID_ERRORS != 13 and DCGM_FI_DEV_XID_ERRORS != 31"
                           " and DCGM_FI_DEV_XID_ERRORS != 43")


def test_gpu_missing_covers_each_expected_count_and_is_absent_without_one(tmp_path):
    rules, _tests = render(tmp_path, counts=(4, 8))
    missing = [r for r in rules_of(rules) if r.get("alert") == "GpuMissing"][0]
    assert 'expected_gpus="4"' in missing["expr"] and 'expected_gpus="8"' in missing["expr"]
    rules, _tests = render(tmp_path, counts=())
    assert "GpuMissing" not in {r.get("alert") for r in rules_of(rules)}


def test_the_rules_read_only_metrics_that_exist(tmp_path):
    rules, _tests = render(tmp_path)
    used, recorded = set(), {rule["record"] for rule in rules_of(rules) if "record" in rule}
    for rule in rules_of(rules):
        used |= metric_names(rule["expr"])
    assert used - known_metrics() - recorded == set()
    # the job rules read the collector's info series and DCGM's utilisation
    assert {"slurm_job_gpu_info", "DCGM_FI_DEV_GPU_UTIL"} <= used
    # and they do read the health checker's status and age
    assert {"gpucluster_health_status", "gpucluster_health_last_run_timestamp_seconds"} <= used & health_metrics()


def test_every_alert_has_a_firing_case_in_the_tests(tmp_path):
    _rules, tests = render(tmp_path, counts=(8, 1))
    with open(tests) as handle:
        document = yaml.safe_load(handle)
    tested = {case["alertname"]: case["exp_alerts"] for group in document["tests"] for case in group["alert_rule_test"]}
    assert set(tested) == ALERTS
    assert all(tested.values()), [name for name, expected in tested.items() if not expected]


@needs_promtool
@pytest.mark.parametrize("counts,overrides", [((8,), {}), ((8, 4, 1), OTHER_THRESHOLDS), ((), {})],
                         ids=["defaults", "other-thresholds", "no-expected-counts"])
def test_promtool_checks_the_rules_and_their_tests_pass(tmp_path, counts, overrides):
    rules, tests = render(tmp_path, counts=counts, **overrides)
    check = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([PROMTOOL, "test", "rules", tests], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
@pytest.mark.parametrize("wrong", [{"monitoring_alert_gpu_temp_c": 95}, {"monitoring_alert_xid_ignore": [79]},
                                   {"monitoring_alert_gpu_util_low_pct": 30}, {"monitoring_gpu_busy_util_pct": 90}])
def test_the_tests_catch_rules_that_do_not_match_the_thresholds(tmp_path, wrong):
    _rules, tests = render(tmp_path, rules_overrides=wrong)
    run = subprocess.run([PROMTOOL, "test", "rules", tests], capture_output=True, text=True, check=False)
    assert run.returncode != 0, run.stdout


def test_the_scrape_config_holds_the_inventorys_targets(tmp_path):
    hostvars = {"head": {}, "gpu01": {"health_check_expected": {"gpu_count": 8}}, "gpu02": {"dcgm_exporter_port": 9401}}
    r = RoleRender("monitoring", None, DEBIAN13, inventory_hostname="head", ansible_play_hosts_all=["head"],
                   hostvars=hostvars,
                   __monitoring_node_static_configs=prometheus_static_configs(["head", "gpu01", "gpu02"], hostvars, port=9100),
                   __monitoring_dcgm_static_configs=prometheus_static_configs(
                       ["gpu01", "gpu02"], hostvars, port=9400, port_var="dcgm_exporter_port", expected_gpus=True),
                   __monitoring_slurm_static_configs=prometheus_static_configs(["head"], hostvars, port=8080))
    text = r.template("prometheus.yml.j2")
    assert text.startswith("#")
    config = yaml.safe_load(text)
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert list(jobs) == ["prometheus", "node", "dcgm", "slurm"]
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"], "labels": {"instance": "head", "node": "head"}}]
    assert jobs["dcgm"] == [{"targets": ["gpu01:9400"], "labels": {"instance": "gpu01", "node": "gpu01", "expected_gpus": "8"}},
                            {"targets": ["gpu02:9401"], "labels": {"instance": "gpu02", "node": "gpu02"}}]
    # The node job keeps a scraped node label (the textfile metrics of another node, such as Slurm's on the controller).
    assert [job.get("honor_labels") for job in config["scrape_configs"]] == [None, True, None, None]
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["localhost:9093"]}]}]}
    if PROMTOOL:
        (tmp_path / "prometheus.yml").write_text(text.replace("/etc/prometheus/rules/*.yml", str(tmp_path / "none-*.yml")))
        check = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr


def test_alertmanager_routes_the_watchdog_first_and_has_a_receiver_for_the_rest(tmp_path):
    hostvars = {"mon1": {}, "mon2": {"monitoring_scrape_address": "10.0.0.2"}}
    r = RoleRender("monitoring", None, DEBIAN13, inventory_hostname="mon1", ansible_play_hosts_all=["mon1", "mon2"],
                   hostvars=hostvars,
                   monitoring_alertmanager_receivers=[{"name": "oncall", "webhook_configs": [{"url": "http://x/"}]}],
                   monitoring_alertmanager_routes=[{"receiver": "oncall", "matchers": ['severity="critical"']}],
                   __monitoring_node_static_configs=[], __monitoring_dcgm_static_configs=[],
                   __monitoring_slurm_static_configs=[])
    config = yaml.safe_load(r.template("alertmanager.yml.j2"))
    route = config["route"]
    assert route["receiver"] == "gpucluster-nobody" and route["group_by"] == ["alertname", "node"]
    assert route["routes"][0]["matchers"] == ['alertname="Watchdog"']
    assert route["routes"][0]["receiver"] == "gpucluster-nobody" and route["routes"][0]["repeat_interval"] == "12h"
    assert route["routes"][1] == {"receiver": "oncall", "matchers": ['severity="critical"']}
    assert [x["name"] for x in config["receivers"]] == ["oncall", "gpucluster-nobody"]
    assert [rule["source_matchers"] for rule in config["inhibit_rules"]][:2] == [
        ['alertname="SlurmNodeDrainedByAdmin"'], ['alertname="NodeHealthError"']]
    # Two monitoring hosts: one Alertmanager cluster, Prometheus sends to both.
    args = r.template("prometheus-alertmanager.default.j2")
    assert "--cluster.peer=10.0.0.2:9094" in args and "--web.listen-address=0.0.0.0:9093" in args
    prometheus = yaml.safe_load(r.template("prometheus.yml.j2"))
    assert prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["localhost:9093", "10.0.0.2:9093"]


def test_one_alertmanager_alone_does_not_gossip():
    r = RoleRender("monitoring", None, DEBIAN13, inventory_hostname="mon1", ansible_play_hosts_all=["mon1"],
                   hostvars={"mon1": {}}, monitoring_alertmanager_default_receiver="oncall",
                   monitoring_alertmanager_receivers=[{"name": "oncall", "email_configs": [{"to": "a@b.example"}]}])
    assert '--cluster.listen-address=' in r.template("prometheus-alertmanager.default.j2")
    assert "--cluster.peer" not in r.template("prometheus-alertmanager.default.j2")
    config = yaml.safe_load(r.template("alertmanager.yml.j2"))
    assert [x["name"] for x in config["receivers"]] == ["oncall"] and config["route"]["receiver"] == "oncall"
