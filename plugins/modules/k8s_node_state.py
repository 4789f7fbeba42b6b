#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_state
short_description: Cordon or uncordon Kubernetes nodes under an owner's marker, behind a circuit breaker
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - The Kubernetes side of M(gpucluster.ops.slurm_node_state), with the same owners, reasons and circuit breaker, so
    that a node in both schedulers has one owner (docs/drain.md).
  - O(state=drain) cordons each listed node, adds the taint C(gpucluster.ops/<owner>) with effect C(NoSchedule)
    (never C(NoExecute), which would evict running pods at once) and the annotation C(gpucluster.ops/drain) holding
    the owner's marker C(gpucluster-<owner>:), a blank and O(reason), as the Slurm reason of the same drain.
  - O(state=resume) uncordons only nodes carrying the same owner's marker and removes its taint and annotation. A
    node cordoned, tainted by someone else or not Ready is left as it is and returned in RV(not_ours), whichever
    O(state) asks.
  - "Circuit breaker, the collection's one rule: at most C(max(1, floor(max_out_of_service x nodes))) of the
    cluster's nodes (every node the API server lists) may be out of service at once (cordoned or not Ready, for any
    reason); none when O(max_out_of_service) is 0. Refused nodes are returned in RV(refused) with the count seen and
    the variable to raise (O(breaker_variable))."
  - With O(evict), the pods of the drained nodes are evicted through the Eviction API, which respects their
    PodDisruptionBudgets and their grace period (O(grace_period)); DaemonSet pods, static pods and finished pods
    stay. A bare pod (no controller makes it again) is never evicted, as C(kubectl drain) without C(--force), since it
    would be lost; it keeps its node busy. Evictions a budget refuses are tried again until O(wait_timeout); nodes
    that still run pods that must leave then are returned in RV(busy) and the task does not fail. Pods are never
    deleted directly.
  - Each change carries the node's resourceVersion, so a node changed by someone else meanwhile is read again and
    its plan made again (the breaker counting this run's changes), never overwritten.
  - A node is an owner's only with both the owner's marker in its annotation and the owner's taint; a node that
    registered with an owner's taint and neither annotation nor cordon (a kubelet's C(--register-with-taints)) is
    that owner's too.
  - Every option and node name is checked before any change; a node whose state cannot be read fails the task.
options:
  nodes:
    description: Kubernetes node names. Each must be a node the API server lists.
    type: list
    elements: str
    required: true
  state:
    description: C(drain) takes the nodes out of scheduling; C(resume) brings back the ones this owner took out.
    type: str
    choices: [drain, resume]
    required: true
  reason:
    description:
      - Why, for example the fault codes; written after the owner's marker, cut to 200 characters in all. Required
        with O(state=drain).
      - No C(=) or control characters (the same reason is a Slurm reason for nodes in both schedulers).
    type: str
  owner:
    description: Whose cordons these are (lower case letters, digits and C(-), starting with a letter).
    type: str
    default: health
  max_out_of_service:
    description: The share (0 to 1) of the cluster's nodes that may be out of service at most, for any reason.
    type: float
    default: 0.1
  breaker_variable:
    description: The variable the circuit breaker's refusal names (the one an operator changes).
    type: str
    default: max_out_of_service
  take_over:
    description: With O(state=drain), other owners of the collection whose cordons become this owner's.
    type: list
    elements: str
    default: []
  fail_on_refusal:
    description: Fail the task when the circuit breaker refused any node (the others are still drained).
    type: bool
    default: false
  evict:
    description: After the cordon, evict the pods of the drained nodes (and of those already drained by the owner).
    type: bool
    default: false
  grace_period:
    description: With O(evict), the grace period in seconds each evicted pod gets; unset, the pod's own.
    type: int
  wait_timeout:
    description: With O(evict), seconds to go on evicting (a budget may allow one pod at a time); 0 tries once.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two rounds of evictions.
    type: int
    default: 5
  kubeconfig:
    description: The kubeconfig file; unset, the client's default (C(KUBECONFIG), C(~/.kube/config)).
    type: path
  context:
    description: The kubeconfig context; unset, its current context.
    type: str
requirements:
  - kubernetes (the Python client, as the kubernetes.core modules need it)
attributes:
  check_mode:
    support: full
    description: Reads the nodes and returns what it would cordon, update, uncordon and refuse; changes nothing.
      With O(evict), returns the nodes that run pods now as busy and evicts none.
  diff_mode:
    support: full
    description: Returns the state and reason of each node that changes, before and after, one line per node.
