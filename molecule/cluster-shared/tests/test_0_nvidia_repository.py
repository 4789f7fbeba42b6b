"""The Debian 12 cluster's GPU nodes are DGX/HGX nodes from NVIDIA's repositories, as their operator sees them
(group_vars/debian12.yml, docs/dgx-nodes.md): the driver, the fabric manager and NSCQ of one version, DCGM 4 for CUDA
12, NCCL 2.18.3-1+cuda12.2 and the container toolkit, all held and all from the site mirror that playbooks/mirror.yml
built on the head node from the repository twins (prepare.yml), served over HTTP, although Debian's own non-free
and a repository of Origin Debian offer some of the same names. The mirror holds exactly what the nodes pin, signed
with a key of its own that the nodes trust instead of NVIDIA's; a rerun of mirror.yml changes nothing; --check on a
new mirror says what it would copy and creates nothing; a new pin is named in --check without any change. site.yml
--check on a new node (the spare) says what it would install from the mirror and changes nothing. (A rerun of the
GPU stack's roles changing nothing: test_0_site.py; the refusals: test_4_bad_input_nvidia_repository.py; the new
pin joining the mirror and the rolling upgrade: test_9_rolling_upgrade.py.)
"""

import json
import os

import pytest

import repo_twin
from bad_input import changed_tasks
from conftest import ROOT, spare_inventory

pytestmark = pytest.mark.release("debian12")

HTTP = "http://deb12-cluster-head:8080"
MIRROR = HTTP + "/cuda/debian12/x86_64"
TOOLKIT_MIRROR = HTTP + "/libnvidia-container/amd64"
CUDA = "/srv/gpucluster-mirror/cuda/debian12/x86_64"
TOOLKIT_DIR = "/srv/gpucluster-mirror/libnvidia-container/amd64"
MIRROR_NODES = "gpu_nodes:cluster_spare:&debian12"
DRIVER = "550.54.15"                    # nvidia_driver_version of group_vars/debian12.yml
UPGRADE = "550.90.07"                   # test_9_rolling_upgrade's, which a kept cluster's mirror may hold too
UNPINNED = "550.54.14"                  # a version of the branch that no test pins
DRIVER_PACKAGES = ["nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1", "firmware-nvidia-gsp",
                   "nvidia-fabricmanager-550", "libnvidia-nscq-550"]
DRIVER_FAMILY = DRIVER_PACKAGES + ["nvidia-persistenced", "nvidia-modprobe"]
DCGM = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
NCCL = ["libnccl2", "libnccl-dev"]
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1",
           "libnvidia-container-tools"]
PINNED = ({(name, DRIVER + "-1") for name in DRIVER_FAMILY} | {(name, "1:4.4.1-1") for name in DCGM}
          | {(name, "2.18.3-1+cuda12.2") for name in NCCL})


@pytest.fixture(scope="module")
def nodes(scenario):
    return scenario.compute


@pytest.fixture(scope="module")
def head(scenario):
    assert scenario.groups["mirror_hosts"] == [scenario.controller]
    return scenario.host(scenario.controller)


def _want(host, package):
    return host.check_output("dpkg-query -W -f '${db:Status-Want}' %s" % package)


def _debs(head, directory):
    """{(name, version)} of the package files in a repository directory of the mirror host."""
    out = head.check_output("for f in %s/*.deb; do dpkg-deb --show --showformat '${Package} ${Version}\\n' \"$f\"; done"
                            % directory)
    return {tuple(line.split()) for line in out.splitlines()}


def _mirror(scenario, tmp_path, check=False, **extra):
    return scenario.playbook(tmp_path, os.path.join(ROOT, "playbooks", "mirror.yml"),
                             extra_vars=dict({"mirror_nodes": MIRROR_NODES}, **extra), args=["--check"] if check else [])


def test_driver_fabric_manager_nscq_dcgm_nccl_and_toolkit_at_their_pins_and_held(scenario, nodes):
    wanted = dict([(name, DRIVER + "-1") for name in DRIVER_PACKAGES] + [(name, "1:4.4.1-1") for name in DCGM]
                  + [(name, "2.18.3-1+cuda12.2") for name in NCCL] + [(name, "1.16.1-1") for name in TOOLKIT])
    query = "dpkg-query -W -f '${Package} ${Version} ${db:Status-Want}\\n' " + " ".join(sorted(wanted))
    for node in nodes:
        host = scenario.host(node)
        found = {line.split()[0]: tuple(line.split()[1:]) for line in host.check_output(query).splitlines()}
        assert found == {name: (version, "hold") for name, version in wanted.items()}, (node, found)
        assert host.service("nvidia-fabricmanager").is_enabled and host.service("nvidia-dcgm").is_enabled, node
        assert host.file("/usr/bin/nvidia-ctk").exists, node
        fact = json.loads(host.check_output("/etc/ansible/facts.d/gpucluster_gpu_stack.fact"))
        assert fact["driver"]["installed"] == DRIVER and fact["nccl"]["package_version"] == "2.18.3-1+cuda12.2", fact


