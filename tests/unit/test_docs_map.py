"""README's map against the tree: every role under roles/, module under plugins/modules, filter under plugins/filter,
callback under plugins/callback and playbook under playbooks/ (top-level *.yml) is linked from README's "Map"
section exactly once, nothing else is linked there that the tree does not have, and README stays a front door (under
200 lines)."""

import collections
import glob
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("check_links", os.path.join(ROOT, "scripts", "check-links.py"))
cl = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cl)

README = os.path.join(ROOT, "README.md")
PLAYBOOKS_DOC = os.path.join(ROOT, "docs", "playbooks.md")


def readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def map_section(text):
    """The lines of README's "## Map" section, up to the next second-level heading."""
    lines = text.splitlines()
    start = lines.index("## Map")
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("## ")), len(lines))
    return "\n".join(lines[start:end])


def map_links():
    return [target for _number, _text, target in cl.links(map_section(readme()))]


def names(pattern, strip):
    return sorted(os.path.basename(p)[:-len(strip)] for p in glob.glob(os.path.join(ROOT, pattern))
                  if not os.path.basename(p).startswith("__"))


ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", d)))
MODULES = names("plugins/modules/*.py", ".py")
FILTERS = names("plugins/filter/*.py", ".py")
CALLBACKS = names("plugins/callback/*.py", ".py")
PLAYBOOKS = names("playbooks/*.yml", ".yml")


def playbook_anchor(name):
    return cl.slug(f"`{name}.yml`")


EXPECTED = (
    [f"roles/{r}/README.md" for r in ROLES]
    + [f"plugins/modules/{m}.py" for m in MODULES]
    + [f"plugins/filter/{f}.py" for f in FILTERS]
    + [f"plugins/callback/{c}.py" for c in CALLBACKS]
    + [f"docs/playbooks.md#{playbook_anchor(p)}" for p in PLAYBOOKS]
)


def test_the_tree_has_what_the_map_is_about():
    assert ROLES and MODULES and FILTERS and PLAYBOOKS
    assert "_common" in ROLES and "gpu_health" in MODULES and "site" in PLAYBOOKS


@pytest.mark.parametrize("target", EXPECTED)
def test_every_role_module_filter_and_playbook_is_linked_once(target):
    count = collections.Counter(map_links())[target]
    assert count == 1, f"README's map links {target} {count} times, not once"


def test_the_map_links_nothing_the_tree_does_not_have():
    extra = sorted(set(map_links()) - set(EXPECTED))
    assert not extra, f"README's map links what is not a role, module, filter or playbook of the tree: {extra}"


def test_every_link_of_the_map_resolves():
    problems = [p for p in cl.check_file(README) if any(t in p for t in map_links())]
    assert not problems
    playbook_anchors = cl.anchors(open(PLAYBOOKS_DOC, encoding="utf-8").read())
    for name in PLAYBOOKS:
        assert playbook_anchor(name) in playbook_anchors, f"docs/playbooks.md has no section `{name}.yml`"


def test_readme_is_a_front_door():
    text = readme()
    assert len(text.splitlines()) < 200
    assert "make lab" in text and "make test" in text and "make docs" in text
