# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health sweep's node record, on the controller: one definition for both of its ways of checking a node.

roles/operations/tasks/health_sweep_node.yml builds a node's record from its own tasks' results (the probe sent by
``ansible.builtin.raw``, and the ``gpu_health`` module where the checker is not installed) through the filter
``gpucluster.ops.health_sweep_record``; the action ``gpucluster.ops.health_fanout`` builds the records of the nodes it
probed over ssh, all at once, with the same function. The fleet report is then the same whichever way a node was
checked (tests/unit/plugins/plugin_utils/test_health_sweep.py, tests/unit/test_health_sweep_playbook.py,
tests/integration/test_fleet_sweep_ssh.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

# The keys a module result has that the checker's JSON document has not.
ANSIBLE_KEYS = ("changed", "failed", "invocation", "msg", "warnings", "deprecations", "skipped", "skip_reason",
                "exception", "ansible_facts", "diff")


def answer_of(probe):
    """The probe's JSON answer (a mapping), or {} when it exited non-zero or printed anything else."""
    probe = probe or {}
    out = str(probe.get("stdout") or "").strip()
    if probe.get("rc", 1) != 0 or not (out.startswith("{") and out.endswith("}")):
        return {}
    try:
        answer = json.loads(out)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def needs_module(answer, method="auto", check_mode=False, level="quick"):
    """Whether the gpu_health module must check the node (roles/operations/tasks/health_sweep_node.yml's third task): the probe gave no
    result and no error, and the method says module, or the checker is not installed, or the level in check mode
    needs the module (it reads the saved counters without saving them)."""
    if answer.get("result") is not None or answer.get("error") is not None:
        return False
    return method == "module" or not answer.get("installed") or (check_mode and level != "quick")


def expected(health_check_expected, health_sweep_expected, pinnable):
    """The pins a node is held to: health_check_expected's keys that are ``pinnable`` (the operations role's pinnable
    versions), health_sweep_expected's over them."""
    pins = {k: v for k, v in (health_check_expected or {}).items() if k in pinnable}
    pins.update(health_sweep_expected or {})
    return pins


def _truncate(text, length=200, end="..."):
    """Jinja's ``truncate(length)``: the text when it is at most ``length`` + 5 long, else cut at a word."""
    if len(text) <= length + 5:
        return text
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


def record(probe, module=None, replay=False, node_name=None, groups=(), group_names=(), health_check_expected=None,
           health_sweep_expected=None, pinnable=()):
    """The node's record for the fleet report.

    ``probe`` is the probe's result (rc, stdout, stderr; ``unreachable`` and ``msg`` when the node could not be
    reached), ``module`` the gpu_health module's result or None when it did not run (skipped), ``replay`` whether a
    bundle was replayed, ``node_name`` the node's name in Slurm, ``groups`` health_sweep_groups, ``group_names`` the
    host's groups; the host's health_check_expected and health_sweep_expected give its group (the GPU model when it
    is in none of ``groups``) and its pins (:func:`expected`).
    """
    health_check_expected = health_check_expected if isinstance(health_check_expected, dict) else {}
    probe = probe or {}
    if module is not None and module.get("skipped"):
        module = None
    module = module or {}
    answer = answer_of(probe)
    unreachable = bool(probe.get("unreachable")) or bool(module.get("unreachable"))
    from_module = None if not module or module.get("unreachable") else module
    if from_module is not None and "status" in from_module:
        result = {k: v for k, v in from_module.items() if k not in ANSIBLE_KEYS and not k.startswith("_ansible")}
        if not answer.get("config_exists"):
            result["node"] = node_name
    else:
        result = answer.get("result")
    has_result = isinstance(result, dict) and bool(result)
    if unreachable:
        error = "unreachable: " + (probe.get("msg") or module.get("msg") or "")
    else:
        error = answer.get("error") or (None if has_result else "the sweep got no result: " + (
            module["msg"] if "msg" in module else "the probe printed no JSON (rc %s): %s" % (
                "none" if probe.get("rc") is None else probe.get("rc"),
                _truncate(str(probe.get("stderr") or "").strip()))))
    group = next((g for g in (groups or []) if g in (group_names or [])), None) \
        or health_check_expected.get("gpu_model") or None
    stack = answer.get("stack") or {}
    cudas = stack.get("cuda") or []
    defaults = [c.get("version") for c in cudas if c.get("default")]
    cuda = (defaults[0] if defaults else None) or (cudas[-1].get("version") if cudas else None)
    gpus = (result.get("gpus") if isinstance(result, dict) else None) or []
    return {
        "reachable": not unreachable,
        "error": error,
        "source": "replay" if replay else ("cli" if from_module is None else "module"),
        "group": group,
        "expected": expected(health_check_expected, health_sweep_expected, pinnable),
        "versions": {
            "driver_version": (result.get("driver_version") if isinstance(result, dict) else None)
            or (stack.get("driver") or {}).get("loaded") or (stack.get("driver") or {}).get("installed"),
            "cuda_version": cuda,
            "nccl_version": (stack.get("nccl") or {}).get("installed"),
            "ofed_version": answer.get("ofed_version"),
            "vbios_versions": sorted({g.get("vbios_version") for g in gpus if g.get("vbios_version")}),
            "ib_fw_versions": sorted(set((answer.get("ib_fw") or {}).values())),
        },
        "slurm": None,
        "result": result if has_result else None,
    }


# -- the sweep's variables ---------------------------------------------------------------------------------------------

LEVELS = ("quick", "standard", "deep")
METHODS = ("auto", "module")
BOOLEAN_WORDS = ("true", "false", "yes", "no")
SHARE = re.compile(r"^ *([0-9]+[.]?[0-9]*|[.][0-9]+) *$")


_OWNER = re.compile(r"^[a-z][a-z0-9-]*$")


def _json(value):
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return json.dumps(str(value))


def _boolean_ok(value):
    return isinstance(value, bool) or isinstance(value, str) and value.lower() in BOOLEAN_WORDS


def _share_ok(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and SHARE.match(value):
        number = float(value)
    else:
        return False
    return 0 <= number <= 1


# What a host's sweep variables are when its inventory does not set them: the operations role's defaults
# (tests/unit/test_health_sweep_playbook.py holds them equal; hostvars hold no role default).
DEFAULTS = {"health_sweep_level": "quick", "health_sweep_drain": False, "health_sweep_resume": False,
            "health_sweep_resume_owners": ["health"], "health_sweep_max_out_of_service": 0.1,
            "health_sweep_method": "auto", "health_sweep_fanout": True, "health_sweep_expected": {},
            "health_sweep_groups": []}


def problems(host, variables, pinnable, isdir=os.path.isdir):
    """What is wrong with the sweep's variables of one host (``variables``: a mapping such as its hostvars), one
    message per variable, each naming the host, the variable and its value; empty when nothing is."""
    def get(name):
        return variables[name] if name in variables else DEFAULTS.get(name)

    found = []
    level = get("health_sweep_level")
    if level not in LEVELS:
        found.append("health_sweep_level is %s: it must be one of %s" % (_json(level), ", ".join(LEVELS)))
    drain = get("health_sweep_drain")
    if not _boolean_ok(drain):
        found.append("health_sweep_drain is %s: it must be true or false" % _json(drain))
    resume = get("health_sweep_resume")
    if not _boolean_ok(resume):
        found.append("health_sweep_resume is %s: it must be true or false" % _json(resume))
    owners = get("health_sweep_resume_owners")
    if (isinstance(owners, (str, bytes, Mapping)) or not isinstance(owners, Sequence) or not owners
            or not all(isinstance(o, str) and _OWNER.match(o) for o in owners)):
        found.append("health_sweep_resume_owners is %s: it must be a list of the collection's drain owners (lower "
                     "case letters, digits and '-', such as health, nvlink, maintenance)" % _json(owners))
    share = get("health_sweep_max_out_of_service")
    if not _share_ok(share):
        found.append("health_sweep_max_out_of_service is %s: it must be a share of the cluster's nodes from 0 to 1 "
                     "(0.1 is one node in ten)" % _json(share))
    method = get("health_sweep_method")
    if method not in METHODS:
        found.append("health_sweep_method is %s: it must be auto (the installed checker where it is, else the "
                     "module) or module" % _json(method))
    fanout = get("health_sweep_fanout")
    if not _boolean_ok(fanout):
        found.append("health_sweep_fanout is %s: it must be true (the nodes reached by ssh checked at once from this "
                     "machine) or false (each node by its own tasks)" % _json(fanout))
    pins = get("health_sweep_expected")
    if not isinstance(pins, Mapping) or set(pins) - set(pinnable):
        found.append("health_sweep_expected is %s: it must be a mapping of some of %s" % (_json(pins), ", ".join(pinnable)))
    groups = get("health_sweep_groups")
    if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Sequence):
        found.append("health_sweep_groups is %s: it must be a list of inventory group names" % _json(groups))
    if "health_sweep_from_dir" in variables:
        bundle = get("health_sweep_from_dir")
        if not isinstance(bundle, str) or not isdir(bundle):
            found.append("health_sweep_from_dir is %s: it must be a directory on this machine holding a bundle of "
                         "gpucluster-health --collect" % _json(bundle))
    return ["host %s: %s" % (host, text) for text in found]