notes:
  - The least RBAC that works - nodes list, patch; pods list; pods/eviction create - is the ServiceAccount the
    gpu_operator role makes (O(kubeconfig) of C(gpucluster_kubernetes_operations_kubeconfig)).
"""

EXAMPLES = r"""
- name: Take the Kubernetes GPU nodes with errors out of scheduling, their fault codes as the reason
  gpucluster.ops.k8s_node_state:
    nodes: [dgx03]
    state: drain
    reason: GPU-XID-79 gpu3
    kubeconfig: /etc/gpucluster-ops/operations.kubeconfig
  delegate_to: localhost

- name: Drain a node for its upgrade, its pods evicted as their budgets allow, for up to 30 minutes
  gpucluster.ops.k8s_node_state:
    nodes: [dgx04]
    state: drain
    owner: upgrade
    reason: rolling upgrade to driver 550.90.07
    evict: true
    wait_timeout: 1800
  delegate_to: localhost
"""

RETURN = r"""
drained:
  description: Nodes cordoned by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [dgx03]
updated:
  description: Nodes already out by the owner whose reason this run changed.
  returned: always
  type: list
  elements: str
  sample: []
resumed:
  description: Nodes uncordoned by this run.
  returned: always
  type: list
  elements: str
  sample: []
unchanged:
  description: Listed nodes already as asked.
  returned: always
  type: list
  elements: str
  sample: []
refused:
  description: Nodes the circuit breaker kept in service, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{node: dgx09, why: "circuit breaker: 2 of the cluster's 16 nodes are out of service ..."}]
taken_over:
  description: Listed nodes out by an owner of O(take_over) whose cordon is now this owner's.
  returned: always
  type: list
  elements: str
  sample: []
not_ours:
  description: Listed nodes out of service for another reason (an administrator's cordon, not Ready), left untouched.
  returned: always
  type: list
  elements: dict
  sample: [{node: dgx02, state: IDLE+DRAIN, reason: cordoned (not by gpucluster.ops)}]
busy:
  description: With O(evict), drained nodes that still ran pods to evict when the wait ended (in check mode, now).
  returned: always
  type: list
  elements: str
  sample: []
evicted:
  description: With O(evict), the pods evicted, as namespace/name.
  returned: always
  type: list
  elements: str
  sample: [research/train-0]
nodes:
  description: State and reason of every listed node after the run (in check mode, as they would be).
  returned: always
  type: dict
  sample: {dgx03: {state: IDLE+DRAIN, reason: "gpucluster-health: GPU-XID-79 gpu3"}}
out_of_service:
  description: Nodes out of service for any reason before and after the run, the cluster's nodes and the limit.
  returned: always
  type: dict
  sample: {before: 1, after: 2, total: 16, limit: 2}
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpucluster.ops.plugins.module_utils import _k8s_nodes, _slurm_nodes

try:
    from kubernetes import client as k8s_client, config as k8s_config
    from kubernetes.client.rest import ApiException
    HAS_KUBERNETES = True
    IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    IMPORT_ERROR = traceback.format_exc()

ATTEMPTS = 3          # plans made again after a 409 (the node changed meanwhile)


def _api_error(exc):
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None) or getattr(exc, "reason", None) or str(exc)
    return "%s %s" % (status, str(body).strip()[:300]) if status else str(exc)


class Cluster(object):
    """The API calls, through one client."""

    def __init__(self, module):
        self.module = module
        try:
            api_client = k8s_config.new_client_from_config(config_file=module.params["kubeconfig"],
                                                           context=module.params["context"])
        except Exception as exc:  # pylint: disable=broad-except
            module.fail_json(msg="could not load the kubeconfig %s (context %s): %s"
                             % (module.params["kubeconfig"] or "(the client's default)",
                                module.params["context"] or "(current)", exc))
        self.api_client = api_client
        self.core = k8s_client.CoreV1Api(api_client)

    def nodes(self, when):
        try:
            listed = self.core.list_node()
        except Exception as exc:  # pylint: disable=broad-except
            self.module.fail_json(msg="could not read the nodes %s: %s" % (when, _api_error(exc)))
        return [_k8s_nodes.view(self.api_client.sanitize_for_serialization(n)) for n in listed.items]

    def patch(self, name, body):
        self.core.patch_node(name, body)

    def pods(self, node):
        listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node)
        return [self.api_client.sanitize_for_serialization(p) for p in listed.items]

    def evict(self, pod, grace_period):
        meta = pod["metadata"]
        options = k8s_client.V1DeleteOptions(grace_period_seconds=grace_period) if grace_period is not None else None
        body = k8s_client.V1Eviction(metadata=k8s_client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
                                     delete_options=options)
        self.core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body)


