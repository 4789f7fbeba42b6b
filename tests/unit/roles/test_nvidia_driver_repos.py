"""The repository definitions, keys, pins and package choices nvidia_driver writes for each OS and method."""

import re

import pytest

from .rolerender import DEBIAN13, RHEL9, ROCKY8_ARM, UBUNTU_2204, UBUNTU_2404, RoleRender

NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"


def role(os_vars, facts, **overrides):
    return RoleRender("nvidia_driver", os_vars, facts, **overrides)


@pytest.mark.parametrize("facts,dist", [(UBUNTU_2204, "ubuntu2204"), (UBUNTU_2404, "ubuntu2404")])
def test_ubuntu_cuda_repo_source_and_key(facts, dist):
    r = role("Ubuntu.yml", facts, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550")
    source = r.template("cuda-repo.sources.j2")
    assert source.startswith("#")
    assert "URIs: %s/%s/x86_64/\n" % (NVIDIA, dist) in source
    assert "Suites: /\n" in source
    assert "Signed-By: /etc/apt/keyrings/cuda-archive-keyring.asc" in source
    assert r.var("__nvidia_driver_key_url") == "%s/%s/x86_64/3bf863cc.pub" % (NVIDIA, dist)


def test_a_mirror_replaces_nvidias_server_for_repo_and_key():
    r = role("Ubuntu.yml", UBUNTU_2204, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             nvidia_driver_mirror_url="http://mirror.cluster.internal/cuda/")
    source = r.template("cuda-repo.sources.j2")
    assert "URIs: http://mirror.cluster.internal/cuda/ubuntu2204/x86_64/\n" in source
    assert "(local mirror)" in source and "developer.download.nvidia.com" not in source
    assert r.var("__nvidia_driver_key_url") == "http://mirror.cluster.internal/cuda/ubuntu2204/x86_64/3bf863cc.pub"


def test_an_unsigned_test_mirror_is_marked_trusted_and_needs_no_key():
    r = role("Ubuntu.yml", UBUNTU_2204, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             nvidia_driver_mirror_url="file:///srv/mirror", nvidia_driver_repo_trusted=True)
    source = r.template("cuda-repo.sources.j2")
    assert "URIs: file:///srv/mirror/ubuntu2204/x86_64/" in source
    assert "Trusted: yes" in source and "Signed-By" not in source


@pytest.mark.parametrize("facts,path", [(RHEL9, "rhel9/x86_64"), (ROCKY8_ARM, "rhel8/sbsa")])
def test_rhel_repo_path_key_and_module_stream(facts, path):
    r = role("RedHat.yml", facts, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550")
    assert r.var("__nvidia_driver_cuda_repo_path") == "%s/%s" % (NVIDIA, path)
    assert r.var("__nvidia_driver_key_url") == "%s/%s/D42D0685.pub" % (NVIDIA, path)
    assert r.var("__nvidia_driver_module_stream") == "nvidia-driver:550-dkms"
    r = role("RedHat.yml", facts, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             nvidia_driver_kernel_module="open")
    assert r.var("__nvidia_driver_module_stream") == "nvidia-driver:550-open"
    assert r.var("__nvidia_driver_headers_package") == "kernel-devel-" + facts["kernel"]


def test_explicit_key_url_wins():
    r = role("RedHat.yml", RHEL9, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             nvidia_driver_repo_key_url="https://keys.example/nvidia.pub")
    assert r.var("__nvidia_driver_key_url") == "https://keys.example/nvidia.pub"


@pytest.mark.parametrize("method,module,expected", [
    ("distribution", "proprietary", ["nvidia-headless-550-server", "nvidia-utils-550-server"]),
    ("distribution", "open", ["nvidia-headless-550-server-open", "nvidia-utils-550-server"]),
    ("cuda_repo", "proprietary", ["cuda-drivers-550"]),
    ("cuda_repo", "open", ["nvidia-open-550"]),
])
def test_ubuntu_package_choice(method, module, expected):
    r = role("Ubuntu.yml", UBUNTU_2404, nvidia_driver_method=method, nvidia_driver_branch="550",
             nvidia_driver_kernel_module=module)
    assert r.var("__nvidia_driver_packages")[module] == expected
    assert r.var("__nvidia_driver_fabricmanager_packages") == ["nvidia-fabricmanager-550", "libnvidia-nscq-550"]


def test_debian_components_source_with_security_and_with_a_mirror():
    r = role("Debian.yml", DEBIAN13)
    source = r.template("debian-nvidia.sources.j2")
    assert "Suites: trixie trixie-updates\n" in source
    assert "Components: contrib non-free non-free-firmware\n" in source
    assert "URIs: http://deb.debian.org/debian-security\nSuites: trixie-security" in source
    assert source.count("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg") == 2
    r = role("Debian.yml", DEBIAN13, nvidia_driver_mirror_url="http://mirror.cluster.internal/debian")
    source = r.template("debian-nvidia.sources.j2")
    assert "URIs: http://mirror.cluster.internal/debian\n" in source
    assert "debian-security" not in source and "deb.debian.org" not in source


@pytest.mark.parametrize("overrides,pin", [
    ({"nvidia_driver_branch": "550"}, "Pin: version 550.*"),
    ({"nvidia_driver_version": "550.163.01"}, "Pin: version 550.163.01-*"),
])
def test_apt_pin(overrides, pin):
    r = role("Debian.yml", DEBIAN13, **overrides)
    text = r.template("apt-preferences.j2")
    assert pin in text and "Pin-Priority: 1001" in text
    # the driver's own packages, and the packages of the same version they depend on exactly (nvidia-alternative,
    # libnvidia-ptxjitcompiler1, ...): without those a version that is not apt's candidate cannot install
    assert "Package: nvidia-kernel-dkms nvidia-smi libnvidia-ml1 libcuda1 firmware-nvidia-gsp nvidia-* libnvidia-*\n" in text


def test_backports_suite_only_when_asked():
    plain = role("Debian.yml", DEBIAN13).template("debian-nvidia.sources.j2")
    with_backports = role("Debian.yml", DEBIAN13, nvidia_driver_debian_backports=True).template("debian-nvidia.sources.j2")
    assert "-backports" not in plain
    assert re.search(r"^Suites: (\S+) \1-updates \1-backports$", with_backports, re.M), with_backports


def test_module_options_one_line_per_module_sorted():
    r = role("Debian.yml", DEBIAN13, nvidia_driver_module_params={
        "nvidia": {"NVreg_RegistryDwords": "RMCpuAffinity=1", "NVreg_EnableStreamMemOPs": 1}, "nvidia_uvm": {}})
    text = r.template("nvidia-options.conf.j2")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == ["options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=RMCpuAffinity=1"]


def _debian12():
    return dict(DEBIAN13, distribution_version="12.12", distribution_major_version="12", distribution_release="bookworm")


@pytest.mark.parametrize("module,kernel_package", [("proprietary", "nvidia-kernel-dkms"),
                                                   ("open", "nvidia-kernel-open-dkms")])
def test_debian_cuda_repo_takes_nvidias_names_and_the_fabric_manager_of_the_branch(module, kernel_package):
    r = role("Debian.yml", _debian12(), nvidia_driver_method="cuda_repo", nvidia_driver_version="550.90.07",
             nvidia_driver_kernel_module=module)
    assert r.var("__nvidia_driver_packages")[module][0] == kernel_package
    assert r.var("__nvidia_driver_kernel_module_package")[module] == kernel_package
    # the branch comes from the version when no branch is set
    assert r.var("__nvidia_driver_fabricmanager_packages") == ["nvidia-fabricmanager-550", "libnvidia-nscq-550"]
    assert r.var("__nvidia_driver_cuda_repo_path") == NVIDIA + "/debian12/x86_64"
    assert r.var("__nvidia_driver_key_url") == NVIDIA + "/debian12/x86_64/3bf863cc.pub"


def test_debian_distribution_method_has_no_fabric_manager_and_debians_open_module_name():
    r = role("Debian.yml", DEBIAN13, nvidia_driver_kernel_module="open")
    assert r.var("__nvidia_driver_fabricmanager_packages") == []
    assert r.var("__nvidia_driver_kernel_module_package")["open"] == "nvidia-open-kernel-dkms"


def test_cuda_repo_pin_keeps_the_distributions_builds_out_before_the_version_pin():
    r = role("Debian.yml", DEBIAN13, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             nvidia_driver_mirror_url="file:///srv/nvidia-mirror")
    text = r.template("apt-preferences.j2")
    block = text.index("Pin: release o=Debian\nPin-Priority: -1")
    version = text.index("Pin: version 550.*\nPin-Priority: 1001")
    assert block < version, "apt takes the first entry that matches a version"
    blocked = re.search(r"^Package: (.*)\nPin: release o=Debian$", text, re.M).group(1).split()
    assert {"nvidia-fabricmanager-550", "libnvidia-nscq-550", "nvidia-smi", "libcuda1", "nvidia-kernel-open-dkms",
            "nvidia-open-kernel-dkms", "nvidia-persistenced"} <= set(blocked)
    # names, not globs: Debian's CUDA toolkit and the driver's helper packages of their own versions stay available
    assert not [name for name in blocked if "*" in name]
    assert not {"nvidia-cuda-toolkit", "nvidia-kernel-common", "nvidia-support"} & set(blocked)
    assert "file:///srv/nvidia-mirror/debian13/x86_64" in text
    # the distribution method blocks nothing
    assert "Pin: release" not in role("Debian.yml", DEBIAN13, nvidia_driver_branch="550").template("apt-preferences.j2")


def test_the_site_mirror_of_mirror_yml_is_one_variable_for_the_repository_and_its_key():
    r = role("Debian.yml", DEBIAN13, nvidia_driver_method="cuda_repo", nvidia_driver_branch="550",
             gpucluster_mirror_url="http://admin01.cluster.internal:8080/")
    assert "URIs: http://admin01.cluster.internal:8080/cuda/debian13/x86_64/\n" in r.template("cuda-repo.sources.j2")
    assert r.var("__nvidia_driver_key_url") == "http://admin01.cluster.internal:8080/gpucluster-mirror.asc"
    # the distribution method keeps the distribution's archive
    plain = role("Debian.yml", DEBIAN13, nvidia_driver_branch="550", gpucluster_mirror_url="http://admin01:8080")
    assert plain.var("nvidia_driver_mirror_url") == "" and plain.var("nvidia_driver_repo_key_url") == ""
