"""gpu-job on the cluster (docs/gpu-job.md): the command site.yml's User tools play installed on the login node, run as
the teams' users. A container job submitted with `gpu-job submit` runs its image with rootless podman on a simulated
GPU node, sees its GPUs in CUDA_VISIBLE_DEVICES and its dataset read-only; `gpu-job quota` shows the GPU-hours it
used; `gpu-job queue` explains, in words, a job held by its team's GPU limit.

The image is built here, on each GPU node, from the node's own programs (no registry), and imported into each user's
rootless store. The cluster has no shared home directories, which a real one has: the test creates the users' log
directories on the GPU nodes, where Slurm writes the job's output.
Debian 13 only: Debian 12's cluster installs the command without the runtime (its group_vars).
"""

import re
import shlex

import pytest

from conftest import _wait

pytestmark = pytest.mark.release("debian13")

IMAGE = "localhost/gpujob-test:1"
DATASET = "/srv/datasets/imagenet"
USERS = ("alice", "bob")
# A small image from the node's own programs and their libraries: sh, sleep, ls, touch, cat and env.
BUILD_IMAGE = r"""
set -eu
root=$(mktemp -d)
mkdir -p "$root/bin"
for prog in dash sleep ls touch cat env; do
    path=$(command -v "$prog")
    cp -L "$path" "$root/bin/$prog"
    for lib in $(ldd "$path" | grep -o '/[^ ]*'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done
ln -s dash "$root/bin/sh"
tar -C "$root" -cf /var/tmp/gpujob-image.tar .
chmod 0644 /var/tmp/gpujob-image.tar
rm -rf "$root"
mkdir -p {dataset}
echo data > {dataset}/train-00000
""".format(dataset=DATASET)
PROBE = ("echo CVD=$CUDA_VISIBLE_DEVICES; ls %s; if touch %s/written 2>/dev/null; then echo DATASET=writable;"
         " else echo DATASET=read-only; fi; sleep 45" % (DATASET, DATASET))


def as_user(host, user, command):
    """Run ``command`` in ``user``'s login shell on ``host``; return the testinfra result."""
    return host.run("su - %s -c %s" % (user, shlex.quote(command)))


def job_id(result):
    assert result.rc == 0, result.stdout + result.stderr
    found = re.match(r"submitted job (\d+): ", result.stdout)
    assert found, result.stdout
    return found.group(1)


def sacct(ctl, job, fields):
    out = ctl.check_output("sacct -n -P -X -j %s -o %s" % (job, fields))
    return out.strip().split("|") if out.strip() else []


# Each user's rootless podman state starts empty (a rerun on a kept cluster): no podman process of the user left, no
# store, no runtime directory. The log directory stands in for a shared home directory.
RESET_USER = r"""
set -eu
uid=$(id -u {user})
for proc in /proc/[0-9]*; do
    [ "$(stat -c %u "$proc" 2>/dev/null)" = "$uid" ] && kill -9 "${{proc#/proc/}}" 2>/dev/null || true
done
rm -rf /home/{user}/.local/share/containers /home/{user}/.config/containers "/tmp/storage-run-$uid" "/tmp/podman-run-$uid"
install -d -o {user} -g {user} -m 0750 /home/{user}/gpu-job-logs
"""


@pytest.fixture(scope="module")
def nodes(scenario, ctl):
    """Each GPU node with the dataset and the test image in every user's rootless store. The image is loaded the
    way a user without a registry loads one: in a job on the node (`srun ... podman import`), where gpu-job's jobs
    run podman (a store first used in a login session would remember that session's runtime directory, which a job
    does not have)."""
    for name in scenario.compute:
        node = scenario.host(name)
        node.check_output(BUILD_IMAGE)
        for user in USERS:
            node.check_output(RESET_USER.format(user=user))
    for name in scenario.compute:
        for user in USERS:
            result = as_user(ctl, user, "srun --nodelist=%s --time=2 env -u XDG_RUNTIME_DIR podman import -q "
                             "/var/tmp/gpujob-image.tar %s" % (name, IMAGE))
            assert result.rc == 0, (name, user, result.stdout, result.stderr)
    return scenario.compute


@pytest.fixture(scope="module")
def probe(scenario, ctl, nodes):
    """alice's 2-GPU job: what it printed, where it ran, and gpu-job's view of it while it ran and after."""
    submit = as_user(ctl, "alice", "gpu-job submit --name probe --gpus 2 --image %s --dataset imagenet --time 5m "
                     "--command %s" % (IMAGE, shlex.quote(PROBE)))
    job = job_id(submit)
    _wait("job %s running" % job, lambda: (sacct(ctl, job, "State")[:1] == ["RUNNING"], sacct(ctl, job, "State")))
    status = as_user(ctl, "alice", "gpu-job status %s" % job)
    _wait("job %s done" % job, lambda: (sacct(ctl, job, "State")[:1] in (["COMPLETED"], ["FAILED"]),
                                        sacct(ctl, job, "State")), timeout=180)
    state, exit_code, node = sacct(ctl, job, "State,ExitCode,NodeList")
    log = scenario.host(node).check_output("cat /home/alice/gpu-job-logs/%s.out" % job)
    return {"job": job, "submit": submit.stdout, "status": status, "state": state, "exit": exit_code, "node": node,
            "log": log}


