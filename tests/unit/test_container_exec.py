"""tests/support/container_exec.py on records written here (no container, no docker): which containers it enters as
`docker exec` would, the command line it builds from the OCI spec, and the cache the shim reads. The equivalence with
the real `docker exec` is checked on real containers by molecule/node-baseline/tests/test_container_exec.py."""

import json
import os

import pytest

import container_exec

CAPS = ["CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN"]


def _own_cgroup():
    """A cgroup path this process is in (the last hierarchy's, the unified one where there is one)."""
    with open("/proc/self/cgroup") as handle:
        return handle.read().splitlines()[-1].split(":", 2)[2]


@pytest.fixture()
def docker_root(tmp_path, monkeypatch):
    """A docker root with one container record, this process standing in for its first process, and its spec."""
    root, spec_dir = tmp_path / "docker", tmp_path / "specs"
    monkeypatch.setattr(container_exec, "DOCKER_ROOT", str(root))
    monkeypatch.setattr(container_exec, "SPECS", (str(spec_dir / "%s" / "config.json"),))
    monkeypatch.setattr(container_exec, "CACHE", str(tmp_path / "cache"))

    def write(running=True, **changes):
        cid = "ab" * 32
        record = {"ID": cid, "Name": "/node1", "State": {"Running": running, "Paused": False, "Pid": os.getpid()}}
        (root / "containers" / cid).mkdir(parents=True, exist_ok=True)
        (root / "containers" / cid / "config.v2.json").write_text(json.dumps(record))
        process = {"user": {"uid": 0, "gid": 0, "additionalGids": [0]}, "cwd": "/",
                   "env": ["PATH=/usr/bin:/bin", "HOSTNAME=node1"],
                   "capabilities": {"bounding": CAPS, "effective": CAPS, "permitted": CAPS}}
        linux = {"cgroupsPath": _own_cgroup(), "namespaces": [{"type": t} for t in ("mount", "network", "pid")]}
        for key, value in changes.items():
            owner = process if key in process or key in ("terminal", "apparmorProfile", "noNewPrivileges") else linux
            owner[key] = value
        (spec_dir / cid).mkdir(parents=True, exist_ok=True)
        (spec_dir / cid / "config.json").write_text(json.dumps({"process": process, "linux": linux}))
    return write


def test_the_command_line_is_built_from_the_spec(docker_root):
    docker_root()
    pid, started, umask, files, prefix = container_exec.resolve("node1")
    assert pid == os.getpid() and started == container_exec.start_time(os.getpid()) and umask == "0022"
    assert files and all(f.endswith("/cgroup.procs") and os.path.exists(f) for f in files)
    assert prefix[:5] == ["/usr/bin/nsenter", "-t", str(os.getpid()), "-r", "-m"]
    assert prefix[5:7] == ["-n", "-p"] and prefix[7] == "--"
    setpriv = prefix.index("/usr/bin/setpriv")
    assert prefix[setpriv:setpriv + 4] == ["/usr/bin/setpriv", "--groups=0", "--inh-caps=-all",
                                           "--bounding-set=-all,+chown,+kill,+sys_admin"]
    limits = prefix[prefix.index("/usr/bin/prlimit") + 1:setpriv - 1]
    assert "--nofile=%d:%d" % tuple(int(v) for v in _limit("Max open files")) in limits and len(limits) == 16
    assert prefix[-7:] == ["/usr/bin/env", "-i", "-C", "/", "PATH=/usr/bin:/bin", "HOSTNAME=node1", "HOME=/root"]


def _limit(label):
    with open("/proc/%d/limits" % os.getppid()) as handle:
        return next(line for line in handle if line.startswith(label))[len(label):].split()[:2]


@pytest.mark.parametrize("changes,reason", [
    ({"namespaces": [{"type": "user"}, {"type": "mount"}]}, "user namespace"),
    ({"apparmorProfile": "docker-default"}, "AppArmor profile"),
    ({"seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}}, "seccomp filter"),
    ({"noNewPrivileges": True}, "no_new_privs"),
    ({"terminal": True}, "terminal"),
    ({"user": {"uid": 1000, "gid": 1000}}, "user other than root"),
    ({"capabilities": {"bounding": CAPS, "effective": CAPS[:1], "permitted": CAPS}}, "capability sets"),
    ({"namespaces": [{"type": "time"}]}, "namespace type"),
])
def test_what_it_cannot_reproduce_is_refused(docker_root, changes, reason):
    docker_root(**changes)
    with pytest.raises(container_exec.Unresolved, match=reason):
        container_exec.resolve("node1")


def test_a_stopped_or_unknown_container_is_refused(docker_root):
    docker_root(running=False)
    with pytest.raises(container_exec.Unresolved, match="not running"):
        container_exec.resolve("node1")
    with pytest.raises(container_exec.Unresolved, match="no container node2"):
        container_exec.resolve("node2")


def test_the_cache_is_what_the_shim_reads(docker_root, tmp_path, capsys):
    docker_root()
    assert container_exec.main(["container_exec.py", "node1"]) == 0
    first, files, prefix = (tmp_path / "cache" / "node1").read_text().splitlines()
    assert first.split() == [str(os.getpid()), container_exec.start_time(os.getpid()), "0022"]
    assert files.split() == container_exec.cgroup_files(os.getpid(), _own_cgroup())
    assert prefix.startswith("/usr/bin/nsenter -t %d -r -m -n -p -- /usr/bin/prlimit " % os.getpid())
    assert container_exec.main(["container_exec.py", "node2"]) == 1
    assert "no container node2" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "node2").exists()
