# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: playbooks/health_sweep.yml over real ssh to N simulated GPU nodes: its fast path, its per-host tasks and
its module path.

Every simulated node is one OpenSSH sshd in namespaces of its own (network, mount, UTS, PID), with its own address
on a bridge in a network namespace the bench creates (10.213.0.0/16, nothing routed anywhere else: the controller
runs in that namespace too, so no packet can reach any other address). Each node's /etc, /opt and /var are
overlays with a per-node upper layer (its own health.json, checker state, gpusim run state), /usr/local a read-only
overlay holding the checker as the health_check role installs it (bin/gpucluster-health with `#!python3 -IS` and the
module_utils it imports, byte-compiled), and /opt/gpusim the GPU simulator of tests/gpusim set up for the node's
profile and faults; the node's host name (its UTS namespace) gives its GPUs their UUIDs and serials.

For each N (--sizes) and each ansible.cfg (--config, repeatable), four playbooks run one after the other:
- the floor: one `ansible.builtin.raw: /bin/true` task on the same N nodes (Ansible's and ssh's own cost);
- the fast path: health_sweep.yml as an operator runs it (gpucluster.ops.health_fanout: one task on the controller
  runs the installed checker over one ssh session per node, forks at a time);
- the tasks path: the same with -e health_sweep_fanout=false (each node's own tasks: one raw call of the checker);
- the module path: the same with -e health_sweep_method=module (the gpu_health module on every node).
and it prints, per run: wall time; controller CPU per node (user+system of the ansible-playbook process tree,
ssh clients and ControlPersist masters included: the playbook runs under a child subreaper that ends the
masters and reaps everything before reading getrusage(RUSAGE_CHILDREN)); node CPU per node (the sshd of each
node is PID 1 of its PID namespace and reaps every process of the node, so utime+stime+cutime+cstime of it in
/proc, after the sessions ended, minus before, is the whole node side); processes started per node (the PID
namespace's ns_last_pid after minus before, less the read itself: PIDs the kernel handed out, threads included);
the ratios to the floor of the same run and the targets beside (400 nodes <= 60 s wall, <= 0.1 s controller
CPU per node including ssh). It then compares the fast and tasks paths' fleet.json with the module path's (without the
fields that say when or how the record was made) and prints the result. Figures are printed, never judged: a
loaded machine shows in the floor.

Needs root, iproute2, util-linux (unshare, nsenter), overlayfs and OpenSSH's sshd: the machine's, else Debian's
openssh-server package unpacked into .cache/fleet-sweep (apt-get download; nothing is installed). Everything it
makes lives in its own namespaces and a tmpfs, and goes when it exits (Ctrl-C included).

    .venv/bin/python bench/fleet_sweep.py [--sizes 50,200,400] [--config ansible.cfg --config ansible-fleet.cfg]
        [--paths floor,fast,tasks,module] [--json results.json]
"""

import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "fleet-sweep")
GPUSIM = os.path.join(ROOT, "tests", "gpusim", "gpusim.py")
PROFILES = os.path.join(ROOT, "tests", "gpusim", "profiles")
PROFILE = "h100-sxm-8"
NET_PREFIX = "10.213"
CONTROLLER_ADDRESS = NET_PREFIX + ".255.254"
TARGET_WALL_S = 60.0
TARGET_NODES = 400
TARGET_CONTROLLER_CPU_S = 0.1
PATHS = ("floor", "fast", "tasks", "module")
INSTALL_DIR = "/usr/local/lib/gpucluster-health"
EXPECTED = {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
            "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}
SOURCES = {"nvidia_smi": "/opt/gpusim/bin/nvidia-smi", "ibstat": "/opt/gpusim/bin/ibstat",
           "sys_class_infiniband": "/opt/gpusim/sys/class/infiniband", "kernel_log": "file:/var/log/gpusim/kern.log",
           "fabricmanager_state": "file:/opt/gpusim/fabricmanager.state",
           "fabricmanager_version": "/opt/gpusim/bin/nv-fabricmanager", "dcgmi": "/opt/gpusim/bin/dcgmi",
           "all_reduce_perf": "/opt/gpusim/bin/all_reduce_perf"}
# A few faulty nodes, so that the report has errors, warnings and RMA rows to compare: (every n-th node, faults).
FAULTS = ((37, ({"name": "fallen_off_bus", "gpu": 2},)), (53, ({"name": "gpu_hot", "gpu": 3},)),
          (71, ({"name": "ib_port_down", "port": "mlx5_2/1"},)))
# What says when or by which path a record was made, not what the node's health is (docs/health-sweep.md: "for
# comparing two reports, drop created_at and each node's checked_at"; source is cli or module by design).
REPORT_VOLATILE_TOP = ("created_at", "options", "diff")
REPORT_VOLATILE_NODE = ("checked_at", "source")
TOOLS = ("nvidia-smi", "ibstat", "ibstatus", "dcgmi", "all_reduce_perf", "nv-fabricmanager")

# The node's start: wait for the bench to give it its network, then its own /etc, /opt, /var and the read-only
# /usr/local with the checker, then sshd as PID 1 of the node's PID namespace.
NODE_SCRIPT = r"""
set -e
read go
hostname "$1"
ip link set lo up
ip addr add "$2/16" dev eth0
ip link set eth0 up
mount -t overlay node-etc -o "lowerdir=$5/etc:/etc,upperdir=$3/etc.u,workdir=$3/etc.w" /etc
mount -t overlay node-opt -o "lowerdir=$4/opt:/opt,upperdir=$3/opt.u,workdir=$3/opt.w" /opt
mount -t overlay node-var -o "lowerdir=$4/var:/var,upperdir=$3/var.u,workdir=$3/var.w" /var
mount -t overlay node-root -o "lowerdir=$5/root,upperdir=$3/root.u,workdir=$3/root.w" /root
mount -t overlay node-usr-local -o "lowerdir=$5/usr-local:/usr/local" /usr/local
exec "$6" -D -e -f "$7"
"""

# Runs the controller's command as a child subreaper: the ssh ControlPersist masters that ansible's ssh clients
# leave behind are re-parented here, ended when the playbook has exited, and reaped, so that their CPU is counted.
CONTROLLER_WRAPPER = r"""
import ctypes, json, os, resource, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
start = time.perf_counter()
with open(sys.argv[1], "wb") as log:
    rc = subprocess.call(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT)
wall = time.perf_counter() - start
def children():
    found = []
    for task in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % task) as handle:
            found += [int(p) for p in handle.read().split()]
    return found
left = children()
for pid in left:
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "masters": len(left)}))
"""


# ---------------------------------------------------------------------------------------------------------------
# Pure logic (tests/unit/test_fleet_sweep_bench.py)

def parse_sizes(text):
    """"50,200,400" -> [50, 200, 400] (sorted, unique); each from 1 to 65000 (the address plan's room)."""
    sizes = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= 65000:
            raise ValueError("a size must be a whole number of nodes from 1 to 65000, got %r" % part)
        sizes.append(int(part))
    if not sizes:
        raise ValueError("no sizes in %r" % text)
    return sorted(set(sizes))


def parse_paths(text):
    """"floor,fast,module" -> the paths in the bench's order; unknown names are an error."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    bad = [n for n in names if n not in PATHS]
    if bad or not names:
        raise ValueError("paths are some of %s, got %r" % (", ".join(PATHS), text))
    return [p for p in PATHS if p in names]


def node_name(index):
    """Index 0 -> gpu0001."""
    return "gpu%04d" % (index + 1)


def node_address(index):
    """Index 0 -> 10.213.0.1; 250 addresses per /24, so that .0, .255 and the controller's .255.254 stay free."""
    return "%s.%d.%d" % (NET_PREFIX, index // 250, index % 250 + 1)


def node_faults(index):
    """The simulated faults of node ``index`` (a tuple of fault mappings; empty: healthy)."""
    for every, faults in FAULTS:
        if index % every == every - 1:
            return faults
    return ()


def normalize_report(report):
    """fleet.json without what says when or by which path it was made: created_at, options, the diff (it depends on
    which report was there before), each node's checked_at and source (and its result's)."""
    out = {k: v for k, v in report.items() if k not in REPORT_VOLATILE_TOP}
    nodes = {}
    for host, entry in (report.get("nodes") or {}).items():
        entry = {k: v for k, v in entry.items() if k not in REPORT_VOLATILE_NODE}
        nodes[host] = entry
    out["nodes"] = nodes
    return out


def report_differences(left, right, path="", limit=20):
    """The paths where two JSON values differ (at most ``limit``), "" names the whole value."""
    found = []

    def walk(a, b, where):
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                if key not in a or key not in b:
                    found.append("%s/%s: only in %s" % (where, key, "the first" if key in a else "the second"))
                else:
                    walk(a[key], b[key], "%s/%s" % (where, key))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for number, (x, y) in enumerate(zip(a, b)):
                walk(x, y, "%s[%d]" % (where, number))
        elif a != b:
            found.append("%s: %s != %s" % (where, json.dumps(a)[:80], json.dumps(b)[:80]))

    walk(left, right, path)
    return found


def project(points, target_n):
    """Least-squares line through (n, value) points, evaluated at target_n: (value, slope, intercept).
    One point: proportional (value / n * target_n)."""
    points = [(float(n), float(v)) for n, v in points]
    if not points:
        raise ValueError("nothing to project from")
    if len(points) == 1 or len(set(n for n, _v in points)) == 1:
        n, v = points[-1]
        slope = v / n
        return slope * target_n, slope, 0.0
    mean_n = sum(n for n, _v in points) / len(points)
    mean_v = sum(v for _n, v in points) / len(points)
    slope = (sum((n - mean_n) * (v - mean_v) for n, v in points)
             / sum((n - mean_n) ** 2 for n, _v in points))
    intercept = mean_v - slope * mean_n
    return intercept + slope * target_n, slope, intercept


def nodes_memory_holds(available_bytes, per_node_bytes, reserve_bytes):
    """How many nodes fit in the memory left after the reserve."""
    if per_node_bytes <= 0:
        raise ValueError("per-node memory must be positive")
    return max(0, int((available_bytes - reserve_bytes) // per_node_bytes))


# ---------------------------------------------------------------------------------------------------------------
# The machinery

def run(argv, **kwargs):
    kwargs.setdefault("check", True)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("check", False)
    return subprocess.run(argv, **kwargs)  # pylint: disable=subprocess-run-check


def wait_for_own_netns(procs, deadline):
    """Wait until each process (an unshare --net) is in a network namespace of its own.

    Popen returns once unshare is exec'd, before it has called unshare(2): an `ip link ... netns PID` sent then puts
    the node's eth0 into this process's namespace instead (seen on a loaded machine: the second one failed with "File
    exists"). A process that exits meanwhile is left for the caller's own wait to report.
    """
    own = os.readlink("/proc/self/ns/net")
    for proc in procs:
        while proc.poll() is None:
            try:
                if os.readlink("/proc/%d/ns/net" % proc.pid) != own:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("node process %d has no network namespace of its own after waiting" % proc.pid)
            time.sleep(0.01)


def die_with_parent():
    """In the child before exec: SIGKILL when the bench dies, and out of the terminal's Ctrl-C."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    os.setsid()


def find_sshd():
    """This machine's sshd, else Debian's openssh-server unpacked into .cache/fleet-sweep (apt-get download)."""
    for path in ("/usr/sbin/sshd", os.path.join(CACHE, "root", "usr", "sbin", "sshd")):
        if os.access(path, os.X_OK):
            return path
    os.makedirs(CACHE, exist_ok=True)
    run(["apt-get", "download", "openssh-server"], cwd=CACHE)
    debs = sorted(glob.glob(os.path.join(CACHE, "openssh-server_*.deb")))
    if not debs:
        raise SystemExit("no sshd: apt-get download openssh-server gave nothing")
    run(["dpkg-deb", "-x", debs[-1], os.path.join(CACHE, "root")])
    return os.path.join(CACHE, "root", "usr", "sbin", "sshd")


def memory_available():
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class Fleet(object):
    """The simulated nodes, their network and their files (inside the bench's own namespaces)."""

    def __init__(self, work, sshd):
        self.work = work
        self.sshd = sshd
        self.shared = os.path.join(work, "shared")
        self.procs = []          # the unshare processes, one per node
        self.pids = []           # the nodes' sshd (PID 1 of each node), as this namespace sees it
        self.templates = {}

    def prepare_shared(self):
        ssh = os.path.join(self.work, "ssh")
        os.makedirs(ssh, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(ssh, "host_key")])
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(ssh, "client_key")])
        shutil.copy(os.path.join(ssh, "client_key.pub"), os.path.join(ssh, "authorized_keys"))
        with open(os.path.join(ssh, "host_key.pub")) as handle:
            host_key = " ".join(handle.read().split()[:2])
        with open(os.path.join(ssh, "known_hosts"), "w") as handle:
            handle.write("%s.* %s\n" % (NET_PREFIX, host_key))
        sftp = next((p for p in ("/usr/lib/openssh/sftp-server",
                                 os.path.join(os.path.dirname(os.path.dirname(self.sshd)), "lib", "openssh",
                                              "sftp-server")) if os.path.exists(p)), "internal-sftp")
        with open(os.path.join(ssh, "sshd_config"), "w") as handle:
            handle.write("\n".join([
                "HostKey %s/host_key" % ssh, "AuthorizedKeysFile %s/authorized_keys" % ssh,
                "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                "UsePAM no", "UseDNS no", "StrictModes no", "PidFile none", "LogLevel ERROR", "MaxStartups 200:30:400",
                "MaxSessions 50", "Subsystem sftp %s" % sftp, ""]))
        # /etc of every node: the privilege separation user sshd needs (the machine may have no sshd installed).
        etc = os.path.join(self.shared, "etc")
        os.makedirs(etc)
        with open("/etc/passwd") as handle:
            passwd = handle.read()
        if not any(line.startswith("sshd:") for line in passwd.splitlines()):
            passwd += "sshd:x:64999:65534::/run/sshd:/usr/sbin/nologin\n"
        with open(os.path.join(etc, "passwd"), "w") as handle:
            handle.write(passwd)
        # root's home on every node: Debian's default dot files (not this machine's, which may start tools).
        home = os.path.join(self.shared, "root")
        os.makedirs(home, mode=0o700)
        for name in (".bashrc", ".profile"):
            if os.path.exists(os.path.join("/etc/skel", name)):
                shutil.copy(os.path.join("/etc/skel", name), home)
        # /usr/local of every node: the checker as the health_check role installs it (roles/_common/tasks/
        # node_programs.yml: bin/<program> run by python3 -IS, the files it imports, byte-compiled by the handler).
        sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
        from ansible_collections.gpucluster.ops.plugins.filter.import_closure import import_closure
        prefix = os.path.join(self.shared, "usr-local", INSTALL_DIR[len("/usr/local/"):])
        files = import_closure(["bin/gpucluster-health"], ROOT)
        for rel in files:
            os.makedirs(os.path.dirname(os.path.join(prefix, rel)), exist_ok=True)
            shutil.copy(os.path.join(ROOT, rel), os.path.join(prefix, rel))
        with open(os.path.join(ROOT, "bin", "gpucluster-health")) as handle:
            body = handle.read().split("\n", 1)[1]
        program = os.path.join(prefix, "bin", "gpucluster-health")
        with open(program, "w") as handle:
            handle.write("#!/usr/bin/python3 -IS\n" + body)
        os.chmod(program, 0o755)
        run(["/usr/bin/python3", "-I", "-m", "compileall", "-q", os.path.join(prefix, "plugins", "module_utils")])
        sbin = os.path.join(self.shared, "usr-local", "sbin")
        os.makedirs(sbin, exist_ok=True)
        os.symlink(INSTALL_DIR + "/bin/gpucluster-health", os.path.join(sbin, "gpucluster-health"))
        return ssh

    def template(self, faults):
        """The node-independent part of a node with these faults: /opt/gpusim set up, /var/log/gpusim, the
        checker's state directory (lower layers shared by the nodes with the same faults)."""
        key = json.dumps(faults, sort_keys=True)
        if key in self.templates:
            return self.templates[key]
        tpl = os.path.join(self.work, "templates", str(len(self.templates)))
        opt, var = os.path.join(tpl, "opt", "gpusim"), os.path.join(tpl, "var")
        for path in (os.path.join(opt, "bin"), os.path.join(tpl, "dev"), os.path.join(var, "log", "gpusim"),
                     os.path.join(var, "lib", "gpucluster-health"), os.path.join(tpl, "etc")):
            os.makedirs(path, exist_ok=True)
        # As tests/gpusim/install.yml installs it: lib/gpusim.py byte-compiled, bin/gpusim the launcher.
        os.makedirs(os.path.join(opt, "lib"))
        shutil.copy(GPUSIM, os.path.join(opt, "lib", "gpusim.py"))
        run(["/usr/bin/python3", "-I", "-m", "py_compile", os.path.join(opt, "lib", "gpusim.py")], check=True)
        with open(os.path.join(os.path.dirname(GPUSIM), "launcher.py")) as handle:
            body = handle.read().split("\n", 1)[1]
        with open(os.path.join(opt, "bin", "gpusim"), "w") as handle:
            handle.write("#!/usr/bin/python3 -IS\n" + body)
        os.chmod(os.path.join(opt, "bin", "gpusim"), 0o755)
        for tool in TOOLS:
            os.symlink("gpusim", os.path.join(opt, "bin", tool))
        shutil.copytree(PROFILES, os.path.join(opt, "profiles"))
        with open(os.path.join(PROFILES, PROFILE + ".json")) as handle:
            profile = json.load(handle)
        profile["faults"] = list(faults)
        profile_path = os.path.join(tpl, "etc", "profile.json")
        with open(profile_path, "w") as handle:
            json.dump(profile, handle, indent=2)
        env = dict(os.environ, GPUSIM_ROOT=opt, GPUSIM_DEV_DIR=os.path.join(tpl, "dev"),
                   GPUSIM_LOG_DIR=os.path.join(var, "log", "gpusim"), GPUSIM_HOSTNAME="gpu-template")
        run(["/usr/bin/python3", os.path.join(opt, "bin", "gpusim"), "setup", "--profile", profile_path], env=env)
        self.templates[key] = tpl
        return tpl

    def start(self, first, last, ssh):
        """Start nodes first .. last - 1 and wait until each one's sshd answers."""
        script = os.path.join(self.work, "node.sh")
        with open(script, "w") as handle:
            handle.write(NODE_SCRIPT)
        logs = os.path.join(self.work, "logs")
        os.makedirs(logs, exist_ok=True)
        procs = []
        for index in range(first, last):
            name = node_name(index)
            tpl = self.template(node_faults(index))
            node = os.path.join(self.work, "nodes", name)
            for sub in ("etc.u", "etc.w", "opt.u", "opt.w", "var.u", "var.w", "root.u", "root.w"):
                os.makedirs(os.path.join(node, sub))
            os.makedirs(os.path.join(node, "etc.u", "gpucluster"))
            os.makedirs(os.path.join(node, "etc.u", "gpusim"))
            shutil.copy(os.path.join(tpl, "etc", "profile.json"), os.path.join(node, "etc.u", "gpusim"))
            with open(os.path.join(node, "etc.u", "gpucluster", "health.json"), "w") as handle:
                json.dump(health_config(name), handle, indent=2)
            with open(os.path.join(logs, name + ".log"), "wb") as log:
                proc = subprocess.Popen(
                    ["unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child",
                     "--propagation", "private", "--", "/bin/sh", script, name, node_address(index), node, tpl,
                     self.shared, self.sshd, os.path.join(ssh, "sshd_config")],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            procs.append((index, proc))
        self.procs += [proc for _index, proc in procs]
        wait_for_own_netns([proc for _index, proc in procs], time.time() + 30 + (last - first) * 0.1)
        # One ip call for every veth pair: the node's end named eth0 in the node's network namespace.
        batch = []
        for index, proc in procs:
            batch.append("link add v%d type veth peer name eth0 netns %d" % (index, proc.pid))
            batch.append("link set v%d master br0 up" % index)
        done = run(["ip", "-batch", "-"], input="\n".join(batch).encode() + b"\n", check=False)
        if done.returncode != 0:
            raise RuntimeError("ip -batch (the nodes' veth pairs) failed: %s" % done.stderr.decode(errors="replace"))
        for _index, proc in procs:
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        deadline = time.time() + 60 + (last - first) * 0.2
        for index, proc in procs:
            while True:
                if proc.poll() is not None:
                    with open(os.path.join(logs, node_name(index) + ".log")) as handle:
                        raise SystemExit("node %s exited: %s" % (node_name(index), handle.read()[-500:]))
                try:
                    socket.create_connection((node_address(index), 22), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit("node %s does not answer on port 22" % node_name(index))
                    time.sleep(0.05)
            self.pids.append(self.sshd_pid(proc.pid))

    @staticmethod
    def sshd_pid(unshare_pid):
        with open("/proc/%d/task/%d/children" % (unshare_pid, unshare_pid)) as handle:
            return int(handle.read().split()[0])

    def cpu_s(self, count):
        """utime+stime+cutime+cstime of the first ``count`` nodes' sshd (PID 1: it reaps every node process)."""
        tick = float(os.sysconf("SC_CLK_TCK"))
        total = 0
        for pid in self.pids[:count]:
            with open("/proc/%d/stat" % pid) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])
        return total / tick

    def settle(self, count, timeout=30.0):
        """Wait until no ssh session runs on the first ``count`` nodes (their CPU is then in sshd's cutime)."""
        deadline = time.time() + timeout
        for pid in self.pids[:count]:
            while time.time() < deadline:
                with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
                    if not handle.read().strip():
                        break
                time.sleep(0.05)

    def last_pids(self, count):
        """Each node's ns_last_pid, read by a process in the node's PID namespace (which takes one PID)."""
        out = []
        for pid in self.pids[:count]:
            proc = run(["nsenter", "-t", str(pid), "-p", "-m", "--", "cat", "/proc/sys/kernel/ns_last_pid"])
            out.append(int(proc.stdout))
        return out

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def health_config(name):
    """The node's /etc/gpucluster/health.json, as roles/health_check writes it (vars/main.yml, defaults)."""
    return {"_managed": "Managed by Ansible (gpucluster.ops.health_check); local changes are overwritten",
            "node": name, "level": "quick", "expected": EXPECTED, "thresholds": {},
            "xid": {"ignore": [], "window_s": 86400}, "sources": SOURCES,
            "limits": {"input_max_bytes": 16777216, "clock_skew_s": 300},
            "state_file": "/var/lib/gpucluster-health/state.json", "state_max_age_s": 1800,
            "slurm": {"max_drained_share": 0.1}}


def write_inventory(work, count, ssh):
    path = os.path.join(work, "inventory-%d.yml" % count)
    hosts = {node_name(i): {"ansible_host": node_address(i)} for i in range(count)}
    inventory = {"all": {"children": {"gpu_nodes": {
        "hosts": hosts,
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": os.path.join(ssh, "client_key"),
                 "ansible_ssh_common_args": "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes"
                                            % os.path.join(ssh, "known_hosts"),
                 "ansible_python_interpreter": "/usr/bin/python3",
                 "health_check_expected": EXPECTED, "health_check_sources": SOURCES}}}}}
    with open(path, "w") as handle:
        json.dump(inventory, handle, indent=1)
    return path


def write_floor_playbook(work):
    path = os.path.join(work, "floor.yml")
    with open(path, "w") as handle:
        handle.write("- name: Floor\n  hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
                     "    - name: Run /bin/true\n      ansible.builtin.raw: /bin/true\n      changed_when: false\n")
    return path


def controller_run(work, label, config, argv):
    """Run ansible-playbook under the subreaper wrapper; {rc, wall_s, cpu_s, masters, log}."""
    log = os.path.join(work, "logs", label + ".log")
    env = dict(os.environ, ANSIBLE_CONFIG=config, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"), ANSIBLE_LOCAL_TEMP=os.path.join(work, "tmp"),
               ANSIBLE_HOME=os.path.join(work, "ansible-home"), ANSIBLE_INJECT_FACT_VARS="False",
               ANSIBLE_FORCE_COLOR="false")
    proc = run([sys.executable, "-c", CONTROLLER_WRAPPER, log] + argv, env=env, cwd=work)
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    result["log"] = log
    return result


# The per-host task of roles/operations/tasks/health_sweep_node.yml that probes one node (the fast path leaves it to the nodes
# gpucluster.ops.health_fanout cannot check: none here).
PER_HOST_PROBE_TASK = "TASK [Run the installed health checker and read the versions of the node's GPU stack]"


def per_host_probes(log):
    """How many nodes the playbook's per-host probe task ran on (its result lines in the log)."""
    count, inside = 0, False
    with open(log) as handle:
        for line in handle:
            if line.startswith("TASK [") or line.startswith("PLAY "):
                inside = line.startswith(PER_HOST_PROBE_TASK)
            elif inside and re.match(r"^(ok|changed|fatal|failed|unreachable): \[", line):
                count += 1
    return count


def measure(fleet, work, count, config, path, inventory, floor_playbook):
    label = "%d-%s-%s" % (count, os.path.basename(config), path)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory]
    report_dir = os.path.join(work, "reports", label, "report")
    if path == "floor":
        argv.append(floor_playbook)
    else:
        os.makedirs(os.path.dirname(report_dir))
        argv += [os.path.join(ROOT, "playbooks", "health_sweep.yml"), "-e", "health_sweep_report_dir=" + report_dir]
        if path == "module":
            argv += ["-e", "health_sweep_method=module"]
        elif path == "tasks":
            argv += ["-e", "health_sweep_fanout=false"]
    fleet.settle(count)
    pids_before = fleet.last_pids(count)
    cpu_before = fleet.cpu_s(count)
    result = controller_run(work, label, config, argv)
    fleet.settle(count)
    cpu_after = fleet.cpu_s(count)
    pids_after = fleet.last_pids(count)
    started = [a - b - 1 for a, b in zip(pids_after, pids_before)]
    result["per_host_probes"] = per_host_probes(result["log"])
    result.update({"n": count, "config": config, "path": path, "node_cpu_s": cpu_after - cpu_before,
                   "procs_per_node": sum(started) / float(count), "procs_max": max(started),
                   "procs_min": min(started), "report": os.path.join(report_dir, "fleet.json")
                   if path != "floor" else None})
    if result["rc"] != 0:
        with open(result["log"]) as handle:
            tail = handle.read()[-3000:]
        print("  %s: ansible-playbook exited %d:\n%s" % (label, result["rc"], tail), flush=True)
    return result


