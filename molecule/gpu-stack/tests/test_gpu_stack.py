"""The GPU stack as a user of the node sees it: packages at the pinned versions, held, usable tools."""

import json

import pytest

DRIVER = {"debian12": "535.", "debian13": "550.163.01"}
CUDA = {"debian12": "11.8", "debian13": "12.4"}


def _release(host):
    groups = host.ansible.get_variables()["group_names"]
    return "debian13" if "debian13" in groups else "debian12"


@pytest.mark.parametrize("package", ["nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-kernel-dkms"])
def test_driver_packages_at_the_pinned_version_and_held(host, package):
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version.startswith(DRIVER[_release(host)])
    assert host.check_output("dpkg-query -W -f '${db:Status-Want}' %s" % package) == "hold"


def test_apt_pin_keeps_the_branch(host):
    release = _release(host)
    pin = host.file("/etc/apt/preferences.d/gpucluster-nvidia-driver")
    assert pin.exists
    want = "550.163.01-*" if release == "debian13" else "535.*"
    assert "Pin: version %s" % want in pin.content_string
    # apt itself agrees: the candidate stays on the pinned version
    policy = host.check_output("apt-cache policy nvidia-smi")
    assert "Candidate: " + DRIVER[release] in policy


def test_libnvidia_ml_is_loadable_by_the_linker(host):
    assert "libnvidia-ml.so.1" in host.check_output("ldconfig -p")


def test_nvidia_smi_runs_and_says_there_is_no_driver_here(host):
    out = host.run("nvidia-smi")
    assert out.rc == 9
    assert "couldn't communicate with the NVIDIA driver" in out.stdout


def test_nouveau_blacklisted_and_module_options(host):
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/gpucluster-blacklist-nouveau.conf").content_string
    options = host.file("/etc/modprobe.d/gpucluster-nvidia-options.conf").content_string
    assert "options nvidia NVreg_EnableStreamMemOPs=1" in options


def test_persistenced_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_nvcc_reports_the_distribution_version_and_compiles(host):
    release = _release(host)
    out = host.check_output("nvcc --version")
    assert "release %s" % CUDA[release] in out
    host.run("printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\\n"
             "int main() { k<<<1, 32>>>(0); return 0; }\\n' > /tmp/gpucluster-k.cu")
    build = host.run("cd /tmp && nvcc -o gpucluster-k gpucluster-k.cu")
    assert build.rc == 0, build.stderr
    assert host.file("/tmp/gpucluster-k").exists


def test_cuda_environment_for_login_shells(host):
    assert host.file("/etc/profile.d/gpucluster-cuda.sh").contains("CUDA_HOME=/usr/lib/nvidia-cuda-toolkit")
    assert host.check_output("bash -lc 'echo $CUDA_HOME'") == "/usr/lib/nvidia-cuda-toolkit"


def test_stack_fact_reports_what_is_installed(host):
    release = _release(host)
    fact = json.loads(host.check_output("/etc/ansible/facts.d/gpucluster_gpu_stack.fact"))
    assert fact["driver"]["installed"].startswith(DRIVER[release].rstrip("."))
    assert fact["driver"]["loaded"] is None
    assert CUDA[release] in [c["version"] for c in fact["cuda"]]
    if release == "debian13":
        assert fact["nccl"]["installed"] == "2.22.3"
    else:
        assert fact["nccl"]["installed"] is None


def test_nccl_on_debian13(host):
    if _release(host) != "debian13":
        pytest.skip("Debian 12 does not package NCCL")
    assert host.package("libnccl2").version.startswith("2.22.3")
    assert "libnccl.so.2" in host.check_output("ldconfig -p")
    conf = host.file("/etc/nccl.conf").content_string
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in conf and "NCCL_IB_GID_INDEX=3" in conf
    assert host.check_output("dpkg-query -W -f '${db:Status-Want}' libnccl2") == "hold"
