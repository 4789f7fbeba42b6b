"""What every molecule scenario's bad-input test checks, in one place.

A bad-input case runs the real ansible-playbook against the scenario's containers with a mistake in the inventory or
variables (and changes that must not happen), then holds the run to the collection's rule: the play fails in the
role's argument_specs validation or its preflight tasks, on every host it runs on, names what is wrong, and leaves
every node as it was (files, packages, records and daemons are read before and after).

Molecule's testinfra step imports this through pytest.ini's pythonpath (tests/support); so do the unit tests that
run the same cases without a node (offline_preflight.py, tests/unit/roles/test_bad_input_preflight.py).
"""

import os
import re
import subprocess

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARG_SPEC_TASK = "Validating arguments against arg spec"
PLAIN_OUTPUT = {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}


COLLECTION_PREFIX = "gpucluster.ops."

# The changes every bad-input case of a role family also asks for, which must not happen: one list for the
# end-to-end cases in molecule and the offline ones in tests/unit/roles/test_bad_input_preflight.py.
MUST_NOT_CHANGE = {
    # node-baseline: a new package, kernel setting, hosts line and limit
    "node_baseline": {
        "node_baseline_extra_packages": ["sl"],
        "node_baseline_sysctl": {"vm.overcommit_ratio": 60},
        "node_baseline_hosts_extra": [{"address": "10.99.0.2", "names": ["never"]}],
        "node_baseline_limits_nofile_soft": 4096,
    },
    # fabric-tuning
    "infiniband": {"infiniband_extra_packages": ["sl"],
                   "infiniband_ipoib_interfaces": [{"name": "ib0", "subnet": "10.20.0.0/24"},
                                                   {"name": "ib7", "subnet": "10.27.0.0/24"}]},
    "node_tuning": {"node_tuning_kernel_cmdline_extra": ["nosmt"], "node_tuning_sysctl_extra": {"vm.swappiness": 5},
                    "node_tuning_oom_protected_services": ["ssh", "chrony"]},
    # monitoring: the head node's roles, the GPU node's roles
    "monitoring_head": {"monitoring_alert_gpu_power_limit_pct": 90, "monitoring_prometheus_retention": "30d",
                        "monitoring_node_exporter_extra_args": ["--collector.systemd"]},
    "monitoring_gpu": {"dcgm_exporter_collect_interval_ms": 10000, "dcgm_exporter_listen_address": "127.0.0.1",
                       "dcgm_major_version": 3},
    # the shared cluster's slurm: a new slurm.conf key, a cgroup.conf setting
    "slurm": {"slurm_conf_extra": {"MaxJobCount": 20000}, "slurm_cgroup_conf": {"ConstrainCores": False}},
}


def task_names(path):
    """Names of the tasks of a task file, those in blocks and rescues, in the files it imports or includes, and in the
    task files of this collection's roles it includes or imports with ``tasks_from`` (the shared secrets check of
    roles/_common is part of the preflight that includes it)."""
    with open(path) as handle:
        tasks = yaml.safe_load(handle) or []
    names = set()
    stack = list(tasks)
    while stack:
        task = stack.pop()
        names.add(task.get("name"))
        for key in ("block", "rescue", "always"):
            stack.extend(task.get(key) or [])
        for key in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"):
            if isinstance(task.get(key), str):
                names |= task_names(os.path.join(os.path.dirname(path), task[key]))
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            role = task.get(key) or {}
            name = str(role.get("name") or "")
            if name.startswith(COLLECTION_PREFIX) and role.get("tasks_from"):
                tasks_from = role["tasks_from"]
                tasks_from += "" if tasks_from.endswith((".yml", ".yaml")) else ".yml"
                names |= task_names(os.path.join(ROOT, "roles", name[len(COLLECTION_PREFIX):], "tasks", tasks_from))
    return names


def preflight_task_names(role):
    """The task names of a role's tasks/preflight.yml."""
    return task_names(os.path.join(ROOT, "roles", role, "tasks", "preflight.yml"))


def _task_results(out, starts):
    """{task: [hosts]} of the result lines beginning with one of ``starts`` (``fatal:``, ``changed:``), read from
    ansible-playbook's default output (a handler counts as a task)."""
    current, found = None, {}
    for line in out.splitlines():
        task = re.match(r"(?:TASK|RUNNING HANDLER) \[(?:[\w.]+ : )?(.+?)\] \**$", line)
        if task:
            current = task.group(1)
        elif line.startswith(starts) and current:
            host = re.match(r"^\w+: \[([^\]]+)\]", line)
            found.setdefault(current, []).append(host.group(1) if host else "?")
    return found


