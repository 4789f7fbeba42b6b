"""The monitoring roles as the site run left them (Debian 13's cluster, which runs them all): node_exporter with the
textfile collector on every node, dcgm-exporter on the GPU nodes with a counters file its checker passes, DCGM left
out where no repository offers it, Prometheus's rendered and checked config and its tested alert rules, Grafana's
provisioning; the Slurm collector against squeue and sinfo, its one info series per GPU a job holds, Prometheus's
join of DCGM's utilisation to the jobs and teams (one job busy, one idle), and Alertmanager's inhibition of an
admin-drained node's warnings; and bad input to the monitoring and dcgm roles refused before anything changes. The alerting path (a
fault to the test receiver through Alertmanager, the node label) is test_0_site.py's; the scrape targets up too.

These were the monitoring role scenario's (molecule/monitoring, folded into the cluster by issue 53); its Debian 12
GPU node is left out: Debian 12's cluster skips dcgm_exporter and monitoring (group_vars/debian12.yml).
"""

import csv
import io
import json
import re
import shlex
import time
import urllib.parse

import pytest
import yaml

import alerting
from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, snapshot
from conftest import set_faults

pytestmark = pytest.mark.release("debian13")

TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
COUNTERS = "/etc/dcgm-exporter/counters.csv"
CHECKER = "/usr/local/lib/gpucluster-dcgm-exporter/bin/dcgm-counters-check"
ALERTS = {"Watchdog", "GpuTemperatureHigh", "GpuXidError", "GpuEccUncorrectable", "GpuRowRemapFailure",
          "GpuNvlinkErrors", "GpuMissing", "GpuMemoryHigh", "GpuPowerAtLimit", "GpuUtilisationLow", "NodeHealthError",
          "NodeHealthWarning", "NodeHealthUnknown", "NodeHealthCheckStale", "ExporterDown", "SlurmNodeDrainedByAdmin",
          "SlurmBreakerReached", "SlurmMetricsMissing", "GpuPowerBrake", "GpuHardwareSlowdown"}


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


def test_the_clock_event_reasons_reach_the_exporter_as_nvml_bits(scenario):
    """DCGM's clock event reasons (the GpuPowerBrake and GpuHardwareSlowdown alerts' input) are NVML's bitmask: a
    power brake on GPU 1 (the simulator's fault, as nvidia-smi reports it) sets 0x80 and 0x8 on that GPU only."""
    name = scenario.groups["gpu_nodes"][0]
    node = scenario.host(name)
    pattern = r'^DCGM_FI_DEV_CLOCK_THROTTLE_REASONS\{gpu="(\d+)",.*\} (\d+)$'
    try:
        set_faults(scenario, name, [{"name": "clock_power_brake", "gpu": 1}])
        reasons = dict(re.findall(pattern, alerting.get(node, "http://localhost:9400/metrics"), re.M))
    finally:
        set_faults(scenario, name, [])
    assert int(reasons["1"]) & 0x88 == 0x88, reasons
    assert all(int(v) & 0x88 == 0 for gpu, v in reasons.items() if gpu != "1"), reasons
    after = dict(re.findall(pattern, alerting.get(node, "http://localhost:9400/metrics"), re.M))
    assert int(after["1"]) & 0x88 == 0, after


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
    assert {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r} == ALERTS
    assert {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r} == {
        "gpucluster:job_gpu_utilisation", "gpucluster:account_gpus_allocated", "gpucluster:account_gpus_busy",
        "gpucluster:account_gpu_utilisation:avg", "gpucluster:account_gpus_idle", "gpucluster:job_gpus_allocated",
        "gpucluster:job_gpus_idle", "gpucluster:slurm_jobs_known"}


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


# The Slurm collector (gpucluster-slurm-metrics, installed by the slurm role on the primary controller) -------------

# The utilisation the simulator gives a busy job's GPUs (over monitoring_gpu_busy_util_pct, 10).
BUSY_PCT = 80
SLURM_METRICS = "/usr/local/lib/gpucluster-slurm-metrics/bin/gpucluster-slurm-metrics"
SQUEUE = ("squeue -h -t PENDING,RUNNING,COMPLETING -O "
          "'JobID:20,Account:30,Partition:30,State:20,tres-per-job:40,tres-per-node:40,tres-per-task:40,NumNodes:10,"
          "NumTasks:10'")
