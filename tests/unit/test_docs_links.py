"""scripts/check-links.py (make lint): relative links and #anchors of README.md, docs/*.md and roles/*/README.md
resolve; external links are recognised and never fetched."""

import importlib.util
import os
import socket

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("check_links", os.path.join(ROOT, "scripts", "check-links.py"))
cl = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cl)


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the link check tried to open a connection")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_the_checkouts_links_resolve(no_network):
    files = cl.default_files()
    assert os.path.join(ROOT, "README.md") in files
    assert os.path.join(ROOT, "docs", "playbooks.md") in files
    assert os.path.join(ROOT, "roles", "_common", "README.md") in files
    problems = [p for f in files for p in cl.check_file(f)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("heading, anchor", [
    ("The two commands", "the-two-commands"),
    ("`site.yml`", "siteyml"),
    ("`gpucluster.ops.node_baseline`", "gpuclusteropsnode_baseline"),
    ("Node health checks: `gpucluster.ops.health_check`, `gpu_facts`", "node-health-checks-gpuclusteropshealth_check-gpu_facts"),
    ("Xids and driver failures", "xids-and-driver-failures"),
    ("The stack's local fact and tests", "the-stacks-local-fact-and-tests"),
])
def test_anchors_are_slugged_as_github_does(heading, anchor):
    assert cl.slug(heading) == anchor


def test_duplicate_headings_are_numbered():
    assert cl.anchors("# A\n## A\n```\n# not a heading\n```\n### A\n") == {"a", "a-1", "a-2"}


def test_broken_links_are_found_and_external_ones_left_alone(tmp_path, no_network):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# Here\n\n## Two words\n")
    (tmp_path / "README.md").write_text(
        "# Top\n\n"
        "[ok](docs/there.md) [ok anchor](docs/there.md#two-words) [self](#top) [dir](docs/)\n"
        "[gone](docs/missing.md) [bad anchor](docs/there.md#three-words) [bad self](#nowhere)\n"
        "[web](https://example.invalid/x) [mail](mailto:a@example.invalid) `[code](not/checked.md)`\n"
        "```\n[fenced](not/checked/either.md)\n```\n"
        "[escape](../../etc/passwd)\n")
    problems = cl.check_file(str(tmp_path / "README.md"), root=str(tmp_path))
    assert [p.split(": ", 1)[0] for p in problems] == ["README.md:4", "README.md:4", "README.md:4", "README.md:9"]
    assert "docs/missing.md: no such file" in problems[0]
    assert "#three-words" in problems[1] and "#nowhere" in problems[2]


def test_the_command_line_fails_on_a_broken_link(tmp_path, capsys):
    bad = tmp_path / "bad.md"
    bad.write_text("[x](nothing-here.md)\n")
    assert cl.main([str(bad)]) == 1
    assert "nothing-here.md" in capsys.readouterr().err
