# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Slurm nodes as the collection drains and resumes them: scontrol/squeue parsing, the drain marker, the breaker.

Shared by the ``slurm_node_state`` module (run on the controller for many nodes) and the node-local health wrapper
(``_health_slurm``, one node from its own HealthCheckProgram), so that both read states alike, write and recognise
the same marker, and compute the circuit breaker's limit alike (docs/drain.md).

- The marker: a drain's Slurm reason is ``gpucluster-<owner>: <reason>``; the owner ``health`` is the health
  checks' (the wrapper's historical prefix ``gpucluster-health:``). A node is *ours* (an owner's) when it is out of
  service and its reason starts with that owner's marker; nothing else is ever resumed.
- Out of service: the base state is DOWN, or a DRAIN or FAIL flag is set (drained, draining, failing).
- The breaker, one rule for every drain of the collection (the node wrapper, the playbooks' drains, NVLink
  remediation; a Kubernetes cordon later): at most ``max(1, floor(share * total))`` nodes out of service at once
  (none when the share is 0), ``total`` being every node ``scontrol show node -o`` lists, counting every node out of
  service for any reason. The refusal names the variable that sets the share and the count it saw.
- States and reasons are read by structure: in ``scontrol show node -o`` the State field comes before the Reason,
  and the Reason is free text that runs to Slurm's ``[user@time]`` stamp; an administrator's reason that holds
  ``State=``, ``Reason=``, quotes or our own marker is read as text, never as fields.

Standard library only: the wrapper runs on the nodes with the checker.
"""

from __future__ import annotations

import math
import re
import time

HEALTH_OWNER = "health"
OWNER_PATTERN = re.compile(r"^[a-z][a-z0-9-]*$")
REASON_MAX = 200            # characters of the Slurm reason kept (the rest is cut, ending in "...")
_FORBIDDEN_IN_REASON = re.compile(r"[=\x00-\x1f\x7f]")


def marker(owner=HEALTH_OWNER):
    """The reason prefix of an owner: ``gpucluster-<owner>:``. Raises ValueError for a bad owner."""
    if not isinstance(owner, str) or not OWNER_PATTERN.match(owner):
        raise ValueError("owner %r must match %s" % (owner, OWNER_PATTERN.pattern))
    return "gpucluster-%s:" % owner


def reason_problem(text):
    """Why ``text`` cannot be a drain reason (None when it can): empty, or a character scontrol -o cannot give back."""
    if not isinstance(text, str) or not text.strip():
        return "must not be empty"
    if _FORBIDDEN_IN_REASON.search(text):
        return "must not contain '=' or control characters (scontrol show node -o could not be read back)"
    return None


def slurm_reason(owner, text):
    """The Slurm reason written for ``text``: the owner's marker, a blank, the text; cut to REASON_MAX."""
    reason = "%s %s" % (marker(owner), text.strip())
    return reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 3] + "..."


# ---- scontrol show node -o ---------------------------------------------------------------------------------------

def parse_scontrol_nodes(text):
    """``scontrol show node -o`` (one node per line) -> [{"name", "state", "reason"}]."""
    nodes = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        fields = _fields(line)
        nodes.append({"name": fields.get("NodeName", ""), "state": fields.get("State", ""),
                      "reason": fields.get("Reason", "")})
    return nodes


# Slurm's stamp after a reason: `` [user@2026-12-01T10:00:00]`` (a user name holds no blank, '[', ']' or '@').
_REASON_STAMP = re.compile(r" \[[^\s\[\]@]+@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]")
# The fields scontrol -o may print after the reason, all free text set by an administrator.
_AFTER_REASON = re.compile(r" (?:Comment|Extra)=")


def node_fields(line):
    """The fields of one ``scontrol show node -o`` line, as ``{key: value}`` (see ``_fields``)."""
    return _fields(line)


