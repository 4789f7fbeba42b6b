"""gpu-job on the cluster (docs/gpu-job.md): the command site.yml's User tools play installed on the login node, run as
the teams' users. A container job submitted with `gpu-job submit` runs its image with rootless podman on a simulated
GPU node with exactly the device nodes of the GPUs Slurm allocated to it (through the node's CDI spec, by minor number
and UUID), the control device, /dev/infiniband, the node's NCCL config and the driver's libraries (found by the
dynamic loader through the spec's ldcache hook), in the step's cgroup, and its dataset read-only; a job without GPUs
gets no GPU device; scancel ends the container with the job. `gpu-job quota` shows the GPU-hours it used; `gpu-job
queue` explains, in words, a job held by its team's GPU limit, and `gpu-job why` names the limit with its numbers.

The image is built here, on each GPU node, from the node's own programs (no registry), and imported into each user's
rootless store. The cluster has no shared home directories, which a real one has: the test creates the users' log
directories on the GPU nodes, where Slurm writes the job's output. The device nodes are the simulator's (char 195 and
231): a container sees them and cannot open them (Docker's device cgroup), which is what is asserted.
Debian 13 only: Debian 12's cluster installs the command without the runtime (its group_vars).
"""

import json
import os
import re
import shlex

import pytest

from conftest import ROOT, _wait
from gpu_jobs import DATASET, IMAGE, USER_STORES, USERS, allocated, as_user, job_id, load_image, sacct

pytestmark = pytest.mark.release("debian13")

HELPER = "/usr/local/lib/gpu-job/bin/gpu-job-container"
SITE_STORE = "/var/lib/gpucluster/containers/site"
USER_TOOLS = os.path.join(ROOT, "playbooks", "user_tools.yml")
# What a site's nccl role writes (Debian 13's cluster runs no nccl role): the container must get this file.
NCCL_CONF = "NCCL_DEBUG=WARN  # test_6_gpu_job\n"
# Inside the container: its GPU device nodes, verbs devices, NCCL config, loader config, cgroup and the dataset.
PROBE = ("echo DEVICES $(cd /dev && echo nvidia*); echo VERBS $(cd /dev/infiniband && echo uverbs*); "
         "echo NCCL $(cat /etc/nccl.conf); echo LIBCUDA $(cd /usr/lib/x86_64-linux-gnu/nvidia/current && echo libcuda.so.*);"
         " cat /proc/self/cgroup; ls %s; if touch %s/written 2>/dev/null; then echo DATASET=writable;"
         " else echo DATASET=read-only; fi; sleep 45" % (DATASET, DATASET))


@pytest.fixture(scope="module")
def nodes(scenario, ctl):
    """Each GPU node with the dataset and the test image in every user's rootless store."""
    return load_image(scenario, ctl, scenario.compute)


def hold_first_gpus(scenario, ctl):
    """bob's 1-GPU job on each GPU node, running until cancelled: a job started meanwhile gets GPUs that are not the
    first ones, so that its devices show that the allocation, not the count, picked them."""
    jobs = []
    for name in scenario.compute:
        out = as_user(ctl, "bob", "cd /tmp && sbatch --parsable -A development -q development -p dev -w %s "
                      "--gpus-per-node=1 --time=5 -o /dev/null --wrap 'sleep 240'" % name)
        assert out.rc == 0, (out.stdout, out.stderr)
        jobs.append(out.stdout.strip().split(";")[0])
    for job in jobs:
        _wait("holder %s running" % job,
              lambda job=job: (sacct(ctl, job, "State")[:1] == ["RUNNING"], sacct(ctl, job, "State")))
    return jobs


def release(ctl, jobs):
    ctl.check_output("scancel %s" % " ".join(jobs))
    for job in jobs:
        _wait("holder %s ended" % job,
              lambda job=job: ((sacct(ctl, job, "State") + [""])[0].startswith("CANCELLED"), sacct(ctl, job, "State")),
              timeout=60)


def unified(cgroup):
    """The cgroup v2 (unified) line's path of a /proc/PID/cgroup text."""
    return [line[3:] for line in cgroup.splitlines() if line.startswith("0::")]