def failed_tasks(out):
    """Names of the tasks that failed on some host, read from ansible-playbook's default output."""
    return set(_task_results(out, ("fatal:", "failed:")))


def changed_tasks(out):
    """{task: [hosts]} of the tasks a run reported changed, read from ansible-playbook's default output."""
    return _task_results(out, ("changed:",))


def inventory_hosts():
    """The scenario's instances, from the inventory molecule wrote."""
    with open(os.environ["MOLECULE_INVENTORY_FILE"]) as handle:
        return sorted(yaml.safe_load(handle)["all"]["hosts"])


def docker_hosts(hosts, hostvars=None):
    """An inventory's hosts section for these containers, each with the same extra host variables."""
    return {h: dict(hostvars or {}, ansible_connection="community.docker.docker",
                    ansible_python_interpreter="/usr/bin/python3") for h in hosts}


def snapshot(instance, paths, also=""):
    """The checksum of each path (a shell glob is fine; 'absent PATH' for one that is not there), then the output
    of the shell command `also` (packages, records, start times), read inside the container."""
    script = "for f in %s; do if [ -e \"$f\" ]; then sha256sum \"$f\"; else echo absent \"$f\"; fi; done; %s" % (
        " ".join(paths), also or "true")
    return subprocess.run(["docker", "exec", instance, "sh", "-c", script],
                          capture_output=True, text=True, check=True).stdout


def start_playbook(inventory, playbook, extra_vars_file=None, limit=None):
    """Start ansible-playbook with plain output (stderr into stdout); returns the process."""
    command = ["ansible-playbook", "-i", str(inventory), str(playbook)]
    if extra_vars_file:
        command += ["-e", "@%s" % extra_vars_file]
    if limit:
        command += ["--limit", limit]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, **PLAIN_OUTPUT))


def finish(proc):
    """Wait for a process of start_playbook; returns (exit code, output)."""
    out = proc.communicate()[0]
    return proc.returncode, out


def run_playbook(inventory, playbook, extra_vars_file=None, limit=None):
    """Run ansible-playbook with plain output; returns (exit code, stdout and stderr together)."""
    return finish(start_playbook(inventory, playbook, extra_vars_file, limit))


def recap(out):
    """{host: {counter: number}} from the PLAY RECAP of ansible-playbook's output."""
    counters = {}
    for line in out.splitlines():
        found = re.match(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", line)
        if found:
            counters[found.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(2))}
    return counters


def started_tasks(out):
    """Names of the tasks ansible-playbook started, in order, read from its default output."""
    return [m.group(1) for m in re.finditer(r"^TASK \[(?:[\w.]+ : )?(.+?)\] \**$", out, re.MULTILINE)]


def assert_refused_in_preflight(case, rc, out, roles, expect, run_hosts):
    """The run failed (rc 2) in argument_specs validation or the preflight of `roles`, on every host of its recap
    and with no change there, and `run_hosts` are all in that recap; its output (whitespace folded, YAML's doubled
    quotes undone) says every text of `expect`. What a run's output can show: the nodes are the caller's to read."""
    assert rc == 2, "case %s: expected failed hosts (rc 2), got rc %d\n%s" % (case, rc, out)
    flat = " ".join(out.split()).replace("''", "'")   # YAML doubles a quote inside a quoted message
    for text in expect:
        assert text in flat, "case %s: the output does not say %r\n%s" % (case, text, out)
    failed = failed_tasks(out)
    allowed = set().union(*(preflight_task_names(role) for role in roles))
    outside = {t for t in failed if t not in allowed and not t.startswith(ARG_SPEC_TASK)}
    assert failed and not outside, "case %s failed outside preflight: %s\n%s" % (case, outside, out)
    counters = recap(out)
    for host in run_hosts:
        assert host in counters, "case %s: %s is not in the play recap\n%s" % (case, host, out)
    for host, counter in counters.items():
        assert counter.get("changed") == 0 and counter.get("failed") == 1, (case, host, counter)


def assert_refused_before_change(case, rc, out, roles, expect, before, after, run_hosts=None):
    """The run failed (rc 2) in argument_specs validation or the preflight of `roles`, on every host of its recap
    and with no change there, and `run_hosts` (default: the hosts of `before`) are all in that recap; its output
    (whitespace folded, YAML's doubled quotes undone) says every text of `expect`; and each host's snapshot `after`
    the run is the one from `before` it (hosts outside the run included: nothing may reach them either)."""
    assert_refused_in_preflight(case, rc, out, roles, expect, list(before) if run_hosts is None else run_hosts)
    for host in before:
        assert before[host] == after[host], "case %s changed %s:\nbefore:\n%s\nafter:\n%s" % (
            case, host, before[host], after[host])
