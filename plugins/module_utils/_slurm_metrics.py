# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm's state as Prometheus metrics, for node_exporter's textfile collector on the controller.

Standard library only (bin/gpucluster-slurm-metrics runs it on the controller, as root: users' PrivateData does not
limit it). Sources, each read once per run; a source that fails is reported as down (slurm_collector_source_up 0)
and the metrics that need it are left out, never written as zeros:

- ``scontrol -o -d show node``: every node's GPUs (``Gres``), the GPUs in use (``GresUsed``, with ``-d``), its
  partitions, state and reason. A node's GPUs count in each of its partitions: allocated (in use), idle (in service
  and not in use) or out (the node is drained, down or failing: its unused GPUs cannot be given).
- ``scontrol -o -d show job``: every job's account, partition, state, reason and GPUs - AllocTRES's ``gres/gpu``
  for a job that holds nodes, ReqTRES's for a pending one (Slurm counts ``--gpus``, ``--gpus-per-node`` x nodes and
  ``--gpus-per-task`` x tasks into it, so no job is dropped for how it asked) - and, from the detail fields, the GRES
  indexes of the GPUs it holds on each node (``GRES=gpu:h100:2(IDX:0-1)``).
- gres.conf (the controller's copy, the same file every node reads): a GRES index names ``/dev/nvidia<minor>``
  through the order of the node's ``File=`` lines, so each GPU a job holds is exported as one info series,
  ``slurm_job_gpu_info{node, gpu, jobid, account, user, partition} 1``, ``gpu`` being the minor number the DCGM
  exporter's ``gpu`` label carries. One series per allocated GPU, none per job on the GPU metrics: the recording
  rules join them (docs/monitoring.md). ``jobid``, not ``job``: ``job`` is Prometheus's scrape job label. Where
  gres.conf cannot tell the minor (AutoDetect, MIG, files out of order), the GPUs are counted in
  ``slurm_job_gpus_unmapped{node}`` instead.
- ``sshare -P -n -a -o Account,User,NormShares,EffectvUsage,FairShare``: each account's share of the cluster and its
  share of the usage (the account rows), and each member's fair-share factor (the user rows: Fair Tree, Slurm's
  default, gives the factor per user association only).
"""

from __future__ import absolute_import, division, print_function

import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_nodes
from ansible_collections.gpucluster.ops.plugins.module_utils._cdi import gres_minors
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import job_gpu_indexes, record_fields

NODE_ARGV = ["scontrol", "-o", "-d", "show", "node"]
JOB_ARGV = ["scontrol", "-o", "-d", "show", "job"]
SSHARE_ARGV = ["sshare", "-P", "-n", "-a", "-o", "Account,User,NormShares,EffectvUsage,FairShare"]
SOURCES = ("nodes", "jobs", "fairshare")
# Jobs that hold their nodes' GPUs.
HOLDING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "CONFIGURING")
# The owner label of a node out of service without the collection's marker: drained by a person, or down by Slurm.
ADMIN, NONE = "admin", ""

# One GRES entry of Gres or GresUsed: gpu[:type]:count[(S:..)|(IDX:..)].
_GRES_RE = re.compile(r"^gpu(?::([^:(]+))?:(\d+)")


def gres_gpus(text):
    """The GPUs of a node's ``Gres=`` or ``GresUsed=`` (``gpu:a100:8(S:0-1)``, ``gpu:2``, several types comma
    separated; ``(null)`` and other GRES count none)."""
    total = 0
    for entry in re.split(r",(?=[A-Za-z])", text or ""):
        match = _GRES_RE.match(entry.strip())
        if match:
            total += int(match.group(2))
    return total


def tres_gpus(text):
    """The GPUs of a TRES string (``cpu=8,mem=64G,node=1,billing=8,gres/gpu=8,gres/gpu:a100=8``): the untyped
    ``gres/gpu`` count, else the sum of the typed ones; 0 when none."""
    untyped, typed = None, 0
    for item in (text or "").split(","):
        key, value = (item.split("=", 1) + [""])[:2]
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            untyped = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return untyped if untyped is not None else typed


def parse_nodes(text):
    """``scontrol -o -d show node`` -> [{name, state, reason, partitions, gpus, used}]."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        fields = _slurm_nodes.node_fields(line)
        out.append(dict(name=fields.get("NodeName", ""), state=fields.get("State", ""),
                        reason=fields.get("Reason", ""),
                        partitions=[p.strip() for p in fields.get("Partitions", "").split(",") if p.strip()],
                        gpus=gres_gpus(fields.get("Gres", "")), used=gres_gpus(fields.get("GresUsed", ""))))
    return out