@pytest.mark.parametrize("package", ["nvidia-smi", "libcuda1", "nvidia-kernel-dkms"])
def test_debian_offers_the_same_names_yet_the_pin_keeps_them_out(scenario, nodes, package):
    """Debian's non-free (535) and a repository of Origin Debian with 550.163.01 (debian-builds.yml, above NVIDIA's
    versions of the branch) offer the same names: apt's candidate stays NVIDIA's, from the mirror."""
    host = scenario.host(nodes[0])
    madison = host.check_output("apt-cache madison %s" % package)
    debian = [line.split("|")[1].strip() for line in madison.splitlines()
              if "deb.debian.org" in line or "file:/srv/debian-builds" in line]
    assert "550.163.01-1~deb12u1" in debian and [v for v in debian if v.startswith("535.")], madison
    policy = host.check_output("apt-cache policy %s" % package)
    assert "Candidate: %s-1" % DRIVER in policy, policy


def test_every_nvidia_package_came_from_the_mirror(scenario, nodes):
    """Every package apt installed whose name NVIDIA's repositories have (the twin's manifest) is at a version that only
    the mirror offers, and is the twin's."""
    names = {package["name"] for package in repo_twin.expand(repo_twin.load())}
    for node in nodes:
        host = scenario.host(node)
        installed = {}
        for line in host.file("/var/log/apt/history.log").content_string.splitlines():
            if line.startswith(("Install: ", "Upgrade: ")):
                for item in line.split(": ", 1)[1].split("), "):
                    name, version = item.split(" (", 1)
                    # "(550.54.15-1)", "(2.36-9+deb12u4, automatic)", "(old, new)" for an upgrade
                    versions = version.rstrip(")").split(", ")
                    installed[name.split(":")[0]] = versions[1] if line.startswith("Upgrade: ") else versions[0]
        nvidia = {name: version for name, version in installed.items() if name in names}
        assert set(DRIVER_PACKAGES + DCGM + NCCL + TOOLKIT) <= set(nvidia), (node, nvidia)
        for name, version in sorted(nvidia.items()):
            sources = [line.split("|")[2].strip() for line in host.check_output("apt-cache madison %s" % name).splitlines()
                       if line.split("|")[1].strip() == version]
            assert sources and all(s.startswith((MIRROR, TOOLKIT_MIRROR)) for s in sources), (node, name, version, sources)
            assert host.file("/usr/share/doc/%s/gpucluster-twin" % name).exists, (node, name)
        assert host.file("/etc/apt/sources.list.d/gpucluster-cuda-debian12.sources").contains("URIs: %s/" % MIRROR)
        assert not host.file("/etc/apt/sources.list.d/gpucluster-nvidia.sources").exists


def test_debians_cuda_toolkit_stays_installable_beside_nvidias_driver(scenario, nodes):
    """The pins keep Debian's builds of the driver's packages out, not Debian's CUDA toolkit: apt would install it
    without touching a held package (simulated; the gpu-stack scenario installs it from Debian's archive)."""
    out = scenario.host(nodes[0]).check_output("apt-get install -s -o Debug::NoLocking=1 nvidia-cuda-toolkit")
    assert "Inst nvidia-cuda-toolkit " in out, out
    touched = [line for line in out.splitlines() if line.startswith(("Inst ", "Remv "))
               and line.split()[1] in DRIVER_FAMILY + DCGM + NCCL + TOOLKIT]
    assert touched == [], touched


def test_the_mirror_holds_exactly_what_the_nodes_pin(head):
    held = _debs(head, CUDA)
    # a kept cluster's mirror also holds test_9_rolling_upgrade's pin
    assert PINNED <= held and held - PINNED <= {(name, UPGRADE + "-1") for name in DRIVER_FAMILY}, held
    upstream = _debs(head, "/srv/nvidia-upstream/debian12/x86_64")
    assert held < upstream and len(upstream) > 2 * len(held)
    assert _debs(head, TOOLKIT_DIR) == {(name, "1.16.1-1") for name in TOOLKIT}


