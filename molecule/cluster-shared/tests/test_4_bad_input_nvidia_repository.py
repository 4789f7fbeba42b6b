"""NVIDIA packages that a repository lacks stop the run before anything changes, naming the package, its version and
the repository asked: end to end on the Debian 12 cluster's GPU nodes and its mirror host (the head).

prepare.yml put the twins of NVIDIA's repositories on the head: /srv/nvidia-upstream (complete) and
/srv/nvidia-upstream-incomplete (signed by the same key), which lacks the fabric managers of branch 550 and NCCL
2.18.3-1+cuda12.2; the incomplete one is on the GPU nodes too, as a mirror of their own.
- The mirror: playbooks/mirror.yml from the incomplete upstream refuses, in the site_mirror role's preflight, both
  pins it cannot hold, naming them and the node and variable that pinned them; the mirror and the nodes stay as they
  were.
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
from conftest import ROOT

pytestmark = pytest.mark.release("debian12")

WATCHED = ["/etc/apt/sources.list.d/gpucluster-cuda-debian12.sources", "/etc/apt/preferences.d/gpucluster-nvidia-driver",
           "/etc/apt/keyrings/cuda-archive-keyring.asc", "/etc/nccl.conf"]
ALSO = "dpkg-query -W 'nvidia-*' 'libnvidia-*' libcuda1 'libnccl*' 'datacenter-gpu-manager*' 2>&1; dpkg --get-selections"
MIRROR_FILES = "find /srv/gpucluster-mirror -type f | sort | xargs sha256sum"
INCOMPLETE = "file:///srv/nvidia-upstream-incomplete/debian12/x86_64"


def _cases(node):
    return [
        # (id, role, variables, texts the error must hold)
        ("fabric-manager-not-at-the-driver-version", "nvidia_driver",
         {"nvidia_driver_mirror_url": "file:///srv/nvidia-upstream-incomplete", "nvidia_driver_repo_trusted": True},
         ["host %s: this is an NVSwitch system" % node,
          "needs nvidia-fabricmanager-550 at the driver's version 550.54.15-1",
          "the repository asked (%s) does not offer it" % INCOMPLETE]),
        ("nccl-pin-not-on-the-site-mirror", "nccl", {"nccl_version": "2.18.1-1+cuda12.2"},
         ["host %s: no libnccl2 2.18.1-1+cuda12.2 in the configured repositories" % node]),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=[c[0] for c in _cases("")])
def test_an_incomplete_mirror_fails_in_preflight(scenario, tmp_path, index):
    node = scenario.compute[0]
    name, role, variables, expect = _cases(node)[index]
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "An incomplete mirror for %s" % role, "hosts": node, "gather_facts": False,
        "roles": [{"role": "gpucluster.ops." + role}]}]))
    before = snapshot(node, WATCHED, ALSO)
    rc, out = finish(start_playbook(scenario.inventory_dir, tmp_path / "play.yml", tmp_path / "vars.json"))
    after = snapshot(node, WATCHED, ALSO)
    assert_refused_before_change(name, rc, out, [role], expect, {node: before}, {node: after})


def test_a_mirror_from_an_upstream_without_the_pinned_packages_is_refused(scenario, tmp_path):
    head, nodes = scenario.controller, scenario.compute
    (tmp_path / "vars.json").write_text(json.dumps({
        "mirror_nodes": "gpu_nodes", "nvidia_driver_cuda_repo_url": "file:///srv/nvidia-upstream-incomplete"}))

    def state():
        return dict([(n, snapshot(n, WATCHED, ALSO)) for n in nodes] + [(head, snapshot(head, [], MIRROR_FILES))])
    before = state()
    rc, out = finish(start_playbook(scenario.inventory_dir, os.path.join(ROOT, "playbooks", "mirror.yml"),
                                    tmp_path / "vars.json"))
    after = state()
    assert rc == 2, out
    flat = " ".join(out.split()).replace("''", "'")
    upstream = "file:///srv/nvidia-upstream-incomplete/debian12/x86_64/"
    for text in ["the repository %s cannot give the pinned set" % upstream,
                 "(version 550.54.15 (nvidia_driver_version of %s)): at 550.54.15-1, missing nvidia-fabricmanager-550"
                 % nodes[0],
                 "(2.18.3-1+cuda12.2 (nccl_version of %s)): no version matches for libnccl2" % nodes[0],
                 "Nothing was changed."]:
        assert text in flat, (text, out)
    assert set(failed_tasks(out)) <= set(preflight_task_names("site_mirror")), out
    assert all(recap(out)[h]["changed"] == 0 for h in [head] + nodes), out
    assert before == after