def parse_jobs(text):
    """``scontrol -o -d show job`` -> [{id, account, user, partition, state, reason, gpus, holding, gres}] (``No jobs
    in the system``: []); ``gres``: {node: {GRES index}} of the GPUs a holding job has."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("JobId="):
            continue
        record = record_fields(line)
        state = record.get("JobState", "")
        holding = state in HOLDING
        gpus = tres_gpus(record.get("AllocTRES", "")) if holding else tres_gpus(record.get("ReqTRES", ""))
        out.append(dict(id=record.get("JobId", ""), account=record.get("Account", ""),
                        user=record.get("UserId", "").split("(")[0], partition=record.get("Partition", ""),
                        state=state, reason=record.get("Reason", "None"), gpus=gpus, holding=holding,
                        gres=job_gpu_indexes(line) if holding else {}))
    return out


def parse_fairshare(text):
    """``sshare -P -n -a -o Account,User,NormShares,EffectvUsage,FairShare`` -> {"accounts": {account: {"shares",
    "usage"}}, "users": {(account, user): factor}}; the root account and its rows are left out."""
    accounts, users = {}, {}
    for line in (text or "").splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) < 5 or not parts[0] or parts[0] == "root":
            continue
        account, user = parts[0], parts[1]
        try:
            if user:
                if parts[4]:
                    users[(account, user)] = float(parts[4])
            else:
                accounts[account] = {"shares": float(parts[2] or 0), "usage": float(parts[3] or 0)}
        except ValueError:
            continue
    return {"accounts": accounts, "users": users}


def node_owner(node):
    """Whose the node's being out of service is: the collection's owner (health, maintenance...), ``admin`` (drained
    without the collection's marker), or ``""`` (down or failing by Slurm's judgement, no drain)."""
    owner = _slurm_nodes.owner_of(node["reason"])
    if owner:
        return owner
    parts = node["state"].upper().replace("*", "").split("+")
    return ADMIN if any(p.startswith("DRAIN") for p in parts) else NONE


def collect(nodes=None, jobs=None, fairshare=None, breaker_share=0.1, gres_text=""):
    """The metrics of what could be read (``None`` for a source that failed): a list of (name, labels, value).
    ``gres_text``: gres.conf, which names the minor number of each GRES index."""
    metrics = []
    if nodes is not None:
        partitions = {}
        for node in nodes:
            out = _slurm_nodes.out_of_service(node["state"])
            used = min(node["used"], node["gpus"])
            for partition in node["partitions"] or [""]:
                counts = partitions.setdefault(partition, {"allocated": 0, "idle": 0, "out": 0})
                counts["allocated"] += used
                counts["out" if out else "idle"] += node["gpus"] - used
        for partition in sorted(partitions):
            for state in ("allocated", "idle", "out"):
                metrics.append(("slurm_partition_gpus", {"partition": partition, "state": state},
                                partitions[partition][state]))
        total = len(nodes)
        down = [n for n in nodes if _slurm_nodes.out_of_service(n["state"])]
        for node in sorted(down, key=lambda n: n["name"]):
            metrics.append(("slurm_node_out_of_service", {"node": node["name"], "owner": node_owner(node),
                                                          "state": node["state"]}, 1))
        metrics.append(("slurm_nodes", {"state": "total"}, total))
        metrics.append(("slurm_nodes", {"state": "out_of_service"}, len(down)))
        metrics.append(("slurm_breaker_limit_nodes", {}, _slurm_nodes.breaker_limit(total, breaker_share)))
    if jobs is not None:
        accounts, pending = {}, {}
        for job in jobs:
            if job["holding"]:
                state = "allocated"
            elif job["state"] == "PENDING":
                state = "pending"
                key = (job["partition"], job["reason"])
                pending[key] = pending.get(key, 0) + 1
            else:
                continue
            key = (job["account"], job["partition"], state)
            accounts[key] = accounts.get(key, 0) + job["gpus"]
        for (account, partition, state) in sorted(accounts):
            metrics.append(("slurm_account_gpus", {"account": account, "partition": partition, "state": state},
                            accounts[(account, partition, state)]))
        for (partition, reason) in sorted(pending):
            metrics.append(("slurm_pending_jobs", {"partition": partition, "reason": reason},
                            pending[(partition, reason)]))
        metrics.extend(job_gpus(jobs, gres_text))
    if fairshare is not None:
        for account in sorted(fairshare["accounts"]):
            metrics.append(("slurm_account_shares", {"account": account}, fairshare["accounts"][account]["shares"]))
            metrics.append(("slurm_account_usage_share", {"account": account},
                            fairshare["accounts"][account]["usage"]))
        for (account, user) in sorted(fairshare["users"]):
            metrics.append(("slurm_user_fairshare", {"account": account, "user": user},
                            fairshare["users"][(account, user)]))
    return metrics


def job_gpus(jobs, gres_text):
    """``slurm_job_gpu_info`` for each GPU a job holds, ``slurm_job_gpus_unmapped`` per node whose GRES indexes
    gres.conf cannot turn into minor numbers."""
    rows, unmapped, maps = [], {}, {}
    for job in jobs:
        for node in sorted(job["gres"]):
            if node not in maps:
                maps[node] = gres_minors(gres_text, node)[0]
            minors = maps[node]
            for index in sorted(job["gres"][node]):
                if minors is None or index >= len(minors):
                    unmapped[node] = unmapped.get(node, 0) + 1
                    continue
                rows.append(("slurm_job_gpu_info", {"node": node, "gpu": str(minors[index]), "jobid": job["id"],
                                                    "account": job["account"], "user": job["user"],
                                                    "partition": job["partition"]}, 1))
    rows.extend(("slurm_job_gpus_unmapped", {"node": node}, unmapped[node]) for node in sorted(unmapped))
    return rows


HELP = {
    "slurm_partition_gpus": ("gauge", "GPUs of the partition's nodes: allocated (in use), idle (in service, free) or "
                                      "out (free but the node is drained, down or failing)"),
    "slurm_node_out_of_service": ("gauge", "1 for each node out of service; owner is the collection's owner, admin "
                                           "(drained without its marker) or empty (down by Slurm)"),
    "slurm_nodes": ("gauge", "The cluster's nodes, all (total) and out of service"),
    "slurm_breaker_limit_nodes": ("gauge", "The most nodes the health checks' circuit breaker lets be out of service"),
    "slurm_account_gpus": ("gauge", "GPUs of the account's jobs per partition: allocated (held now) or pending "
                                    "(asked for by pending jobs)"),
    "slurm_pending_jobs": ("gauge", "Pending jobs per partition and Slurm's reason"),
    "slurm_job_gpu_info": ("gauge", "1 for each GPU a job holds: node, gpu (the minor number, as the DCGM exporter's "
                                    "gpu label), jobid, account, user, partition"),
    "slurm_job_gpus_unmapped": ("gauge", "GPUs held by jobs on the node whose minor number gres.conf does not tell "
                                         "(AutoDetect, MIG, files out of order): left out of slurm_job_gpu_info"),
    "slurm_account_shares": ("gauge", "The account's normalised share of the cluster (sshare's NormShares), 0 to 1"),
    "slurm_account_usage_share": ("gauge", "The account's share of the cluster's decayed usage (sshare's "
                                           "EffectvUsage), 0 to 1"),
    "slurm_user_fairshare": ("gauge", "The fair-share factor of a member of the account (sshare's FairShare), 0 to 1"),
    "slurm_collector_source_up": ("gauge", "1 when the source was read this run, 0 when it failed (its metrics are "
                                           "left out)"),
    "slurm_collector_last_run_timestamp_seconds": ("gauge", "When the collector last ran"),
}


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(metrics, sources, now):
    """The text exposition format of ``metrics`` (name, labels, value), the sources' state and the run's time."""
    rows = list(metrics) + [("slurm_collector_source_up", {"source": name}, 1 if up else 0)
                            for name, up in sorted(sources.items())]
    rows.append(("slurm_collector_last_run_timestamp_seconds", {}, int(now)))
    lines, seen = [], set()
    for name, labels, value in rows:
        if name not in seen:
            seen.add(name)
            kind, text = HELP[name]
            lines.append("# HELP %s %s" % (name, text))
            lines.append("# TYPE %s %s" % (name, kind))
        label_text = ",".join('%s="%s"' % (key, _escape(labels[key])) for key in sorted(labels))
        number = repr(float(value)) if isinstance(value, float) else str(int(value))
        lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", number))
    return "\n".join(lines) + "\n"
