"""The tests' `docker exec` (tests/support/bin/docker, tests/support/container_exec.py) starts the process that the
real `docker exec` starts: on this scenario's containers, the same environment, credentials, capabilities, security
settings, cgroups, limits, namespaces, root and working directory, exit status and standard input. Every playbook and
test of every scenario reaches its containers through it (scripts/docker-exec-path.sh), so this is what makes their
verdicts the ones the real `docker exec` would give. Root only: entering a container needs it."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHIM = os.path.join(ROOT, "tests", "support", "bin", "docker")
# What a process can tell about itself; nothing in it differs between two processes started the same way.
PROBE = r"""
env | sort
grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Seccomp_filters|Speculation_Store_Bypass):' \
    /proc/self/status
cat /proc/self/cgroup /proc/self/limits /proc/self/attr/current 2>&1
pwd
readlink /proc/self/root
for ns in /proc/self/ns/*; do echo "$ns $(readlink "$ns")"; done
cat /proc/self/loginuid /proc/self/oom_score_adj
umask
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="entering a container needs root")


@pytest.fixture(scope="module")
def real_docker():
    real = os.environ.get("GPUCLUSTER_REAL_DOCKER") or shutil.which("docker")
    assert real and not os.path.samefile(real, SHIM), real
    return real


@pytest.fixture()
def shim_env(real_docker, tmp_path):
    return dict(os.environ, GPUCLUSTER_REAL_DOCKER=real_docker, GPUCLUSTER_CTEXEC_CACHE=str(tmp_path))


def run(argv, env=None, stdin=subprocess.DEVNULL):
    return subprocess.run(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          timeout=60, check=False)


def test_the_process_is_the_one_docker_exec_starts(host, real_docker, shim_env, tmp_path):
    name = host.backend.get_hostname()
    real = run([real_docker, "exec", "-i", name, "/bin/sh", "-c", PROBE])
    mine = run([SHIM, "exec", "-i", name, "/bin/sh", "-c", PROBE], env=shim_env)
    assert real.returncode == 0 and mine.returncode == 0, (real.stderr, mine.stderr)
    # It took its own way in (the cached command line), not the real docker's.
    assert (tmp_path / name).is_file(), mine.stderr
    assert "CapBnd" in real.stdout and "/docker/" in real.stdout and "HOSTNAME=%s" % name in real.stdout
    assert mine.stdout == real.stdout
    assert mine.stderr == real.stderr == ""


def test_exit_status_standard_input_and_arguments_are_passed_through(host, real_docker, shim_env):
    name = host.backend.get_hostname()
    for docker, env in ((real_docker, None), (SHIM, shim_env)):
        failed = run([docker, "exec", name, "/bin/sh", "-c", "echo out; echo err >&2; exit 7"], env=env)
        assert (failed.returncode, failed.stdout, failed.stderr) == (7, "out\n", "err\n"), docker
        argv = [docker, "exec", "-i", "-u", "root", name, "sh", "-c", 'cat; printf "%s|" "$@"', "sh",
                "a b", "'c'"]
        given = subprocess.run(argv, input="line\n", stdout=subprocess.PIPE, text=True, env=env, timeout=60, check=False)
        assert (given.returncode, given.stdout) == (0, "line\na b|'c'|"), docker
        closed = run([docker, "exec", name, "cat"], env=env, stdin=None)
        assert (closed.returncode, closed.stdout) == (0, ""), docker         # no -i: no standard input


def test_what_it_does_not_reproduce_goes_to_the_real_docker(host, real_docker, shim_env, tmp_path):
    name = host.backend.get_hostname()
    for argv in (["exec", "-u", "nobody", name, "id", "-un"], ["exec", "-w", "/tmp", name, "pwd"],
                 ["exec", "-e", "X=1", name, "sh", "-c", "echo $X"]):
        assert run([SHIM] + argv, env=shim_env).stdout == run([real_docker] + argv).stdout != ""
    missing = run([SHIM, "exec", "no-such-container-gpucluster", "true"], env=shim_env)
    assert missing.returncode != 0 and "no-such-container-gpucluster" in missing.stderr
    assert not (tmp_path / "no-such-container-gpucluster").exists()
    assert run([SHIM, "inspect", "-f", "{{.Name}}", name], env=shim_env).stdout.strip() == "/" + name
