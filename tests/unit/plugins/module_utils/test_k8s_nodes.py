"""_k8s_nodes: Kubernetes nodes read as the Slurm drains read theirs (one owner marker, one breaker), the patches of
cordon, update and uncordon, and which pods an eviction moves. The module on a real API server:
tests/kubernetes/test_k8s_node_health.py."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _k8s_nodes, _slurm_nodes


def node(name, ready=True, unschedulable=False, taints=(), annotation=None, rv="7"):
    meta = {"name": name, "resourceVersion": rv}
    if annotation is not None:
        meta["annotations"] = {_k8s_nodes.ANNOTATION: annotation, "other": "x"}
    spec = {"taints": list(taints)}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": meta, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


ADMIN_TAINT = {"key": "site/disk", "effect": "NoSchedule"}
OUR_TAINT = {"key": "gpucluster.ops/health", "value": "", "effect": "NoSchedule"}


@pytest.mark.parametrize("raw, state, reason", [
    (node("a"), "IDLE", ""),
    (node("a", ready=False), "DOWN", "not Ready"),
    (node("a", unschedulable=True), "IDLE+DRAIN", "cordoned (not by gpucluster.ops)"),
    (node("a", unschedulable=True, taints=[OUR_TAINT], annotation="gpucluster-health: GPU-XID-79 gpu3"),
     "IDLE+DRAIN", "gpucluster-health: GPU-XID-79 gpu3"),
    # an administrator's taint alone keeps the node schedulable for pods that tolerate it: in service
    (node("a", taints=[ADMIN_TAINT]), "IDLE", ""),
    # our annotation without the cordon or taint (someone uncordoned it by hand): in service, not ours
    (node("a", annotation="gpucluster-health: X"), "IDLE", ""),
    # an administrator's cordon over an old annotation of ours (our taint gone): not ours
    (node("a", unschedulable=True, annotation="gpucluster-health: OLD"), "IDLE+DRAIN", "cordoned (not by gpucluster.ops)"),
    # a marker the node wrote itself, with another owner's taint: not the marker's owner
    (node("a", unschedulable=True, annotation="gpucluster-health: x",
          taints=[{"key": "gpucluster.ops/upgrade", "effect": "NoSchedule"}]), "IDLE+DRAIN",
     "cordoned, taint gpucluster.ops/upgrade:NoSchedule (not by gpucluster.ops)"),
    # registered with the add-node taint, then cordoned by an administrator: not ours
    (node("a", unschedulable=True, taints=[{"key": "gpucluster.ops/add-node", "effect": "NoSchedule"}]), "IDLE+DRAIN",
     "cordoned, taint gpucluster.ops/add-node:NoSchedule (not by gpucluster.ops)"),
    # a kubelet registered with the add-node owner's taint: that owner's
    (node("a", taints=[{"key": "gpucluster.ops/add-node", "effect": "NoSchedule"}]), "IDLE+DRAIN",
     "gpucluster-add-node: registered with its taint"),
    # an administrator's cordon over a text that is no marker of ours
    (node("a", unschedulable=True, annotation="hands off"), "IDLE+DRAIN", "cordoned (not by gpucluster.ops)"),
])
def test_view_reads_a_node_as_slurm_reads_its_own(raw, state, reason):
    view = _k8s_nodes.view(raw)
    assert (view["state"], view["reason"]) == (state, reason)


def test_the_plan_is_slurms_with_its_breaker_and_owners():
    cluster = [_k8s_nodes.view(n) for n in (
        node("k1"), node("k2"), node("k3"), node("k4", unschedulable=True),
        node("k5", unschedulable=True, taints=[OUR_TAINT], annotation="gpucluster-health: OLD"))]
    plan = _k8s_nodes.plan(cluster, ["k5", "k1", "k2", "k4"], "drain", "GPU-ECC-DBE gpu0", share=0.6,
                           variable="health_sweep_max_out_of_service")
    # 2 out (k4 an administrator's, k5 ours); 0.6 x 5 = 3: one more
    assert plan["updated"] == ["k5"] and plan["drained"] == ["k1"]
    assert [r["node"] for r in plan["refused"]] == ["k2"]
    assert "health_sweep_max_out_of_service" in plan["refused"][0]["why"]
    assert plan["not_ours"] == [{"node": "k4", "state": "IDLE+DRAIN", "reason": "cordoned (not by gpucluster.ops)"}]
    resume = _k8s_nodes.plan(cluster, ["k4", "k5", "k1"], "resume")
    assert resume["resumed"] == ["k5"] and resume["unchanged"] == ["k1"] and resume["not_ours"][0]["node"] == "k4"
    assert _k8s_nodes.plan(cluster, ["k5"], "resume", owner="upgrade")["not_ours"][0]["node"] == "k5"


def test_patches_keep_other_taints_and_carry_the_resource_version():
    view = _k8s_nodes.view(node("k1", taints=[ADMIN_TAINT], rv="42"))
    reason = _slurm_nodes.slurm_reason("health", "GPU-XID-79 gpu3")
    drain = _k8s_nodes.patch(view, "drain", "health", reason)
    assert drain == {"metadata": {"resourceVersion": "42", "annotations": {_k8s_nodes.ANNOTATION: reason}},
                     "spec": {"unschedulable": True, "taints": [ADMIN_TAINT, OUR_TAINT]}}
    ours = _k8s_nodes.view(node("k1", unschedulable=True, taints=[ADMIN_TAINT, OUR_TAINT], annotation=reason))
    # taken over by another owner: the old owner's taint goes
    update = _k8s_nodes.patch(ours, "update", "nvlink", "gpucluster-nvlink: x")
    assert update["spec"]["taints"] == [ADMIN_TAINT, {"key": "gpucluster.ops/nvlink", "value": "", "effect": "NoSchedule"}]
    resume = _k8s_nodes.patch(ours, "resume", "health")
    assert resume["spec"] == {"unschedulable": False, "taints": [ADMIN_TAINT]}
    assert resume["metadata"]["annotations"] == {_k8s_nodes.ANNOTATION: None}
    with pytest.raises(ValueError):
        _k8s_nodes.patch(ours, "delete", "health")
    with pytest.raises(ValueError):
        _k8s_nodes.taint_key("Bad Owner")


@pytest.mark.parametrize("pod, moves", [
    # a bare pod would be lost: never evicted (it keeps the node busy)
    ({"metadata": {"name": "p"}, "status": {"phase": "Running"}}, False),
    ({"metadata": {"name": "p", "ownerReferences": [{"kind": "ReplicaSet"}]}, "status": {"phase": "Pending"}}, True),
    ({"metadata": {"name": "p", "ownerReferences": [{"kind": "DaemonSet"}]}, "status": {"phase": "Running"}}, False),
    ({"metadata": {"name": "p", "annotations": {"kubernetes.io/config.mirror": "x"}}, "status": {}}, False),
    ({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}, False),
    ({"metadata": {"name": "p"}, "status": {"phase": "Failed"}}, False),
])
def test_evictable(pod, moves):
    assert _k8s_nodes.evictable(pod) is moves


def test_a_bare_pod_must_leave_but_is_not_evicted():
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert _k8s_nodes.must_leave(pod) and not _k8s_nodes.evictable(pod)
