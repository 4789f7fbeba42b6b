"""Fixtures of the shared test cluster (cluster-deb12, cluster-deb13): the cluster as its inventory describes it,
hosts, playbook runs, and the reset that gives every test module the same starting state.

The test modules run in the order of their names against one cluster converged once with playbooks/site.yml
(docs/testing.md). Each looks at the cluster as a user or operator would (from the controller) and runs the real
ansible-playbook where it needs another run. A module may change the cluster (drain a node, inject a fault, add
the spare node, submit jobs, make reservations); `reset` puts back the known state before and after every module:
no jobs, no reservations, no simulated faults, the simulated GPU services running, every compute node idle, the
spare node out of Slurm.

GPUCLUSTER_CLUSTER_TESTS (a blank-separated list of module names, with or without .py) runs only those modules:
scripts/cluster.sh test deb13 test_3_health_drain runs one module on a kept cluster.
A module that runs on one release only says so with `pytestmark = pytest.mark.release("debian13")`.
A fault module (issue 23: it stops containers and daemons, faults.py) says `FAULT_TEST = True` and runs after all others.
A module that needs the spare node as a third compute node says `SPARE_IN_SLURM = True`: the resets before and after
the module before it leave the spare in Slurm (the add-node module brings it in), and the module adds it itself
(fixture `spare_added`) when it runs alone.
"""

import glob
import json
import os
import re
import subprocess
import time

import pytest
import testinfra
import yaml

import cpu_account
import faults
import skip_policy
from bad_input import PLAIN_OUTPUT

SHARED = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(SHARED))
SITE = os.path.join(ROOT, "playbooks", "site.yml")
PLAYBOOKS = os.path.join(SHARED, "playbooks")
HARDWARE_GROUPS = ("gpu_a100", "gpu_h100")
# How long the reset waits for Slurm to settle (jobs gone, nodes idle) before it fails the module.
SETTLE_S = 120


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


