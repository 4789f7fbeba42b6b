"""What `docker exec CONTAINER ...` does, without the daemon: the command line that runs a process in a running
container's namespaces, cgroups, capabilities, limits, environment and working directory, as runc's exec would.

tests/support/bin/docker (put first on PATH by scripts/molecule.sh and scripts/cluster.sh when they run as root)
runs the plain forms of `docker exec` with it, which is every command Ansible's docker connection, testinfra's
docker backend and the tests send to the test containers; anything else goes to the real docker. A `docker exec`
costs this 2-core machine about 50 ms of CPU (the CLI, dockerd, containerd, the shim and runc; 100 of them: 5.0 s
busy), and a molecule run sends tens of thousands; started this way, about 9 ms (bash, nsenter, prlimit, setpriv, env).

What the process gets, each read from the container's own records, so that it is the process `docker exec` starts:

- the namespaces of the container's first process (nsenter -t PID, every one the OCI spec lists), root included;
- the cgroups `docker exec` puts it in: the container's own cgroup (the spec's cgroupsPath) in every hierarchy where
  the container's first process is under it (so the devices cgroup applies, and its CPU is the container's);
- the spec's capabilities (bounding, and with them permitted and effective: root's are its bounding set) and its
  supplementary groups, with setpriv inside the container;
- the spec's rlimits, else the limits of the container's parent process (containerd's shim), which runc's exec
  inherits, with prlimit;
- the spec's environment, HOME=/root as runc adds it, its working directory (env -i -C) and umask (runc's 0022 when
  the spec has none).

A container whose spec asks for what this does not reproduce (a user namespace, an AppArmor profile, an SELinux
label, a seccomp filter, no_new_privs, a user other than root, a terminal) is not resolved: the shim hands the
command to the real docker. So is a container that is not running (docker prints its own error).

    container_exec.py NAME   writes the resolved command line to the cache (GPUCLUSTER_CTEXEC_CACHE, default
                             /run/gpucluster-ctexec/NAME: "pid starttime umask", the cgroup.procs files, a bash
                             array);
                             exit 0, or 1 when the container is not resolved (the reason on stderr)
"""

import glob
import json
import os
import shlex
import sys

DOCKER_ROOT = os.environ.get("GPUCLUSTER_DOCKER_ROOT", "/var/lib/docker")
CACHE = os.environ.get("GPUCLUSTER_CTEXEC_CACHE", "/run/gpucluster-ctexec")
# Where Docker's containerd keeps each running container's OCI spec (the first for dockerd's own containerd, the
# second for a system containerd).
SPECS = ("/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/%s/config.json",
         "/run/containerd/io.containerd.runtime.v2.task/moby/%s/config.json")
NSENTER_FLAGS = {"mount": "-m", "uts": "-u", "ipc": "-i", "network": "-n", "pid": "-p", "cgroup": "-C"}
# prlimit's option for each line of /proc/PID/limits.
LIMITS = {"Max cpu time": "cpu", "Max file size": "fsize", "Max data size": "data", "Max stack size": "stack",
          "Max core file size": "core", "Max resident set": "rss", "Max processes": "nproc",
          "Max open files": "nofile", "Max locked memory": "memlock", "Max address space": "as",
          "Max file locks": "locks", "Max pending signals": "sigpending", "Max msgqueue size": "msgqueue",
          "Max nice priority": "nice", "Max realtime priority": "rtprio", "Max realtime timeout": "rttime"}
RLIMIT_NAMES = {"RLIMIT_" + name.upper(): name for name in LIMITS.values()}


class Unresolved(Exception):
    """The container cannot be entered as docker exec would enter it: the shim uses the real docker."""


def _json(path):
    with open(path) as handle:
        return json.load(handle)


def find_container(name):
    """(id, pid of its first process) of the running container called `name` (or whose id starts with it)."""
    for path in glob.glob(os.path.join(DOCKER_ROOT, "containers", "*", "config.v2.json")):
        try:
            record = _json(path)
        except (OSError, ValueError):
            continue
        if record.get("Name") == "/" + name or (len(name) >= 12 and record.get("ID", "").startswith(name)):
            state = record.get("State") or {}
            if not state.get("Running") or state.get("Paused") or not state.get("Pid"):
                raise Unresolved("%s is not running" % name)
            return record["ID"], int(state["Pid"])
    raise Unresolved("no container %s under %s" % (name, DOCKER_ROOT))


def start_time(pid):
    """The kernel's start time of `pid` (field 22 of /proc/PID/stat): with the pid, it names one process."""
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().rsplit(")", 1)[1].split()[19]