def compare_reports(fast, module):
    with open(fast) as handle:
        left = json.load(handle)
    with open(module) as handle:
        right = json.load(handle)
    return left["summary"], report_differences(normalize_report(left), normalize_report(right))


def row(result, floor):
    n = result["n"]
    ctl = result["cpu_s"] / n
    line = "  %-7s %6.1f s %5.1fx  %7.3f s %5.1fx  %7.3f s %5.1fx  %6.1f" % (
        result["path"], result["wall_s"], result["wall_s"] / floor["wall_s"], ctl, result["cpu_s"] / floor["cpu_s"],
        result["node_cpu_s"] / n, result["node_cpu_s"] / max(floor["node_cpu_s"], 1e-9), result["procs_per_node"])
    if result["rc"] != 0:
        line += "   (ansible-playbook exited %d)" % result["rc"]
    return line


def inner(args):
    work = os.environ["GPC_SWEEP_WORK"]
    run(["mount", "-t", "tmpfs", "-o", "mode=0700", "fleet-sweep", work])
    run(["mount", "-t", "tmpfs", "-o", "mode=0755", "fleet-sweep-run", "/run"])
    os.makedirs("/run/sshd", mode=0o755)
    for sub in ("cp", "tmp", "ansible-home", "logs", "reports"):
        os.makedirs(os.path.join(work, sub))
    run(["ip", "link", "set", "lo", "up"])
    run(["ip", "link", "add", "br0", "type", "bridge"])
    run(["ip", "addr", "add", CONTROLLER_ADDRESS + "/16", "dev", "br0"])
    run(["ip", "link", "set", "br0", "up"])
    for key, value in (("net.ipv4.neigh.default.gc_thresh1", "4096"), ("net.ipv4.neigh.default.gc_thresh2", "8192"),
                       ("net.ipv4.neigh.default.gc_thresh3", "16384")):
        run(["sysctl", "-q", "-w", "%s=%s" % (key, value)], check=False)

    fleet = Fleet(work, args.sshd)
    results = []
    try:
        ssh = fleet.prepare_shared()
        before = memory_available()
        start = time.perf_counter()
        probe = min(args.sizes[0], 20)
        fleet.start(0, probe, ssh)
        per_node = max((before - memory_available()) / float(probe), 4 << 20)
        holds = nodes_memory_holds(memory_available(), per_node * 2, 4 << 30) + probe
        largest = min(max(args.sizes), holds)
        sizes = [n for n in args.sizes if n <= largest] or [largest]
        if largest < max(args.sizes):
            print("this machine holds about %d nodes (%.1f MiB each, measured on the first %d, doubled for the "
                  "sweep, 4 GiB kept free); running %s" % (holds, per_node / 2 ** 20, probe, sizes), flush=True)
        fleet.start(probe, max(sizes), ssh)
        print("%d nodes up in %.1f s (%.1f MiB of memory each, %d fault templates); load %.2f %.2f %.2f" % (
            len(fleet.pids), time.perf_counter() - start, per_node / 2 ** 20, len(fleet.templates),
            *os.getloadavg()), flush=True)
        floor_playbook = write_floor_playbook(work)
        for count in sizes:
            inventory = write_inventory(work, count, ssh)
            for config in args.config:
                for path in args.paths:
                    results.append(measure(fleet, work, count, config, path, inventory, floor_playbook))
                    print("  measured %d nodes, %s, %s: %.1f s wall, load %.2f" % (
                        count, os.path.basename(config), path, results[-1]["wall_s"], os.getloadavg()[0]),
                        flush=True)
        print_table(results, sizes)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(results, handle, indent=1)
    finally:
        fleet.stop()
    return 0