class Scenario(object):
    """The molecule inventory of this cluster, its shared group_vars, and helpers to run playbooks on it."""

    def __init__(self):
        self.name = os.environ["MOLECULE_SCENARIO_NAME"]
        self.inventory_file = os.environ["MOLECULE_INVENTORY_FILE"]
        self.inventory_dir = os.path.dirname(self.inventory_file)
        inventory = _load(self.inventory_file)
        self.groups = {name: sorted((data or {}).get("hosts") or {}) for name, data in inventory.items() if name != "all"}
        self.instances = sorted(inventory["all"]["hosts"])
        self.group_vars = {os.path.basename(p)[:-4]: _load(p) for p in glob.glob(os.path.join(SHARED, "group_vars", "*.yml"))}
        self.host_vars = {os.path.basename(p)[:-4]: _load(p) for p in glob.glob(os.path.join(SHARED, "host_vars", "*.yml"))
                          if os.path.basename(p)[:-4] in self.instances}
        self.release = "debian12" if "debian12" in self.groups else "debian13"
        self.configless = bool(self.group_vars[self.release].get("slurm_configless"))
        self.cluster_name = self.group_vars[self.release]["slurm_cluster_name"]

    def only(self, group):
        hosts = self.groups.get(group, [])
        assert len(hosts) == 1, (group, hosts)
        return hosts[0]

    @property
    def controller(self):
        """The primary slurmctld: the first host of the group (a second one is the backup controller)."""
        assert self.controllers, "no slurm_controller host"
        return self.controllers[0]

    @property
    def controllers(self):
        """The controllers in inventory order (SlurmctldHost's order): the primary, then the backup if any."""
        inventory = _load(self.inventory_file)
        return list(((inventory.get("slurm_controller") or {}).get("hosts") or {}))

    @property
    def database(self):
        return self.only("slurm_database")

    @property
    def spare(self):
        return self.only("cluster_spare")

    @property
    def compute(self):
        return self.groups["slurm_compute"]

    @property
    def converge_faults(self):
        """{host: simulated faults} that prepare.yml gave a node from its host_vars (the faulty node of test_0)."""
        return {h: v["gpusim_faults"] for h, v in sorted(self.host_vars.items()) if v.get("gpusim_faults")}

    def skipped_roles(self, host):
        """The roles site.yml leaves out on a host (gpucluster_site_skip_roles: its host_vars, else its release's)."""
        default = self.group_vars[self.release].get("gpucluster_site_skip_roles")
        return set(self.host_vars.get(host, {}).get("gpucluster_site_skip_roles", default) or [])

    def node_vars(self, host):
        """The variables of a GPU host's hardware group (slurm_node_*, health_check_expected, gpusim_profile)."""
        merged = {}
        for group in HARDWARE_GROUPS:
            if host in self.groups.get(group, []):
                merged.update(self.group_vars[group])
        return merged

    def host(self, name):
        return testinfra.get_host("docker://%s" % name)

    def playbook(self, tmp_path, playbook=SITE, extra_inventory=None, limit=None, extra_vars=None, args=()):
        """Run a playbook on the cluster like an operator (site.yml unless another is named; a list of playbooks runs
        them one after the other in one ansible-playbook); return (rc, output)."""
        argv = ["ansible-playbook", "-i", self.inventory_dir]
        if extra_inventory:
            path = tmp_path / "extra-inventory.yml"
            path.write_text(yaml.safe_dump(extra_inventory))
            argv += ["-i", str(path)]
        if limit:
            argv += ["--limit", ",".join(limit)]
        if extra_vars:
            path = tmp_path / "extra-vars.json"
            path.write_text(json.dumps(extra_vars))
            argv += ["-e", "@%s" % path]
        playbooks = [playbook] if isinstance(playbook, str) else list(playbook)
        argv += list(args) + [path if os.path.isabs(path) else os.path.join(PLAYBOOKS, path) for path in playbooks]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              env=dict(os.environ, **PLAIN_OUTPUT))
        return proc.returncode, proc.stdout + proc.stderr

    # Backwards name of the Slurm tests: a full site run.
    def converge(self, tmp_path, extra_inventory=None, limit=None, extra_vars=None):
        return self.playbook(tmp_path, SITE, extra_inventory, limit, extra_vars)


def node_records(ctl, nodes):
    """`scontrol show node -o` as {node: {key: value}} (values may hold blanks only in Reason, which is last)."""
    out = ctl.check_output("scontrol show node -o %s" % ",".join(nodes))
    records = {}
    for line in out.splitlines():
        head, _sep, reason = line.partition(" Reason=")
        fields = dict(re.findall(r"(\w+)=(\S*)", head))
        fields["Reason"] = reason.strip()
        records[fields["NodeName"]] = fields
    return records


def expected_partitions(scenario, host):
    """The partitions of slurm_partitions that take a host (those naming one of its groups), sorted."""
    return sorted(part["name"] for part in scenario.group_vars["all"]["slurm_partitions"]
                  if any(host in scenario.groups.get(g, []) for g in part["groups"]))


def slurm_nodes(ctl):
    """The node names slurmctld knows (sinfo --Node lists a node once per partition)."""
    return sorted(set(ctl.check_output("sinfo --noheader --Node --format=%N").split()))


def slurmd_started(scenario, hosts):
    """ActiveEnterTimestamp of slurmd on each host (changes only when slurmd (re)starts)."""
    return {h: scenario.host(h).check_output("systemctl show -p ActiveEnterTimestamp --value slurmd") for h in hosts}


HEALTH_REPORT = "/var/lib/gpucluster-health/slurm-last.json"


def health_report(scenario, host):
    """The health check's report of slurmd's last run on a node. The wrapper writes it to a temporary file and renames
    it, so one read sees a whole report even while a run is in progress: a report that does not parse is a defect."""
    text = scenario.host(host).check_output("cat %s" % HEALTH_REPORT)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AssertionError("%s: %s does not parse (%s): %r" % (host, HEALTH_REPORT, exc, text[:200])) from exc


