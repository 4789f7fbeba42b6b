"""The site mirror for air-gapped nodes (playbooks/mirror.yml, the site_mirror role), as its operator sees it: built on
the mirror host (the Debian 12 node) from the twins of NVIDIA's repositories, it holds exactly what the DGX node pins,
signed with a key of its own that the node trusts instead of NVIDIA's, served over HTTP, which the node read. A rerun
changes nothing; --check on a new mirror says what it would copy and creates nothing; a new pin is named in --check
without any change. (A new pin joining the mirror beside the old one, and the rolling upgrade moving driver and
fabric manager to it together: the Debian 12 cluster's test_9_rolling_upgrade.py.)
"""

import json
import os
import subprocess

from bad_input import PLAIN_OUTPUT, changed_tasks

MIRROR_HOST = "deb12-gpu-stack"
DGX = "dgx12-gpu-stack"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CUDA = "/srv/gpucluster-mirror/cuda/debian12/x86_64"
DRIVER, OLDER = "550.90.07-1", "550.54.15-1"
OLDER_DRIVER = "550.54.15"
DRIVER_FAMILY = ["nvidia-smi", "nvidia-kernel-dkms", "libnvidia-ml1", "libcuda1", "firmware-nvidia-gsp",
                 "nvidia-persistenced", "nvidia-modprobe", "nvidia-fabricmanager-550", "libnvidia-nscq-550"]
PINNED = dict([(name, DRIVER) for name in DRIVER_FAMILY]
              + [("datacenter-gpu-manager-4-core", "1:4.4.1-1"), ("datacenter-gpu-manager-4-cuda12", "1:4.4.1-1"),
                 ("libnccl2", "2.18.3-1+cuda12.2"), ("libnccl-dev", "2.18.3-1+cuda12.2")])


def _sh(instance, command):
    return subprocess.run(["docker", "exec", instance, "sh", "-c", command], check=True, capture_output=True,
                          text=True).stdout


def _debs(directory):
    """{(name, version)} of the package files in a repository directory of the mirror host."""
    out = _sh(MIRROR_HOST, "for f in %s/*.deb; do dpkg-deb --show --showformat '${Package} ${Version}\\n' \"$f\"; done"
              % directory)
    return {tuple(line.split()) for line in out.splitlines()}


def _playbook(tmp_path, playbook, variables, check=False):
    """ansible-playbook on the scenario's inventory with plain output: (exit code, output)."""
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    command = ["ansible-playbook", "-i", os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), str(playbook),
               "-e", "@%s" % (tmp_path / "vars.json")] + (["--check"] if check else [])
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, **PLAIN_OUTPUT), check=False)
    return proc.returncode, proc.stdout


def test_the_mirror_holds_exactly_what_the_dgx_node_pins():
    held = _debs(CUDA)
    assert held == set(PINNED.items()), held
    upstream = _debs("/srv/nvidia-upstream/debian12/x86_64")
    assert held < upstream and len(upstream) > 2 * len(held)
    assert _debs("/srv/gpucluster-mirror/libnvidia-container/amd64") == {
        (name, "1.16.1-1") for name in ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                        "libnvidia-container1", "libnvidia-container-tools"]}


def test_the_mirror_is_signed_with_its_own_key_which_the_node_trusts():
    key = _sh(MIRROR_HOST, "cat /srv/gpucluster-mirror/gpucluster-mirror.asc")
    _sh(MIRROR_HOST, "gpg --dearmor < /srv/gpucluster-mirror/gpucluster-mirror.asc > /tmp/mirror.gpg"
                     " && gpgv --keyring /tmp/mirror.gpg %s/InRelease" % CUDA)
    # NVIDIA's key (the twin's) does not verify it: the mirror's index is its own.
    upstream_key = "/srv/nvidia-upstream/debian12/x86_64/3bf863cc.pub"
    assert subprocess.run(["docker", "exec", MIRROR_HOST, "sh", "-c", "gpg --dearmor < %s > /tmp/up.gpg && gpgv"
                           " --keyring /tmp/up.gpg %s/InRelease" % (upstream_key, CUDA)], check=False).returncode != 0
    assert _sh(DGX, "cat /etc/apt/keyrings/cuda-archive-keyring.asc") == key
    assert _sh(DGX, "cat /etc/apt/keyrings/nvidia-container-toolkit.asc") == key


def test_the_node_read_the_mirror_over_http():
    address = _sh(DGX, "hostname -i").split()[0]
    log = _sh(MIRROR_HOST, "cat /var/log/gpucluster-mirror/access.log")
    for path in ["/cuda/debian12/x86_64/InRelease", "/cuda/debian12/x86_64/./nvidia-fabricmanager-550_%s_amd64.deb" % DRIVER,
                 "/libnvidia-container/amd64/./nvidia-container-toolkit_1.16.1-1_amd64.deb"]:
        assert any(line.startswith(address + " ") and ('"GET %s HTTP' % path) in line and '" 200 ' in line
                   for line in log.splitlines()), (path, log[-3000:])


def test_a_rerun_changes_nothing(tmp_path):
    rc, out = _playbook(tmp_path, os.path.join(ROOT, "playbooks", "mirror.yml"), {"mirror_nodes": "dgx_nodes"})
    assert rc == 0 and not changed_tasks(out), out


def test_check_mode_on_a_new_mirror_says_what_it_would_copy_and_creates_nothing(tmp_path):
    rc, out = _playbook(tmp_path, os.path.join(ROOT, "playbooks", "mirror.yml"),
                        {"mirror_nodes": "dgx_nodes", "site_mirror_root": "/srv/new-mirror",
                         "site_mirror_state_dir": "/var/lib/new-mirror"}, check=True)
    assert rc == 0, out
    assert "cuda/debian12/x86_64: would add" in out and "nvidia-fabricmanager-550_%s_amd64.deb" % DRIVER in out, out
    assert "libnvidia-container/amd64: would add" in out, out
    assert _sh(MIRROR_HOST, "ls -d /srv/new-mirror /var/lib/new-mirror 2>&1 || true").count("No such file") == 2


def test_check_mode_names_what_a_new_pin_adds_and_changes_nothing(tmp_path):
    before = _sh(MIRROR_HOST, "find /srv/gpucluster-mirror -type f | sort | xargs sha256sum")
    rc, out = _playbook(tmp_path, os.path.join(ROOT, "playbooks", "mirror.yml"),
                        {"mirror_nodes": "dgx_nodes", "nvidia_driver_version": OLDER_DRIVER}, check=True)
    assert rc == 0, out
    assert "cuda/debian12/x86_64: would add" in out and "nvidia-fabricmanager-550_%s_amd64.deb" % OLDER in out, out
    assert _sh(MIRROR_HOST, "find /srv/gpucluster-mirror -type f | sort | xargs sha256sum") == before
