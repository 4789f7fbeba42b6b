#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: alertmanager_silence
short_description: Silence the alerts of nodes while an owner works on them, and expire the silence when they return
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Through Alertmanager's API (v2), O(state=present) keeps one silence per listed node, matching the label O(label)
    equal to the node's name (the C(node) label every scrape target of the monitoring role carries), created by
    C(gpucluster.ops/<owner>), with O(comment), ending O(duration) seconds from now.
  - A node that has such a silence of the owner already, active or pending, keeps it; it is extended when it would end
    sooner than asked, or its comment changes. Silences of anyone else are never touched.
  - O(state=absent) expires the owner's active and pending silences of the listed nodes; Alertmanager keeps them,
    expired, for its retention, so what was silenced and when stays visible.
  - The operations playbooks' drain creates one for each node it takes out, ending at the batch's deadline, and their
    end expires it when the node returns to service (docs/monitoring.md).
options:
  nodes:
    description: Node names, as the O(label) label of their alerts carries them (their Slurm names).
    type: list
    elements: str
    required: true
  state:
    description: C(present) silences the nodes' alerts; C(absent) expires the owner's silences of them.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description: Whose silences these are (lower case letters, digits and C(-), starting with a letter); the silence's
      creator is C(gpucluster.ops/<owner>).
    type: str
    required: true
  comment:
    description: Why, for example the run, the operator and the deadline. Required with O(state=present).
    type: str
  duration:
    description: With O(state=present), seconds from now until the silence ends by itself (the batch's deadline).
    type: int
    default: 3600
  label:
    description: The label that names the node in every alert.
    type: str
    default: node
  url:
    description: Alertmanager's base URL, as the host the module runs on reaches it.
    type: str
    default: http://127.0.0.1:9093
  timeout:
    description: Seconds to wait for each answer of Alertmanager.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Reads the silences and returns which it would create, extend and expire; changes nothing.
  diff_mode:
    support: none
    description: The result lists the nodes created, extended and expired.
"""

EXAMPLES = r"""
- name: Silence the alerts of the batch's nodes until the batch's deadline
  gpucluster.ops.alertmanager_silence:
    nodes: [gpu01, gpu02]
    owner: maintenance
    comment: monthly maintenance by alice (run 20261207T1200Z), until 14:00 UTC
    duration: 7200
  delegate_to: head01

- name: Expire them when the nodes are back in service
  gpucluster.ops.alertmanager_silence:
    nodes: [gpu01, gpu02]
    owner: maintenance
    state: absent
  delegate_to: head01
"""

RETURN = r"""
created:
  description: Nodes that got a new silence (in check mode, would).
  returned: always
  type: list
  elements: str
  sample: [gpu01]
extended:
  description: Nodes whose silence of the owner now ends later or says something else (in check mode, would).
  returned: always
  type: list
  elements: str
  sample: []
unchanged:
  description: Nodes whose silence of the owner already covered the time asked, or (absent) that had none.
  returned: always
  type: list
  elements: str
  sample: []
expired:
  description: Nodes whose silences of the owner were expired (in check mode, would be).
  returned: always
  type: list
  elements: str
  sample: []
silences:
  description: The silence ID of each node after the run (present), or those expired (absent); none in check mode
    for silences not made yet.
  returned: always
  type: dict
  sample: {gpu01: 5e1a0c2e-6a0f-4a1e-9a56-3c1d2b7f0e11}
"""

import datetime
import json
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

_OWNER_RE = re.compile(r"^[a-z][a-z0-9-]*$")
# Extend a silence only when it would end more than this many seconds before the time asked.
_SLACK_S = 60


def _parse_time(text):
    """Alertmanager's RFC 3339 times (with 'Z' and up to nanoseconds) as an aware datetime."""
    text = text.replace("Z", "+00:00")
    match = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
    if match:
        text = match.group(1) + (match.group(2) or "")[:7] + match.group(3)
    return datetime.datetime.fromisoformat(text)


def _format_time(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class Alertmanager(object):
    def __init__(self, module):
        self.module = module
        self.base = module.params["url"].rstrip("/")

    def call(self, method, path, body=None):
        url = self.base + path
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            answer = open_url(url, method=method, data=data, headers=headers, timeout=self.module.params["timeout"])
            text = answer.read().decode("utf-8", "replace")
        except Exception as exc:  # pylint: disable=broad-except
            detail = ""
            reader = getattr(exc, "read", None)
            if reader:
                try:
                    detail = ": " + reader().decode("utf-8", "replace").strip()[:300]
                except Exception:  # pylint: disable=broad-except
                    detail = ""
            self.module.fail_json(msg="Alertmanager at %s: %s %s failed: %s%s" % (self.base, method, path, exc, detail))
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            self.module.fail_json(msg="Alertmanager at %s: %s %s answered what is not JSON: %r"
                                  % (self.base, method, path, text[:200]))


def _ours(silence, creator, label, node):
    """Whether a silence is the owner's for this node alone, and still in force (active or pending)."""
    if silence.get("createdBy") != creator:
        return False
    if (silence.get("status") or {}).get("state") not in ("active", "pending"):
        return False
    matchers = silence.get("matchers") or []
    return (len(matchers) == 1 and matchers[0].get("name") == label and matchers[0].get("value") == node
            and not matchers[0].get("isRegex", False) and matchers[0].get("isEqual", True))


def run(module, api, now):
    params = module.params
    creator = "gpucluster.ops/" + params["owner"]
    nodes = params["nodes"]
    label = params["label"]
    result = dict(changed=False, created=[], extended=[], unchanged=[], expired=[], silences={})
    silences = api.call("GET", "/api/v2/silences") or []
    if not isinstance(silences, list):
        module.fail_json(msg="Alertmanager at %s: /api/v2/silences is not a list of silences" % api.base)
    if params["state"] == "absent":
        for node in nodes:
            mine = [s for s in silences if _ours(s, creator, label, node)]
            if not mine:
                result["unchanged"].append(node)
                continue
            result["expired"].append(node)
            result["silences"][node] = [s["id"] for s in mine]
            if not module.check_mode:
                for silence in mine:
                    api.call("DELETE", "/api/v2/silence/%s" % silence["id"])
        result["changed"] = bool(result["expired"])
        return result

    ends = now + datetime.timedelta(seconds=params["duration"])
    for node in nodes:
        mine = sorted((s for s in silences if _ours(s, creator, label, node)),
                      key=lambda s: _parse_time(s["endsAt"]), reverse=True)
        body = dict(matchers=[dict(name=label, value=node, isRegex=False, isEqual=True)],
                    startsAt=_format_time(now), endsAt=_format_time(ends), createdBy=creator,
                    comment=params["comment"])
        if mine:
            current = mine[0]
            if (_parse_time(current["endsAt"]) >= ends - datetime.timedelta(seconds=_SLACK_S)
                    and current.get("comment") == params["comment"]):
                result["unchanged"].append(node)
                result["silences"][node] = current["id"]
                continue
            body["id"] = current["id"]
            body["startsAt"] = current.get("startsAt", body["startsAt"])
            result["extended"].append(node)
        else:
            result["created"].append(node)
        if module.check_mode:
            if mine:
                result["silences"][node] = mine[0]["id"]
            continue
        answer = api.call("POST", "/api/v2/silences", body) or {}
        result["silences"][node] = answer.get("silenceID", body.get("id"))
    result["changed"] = bool(result["created"] or result["extended"])
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            owner=dict(type="str", required=True),
            comment=dict(type="str"),
            duration=dict(type="int", default=3600),
            label=dict(type="str", default="node"),
            url=dict(type="str", default="http://127.0.0.1:9093"),
            timeout=dict(type="int", default=10),
        ),
        required_if=[("state", "present", ["comment"])],
        supports_check_mode=True,
    )
    params = module.params
    if not _OWNER_RE.match(params["owner"]):
        module.fail_json(msg="owner %r: lower case letters, digits and '-', starting with a letter" % params["owner"])
    if params["state"] == "present" and params["duration"] < 60:
        module.fail_json(msg="duration %d: a silence must last at least 60 seconds" % params["duration"])
    bad = [node for node in params["nodes"] if not node or node != node.strip()]
    if bad:
        module.fail_json(msg="nodes %r: a node name is empty or has blanks around it" % (bad,))
    if not re.match(r"^https?://[^ ]+$", params["url"]):
        module.fail_json(msg="url %r: an http or https URL such as http://127.0.0.1:9093" % params["url"])
    now = datetime.datetime.now(datetime.timezone.utc)
    module.exit_json(**run(module, Alertmanager(module), now))


if __name__ == "__main__":
    main()
