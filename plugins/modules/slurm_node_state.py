#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_node_state
short_description: Drain or resume Slurm nodes under an owner's marker, behind a circuit breaker
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads every node with C(scontrol show node -o), decides per listed node, and runs
    C(scontrol update nodename=NODE state=drain reason=...) or C(state=resume) only where the state differs.
  - The Slurm reason of a drain is the owner's marker C(gpucluster-<owner>:), a blank and O(reason).
    O(state=resume) resumes only nodes whose drain carries the same owner's marker; a node drained, down or failing
    for any other reason is left as it is and returned in RV(not_ours), whichever O(state) asks. A node already
    drained by the owner with another reason gets its reason updated.
  - "Circuit breaker, the collection's one rule: at most C(max(1, floor(max_out_of_service x nodes))) of the
    cluster's nodes (every node C(scontrol show node -o) lists) may be out of service at once (down, drained,
    draining or failing, for any reason); none when O(max_out_of_service) is 0. Listed nodes are drained in the order
    given up to that limit; the rest are refused and returned in RV(refused), with the count seen and the variable
    to raise (O(breaker_variable))."
  - With O(wait), waits after draining until the drained nodes run no job (C(squeue -t RUNNING,COMPLETING)); jobs
    are never cancelled, nodes still busy at the deadline are returned in RV(busy) and the task does not fail.
  - Checks every option and node name before any change and fails naming the option and value.
  - The marker, the breaker and the owners are described in docs/drain.md.
options:
  nodes:
    description:
      - Slurm node names to drain or resume. A Slurm hostlist expression such as C(gpu[01-04]) is expanded.
      - Every name must be a node C(scontrol show node -o) lists.
    type: list
    elements: str
    required: true
  state:
    description: C(drain) takes the nodes out of service; C(resume) brings back the ones this owner drained.
    type: str
    choices: [drain, resume]
    required: true
  reason:
    description:
      - Why the nodes are drained, for example the fault codes; written after the owner's marker and cut to 200
        characters in all. Required with O(state=drain), ignored with O(state=resume).
      - No C(=) or control characters (C(scontrol show node -o) could not be read back).
    type: str
  owner:
    description:
      - Whose drains these are; the marker is C(gpucluster-<owner>:). C(health) is the owner of the node-local
        health check's drains (C(gpucluster-health:)), so a drain by either may be resumed by the other.
      - Lower case letters, digits and C(-), starting with a letter.
    type: str
    default: health
  max_out_of_service:
    description: The share (0 to 1) of the cluster's nodes that may be out of service at most, for any reason.
    type: float
    default: 0.1
  breaker_variable:
    description:
      - The name the circuit breaker's refusal gives for the share, so that it names the variable an operator
        changes (the inventory variable a playbook passes as O(max_out_of_service)).
    type: str
    default: max_out_of_service
  take_over:
    description:
      - With O(state=drain), other owners of the collection whose drains this owner takes over - a node out of
        service with one of their markers gets this owner's marker and O(reason) (it is out of service already, so
        the circuit breaker counts nothing more) and is returned in RV(taken_over) and RV(updated). NVLink
        remediation takes over the node-local health check's drains (C(health)), so that it can remediate them.
      - Drains of an administrator or of Slurm itself are never taken over.
    type: list
    elements: str
    default: []
  fail_on_refusal:
    description: Fail the task when the circuit breaker refused any drain (the other drains are still made).
    type: bool
    default: false
  wait:
    description: After draining, wait until the drained nodes (and those already drained by the owner) run no job.
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait at most with O(wait).
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two C(squeue) polls with O(wait).
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Reads the nodes and returns what it would drain, update, resume and refuse; changes nothing.
      With O(wait), runs C(squeue) once and returns the busy nodes without waiting.
  diff_mode:
    support: full
    description: Returns the state and reason of each node that changes, before and after, one line per node.
notes:
  - Runs where C(scontrol) reaches slurmctld as a Slurm administrator, for example delegated to the first host of
    the C(slurm_controller) group.
  - On a small cluster any share above 0 allows one node out (10 % of 9 nodes is one), and no more until the share
    allows two.
"""

EXAMPLES = r"""
- name: Drain the nodes whose health check found errors, with the fault codes as the reason
  gpucluster.ops.slurm_node_state:
    nodes: [gpu01, gpu07]
    state: drain
    reason: GPU-XID-79 gpu3
  delegate_to: "{{ groups['slurm_controller'][0] }}"

