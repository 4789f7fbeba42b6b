"""Unhealthy Kubernetes GPU nodes out of scheduling, and back (docs/kubernetes-health.md), on a real API server with
kwok nodes: the operations' ServiceAccount (made by the gpu_operator role's access tasks) may cordon, taint and evict
and nothing else; playbooks/health_sweep.yml with health_sweep_drain cordons and taints a failing node with its codes,
behind the circuit breaker, and leaves an administrator's cordon alone; playbooks/resume.yml uncordons it once its
check passes; a node in both schedulers is drained in Slurm and cordoned in Kubernetes together, and resumed together;
a batch of an operation that needs idle nodes (the rolling upgrade's drain and settle) cordons, evicts a pod,
respects a PodDisruptionBudget and uncordons. The nodes replay GPU simulator bundles on this machine
(health_sweep_from_dir), as tests/unit/test_health_sweep_playbook.py does; Slurm is a fake scontrol there. The tests of
this file run in its order.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.ops.tests.gpusim import gpusim
from fake_scontrol import FAKE_SCONTROL
from render_step import ansible_env

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(ROOT, "tests", "gpusim", "profiles", "a100-sxm-8.json")
NOW = "2026-12-01T06:00:00Z"
FAULTS = ["row_remap_pending:gpu=3"]
EXPECTED = {"gpu_count": 8, "gpu_model": "NVIDIA A100-SXM4-80GB", "nvlinks_per_gpu": 12, "nvswitch": True,
            "ib_port_count": 8, "ib_rate_gbps": 200}
# hk01 healthy; hk02, hk03, hk04 fail their check (hk04 is cordoned by an administrator first); hb01 is in both
# schedulers.
K8S_NODES = ["hk01", "hk02", "hk03", "hk04"]
BOTH = "hb01"
ANNOTATION = "gpucluster.ops/drain"


@pytest.fixture(scope="module")
def site(plane, tmp_path_factory):
    """The nodes, their healthy and failing bundles, the operations' kubeconfig path, a fake scontrol."""
    root = tmp_path_factory.mktemp("k8s-health")
    for name in K8S_NODES + [BOTH]:
        plane.add_node(name, labels={"gpucluster.ops/gpu-type": "a100"})
        for state, faults in (("healthy", []), ("failing", FAULTS)):
            argv = ["gpusim", "bundle", str(root / "bundles" / name / state), "--profile", PROFILE]
            for fault in faults:
                argv += ["--fault", fault]
            assert gpusim.main(argv, env={"GPUSIM_NOW": NOW, "GPUSIM_HOSTNAME": name})[0] == 0
    (root / "bin").mkdir()
    (root / "bin" / "scontrol").write_text(FAKE_SCONTROL % {"python": sys.executable})
    (root / "bin" / "scontrol").chmod(0o755)
    # no job runs on the fake Slurm's nodes
    (root / "bin" / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (root / "bin" / "squeue").chmod(0o755)
    (root / "slurm.json").write_text(json.dumps({BOTH: {"state": "IDLE", "reason": ""}}))
    return {"root": root, "kubeconfig": str(root / "operations.kubeconfig")}


def _playbook(plane, site, name, playbook, states, extra=None, slurm=False, args=()):
    """Run ``playbook`` on the nodes of ``states`` ({node: healthy|failing}), Kubernetes GPU nodes (and Slurm nodes of
    the fake scontrol with ``slurm``)."""
    folder = site["root"] / name
    folder.mkdir()
    hosts = {node: {"health_sweep_from_dir": str(site["root"] / "bundles" / node / state)}
             for node, state in states.items()}
    children = {"gpu_nodes": {"hosts": hosts}, "kubernetes_gpu_nodes": {"hosts": {n: {} for n in states}}}
    if slurm:
        controller = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        children["slurm_controller"] = {"hosts": {"localhost": controller}}
    # the nodes are replayed on this machine, and the tasks delegated to it (async ones too) run this Python
    inventory = {"all": {"vars": {"health_check_expected": EXPECTED, "gpucluster_kubeconfig": plane.kubeconfig,
                                  "ansible_python_interpreter": sys.executable,
                                  "gpucluster_kubernetes_operations_kubeconfig": site["kubeconfig"],
                                  "health_sweep_report_dir": str(folder / "report")},
                         "children": children}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (folder / "extra.json").write_text(json.dumps(extra or {}))
    path = playbook if os.path.isabs(playbook) else os.path.join(ROOT, "playbooks", playbook)
    proc = subprocess.run(["ansible-playbook", "-i", str(folder / "hosts.yml"), path, "-e", "@%s" % (folder / "extra.json")]
                          + list(args), capture_output=True, text=True, cwd=ROOT, check=False,
                          env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False", FAKE_SLURM_STATE=str(site["root"] / "slurm.json"),
                                          PATH="%s:%s" % (site["root"] / "bin", ansible_env()["PATH"])))
    return proc.returncode, proc.stdout + proc.stderr


def _node(plane, name):
    node = json.loads(plane.kubectl("get", "node", name, "-o", "json"))
    # the collection's taints (the node lifecycle controller adds node.kubernetes.io/unschedulable to a cordon)
    taints = [t["key"] for t in node["spec"].get("taints") or [] if t["key"].startswith("gpucluster.ops/")]
    return bool(node["spec"].get("unschedulable")), taints, (node["metadata"].get("annotations") or {}).get(ANNOTATION)


def _pods(plane):
    """{app: [(node, phase)]} of the default namespace's pods that are not being deleted."""
    out = {}
    for pod in json.loads(plane.kubectl("get", "pods", "-n", "default", "-o", "json"))["items"]:
        if not pod["metadata"].get("deletionTimestamp"):
            out.setdefault(pod["metadata"]["labels"].get("app"), []).append(
                (pod["spec"].get("nodeName", ""), pod["status"].get("phase")))
    return out


def _deployment(name, node):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def _pod_names(plane):
    return [p["metadata"]["name"] for p in json.loads(plane.kubectl("get", "pods", "-n", "default", "-o", "json"))["items"]]


def _as_operations(plane, site, *args):
    return subprocess.run([os.path.join(plane.bin, "kubectl"), "--kubeconfig", site["kubeconfig"]] + list(args),
                          capture_output=True, text=True, check=False)


def test_1_the_operations_account_may_cordon_and_evict_and_nothing_more(plane, site, tmp_path):
    play = tmp_path / "access.yml"
    play.write_text(yaml.safe_dump([{"name": "The operations' access", "hosts": "kubernetes_gpu_nodes",
                                     "gather_facts": False, "tasks": [{
                                         "name": "Access", "ansible.builtin.include_role": {
                                             "name": "gpucluster.ops.gpu_operator", "tasks_from": "access"}}]}]))
    rc, out = _playbook(plane, site, "access", str(play), {"hk01": "healthy"},
                        {"gpucluster_kubernetes_delegate": "localhost",
                         "gpucluster_kubernetes_operations_namespace": "gpucluster-ops"})
    assert rc == 0, out
    assert oct(os.stat(site["kubeconfig"]).st_mode & 0o777) == "0o600"
    for args, allowed in ((["patch", "nodes"], "yes"), (["list", "pods"], "yes"),
                          (["create", "pods", "--subresource=eviction"], "yes"), (["delete", "nodes"], "no"),
                          (["delete", "pods"], "no"), (["create", "pods"], "no"), (["update", "nodes"], "no"),
                          (["get", "secrets"], "no"), (["list", "secrets"], "no")):
        proc = _as_operations(plane, site, "auth", "can-i", *args, "--all-namespaces")
        assert proc.stdout.strip() == allowed, (args, proc.stdout, proc.stderr)
    # what it must not do, tried for real
    assert "Forbidden" in _as_operations(plane, site, "delete", "node", "hk01").stderr
    assert "Forbidden" in _as_operations(plane, site, "get", "secrets", "-n", "gpucluster-ops").stderr
    assert "Forbidden" in _as_operations(plane, site, "get", "secrets", "-A").stderr
    assert _node(plane, "hk01") == (False, [], None)


def test_2_the_sweep_cordons_failing_nodes_behind_the_breaker_in_both_schedulers_and_leaves_an_admins_cordon(
        plane, site):
    """hb01 (in both schedulers), hk02 and hk03 fail; hk04 fails too, cordoned by an administrator first. The share
    allows three nodes out: hk04, then hb01 and hk02 in inventory order; hk03 is refused."""
    plane.kubectl("cordon", "hk04")
    total = len(json.loads(plane.kubectl("get", "nodes", "-o", "json"))["items"])
    share = round(3.5 / total, 4)
    rc, out = _playbook(plane, site, "sweep", "health_sweep.yml",
                        {BOTH: "failing", "hk01": "healthy", "hk02": "failing", "hk03": "failing", "hk04": "failing"},
                        {"health_sweep_drain": True, "health_sweep_max_out_of_service": share}, slurm=True)
    assert rc == 0, out
    cordoned, taints, reason = _node(plane, "hk02")
    assert cordoned and taints == ["gpucluster.ops/health"], out
    assert reason.startswith("gpucluster-health: ") and "gpu3" in reason, reason
    # the node in both schedulers: drained in Slurm and cordoned in Kubernetes, with one reason
    slurm = json.loads((site["root"] / "slurm.json").read_text())[BOTH]
    assert slurm["state"] == "IDLE+DRAIN" and slurm["reason"] == reason, (slurm, reason)
    assert _node(plane, BOTH) == (True, ["gpucluster.ops/health"], reason), out
    # the breaker kept hk03 in service, naming the variable
    assert _node(plane, "hk03") == (False, [], None), out
    flat = " ".join(out.split())
    assert re.search(r"circuit breaker: \d+ of the cluster''?s %d nodes are out of service \(for any reason\) and "
                     r"health_sweep_max_out_of_service=[0-9.]+ allows at most 3; not taking hk03 out" % total, flat), out
    # the administrator's cordon: as it was, no taint or marker of ours
    assert _node(plane, "hk04") == (True, [], None), out
    assert _node(plane, "hk01") == (False, [], None), out


def test_3_resume_brings_the_healed_nodes_back_in_both_schedulers_and_leaves_the_admins(plane, site):
    rc, out = _playbook(plane, site, "resume", "resume.yml",
                        {BOTH: "healthy", "hk01": "healthy", "hk02": "healthy", "hk03": "failing", "hk04": "healthy"},
                        slurm=True)
    assert rc == 0, out
    assert _node(plane, "hk02") == (False, [], None), out
    assert json.loads((site["root"] / "slurm.json").read_text())[BOTH] == {"state": "IDLE", "reason": ""}
    assert _node(plane, BOTH) == (False, [], None), out
    assert _node(plane, "hk04") == (True, [], None), out
    plane.kubectl("uncordon", "hk04")


def test_4_a_batch_drain_cordons_evicts_respecting_a_budget_and_the_settle_uncordons(plane, site, tmp_path):
    """The batch of an operation that needs idle nodes (rolling_upgrade.yml's, through the operations role's drain and
    settle entry points), on two nodes in both schedulers: each drained in Slurm and cordoned in Kubernetes under the
    owner upgrade, their pods evicted; hb01's pod is evicted (its Deployment makes a new one), hk01's pod stays (its
    budget allows no disruption), so hk01 is busy at the deadline; the settle resumes and uncordons both."""
    (site["root"] / "slurm.json").write_text(json.dumps({n: {"state": "IDLE", "reason": ""} for n in (BOTH, "hk01")}))
    manifests = [
        _deployment("mover", BOTH), _deployment("keeper", "hk01"),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keeper", "namespace": "default"},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keeper"}}}},
    ]
    for manifest in manifests:
        plane.kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
    wanted = {"keeper": [("hk01", "Running")], "mover": [(BOTH, "Running")]}
    plane.wait("the pods running", lambda: _pods(plane) == wanted)
    plane.wait("the budget counted", lambda: json.loads(plane.kubectl(
        "get", "pdb", "keeper", "-n", "default", "-o", "json")).get("status", {}).get("currentHealthy") == 1)
    mover = [name for name in _pod_names(plane) if name.startswith("mover-")][0]
    entry = {"name": "gpucluster.ops.operations"}
    play = [{"name": "One batch", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "Drain the batch", "ansible.builtin.include_role": dict(entry, tasks_from="drain"),
         "vars": {"drain_hosts": [BOTH, "hk01"], "drain_owner": "upgrade", "drain_reason": "rolling upgrade to driver 550.90.07",
                  "drain_deadline_s": 6, "drain_deadline": "6s", "drain_max_out_of_service": 1.0}},
        {"name": "Read the nodes while the batch is out",
         "kubernetes.core.k8s_info": {"kind": "Node", "kubeconfig": plane.kubeconfig},
         "register": "nodes", "delegate_to": "localhost", "run_once": True},
        {"name": "Keep what the drain saw", "delegate_to": "localhost", "run_once": True, "ansible.builtin.copy": {
            "dest": str(tmp_path / "batch.json"),
            "content": "{{ {'outcome': dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, "
                       "'__drain_outcome'))), 'k8s': __drain_k8s_first, 'waited': __drain_k8s_waited, "
                       "'slurm': lookup('file', lookup('env', 'FAKE_SLURM_STATE')) | from_json, "
                       "'nodes': nodes.resources} | to_json }}"}},
        {"name": "Done with the batch", "ansible.builtin.set_fact": {"__drain_settle": "resume"}},
        {"name": "Settle the batch", "ansible.builtin.include_role": dict(entry, tasks_from="settle"),
         "vars": {"settle_hosts": [BOTH, "hk01"], "settle_owner": "upgrade"}}]}]
    (tmp_path / "batch.yml").write_text(yaml.safe_dump(play))
    rc, out = _playbook(plane, site, "batch", str(tmp_path / "batch.yml"), {BOTH: "healthy", "hk01": "healthy"},
                        slurm=True)
    assert rc == 0, out
    seen = json.loads((tmp_path / "batch.json").read_text())
    assert seen["outcome"] == {BOTH: "ready", "hk01": "busy"}, seen["outcome"]
    assert seen["k8s"]["drained"] == [BOTH, "hk01"], seen["k8s"]
    assert seen["waited"]["busy"] == ["hk01"], seen["waited"]
    reason = "gpucluster-upgrade: rolling upgrade to driver 550.90.07"
    assert seen["slurm"] == {n: {"state": "IDLE+DRAIN", "reason": reason} for n in (BOTH, "hk01")}, seen["slurm"]
    for node in seen["nodes"]:
        if node["metadata"]["name"] in (BOTH, "hk01"):
            assert node["spec"].get("unschedulable") and node["metadata"]["annotations"][ANNOTATION] == reason, node
            assert [t["key"] for t in node["spec"]["taints"] if t["key"].startswith("gpucluster.ops/")] == \
                ["gpucluster.ops/upgrade"], node
    # the keeper's pod still runs where it ran; the mover's pod was evicted (its Deployment made a new one)
    assert _pods(plane)["keeper"] == [("hk01", "Running")], _pods(plane)
    assert seen["k8s"]["evicted"] == ["default/" + mover] and mover not in _pod_names(plane), _pod_names(plane)
    # the settle: both back in both schedulers
    assert json.loads((site["root"] / "slurm.json").read_text()) == {n: {"state": "IDLE", "reason": ""} for n in (BOTH, "hk01")}
    assert _node(plane, BOTH) == (False, [], None) and _node(plane, "hk01") == (False, [], None)
    for manifest in reversed(manifests):
        plane.kubectl("delete", manifest["kind"].lower(), manifest["metadata"]["name"], "-n", "default", "--wait=false")


