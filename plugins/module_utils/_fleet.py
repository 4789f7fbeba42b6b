# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fleet model: every node's health result, versions and Slurm state in one report (pure Python, stdlib only).

``build(nodes, ...)`` turns the per-node records that playbooks/health_sweep.yml gathers into the report that
``gpucluster.ops.fleet_report`` writes as fleet.json (docs/health-sweep.md describes its schema). It never raises on
odd input: a record that lacks a part gets an ``unknown`` finding naming what is missing, so that no node is reported
OK because something could not be read. Fleet-level findings have the node findings' shape (check ``fleet``, target
the inventory host name): version drift inside a GPU group (against the pin where the inventory gives one, else
against the group's majority), GPU count and model outliers, unreachable nodes, nodes drained or down in Slurm, nodes
with errors that Slurm still schedules on.

A node out of service in Slurm (drained, down or failing, by anyone, gpucluster.ops' own owners included) is never
OK: its ``status`` is ``drained`` when its findings are all OK or info, and the summary counts it as ``drained``; the
report's ``service`` counts the nodes in and out of service.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import os
import re
import stat
import tempfile

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as checks
from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_nodes

SCHEMA_VERSION = 1
REPORT_FILE = "fleet.json"
HTML_FILE = "fleet.html"
RMA_FILE = "rma.csv"

# Worst last, as the node's overall status ranks them (error > unknown > warning > info > ok).
ORDER = checks._WORST_ORDER  # pylint: disable=protected-access
# A node's status: a severity, or ``drained`` (its findings are OK or info, but Slurm does not schedule on it), which
# ranks above info (never OK) and below warning.
DRAINED = "drained"
STATUS_ORDER = ("ok", "info", DRAINED, "warning", "unknown", "error")

# The fault codes whose error findings go into the RMA list by default: hardware the vendor replaces. A GPU lost to
# the driver (Xid 79 and "fallen off the bus" both become GPU-FALLEN-OFF-BUS), row remapping that failed (Xid 64),
# pages retired past the limit, a failed DCGM diagnostic and a fatal NVSwitch SXid. Uncorrectable ECC errors and
# pending remaps are fixed by a reset first, so they are not here; add their codes with the rma_codes option.
DEFAULT_RMA_CODES = ("GPU-FALLEN-OFF-BUS", "GPU-ROW-REMAP-FAILURE", "GPU-RETIRED-PAGES-LIMIT", "DCGM-DIAG-FAIL",
                     "NVSWITCH-SXID-FATAL")

# Version drift: the record's versions key, the expected (pin) key, the code's suffix, the label.
VERSION_KEYS = (
    ("driver_version", "driver_version", "DRIVER", "driver"),
    ("cuda_version", "cuda_version", "CUDA", "CUDA"),
    ("nccl_version", "nccl_version", "NCCL", "NCCL"),
    ("vbios_versions", "vbios_version", "VBIOS", "VBIOS"),
    ("ib_fw_versions", "ib_fw_version", "IB-FW", "IB HCA firmware"),
    ("ofed_version", "ofed_version", "OFED", "OFED"),
)
LIST_KEYS = ("vbios_versions", "ib_fw_versions")
SOURCES = ("cli", "module", "replay")
# Whose drain a marker's owner is, and who resumes the node (docs/drain.md).
OWNER_LABELS = {"health": "the health checks", "maintenance": "the monthly maintenance's deep checks",
                "drift": "the weekly maintenance (version drift)", "nvlink": "the NVLink remediation",
                "upgrade": "the rolling upgrade",
                "add-node": "the add-node playbook's health check"}
# Every drain of ours comes back the same way: playbooks/resume.yml checks the node again and resumes it once its
# check passes (docs/drain.md#the-way-back); what to do first depends on the owner.
RESUME = "ansible-playbook -i INVENTORY playbooks/resume.yml --limit %s"
OWNER_ACTIONS = {
    "health": "repair what its codes name, then run " + RESUME,
    "maintenance": "repair what the deep checks found, then run " + RESUME,
    "drift": "bring its versions to the pins, then run " + RESUME,
    "nvlink": "do the next action of its reason (reboot, then the RMA it names), then run " + RESUME,
    "upgrade": "fix it or roll it back (rolling_upgrade.yml with the previous versions, --limit to it), then run "
               + RESUME,
    "add-node": "repair it, then run " + RESUME,
}
_GPU_TARGET = re.compile(r"\bgpu(\d+)\b")


def rank(severity):
    """How bad a severity is (0 for ok); a severity nothing knows ranks as unknown."""
    return ORDER.index(severity) if severity in ORDER else ORDER.index("unknown")


def status_rank(status):
    """How bad a node's status is (``rank``, with ``drained`` between info and warning)."""
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else STATUS_ORDER.index("unknown")


def is_ok(status):
    """Whether a node's status is OK for the counts and the page's filter: ok or info, never drained."""
    return status in ("ok", "info")


def _worst(severities):
    found = [s if s in ORDER else "unknown" for s in severities]
    return max(found, key=rank) if found else "ok"


def _finding(host, code, severity, message, action=""):
    return checks.finding("fleet", code, severity, host, message, action)


def _text(value):
    """A version or name as a stripped string, or None for absent/blank values."""
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    value = str(value).strip()
    return value or None


# --------------------------------------------------------------------------------------------------------------
# One node
# --------------------------------------------------------------------------------------------------------------

def _dict(value):
    return value if isinstance(value, dict) else {}


def _items(raw, name, problems):
    """The list ``raw`` of the result's ``name``; [] with a problem said when it is there and not a list."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append("result.%s is not a list" % name)
        return []
    return raw


def _clean_findings(raw, problems):
    """The result's findings that have the finding shape; the others are counted into ``problems``."""
    found = []
    bad = 0
    for item in _items(raw, "findings", problems):
        if isinstance(item, dict) and item.get("code") and item.get("severity") in ORDER:
            found.append({"check": str(item.get("check") or ""), "code": str(item["code"]),
                          "severity": item["severity"], "target": str(item.get("target") or "node"),
                          "message": str(item.get("message") or ""), "action": str(item.get("action") or "")})
        else:
            bad += 1
    if bad:
        problems.append("%d finding(s) of result.findings without code or a known severity" % bad)
    return found


def _clean_gpus(raw, problems):
    gpus = []
    for position, item in enumerate(_items(raw, "gpus", problems)):
        if not isinstance(item, dict):
            problems.append("result.gpus[%d] is not a dict" % position)
            continue
        index = item.get("index")
        gpus.append({"index": index if isinstance(index, int) and not isinstance(index, bool) else position,
                     "bus_id": _text(item.get("bus_id")), "uuid": _text(item.get("uuid")),
                     "name": _text(item.get("name")), "serial": _text(item.get("serial")),
                     "vbios_version": _text(item.get("vbios_version"))})
    return gpus


def _clean_versions(raw):
    versions = {}
    for key, _pin, _code, _label in VERSION_KEYS:
        value = raw.get(key)
        if key in LIST_KEYS:
            values = value if isinstance(value, list) else ([value] if _text(value) else [])
            versions[key] = sorted({_text(v) for v in values if _text(v)})
        else:
            versions[key] = _text(value)
    return versions


def gpu_indexes(finding, gpus):
    """The GPUs a finding's target names: ``gpu3``, ``gpu0,gpu1``, ``gpu2/link4`` or a PCI bus id; none for a fleet
    finding (its target is the host name, which may look like ``gpu02``)."""
    target = finding.get("target") or ""
    if finding.get("check") == "fleet":
        return []
    indexes = [int(n) for n in _GPU_TARGET.findall(target)]
    if not indexes:
        wanted = target.upper()
        indexes = [g["index"] for g in gpus if g["bus_id"] and len(wanted) >= 7 and g["bus_id"].upper().endswith(wanted)]
    return indexes


def in_service(slurm):
    """Whether Slurm schedules on the node: True, False when it is out of service (down, drained, draining,
    failing), None when its Slurm state is not known."""
    state = _text(_dict(slurm).get("state"))
    if state is None:
        return None
    return not _slurm_nodes.out_of_service(state)


def _error_in_service(entry, options):
    """FLEET-ERROR-IN-SERVICE when the node's health check found errors and Slurm still schedules on it."""
    if entry["in_service"] is not True or not entry["reachable"]:
        return None
    codes = []
    for item in entry["findings"]:
        if item["check"] != "fleet" and item["severity"] == "error" and item["code"] not in codes:
            codes.append(item["code"])
    if not codes and entry["result_status"] != "error":
        return None
    host = entry["host"]
    slurm = entry["slurm"] or {}
    name = slurm.get("name") or host
    truthy = (True, "true", "True", "yes", 1)
    drains = options.get("drain") in truthy and options.get("check_mode") not in truthy
    return _finding(host, "FLEET-ERROR-IN-SERVICE", "error",
                    "%s has error(s) %s, yet Slurm node %s is %s: Slurm still schedules jobs on it" % (
                        host, " ".join(codes) or "(the checker's status is error)", name, slurm.get("state")),
                    ("this sweep drains it next (health_sweep_drain), unless the circuit breaker refuses; else "
                     if drains else "") +
                    "drain it: rerun the sweep with -e health_sweep_drain=true (owner health), or let the node's "
                    "health wrapper (gpucluster-health --slurm, slurmd's HealthCheckProgram) drain it, or "
                    "scontrol update nodename=%s state=drain reason='gpucluster-health: %s'" % (
                        name, " ".join(codes) or "error"))


def _slurm_finding(host, slurm):
    state = _text(slurm.get("state")) or ""
    reason = _text(slurm.get("reason")) or ""
    if not _slurm_nodes.out_of_service(state):
        return None
    name = _text(slurm.get("name")) or host
    owner = _slurm_nodes.owner_of(reason)
    if owner is not None:
        return _finding(host, "FLEET-SLURM-DRAINED", "info",
                        "Slurm node %s is %s by %s: %s" % (
                            name, state, OWNER_LABELS.get(owner, "gpucluster.ops (owner %s)" % owner), reason),
                        OWNER_ACTIONS.get(owner, "repair it, then run " + RESUME) % host)
    return _finding(host, "FLEET-SLURM-DRAINED", "warning",
                    "Slurm node %s is %s for a reason that is not gpucluster.ops': %s" % (
                        name, state, reason or "(no reason given)"),
                    "ask whoever took it out (scontrol show node %s); no gpucluster.ops playbook resumes it" % name)


def node_entry(host, record):
    """One node of the report from its record; ``findings`` holds the node's and the node-local fleet findings."""
    record = record if isinstance(record, dict) else {}
    problems = []
    fleet = []
    reachable = record.get("reachable")
    result = record.get("result")
    entry = {
        "host": host, "group": _text(record.get("group")), "reachable": reachable is not False,
        "error": _text(record.get("error")), "source": _text(record.get("source")),
        "expected": _dict(record.get("expected")), "versions": _clean_versions(_dict(record.get("versions"))),
        "slurm": None, "in_service": None, "level": None, "checked_at": None, "node": None, "result_status": None,
        "gpus": [], "findings": [], "unreadable": [], "missing_inputs": [], "notes": [],
    }
    if not record:
        problems.append("the node has no record at all")
    elif not isinstance(reachable, bool):
        problems.append("reachable is missing or not true/false")
    if reachable is False:
        fleet.append(_finding(host, "FLEET-UNREACHABLE", "unknown",
                              "%s could not be reached: %s" % (host, entry["error"] or "no error given"),
                              "check that the node is up and Ansible can log in; its health is unknown"))
    elif record:
        if not isinstance(result, dict) or not result:
            problems.append("result is missing")
        else:
            entry["findings"] = _clean_findings(result.get("findings"), problems)
            entry["gpus"] = _clean_gpus(result.get("gpus"), problems)
            for key in ("level", "checked_at", "node"):
                entry[key] = _text(result.get(key))
            for key in ("unreadable", "missing_inputs", "notes"):
                entry[key] = result.get(key) if isinstance(result.get(key), list) else []
            status = result.get("status")
            entry["result_status"] = status if status in ORDER else None
            if status not in ORDER:
                problems.append("result.status is %r, not one of %s" % (status, ", ".join(ORDER)))
            elif rank(status) > rank(_worst(f["severity"] for f in entry["findings"])):
                problems.append("result.status is %s but no finding says why" % status)
            if "findings" not in result:
                problems.append("result.findings is missing")
        if "versions" not in record or not isinstance(record.get("versions"), dict):
            problems.append("versions is missing, so version drift could not be checked")
        if entry["source"] is not None and entry["source"] not in SOURCES:
            problems.append("source is %r, not one of %s" % (entry["source"], ", ".join(SOURCES)))
    if isinstance(record.get("slurm"), dict):
        entry["slurm"] = {key: _text(record["slurm"].get(key)) for key in ("name", "state", "reason")}
        entry["in_service"] = in_service(entry["slurm"])
        slurm = _slurm_finding(host, record["slurm"])
        if slurm:
            fleet.append(slurm)
    if problems:
        fleet.append(_finding(host, "FLEET-RECORD-INCOMPLETE", "unknown",
                              "the sweep's record of %s is incomplete: %s" % (host, "; ".join(problems)),
                              "rerun the sweep on this node; look at the sweep's output for it"))
    if reachable is not False and record and entry["group"] is None:
        fleet.append(_finding(host, "FLEET-NO-GROUP", "info",
                              "%s is in none of the sweep's GPU groups: its versions are compared with no other node"
                              % host, "add the node to a GPU group, or the group to health_sweep_groups"))
    entry["findings"].extend(fleet)
    return entry


# --------------------------------------------------------------------------------------------------------------
# The fleet: drift and outliers inside each group
# --------------------------------------------------------------------------------------------------------------

def _value_of(entry, key):
    value = entry["versions"].get(key)
    if key in LIST_KEYS:
        return ", ".join(value) if value else None
    return value


def _pin_matches(entry, key, pin):
    value = entry["versions"].get(key)
    values = value if key in LIST_KEYS else [value]
    return bool(values) and all(v is not None and checks._version_matches(v, pin)  # pylint: disable=protected-access
                                for v in values)


def _majority(values):
    """The value most nodes have, when one value has more nodes than any other; else None (a split)."""
    counts = collections.Counter(v for v in values if v is not None).most_common()
    if not counts:
        return None
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None
    return counts[0][0]


def _describe(values):
    counts = collections.Counter(v for v in values if v is not None).most_common()
    return ", ".join("%s on %d node(s)" % (value, count) for value, count in counts)


def _group_drift(group, members):
    """Fleet findings for one group's drift and outliers, and the group's row of the drift table."""
    found = []
    table = {}
    live = [e for e in members if e["reachable"]]
    for key, pin_key, code, label in VERSION_KEYS:
        values = {e["host"]: _value_of(e, key) for e in live}
        pins = sorted({_text(e["expected"].get(pin_key)) for e in live if _text(e["expected"].get(pin_key))})
        majority = _majority(values.values())
        known = sorted(set(v for v in values.values() if v is not None))
        drifted = []
        for entry in live:
            value = values[entry["host"]]
            pin = _text(entry["expected"].get(pin_key))
            if pin:
                if value is None:
                    found.append(_finding(entry["host"], "FLEET-VERSION-UNKNOWN", "unknown",
                                          "%s: the %s version could not be read; %s is pinned" % (
                                              entry["host"], label, pin),
                                          "look at the node's gpu-stack fact and tools"))
                    drifted.append(entry["host"])
                elif not _pin_matches(entry, key, pin):
                    found.append(_finding(entry["host"], "FLEET-DRIFT-" + code, "warning",
                                          "%s has %s %s, the inventory pins %s (group %s: %s)" % (
                                              entry["host"], label, value, pin, group, _describe(values.values())),
                                          "bring the node to the pinned %s (its role, then a reboot if the driver)"
                                          % label))
                    drifted.append(entry["host"])
            elif value is not None and len(known) > 1 and value != majority:
                against = ("the group's majority has %s" % majority if majority is not None else
                           "the group has no majority")
                found.append(_finding(entry["host"], "FLEET-DRIFT-" + code, "warning",
                                      "%s has %s %s, %s (group %s: %s)" % (
                                          entry["host"], label, value, against, group, _describe(values.values())),
                                      "pin the %s in the inventory and bring the odd nodes to it" % label))
                drifted.append(entry["host"])
        if known or pins:
            table[key] = {"label": label, "pin": pins[0] if len(pins) == 1 else (pins or None),
                          "majority": majority, "values": {v: sorted(h for h, x in values.items() if x == v)
                                                           for v in known},
                          "unknown": sorted(h for h, x in values.items() if x is None), "drifted": sorted(drifted)}
    found.extend(_gpu_outliers(group, [e for e in live if e["result_status"] is not None], table))
    return found, table


def _pins(members, key):
    """The pins of ``key`` the members' ``expected`` has, as the config has them (a number stays a number): the one
    pin, a list when the members differ, None without any."""
    pins = {}
    for entry in members:
        value = entry["expected"].get(key)
        if value is None or isinstance(value, (dict, list)) or (isinstance(value, str) and not value.strip()):
            continue
        pins.setdefault((type(value).__name__, str(value)), value)
    values = [pins[k] for k in sorted(pins)]
    return values[0] if len(values) == 1 else (values or None)


def _gpu_outliers(group, members, table):
    found = []
    counts = {e["host"]: len(e["gpus"]) for e in members}
    models = {e["host"]: ", ".join(sorted({g["name"] for g in e["gpus"] if g["name"]})) or None for e in members}
    for key, values, label in (("gpu_count", counts, "GPU count"), ("gpu_model", models, "GPU model")):
        majority = _majority(values.values())
        drifted = []
        for entry in members:
            value = values[entry["host"]]
            pin = entry["expected"].get(key)
            if key == "gpu_count":
                pin = pin if isinstance(pin, int) and not isinstance(pin, bool) else None
                want = pin if pin is not None else majority
                if want is None or value == want:
                    continue
                severity = "error" if value < want else "warning"
            else:
                pin = _text(pin)
                want = pin or majority
                if want is None or value is None or value == want:
                    continue
                severity = "warning"
            origin = "the inventory pins" if pin is not None else "the group's majority has"
            code = "FLEET-GPU-COUNT" if key == "gpu_count" else "FLEET-GPU-MODEL"
            found.append(_finding(entry["host"], code, severity, "%s has %s %s, %s %s (group %s: %s)" % (
                entry["host"], label, value, origin, want, group, _describe(values.values())),
                "look for GPUs lost to the driver or a node in the wrong group"))
            drifted.append(entry["host"])
        known = sorted(set(v for v in values.values() if v is not None), key=str)
        pins = _pins(members, key)
        if known or pins is not None:
            table[key] = {"label": label, "pin": pins, "majority": majority,
                          "values": {str(v): sorted(h for h, x in values.items() if x == v) for v in known},
                          "unknown": [], "drifted": sorted(drifted)}
    return found


# --------------------------------------------------------------------------------------------------------------
# The whole report
# --------------------------------------------------------------------------------------------------------------

def finding_key(node, finding):
    """What identifies a finding from one report to the next: node, code and target."""
    return "%s|%s|%s" % (node, finding.get("code"), finding.get("target"))


def previous_findings(previous):
    """{key: finding with node} of a previous fleet.json document (any schema it can read; {} when none)."""
    found = {}
    nodes = _dict(previous).get("nodes")
    for host, entry in (nodes.items() if isinstance(nodes, dict) else []):
        for item in _dict(entry).get("findings") or []:
            if isinstance(item, dict) and item.get("code"):
                found[finding_key(host, item)] = dict(item, node=host)
    return found


def compare(report, previous, previous_path=None):
    """new, cleared and persisting findings of ``report`` against the previous report document."""
    before = previous_findings(previous) if previous is not None else {}
    now = {}
    for host, entry in report["nodes"].items():
        for item in entry["findings"]:
            if item["severity"] != "ok":
                now[finding_key(host, item)] = dict(item, node=host)
    before = {k: v for k, v in before.items() if v.get("severity") != "ok"}
    lists = {"new": [now[k] for k in sorted(set(now) - set(before))],
             "cleared": [before[k] for k in sorted(set(before) - set(now))],
             "persisting": [now[k] for k in sorted(set(now) & set(before))]}
    return dict(lists, previous=previous_path, compared=previous is not None,
                counts={name: len(items) for name, items in lists.items()})


def _rma(report, codes):
    rows = []
    wanted = set(codes)
    for host in sorted(report["nodes"]):
        entry = report["nodes"][host]
        by_index = {g["index"]: g for g in entry["gpus"]}
        for item in entry["findings"]:
            if item["code"] not in wanted or item["severity"] != "error":
                continue
            indexes = gpu_indexes(item, entry["gpus"]) or [None]
            for index in indexes:
                gpu = by_index.get(index) or {}
                rows.append({"node": host, "gpu_index": index, "serial": gpu.get("serial"), "uuid": gpu.get("uuid"),
                             "bus_id": gpu.get("bus_id"), "code": item["code"], "target": item["target"],
                             "evidence": item["message"]})
    return rows


def build(nodes, options=None, rma_codes=None, previous=None, previous_path=None, created_at=None):
    """The report document (fleet.json) from the sweep's per-node records."""
    nodes = nodes if isinstance(nodes, dict) else {}
    options = _dict(options)
    entries = {str(host): node_entry(str(host), record) for host, record in sorted(nodes.items(), key=lambda i: str(i[0]))}
    groups = collections.OrderedDict()
    for host, entry in entries.items():
        if entry["group"] is not None and entry["reachable"]:
            groups.setdefault(entry["group"], []).append(entry)
    drift = {}
    for group, members in sorted(groups.items()):
        found, table = _group_drift(group, members)
        drift[group] = {"nodes": [e["host"] for e in members], "keys": table}
        for item in found:
            entries[item["target"]]["findings"].append(item)
    for entry in entries.values():
        serving = _error_in_service(entry, options)
        if serving:
            entry["findings"].append(serving)
        entry["findings"].sort(key=lambda f: (-rank(f["severity"]), f["code"], f["target"]))
        entry["status"] = _worst([f["severity"] for f in entry["findings"]] +
                                 ([entry["result_status"]] if entry["result_status"] else []))
        if entry["in_service"] is False and is_ok(entry["status"]):
            entry["status"] = DRAINED
        for gpu in entry["gpus"]:
            gpu["status"] = _worst(f["severity"] for f in entry["findings"]
                                   if gpu["index"] in gpu_indexes(f, entry["gpus"]))
        entry["node_status"] = _worst(f["severity"] for f in entry["findings"]
                                      if not gpu_indexes(f, entry["gpus"]))
    summary = {"nodes": len(entries), "ok": 0, DRAINED: 0, "warning": 0, "error": 0, "unknown": 0,
               "unreachable": sum(1 for e in entries.values() if not e["reachable"])}
    for entry in entries.values():
        summary["ok" if is_ok(entry["status"]) else entry["status"]] += 1
    service = {"in_service": sum(1 for e in entries.values() if e["in_service"] is True),
               "out_of_service": sum(1 for e in entries.values() if e["in_service"] is False),
               "no_slurm_state": sum(1 for e in entries.values() if e["in_service"] is None)}
    report = {
        "schema_version": SCHEMA_VERSION, "created_at": created_at, "options": options,
        "rma_codes": sorted(set(rma_codes if rma_codes is not None else DEFAULT_RMA_CODES)),
        "summary": summary, "service": service, "nodes": entries,
        "fleet_findings": [dict(f) for e in entries.values() for f in e["findings"] if f["check"] == "fleet"],
        "drift": drift,
    }
    report["rma"] = _rma(report, report["rma_codes"])
    report["diff"] = compare(report, previous, previous_path)
    return report


def table(report):
    """One line per node that is not OK (worst first: host, status, the codes of its warnings and worse and
    FLEET-SLURM-DRAINED), then how many nodes are OK and how many of them all Slurm schedules on."""
    lines = []
    bad = [e for e in report["nodes"].values() if not is_ok(e["status"])]
    for entry in sorted(bad, key=lambda e: (-status_rank(e["status"]), e["host"])):
        codes = []
        for item in entry["findings"]:
            if (rank(item["severity"]) >= rank("warning") or item["code"] == "FLEET-SLURM-DRAINED") \
                    and item["code"] not in codes:
                codes.append(item["code"])
        lines.append(" ".join([entry["host"], entry["status"].upper()] + codes))
    ok = len(report["nodes"]) - len(bad)
    service = report["service"]
    line = "%d node%s OK, %d of %d in service" % (ok, "" if ok == 1 else "s", service["in_service"],
                                                  len(report["nodes"]))
    if service["no_slurm_state"]:
        line += ", %d with no Slurm state" % service["no_slurm_state"]
    lines.append(line)
    return lines


RMA_COLUMNS = ("node", "gpu_index", "serial", "uuid", "bus_id", "code", "evidence")


def rma_csv(report):
    """rma.csv: one row per GPU (or node, when no GPU is named) and fault code of the RMA list."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RMA_COLUMNS)
    for row in report["rma"]:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in RMA_COLUMNS])
    return out.getvalue()


def to_json(report):
    return json.dumps(report, indent=1, sort_keys=True) + "\n"


# --------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------

def _shared_without_sticky(path):
    """Whether anyone may create and remove names in ``path`` (world-writable without the sticky bit), where another
    user could swap the report's files between its write and its rename."""
    mode = os.stat(path).st_mode
    return bool(mode & stat.S_IWOTH) and not mode & stat.S_ISVTX


def report_dir_problem(path):
    """Why ``path`` cannot be the report directory (None when it can, or does not exist yet but its parent can)."""
    if os.path.lexists(path):
        if os.path.islink(path):
            return "%s is a symbolic link: name the directory it points to" % path
        if not os.path.isdir(path):
            return "%s exists and is not a directory" % path
        if not os.access(path, os.W_OK | os.X_OK):
            return "%s is a directory this user cannot write to" % path
        if _shared_without_sticky(path):
            return ("%s is writable by every user without the sticky bit: another user could replace the report's "
                    "files; use a directory of this user's (or chmod +t, or o-w)" % path)
        return None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return "%s cannot be created: %s is not a directory" % (path, parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        return "%s cannot be created: %s is not writable" % (path, parent)
    if _shared_without_sticky(parent):
        return ("%s cannot be created safely: %s is writable by every user without the sticky bit" % (path, parent))
    return None


def find_previous(report_dir):
    """The newest sibling of report_dir (same parent) that holds a fleet.json: the latest name when the names are
    UTC timestamps (name order), mtime breaking ties; None when there is none."""
    report_dir = os.path.abspath(report_dir)
    parent = os.path.dirname(report_dir)
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    found = []
    for name in names:
        path = os.path.join(parent, name)
        candidate = os.path.join(path, REPORT_FILE)
        if path == report_dir or not os.path.isfile(candidate):
            continue
        try:
            found.append((name, os.path.getmtime(candidate), candidate))
        except OSError:
            continue
    return max(found)[2] if found else None


def load_previous(path):
    """(document, problem) of a previous fleet.json; document None with the reason when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as error:
        return None, "the previous report %s could not be read: %s" % (path, error)
    if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION:
        return None, "the previous report %s is not a fleet.json of schema_version %d" % (path, SCHEMA_VERSION)
    return document, None


def write_atomic(path, text, mode=0o644):
    """Write ``path`` whole or not at all: a new temporary file of an unpredictable name in the same directory,
    created exclusively and never through a link (mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW), then renamed over ``path``.
    A file or link someone planted beside the report is neither followed nor overwritten."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
