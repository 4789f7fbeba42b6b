"""Where a test module's CPU goes, for the time report (scripts/time-report.py): the controller side (this pytest
process and every process it waited for: ansible-playbook and its workers, the docker client of testinfra and of
Ansible's docker connection) and the nodes' side (the CPU of the scenario's containers, read from their cgroups).
A command that tests/support/bin/docker starts in a container is both: a child of the controller's processes, in
the container's cgroups.

The machine is shared by the two scenarios that run at once and by the checks beside them, so its wall time and
its busy time say little about one module; these two figures belong to the module alone. A container that stopped
or restarted during a module (the fault modules stop nodes) starts its cgroup's counter again, so the nodes' figure
of that module is unknown (None), never a guess.
"""

import json
import os
import resource
import subprocess
import time

# cgroup v1 (cpuacct, nanoseconds) and v2 (cpu.stat usage_usec, microseconds) paths of a Docker container.
CGROUP_V1 = "/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"
CGROUP_V2 = "/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat"


def controller_cpu_s():
    """User and system CPU seconds of this process and of the children it waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def container_ids(names):
    """{name: full container id} of the running containers among names (docker inspect; those it cannot find are
    left out)."""
    ids = {}
    for name in names:
        proc = subprocess.run(["docker", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True,
                              check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            ids[name] = proc.stdout.strip()
    return ids


def container_cpu_s(container_id):
    """CPU seconds the container has used since it started, or None when its cgroup cannot be read."""
    try:
        with open(CGROUP_V1.format(id=container_id)) as handle:
            return int(handle.read().strip()) / 1e9
    except (OSError, ValueError):
        pass
    try:
        with open(CGROUP_V2.format(id=container_id)) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) == 2 and fields[0] == "usage_usec":
                    return int(fields[1]) / 1e6
    except (OSError, ValueError):
        pass
    return None


def nodes_cpu_s(ids):
    """{name: CPU seconds or None} of every container."""
    return {name: container_cpu_s(cid) for name, cid in ids.items()}


def nodes_delta(before, after):
    """The containers' CPU between two readings, or None when a container could not be read at either end or its
    counter went back (it was stopped or restarted in between)."""
    total = 0.0
    for name, start in before.items():
        end = after.get(name)
        if start is None or end is None or end < start:
            return None
        total += end - start
    return total


class Recorder:
    """Appends one JSON line per measured span to path: {"module", "wall_s", "controller_cpu_s", "nodes_cpu_s"}.
    The first line of a session ({"session": "start", ...}) gives the containers' CPU before it (every stage of the
    scenario up to verify)."""

    def __init__(self, path, names):
        self.path = path
        self.ids = container_ids(names)
        self.missing = sorted(set(names) - set(self.ids))

    def start_session(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        readings = nodes_cpu_s(self.ids)
        known = None if self.missing or None in readings.values() else sum(readings.values())
        with open(self.path, "w") as handle:
            handle.write(json.dumps({"session": "start", "nodes_cpu_s": None if known is None else round(known, 1),
                                     "controller_cpu_s": round(controller_cpu_s(), 1)}) + "\n")

    def end_session(self):
        """The last line: this process's controller CPU at the end (the whole verify stage, collection included)."""
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"session": "end", "controller_cpu_s": round(controller_cpu_s(), 1)}) + "\n")

    def span(self):
        """(wall, controller CPU, nodes' readings) now, for end()."""
        return time.monotonic(), controller_cpu_s(), nodes_cpu_s(self.ids)

    def end(self, module, started):
        wall0, ctl0, nodes0 = started
        wall1, ctl1, nodes1 = self.span()
        nodes = None if self.missing else nodes_delta(nodes0, nodes1)
        record = {"module": module, "wall_s": round(wall1 - wall0, 1), "controller_cpu_s": round(ctl1 - ctl0, 1),
                  "nodes_cpu_s": None if nodes is None else round(nodes, 1)}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return record
