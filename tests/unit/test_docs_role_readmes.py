"""Each role's README against its meta/argument_specs.yml: the variable tables between the role-readme markers are
what scripts/role-readme.py writes from the specs, so a variable added to one of them only fails here (make role-docs
rewrites them)."""

import importlib.util
import os
import shutil

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("role_readme", os.path.join(ROOT, "scripts", "role-readme.py"))
rr = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rr)

ROLES_DIR = os.path.join(ROOT, "roles")
ROLES = sorted(d for d in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, d)))


def spec_variables(role_dir):
    specs = yaml.safe_load(open(os.path.join(role_dir, "meta", "argument_specs.yml"), encoding="utf-8"))
    entry_points = specs["argument_specs"]
    names = []
    for entry, spec in entry_points.items():
        options = (spec or {}).get("options") or {}
        earlier = list(entry_points)[:list(entry_points).index(entry)]
        if options and any(options == (entry_points[other] or {}).get("options") for other in earlier):
            continue  # written once, as "the same variables as the entry point <other>"
        names += list(options)
    return names


def readme_text(role_dir):
    with open(os.path.join(role_dir, "README.md"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_readme_with_argument_specs(role):
    assert os.path.isfile(os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml")), role
    assert os.path.isfile(os.path.join(ROLES_DIR, role, "README.md")), f"roles/{role} has no README.md"


@pytest.mark.parametrize("role", ROLES)
def test_readme_table_is_the_one_generated_from_the_specs(role):
    role_dir = os.path.join(ROLES_DIR, role)
    text = readme_text(role_dir)
    assert rr.render(text, rr.block(rr.load_specs(role_dir))) == text, \
        f"roles/{role}/README.md: its variable table differs from meta/argument_specs.yml; run make role-docs"


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_exactly_the_specs_variables(role):
    role_dir = os.path.join(ROLES_DIR, role)
    assert rr.documented_variables(readme_text(role_dir)) == spec_variables(role_dir)


def test_the_internal_role_says_it_is_internal():
    text = readme_text(os.path.join(ROLES_DIR, "_common"))
    assert text.splitlines()[0] == "# gpucluster.ops._common (internal)"


def test_the_check_passes_on_the_checkout(capsys):
    assert rr.main(["--check"]) == 0
    assert f"{len(ROLES)} variable tables match" in capsys.readouterr().out


# ------------------------------------------------------------------------ the check fails on a copy that disagrees
@pytest.fixture
def roles_copy(tmp_path):
    dest = tmp_path / "roles"
    for role in ("node_baseline", "_common"):
        shutil.copytree(os.path.join(ROLES_DIR, role), dest / role)
    return dest


def test_a_variable_added_to_the_specs_only_fails(roles_copy, capsys):
    path = roles_copy / "node_baseline" / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(path.read_text())
    specs["argument_specs"]["main"]["options"]["node_baseline_new_thing"] = {
        "type": "str", "default": "", "description": "A variable nobody documented."}
    path.write_text(yaml.safe_dump(specs, sort_keys=False))
    assert rr.main(["--check", "--roles-dir", str(roles_copy)]) == 1
    err = capsys.readouterr().err
    assert "roles/node_baseline/README.md" in err and "in the specs only: node_baseline_new_thing" in err


def test_a_variable_added_to_the_readme_only_fails(roles_copy, capsys):
    path = roles_copy / "node_baseline" / "README.md"
    text = path.read_text()
    row = "| `node_baseline_ghost` | str | no | `\"\"` | A variable the specs do not have. |\n"
    path.write_text(text.replace(rr.END, row + rr.END))
    assert rr.main(["--check", "--roles-dir", str(roles_copy)]) == 1
    err = capsys.readouterr().err
    assert "roles/node_baseline/README.md" in err and "in the README only: node_baseline_ghost" in err


def test_a_changed_default_or_description_fails(roles_copy, capsys):
    path = roles_copy / "node_baseline" / "meta" / "argument_specs.yml"
    path.write_text(path.read_text().replace("default: 65536", "default: 4096"))
    assert rr.main(["--check", "--roles-dir", str(roles_copy)]) == 1
    assert "differs from meta/argument_specs.yml" in capsys.readouterr().err


def test_a_readme_without_markers_fails_and_is_left_alone(roles_copy, capsys):
    path = roles_copy / "_common" / "README.md"
    path.write_text("# no table\n")
    assert rr.main(["--roles-dir", str(roles_copy), "_common"]) == 1
    assert "role-readme:begin" in capsys.readouterr().err
    assert path.read_text() == "# no table\n"


def test_make_role_docs_rewrites_the_table_and_keeps_the_prose(roles_copy):
    path = roles_copy / "node_baseline" / "README.md"
    original = path.read_text()
    before, after = original.split(rr.BEGIN)[0], original.split(rr.END)[1]
    path.write_text(before + rr.BEGIN + "\nstale\n" + rr.END + after)
    assert rr.main(["--roles-dir", str(roles_copy), "node_baseline"]) == 0
    assert path.read_text() == original


# ---------------------------------------------------------------------------------------------- the cell rendering
def test_cells_escape_pipes_and_convert_ansible_markup():
    rows = rr.option_rows({"x_var": {"type": "list", "elements": "str", "default": "{{ a | default('b') }}",
                                     "choices": ["p", "q"], "no_log": True,
                                     "description": ["C(code) and I(word) and O(x_other=1)", "second | part."]}})
    assert rows[0] == rr.HEADER
    assert rows[2] == ("| `x_var` | list of str | no | `{{ a \\| default('b') }}` | `code` and *word* and "
                       "`x_other=1` second \\| part. Choices: `p`, `q`. Kept out of logs (`no_log`). |")


def test_required_and_long_defaults():
    rows = rr.option_rows({"need": {"type": "str", "required": True, "description": "d"},
                           "big": {"type": "list", "default": list(range(200)), "description": "d"}})
    assert rows[2] == "| `need` | str | yes |  | d |"
    assert "200 entries: see [meta/argument_specs.yml](meta/argument_specs.yml)" in rows[3]