def print_table(results, sizes):
    print()
    print("health sweep over real ssh, %s, %d cores, load %.2f %.2f %.2f at the end" % (
        time.strftime("%Y-%m-%d", time.gmtime()), os.cpu_count(), *os.getloadavg()))
    print("controller CPU: ansible-playbook's process tree with its ssh clients and ControlPersist masters; node CPU: "
          "each node's sshd tree (PID 1 of the node's PID namespace, utime+stime+cutime+cstime); processes: PIDs "
          "the node's PID namespace handed out per node, threads included")
    configs = []
    for result in results:
        if result["config"] not in configs:
            configs.append(result["config"])
    for config in configs:
        for count in sizes:
            runs = {r["path"]: r for r in results if r["config"] == config and r["n"] == count}
            if not runs:
                continue
            floor = runs.get("floor") or next(iter(runs.values()))
            print()
            print("%d nodes, ANSIBLE_CONFIG=%s" % (count, os.path.relpath(config, ROOT)))
            print("  path       wall  /floor  ctl CPU/node /floor  node CPU/node /floor  procs/node")
            for path in PATHS:
                if path in runs:
                    print(row(runs[path], floor))
            if "fast" in runs:
                fast = runs["fast"]
                print("  targets: %d nodes <= %.0f s wall (fast path here: %.1f s for %d nodes); <= %.2f s controller "
                      "CPU per node incl. ssh (fast path: %.3f s)" % (
                          TARGET_NODES, TARGET_WALL_S, fast["wall_s"], count, TARGET_CONTROLLER_CPU_S,
                          fast["cpu_s"] / count))
            if "fast" in runs:
                print("  nodes the fast path left to their own tasks (the per-host probe ran on them): %d"
                      % runs["fast"]["per_host_probes"])
            for path in ("fast", "tasks"):
                if path in runs and "module" in runs and runs[path]["rc"] == 0 and runs["module"]["rc"] == 0:
                    summary, differences = compare_reports(runs[path]["report"], runs["module"]["report"])
                    print("  fleet.json, %s path against module path (without created_at, options, diff, each node's "
                          "checked_at and source): %s; summary %s" % (
                              path, "the same" if not differences else "DIFFERENT at %s" % "; ".join(differences),
                              json.dumps(summary, sort_keys=True)))
        if max(sizes) < TARGET_NODES:
            for path in ("fast", "tasks", "module"):
                points = [(r["n"], r["wall_s"]) for r in results if r["config"] == config and r["path"] == path]
                if points:
                    value, slope, intercept = project(points, TARGET_NODES)
                    print("  projection for %d nodes, %s path: %.1f s wall (least-squares line through %s: %.3f s per "
                          "node + %.1f s)" % (TARGET_NODES, path, value,
                                              ", ".join("%d: %.1f s" % p for p in points), slope, intercept))


def outer(args):
    if os.geteuid() != 0:
        raise SystemExit("fleet_sweep needs root (network, mount and PID namespaces)")
    for tool in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            raise SystemExit("fleet_sweep needs %s" % tool)
    sshd = find_sshd()
    work = tempfile.mkdtemp(prefix="gpc-sweep-")
    argv = ["unshare", "--net", "--mount", "--propagation", "private", "--", sys.executable,
            os.path.realpath(__file__), "--inner", "--sshd", sshd] + sys.argv[1:]
    env = dict(os.environ, GPC_SWEEP_WORK=work)
    proc = subprocess.Popen(argv, env=env)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                # The inner bench got the Ctrl-C too and cleans up; wait for it.
                continue
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.rmdir(work)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("50,200,400"))
    parser.add_argument("--config", action="append", type=os.path.realpath,
                        help="an ansible.cfg to run with (repeatable; default: the checkout's ansible.cfg)")
    parser.add_argument("--paths", type=parse_paths, default=list(PATHS))
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sshd", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.config = args.config or [os.path.join(ROOT, "ansible.cfg")]
    if args.json:
        args.json = os.path.realpath(args.json)
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
