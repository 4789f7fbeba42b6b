"""Debian's chromium, headless, against a fleet.html file: the DOM after the page's script ran, its console lines,
and screenshots.

tests/unit/test_fleet_browser.py uses it; so does the screenshot of docs/health-sweep.md, written with

    .venv/bin/python tests/support/fleet_browser.py docs/images/fleet-report.png

(a made-up three-node fleet, one node faulty; the lab's own report may replace it). chromium is `apt-get install -y
chromium` (.ci/run installs it). The console lines come from ``--enable-logging=stderr --v=0``: chromium prints every
console message and every uncaught exception of the page as ``INFO:CONSOLE:<line>] "<message>", source: <url>``.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

INSTALL = ("the fleet page's browser test needs Debian's chromium: run `apt-get install -y chromium` as root "
           "(.ci/run installs it), or set GPUCLUSTER_SKIP_BROWSER=1 to skip this test knowingly")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0")
CONSOLE = re.compile(r":CONSOLE(?::\d+)?\] (.*)")


def chromium():
    """The chromium program, or None."""
    return shutil.which("chromium")


def run(url, *extra, timeout=120):
    """(stdout, console lines) of one headless run on ``url`` with a fresh profile."""
    program = chromium()
    if program is None:
        raise RuntimeError(INSTALL)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        proc = subprocess.run([program] + list(FLAGS) + ["--user-data-dir=" + profile] + list(extra) + [url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False,
                              env=dict(os.environ, HOME=profile))
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise RuntimeError("chromium exited %d: %s" % (proc.returncode, stderr[-2000:]))
    return proc.stdout.decode("utf-8", "replace"), [m.group(1) for m in CONSOLE.finditer(stderr)]


def dump_dom(path, fragment=""):
    """(DOM after the page's script ran, console lines) of the file at ``path`` opened with the URL hash ``fragment``."""
    return run("file://" + os.path.abspath(path) + (("#" + fragment) if fragment else ""), "--dump-dom")


def screenshot(path, png, fragment="", size=(1280, 900)):
    """Write the PNG of the page (the window's size) to ``png``; return the console lines."""
    _out, console = run("file://" + os.path.abspath(path) + (("#" + fragment) if fragment else ""),
                        "--screenshot=" + os.path.abspath(png), "--window-size=%d,%d" % size,
                        "--hide-scrollbars")
    if not os.path.isfile(png):
        raise RuntimeError("chromium wrote no screenshot to %s" % png)
    return console


def main(argv):
    """Write the docs screenshot: the page of the made-up three-node fleet to the PNG named by argv[1]."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    sys.path[:0] = [here, os.path.join(root, ".cache", "collections")]
    import fleet_records  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet, _fleet_html  # pylint: disable=import-outside-toplevel
    report = _fleet.build(fleet_records.three_nodes(), created_at="2026-12-01T06:00:00Z",
                          options={"level": "quick", "drain": True, "max_out_of_service": 0.1,
                                   "started_at": "2026-12-01T05:58:41Z"})
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "fleet.html")
        with open(page, "w", encoding="utf-8") as handle:
            handle.write(_fleet_html.render(report))
        console = screenshot(page, argv[1], size=(1100, 820))
    if console:
        sys.stderr.write("console: %s\n" % console)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