def _fields(line):
    """Split ``Key=value Key=value with spaces`` as scontrol -o prints it, by structure.

    The fields before ``Reason`` are read token by token (a value may hold blanks: the OS string); a key seen twice
    keeps its first value. The Reason is free text: it is everything from the first `` Reason=`` to Slurm's
    ``[user@time]`` stamp (the last one on the line), or, without a stamp, to a following Comment or Extra field or
    the end of the line. What the reason holds (``State=IDLE``, ``Reason=``, quotes) is never read as a field.
    """
    out = {}
    at = line.find(" Reason=")
    head = line if at < 0 else line[:at]
    key = None
    for token in head.split(" "):
        if "=" in token and token.split("=", 1)[0].isalnum():
            key, value = token.split("=", 1)
            if key in out:
                key = None          # a repeated key: the first value stands
                continue
            out[key] = value
        elif key is not None:
            out[key] += " " + token
    if at >= 0:
        reason = line[at + len(" Reason="):]
        stamps = list(_REASON_STAMP.finditer(reason))
        if stamps:
            reason = reason[:stamps[-1].start()]
        else:
            after = _AFTER_REASON.search(reason)
            if after:
                reason = reason[:after.start()]
        out["Reason"] = reason
    return out


def out_of_service(state):
    """Whether a node in this scontrol state takes no new jobs: DOWN, or drained/draining, or failing."""
    parts = (state or "").upper().replace("*", "").split("+")
    return parts[0].startswith("DOWN") or any(p.startswith("DRAIN") or p.startswith("FAIL") for p in parts)


def ours(node, owner=HEALTH_OWNER):
    """Whether the node is out of service by this owner's doing (its reason carries the owner's marker)."""
    return out_of_service(node["state"]) and node["reason"].startswith(marker(owner))


_MARKER_RE = re.compile(r"^gpucluster-([a-z][a-z0-9-]*):")


def owner_of(reason):
    """The owner whose marker starts ``reason`` (``health`` for ``gpucluster-health: ...``), or None."""
    match = _MARKER_RE.match(reason or "")
    return match.group(1) if match else None


def count_out(nodes, owner=None):
    """How many of ``nodes`` are out of service: for any reason, or (``owner`` given) by that owner's doing."""
    if owner is None:
        return sum(1 for n in nodes if out_of_service(n["state"]))
    return sum(1 for n in nodes if ours(n, owner))


def breaker_limit(total, share):
    """The most nodes of ``total`` that ``share`` (0-1) allows out of service at once: ``floor(share * total)``, but
    at least 1 (a small cluster can drain a node), and 0 only when the share is 0."""
    if not share or share <= 0 or total <= 0:
        return 0
    return max(1, int(math.floor(share * total + 1e-9)))


def breaker_refusal(node, out, total, share, variable):
    """Why the breaker refuses to take ``node`` out: the count seen, the limit, and the variable that sets it."""
    return ("circuit breaker: %d of the cluster's %d nodes are out of service (for any reason) and %s=%s allows at "
            "most %d; not taking %s out. Look for a cluster-wide cause, or raise %s" % (
                out, total, variable, share, breaker_limit(total, share), node, variable))


def breaker_allows(nodes, share):
    """(allowed, out, total): whether one more of ``nodes`` (scontrol's) may go out of service under ``share``."""
    total = len(nodes)
    out = count_out(nodes)
    return out + 1 <= breaker_limit(total, share), out, total


def drained_state(state):
    """The state scontrol shows once an in-service node in ``state`` is drained (a prediction for check mode)."""
    return (state or "UNKNOWN") + "+DRAIN"


def resumed_state(state):
    """The state scontrol shows once a drained node in ``state`` is resumed (a prediction for check mode)."""
    parts = [p for p in (state or "UNKNOWN").split("+") if not p.upper().startswith("DRAIN")]
    return "+".join(parts) or "IDLE"


# ---- squeue -h -w NODES -t RUNNING,COMPLETING -o %N --------------------------------------------------------------

def squeue_argv(squeue, hostlist):
    """The squeue command that lists the node lists of the running and completing jobs on ``hostlist``."""
    return [squeue, "-h", "-w", hostlist, "-t", "RUNNING,COMPLETING", "-o", "%N"]


def busy_nodes(text, names, expand):
    """The names of ``names`` that a job of squeue's output (one node list per line) runs on, in their order."""
    used = set()
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            used.update(expand(line))
    return [n for n in names if n in used]


def _now():
    return time.monotonic()


def _sleep(seconds):
    time.sleep(seconds)