def _check_params(module):
    params = module.params
    try:
        _k8s_nodes.taint_key(params["owner"])
    except ValueError:
        module.fail_json(msg="owner %r must be lower case letters, digits and '-', starting with a letter"
                         % (params["owner"],))
    if not 0 <= params["max_out_of_service"] <= 1:
        module.fail_json(msg="max_out_of_service %s must be from 0 to 1" % (params["max_out_of_service"],))
    if params["state"] == "drain":
        problem = _slurm_nodes.reason_problem(params["reason"])
        if problem:
            module.fail_json(msg="reason %r %s (it is required with state=drain)" % (params["reason"], problem))
    for option, least in (("wait_timeout", 0), ("poll_interval", 1)):
        if params[option] < least:
            module.fail_json(msg="%s %d must be %d or more" % (option, params[option], least))
    if params["grace_period"] is not None and params["grace_period"] < 0:
        module.fail_json(msg="grace_period %d must be 0 or more" % params["grace_period"])
    names = []
    for name in params["nodes"]:
        name = (name or "").strip()
        if not name:
            module.fail_json(msg="nodes: an empty node name")
        if name not in names:
            names.append(name)
    if not names:
        module.fail_json(msg="nodes is empty: name at least one node")
    return names


def _plan(module, cluster_nodes, names):
    params = module.params
    return _k8s_nodes.plan(cluster_nodes, names, params["state"], params["reason"], params["owner"],
                           params["max_out_of_service"], params["breaker_variable"], params["take_over"])


def _move(plan, name, sub):
    """Put ``name`` where the one-node plan ``sub`` (made again after a conflict) says, in ``plan``'s lists."""
    for key in ("drained", "updated", "resumed", "unchanged", "taken_over"):
        if name in plan[key]:
            plan[key].remove(name)
        plan[key].extend(n for n in sub[key] if n == name)
    for key in ("refused", "not_ours"):
        plan[key] = [r for r in plan[key] if r["node"] != name] + [r for r in sub[key] if r["node"] == name]
    plan["after"][name] = sub["after"][name]
    plan["actions"] = [a for a in plan["actions"] if a[0] != name] + [a for a in sub["actions"] if a[0] == name]


def _apply(module, cluster, names):
    """Read, plan and patch node by node. A 409 (the node changed since it was read) reads the nodes again and plans
    that node again, up to ATTEMPTS times; the breaker then counts the changes this run made already."""
    params = module.params
    nodes = cluster.nodes("before any change")
    known = set(n["name"] for n in nodes)
    unknown = [n for n in names if n not in known]
    if unknown:
        module.fail_json(msg="nodes: %s not known to the API server (it lists %s)"
                         % (", ".join(unknown), ", ".join(sorted(known)) or "no node"))
    plan = _plan(module, nodes, names)
    if module.check_mode:
        return nodes, plan, [], bool(plan["actions"])
    by_name = dict((n["name"], n) for n in nodes)
    failures, changed = [], False
    for name, action, reason in list(plan["actions"]):
        view = by_name[name]
        for attempt in range(ATTEMPTS + 1):
            try:
                cluster.patch(name, _k8s_nodes.patch(view, action, params["owner"], reason))
                changed = True
                break
            except ApiException as exc:
                if exc.status != 409 or attempt == ATTEMPTS:
                    failures.append("%s %s: %s" % (action, name, _api_error(exc)))
                    break
            except Exception as exc:  # pylint: disable=broad-except
                failures.append("%s %s: %s" % (action, name, exc))
                break
            fresh = cluster.nodes("again after a conflict on %s" % name)
            sub = _plan(module, fresh, [name])
            _move(plan, name, sub)
            if not sub["actions"]:
                break
            view = dict((n["name"], n) for n in fresh)[name]
            action, reason = sub["actions"][0][1], sub["actions"][0][2]
    return nodes, plan, failures, changed


