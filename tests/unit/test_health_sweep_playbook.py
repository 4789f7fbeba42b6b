"""playbooks/health_sweep.yml without a cluster: the nodes replay bundles of the GPU simulator on this machine
(health_sweep_from_dir, so the checker runs on the controller as it would on a node), a fake scontrol stands in
for Slurm on the controller (localhost), and an unreachable host stands for a node that is down.

- Bad input (an unknown level, a drain share outside 0-1, a report directory that cannot be written, ...) stops the
  sweep on every host in its first play, naming host, variable and value, before any node is checked: no checker
  run, no scontrol call, no report written.
- A sweep writes fleet.json, fleet.html and rma.csv with the faulty node's findings and a drift finding against a pin;
  an unreachable node is a finding, not a crash; the fast path (the checker's command) and the module path
  (gpucluster.ops.gpu_health) give the same fleet.json.
- With health_sweep_drain the faulty node is drained with the node-local wrapper's reason (its codes and targets);
  once healthy it is resumed; --check changes nothing and writes nothing.

The cluster test (molecule/cluster-shared/tests/test_5_health_sweep.py) runs the same sweep against real Slurm.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_slurm
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim
from fake_scontrol import FAKE_SCONTROL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "health_sweep.yml")
PROFILES = os.path.join(ROOT, "tests", "gpusim", "profiles")
NOW = "2026-12-01T06:00:00Z"
FAULTS = ["row_remap_pending:gpu=3", "ib_port_down:port=mlx5_2/1"]
EXPECTED = {"gpu_count": 8, "gpu_model": "NVIDIA A100-SXM4-80GB", "nvlinks_per_gpu": 12, "nvswitch": True,
            "ib_port_count": 8, "ib_rate_gbps": 200}
# Three A100 nodes in Slurm: gpu01 healthy, gpu02 faulty, gpu03 never reached (nothing listens on port 9).
PROBE_TASK = "Run the installed health checker"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """gpu01: a healthy A100 node; gpu02: the same with a pending row remap and an InfiniBand port down."""
    root = tmp_path_factory.mktemp("bundles")
    for host, faults in (("gpu01", []), ("gpu02", FAULTS)):
        argv = ["gpusim", "bundle", str(root / host), "--profile", os.path.join(PROFILES, "a100-sxm-8.json")]
        for fault in faults:
            argv += ["--fault", fault]
        assert gpusim.main(argv, env={"GPUSIM_NOW": NOW, "GPUSIM_HOSTNAME": host})[0] == 0
    return root


class Sweep(object):
    """An inventory of replayed nodes and a fake Slurm under tmp_path, and runs of the playbook against them."""

    def __init__(self, tmp_path, bundles, hosts=("gpu01", "gpu02", "gpu03"), controller=True):
        self.tmp = tmp_path
        self.state = tmp_path / "slurm.json"
        self.set_slurm({h: ("IDLE", "") for h in ("gpu01", "gpu02", "gpu03")})
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "scontrol").write_text(FAKE_SCONTROL % {"python": sys.executable})
        (bindir / "scontrol").chmod(0o755)
        self.env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="false",
                        ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
                        FAKE_SLURM_STATE=str(self.state), PATH="%s:%s" % (bindir, os.environ["PATH"]))
        nodes = {}
        for host in hosts:
            if host == "gpu03":
                nodes[host] = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",
                               "ansible_ssh_common_args": "-o ConnectTimeout=2"}
            else:
                nodes[host] = {"health_sweep_from_dir": str(bundles / host)}
        inventory = {"all": {"children": {
            "gpu_nodes": {"hosts": nodes, "children": {"gpu_a100": {"hosts": {h: {} for h in hosts}}},
                          "vars": {"health_check_expected": EXPECTED}},
            "slurm_controller": {"hosts": {"localhost": {
                "ansible_connection": "local", "ansible_python_interpreter": sys.executable}} if controller else {}}}}}
        self.inventory = tmp_path / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump(inventory))

    def set_slurm(self, nodes):
        self.state.write_text(json.dumps({n: {"state": s, "reason": r} for n, (s, r) in nodes.items()}))

    def slurm(self):
        return {n: (v["state"], v["reason"]) for n, v in json.loads(self.state.read_text()).items()}

    def scontrol_calls(self):
        log = self.tmp / "slurm.json.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def run(self, extra_vars=None, args=(), playbook=PLAYBOOK):
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(self.inventory)]
        if extra_vars:
            path = self.tmp / "extra-vars.json"
            path.write_text(json.dumps(extra_vars))
            argv += ["-e", "@%s" % path]
        proc = subprocess.run(argv + list(args) + [playbook], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=self.env, cwd=str(self.tmp), timeout=300, check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")

    def report(self, name):
        with open(str(self.tmp / "reports" / name / "fleet.json")) as handle:
            return json.load(handle)


def test_a_sweep_without_a_slurm_controller_writes_the_report(tmp_path, bundles):
    """No slurm_controller group (a fleet without Slurm, bench/fleet_sweep.py): the Slurm tasks are skipped, not
    failed on the empty delegate_to host (ansible-core 2.19 templates delegate_to before when)."""
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"), controller=False)
    rc, out = sweep.run({"health_sweep_report_dir": str(tmp_path / "reports" / "one")})
    assert rc == 0, out
    report = sweep.report("one")
    assert report["options"]["slurm"].startswith("no Slurm controller"), report["options"]
    assert sorted(report["nodes"]) == ["gpu01", "gpu02"]
    assert report["nodes"]["gpu01"]["slurm"] is None
    assert sweep.scontrol_calls() == []


# -- bad input ----------------------------------------------------------------------------------------------------

def _not_a_directory(sweep):
    (sweep.tmp / "a-file").write_text("")
    return str(sweep.tmp / "a-file" / "reports")


BAD = {
    "an unknown level": ({"health_sweep_level": "thorough"},
                         ["health_sweep_level", "thorough", "quick, standard, deep"]),
    "a drain share above 1": ({"health_sweep_max_out_of_service": 1.5}, ["health_sweep_max_out_of_service", "1.5"]),
    "a drain share below 0": ({"health_sweep_max_out_of_service": -0.1}, ["health_sweep_max_out_of_service", "-0.1"]),
    "a drain share that is no number": ({"health_sweep_max_out_of_service": "ten"},
                                        ["health_sweep_max_out_of_service", "ten"]),
    "a drain switch that is no boolean": ({"health_sweep_drain": "sometimes"}, ["health_sweep_drain", "sometimes"]),
    "a resume owner that is no owner": ({"health_sweep_resume_owners": ["health", "Bad Owner"]},
                                        ["health_sweep_resume_owners", "Bad Owner"]),
    "an unknown method": ({"health_sweep_method": "ssh"}, ["health_sweep_method", "ssh"]),
    "a pin the report does not know": ({"health_sweep_expected": {"bios_version": "1.2"}},
                                       ["health_sweep_expected", "bios_version"]),
    "groups given as a string": ({"health_sweep_groups": "gpu_a100"}, ["health_sweep_groups", "gpu_a100"]),
    "a bundle that is not a directory": ({"health_sweep_from_dir": "/nonexistent/bundle"},
                                         ["health_sweep_from_dir", "/nonexistent/bundle"]),
    "a fan-out switch that is no boolean": ({"health_sweep_fanout": "sometimes"}, ["health_sweep_fanout", "sometimes"]),
}


@pytest.mark.parametrize("case", sorted(BAD) + ["a report directory under a file"])
def test_bad_input_stops_the_sweep_naming_every_host_before_any_check(tmp_path, bundles, case):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    if case == "a report directory under a file":
        report_dir = _not_a_directory(sweep)
        extra, words = {"health_sweep_report_dir": report_dir}, ["health_sweep_report_dir", report_dir,
                                                                 "is not a directory"]
    else:
        extra, words = BAD[case]
    rc, out = sweep.run(dict(extra, health_sweep_drain=extra.get("health_sweep_drain", True)))
    assert rc != 0, out
    # one check for every host at once (a task per host costs more than a node's check): its one error names each
    # bad host with the variable and the value (the report directory is the run's: named once, with the first host)
    assert [line for line in out.splitlines() if line.startswith("fatal: [")], out
    hosts = ("gpu01",) if case == "a report directory under a file" else ("gpu01", "gpu02")
    for host in hosts:
        message = out[out.index("host %s:" % host):]
        for word in words:
            assert word in message[:600], (host, word, out)
    # nothing ran past the first play: no node checked, no Slurm call, no report
    assert PROBE_TASK not in out, out
    assert sweep.scontrol_calls() == []
    assert not (tmp_path / "reports").exists()


# -- the sweep ----------------------------------------------------------------------------------------------------

def _codes(node, severity=None):
    return sorted({f["code"] for f in node["findings"] if severity in (None, f["severity"])})


def test_a_sweep_reports_the_faulty_node_drift_and_an_unreachable_node(tmp_path, bundles):
    sweep = Sweep(tmp_path, bundles)
    rc, out = sweep.run({"health_sweep_report_dir": "reports/first",
                         "health_sweep_expected": {"ib_fw_version": "20.40.1000"}})
    assert rc == 0, out
    for name in ("fleet.json", "fleet.html", "rma.csv"):
        assert (tmp_path / "reports" / "first" / name).is_file(), name
    report = sweep.report("first")
    nodes = report["nodes"]
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03"]
    assert "GPU-ROW-REMAP-PENDING" in _codes(nodes["gpu02"], "error")
    assert "IB-PORT-DOWN" in _codes(nodes["gpu02"], "error")
    assert not _codes(nodes["gpu01"], "error"), nodes["gpu01"]
    # every GPU with serial and UUID, as the checker read them
    assert len(nodes["gpu01"]["gpus"]) == 8 and all(g["serial"] and g["uuid"] for g in nodes["gpu01"]["gpus"])
    # the pin wins: both reachable nodes have firmware 20.39.2048, the pin says 20.40.1000
    for host in ("gpu01", "gpu02"):
        drift = [f for f in nodes[host]["findings"] if f["code"] == "FLEET-DRIFT-IB-FW"]
        assert drift and "20.40.1000" in drift[0]["message"], nodes[host]["findings"]
    # a node that cannot be reached is a finding, never OK, and the play went on
    assert "FLEET-UNREACHABLE" in _codes(nodes["gpu03"], "unknown"), nodes["gpu03"]
    assert "gpu02" in out and "gpu03" in out
    # Slurm was read (once), nothing was changed there without health_sweep_drain
    assert nodes["gpu02"]["slurm"]["state"] == "IDLE"
    assert [c[0] for c in sweep.scontrol_calls()] == ["show"]


def _comparable(report):
    """fleet.json without what differs between two runs of the same sweep: times, the method, the source."""
    report = json.loads(json.dumps(report))
    for key in ("created_at", "diff", "previous"):
        report.pop(key, None)
    report["options"] = {k: v for k, v in report.get("options", {}).items() if k not in ("started", "method")}
    for node in report["nodes"].values():
        node.pop("source", None)
    return report


def test_the_fast_path_and_the_module_path_give_the_same_report(tmp_path, bundles):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    rc, out = sweep.run({"health_sweep_report_dir": "reports/cli"})
    assert rc == 0, out
    assert "gpu_health module" in out and "skipping: [gpu01]" in out.split("gpu_health module")[1][:300], out
    rc, out = sweep.run({"health_sweep_report_dir": "reports/module", "health_sweep_method": "module"})
    assert rc == 0, out
    assert "ok: [gpu01 -> localhost]" in out.split("gpu_health module")[1][:300], out
    assert _comparable(sweep.report("cli")) == _comparable(sweep.report("module"))
    assert sweep.report("module")["diff"]  # the second report is compared with the first


def test_drain_takes_the_faulty_node_out_with_the_wrappers_reason_and_check_mode_changes_nothing(tmp_path, bundles):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    drain = {"health_sweep_drain": True, "health_sweep_max_out_of_service": 0.5}

    rc, out = sweep.run(dict(drain, health_sweep_report_dir="reports/check"), args=["--check"])
    assert rc == 0, out
    assert sweep.slurm()["gpu02"] == ("IDLE", ""), out
    assert not [c for c in sweep.scontrol_calls() if c[0] == "update"]
    assert not (tmp_path / "reports").exists(), out

    rc, out = sweep.run(dict(drain, health_sweep_report_dir="reports/drain"))
    assert rc == 0, out
    findings = sweep.report("drain")["nodes"]["gpu02"]["findings"]
    node_findings = [f for f in findings if f["check"] != "fleet"]
    state, reason = sweep.slurm()["gpu02"]
    assert state == "IDLE+DRAIN" and reason == _health_slurm.drain_reason(node_findings), (reason, out)
    assert sweep.slurm()["gpu01"] == ("IDLE", "")

    # the node is healthy again: the next sweep resumes it
    sweep.tmp.joinpath("inventory.yml").write_text(sweep.inventory.read_text().replace(
        str(bundles / "gpu02"), str(bundles / "gpu01")))
    rc, out = sweep.run(dict(drain, health_sweep_report_dir="reports/healed"))
    assert rc == 0, out
    assert sweep.slurm()["gpu02"] == ("IDLE", ""), out


def test_the_circuit_breaker_refuses_drains_past_its_share(tmp_path, bundles):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    sweep.set_slurm({"gpu01": ("IDLE+DRAIN", "operator: cable swap"), "gpu02": ("IDLE", ""), "gpu03": ("IDLE", "")})
    rc, out = sweep.run({"health_sweep_drain": True, "health_sweep_max_out_of_service": 0.5,
                         "health_sweep_report_dir": "reports/breaker"})
    assert rc == 0, out
    # 3 nodes, at most 1 out: gpu01 (someone else's drain) is out already, so gpu02 is refused, not drained
    assert sweep.slurm()["gpu02"] == ("IDLE", ""), out
    assert sweep.slurm()["gpu01"] == ("IDLE+DRAIN", "operator: cable swap")
    shown = out.split("what the circuit breaker refused")[1]
    assert "gpu02" in shown.split("refused:")[1], out


RESUME = os.path.join(ROOT, "playbooks", "resume.yml")
NVLINK_REASON = "gpucluster-nvlink: the faults stayed after the restart: reboot the node; if it persists, RMA GPU 5"


def test_resume_brings_back_a_node_nvlink_left_drained_and_fails_on_one_still_faulty(tmp_path, bundles):
    """Issue 44: the way back for every drain of the collection. gpu01 (healthy now) was left drained by NVLink
    remediation, gpu02 (still faulty) by the monthly maintenance, gpu03 by an administrator (not swept)."""
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    maint = "gpucluster-maintenance: GPU-ROW-REMAP-PENDING gpu3"
    sweep.set_slurm({"gpu01": ("IDLE+DRAIN", NVLINK_REASON), "gpu02": ("IDLE+DRAIN", maint),
                     "gpu03": ("IDLE+DRAIN", "operator: cable swap")})
    rc, out = sweep.run({"health_sweep_report_dir": "reports/check"}, args=["--check"], playbook=RESUME)
    assert rc == 0 and "gpu01: resumed (drained by nvlink" in out, out
    assert sweep.slurm()["gpu01"] == ("IDLE+DRAIN", NVLINK_REASON)
    assert not [c for c in sweep.scontrol_calls() if c[0] == "update"]

    rc, out = sweep.run({"health_sweep_report_dir": "reports/resume"}, playbook=RESUME)
    assert rc != 0, out
    assert sweep.slurm()["gpu01"] == ("IDLE", ""), out
    assert sweep.slurm()["gpu02"] == ("IDLE+DRAIN", maint) and sweep.slurm()["gpu03"][1] == "operator: cable swap"
    assert "gpu01: resumed (drained by nvlink, its check passes now)" in out, out
    assert "gpu02: stays out (drained by maintenance): its check says error: " in out, out
    assert "1 node(s) drained by the collection stay out of service: gpu02" in out, out
    assert [c for c in sweep.scontrol_calls() if c[0] == "update"] == [["update", "nodename=gpu01", "state=resume"]]


def test_the_sweep_alone_resumes_only_the_health_checks_drains(tmp_path, bundles):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01",))
    sweep.set_slurm({"gpu01": ("IDLE+DRAIN", NVLINK_REASON), "gpu02": ("IDLE", ""), "gpu03": ("IDLE", "")})
    rc, out = sweep.run({"health_sweep_drain": True, "health_sweep_max_out_of_service": 0.5,
                         "health_sweep_report_dir": "reports/sweep"})
    assert rc == 0, out
    assert sweep.slurm()["gpu01"] == ("IDLE+DRAIN", NVLINK_REASON), out


def test_the_sweeps_fallbacks_are_the_health_check_roles_defaults():
    """Where the inventory does not say, the sweep looks for the checker where the health_check role puts it: it reads
    that role's defaults, and holds no copy of their values."""
    role = os.path.join(ROOT, "roles", "operations")
    with open(os.path.join(role, "vars", "main.yml")) as handle:
        variables = yaml.safe_load(handle)
    assert "role_path ~ '/../health_check/defaults/main.yml'" in variables["__health_sweep_role_defaults"]
    with open(os.path.join(ROOT, "roles", "health_check", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    for dirpath, _dirs, files in os.walk(role):
        for name in files:
            with open(os.path.join(dirpath, name)) as handle:
                text = handle.read()
            for key in ("health_check_install_dir", "health_check_config_file"):
                assert defaults[key] not in text, (name, key)


@pytest.mark.parametrize("method", ["auto", "module"])
def test_a_node_the_checker_cannot_check_is_unknown_with_the_reason(tmp_path, bundles, method):
    sweep = Sweep(tmp_path, bundles, hosts=("gpu01", "gpu02"))
    inventory = yaml.safe_load(sweep.inventory.read_text())
    inventory["all"]["children"]["gpu_nodes"]["hosts"]["gpu01"]["health_check_thresholds"] = {"no_such_limit": 1}
    sweep.inventory.write_text(yaml.safe_dump(inventory))
    rc, out = sweep.run({"health_sweep_report_dir": "reports/bad-config", "health_sweep_method": method})
    assert rc == 0, out
    node = sweep.report("bad-config")["nodes"]["gpu01"]
    assert node["status"] == "unknown", node
    assert "no_such_limit" in node["error"], node
    assert sweep.report("bad-config")["nodes"]["gpu02"]["status"] == "error"


def test_the_sweeps_checks_assume_the_operations_roles_defaults():
    """hostvars hold no role default: the preflight's checks fall back on the same values as the role."""
    from ansible_collections.gpucluster.ops.plugins.plugin_utils import _health_sweep
    with open(os.path.join(ROOT, "roles", "operations", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert _health_sweep.DEFAULTS == {key: defaults[key] for key in _health_sweep.DEFAULTS}
