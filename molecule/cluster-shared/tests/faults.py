"""Fault injection on the shared test cluster (the fault modules, test_12 and up, run last since they break things).

A "dead" node is its container stopped (`docker stop`: systemd and every daemon in it go, the network name stops
resolving) or killed (`docker kill`, a power loss: nothing stops in order); it comes back with `docker start`,
which boots systemd again. What a boot does not bring back on its own (the /proc masks molecule's docker driver
sets, unmounted by prepare.yml on the GPU nodes) `start` puts back as prepare.yml left it. `reset_cluster` calls
`ensure_running` first, so a module that failed with a node stopped does not take the next module down with it.

Each fault module says what it injected and what it verified with `report`: printed, and again in the run's summary.
"""

import subprocess
import time

# prepare.yml's "Unmount Docker's masks over /proc", for a GPU node that booted again.
_UNMASK_PROC = ("masks=$(awk '$5 ~ \"^/proc/\" {print $5}' /proc/self/mountinfo | sort -r); "
                "for mount in $masks; do umount --lazy \"$mount\"; done")
BOOT_S = 120


def _docker(*args, check=True):
    return subprocess.run(("docker",) + args, check=check, capture_output=True, text=True)


def running(container):
    out = _docker("inspect", "--format", "{{.State.Running}}", container, check=False)
    return out.returncode == 0 and out.stdout.strip() == "true"


def stop(container):
    """Kill the node: its container stopped (SIGTERM to systemd, SIGKILL after 2 s)."""
    _docker("stop", "--time", "2", container)
    assert not running(container), container


def kill(container):
    """Kill the node outright, as a power loss does: every process in its container SIGKILLed at once (docker kill).
    Nothing stops in order, so nothing on the node reacts on the way down (with `stop`, its units stop within the
    2 s and slurmd's health check can see the fabric manager gone and drain the node first)."""
    _docker("kill", container)
    assert not running(container), container


def start(scenario, container, timeout=BOOT_S):
    """Boot a stopped node and wait for its systemd to finish starting its units (running or degraded)."""
    if not running(container):
        _docker("start", container)
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = _docker("exec", container, "systemctl", "is-system-running", check=False)
        state = out.stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(2)
    assert state in ("running", "degraded"), "%s did not boot within %d s: systemd says %r" % (container, timeout, state)
    if container in scenario.groups.get("gpu_nodes", []) + scenario.groups.get("cluster_spare", []):
        _docker("exec", container, "bash", "-c", _UNMASK_PROC)
        # What else a boot loses on a simulated GPU node: gpusim's /dev/nvidia* (a container's /dev is new at each
        # start; `gpusim setup` makes them), then the simulated units (started at boot before that: the fabric
        # manager's GPUs stay "In Progress", GPU-FABRIC-INCOMPLETE, and the health check drains the node) and
        # slurmd where it is enabled (it exits at boot: "can't stat gres.conf file /dev/nvidia0").
        from conftest import GPUSIM, GPUSIM_UNITS, PROFILE
        _docker("exec", container, "bash", "-c",
                "%s setup --profile %s >/dev/null && systemctl restart %s && if systemctl -q is-enabled slurmd; "
                "then systemctl reset-failed slurmd; systemctl restart slurmd; fi"
                % (GPUSIM, PROFILE, " ".join(GPUSIM_UNITS)))
    if container in scenario.groups.get("slurm_controller", []):
        # a controller that boots takes control back from the backup (or stands by): wait until it answers
        wait_for("slurmctld on %s answering after its boot" % container,
                 lambda: (_docker("exec", container, "squeue", "-h", check=False).returncode == 0, "squeue fails"),
                 timeout)


def ensure_running(scenario):
    """Start every container of the cluster that is stopped; return their names."""
    stopped = [name for name in scenario.instances if not running(name)]
    for name in stopped:
        start(scenario, name)
    return stopped


# What the fault tests reported, printed again at the end of the run (conftest.pytest_terminal_summary), since pytest
# shows a passing test's own output nowhere.
REPORTS = []


def report(fault, injected, verified):
    """Print what a fault test injected and what it verified (the acceptance of issue 23)."""
    text = "FAULT %s\n  injected: %s\n  verified:\n%s" % (fault, injected, "\n".join("    - " + v for v in verified))
    REPORTS.append(text)
    print("\n" + text)


def wait_for(what, probe, timeout, interval=2):
    """Poll probe() -> (ok, detail) until ok; fail naming what and the last detail (a callable detail is called only
    then: while a controller is dead every client call costs seconds). Returns the seconds it took."""
    began = time.monotonic()
    ok, detail = probe()
    while not ok and time.monotonic() - began < timeout:
        time.sleep(interval)
        ok, detail = probe()
    assert ok, "%s: not within %d s: %s" % (what, timeout, detail() if callable(detail) else detail)
    return time.monotonic() - began


# -- jobs, as a user submits them -----------------------------------------------------------------------------------

def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def sbatch(host, user, args, wrap, output="/dev/null"):
    """Submit a batch job as `user` on `host` (a testinfra host); return its id."""
    command = "sbatch --parsable --chdir=/tmp -o %s %s --wrap=%s" % (output, args, _quote(wrap))
    out = host.run("su %s -c %s" % (user, _quote(command)))
    assert out.rc == 0 and out.stdout.strip().split(";")[0].isdigit(), (command, out.stdout, out.stderr)
    return out.stdout.strip().split(";")[0]


def job_record(host, job):
    """scontrol's record of a job (key: value), empty when the controller in control does not answer or forgot it."""
    out = host.run("scontrol -o show job %s" % job)
    if out.rc != 0:
        return {}
    return dict(field.split("=", 1) for field in out.stdout.split() if "=" in field)


def job_in(host, job, *states):
    """A wait_for probe: the job's record read once, ok when its JobState is one of states."""
    def probe():
        record = job_record(host, job)
        return record.get("JobState") in states, record
    return probe


def sacct_rows(host, jobs):
    """Every accounting record of the jobs (allocations only, requeued runs too): [(job id, state, node list)]."""
    out = host.run("sacct -n -X -P --duplicates -j %s -o JobID,State,NodeList" % ",".join(jobs))
    if out.rc != 0:
        return None
    return [tuple(line.split("|")) for line in out.stdout.splitlines() if line.strip()]
