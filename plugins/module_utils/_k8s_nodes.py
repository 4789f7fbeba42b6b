# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubernetes nodes as the collection takes them out of service and back: the same owners, marker and circuit
breaker as the Slurm drains (``_slurm_nodes``), so that one node has one owner across both schedulers (docs/drain.md).

- A node out of service by an owner of the collection is cordoned (``spec.unschedulable``), carries the taint
  ``gpucluster.ops/<owner>`` with effect ``NoSchedule`` (never ``NoExecute``: running pods stay until an operation
  that needs an idle node evicts them), and the annotation ``gpucluster.ops/drain`` whose value is the Slurm reason
  the same drain writes (``gpucluster-<owner>: <reason>``).
- A node is read as a Slurm node would be, so that ``_slurm_nodes.plan`` decides for both: its state is ``IDLE``
  when Ready, ``DOWN`` when not, ``+DRAIN`` when cordoned or tainted by the collection; its reason is the
  annotation where the node is ours, else what took it out (``cordoned``, ``not Ready``) so that the report names it.
  A node is an owner's only with both the owner's marker in the annotation and the owner's taint; a cordon or taint
  the collection did not make is an administrator's: never undone, never taken over. A node registered with an
  owner's taint and neither annotation nor cordon (a kubelet's ``--register-with-taints``) is that owner's.
- The breaker counts every node the API server lists, out of service for any reason (cordoned, or not Ready).

Standard library only: the API calls are the module's (``k8s_node_state``), these are the pure parts it and the
unit tests share.
"""

from __future__ import annotations

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_nodes

ANNOTATION = "gpucluster.ops/drain"
TAINT_PREFIX = "gpucluster.ops/"
TAINT_EFFECT = "NoSchedule"


def taint_key(owner):
    """The taint key of an owner: ``gpucluster.ops/<owner>``. Raises ValueError for a bad owner."""
    _slurm_nodes.marker(owner)
    return TAINT_PREFIX + owner


def _ours_taint(taint):
    return (taint.get("key") or "").startswith(TAINT_PREFIX)


def _ready(node):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def view(node):
    """A node of the API (its JSON: metadata, spec, status) as ``_slurm_nodes.plan`` reads nodes:
    {name, state, reason, unschedulable, ready, taints, annotation}."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    taints = list(spec.get("taints") or [])
    annotation = (meta.get("annotations") or {}).get(ANNOTATION) or ""
    unschedulable = bool(spec.get("unschedulable"))
    ready = _ready(node)
    ours_taints = [t for t in taints if _ours_taint(t)]
    our_keys = set(t.get("key") for t in ours_taints if t.get("effect") == TAINT_EFFECT)
    drained = unschedulable or bool(ours_taints)
    state = ("IDLE" if ready else "DOWN") + ("+DRAIN" if drained else "")
    owner = _slurm_nodes.owner_of(annotation)
    registered = [key[len(TAINT_PREFIX):] for key in sorted(our_keys)
                  if _slurm_nodes.OWNER_PATTERN.match(key[len(TAINT_PREFIX):])]
    if owner and TAINT_PREFIX + owner in our_keys:
        # Ours: the owner's marker and the owner's taint. The annotation alone is not enough: a kubelet may write
        # its own Node's annotations (not its taints), and an administrator's cordon may meet an old annotation.
        reason = annotation
    elif registered and not annotation and not unschedulable:
        # A kubelet registered with an owner's taint (--register-with-taints=gpucluster.ops/add-node:NoSchedule,
        # how a new node joins out of scheduling), not cordoned by anyone: that owner's.
        reason = _slurm_nodes.slurm_reason(registered[0], "registered with its taint")
    else:
        why = []
        if unschedulable:
            why.append("cordoned")
        why.extend("taint %s:%s" % (t.get("key"), t.get("effect")) for t in ours_taints)
        if not ready:
            why.append("not Ready")
        reason = ", ".join(why) + (" (not by gpucluster.ops)" if drained else "")
    return dict(name=meta.get("name"), state=state, reason=reason, unschedulable=unschedulable, ready=ready,
                taints=taints, annotation=annotation, resource_version=meta.get("resourceVersion"))


def patch(node_view, action, owner, reason=None):
    """The strategic merge patch of one action on one node (its ``view``): ``drain`` and ``update`` cordon, set the
    owner's taint (the collection's other taints go) and the annotation; ``resume`` uncordons and removes both. The
    resourceVersion read makes the API server refuse the patch (409) when the node changed in between, so that
    a taint written by someone else meanwhile is never lost."""
    others = [t for t in node_view["taints"] if not _ours_taint(t)]
    meta = {"resourceVersion": node_view["resource_version"]} if node_view.get("resource_version") else {}
    if action in ("drain", "update"):
        meta["annotations"] = {ANNOTATION: reason}
        taints = others + [{"key": taint_key(owner), "value": "", "effect": TAINT_EFFECT}]
        return {"metadata": meta, "spec": {"unschedulable": True, "taints": taints}}
    if action == "resume":
        meta["annotations"] = {ANNOTATION: None}
        return {"metadata": meta, "spec": {"unschedulable": False, "taints": others}}
    raise ValueError("unknown action %r" % (action,))


def plan(nodes, names, state, reason=None, owner=_slurm_nodes.HEALTH_OWNER, share=0.1,
         variable="max_out_of_service", take_over=()):
    """``_slurm_nodes.plan`` over the API's nodes (their ``view``): the one breaker and ownership rule."""
    return _slurm_nodes.plan(nodes, names, state, reason, owner, share, variable, take_over)


# ---- eviction -----------------------------------------------------------------------------------------------------

def must_leave(pod):
    """Whether a pod (its JSON) must leave its node before the node is idle: not a DaemonSet's (it would come back,
    and it tolerates the cordon), not a static pod's mirror, not finished."""
    meta = pod.get("metadata") or {}
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def evictable(pod):
    """Whether the drain evicts a pod that must leave: one a controller owns (it is made again elsewhere). A bare pod
    would be lost for good; as ``kubectl drain`` without ``--force``, it is left running and keeps its node busy."""
    return must_leave(pod) and bool((pod.get("metadata") or {}).get("ownerReferences"))