@pytest.fixture(scope="module")
def probe(scenario, ctl, nodes):
    """alice's 2-GPU job: what it printed, where it ran, its allocation and its job helper's cgroup while it ran, and
    gpu-job's view of it while it ran and after."""
    for name in scenario.compute:
        scenario.host(name).check_output("printf %%s %s > /etc/nccl.conf" % shlex.quote(NCCL_CONF))
    holders = hold_first_gpus(scenario, ctl)
    submit = as_user(ctl, "alice", "gpu-job submit --name probe --gpus 2 --image %s --dataset imagenet --time 5m "
                     "--command %s" % (IMAGE, shlex.quote(PROBE)))
    job = job_id(submit)
    _wait("job %s running" % job, lambda: (sacct(ctl, job, "State")[:1] == ["RUNNING"], sacct(ctl, job, "State")))
    status = as_user(ctl, "alice", "gpu-job status %s" % job)
    indices = allocated(ctl, job)
    release(ctl, holders)
    running_on = scenario.host(sacct(ctl, job, "NodeList")[0])
    helper = running_on.run("for pid in $(pgrep -u alice -f %s); do cat /proc/$pid/cgroup; done" % HELPER)
    _wait("job %s done" % job, lambda: (sacct(ctl, job, "State")[:1] in (["COMPLETED"], ["FAILED"]),
                                        sacct(ctl, job, "State")), timeout=180)
    state, exit_code, node = sacct(ctl, job, "State,ExitCode,NodeList")
    log = scenario.host(node).check_output("cat /home/alice/gpu-job-logs/%s.out" % job)
    for name in scenario.compute:
        scenario.host(name).run("rm -f /etc/nccl.conf")
    return {"job": job, "submit": submit.stdout, "status": status, "state": state, "exit": exit_code, "node": node,
            "log": log, "indices": indices, "helper_cgroup": helper.stdout}


def test_the_container_job_runs_with_its_gpus_and_its_dataset_read_only(probe, scenario):
    assert probe["state"] == "COMPLETED", probe
    assert probe["exit"] == "0:0", probe
    assert probe["node"] in scenario.compute
    log = probe["log"]
    # Two GPUs, not the first (bob's job holds GPU 0), and exactly the allocated ones: gres.conf's File= order is
    # the minor number here (File=/dev/nvidia[0-7]), so IDX n is /dev/nvidia<n>.
    assert len(probe["indices"]) == 2 and 0 not in probe["indices"], probe["indices"]
    want = " ".join(sorted(["nvidia%d" % i for i in probe["indices"]] + ["nvidiactl"]))
    assert re.search(r"^DEVICES %s$" % want, log, re.M), (want, log)
    # the node's verbs devices (the simulator's, one per InfiniBand/RoCE device of its profile)
    verbs = scenario.host(probe["node"]).check_output("cd /dev/infiniband && echo uverbs*")
    assert verbs.startswith("uverbs0 uverbs1 ") and re.search(r"^VERBS %s$" % verbs, log, re.M), (verbs, log)
    assert re.search(r"^NCCL NCCL_DEBUG=WARN # test_6_gpu_job$", log, re.M), log
    # the driver's library, with the SONAME link the spec's ldcache hook had ldconfig make in the container
    assert re.search(r"^LIBCUDA libcuda\.so\.1 libcuda\.so\.[0-9.]+$", log, re.M), log
    # the container's processes are in the cgroup of the step's own processes (--cgroups=disabled), not in one of
    # their own under the user's systemd
    inside, step = unified(log), unified(probe["helper_cgroup"])
    assert inside and step and inside[0] == step[0] and "user@" not in inside[0], (inside, step)
    assert re.search(r"^train-00000$", log, re.M), log
    assert re.search(r"^DATASET=read-only$", log, re.M), log
    assert "submitted job %s: 2 GPU(s) (1 node(s) x 2 " % probe["job"] in probe["submit"]