def cgroup_files(pid, cgroups_path, mountinfo="/proc/self/mountinfo"):
    """The cgroup.procs files of `cgroups_path` in every hierarchy where `pid` is at or under it."""
    mounts = []
    with open(mountinfo) as handle:
        for line in handle:
            before, after = line.split(" - ", 1)
            fstype, _source, options = after.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                mounts.append((fstype, before.split()[4], set(options.split(","))))
    files = []
    with open("/proc/%d/cgroup" % pid) as handle:
        for line in handle:
            _hid, controllers, path = line.rstrip("\n").split(":", 2)
            if path != cgroups_path and not path.startswith(cgroups_path.rstrip("/") + "/"):
                continue
            wanted = set(filter(None, controllers.split(",")))
            where = [point for fstype, point, options in mounts
                     if (fstype == "cgroup2" if not wanted else fstype == "cgroup" and wanted <= options)]
            if not where:
                continue            # not mounted here: runc could not have put the process in it either
            if len(where) > 1:
                raise Unresolved("hierarchy %r of pid %d: %d mounts" % (controllers, pid, len(where)))
            procs = os.path.join(where[0] + cgroups_path, "cgroup.procs")
            if not os.path.exists(procs):
                raise Unresolved("no %s" % procs)
            files.append(procs)
    if not files:
        raise Unresolved("pid %d is in no hierarchy under %s" % (pid, cgroups_path))
    return files


def _limit_value(text):
    return "unlimited" if text == "unlimited" else text


def limits(spec_rlimits, parent_pid):
    """prlimit's options: the spec's rlimits where it has any, else the container's parent process's limits."""
    if spec_rlimits:
        options = []
        for rlimit in spec_rlimits:
            name = RLIMIT_NAMES.get(rlimit["type"])
            if not name:
                raise Unresolved("rlimit %s" % rlimit["type"])
            options.append("--%s=%s:%s" % (name, rlimit["soft"], rlimit["hard"]))
        return options
    options = []
    with open("/proc/%d/limits" % parent_pid) as handle:
        for line in handle.readlines()[1:]:
            label = next((key for key in LIMITS if line.startswith(key)), None)
            if label is None:
                raise Unresolved("limit line %r" % line)
            soft, hard = line[len(label):].split()[:2]
            options.append("--%s=%s:%s" % (LIMITS[label], _limit_value(soft), _limit_value(hard)))
    return options


def resolve(name):
    """(pid, its start time, umask, cgroup.procs files, the command prefix) for `docker exec name ...`."""
    cid, pid = find_container(name)
    spec_path = next((path % cid for path in SPECS if os.path.exists(path % cid)), None)
    if spec_path is None:
        raise Unresolved("no OCI spec for %s" % name)
    spec = _json(spec_path)
    process, linux = spec["process"], spec.get("linux") or {}
    types = [ns["type"] for ns in linux.get("namespaces") or []]
    refused = {"user namespace": "user" in types, "terminal": process.get("terminal"),
               "AppArmor profile": process.get("apparmorProfile") not in (None, "", "unconfined"),
               "SELinux label": process.get("selinuxLabel"), "seccomp filter": linux.get("seccomp"),
               "no_new_privs": process.get("noNewPrivileges"),
               "user other than root": (process.get("user") or {}).get("uid", 0) != 0
               or (process.get("user") or {}).get("gid", 0) != 0,
               "namespace type": [t for t in types if t not in NSENTER_FLAGS and t != "user"]}
    reasons = [what for what, found in refused.items() if found]
    if reasons:
        raise Unresolved("%s: %s" % (name, ", ".join(reasons)))
    caps = process.get("capabilities") or {}
    bounding = caps.get("bounding") or []
    if (set(caps.get("permitted") or []) != set(bounding) or set(caps.get("effective") or []) != set(bounding)
            or caps.get("inheritable") or caps.get("ambient")):
        raise Unresolved("%s: capability sets other than root's" % name)
    with open("/proc/%d/stat" % pid) as handle:
        parent = int(handle.read().rsplit(")", 1)[1].split()[1])
    env = list(process.get("env") or [])
    if not any(item.startswith("HOME=") for item in env):
        env.append("HOME=/root")
    groups = ",".join(str(g) for g in (process.get("user") or {}).get("additionalGids") or [0])
    prefix = (["/usr/bin/nsenter", "-t", str(pid), "-r"] + [NSENTER_FLAGS[t] for t in types] + ["--"]
              + ["/usr/bin/prlimit"] + limits(process.get("rlimits"), parent) + ["--"]
              + ["/usr/bin/setpriv", "--groups=" + groups, "--inh-caps=-all",
                 "--bounding-set=-all" + "".join(",+" + c[4:].lower() for c in bounding), "--"]
              + ["/usr/bin/env", "-i", "-C", process.get("cwd") or "/"] + env)
    umask = "%04o" % (process.get("user") or {}).get("umask", 0o022)
    return pid, start_time(pid), umask, cgroup_files(pid, linux.get("cgroupsPath") or ""), prefix


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 64
    name = argv[1]
    try:
        pid, started, umask, files, prefix = resolve(name)
    except (Unresolved, OSError, ValueError, KeyError) as error:
        sys.stderr.write("container_exec: %s\n" % error)
        return 1
    os.makedirs(CACHE, mode=0o700, exist_ok=True)
    temporary = os.path.join(CACHE, ".%s.%d" % (name, os.getpid()))
    with open(temporary, "w") as handle:
        quoted = " ".join(shlex.quote(a) for a in prefix)
        handle.write("%d %s %s\n%s\n%s\n" % (pid, started, umask, " ".join(files), quoted))
    os.replace(temporary, os.path.join(CACHE, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
