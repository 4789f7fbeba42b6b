"""House rules that hold for every role: argument specs match defaults, templates carry the managed header."""

import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if not d.startswith("."))


def _load(path):
    with open(path) as f:
        return yaml.safe_load(f) or {}


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_keys_equal_defaults(role):
    spec = _load(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"))["argument_specs"]
    defaults_file = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    defaults = _load(defaults_file) if os.path.exists(defaults_file) else {}
    options = {}
    for entry in spec.values():
        options.update(entry.get("options") or {})
    # A variable the spec gives no default may be unset by default (gpucluster_kubeconfig: the client's own default;
    # health_sweep_from_dir: no bundle to replay): it has no default to declare, or declares an empty one.
    optional = {k for k, v in options.items()
                if not v.get("required") and ("default" in v or k in defaults)}
    assert set(defaults) == optional, "role %s: in defaults only %s; in argument_specs only %s" % (
        role, sorted(set(defaults) - optional), sorted(optional - set(defaults)))
    for key in optional:
        if "default" in options[key]:
            assert options[key]["default"] == defaults[key], "role %s: %s default differs" % (role, key)


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_name(role):
    defaults_file = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    if not os.path.exists(defaults_file):
        pytest.skip("no defaults")
    # A role of several operations (operations) prefixes each operation's variables with the operation's name: the
    # name of one of its entry points, or of the family of entry points it starts (rolling_upgrade of
    # rolling_upgrade_batch).
    entries = _load(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"))["argument_specs"]
    prefixes = {role.lstrip("_") + "_"} | {e + "_" for e in entries if e != "main"} | {
        e.rsplit("_", 1)[0] + "_" for e in entries if "_" in e}
    # Collection-wide variables carry the collection's prefix instead; only roles/_common declares them.
    bad = [k for k in _load(defaults_file) if not any(k.lstrip("_").startswith(p) for p in prefixes)
           and not (role == "_common" and k.startswith("gpucluster_"))]
    assert not bad, "role %s: variables without one of the prefixes %s: %s" % (role, sorted(prefixes), bad)


def _templates():
    for dirpath, _dirs, files in os.walk(ROOT):
        if "/." in dirpath.replace(ROOT, "") or "/tests/output" in dirpath:
            continue
        for name in files:
            if name.endswith(".j2") and "/roles/" in dirpath + "/":
                yield os.path.relpath(os.path.join(dirpath, name), ROOT)


@pytest.mark.parametrize("template", sorted(_templates()))
def test_templates_start_with_managed_header(template):
    with open(os.path.join(ROOT, template)) as f:
        first = f.readline()
        if first.startswith("#!"):  # scripts keep their interpreter line first
            first = f.readline()
    assert re.match(r"^\{\{ ansible_managed \| (ansible\.builtin\.)?comment", first), template