def _evict(module, cluster, names):
    """Evict the pods of ``names`` until none that must leave is left or wait_timeout passed: (busy nodes, evicted
    pods, errors). A node is busy while a pod that must leave is on it (terminating, held by its budget, or a bare
    pod, which is never evicted)."""
    params = module.params
    deadline = time.monotonic() + params["wait_timeout"]
    evicted, errors = [], {}
    while True:
        for node in names:
            try:
                pods = [p for p in cluster.pods(node) if _k8s_nodes.evictable(p)]
            except Exception as exc:  # pylint: disable=broad-except
                errors[node] = "could not list its pods: %s" % _api_error(exc)
                continue
            for pod in pods if not module.check_mode else []:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                key = "%s/%s" % (meta["namespace"], meta["name"])
                try:
                    cluster.evict(pod, params["grace_period"])
                    if key not in evicted:
                        evicted.append(key)
                except ApiException as exc:
                    # 429: a PodDisruptionBudget allows no disruption now; 404: gone meanwhile.
                    if exc.status not in (404, 429):
                        errors[node] = "eviction of %s: %s" % (key, _api_error(exc))
                except Exception as exc:  # pylint: disable=broad-except
                    errors[node] = "eviction of %s: %s" % (key, exc)
        if not module.check_mode and evicted:
            time.sleep(min(1, params["poll_interval"]))
        busy = []
        for node in names:
            try:
                if any(_k8s_nodes.must_leave(p) for p in cluster.pods(node)):
                    busy.append(node)
            except Exception as exc:  # pylint: disable=broad-except
                errors[node] = "could not list its pods: %s" % _api_error(exc)
                busy.append(node)
        if not busy or module.check_mode or time.monotonic() >= deadline:
            return busy, evicted, errors
        time.sleep(max(0, min(params["poll_interval"], deadline - time.monotonic())))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["drain", "resume"], required=True),
            reason=dict(type="str"),
            owner=dict(type="str", default=_slurm_nodes.HEALTH_OWNER),
            max_out_of_service=dict(type="float", default=0.1),
            breaker_variable=dict(type="str", default="max_out_of_service"),
            take_over=dict(type="list", elements="str", default=[]),
            fail_on_refusal=dict(type="bool", default=False),
            evict=dict(type="bool", default=False),
            grace_period=dict(type="int"),
            wait_timeout=dict(type="int", default=600),
            poll_interval=dict(type="int", default=5),
            kubeconfig=dict(type="path"),
            context=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=IMPORT_ERROR)
    params = module.params
    names = _check_params(module)
    cluster = Cluster(module)

    first, plan, failures, changed = _apply(module, cluster, names)
    before = dict((n["name"], dict(state=n["state"], reason=n["reason"])) for n in first if n["name"] in names)
    result = dict(changed=changed, drained=plan["drained"], updated=plan["updated"],
                  resumed=plan["resumed"], unchanged=plan["unchanged"], refused=plan["refused"], busy=[], evicted=[],
                  not_ours=plan["not_ours"], taken_over=plan["taken_over"], nodes=plan["after"],
                  out_of_service=plan["out_of_service"])
    if changed:
        failures.extend(_read_back(module, cluster, plan, names, result))
    result["diff"] = _slurm_nodes.diff(before, result["nodes"], names)
    if failures:
        module.fail_json(msg="the API server did not take every change: %s" % "; ".join(failures), **result)

    if params["evict"] and params["state"] == "drain":
        out = [n for n in names if n in plan["drained"] + plan["updated"] + plan["unchanged"]]
        if out:
            busy, evicted, errors = _evict(module, cluster, out)
            result.update(busy=busy, evicted=evicted)
            result["changed"] = result["changed"] or bool(evicted)
            for node, error in sorted(errors.items()):
                module.warn("%s: %s (the node is returned as busy)" % (node, error))
    if plan["refused"] and params["fail_on_refusal"]:
        module.fail_json(msg="the circuit breaker refused to take %s out: %s" % (
            ", ".join(r["node"] for r in plan["refused"]), plan["refused"][0]["why"]), **result)
    module.exit_json(**result)


def _read_back(module, cluster, plan, names, result):
    """Read the nodes again after the changes; return what the API server did not take."""
    by_name = dict((n["name"], n) for n in cluster.nodes("back after the changes"))
    result["nodes"] = dict((n, dict(state=by_name[n]["state"], reason=by_name[n]["reason"]))
                           for n in names if n in by_name)
    result["out_of_service"] = dict(result["out_of_service"], after=_slurm_nodes.count_out(list(by_name.values())))
    problems = []
    owner = module.params["owner"]
    for name, action, reason in plan["actions"]:
        node = by_name.get(name)
        if node is None:
            problems.append("%s is no longer listed" % name)
        elif action == "resume" and (node["unschedulable"] or node["annotation"]):
            problems.append("%s is still out (%s, %s)" % (name, node["state"], node["reason"]))
        elif action != "resume" and not (node["unschedulable"] and node["reason"] == reason and any(
                t.get("key") == _k8s_nodes.taint_key(owner) for t in node["taints"])):
            problems.append("%s shows %s %r after %s, not cordoned and tainted with %r"
                            % (name, node["state"], node["reason"], action, reason))
    return problems


if __name__ == "__main__":
    main()