- name: Resume the nodes the health checks drained that are healthy again
  gpucluster.ops.slurm_node_state:
    nodes: gpu[01-04]
    state: resume
  delegate_to: "{{ groups['slurm_controller'][0] }}"

- name: Take a rack out for maintenance, waiting up to two hours for its jobs to finish
  gpucluster.ops.slurm_node_state:
    nodes: rack3-gpu[01-16]
    state: drain
    owner: maintenance
    reason: rack 3 PDU swap, ticket 4711
    max_out_of_service: 0.25
    fail_on_refusal: true
    wait: true
    wait_timeout: 7200
  delegate_to: "{{ groups['slurm_controller'][0] }}"
"""

RETURN = r"""
drained:
  description: Nodes drained by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [gpu07]
updated:
  description: Nodes already drained by the owner whose reason this run changed.
  returned: always
  type: list
  elements: str
  sample: [gpu01]
resumed:
  description: Nodes resumed by this run.
  returned: always
  type: list
  elements: str
  sample: []
unchanged:
  description: Listed nodes already as asked (drained by the owner with this reason, or in service for a resume).
  returned: always
  type: list
  elements: str
  sample: []
refused:
  description: Drains the circuit breaker refused, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu09, why: "circuit breaker: 2 of the cluster's 16 nodes are out of service ..."}]
busy:
  description: Nodes drained by the owner that still ran a job when O(wait) ended (in check mode, those running one now).
  returned: always
  type: list
  elements: str
  sample: []
taken_over:
  description: Listed nodes drained by an owner of O(take_over) whose drain is now this owner's.
  returned: always
  type: list
  elements: str
  sample: [gpu07]
not_ours:
  description: Listed nodes out of service for another reason or owner, left untouched.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu03, state: DOWN+DRAIN, reason: disk replacement}]
nodes:
  description: State and reason of every listed node after the run (in check mode, as they would be).
  returned: always
  type: dict
  sample: {gpu07: {state: IDLE+DRAIN, reason: "gpucluster-health: GPU-XID-79 gpu3"}}
out_of_service:
  description: Nodes out of service for any reason before and after the run, the cluster's nodes and the limit.
  returned: always
  type: dict
  sample: {before: 1, after: 2, total: 16, limit: 2}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist, _slurm_nodes

ENVIRON = {"LC_ALL": "C", "LANG": "C"}


def _names(module, items):
    names = []
    seen = set()
    for item in items:
        problem = _hostlist.check(item.strip())
        if problem:
            module.fail_json(msg="nodes: %r is not a node name or hostlist: %s" % (item, problem))
        expanded = _hostlist.expand(item.strip())
        if not expanded:
            module.fail_json(msg="nodes: %r names no node" % (item,))
        for name in expanded:
            if name not in seen:
                seen.add(name)
                names.append(name)
    if not names:
        module.fail_json(msg="nodes is empty: name at least one node")
    return names


def _check_params(module):
    params = module.params
    try:
        _slurm_nodes.marker(params["owner"])
    except ValueError:
        module.fail_json(msg="owner %r must be lower case letters, digits and '-', starting with a letter"
                         % (params["owner"],))
    share = params["max_out_of_service"]
    if not 0 <= share <= 1:
        module.fail_json(msg="max_out_of_service %s must be from 0 to 1" % (share,))
    if params["state"] == "drain":
        problem = _slurm_nodes.reason_problem(params["reason"])
        if problem:
            module.fail_json(msg="reason %r %s (it is required with state=drain)" % (params["reason"], problem))
    for option, least in (("wait_timeout", 0), ("poll_interval", 1)):
        if params[option] < least:
            module.fail_json(msg="%s %d must be %d or more" % (option, params[option], least))


def _read_nodes(module, scontrol, when):
    rc, out, err = module.run_command([scontrol, "show", "node", "-o"], environ_update=ENVIRON)
    nodes = _slurm_nodes.parse_scontrol_nodes(out) if rc == 0 else []
    if rc != 0 or not nodes:
        module.fail_json(msg="could not read the nodes %s: scontrol show node -o exited %d: %s"
                         % (when, rc, (err or out).strip() or "no node listed"))
    return nodes


