# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Take a node out of Slurm when its health check fails, and bring it back when it is healthy again.

Slurm runs the HealthCheckProgram as root on every node and does nothing with its exit code, so the program
drains the node itself. Rules:

- An ``error`` drains the node with the fault codes as the reason, prefixed ``gpucluster-health:``.
- A node drained, down or failing for any other reason (an administrator, Slurm itself) is never touched.
- A node this program drained is resumed once the check is no longer ``error``; its reason is updated when the
  codes change.
- ``unknown`` (inputs could not be read) neither drains nor resumes.
- Circuit breaker: when more than ``max_drained_share`` of the cluster's nodes are already drained by health
  checks, no further node is drained (a shared cause, such as a bad driver roll-out or a fabric manager bug, must
  not empty the cluster); the refusal is reported.

The marker, the states that count as out of service and the breaker's limit come from ``_slurm_nodes``, shared with
the ``slurm_node_state`` module: a drain by either with owner ``health`` is one the other may resume. This wrapper
counts only the nodes drained by health checks and refuses once they are more than the limit (each node decides
alone, so it may make the count one over the limit); the module counts every node out of service for any reason
and never passes the limit (docs/drain.md).
"""

from __future__ import annotations

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_nodes

REASON_PREFIX = _slurm_nodes.marker(_slurm_nodes.HEALTH_OWNER)
parse_scontrol_nodes = _slurm_nodes.parse_scontrol_nodes


def _drained(state):
    return _slurm_nodes.out_of_service(state)


def ours(node):
    """Whether the node is drained by this program (or by slurm_node_state with owner health: the same marker)."""
    return _slurm_nodes.ours(node, _slurm_nodes.HEALTH_OWNER)


def drain_reason(findings):
    """The Slurm reason for a list of findings: the prefix and the error codes with their targets."""
    parts = []
    for item in findings:
        if item["severity"] != "error":
            continue
        part = "%s %s" % (item["code"], item["target"]) if item["target"] != "node" else item["code"]
        if part not in parts:
            parts.append(part)
    return _slurm_nodes.slurm_reason(_slurm_nodes.HEALTH_OWNER, ", ".join(parts))


def decide(result, node_name, nodes, max_drained_share=0.1):
    """What to do: ("drain", reason) | ("resume", why) | ("update", reason) | ("none", why) | ("refuse", why)."""
    me = next((n for n in nodes if n["name"] == node_name), None)
    if me is None:
        return "none", "node %s is not known to Slurm" % node_name
    status = result["status"]
    if status == "unknown":
        return "none", "health unknown (inputs unreadable): leaving the node as it is"
    if status != "error":
        if ours(me):
            return "resume", "healthy again (%s)" % status
        return "none", "healthy (%s)" % status
    reason = drain_reason(result["findings"])
    if ours(me):
        return ("update", reason) if me["reason"] != reason else ("none", "already drained: " + reason)
    if _drained(me["state"]):
        return "none", "drained or down by someone else (%s): not touching it" % (me["reason"] or me["state"])
    drained_by_us = _slurm_nodes.count_out(nodes, _slurm_nodes.HEALTH_OWNER)
    total = len(nodes)
    if total and drained_by_us > _slurm_nodes.breaker_limit(total, max_drained_share):
        return "refuse", ("circuit breaker: %d of %d nodes are already drained by health checks, more than "
                          "%.0f%%: not draining %s; look for a cluster-wide cause (%s)" % (
                              drained_by_us, total, max_drained_share * 100, node_name, reason))
    return "drain", reason


def apply(action, argument, node_name, run, scontrol="scontrol"):
    """Carry out a decision with scontrol. ``run(argv) -> (rc, out, err)``. Returns (rc, message)."""
    if action == "drain" or action == "update":
        argv = [scontrol, "update", "nodename=%s" % node_name, "state=drain", "reason=%s" % argument]
    elif action == "resume":
        argv = [scontrol, "update", "nodename=%s" % node_name, "state=resume"]
    else:
        return 0, argument
    rc, out, err = run(argv)
    return rc, "%s %s: %s" % (action, node_name, argument if rc == 0 else (err or out).strip())
