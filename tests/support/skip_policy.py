# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No silent skips (issue 46): a pytest plugin, and the one helper for tests that read ../shared.

Strict mode is on with ``CI=true`` (or ``GPUCLUSTER_STRICT_SKIPS=1``; ``GPUCLUSTER_STRICT_SKIPS=0`` turns it off):

- a test whose ../shared data is absent fails with the path it needed (``require_shared``, or the
  ``needs_shared(path)`` mark, checked before the test's fixtures), where outside strict mode it skips as before;
- at the end of the session, every skip (of a test, or of a module at collection) that no entry of
  ``tests/allowed_skips.yml`` allows fails the session, listed with its reason. An entry allows the skips of the tests
  whose node id (relative to the checkout) matches its ``where`` (a glob, or a node id prefix) and whose reason
  contains its ``reason``; ``why`` says why it is allowed; ``env``, when given, allows it only where that environment
  variable is set (``GPUCLUSTER_CONTROLLER``: in the ansible-core 2.21 controller's chroot).

Outside strict mode nothing changes. Registered by tests/unit/conftest.py, tests/integration/conftest.py and
molecule/cluster-shared/tests/conftest.py (``skip_policy.register(config)`` in their ``pytest_configure``); with
pytest-xdist the controller process judges the skips its workers report.
"""

import fnmatch
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared"))
ALLOWED = os.path.join(REPO, "tests", "allowed_skips.yml")
NAME = "skip_policy"


def strict():
    """Whether skips are judged and missing ../shared data fails: CI=true, unless GPUCLUSTER_STRICT_SKIPS says."""
    forced = os.environ.get("GPUCLUSTER_STRICT_SKIPS", "")
    if forced in ("0", "1"):
        return forced == "1"
    return os.environ.get("CI", "").lower() == "true"


# -- the helper for tests that read ../shared -------------------------------------------------------------------------

def shared_path(env, *parts):
    """A path under ../shared (beside the checkout), or the value of the environment variable ``env`` when set."""
    return os.environ.get(env) or os.path.join(SHARED, *parts)


def missing_shared(path, what=""):
    """The test needs ``path`` (../shared data) and it is absent: fail in strict mode, else skip."""
    message = "needs %s (../shared%s), which is absent" % (path, ": " + what if what else "")
    if strict():
        pytest.fail(message + " -- CI=true fails where a clone elsewhere would skip (tests/support/skip_policy.py)",
                    pytrace=False)
    pytest.skip(message)


def require_shared(path, what=""):
    """``path`` when it exists; else fail (strict mode) or skip naming it. For fixtures and test bodies."""
    if not os.path.exists(path):
        missing_shared(path, what)
    return path


def needs_shared(path, what=""):
    """Mark (decorator, or in ``pytestmark``): the test needs ``path``; checked before its fixtures are set up."""
    return pytest.mark.needs_shared(path, what)


# -- the plugin -------------------------------------------------------------------------------------------------------

def register(config):
    """Register this module as a plugin once (from a conftest's pytest_configure)."""
    if not config.pluginmanager.has_plugin(NAME):
        config.pluginmanager.register(sys.modules[__name__], NAME)


def load_allowed(path):
    """The entries of the allowed-skips file, checked: each has where, reason and why."""
    import yaml  # pylint: disable=import-outside-toplevel
    try:
        with open(path) as handle:
            entries = yaml.safe_load(handle) or []
    except (IOError, OSError, yaml.YAMLError) as exc:
        raise pytest.UsageError("skip policy: cannot read the allowed skips %s: %s" % (path, exc))
    if not isinstance(entries, list):
        raise pytest.UsageError("skip policy: %s is not a list of entries" % path)
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry[k].strip()
                                                  for k in ("where", "reason", "why")):
            raise pytest.UsageError("skip policy: %s entry %d needs where, reason and why (text): %r"
                                    % (path, number, entry))
        unknown = set(entry) - {"where", "reason", "why", "env"}
        if unknown:
            raise pytest.UsageError("skip policy: %s entry %d: unknown keys %s" % (path, number, sorted(unknown)))
    return entries


def skip_reason(report):
    """The reason a skipped report gives (without pytest's 'Skipped: ')."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def allowed_by(entries, nodeid, reason):
    """The first entry that allows a skip of ``nodeid`` with ``reason``, or None."""
    for entry in entries:
        if entry.get("env") and not os.environ.get(entry["env"]):
            continue
        where = entry["where"]
        if (fnmatch.fnmatchcase(nodeid, where) or nodeid.startswith(where)) and entry["reason"] in reason:
            return entry
    return None


class SkipPolicy(object):
    """Collects the session's skips; fails the session on any the allowed list does not name."""

    def __init__(self, config, path):
        self.config = config
        self.path = path
        self.entries = load_allowed(path)
        self.skips = []         # (node id relative to the checkout, reason, entry or None)
        self.seen = set()

    def _nodeid(self, nodeid):
        """The node id with its file relative to the checkout (the session's rootdir may be another)."""
        path, sep, rest = nodeid.partition("::")
        full = os.path.normpath(os.path.join(str(self.config.rootpath), path))
        if full == REPO or full.startswith(REPO + os.sep):
            path = os.path.relpath(full, REPO).replace(os.sep, "/")
        return path + sep + rest

    def _record(self, report):
        nodeid, reason = self._nodeid(report.nodeid), skip_reason(report)
        if (nodeid, reason) not in self.seen:
            self.seen.add((nodeid, reason))
            self.skips.append((nodeid, reason, allowed_by(self.entries, nodeid, reason)))

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            self._record(report)

    def pytest_collectreport(self, report):
        if report.skipped:
            self._record(report)

    def unlisted(self):
        return [(nodeid, reason) for nodeid, reason, entry in self.skips if entry is None]

    def pytest_sessionfinish(self, session):
        # 5 (nothing collected) too: a module skipped whole at collection leaves no test
        if self.unlisted() and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        unlisted = self.unlisted()
        if not self.skips:
            return
        allowed = len(self.skips) - len(unlisted)
        shown = self.path
        if shown.startswith(REPO + os.sep):
            shown = os.path.relpath(shown, REPO)
        if unlisted:
            terminalreporter.section("skips not in %s (strict mode: CI=true)" % shown, sep="=", red=True, bold=True)
            for nodeid, reason in unlisted:
                terminalreporter.write_line("SKIPPED %s: %s" % (nodeid, reason))
            terminalreporter.write_line(
                "%d skip(s) not allowed, %d allowed: install what they need, or add an entry (where, reason, why) "
                "to %s" % (len(unlisted), allowed, shown), red=True)
        else:
            terminalreporter.write_line("skip policy: %d skip(s), each allowed by %s" % (allowed, shown))


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_shared(path, what): the test reads ../shared data at path; absent: it "
                                       "skips, or fails under CI=true (tests/support/skip_policy.py)")
    # A pytest-xdist worker only runs tests: its controller sees every report and judges them.
    if strict() and not hasattr(config, "workerinput") and not config.pluginmanager.has_plugin(NAME + "-session"):
        path = os.environ.get("GPUCLUSTER_ALLOWED_SKIPS") or ALLOWED
        config.pluginmanager.register(SkipPolicy(config, path), NAME + "-session")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # tryfirst: before the skip marks are evaluated (an empty parametrization's skip too) and the fixtures set up
    for mark in item.iter_markers("needs_shared"):
        require_shared(*mark.args, **mark.kwargs)