# -- simulated faults -------------------------------------------------------------------------------------------------

GPUSIM = "/opt/gpusim/bin/gpusim"
# The simulated units of NVSwitch nodes (tests/gpusim/install.yml): running in the known state.
GPUSIM_UNITS = ("nvidia-fabricmanager", "nvidia-persistenced", "nvidia-dcgm")
SERVICES_LOG = "/var/log/gpusim/services.log"
PROFILE = "/etc/gpusim/profile.json"
SET_FAULTS = r"""
import json, sys
path, faults = sys.argv[1], json.loads(sys.argv[2])
with open(path) as f:
    profile = json.load(f)
if profile.get("faults") != faults:
    profile["faults"] = faults
    with open(path, "w") as f:
        json.dump(profile, f, indent=2)
"""


def set_faults(scenario, host, faults):
    """Give a simulated node these faults (gpusim's profile, then `gpusim setup` for sysfs, kernel log, /dev)."""
    node = scenario.host(host)
    node.check_output("python3 -c %s %s %s" % (_quote(SET_FAULTS), PROFILE, _quote(json.dumps(faults))))
    node.check_output("%s setup --profile %s" % (GPUSIM, PROFILE))


def stopped_units(scenario, host):
    """The simulated units installed on a node that are not running."""
    node = scenario.host(host)
    return [u for u in GPUSIM_UNITS if node.file("/etc/systemd/system/%s.service" % u).exists
            and not node.service(u).is_running]


def faults_of(scenario, host):
    return json.loads(scenario.host(host).check_output("cat %s" % PROFILE)).get("faults") or []


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


# -- the known state --------------------------------------------------------------------------------------------------

def _wait(what, probe, timeout=SETTLE_S):
    deadline = time.monotonic() + timeout
    seen = probe()
    while not seen[0] and time.monotonic() < deadline:
        time.sleep(2)
        seen = probe()
    assert seen[0], "the cluster did not settle within %d s: %s: %s" % (timeout, what, seen[1])


# Left on the controller by the first reset: test_0_site.py then knows the state it sees is no longer the converge's.
RESET_MARK = "/var/lib/gpucluster-tests/reset"


def reset_since_converge(ctl):
    return ctl.file(RESET_MARK).exists


def spare_inventory(scenario):
    """The extra inventory that puts the spare node into the site's groups (the operator's edit before adding it)."""
    new = scenario.spare
    return {"all": {"children": {"gpu_nodes": {"hosts": {new: {}}}, "slurm_compute": {"hosts": {new: {}}}}}}


