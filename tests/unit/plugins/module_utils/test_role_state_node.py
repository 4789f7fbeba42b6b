"""_role_state on this machine's own files and programs: which commands count as read-only probes, each kind of
observation made and compared again after the thing changed, an observation that cannot be made (an error, never a
value), and the record written atomically and refused when it is not one."""

import json
import os
import sys
import time

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _role_state as rs


@pytest.mark.parametrize("argv", [
    ["dpkg-query", "-W", "-f", "${Version}", "libnccl2"],
    ["/usr/bin/apt-cache", "madison", "libnccl2"],
    ["systemctl", "show", "--property=ActiveState", "--value", "munge.service"],
    ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
    ["sysctl", "-n", "vm.swappiness"],
    ["sysctl", "net.core.rmem_max", "vm.swappiness"],
    ["ip", "-j", "addr", "show", "dev", "ib0"],
    ["sh", "-c", 'command -v "$1"', "sh", "podman"],
])
def test_read_only_probes_are_accepted(argv):
    assert rs.read_only_command(argv)


@pytest.mark.parametrize("argv", [
    ["sysctl", "-p", "/etc/sysctl.d/90-gpu.conf"],
    ["sysctl", "-w", "vm.swappiness=1"],
    ["systemctl", "restart", "slurmd"],
    ["apt-cache", "gencaches"],
    ["nvidia-smi", "-pm", "1"],
    ["sacctmgr", "--immediate", "add", "cluster", "lab"],
    ["runuser", "-u", "slurm", "--", "sh", "-c", "cat -- \"$1\" && rm -f -- \"$1\"", "sh", "/x"],
    ["sh", "-c", 'command -v "$1"; rm -rf /', "sh", "podman"],
    "dpkg-query -W",
    [],
    None,
])
def test_anything_else_is_not(argv):
    assert not rs.read_only_command(argv)
    if isinstance(argv, list) and argv:
        assert "read-only" in rs.check_item({"kind": "command", "argv": argv})


def observe_one(item):
    values, errors = rs.observe_all([item])
    assert not errors, errors
    return values[rs.item_key(item)]


def test_a_file_edited_chmodded_or_replaced_by_a_link_differs(tmp_path):
    path = tmp_path / "nccl.conf"
    path.write_text("NCCL_DEBUG=WARN\n")
    item = {"kind": "file", "path": str(path)}
    first = observe_one(item)
    assert first["state"] == "file" and len(first["sha256"]) == 64
    assert rs.compare({rs.item_key(item): first}, {rs.item_key(item): observe_one(item)}) is None
    path.write_text("NCCL_DEBUG=INFO\n")
    assert "sha256" in rs.compare({rs.item_key(item): first}, {rs.item_key(item): observe_one(item)})
    path.write_text("NCCL_DEBUG=WARN\n")
    os.chmod(path, 0o600)
    assert "mode 0644 -> 0600" in rs.compare({rs.item_key(item): dict(first, mode="0644")},
                                             {rs.item_key(item): observe_one(item)})
    os.unlink(path)
    assert observe_one(item) == {"state": "absent"}
    os.symlink("/etc/hostname", path)
    assert observe_one(item)["target"] == "/etc/hostname"


