# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No silent skips (issue 46): tests/support/skip_policy.py, run on small suites of its own (pytester).

Under CI=true a skip that tests/allowed_skips.yml does not list fails the session, a listed one does not, and a test
whose ../shared data is absent fails naming the path; without CI=true all of them skip as before.
"""

import os

import pytest
import skip_policy
import yaml

pytest_plugins = ["pytester"]

TOOLS = """
import pytest

def test_passes():
    pass

@pytest.mark.skipif(True, reason="frobnicator is not installed")
def test_needs_a_tool():
    pass
"""

DATA = """
import os
import pytest
from skip_policy import needs_shared, require_shared

MISSING = os.environ["MISSING_DATA"]

def test_passes():
    pass

def test_fixture_data():
    require_shared(os.path.join(MISSING, "captures"), "the captures")

@needs_shared(MISSING, "the charts")
def test_marked_data():
    pass

@needs_shared(MISSING, "the charts")
@pytest.mark.parametrize("path", [])
def test_each_file(path):
    pass
"""


@pytest.fixture(name="suite")
def fixture_suite(pytester, monkeypatch, tmp_path):
    """A suite of one passing test and one skipping for a missing tool, with its allowed-skips file."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("GPUCLUSTER_STRICT_SKIPS", raising=False)
    allowed = tmp_path / "allowed_skips.yml"
    allowed.write_text("[]\n")
    monkeypatch.setenv("GPUCLUSTER_ALLOWED_SKIPS", str(allowed))
    pytester.makepyfile(test_tools=TOOLS)
    return pytester, allowed


CONFTEST = """
import skip_policy

def pytest_configure(config):
    skip_policy.register(config)
"""


def run(pytester, *args):
    """pytest on the suite, the plugin registered as tests/unit/conftest.py does."""
    pytester.makeconftest(CONFTEST)
    return pytester.runpytest("-rs", *args)


def test_an_unlisted_skip_fails_the_session_under_ci(suite, monkeypatch):
    pytester, _allowed = suite
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skips not in*", "SKIPPED test_tools.py::test_needs_a_tool: frobnicator is not "
                                 "installed", "1 skip(s) not allowed, 0 allowed*"])


def test_a_listed_skip_passes_under_ci(suite, monkeypatch):
    pytester, allowed = suite
    allowed.write_text(yaml.safe_dump([{"where": "test_tools.py::*", "reason": "frobnicator is not installed",
                                        "why": "the frobnicator runs in the molecule scenario"}]))
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["skip policy: 1 skip(s), each allowed by *"])


def test_an_entry_allows_only_its_reason_its_tests_and_where_its_variable_is_set(suite, monkeypatch):
    pytester, allowed = suite
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("ONLY_HERE", raising=False)
    for entry in ({"where": "test_tools.py::*", "reason": "widget is not installed", "why": "another tool"},
                  {"where": "test_other.py", "reason": "frobnicator", "why": "another file"},
                  {"where": "test_tools.py", "reason": "frobnicator", "why": "elsewhere only", "env": "ONLY_HERE"}):
        allowed.write_text(yaml.safe_dump([entry]))
        assert run(pytester).ret == pytest.ExitCode.TESTS_FAILED, entry
    monkeypatch.setenv("ONLY_HERE", "1")
    assert run(pytester).ret == pytest.ExitCode.OK


def test_an_entry_without_its_reason_why_is_refused(suite, monkeypatch):
    pytester, allowed = suite
    allowed.write_text(yaml.safe_dump([{"where": "test_tools.py", "reason": "frobnicator"}]))
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*entry 1 needs where, reason and why*"])


def test_without_ci_nothing_changes(suite):
    pytester, _allowed = suite
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK
    assert "skip policy" not in result.stdout.str() and "skips not in" not in result.stdout.str()


def test_strict_mode_can_be_forced_on_and_off(suite, monkeypatch):
    pytester, _allowed = suite
    monkeypatch.setenv("GPUCLUSTER_STRICT_SKIPS", "1")
    assert run(pytester).ret == pytest.ExitCode.TESTS_FAILED
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GPUCLUSTER_STRICT_SKIPS", "0")
    assert run(pytester).ret == pytest.ExitCode.OK


def test_a_module_skipped_at_collection_is_judged_too(pytester, monkeypatch, tmp_path):
    allowed = tmp_path / "allowed_skips.yml"
    allowed.write_text("[]\n")
    monkeypatch.setenv("GPUCLUSTER_ALLOWED_SKIPS", str(allowed))
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("GPUCLUSTER_STRICT_SKIPS", raising=False)
    pytester.makepyfile(test_module="import pytest\npytest.importorskip('no_such_module_here')\n"
                                    "def test_it():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_module.py: could not import 'no_such_module_here'*"])


def test_missing_shared_data_fails_naming_the_path_under_ci(pytester, monkeypatch, tmp_path):
    missing = tmp_path / "shared" / "data"
    monkeypatch.setenv("MISSING_DATA", str(missing))
    monkeypatch.setenv("GPUCLUSTER_ALLOWED_SKIPS", str(tmp_path / "none.yml"))
    monkeypatch.delenv("GPUCLUSTER_STRICT_SKIPS", raising=False)
    pytester.makepyfile(test_data=DATA)
    monkeypatch.delenv("CI", raising=False)
    result = run(pytester)      # as today: skips, naming the path (no allowed-skips file needed)
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["SKIPPED*needs %s/captures (../shared: the captures), which is absent" % missing,
                                 "SKIPPED*needs %s (../shared: the charts), which is absent" % missing])

    (tmp_path / "none.yml").write_text("[]\n")
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "needs %s/captures (../shared: the captures)" % missing in out
    # the marked test and the empty parametrization (no files listed: absent folder) fail before their fixtures
    assert out.count("needs %s (../shared: the charts), which is absent -- CI=true fails" % missing) >= 2, out


def test_shared_paths_are_beside_the_checkout_unless_set(monkeypatch):
    monkeypatch.delenv("GPUCLUSTER_SHARED_DATA", raising=False)
    assert skip_policy.shared_path("GPUCLUSTER_SHARED_DATA", "data", "kueue") == os.path.join(
        os.path.dirname(skip_policy.REPO), "shared", "data", "kueue")
    monkeypatch.setenv("GPUCLUSTER_SHARED_DATA", "/elsewhere")
    assert skip_policy.shared_path("GPUCLUSTER_SHARED_DATA", "data") == "/elsewhere"


def test_the_checked_in_list_is_valid_and_says_why():
    entries = skip_policy.load_allowed(skip_policy.ALLOWED)
    assert entries and all(len(entry["why"]) > 40 for entry in entries)
    # ../shared data is never an allowed skip: CI has it beside the clone
    assert not [entry for entry in entries if "shared" in entry["reason"] or "absent" in entry["reason"]]