def test_the_mirror_is_signed_with_its_own_key_which_the_nodes_trust(scenario, head, nodes):
    key = head.check_output("cat /srv/gpucluster-mirror/gpucluster-mirror.asc")
    head.check_output("gpg --dearmor < /srv/gpucluster-mirror/gpucluster-mirror.asc > /tmp/mirror.gpg"
                      " && gpgv --keyring /tmp/mirror.gpg %s/InRelease" % CUDA)
    # NVIDIA's key (the twin's) does not verify it: the mirror's index is its own.
    upstream_key = "/srv/nvidia-upstream/debian12/x86_64/3bf863cc.pub"
    assert head.run("gpg --dearmor < %s > /tmp/up.gpg && gpgv --keyring /tmp/up.gpg %s/InRelease"
                    % (upstream_key, CUDA)).rc != 0
    for node in nodes:
        host = scenario.host(node)
        assert host.check_output("cat /etc/apt/keyrings/cuda-archive-keyring.asc") == key, node
        assert host.check_output("cat /etc/apt/keyrings/nvidia-container-toolkit.asc") == key, node


def test_the_nodes_read_the_mirror_over_http(scenario, head, nodes):
    log = head.check_output("cat /var/log/gpucluster-mirror/access.log")
    for node in nodes:
        address = scenario.host(node).check_output("hostname -i").split()[0]
        for path in ["/cuda/debian12/x86_64/InRelease",
                     "/cuda/debian12/x86_64/./nvidia-fabricmanager-550_%s-1_amd64.deb" % DRIVER,
                     "/cuda/debian12/x86_64/./libnccl2_2.18.3-1%2bcuda12.2_amd64.deb",
                     "/libnvidia-container/amd64/./nvidia-container-toolkit_1.16.1-1_amd64.deb"]:
            assert any(line.startswith(address + " ") and ('"GET %s HTTP' % path) in line and '" 200 ' in line
                       for line in log.splitlines()), (node, path, log[-3000:])


def test_a_rerun_of_the_mirror_changes_nothing(scenario, tmp_path):
    rc, out = _mirror(scenario, tmp_path)
    assert rc == 0 and not changed_tasks(out), out


def test_check_mode_on_a_new_mirror_says_what_it_would_copy_and_creates_nothing(scenario, head, tmp_path):
    rc, out = _mirror(scenario, tmp_path, check=True, site_mirror_root="/srv/new-mirror",
                      site_mirror_state_dir="/var/lib/new-mirror")
    assert rc == 0, out
    assert "cuda/debian12/x86_64: would add" in out and "nvidia-fabricmanager-550_%s-1_amd64.deb" % DRIVER in out, out
    assert "libnvidia-container/amd64: would add" in out, out
    assert head.run("ls -d /srv/new-mirror").rc != 0 and head.run("ls -d /var/lib/new-mirror").rc != 0


def test_check_mode_names_what_a_new_pin_adds_and_changes_nothing(scenario, head, tmp_path):
    before = head.check_output("find /srv/gpucluster-mirror -type f | sort | xargs sha256sum")
    rc, out = _mirror(scenario, tmp_path, check=True, nvidia_driver_version=UNPINNED)
    assert rc == 0, out
    assert "cuda/debian12/x86_64: would add" in out and "nvidia-fabricmanager-550_%s-1_amd64.deb" % UNPINNED in out, out
    assert head.check_output("find /srv/gpucluster-mirror -type f | sort | xargs sha256sum") == before


def test_check_mode_on_a_new_node_says_what_it_would_install_and_changes_nothing(scenario, tmp_path):
    spare = scenario.host(scenario.spare)
    if spare.run("dpkg-query -W libnvidia-ml1").rc == 0:
        pytest.skip("a kept cluster: test_8_add_node.py already installed the GPU stack on the spare")
    state = ("ls /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/keyrings 2>&1; dpkg --get-selections;"
             " ls /var/cache/apt/archives")
    before = spare.check_output(state)
    rc, out = scenario.playbook(tmp_path, extra_inventory=spare_inventory(scenario), limit=[scenario.spare],
                                args=["--check", "--tags", "gpu_stack"])
    assert rc == 0, out
    flat = " ".join(out.split())
    for packages in ["nvidia-fabricmanager-550=%s-1" % DRIVER, "libnccl2=2.18.3-1+cuda12.2",
                     "datacenter-gpu-manager-4-core=1:4.4.1-1", "nvidia-container-toolkit=1.16.1-1"]:
        assert "would install" in flat and packages in flat, (packages, out)
    # the site summary says what would be, not what was
    assert "nvidia_driver: driver %s would be installed (check mode)" % DRIVER in flat, out
    assert spare.check_output(state) == before
