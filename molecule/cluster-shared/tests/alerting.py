"""The alerting path as the cluster tests read it: what the test webhook receiver on the head got from Alertmanager
(prepare.yml runs it; group_vars/all.yml routes every alert there), and Alertmanager's silences."""

import json
import re
import shlex
import urllib.parse
from datetime import datetime

WEBHOOK_LOG = "/var/lib/gpucluster-tests/webhook.jsonl"
ALERTMANAGER = "http://127.0.0.1:9093"
GET = "python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' %s"


def get(host, url):
    """The body of an HTTP GET made on the host."""
    return host.check_output(GET % shlex.quote(url))


def received(head, since=0.0):
    """Every alert of every notification the receiver got at or after ``since`` (epoch seconds), each with the
    notification's ``received`` time and ``receiver``."""
    out = []
    for line in head.run("cat %s" % WEBHOOK_LOG).stdout.splitlines():
        document = json.loads(line)
        if document["received"] < since:
            continue
        for alert in document["body"].get("alerts", []):
            out.append(dict(alert, received=document["received"], receiver=document["body"].get("receiver")))
    return out


POST = ("python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], "
        "data=sys.argv[2].encode(), headers={\"Content-Type\": \"application/json\"}))' %s %s")


def post_alerts(head, alerts):
    """Send ``alerts`` (Alertmanager API v2 postable alerts) to Alertmanager, as Prometheus does."""
    head.run_expect([0], POST % (shlex.quote(ALERTMANAGER + "/api/v2/alerts"), shlex.quote(json.dumps(alerts))))


def alerts(head, alertname):
    """Alertmanager's alerts named ``alertname``, with their status (``state``, ``inhibitedBy``, ``silencedBy``)."""
    query = urllib.parse.quote('alertname="%s"' % alertname)
    return json.loads(get(head, ALERTMANAGER + "/api/v2/alerts?filter=" + query))


def silences(head):
    """Alertmanager's silences (active, pending and expired ones within its retention)."""
    return json.loads(get(head, ALERTMANAGER + "/api/v2/silences"))


def node_silences(head, owner, node, since):
    """The silences of the operations owner ``owner`` for the one node ``node``, started at or after ``since`` (an
    aware datetime)."""
    return [s for s in silences(head)
            if s["createdBy"] == "gpucluster.ops/" + owner
            and s["matchers"] == [{"name": "node", "value": node, "isRegex": False, "isEqual": True}]
            and when(s["startsAt"]) >= since]


def when(text):
    """Alertmanager's RFC 3339 time (up to nanoseconds) as an aware datetime."""
    match = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text.replace("Z", "+00:00"))
    return datetime.fromisoformat(match.group(1) + (match.group(2) or "")[:7] + match.group(3))
