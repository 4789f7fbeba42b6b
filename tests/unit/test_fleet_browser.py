"""fleet.html in a real browser (Debian's chromium, headless): what a person sees.

A made-up fleet of three nodes, gpu02 faulty (a row remapping failure on GPU 3). The page's script runs (the body's
``data-ready``), nothing reaches the console (no message, no uncaught exception), gpu02's GPU 3 cell has the error
colour and its other cells the OK colour, ``#hideok=1`` hides the healthy nodes (never a drained one, issue 44) and
``#filter=`` keeps the matching ones, and a screenshot is a PNG. The test fails with how to install chromium when it
is absent, unless GPUCLUSTER_SKIP_BROWSER=1 is set (a skip that -ra reports; CI never sets it).
"""

import html.parser
import os

import fleet_browser
import fleet_records as fr
import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet, _fleet_html


@pytest.fixture(scope="module", autouse=True)
def browser():
    if fleet_browser.chromium() is None:
        if os.environ.get("GPUCLUSTER_SKIP_BROWSER") == "1":
            pytest.skip("GPUCLUSTER_SKIP_BROWSER=1: the fleet page's browser test is skipped on purpose")
        pytest.fail(fleet_browser.INSTALL)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "fleet.html"
    report = _fleet.build(fr.three_nodes(), created_at="2026-12-01T06:00:00Z", options={"level": "quick"})
    path.write_text(_fleet_html.render(report), encoding="utf-8")
    return str(path)


class Elements(html.parser.HTMLParser):
    """Every start tag of a document as (tag, attributes)."""

    def __init__(self, text):
        super().__init__()
        self.found = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def elements(dom, tag=None, **attrs):
    return [a for t, a in Elements(dom).found if (tag is None or t == tag)
            and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def rows(dom):
    """{host: data-shown} of the grid's rows."""
    return {a["data-host"]: a.get("data-shown") for a in elements(dom, "tr") if "data-host" in a}


def cells(dom, host):
    """The class of each GPU cell of a host's row, by GPU index."""
    found, inside = {}, False
    for tag, attrs in Elements(dom).found:
        if tag == "tr":
            inside = attrs.get("data-host") == host
        elif tag == "td" and inside and "data-gpu" in attrs:
            found[int(attrs["data-gpu"])] = attrs["class"].split()
    return found


def test_the_script_runs_and_says_nothing_on_the_console(page):
    dom, console = fleet_browser.dump_dom(page)
    body = elements(dom, "body")[0]
    assert body["data-ready"] == "1" and "data-js-error" not in body, body
    assert console == []
    assert rows(dom) == {"gpu01": "1", "gpu02": "1", "gpu03": "1"}


def test_the_faulty_gpu_has_the_error_colour(page):
    dom, _console = fleet_browser.dump_dom(page)
    gpu02 = cells(dom, "gpu02")
    assert sorted(gpu02) == list(range(8)) and "s-error" in gpu02[3]
    assert all("s-ok" in gpu02[n] for n in range(8) if n != 3)
    assert all("s-ok" in classes for classes in cells(dom, "gpu01").values())
    status = [a for a in elements(dom, "td") if a.get("class") == "s-error"]
    assert status, "the faulty node's status cell has no error colour"


def test_hide_ok_hides_the_healthy_nodes(page):
    dom, console = fleet_browser.dump_dom(page, "filter=&hideok=1")
    body = elements(dom, "body")[0]
    assert (body["data-ready"], body["data-hideok"]) == ("1", "1") and console == []
    assert rows(dom) == {"gpu01": "0", "gpu02": "1", "gpu03": "0"}
    assert "1 node(s) shown" in dom


@pytest.fixture(scope="module")
def drained_page(tmp_path_factory):
    """Issue 44: the three nodes and gpu04, healthy by its findings but drained by the health checks."""
    nodes = fr.three_nodes()
    nodes["gpu04"] = fr.record("gpu04", slurm_state="IDLE+DRAIN", slurm_reason="gpucluster-health: GPU-XID-ERROR gpu2")
    path = tmp_path_factory.mktemp("fleet-drained") / "fleet.html"
    path.write_text(_fleet_html.render(_fleet.build(nodes, created_at="2026-12-01T06:00:00Z")), encoding="utf-8")
    return str(path)


def test_hide_ok_never_hides_a_drained_node(drained_page):
    dom, console = fleet_browser.dump_dom(drained_page, "filter=&hideok=1")
    assert elements(dom, "body")[0]["data-ready"] == "1" and console == []
    assert rows(dom) == {"gpu01": "0", "gpu02": "1", "gpu03": "0", "gpu04": "1"}
    sections = {a["data-host"]: a.get("data-shown") for a in elements(dom, "div") if "data-host" in a}
    assert sections == {"gpu02": "1", "gpu04": "1"}
    assert "2 node(s) shown" in dom


def test_the_filter_text_keeps_the_matching_nodes(page):
    dom, console = fleet_browser.dump_dom(page, "filter=gpu03")
    assert elements(dom, "body")[0]["data-filter"] == "gpu03" and console == []
    assert rows(dom) == {"gpu01": "0", "gpu02": "0", "gpu03": "1"}
    dom, _console = fleet_browser.dump_dom(page, "filter=ROW-REMAP")
    assert rows(dom) == {"gpu01": "0", "gpu02": "1", "gpu03": "0"}
    sections = {a["data-host"]: a.get("data-shown") for a in elements(dom, "div") if "data-host" in a}
    assert sections == {"gpu02": "1"}


def test_the_console_check_sees_a_broken_script(tmp_path):
    """The check above is not blind: an uncaught exception of a page reaches the console lines."""
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>throw new Error('fleet-test-boom');</script></body></html>")
    _dom, console = fleet_browser.dump_dom(str(broken))
    assert any("Uncaught" in line and "fleet-test-boom" in line for line in console), console


def test_a_screenshot_is_a_png(page, tmp_path):
    png = tmp_path / "fleet.png"
    assert fleet_browser.screenshot(page, str(png), fragment="hideok=1") == []
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