def reset_cluster(scenario, tmp_path, keep_spare=False):
    """Put the cluster back into its known state; return what had to be undone (for the log). With keep_spare the
    spare node, when it is in Slurm, stays there as a compute node like the others."""
    undone = ["%s was stopped" % name for name in faults.ensure_running(scenario)]
    ctl = scenario.host(scenario.controller)
    ctl.check_output("mkdir -p %s && touch %s" % (os.path.dirname(RESET_MARK), RESET_MARK))
    spare_in = keep_spare and scenario.spare in slurm_nodes(ctl)
    compute = sorted(scenario.compute + [scenario.spare]) if spare_in else scenario.compute
    healed = []
    for host in scenario.groups.get("gpu_nodes", []) + [scenario.spare]:
        if faults_of(scenario, host):
            undone.append("faults on %s" % host)
            set_faults(scenario, host, [])
            healed += [host] if host in compute else []
        stopped = stopped_units(scenario, host)
        if stopped:
            undone.append("%s stopped on %s" % (", ".join(stopped), host))
            scenario.host(host).check_output("systemctl start %s" % " ".join(stopped))
    if ctl.check_output("squeue --noheader --all --format=%i"):
        undone.append("jobs")
        ctl.check_output("scancel --quiet $(squeue --noheader --all --format=%i)")
    for name in ctl.check_output("scontrol show reservation -o | sed -n 's/^ReservationName=\\([^ ]*\\) .*/\\1/p'").split():
        undone.append("reservation %s" % name)
        ctl.check_output("scontrol delete reservationname=%s" % name)
    if scenario.spare in slurm_nodes(ctl) and not spare_in:
        undone.append("spare node %s in Slurm" % scenario.spare)
        scenario.host(scenario.spare).check_output("systemctl disable --now slurmd")
        rc, out = scenario.playbook(tmp_path, "slurm.yml")
        assert rc == 0, out
    for name, record in node_records(ctl, compute).items():
        state = record["State"]
        if "DRAIN" in state or "DOWN" in state:
            undone.append("%s %s (%s)" % (name, state, record["Reason"]))
            ctl.check_output("scontrol update nodename=%s state=resume" % name)

    def settled():
        jobs = ctl.check_output("squeue --noheader --all --format='%i %T'")
        states = {n: r["State"] for n, r in node_records(ctl, compute).items()}
        # slurmd's health check reports a cleared fault at its next run (slurm_health_check_interval) only
        reports = {h: health_report(scenario, h)["status"] for h in healed}
        return (not jobs and all(s == "IDLE" for s in states.values()) and slurm_nodes(ctl) == compute
                and all(r == "ok" for r in reports.values()),
                "jobs %r, nodes %r, slurm knows %r, health reports of the healed nodes %r"
                % (jobs, states, slurm_nodes(ctl), reports))
    _wait("no jobs, every compute node idle, the spare node %s, the healed nodes' health checks ok"
          % ("in Slurm" if spare_in else "out of Slurm"), settled)
    return undone


@pytest.fixture(scope="session")
def scenario():
    return Scenario()


@pytest.fixture(scope="session")
def ctl(scenario):
    return scenario.host(scenario.controller)


WRAPPER = "/usr/local/sbin/gpucluster-health-slurm"


@pytest.fixture(scope="module")
def wrapper_silenced(scenario):
    """slurmd's HealthCheckProgram replaced by one that does nothing, for a module whose faults the node-local health
    check would otherwise drain for (under the owner health) before the playbook under test sees them; the real one
    is put back at the end."""
    nodes = [scenario.host(h) for h in scenario.compute]
    for node in nodes:
        node.check_output("cp -p %s %s.silenced && printf '#!/bin/sh\\nexit 0\\n' > %s" % (WRAPPER, WRAPPER, WRAPPER))
    yield
    for node in nodes:
        node.check_output("mv -f %s.silenced %s" % (WRAPPER, WRAPPER))


def _cpu_path():
    """Where the time report finds each module's CPU (scripts/time-report.py), beside the scenario's JUnit file."""
    return os.path.join(os.environ.get("MOLECULE_PROJECT_DIRECTORY", ROOT), ".cache", "molecule-logs",
                        "%s.cpu.jsonl" % os.environ.get("MOLECULE_SCENARIO_NAME", "cluster"))


@pytest.fixture(scope="session")
def cpu_recorder(scenario):
    """The session's CPU record: the containers' CPU before verify, one line per module, the session's controller
    CPU at its end (cpu_account)."""
    recorder = cpu_account.Recorder(_cpu_path(), scenario.instances)
    recorder.start_session()
    yield recorder
    recorder.end_session()


@pytest.fixture(scope="module")
def module_cpu(request, cpu_recorder):
    """The module's own controller and node CPU, its reset before and after included (known_state asks for it
    first, so this wraps the reset)."""
    started = cpu_recorder.span()
    yield
    cpu_recorder.end(request.module.__name__ + ".py", started)


