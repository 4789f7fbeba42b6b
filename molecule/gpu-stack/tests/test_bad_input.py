"""A mirror of NVIDIA's repository that lacks a pinned package fails the role's preflight, naming the package and the
repository asked, and leaves the DGX node as it was: end to end, on the DGX node of this scenario.

prepare.yml put two twins on the node, signed by one key: /srv/nvidia-mirror (complete, the node's mirror) and
/srv/nvidia-mirror-incomplete, which lacks the fabric manager of driver 550.90.07 and NCCL 2.18.3-1+cuda12.2.
- The driver: pointed at the incomplete mirror, nvidia_driver asks its index (gpucluster.ops.apt_offer) before the
  node's sources change, and refuses the NVSwitch node a driver without its fabric manager.
- NCCL: the node's mirror is swapped for the incomplete one for the case (test tooling), and nccl refuses a pinned
  version the repositories lack.
"""

import json
import os

import pytest
import yaml

from bad_input import assert_refused_before_change, finish, snapshot, start_playbook

DGX = "dgx12-gpu-stack"
WATCHED = ["/etc/apt/sources.list.d/gpucluster-cuda-debian12.sources", "/etc/apt/preferences.d/gpucluster-nvidia-driver",
           "/etc/apt/keyrings/cuda-archive-keyring.asc", "/etc/nccl.conf"]
ALSO = "dpkg-query -W 'nvidia-*' 'libnvidia-*' libcuda1 'libnccl*' 'datacenter-gpu-manager*' 2>&1; dpkg --get-selections"
INCOMPLETE = "file:///srv/nvidia-mirror-incomplete/debian12/x86_64"
# apt's file method keeps an index whose file is no newer than its copy (the twins are built in the same second):
# the copy goes, so that apt reads the swapped mirror.
REREAD = "rm -f /var/lib/apt/lists/_srv_nvidia-mirror_* && apt-get update -qq"
SWAP = ("mv /srv/nvidia-mirror /srv/nvidia-mirror-complete && ln -s /srv/nvidia-mirror-incomplete /srv/nvidia-mirror"
        " && " + REREAD)
UNSWAP = "rm /srv/nvidia-mirror && mv /srv/nvidia-mirror-complete /srv/nvidia-mirror && " + REREAD
CASES = [
    # (id, role, variables, shell set-up and tear-down on the node, texts the error must hold)
    ("fabric-manager-not-at-the-driver-version", "nvidia_driver",
     {"nvidia_driver_mirror_url": "file:///srv/nvidia-mirror-incomplete", "nvidia_driver_allow_upgrade": True},
     None, None,
     ["host %s: this is an NVSwitch system" % DGX, "needs nvidia-fabricmanager-550 at the driver's version 550.90.07-1",
      "the repository asked (%s) does not offer it" % INCOMPLETE]),
    ("nccl-not-on-the-mirror", "nccl", {}, SWAP, UNSWAP,
     ["host %s: no libnccl2 2.18.3-1+cuda12.2 in the configured repositories" % DGX]),
]


def _dgx_run(command):
    import subprocess  # pylint: disable=import-outside-toplevel
    subprocess.run(["docker", "exec", DGX, "sh", "-c", command], check=True, capture_output=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_incomplete_mirror_fails_in_preflight(tmp_path, case):
    name, role, variables, setup, teardown, expect = case
    if setup:
        _dgx_run(setup)
    try:
        (tmp_path / "vars.json").write_text(json.dumps(variables))
        (tmp_path / "play.yml").write_text(yaml.safe_dump([{
            "name": "An incomplete mirror for %s" % role, "hosts": DGX, "gather_facts": False,
            "roles": [{"role": "gpucluster.ops." + role}]}]))
        before = snapshot(DGX, WATCHED, ALSO)
        proc = start_playbook(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), tmp_path / "play.yml",
                              tmp_path / "vars.json")
        rc, out = finish(proc)
        after = snapshot(DGX, WATCHED, ALSO)
    finally:
        if teardown:
            _dgx_run(teardown)
    assert_refused_before_change(name, rc, out, [role], expect, {DGX: before}, {DGX: after})