def test_a_job_without_gpus_gets_no_gpu_device(nodes, ctl):
    # the job helper as gpu-job's script runs it, in a step without GPUs
    out = as_user(ctl, "alice", "srun -p dev --time=2 env -u XDG_RUNTIME_DIR %s --user-store %s podman run --rm "
                  "--network=host --cgroups=disabled %s sh -c 'echo DEVICES $(cd /dev && echo nvidia*)'"
                  % (HELPER, USER_STORES, IMAGE))
    assert out.rc == 0, (out.stdout, out.stderr)
    assert re.search(r"^DEVICES nvidia\*$", out.stdout, re.M), out.stdout


def test_scancel_ends_the_container(scenario, ctl, nodes):
    job = job_id(as_user(ctl, "alice", "gpu-job submit --name long --gpus 1 --image %s --time 5m "
                         "--command 'sleep 271'" % IMAGE))
    _wait("job %s running" % job, lambda: (sacct(ctl, job, "State")[:1] == ["RUNNING"], sacct(ctl, job, "State")))
    node = scenario.host(sacct(ctl, job, "NodeList")[0])

    def container(present):
        out = node.run("pgrep -u alice -f 'sleep 271|conmon'")
        return bool(out.stdout.strip()) == present, out.stdout
    _wait("the container of job %s running" % job, lambda: container(True), timeout=60)
    ctl.check_output("scancel %s" % job)
    # the step's processes end at once; the container's monitor and command with them, not after KillWait
    _wait("the container of job %s gone" % job, lambda: container(False), timeout=20)


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
    # issue 52: gpu-job usage gives alice's own GPU-hours of this month as sacct accounts them (GPUs x elapsed)
    _wait("alice's jobs ended", lambda: (not ctl.check_output("squeue -h -u alice -o %i").strip(), "running"),
          timeout=90)
    rows = ctl.check_output("sacct -n -P -X -u alice -S $(date +%Y-%m-01) -E now -o Account,AllocTRES,ElapsedRaw")
    expected = {}
    for row in rows.splitlines():
        account, tres, elapsed = row.split("|")
        gpus = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
        if gpus:
            expected[account] = expected.get(account, 0) + int(gpus.group(1)) * int(elapsed) / 3600.0
    out = as_user(ctl, "alice", "gpu-job usage")
    assert out.rc == 0, out.stdout + out.stderr
    shown = dict((m.group(1), float(m.group(2)))
                 for m in re.finditer(r"^(\S+) +([0-9.]+) GPU-hours", out.stdout, re.M))
    assert expected and sorted(shown) == sorted(expected), (out.stdout, rows)
    for account, hours in expected.items():
        assert abs(shown[account] - hours) <= 0.01, (out.stdout, rows)


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
    # issue 52: why names the limit that binds, with slurmctld's counters, and the job's priority and place
    why = as_user(ctl, "bob", "gpu-job why %s" % second)
    assert why.rc == 0, why.stdout + why.stderr
    assert re.search(r"^limit: +QOS development GrpTRES gres/gpu=8 \(the team's GPUs at once\): 8 in use, this job "
                     r"asks for 8$", why.stdout, re.M), why.stdout
    assert re.search(r"^priority: +\d+ \(.*fair-share \d+", why.stdout, re.M), why.stdout
    assert re.search(r"^place: +1 of the 1 pending jobs you can see in partition dev ", why.stdout, re.M), why.stdout
    assert re.search(r"^start: +", why.stdout, re.M) and "unknown" not in why.stdout, why.stdout
    running = as_user(ctl, "bob", "gpu-job why %s" % first)
    assert running.rc == 0 and "is RUNNING on " in running.stdout, running.stdout + running.stderr
    hidden = as_user(ctl, "alice", "gpu-job why %s" % second)
    assert hidden.rc == 2 and "second" not in hidden.stdout, (hidden.rc, hidden.stdout, hidden.stderr)
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


def registry_manifest_pulls(ctl, since):
    """The nodes' instance's GETs of a pytorch manifest since ``since`` (epoch seconds), per client address."""
    out = ctl.check_output("journalctl -u docker-registry -o cat --since @%d" % since)
    pulls = {}
    for line in out.splitlines():
        found = re.match(r'^(\S+) - \S+ \[[^]]*\] "GET /v2/pytorch/manifests/2\.0 ', line)
        if found:
            pulls[found.group(1)] = pulls.get(found.group(1), 0) + 1
    return pulls


