"""NVIDIA packages that a repository lacks stop the run before anything changes, naming the package, its version and
the repository asked: end to end, on the DGX node and the mirror host of this scenario.

prepare.yml put the twins of NVIDIA's repositories on the mirror host: /srv/nvidia-upstream (complete) and
/srv/nvidia-upstream-incomplete (signed by the same key), which lacks the fabric manager of driver 550.90.07 and NCCL
2.18.3-1+cuda12.2; the incomplete one is on the DGX node too, as a mirror of its own.
- The mirror: playbooks/mirror.yml from the incomplete upstream refuses, in the site_mirror role's preflight, both
  pins it cannot hold, naming them and the node and variable that pinned them; the mirror and the node stay as they were.
- The driver: pointed at the incomplete twin, nvidia_driver asks its index (gpucluster.ops.apt_offer) before the
  node's sources change, and refuses the NVSwitch node a driver without its fabric manager.
- NCCL: a pin the site mirror does not hold (mirror.yml not rerun after the pin moved) fails nccl's preflight.
"""

import json
import os

import pytest
import yaml

from bad_input import (assert_refused_before_change, failed_tasks, finish, preflight_task_names, recap, snapshot,
                       start_playbook)

DGX = "dgx12-gpu-stack"
MIRROR_HOST = "deb12-gpu-stack"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
WATCHED = ["/etc/apt/sources.list.d/gpucluster-cuda-debian12.sources", "/etc/apt/preferences.d/gpucluster-nvidia-driver",
           "/etc/apt/keyrings/cuda-archive-keyring.asc", "/etc/nccl.conf"]
ALSO = "dpkg-query -W 'nvidia-*' 'libnvidia-*' libcuda1 'libnccl*' 'datacenter-gpu-manager*' 2>&1; dpkg --get-selections"
MIRROR_FILES = "find /srv/gpucluster-mirror -type f | sort | xargs sha256sum"
INCOMPLETE = "file:///srv/nvidia-mirror-incomplete/debian12/x86_64"
CASES = [
    # (id, role, variables, texts the error must hold)
    ("fabric-manager-not-at-the-driver-version", "nvidia_driver",
     {"nvidia_driver_mirror_url": "file:///srv/nvidia-mirror-incomplete", "nvidia_driver_repo_trusted": True,
      "nvidia_driver_allow_upgrade": True},
     ["host %s: this is an NVSwitch system" % DGX, "needs nvidia-fabricmanager-550 at the driver's version 550.90.07-1",
      "the repository asked (%s) does not offer it" % INCOMPLETE]),
    ("nccl-pin-not-on-the-site-mirror", "nccl", {"nccl_version": "2.18.1-1+cuda12.2"},
     ["host %s: no libnccl2 2.18.1-1+cuda12.2 in the configured repositories" % DGX]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_incomplete_mirror_fails_in_preflight(tmp_path, case):
    name, role, variables, expect = case
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "An incomplete mirror for %s" % role, "hosts": DGX, "gather_facts": False,
        "roles": [{"role": "gpucluster.ops." + role}]}]))
    before = snapshot(DGX, WATCHED, ALSO)
    proc = start_playbook(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), tmp_path / "play.yml",
                          tmp_path / "vars.json")
    rc, out = finish(proc)
    after = snapshot(DGX, WATCHED, ALSO)
    assert_refused_before_change(name, rc, out, [role], expect, {DGX: before}, {DGX: after})


def test_a_mirror_from_an_upstream_without_the_pinned_packages_is_refused(tmp_path):
    (tmp_path / "vars.json").write_text(json.dumps({
        "mirror_nodes": "dgx_nodes", "nvidia_driver_cuda_repo_url": "file:///srv/nvidia-upstream-incomplete"}))
    before = {DGX: snapshot(DGX, WATCHED, ALSO), MIRROR_HOST: snapshot(MIRROR_HOST, [], MIRROR_FILES)}
    rc, out = finish(start_playbook(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]),
                                    os.path.join(ROOT, "playbooks", "mirror.yml"), tmp_path / "vars.json"))
    after = {DGX: snapshot(DGX, WATCHED, ALSO), MIRROR_HOST: snapshot(MIRROR_HOST, [], MIRROR_FILES)}
    assert rc == 2, out
    flat = " ".join(out.split()).replace("''", "'")
    upstream = "file:///srv/nvidia-upstream-incomplete/debian12/x86_64/"
    for text in ["the repository %s cannot give the pinned set" % upstream,
                 "branch 550 (nvidia_driver_branch of %s)): at 550.90.07-1, missing nvidia-fabricmanager-550" % DGX,
                 "2.18.3-1+cuda12.2 (nccl_version of %s)): no version matches for libnccl2" % DGX,
                 "Nothing was changed."]:
        assert text in flat, (text, out)
    assert set(failed_tasks(out)) <= set(preflight_task_names("site_mirror")), out
    assert recap(out)[MIRROR_HOST]["changed"] == 0 and recap(out)[DGX]["changed"] == 0, out
    assert before == after