@pytest.fixture(scope="module", autouse=True)
def known_state(request, scenario, tmp_path_factory, module_cpu):
    """Every module starts from the known state and leaves it (a module's own finalizers run before this one's).
    The last module of a run leaves the reset to the next run's first module: molecule destroys the cluster next, and
    a kept cluster is reset before its next module anyway (putting the spare node back costs a Slurm play run).
    A module with CONVERGE_STATE = True (test_0_site.py) asserts the state the site run left: it starts without the
    reset on a cluster no reset has touched yet."""
    converge_state = getattr(request.module, "CONVERGE_STATE", False)
    if not converge_state or reset_since_converge(scenario.host(scenario.controller)):
        undone = reset_cluster(scenario, tmp_path_factory.mktemp("reset"), _keeps_spare(request.module))
        if undone:
            print("reset before %s undid: %s" % (request.module.__name__, ", ".join(undone)))
    yield
    if request.node.nodeid == _last_module(request.session):
        return
    undone = reset_cluster(scenario, tmp_path_factory.mktemp("reset"), _keeps_spare(_next_module(request)))
    if undone:
        print("reset after %s undid: %s" % (request.module.__name__, ", ".join(undone)))


def _keeps_spare(module):
    return bool(getattr(module, "SPARE_IN_SLURM", False))


def _next_module(request):
    """The module of the next test that is not skipped after this module's tests, or None."""
    seen = False
    for item in request.session.items:
        if item.parent.nodeid == request.node.nodeid:
            seen = True
        elif seen and not item.get_closest_marker("skip"):
            return item.module
    return None


@pytest.fixture(scope="module")
def spare_added(scenario, ctl, tmp_path_factory):
    """The spare node in Slurm as a compute node (added like an operator would, when the module before did not)."""
    if scenario.spare not in slurm_nodes(ctl):
        rc, out = scenario.playbook(tmp_path_factory.mktemp("add-spare"), os.path.join(ROOT, "playbooks", "add_node.yml"),
                                    spare_inventory(scenario), extra_vars={"add_nodes": scenario.spare})
        assert rc == 0, out
    return scenario.spare


def _last_module(session):
    """The node id of the module of the session's last test that is not skipped."""
    for item in reversed(session.items):
        if not item.get_closest_marker("skip"):
            return item.parent.nodeid
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "release(name): the module runs on that Debian release's cluster only")
    skip_policy.register(config)      # CI=true: a skip not in tests/allowed_skips.yml fails the run (issue 46)


def pytest_collection_modifyitems(config, items):
    # Fault modules (FAULT_TEST = True: they stop nodes and daemons) run after every other module, in name order.
    items[:] = sorted(items, key=lambda item: bool(getattr(item.module, "FAULT_TEST", False)))
    wanted = os.environ.get("GPUCLUSTER_CLUSTER_TESTS", "").split()
    if wanted:
        names = {w[:-3] if w.endswith(".py") else w for w in wanted}
        unknown = names - {item.module.__name__ for item in items}
        if unknown:
            raise pytest.UsageError("GPUCLUSTER_CLUSTER_TESTS names no test module: %s" % ", ".join(sorted(unknown)))
        selected = [item for item in items if item.module.__name__ in names]
        config.hook.pytest_deselected(items=[item for item in items if item not in selected])
        items[:] = selected
    release = "debian12" if "debian12" in _load(os.environ["MOLECULE_INVENTORY_FILE"]) else "debian13"
    for item in items:
        marker = item.get_closest_marker("release")
        if marker and release not in marker.args:
            item.add_marker(pytest.mark.skip(reason="runs on the %s cluster only (the same on both releases)"
                                             % " and ".join(marker.args)))


def pytest_terminal_summary(terminalreporter):
    """What each fault module injected and verified (faults.report), at the end of the run's output."""
    if faults.REPORTS:
        terminalreporter.section("faults injected and what was verified")
        for text in faults.REPORTS:
            terminalreporter.write_line(text)
