"""A DGX node on Debian 12 from NVIDIA's repository, as its operator sees it: the driver, the fabric manager and NSCQ
of one version, DCGM 4 for CUDA 12 and NCCL 2.18.3-1+cuda12.2, all held and all from the site mirror
(built by playbooks/mirror.yml from the repository twins of prepare.yml, served over HTTP), although Debian's own non-free offers the same names.
"""

import json

import pytest

import repo_twin

# The site mirror that playbooks/mirror.yml built on the Debian 12 node from the twins of NVIDIA's repositories.
MIRROR = "http://deb12-gpu-stack:8080/cuda/debian12/x86_64"
TOOLKIT_MIRROR = "http://deb12-gpu-stack:8080/libnvidia-container/amd64"
BRANCH = "550"
# The newest version of the branch the twin offers: what the role chooses for nvidia_driver_branch "550".
DRIVER = max((d["version"] for d in repo_twin.load()["drivers"] if d["version"].startswith(BRANCH + ".")),
             key=lambda v: [int(p) for p in v.split(".")])
DRIVER_PACKAGES = ["nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1", "firmware-nvidia-gsp",
                   "nvidia-fabricmanager-550", "libnvidia-nscq-550"]
DCGM = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
NCCL = ["libnccl2", "libnccl-dev"]


@pytest.fixture(autouse=True)
def _dgx_only(host):
    if "dgx_nodes" not in host.ansible.get_variables()["group_names"]:
        pytest.skip("the DGX node's test (the other nodes take Debian's archive)")


def _want(host, package):
    return host.check_output("dpkg-query -W -f '${db:Status-Want}' %s" % package)


@pytest.mark.parametrize("package", DRIVER_PACKAGES)
def test_driver_fabric_manager_and_nscq_at_one_version_and_held(host, package):
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version == DRIVER + "-1"
    assert _want(host, package) == "hold"


def test_fabric_manager_is_enabled(host):
    assert host.service("nvidia-fabricmanager").is_enabled
    assert host.file("/usr/share/doc/nvidia-fabricmanager-550/gpucluster-twin").exists


@pytest.mark.parametrize("package", DCGM)
def test_dcgm_4_for_cuda_12_held(host, package):
    assert host.package(package).version.startswith("1:4.")
    assert _want(host, package) == "hold"
    assert host.service("nvidia-dcgm").is_enabled


@pytest.mark.parametrize("package", NCCL)
def test_nccl_2_18_3_for_cuda_12_2_held(host, package):
    assert host.package(package).version == "2.18.3-1+cuda12.2"
    assert _want(host, package) == "hold"


@pytest.mark.parametrize("package", ["nvidia-smi", "libcuda1", "nvidia-kernel-dkms"])
def test_debian_offers_the_same_names_yet_the_pin_keeps_them_out(host, package):
    """Debian's non-free (535) and a repository of Origin Debian with the branch's 550.163.01 (debian-builds.yml,
    above NVIDIA's version, which the branch pin alone would choose) offer the same names: apt's candidate stays
    NVIDIA's."""
    madison = host.check_output("apt-cache madison %s" % package)
    debian = [line.split("|")[1].strip() for line in madison.splitlines()
              if "deb.debian.org" in line or "file:/srv/debian-builds" in line]
    assert "550.163.01-1~deb12u1" in debian and [v for v in debian if v.startswith("535.")], madison
    policy = host.check_output("apt-cache policy %s" % package)
    assert "Candidate: %s-1" % DRIVER in policy, policy
    assert host.package(package).version == DRIVER + "-1"


def test_every_nvidia_package_came_from_the_mirror(host):
    """Every package apt installed whose name NVIDIA's repositories have (the twin's manifest) is at a version that only
    the mirrors offer; Debian's CUDA toolkit beside it comes from Debian."""
    history = host.file("/var/log/apt/history.log").content_string
    installed = {}
    for line in history.splitlines():
        if line.startswith("Install: ") or line.startswith("Upgrade: "):
            for item in line.split(": ", 1)[1].split("), "):
                name, version = item.split(" (", 1)
                # "(550.90.07-1)", "(11.8.89~11.8.0-5~deb12u1, automatic)", "(old, new)" for an upgrade
                versions = version.rstrip(")").split(", ")
                installed[name.split(":")[0]] = versions[1] if line.startswith("Upgrade: ") else versions[0]
    names = {package["name"] for package in repo_twin.expand(repo_twin.load())}
    nvidia = {name: version for name, version in installed.items() if name in names}
    assert set(DRIVER_PACKAGES + DCGM + NCCL) <= set(nvidia)
    for name, version in sorted(nvidia.items()):
        sources = [line.split("|")[2].strip() for line in host.check_output("apt-cache madison %s" % name).splitlines()
                   if line.split("|")[1].strip() == version]
        assert sources and all(source.startswith((MIRROR, TOOLKIT_MIRROR)) for source in sources), (name, version, sources)
        assert host.file("/usr/share/doc/%s/gpucluster-twin" % name).exists, name


def test_no_debian_driver_components_of_the_distribution_method(host):
    assert not host.file("/etc/apt/sources.list.d/gpucluster-nvidia.sources").exists
    assert host.file("/etc/apt/sources.list.d/gpucluster-cuda-debian12.sources").contains("URIs: %s/" % MIRROR)


def test_stack_fact_reports_the_driver_and_nccl(host):
    fact = json.loads(host.check_output("/etc/ansible/facts.d/gpucluster_gpu_stack.fact"))
    assert fact["driver"]["installed"] == DRIVER
    assert fact["nccl"]["package_version"] == "2.18.3-1+cuda12.2"


TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1",
           "libnvidia-container-tools"]


@pytest.mark.parametrize("package", TOOLKIT)
def test_container_toolkit_at_one_version_held_from_its_mirror(host, package):
    pkg = host.package(package)
    assert pkg.is_installed and pkg.version == "1.16.1-1"
    assert _want(host, package) == "hold"
    sources = host.check_output("apt-cache madison %s" % package)
    assert TOOLKIT_MIRROR in sources
    assert host.file("/usr/bin/nvidia-ctk").exists or package != "nvidia-container-toolkit-base"


def test_debians_cuda_toolkit_beside_nvidias_driver(host):
    """The pin keeps Debian's builds of the driver's packages out, not Debian's CUDA toolkit."""
    assert host.package("nvidia-cuda-toolkit").is_installed
    assert "release 11.8" in host.check_output("nvcc --version")
