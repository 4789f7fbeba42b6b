"""team_quota's Kubernetes side on a real API server with Kueue's manager running (docs/kubernetes-quotas.md): the
role applies the teams' objects (a rerun changes nothing, check mode changes nothing), and Kueue admits, holds back,
lends and reclaims as the team model says. Two kwok GPU nodes of 4 H100s each: the Cohort's pool is 8 GPUs; research
(priority low) may use 6 at once, training (priority high, preempts research) 8. Each test's jobs keep running (kwok
leaves their pods Running) until the test deletes them. The tests of this file run in its order. Its nodes are H100
nodes, apart from the GPU Operator tests' A100 nodes.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from conftest import recap
from k8s_control_plane import KWOK_KEEP_RUNNING_ANNOTATION
from render_step import ansible_env

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# H100s: the GPU Operator tests' nodes (A100s, labelled by that role) are not the flavor's.
GPU_TYPE = "h100"
NODES = {"h100k01": 4, "h100k02": 4}
TEAMS = {
    "training": {"description": "Model training", "gpu_hours": "1000/month", "max_concurrent": 8, "priority": "high",
                 "can_preempt": ["research"], "members": ["amara"]},
    "research": {"description": "Research", "gpu_hours": "1000/month", "max_concurrent": 6, "priority": "low",
                 "min_runtime_before_preemption": "1h", "members": ["dmitri"]},
}
ENTRY = {"name": "gpucluster.ops.team_quota", "tasks_from": "kubernetes"}
PLAY = [{"name": "Team quotas on Kubernetes", "hosts": "kubernetes_gpu_nodes", "gather_facts": False,
         "tasks": [{"name": "Team quotas", "ansible.builtin.include_role": ENTRY}]}]


@pytest.fixture(scope="module")
def kueue(plane):
    plane.start_kueue()
    for node, gpus in NODES.items():
        plane.add_node(node, labels={"gpucluster.ops/gpu-type": GPU_TYPE}, gpus=gpus)
    return plane


def _run(plane, folder, args=(), nodes=None, gpu_type=GPU_TYPE, teams=None, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    hosts = {node: {"slurm_node_gres": [{"name": "gpu", "type": gpu_type, "count": gpus}]}
             for node, gpus in (nodes or NODES).items()}
    inventory = {"all": {"vars": dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                       "gpucluster_kubeconfig": plane.kubeconfig, "team_quota_teams": teams or TEAMS,
                                       "team_quota_gpu_types": [gpu_type]}, **extra),
                         "children": {"kubernetes_gpu_nodes": {"hosts": hosts}}}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (folder / "play.yml").write_text(yaml.safe_dump(PLAY))
    proc = subprocess.run(["ansible-playbook", "-i", str(folder / "hosts.yml"), str(folder / "play.yml")] + list(args),
                          capture_output=True, text=True, cwd=ROOT,
                          env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False"), check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _get(plane, *args):
    return json.loads(plane.kubectl("get", *args, "-o", "json"))


def _job(plane, team, name, gpus):
    """A team's Job as a researcher submits it: on the team's LocalQueue with its priority class, suspended (Kueue
    starts it), one pod asking for ``gpus`` GPUs that keeps running until the test deletes the Job."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "team-" + team,
                        "labels": {"kueue.x-k8s.io/queue-name": team,
                                   "kueue.x-k8s.io/priority-class": "team-" + team}},
           "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "template": {"metadata": {"annotations": {KWOK_KEEP_RUNNING_ANNOTATION: "true"}},
                                 "spec": {"restartPolicy": "Never", "containers": [{
                                     "name": "train", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                                     "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                   "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}
    plane.kubectl("create", "-f", "-", input_text=json.dumps(job))


def _workload(plane, team, job):
    items = _get(plane, "workloads.kueue.x-k8s.io", "-n", "team-" + team)["items"]
    mine = [w for w in items if any(o.get("name") == job for o in w["metadata"].get("ownerReferences", []))]
    return mine[0] if mine else None


def _condition(workload, kind):
    found = [c for c in (workload or {}).get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else None


def _admitted(plane, team, job):
    workload = _workload(plane, team, job)
    return (_condition(workload, "Admitted") or {}).get("status") == "True" and workload


def _running_pods(plane, team, job):
    pods = _get(plane, "pods", "-n", "team-" + team, "-l", "job-name=" + job)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") in NODES]


@pytest.fixture(scope="module")
def applied(kueue, tmp_path_factory):
    return _run(kueue, tmp_path_factory.mktemp("apply"))


def test_the_role_applies_the_teams_objects_and_kueue_takes_them(kueue, applied):
    rc, out = applied
    assert rc == 0, out[-6000:]
    cohort = _get(kueue, "cohorts.kueue.x-k8s.io", "gpucluster")
    assert str(cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]) == "8"
    for team, cap in (("training", 8), ("research", 6)):
        queue = _get(kueue, "clusterqueues.kueue.x-k8s.io", team)  # quantities come back as strings
        # Kueue's own verdict on the queue: active (its flavors and cohort exist, its webhooks accepted it)
        active = kueue.wait("ClusterQueue %s Active" % team, lambda t=team: (_condition(
            _get(kueue, "clusterqueues.kueue.x-k8s.io", t), "Active") or {}).get("status") == "True", 30)
        assert active and queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] == str(cap)
        assert _get(kueue, "localqueues.kueue.x-k8s.io", team, "-n", "team-" + team)["spec"]["clusterQueue"] == team


def test_a_rerun_and_check_mode_change_nothing(kueue, applied, tmp_path):
    assert applied[0] == 0
    rc, out = _run(kueue, tmp_path / "rerun")
    assert rc == 0 and all(c["changed"] == "0" for c in recap(out).values()), out[-6000:]
    before = _get(kueue, "clusterqueues.kueue.x-k8s.io", "research")["metadata"]["resourceVersion"]
    rc, out = _run(kueue, tmp_path / "check", args=["--check", "--diff"])
    assert rc == 0 and all(c["changed"] == "0" for c in recap(out).values()), out[-6000:]
    assert _get(kueue, "clusterqueues.kueue.x-k8s.io", "research")["metadata"]["resourceVersion"] == before


def test_a_job_within_quota_is_admitted_and_its_pod_runs(kueue, applied):
    assert applied[0] == 0
    _job(kueue, "research", "small", 2)
    kueue.wait("research/small admitted", lambda: _admitted(kueue, "research", "small"))
    pods = kueue.wait("research/small's pod Running on a GPU node", lambda: _running_pods(kueue, "research", "small"))
    # Kueue injected the flavor's node labels: the pod runs where the H100s are
    assert pods[0]["spec"]["nodeSelector"]["gpucluster.ops/gpu-type"] == GPU_TYPE, pods[0]["spec"]


def test_a_job_beyond_the_teams_cap_waits_and_kueue_says_why(kueue, applied):
    assert applied[0] == 0
    _job(kueue, "research", "big", 6)  # 2 + 6 > research's 6 at once

    def pending():
        workload = _workload(kueue, "research", "big")
        return workload if (_condition(workload, "QuotaReserved") or {}).get("status") == "False" else None
    workload = kueue.wait("research/big's workload pending with a reason", pending)
    message = _condition(workload, "QuotaReserved")["message"]
    assert "insufficient" in message.lower() or "borrowing limit" in message.lower(), message
    time.sleep(2)
    assert not _admitted(kueue, "research", "big") and not _running_pods(kueue, "research", "big")


def test_an_idle_teams_share_is_lent_through_the_cohort(kueue, applied):
    assert applied[0] == 0
    kueue.kubectl("delete", "job", "small", "-n", "team-research", "--cascade=foreground", "--wait=true")
    # training's queue is empty: research takes 6 of the pool's 8 GPUs, all borrowed from the Cohort
    kueue.wait("research/big admitted once small is gone", lambda: _admitted(kueue, "research", "big"))

    def usage():
        flavors = _get(kueue, "clusterqueues.kueue.x-k8s.io", "research").get("status", {}).get("flavorsUsage") or []
        return flavors[0]["resources"][0] if flavors and flavors[0]["resources"][0].get("total") != "0" else None
    used = kueue.wait("research's usage reported in its ClusterQueue's status", usage, 30)
    assert used["total"] == "6" and used["borrowed"] == "6", used


def test_the_higher_priority_team_reclaims_what_research_borrowed(kueue, applied):
    assert applied[0] == 0
    _job(kueue, "training", "train", 4)  # 2 GPUs are free: training takes research's back
    kueue.wait("training/train admitted", lambda: _admitted(kueue, "training", "train"), 90)
    evicted = _condition(_workload(kueue, "research", "big"), "Evicted")
    assert evicted and evicted["status"] == "True" and evicted["reason"] == "Preempted", evicted
    assert not _admitted(kueue, "research", "big")
    kueue.wait("training/train's pod Running", lambda: _running_pods(kueue, "training", "train"))


def test_quotas_count_the_time_sliced_gpus_the_device_plugin_advertises(kueue, tmp_path):
    """mixed-a100-l40s's L40S time-sliced four ways (gpu_operator_time_slicing: {l40s: 4}): two nodes of 2 L40S
    advertise 8 nvidia.com/gpu each; a team allowed 4 GPUs at once gets 16 slices, and Kueue admits a Job of 12."""
    nodes = {"l40sk01": 2, "l40sk02": 2}
    for node, gpus in nodes.items():
        kueue.add_node(node, labels={"gpucluster.ops/gpu-type": "l40s"}, gpus=gpus * 4)
    teams = {"inference": {"description": "Inference", "gpu_hours": "1000/month", "max_concurrent": 4,
                           "priority": "high", "members": ["elena"]}}
    rc, out = _run(kueue, tmp_path / "sliced", nodes=nodes, gpu_type="l40s", teams=teams,
                   team_quota_kubernetes_cohort="sliced", gpu_operator_time_slicing={"l40s": 4})
    assert rc == 0, out[-6000:]
    cohort = _get(kueue, "cohorts.kueue.x-k8s.io", "sliced")
    assert str(cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]) == "16"
    quota = _get(kueue, "resourcequota", "gpu-quota", "-n", "team-inference")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
    kueue.wait("ClusterQueue inference Active", lambda: (_condition(
        _get(kueue, "clusterqueues.kueue.x-k8s.io", "inference"), "Active") or {}).get("status") == "True", 30)
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "serve", "namespace": "team-inference",
                        "labels": {"kueue.x-k8s.io/queue-name": "inference",
                                   "kueue.x-k8s.io/priority-class": "team-inference"}},
           "spec": {"suspend": True, "parallelism": 12, "completions": 12, "backoffLimit": 0,
                    "template": {"metadata": {"annotations": {KWOK_KEEP_RUNNING_ANNOTATION: "true"}},
                                 "spec": {"restartPolicy": "Never", "containers": [{
                                     "name": "serve", "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    kueue.kubectl("create", "-f", "-", input_text=json.dumps(job))
    kueue.wait("inference/serve admitted", lambda: _admitted(kueue, "inference", "serve"))

    def running():
        pods = _get(kueue, "pods", "-n", "team-inference", "-l", "job-name=serve")["items"]
        up = [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") in nodes]
        return up if len(up) == 12 else None
    assert len(kueue.wait("12 slices running on 4 physical L40S", running)) == 12