def test_5_new_nodes_join_cordoned_until_their_check_passes(plane, site, tmp_path):
    """add_node.yml's Kubernetes side (the operations role's kubernetes_join): hn01 registered with the add-node taint
    (its kubelet's --register-with-taints) and hn02 registered plain are both held cordoned by add-node; hn03 is not
    registered and is named; after the check hn01 (passed) is uncordoned, hn02 (failed) stays cordoned with its codes."""
    plane.add_node("hn01", labels={"gpucluster.ops/gpu-type": "a100"})
    plane.kubectl("taint", "node", "hn01", "gpucluster.ops/add-node=:NoSchedule")
    plane.add_node("hn02", labels={"gpucluster.ops/gpu-type": "a100"})
    entry = {"name": "gpucluster.ops.operations", "tasks_from": "kubernetes_join"}
    new = ["hn01", "hn02", "hn03"]
    play = [{"name": "Hold", "hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "Hold", "ansible.builtin.include_role": entry,
         "vars": {"kubernetes_join_hosts": new, "kubernetes_join_phase": "hold"}},
        {"name": "Read the nodes while held", "kubernetes.core.k8s_info": {"kind": "Node", "kubeconfig": plane.kubeconfig},
         "register": "held", "delegate_to": "localhost", "run_once": True},
        {"name": "Keep them", "delegate_to": "localhost", "run_once": True, "ansible.builtin.copy": {
            "dest": str(tmp_path / "held.json"), "content": "{{ held.resources | to_json }}"}},
        {"name": "The check's verdict", "ansible.builtin.set_fact": {
            "__add_node_passed": "{{ inventory_hostname == 'hn01' }}",
            "__add_node_reason": "health check failed: GPU-ROW-REMAP-PENDING gpu3"}},
        {"name": "Admit", "ansible.builtin.include_role": entry,
         "vars": {"kubernetes_join_hosts": new, "kubernetes_join_phase": "admit"}}]}]
    (tmp_path / "join.yml").write_text(yaml.safe_dump(play))
    rc, out = _playbook(plane, site, "join", str(tmp_path / "join.yml"), {n: "healthy" for n in new})
    assert rc == 0, out
    held = {n["metadata"]["name"]: n for n in json.loads((tmp_path / "held.json").read_text())}
    for name in ("hn01", "hn02"):
        assert held[name]["spec"].get("unschedulable"), held[name]
        assert held[name]["metadata"]["annotations"][ANNOTATION] == \
            "gpucluster-add-node: joining, until its quick health check passes", held[name]
    assert "Kubernetes does not list hn03 yet" in out and "--register-with-taints=gpucluster.ops/add-node" in out, out
    assert _node(plane, "hn01") == (False, [], None)
    assert _node(plane, "hn02") == (True, ["gpucluster.ops/add-node"],
                                    "gpucluster-add-node: health check failed: GPU-ROW-REMAP-PENDING gpu3")