def test_the_container_job_runs_with_its_gpus_and_its_dataset_read_only(probe, scenario):
    assert probe["state"] == "COMPLETED", probe
    assert probe["exit"] == "0:0", probe
    assert probe["node"] in scenario.compute
    log = probe["log"]
    # Slurm's GRES plugin gave the step two GPUs; podman passed the variable into the container.
    assert re.search(r"^CVD=\d+,\d+$", log, re.M), log
    assert re.search(r"^train-00000$", log, re.M), log
    assert re.search(r"^DATASET=read-only$", log, re.M), log
    assert "submitted job %s: 2 GPU(s) (1 node(s) x 2 " % probe["job"] in probe["submit"]


def test_status_shows_the_running_job(probe):
    assert probe["status"].rc == 0, probe["status"].stderr
    assert re.match(r"%s\s+probe\s+RUNNING\s" % probe["job"], probe["status"].stdout), probe["status"].stdout


def test_quota_shows_the_jobs_gpu_hours(probe, ctl):
    # The job used 2 GPUs for about 45 s: slurmctld's QOS counter shows at least one GPU-minute once the job is done.
    def used():
        out = as_user(ctl, "alice", "gpu-job quota")
        row = re.search(r"^research\s+month\s+6000\s+(\S+)\s+(\S+)%\s+(\S+)\s+(\S+)$", out.stdout, re.M)
        return bool(row) and out.rc == 0 and float(row.group(1)) > 0, out.stdout + out.stderr
    _wait("research's GPU-hours in gpu-job quota", used, timeout=90)


def test_queue_explains_a_job_held_by_its_teams_gpu_limit(nodes, ctl):
    # development may use 8 GPUs at once: bob's first 8-GPU job takes them, the second waits on the team's limit.
    first = job_id(as_user(ctl, "bob", "gpu-job submit --name first --gpus 8 --image %s --time 5m --command 'sleep 300'"
                           % IMAGE))
    _wait("job %s running" % first, lambda: (sacct(ctl, first, "State")[:1] == ["RUNNING"], sacct(ctl, first, "State")))
    second = job_id(as_user(ctl, "bob", "gpu-job submit --name second --gpus 8 --image %s --time 5m "
                            "--command 'sleep 300'" % IMAGE))

    def held():
        out = as_user(ctl, "bob", "gpu-job queue")
        return bool(re.search(r"^%s\s+second\s+waits: your team's GPU limit is in use.*\[QOSGrpGRES\]$" % second,
                              out.stdout, re.M)), out.stdout + out.stderr
    _wait("job %s explained as held by the team's GPU limit" % second, held, timeout=60)
    # PrivateData (issue 46): alice, of another team, cannot see bob's running job; bob sees it
    other = as_user(ctl, "alice", "gpu-job status %s" % first)
    assert other.rc != 0 and "first" not in other.stdout, (other.rc, other.stdout, other.stderr)
    own = as_user(ctl, "bob", "gpu-job status %s" % first)
    assert own.rc == 0 and re.match(r"%s\s+first\s+RUNNING\s" % first, own.stdout), (own.stdout, own.stderr)
    cancelled = as_user(ctl, "bob", "gpu-job cancel %s && gpu-job cancel %s" % (second, first))
    assert cancelled.rc == 0, cancelled.stderr
    assert cancelled.stdout.splitlines() == ["cancelled job %s (it was PENDING)" % second,
                                             "cancelled job %s (it was RUNNING)" % first]
    # issue 45: a job that already ended is not "cancelled" again (exit 1), one Slurm does not know is exit 2
    _wait("job %s accounted as cancelled" % second,
          lambda: ((sacct(ctl, second, "State") + [""])[0].startswith("CANCELLED"), sacct(ctl, second, "State")),
          timeout=60)
    again = as_user(ctl, "bob", "gpu-job cancel %s" % second)
    assert (again.rc, again.stdout) == (1, ""), (again.rc, again.stdout, again.stderr)
    assert "job %s had already ended (CANCELLED); nothing was cancelled" % second in again.stderr, again.stderr
    unknown = as_user(ctl, "bob", "gpu-job cancel 999999")
    assert unknown.rc == 2 and "Slurm knows no such job; nothing was cancelled" in unknown.stderr, unknown.stderr
