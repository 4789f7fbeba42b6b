"""alertmanager_silence's main() through the module harness against a small Alertmanager API v2 on loopback (the
silences list, create, update by id, expire): one silence per node and owner, extended only when it would end too
soon, others' silences untouched, expired ones kept, check mode changing nothing, and an unreachable Alertmanager a
failure that names its URL."""

import datetime
import http.server
import json
import threading
import uuid

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import alertmanager_silence
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module


class _Handler(http.server.BaseHTTPRequestHandler):
    silences = None
    calls = None

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.calls.append(("GET", self.path))
        self._answer(200, list(self.silences.values()))

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(("POST", body))
        ident = body.get("id") or str(uuid.uuid4())
        body = dict(body, id=ident, status={"state": "active"})
        self.silences[ident] = body
        self._answer(200, {"silenceID": ident})

    def do_DELETE(self):  # noqa: N802
        ident = self.path.rsplit("/", 1)[-1]
        self.calls.append(("DELETE", ident))
        self.silences[ident]["status"] = {"state": "expired"}
        self._answer(200, {})


@pytest.fixture
def alertmanager():
    handler = type("Handler", (_Handler,), {"silences": {}, "calls": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def _at(seconds):
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.123456789Z")


def _silence(node, owner="maintenance", ends=3600, state="active", label="node"):
    return {"id": str(uuid.uuid4()), "createdBy": "gpucluster.ops/" + owner, "comment": "c", "startsAt": _at(-60),
            "endsAt": _at(ends), "status": {"state": state},
            "matchers": [{"name": label, "value": node, "isRegex": False, "isEqual": True}]}


def _args(url, **extra):
    return dict(dict(url=url, nodes=["gpu01", "gpu02"], owner="maintenance", comment="monthly by alice", duration=7200),
                **extra)


def test_creates_one_silence_per_node_matching_its_node_label(alertmanager):
    handler, url = alertmanager
    result = run_module(alertmanager_silence, _args(url))
    assert not result["failed"] and result["changed"] and result["created"] == ["gpu01", "gpu02"]
    posts = [body for method, body in handler.calls if method == "POST"]
    assert [p["matchers"] for p in posts] == [[{"name": "node", "value": n, "isRegex": False, "isEqual": True}]
                                              for n in ("gpu01", "gpu02")]
    assert {p["createdBy"] for p in posts} == {"gpucluster.ops/maintenance"}
    assert {p["comment"] for p in posts} == {"monthly by alice"}
    length = (alertmanager_silence._parse_time(posts[0]["endsAt"]) - alertmanager_silence._parse_time(posts[0]["startsAt"]))
    assert abs(length.total_seconds() - 7200) < 5
    assert sorted(result["silences"]) == ["gpu01", "gpu02"]
    # Again: nothing to do.
    again = run_module(alertmanager_silence, _args(url))
    assert not again["changed"] and again["unchanged"] == ["gpu01", "gpu02"]


def test_a_silence_ending_too_soon_is_extended_in_place_and_others_are_untouched(alertmanager):
    handler, url = alertmanager
    short = _silence("gpu01", ends=600)
    short["comment"] = "monthly by alice"
    admins = _silence("gpu02", owner="admin")
    regex = _silence("gpu02")
    regex["matchers"][0]["isRegex"] = True
    for silence in (short, admins, regex):
        handler.silences[silence["id"]] = silence
    result = run_module(alertmanager_silence, _args(url))
    assert result["extended"] == ["gpu01"] and result["created"] == ["gpu02"]
    posts = [body for method, body in handler.calls if method == "POST"]
    assert posts[0]["id"] == short["id"] and result["silences"]["gpu01"] == short["id"]
    assert handler.silences[admins["id"]]["endsAt"] == admins["endsAt"]


def test_absent_expires_only_the_owners_silences_of_the_nodes(alertmanager):
    handler, url = alertmanager
    mine, other_node, admins = _silence("gpu01"), _silence("gpu03"), _silence("gpu01", owner="admin")
    for silence in (mine, other_node, admins):
        handler.silences[silence["id"]] = silence
    result = run_module(alertmanager_silence, _args(url, state="absent"))
    assert result["changed"] and result["expired"] == ["gpu01"] and result["unchanged"] == ["gpu02"]
    assert [c for c in handler.calls if c[0] == "DELETE"] == [("DELETE", mine["id"])]
    assert handler.silences[admins["id"]]["status"]["state"] == "active"
    assert handler.silences[other_node["id"]]["status"]["state"] == "active"
    again = run_module(alertmanager_silence, _args(url, state="absent"))
    assert not again["changed"] and again["expired"] == []


def test_check_mode_says_what_it_would_do_and_changes_nothing(alertmanager):
    handler, url = alertmanager
    mine = _silence("gpu01")
    handler.silences[mine["id"]] = mine
    result = run_module(alertmanager_silence, _args(url), check=True)
    assert result["changed"] and result["extended"] == ["gpu01"] and result["created"] == ["gpu02"]
    result = run_module(alertmanager_silence, _args(url, state="absent"), check=True)
    assert result["changed"] and result["expired"] == ["gpu01"]
    assert [c[0] for c in handler.calls] == ["GET", "GET"]


def test_an_unreachable_alertmanager_fails_naming_its_url():
    result = run_module(alertmanager_silence, _args("http://127.0.0.1:9"))
    assert result["failed"] and "Alertmanager at http://127.0.0.1:9: GET /api/v2/silences failed" in result["msg"]


@pytest.mark.parametrize("extra, message", [
    (dict(owner="Maintenance"), "owner 'Maintenance'"),
    (dict(duration=10), "duration 10"),
    (dict(nodes=["gpu01", " gpu02"]), "a node name is empty"),
    (dict(url="127.0.0.1:9093"), "url '127.0.0.1:9093'"),
])
def test_bad_input_fails_before_any_call(extra, message):
    result = run_module(alertmanager_silence, dict(_args("http://127.0.0.1:9"), **extra))
    assert result["failed"] and message in result["msg"], result["msg"]