def test_a_tree_differs_when_an_entry_is_added_or_touched(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("a")
    item = {"kind": "tree", "path": str(tmp_path / "d")}
    first = observe_one(item)
    assert first["entries"] == 1
    (tmp_path / "d" / "b").write_text("b")
    assert observe_one(item) != first
    os.unlink(tmp_path / "d" / "b")
    assert observe_one(item) == first
    os.utime(tmp_path / "d" / "a", (1, 1))
    assert observe_one(item) != first


def test_age_is_fresh_then_stale_and_reads_the_fallback(tmp_path):
    stamp = tmp_path / "stamp"
    lists = tmp_path / "lists"
    lists.mkdir()
    item = {"kind": "age", "path": str(stamp), "fallback": str(lists), "seconds": 3600}
    assert observe_one(item) == "fresh"             # the stamp is not there: the lists directory's age
    stamp.write_text("")
    old = time.time() - 7200
    os.utime(stamp, (old, old))
    assert observe_one(item) == "stale"
    assert "seconds" in rs.check_item(dict(item, seconds=0))


def test_a_command_is_observed_by_exit_status_and_output(tmp_path):
    path = tmp_path / "f"
    path.write_text("one\n")
    item = {"kind": "command", "argv": ["cat", str(path)]}
    first = observe_one(item)
    assert first["rc"] == 0
    path.write_text("two\n")
    assert observe_one(item)["stdout"] != first["stdout"]
    os.unlink(path)
    assert observe_one(item)["rc"] != 0


def test_an_observation_that_cannot_be_made_is_an_error_not_a_value(tmp_path):
    values, errors = rs.observe_all([
        {"kind": "command", "argv": ["systemctl", "restart", "x"]},
        {"kind": "file", "path": "relative/path"},
        {"kind": "unit", "name": "bad name;"},
        {"kind": "nonsense"},
    ])
    assert values == {} and len(errors) == 4
    unreadable = tmp_path / "locked"
    unreadable.mkdir()
    (unreadable / "f").write_text("x")
    if os.geteuid() != 0:
        os.chmod(unreadable, 0)
        _values, errors = rs.observe_all([{"kind": "tree", "path": str(unreadable)}])
        os.chmod(unreadable, 0o700)
        assert errors


@pytest.mark.skipif(not os.path.exists("/usr/bin/dpkg-query"), reason="not a Debian machine")
def test_packages_in_one_dpkg_query_installed_or_absent():
    values, errors = rs.observe_all([{"kind": "package", "name": "dpkg"},
                                     {"kind": "package", "name": "no-such-package-gpucluster"}])
    assert not errors
    assert values["package dpkg"].startswith("install installed ")   # want, status, version
    assert values["package no-such-package-gpucluster"] == "absent"


def test_compare_names_the_first_difference_and_what_is_not_observed_now():
    assert rs.compare({"file /a": {"mode": "0644"}}, {}) == "file /a: not observed now"
    assert rs.compare({"package x": "install ok installed 1"}, {"package x": "install ok installed 2"}) == \
        "package x: install ok installed 1 -> install ok installed 2"


def test_a_units_changed_properties_are_named_on_one_line():
    was = "ActiveState=active\nLoadState=loaded\nUnitFileState=enabled"
    now = "ActiveState=inactive\nLoadState=loaded\nUnitFileState=disabled"
    assert rs.compare({"unit a.timer": was}, {"unit a.timer": now}) == \
        "unit a.timer: ActiveState=active, UnitFileState=enabled -> ActiveState=inactive, UnitFileState=disabled"


def test_save_then_load_and_what_load_refuses(tmp_path):
    path = str(tmp_path / "state" / "nccl.json")
    assert rs.load(path)[0] is None and "no record" in rs.load(path)[1]
    record = dict(format=rs.FORMAT, name="nccl", wanted={"host": "x"}, items=[], observed={}, facts={"a": 1})
    rs.save(path, record)
    assert rs.load(path) == (record, None)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    assert os.listdir(os.path.dirname(path)) == ["nccl.json"]   # no temporary file left
    for bad in ("not json", json.dumps(dict(record, format=0)), json.dumps(dict(record, items={})), "[]"):
        with open(path, "w") as handle:
            handle.write(bad)
        assert rs.load(path)[0] is None


def test_node_side_code_is_standard_library_only():
    allowed = set(sys.stdlib_module_names) | {"ansible_collections"}
    with open(rs.__file__) as handle:
        imports = [line.split()[1].split(".")[0] for line in handle
                   if line.startswith(("import ", "from ")) and "__future__" not in line]
    assert set(imports) <= allowed, imports