def test_a_site_image_is_pulled_once_per_node_and_run_by_every_user(scenario, ctl, nodes, tmp_path):
    """An admin pushes an image once to the site registry; the user_tools role pulls it once into each GPU node's
    store; two users run it on both nodes, the way gpu-job's jobs run podman, and the registry sees no more pulls."""
    first = scenario.host(scenario.compute[0])
    # the test image with one more file: not an image the users already have (the same ID in a user's own store
    # would hide the node's copy of it)
    first.check_output("set -e; d=$(mktemp -d); cp /var/tmp/gpujob-image.tar $d/site.tar; echo site > $d/site-image; "
                       "tar -C $d -rf $d/site.tar ./site-image; podman import -q $d/site.tar localhost/site-test:1 "
                       ">/dev/null; rm -rf $d /srv/shared/site-test.tar; podman save -q --format oci-archive "
                       "-o /srv/shared/site-test.tar localhost/site-test:1")
    # the admin's push, on the registry host, to the admins' instance with the role's password
    ctl.check_output("skopeo login --tls-verify=false --username admin --password-stdin 127.0.0.1:5001 "
                     "< /etc/gpucluster/registry/admin.password && skopeo copy -q --dest-tls-verify=false "
                     "oci-archive:/srv/shared/site-test.tar docker://127.0.0.1:5001/pytorch:2.0")
    # without credentials the nodes' instance refuses a push (read-only), also from the registry host itself
    registry = scenario.groups["image_registry"][0]
    refused = ctl.run("skopeo copy -q oci-archive:/srv/shared/site-test.tar docker://%s:5000/pytorch:evil" % registry)
    assert refused.rc != 0, refused.stdout
    since = int(ctl.check_output("date +%s")) - 1
    for name in scenario.compute:
        scenario.host(name).run("podman --root %s --runroot /run/gpucluster-site-images rmi -f pytorch:2.0" % SITE_STORE)
    rc, out = scenario.playbook(tmp_path, USER_TOOLS, extra_vars={"user_tools_site_images": ["pytorch:2.0"]})
    assert rc == 0, out
    filled = registry_manifest_pulls(ctl, since)
    addresses = dict((name, ctl.check_output("getent hosts %s" % name).split()[0]) for name in scenario.compute)
    assert sorted(filled.get(a, 0) for a in addresses.values()) == [1] * len(addresses), (filled, addresses)
    # again: the role finds the image in each store and pulls nothing
    rc, out = scenario.playbook(tmp_path, USER_TOOLS, extra_vars={"user_tools_site_images": ["pytorch:2.0"]})
    assert rc == 0 and registry_manifest_pulls(ctl, since) == filled, out
    # the stores are mounted without setuid programs and device files
    for name in scenario.compute:
        options = scenario.host(name).check_output("findmnt -n -o OPTIONS --mountpoint %s" % os.path.dirname(SITE_STORE))
        assert {"nosuid", "nodev"} <= set(options.split(",")), (name, options)
    config = json.loads(ctl.check_output("cat /etc/gpucluster/gpu-job.json"))["runtime"]
    storage = " ".join("--storage-opt %s" % opt for opt in config["storage_opts"])
    for name in scenario.compute:
        for user in USERS:
            out = as_user(ctl, user, "srun -w %s --time=2 env -u XDG_RUNTIME_DIR %s --user-store %s podman %s run "
                          "--rm --network=host --cgroups=disabled pytorch:2.0 sh -c 'cat /site-image'"
                          % (name, HELPER, config["user_store"], storage))
            assert out.rc == 0 and out.stdout.strip().endswith("site"), (name, user, out.stdout, out.stderr)
            # the image is the node's, read-only, not a copy in the user's own store
            listed = as_user(ctl, user, "srun -w %s --time=2 env -u XDG_RUNTIME_DIR podman %s images --format "
                             "'{{.Repository}}:{{.Tag}} {{.ReadOnly}}'" % (name, storage))
            assert "%s:5000/pytorch:2.0 true" % registry in listed.stdout, listed.stdout
    assert registry_manifest_pulls(ctl, since) == filled