def wait_idle(poll, names, timeout, interval):
    """Poll ``poll() -> (busy names, error or None)`` until none of ``names`` is busy or ``timeout`` seconds passed.

    Returns (busy at the end, the last error or None). Polls at least once; a poll that fails counts every node as
    busy (it could not be told otherwise) and is retried at the next interval.
    """
    deadline = _now() + timeout
    while True:
        busy, error = poll()
        if error is not None:
            busy = list(names)
        if not busy or _now() >= deadline:
            return busy, error
        _sleep(max(0, min(interval, deadline - _now())))


# ---- the module's plan -------------------------------------------------------------------------------------------

def plan(cluster, names, state, reason=None, owner=HEALTH_OWNER, share=0.1, variable="max_out_of_service",
         take_over=()):
    """What to do with ``names`` (known to ``cluster``, scontrol's nodes) for ``state`` drain or resume.

    With ``state`` drain, a node out of service by one of the owners in ``take_over`` (other owners of the
    collection) becomes this owner's: its reason is updated (it is out of service already, so the breaker has nothing
    more to count) and it is listed in ``taken_over`` as well as ``updated``.

    Returns a dict: ``actions`` [(name, "drain"|"update"|"resume", slurm reason or None)] in the order given,
    ``drained``, ``updated``, ``resumed``, ``unchanged`` (names), ``refused`` [{node, why}], ``not_ours`` [{node,
    state, reason}], ``after`` {name: {state, reason}} (predicted), ``out_of_service`` {before, after, total, limit}.
    """
    by_name = dict((n["name"], n) for n in cluster)
    total = len(cluster)
    limit = breaker_limit(total, share)
    before = out = count_out(cluster)
    wanted = slurm_reason(owner, reason) if state == "drain" else None
    result = dict(actions=[], drained=[], updated=[], resumed=[], unchanged=[], refused=[], not_ours=[], after={},
                  taken_over=[])
    for name in names:
        node = by_name[name]
        after = dict(state=node["state"], reason=node["reason"])
        if ours(node, owner):
            if state == "resume":
                result["actions"].append((name, "resume", None))
                result["resumed"].append(name)
                after = dict(state=resumed_state(node["state"]), reason="")
            elif node["reason"] != wanted:
                result["actions"].append((name, "update", wanted))
                result["updated"].append(name)
                after["reason"] = wanted
            else:
                result["unchanged"].append(name)
        elif state == "drain" and out_of_service(node["state"]) and owner_of(node["reason"]) in take_over:
            result["actions"].append((name, "update", wanted))
            result["updated"].append(name)
            result["taken_over"].append(name)
            after["reason"] = wanted
        elif out_of_service(node["state"]):
            result["not_ours"].append(dict(node=name, state=node["state"], reason=node["reason"]))
        elif state == "resume":
            result["unchanged"].append(name)
        elif out + 1 > limit:
            result["refused"].append(dict(node=name, why=breaker_refusal(name, out, total, share, variable)))
        else:
            out += 1
            result["actions"].append((name, "drain", wanted))
            result["drained"].append(name)
            after = dict(state=drained_state(node["state"]), reason=wanted)
        result["after"][name] = after
    predicted = [dict(by_name[n], **result["after"].get(n, {})) for n in by_name]
    result["out_of_service"] = dict(before=before, after=count_out(predicted), total=total, limit=limit)
    return result


def diff(before, after, names):
    """Ansible's diff of a drain module: one ``NAME state=... reason=...`` line per node of ``names`` that changed,
    from ``before`` and ``after`` ({name: {state, reason}}); both modules (Slurm's, Kubernetes') return it."""
    def line(name, node):
        return "%s state=%s reason=%s\n" % (name, node["state"], node["reason"])
    changed = [n for n in names if (before[n]["state"], before[n]["reason"]) != (after[n]["state"], after[n]["reason"])]
    return dict(before="".join(line(n, before[n]) for n in changed), after="".join(line(n, after[n]) for n in changed))


def update_argv(scontrol, name, action, reason=None):
    """The scontrol command that carries out one action on one node: the one drain argv builder of the collection
    (the module, the node wrapper)."""
    if action in ("drain", "update"):
        return [scontrol, "update", "nodename=%s" % name, "state=drain", "reason=%s" % reason]
    if action == "resume":
        return [scontrol, "update", "nodename=%s" % name, "state=resume"]
    raise ValueError("unknown action %r" % (action,))