SINFO = "sinfo -h -N -O 'NodeHost:40,Partition:30,Gres:60,GresUsed:80,StateLong:30'"


def _metric_rows(text):
    rows = {}
    for line in text.splitlines():
        match = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', line)
        if match:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(2) or "")))
            rows[(match.group(1), labels)] = float(match.group(3))
    return rows


def _gpus_of(text):
    """gres/gpu:N, gres/gpu:TYPE:N or gres/gpu=N (squeue's tres-per-* print both), N/A -> 0."""
    match = re.search(r"gres/gpu(?::[^:=,]+)?[:=](\d+)", text)
    return int(match.group(1)) if match else 0


def _gres_count(text):
    return sum(int(m) for m in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", text))


def test_the_slurm_collector_matches_squeue_and_sinfo_run_in_the_same_step(scenario, ctl):
    """Two running jobs (one asking --gpus-per-node, one --gpus), one pending behind them (--gpus-per-task), a node
    drained by a person: the collector's GPUs per partition and per account, and its out-of-service node, are what
    squeue and sinfo, run in the same shell right after it, say."""
    a100, h100 = scenario.groups["gpu_a100"][0], scenario.groups["gpu_h100"][0]
    assert ctl.service("gpucluster-slurm-metrics.timer").is_running
    submit = "runuser -u {user} -- sbatch --parsable -A {account} -p {partition} -t 5 -o /dev/null {gpus} --wrap 'sleep 300'"
    jobs = [ctl.check_output(submit.format(user="alice", account="research", partition="research",
                                           gpus="-w %s --gpus-per-node=2" % h100).replace(
                                               "'sleep 300'", "'echo $SLURM_JOB_GPUS > /tmp/job-gpus-$SLURM_JOB_ID; "
                                                              "sleep 300'")).strip(),
            ctl.check_output(submit.format(user="bob", account="development", partition="dev",
                                           gpus="-w %s --gpus=3" % h100)).strip(),
            ctl.check_output(submit.format(user="bob", account="development", partition="dev",
                                           gpus="-w %s -n 2 --gpus-per-task=3" % h100)).strip()]
    try:
        ctl.run_expect([0], "scontrol update nodename=%s state=drain reason='swap a fan'" % a100)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = ctl.check_output("squeue -h -j %s -o %%T" % ",".join(jobs)).split()
            if states.count("RUNNING") == 2:
                break
            time.sleep(1)
        out = ctl.check_output("%s --print; echo ===; %s; echo ===; %s" % (SLURM_METRICS, SINFO, SQUEUE))
        # alice's job keeps its GPUs busy (the simulator's gpu_busy on them), bob's leaves his idle
        alice_gpus = _job_gpus(scenario.host(h100), jobs[0])
        set_faults(scenario, h100, [{"name": "gpu_busy", "gpu": int(g), "value": BUSY_PCT} for g in alice_gpus])
        ctl.run_expect([0], "systemctl start gpucluster-slurm-metrics.service")   # not waiting for its timer
        joined = _joined_in_prometheus(ctl, jobs[0], h100)
        report, bob_report = _team_report_from_now(ctl)
        inhibited = _inhibition_of_an_admin_drain(ctl, a100, h100)
    finally:
        ctl.run("scancel %s" % " ".join(jobs))
        ctl.run("scontrol update nodename=%s state=resume" % a100)
        set_faults(scenario, h100, [])
    collected, sinfo, squeue = out.split("===\n")
    rows = _metric_rows(collected)
    assert {v for (name, labels), v in rows.items() if name == "slurm_collector_source_up"} == {1.0}, collected
    # sinfo: a node's GPUs in each of its partitions, allocated, idle or out (drained, down, failing)
    want = {}
    for line in sinfo.splitlines():
        node, partition, gres, used, state = line.split()[:5]
        total, busy = _gres_count(gres), _gres_count(used.split("(")[0])
        out_of_service = any(word in state for word in ("drain", "down", "fail"))
        counts = want.setdefault(partition.rstrip("*"), {"allocated": 0, "idle": 0, "out": 0})
        counts["allocated"] += busy
        counts["out" if out_of_service else "idle"] += total - busy
    got = {}
    for (name, labels), value in rows.items():
        if name == "slurm_partition_gpus":
            labels = dict(labels)
            got.setdefault(labels["partition"], {})[labels["state"]] = int(value)
    assert got == want, (collected, sinfo)
    # the H100 node is in both partitions: its 5 GPUs in use count in each; the drained A100 node's 8 are out
    assert got == {"dev": {"allocated": 5, "idle": 3, "out": 8}, "research": {"allocated": 5, "idle": 3, "out": 0}}, got
    # squeue: each account's GPUs, however its jobs asked for them
    want = {}
    for line in squeue.splitlines():
        _job, account, partition, state, per_job, per_node, per_task, nodes, tasks = line.split()[:9]
        gpus = _gpus_of(per_job) or _gpus_of(per_node) * int(nodes) or _gpus_of(per_task) * int(tasks)
        key = (account, partition, "pending" if state == "PENDING" else "allocated")
        want[key] = want.get(key, 0) + gpus
    got = {(dict(l)["account"], dict(l)["partition"], dict(l)["state"]): int(v)
           for (name, l), v in rows.items() if name == "slurm_account_gpus"}
    assert got == want, (collected, squeue)
    assert got == {("research", "research", "allocated"): 2, ("development", "dev", "allocated"): 3,
                   ("development", "dev", "pending"): 6}, got
    assert rows[("slurm_node_out_of_service", (("node", a100), ("owner", "admin"), ("state", "IDLE+DRAIN")))] == 1
    assert rows[("slurm_nodes", (("state", "out_of_service"),))] == 1
    # each GPU a job holds is one info series, named by the minor number Slurm gave the job itself ($SLURM_JOB_GPUS)
    held = {(dict(l)["jobid"], dict(l)["node"], dict(l)["gpu"], dict(l)["account"], dict(l)["user"])
            for (name, l), v in rows.items() if name == "slurm_job_gpu_info" and v == 1}
    assert {(j, n, g) for j, n, g, _a, _u in held if j == jobs[0]} == {(jobs[0], h100, g) for g in alice_gpus}, held
    assert {(a, u) for j, _n, _g, a, u in held if j == jobs[0]} == {("research", "alice")}
    bob = {g for j, n, g, _a, _u in held if j == jobs[1]}
    assert len(bob) == 3 and not bob & set(alice_gpus), held
    assert not [k for k in rows if k[0] == "slurm_job_gpus_unmapped"], collected
    # Prometheus joined DCGM's utilisation of those GPUs to the job (the gpucluster-jobs recording rules), and counts
    # each team's held and busy GPUs: research's 2 busy, development's 3 idle
    by_gpu, teams = joined
    assert set(by_gpu) == set(alice_gpus), joined
    for gpu, (labels, value, dcgm) in by_gpu.items():
        assert (labels["node"], labels["account"], labels["user"], labels["job"]) == (h100, "research", "alice", "dcgm")
        assert value == dcgm == BUSY_PCT, (gpu, value, dcgm)
    assert teams == {"research": (2, 2), "development": (3, 0)}, teams
    # gpu-job usage --team (carol is in both teams): from the time Prometheus had both jobs' state, research's GPUs
    # were all busy and development's all idle, in the ratio of the GPUs they hold (2:3); bob's job is the most idle
    assert report["coverage"] == 1.0 and report["complete"], report
    assert set(report["teams"]) == {"research", "development"}, report
    research, development = report["teams"]["research"], report["teams"]["development"]
    assert research["allocated_gpu_hours"] > 0 and development["allocated_gpu_hours"] > 0, report
    assert research["busy_gpu_hours"] == research["allocated_gpu_hours"] and research["idle_gpu_hours"] == 0, report
    assert development["idle_gpu_hours"] == development["allocated_gpu_hours"], report
    assert development["busy_gpu_hours"] == 0 and (research["idle_share"], development["idle_share"]) == (0, 1), report
    assert research["allocated_gpu_hours"] / development["allocated_gpu_hours"] == pytest.approx(2 / 3.0, rel=1e-3)
    # bob's own report: his job is the most idle (a user is shown only their own jobs)
    assert [(j["jobid"], j["user"], j["team"], j["idle_share"]) for j in bob_report["top_idle_jobs"]] == [
        (jobs[1], "bob", "development", 1.0)], bob_report
    assert bob_report["top_idle_jobs"][0]["idle_gpu_hours"] == bob_report["teams"]["development"]["idle_gpu_hours"]
    assert report["top_idle_jobs"] == [], report    # carol has no jobs
    # Alertmanager itself: the admin-drained node's SlurmNodeDrainedByAdmin mutes a warning of that node, not the
    # same warning of a node in service, which reaches the receiver
    by_node, arrived = inhibited
    assert by_node[a100]["state"] == "suppressed" and by_node[a100]["inhibitedBy"], by_node
    assert by_node[h100]["state"] == "active" and not by_node[h100]["inhibitedBy"], by_node
    assert arrived == {h100}, arrived


def _query(head, expr):
    url = "http://localhost:9090/api/v1/query?query=" + urllib.parse.quote(expr)
    return json.loads(alerting.get(head, url))["data"]["result"]


def _job_gpus(node, jobid, timeout=20):
    """The minor numbers Slurm gave the job on ``node``, as its batch script wrote them ($SLURM_JOB_GPUS)."""
    deadline = time.monotonic() + timeout
    while not node.file("/tmp/job-gpus-%s" % jobid).exists:
        assert time.monotonic() < deadline, "job %s wrote no /tmp/job-gpus-%s on its node" % (jobid, jobid)
        time.sleep(1)
    return node.file("/tmp/job-gpus-%s" % jobid).content_string.split()[0].split(",")


def _joined_in_prometheus(head, jobid, node, timeout=150):
    """Once the collector, the stand-in DCGM exporter and Prometheus's scrape and rules have seen ``jobid`` busy:
    {gpu: (labels, value, DCGM's value at the same time)} of its gpucluster:job_gpu_utilisation, and each team's
    (gpucluster:account_gpus_allocated, gpucluster:account_gpus_busy)."""
    deadline = time.monotonic() + timeout
    while True:
        series = _query(head, 'gpucluster:job_gpu_utilisation{jobid="%s"}' % jobid)
        busy = {i["metric"]["account"]: float(i["value"][1]) for i in _query(head, "gpucluster:account_gpus_busy")}
        if len(series) == 2 and busy.get("research") == 2 or time.monotonic() > deadline:
            break
        time.sleep(3)
    by_gpu = {}
    for item in series:
        gpu = item["metric"]["gpu"]
        dcgm = _query(head, 'DCGM_FI_DEV_GPU_UTIL{node="%s",gpu="%s"} @ %s' % (node, gpu, item["value"][0]))
        by_gpu[gpu] = (item["metric"], float(item["value"][1]), float(dcgm[0]["value"][1]) if dcgm else None)
    teams = {i["metric"]["account"]: (float(i["value"][1]), busy.get(i["metric"]["account"]))
             for i in _query(head, "gpucluster:account_gpus_allocated")}
    return by_gpu, teams


def _team_report_from_now(head, wait=12):
    """gpu-job usage --team --json of carol (in both teams) and of bob over the ``wait`` seconds from now, as its users
    run it."""
    since = head.check_output("date +%Y-%m-%dT%H:%M:%S")
    time.sleep(wait)
    reports = []
    for user in ("carol", "bob"):
        result = head.run("su - %s -c %s" % (user, shlex.quote("gpu-job usage --team --json --since %s" % since)))
        assert result.rc == 0, result.stdout + result.stderr
        reports.append(json.loads(result.stdout))
    return reports


def _inhibition_of_an_admin_drain(head, drained, in_service, timeout=120):
    """Once Alertmanager has ``drained``'s SlurmNodeDrainedByAdmin: a warning posted for each node, Alertmanager's
    status of each ({node: status}) and the nodes whose warning reached the test receiver; the warnings are resolved
    after."""
    deadline = time.monotonic() + timeout
    while not [a for a in alerting.alerts(head, "SlurmNodeDrainedByAdmin") if a["labels"].get("node") == drained]:
        assert time.monotonic() < deadline, alerting.alerts(head, "SlurmNodeDrainedByAdmin")
        time.sleep(3)
    since = time.time()
    name = "GpuclusterTestInhibition"
    warnings = [{"labels": {"alertname": name, "node": node, "severity": "warning"}} for node in (drained, in_service)]
    alerting.post_alerts(head, warnings)
    try:
        deadline = time.monotonic() + 30
        while True:
            arrived = {a["labels"]["node"] for a in alerting.received(head, since) if a["labels"]["alertname"] == name}
            if in_service in arrived or time.monotonic() > deadline:
                break
            time.sleep(1)
        by_node = {a["labels"]["node"]: a["status"] for a in alerting.alerts(head, name)}
    finally:
        ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        alerting.post_alerts(head, [dict(w, endsAt=ended) for w in warnings])
    return by_node, arrived