def _poller(module, squeue, names):
    hostlist = _hostlist.fold(names, sort=False)

    def poll():
        rc, out, err = module.run_command(_slurm_nodes.squeue_argv(squeue, hostlist), environ_update=ENVIRON)
        if rc != 0:
            return list(names), "squeue exited %d: %s" % (rc, (err or out).strip())
        return _slurm_nodes.busy_nodes(out, names, _hostlist.expand), None
    return poll


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
            wait=dict(type="bool", default=False),
            wait_timeout=dict(type="int", default=3600),
            poll_interval=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    params = module.params
    _check_params(module)
    names = _names(module, params["nodes"])
    scontrol = module.get_bin_path("scontrol", required=True)
    squeue = module.get_bin_path("squeue", required=True) if params["wait"] and params["state"] == "drain" else None

    cluster = _read_nodes(module, scontrol, "before any change")
    known = set(n["name"] for n in cluster)
    unknown = [n for n in names if n not in known]
    if unknown:
        module.fail_json(msg="nodes: %s not known to Slurm (scontrol show node -o lists %s)"
                         % (", ".join(unknown), _hostlist.fold(sorted(known))))
    plan = _slurm_nodes.plan(cluster, names, params["state"], params["reason"], params["owner"],
                             params["max_out_of_service"], params["breaker_variable"], params["take_over"])
    before = dict((n["name"], dict(state=n["state"], reason=n["reason"])) for n in cluster if n["name"] in names)
    result = dict(changed=bool(plan["actions"]), drained=plan["drained"], updated=plan["updated"],
                  resumed=plan["resumed"], unchanged=plan["unchanged"], refused=plan["refused"], busy=[],
                  not_ours=plan["not_ours"], taken_over=plan["taken_over"], nodes=plan["after"], out_of_service=plan["out_of_service"])

    failures = []
    if not module.check_mode:
        for name, action, reason in plan["actions"]:
            rc, out, err = module.run_command(_slurm_nodes.update_argv(scontrol, name, action, reason),
                                              environ_update=ENVIRON)
            if rc != 0:
                failures.append("%s %s: scontrol exited %d: %s" % (action, name, rc, (err or out).strip()))
        if plan["actions"]:
            failures.extend(_read_back(module, scontrol, plan, names, result))
    result["diff"] = _slurm_nodes.diff(before, result["nodes"], names)
    if failures:
        module.fail_json(msg="Slurm did not take every change: %s" % "; ".join(failures), **result)

    if squeue:
        waited = [n for n in names if n in plan["drained"] + plan["updated"] + plan["unchanged"]]
        if waited:
            poll = _poller(module, squeue, waited)
            if module.check_mode:
                busy, error = _slurm_nodes.wait_idle(poll, waited, 0, params["poll_interval"])
            else:
                busy, error = _slurm_nodes.wait_idle(poll, waited, params["wait_timeout"], params["poll_interval"])
            result["busy"] = busy
            if error:
                module.warn("could not tell which drained nodes still run jobs (%s): all of them are returned as "
                            "busy" % error)
    if plan["refused"] and params["fail_on_refusal"]:
        module.fail_json(msg="the circuit breaker refused to drain %s: %s" % (
            ", ".join(r["node"] for r in plan["refused"]), plan["refused"][0]["why"]), **result)
    module.exit_json(**result)


def _read_back(module, scontrol, plan, names, result):
    """Read the nodes again after the changes; return what Slurm did not take."""
    cluster = _read_nodes(module, scontrol, "back after the changes")
    by_name = dict((n["name"], n) for n in cluster)
    result["nodes"] = dict((n, dict(state=by_name[n]["state"], reason=by_name[n]["reason"]))
                           for n in names if n in by_name)
    result["out_of_service"] = dict(result["out_of_service"], after=_slurm_nodes.count_out(cluster))
    problems = []
    for name, action, reason in plan["actions"]:
        node = by_name.get(name)
        if node is None:
            problems.append("%s is no longer listed" % name)
        elif action == "resume" and _slurm_nodes.ours(node, module.params["owner"]):
            problems.append("%s is still drained (%s, %s)" % (name, node["state"], node["reason"]))
        elif action != "resume" and not (_slurm_nodes.out_of_service(node["state"]) and node["reason"] == reason):
            problems.append("%s shows state %s reason %r after %s, not drained with %r"
                            % (name, node["state"], node["reason"], action, reason))
    return problems


if __name__ == "__main__":
    main()
