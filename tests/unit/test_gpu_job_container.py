"""bin/gpu-job-container (the job step's helper) and bin/gpu-cdi-ldcache (the CDI spec's ldcache hook), run as the
programs they are: the devices a step gets from its allocation, gres.conf and the CDI spec, the runtime run as a
child with its exit status, the refusals; the hook's loader config in a container root and its refusal to follow a
symlink out of it."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _cdi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HELPER = os.path.join(ROOT, "bin", "gpu-job-container")
HOOK = os.path.join(ROOT, "bin", "gpu-cdi-ldcache")
GPUS = [{"index": 0, "minor_number": 2, "uuid": "GPU-00000000-0000-0000-0000-000000000002"},
        {"index": 1, "minor_number": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000"},
        {"index": 2, "minor_number": 1, "uuid": "GPU-00000000-0000-0000-0000-000000000001"}]


@pytest.fixture(name="node")
def fixture_node(tmp_path):
    """A node's Slurm config directory (gres.conf: File= order is not the minor order), CDI spec, NCCL config and a
    fake runtime that prints its arguments."""
    conf = tmp_path / "slurm"
    conf.mkdir()
    (conf / "gres.conf").write_text("NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia1\n"
                                    "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0,2]\n")
    spec = _cdi.build(GPUS, ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.1"], [], [], "/hook")
    (tmp_path / "nvidia.yaml").write_text(_cdi.dumps(spec))
    (tmp_path / "nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    runtime = tmp_path / "podman"
    runtime.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\nexit ${EXIT:-0}\n")
    runtime.chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % tmp_path, "SLURMD_NODENAME": "gpu01",
           "SLURM_CONF": str(conf / "slurm.conf"), "PYTHONPATH": ""}
    return tmp_path, env


def helper(node, environ, *run_args):
    tmp_path, env = node
    argv = [sys.executable, HELPER, "--cdi-spec", str(tmp_path / "nvidia.yaml"), "--nccl-conf",
            str(tmp_path / "nccl.conf"), "podman", "run", "--rm"] + list(run_args) + ["img:1", "sh", "-c", "true"]
    return subprocess.run(argv, env=dict(env, **environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)


def test_the_step_gets_the_devices_of_its_gpus_by_minor_and_the_nccl_config(node):
    # Slurm's device numbers 0 and 2: /dev/nvidia0 and /dev/nvidia2, nvidia-smi's GPUs 1 and 0; SLURM_JOB_GPUS (the
    # batch node's, passed on to every node of a job) is not read
    done = helper(node, {"SLURM_STEP_GPUS": "0,2", "SLURM_JOB_GPUS": "1"})
    assert done.returncode == 0, done.stderr
    infiniband = ["--device", "/dev/infiniband"] if os.path.isdir("/dev/infiniband") else []
    assert done.stdout.splitlines() == [
        "run", "--device", "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000",
        "--device", "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000002"] + infiniband + [
        "--volume", "%s:/etc/nccl.conf:ro" % (node[0] / "nccl.conf"), "--rm", "img:1", "sh", "-c", "true"]


def test_a_step_without_gpus_gets_no_gpu_device_and_the_runtimes_exit_status_is_the_jobs(node):
    done = helper(node, {"EXIT": "3"})
    assert done.returncode == 3, done.stderr
    assert not [a for a in done.stdout.splitlines() if a.startswith("nvidia.com/")]


@pytest.mark.parametrize("environ, message", [
    ({"SLURM_STEP_GPUS": "5"}, "Slurm allocated /dev/nvidia5 on gpu01, which this node's gres.conf does not name"),
    # a node gres.conf names no files for (AutoDetect): the spec still has no /dev/nvidia7
    ({"SLURM_STEP_GPUS": "7", "SLURMD_NODENAME": "gpu09"}, "has no device for /dev/nvidia7 (a GPU of this job on gpu09)"),
    ({"SLURM_STEP_GPUS": "NoDevFiles"}, "without device files (NoDevFiles)"),
])
def test_an_allocation_that_cannot_be_given_stops_the_step_before_the_runtime(node, environ, message):
    done = helper(node, environ)
    assert done.returncode == 127 and done.stdout == "", (done.stdout, done.stderr)
    assert message in done.stderr, done.stderr


def test_a_missing_spec_stops_a_gpu_step(node):
    os.unlink(str(node[0] / "nvidia.yaml"))
    done = helper(node, {"SLURM_STEP_GPUS": "0"})
    assert done.returncode == 127 and "cannot read the CDI spec" in done.stderr and "container_toolkit role" in done.stderr


def _bundle(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "lib").mkdir(parents=True)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "../rootfs"}}))
    return rootfs, json.dumps({"ociVersion": "1.0.2", "id": "c", "status": "creating", "bundle": str(bundle)})


def hook(args, state):
    return subprocess.run([sys.executable, HOOK] + args, input=state, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="ldconfig -r chroots: root")
def test_the_hook_adds_the_folders_to_the_containers_loader(tmp_path):
    rootfs, state = _bundle(tmp_path)
    done = hook(["--folder", "/usr/lib/x86_64-linux-gnu/nvidia/current", "--folder", "/usr/lib"], state)
    assert done.returncode == 0, done.stderr
    assert (rootfs / "etc" / "ld.so.conf.d" / "00-gpucluster-cdi.conf").read_text().splitlines()[1:] == [
        "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib"]
    assert (rootfs / "etc" / "ld.so.cache").exists()


def test_the_hook_never_writes_through_a_symlink_out_of_the_container(tmp_path):
    rootfs, state = _bundle(tmp_path)
    outside = tmp_path / "host-etc"
    outside.mkdir()
    os.symlink(str(outside), str(rootfs / "etc"))
    done = hook(["--folder", "/usr/lib"], state)
    assert done.returncode == 1 and "cannot write the container's etc/ld.so.conf.d" in done.stderr, done.stderr
    assert os.listdir(str(outside)) == []


def test_the_hook_never_waits_on_a_fifo_the_image_put_in_place_of_its_file(tmp_path):
    rootfs, state = _bundle(tmp_path)
    (rootfs / "etc" / "ld.so.conf.d").mkdir(parents=True)
    os.mkfifo(str(rootfs / "etc" / "ld.so.conf.d" / "00-gpucluster-cdi.conf"))
    done = subprocess.run([sys.executable, HOOK, "--folder", "/usr/lib"], input=state, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False, timeout=20)
    assert done.returncode == 1 and "cannot write the container's" in done.stderr, done.stderr


@pytest.mark.parametrize("args", [[], ["--folder", "relative/lib"], ["--other"]])
def test_the_hook_refuses_bad_arguments(tmp_path, args):
    _rootfs, state = _bundle(tmp_path)
    done = hook(args, state)
    assert done.returncode == 1 and done.stderr.startswith("gpu-cdi-ldcache: "), done.stderr


def test_the_runtimes_global_options_stay_before_run_and_the_users_store_is_checked(node, tmp_path):
    tmp, env = node
    store = tmp_path / "users"
    store.mkdir()
    argv = [sys.executable, HELPER, "--cdi-spec", str(tmp / "nvidia.yaml"), "--user-store", str(store), "podman",
            "--storage-opt", "vfs.imagestore=/site", "run", "--rm", "img:1"]
    missing = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                             check=False)
    user = str(os.getuid())
    assert missing.returncode == 127 and "your image store %s/%s does not exist on this node" % (store, user) \
        in missing.stderr, missing.stderr
    (store / user).mkdir(mode=0o777)
    os.chmod(str(store / user), 0o777)
    writable = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False)
    assert writable.returncode == 127 and "is not a directory of yours that only you can write" in writable.stderr
    os.chmod(str(store / user), 0o700)
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == ["--storage-opt", "vfs.imagestore=/site", "run"]
