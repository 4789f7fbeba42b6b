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
- Circuit breaker: the collection's one rule (``_slurm_nodes.breaker_limit``): at most ``max(1, floor(share x
  nodes))`` nodes out of service at once, counting every node out of service for any reason, ``share`` being
  ``max_drained_share`` (the inventory's ``health_check_slurm_max_drained_share``); a shared cause, such as a bad
  driver roll-out or a fabric manager bug, must not empty the cluster. The refusal names that variable and the count.

The marker, the states that count as out of service, the breaker and the scontrol command come from
``_slurm_nodes``, shared with the ``slurm_node_state`` module: a drain by either with owner ``health`` is one the
other may resume, and both refuse at the same count (each node decides alone, so two nodes failing at the same
moment may both see room for one; docs/drain.md).
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


BREAKER_VARIABLE = "health_check_slurm_max_drained_share"


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
    allowed, out, total = _slurm_nodes.breaker_allows(nodes, max_drained_share)
    if not allowed:
        refusal = _slurm_nodes.breaker_refusal(node_name, out, total, max_drained_share, BREAKER_VARIABLE)
        return "refuse", "%s (%s)" % (refusal, reason)
    return "drain", reason


def apply(action, argument, node_name, run, scontrol="scontrol"):
    """Carry out a decision with scontrol. ``run(argv) -> (rc, out, err)``. Returns (rc, message)."""
    if action not in ("drain", "update", "resume"):
        return 0, argument
    argv = _slurm_nodes.update_argv(scontrol, node_name, action, argument if action != "resume" else None)
    rc, out, err = run(argv)
    return rc, "%s %s: %s" % (action, node_name, argument if rc == 0 else (err or out).strip())
