"""plugin_utils/_role_state: what a role's task results make of a record (observations, facts given back, and the
problems that keep a run from being recorded), the digests of the wanted state, and the collection-wide conditions a
record relies on: every fact the collection reads is hashed, and no registered result crosses a role (a converged
role registers nothing)."""

import glob
import os
import re

import pytest
import yaml

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _role_state as rs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def window(*results):
    w = rs.Window("nccl", {"host": "x"})
    for status, action, result in results:
        w.add(status, action, "a task", result)
    return w


def test_file_package_unit_and_probe_results_become_observations():
    w = window(
        ("ok", "ansible.builtin.template", {"changed": False, "dest": "/etc/nccl.conf", "checksum": "c"}),
        ("ok", "ansible.builtin.file", {"changed": False, "path": "/etc/gpucluster", "state": "directory"}),
        ("ok", "ansible.builtin.stat", {"changed": False, "stat": {"exists": False},
                                        "invocation": {"module_args": {"path": "/etc/x"}}}),
        ("ok", "ansible.builtin.slurp", {"changed": False, "content": "",
                                         "invocation": {"module_args": {"src": "/etc/munge/munge.key"}}}),
        ("ok", "ansible.builtin.apt", {"changed": False, "invocation": {"module_args": {
            "name": ["libnccl2=2.22.3-1", "libnccl-dev=2.22.3-1"], "update_cache": True, "cache_valid_time": 3600}}}),
        ("ok", "ansible.builtin.dpkg_selections", {"changed": False, "results": [
            {"changed": False, "invocation": {"module_args": {"name": "libnccl2", "selection": "hold"}}}]}),
        ("ok", "ansible.builtin.systemd_service", {"changed": False, "name": "munge",
                                                   "invocation": {"module_args": {"name": "munge"}}}),
        ("ok", "ansible.builtin.command", {"changed": False, "cmd": ["apt-cache", "madison", "libnccl2"], "rc": 0}),
        ("ok", "ansible.builtin.find", {"changed": False, "invocation": {"module_args": {"paths": ["/etc/slurm"]}}}),
        ("skipped", "ansible.builtin.command", {"skipped": True}),
    )
    assert w.problems == []
    assert w.items == [
        {"kind": "file", "path": "/etc/nccl.conf"},
        {"kind": "file", "path": "/etc/gpucluster"},
        {"kind": "file", "path": "/etc/x"},
        {"kind": "file", "path": "/etc/munge/munge.key"},
        {"kind": "age", "path": rs.APT_STAMP, "fallback": rs.APT_LISTS, "seconds": 3600},
        {"kind": "package", "name": "libnccl2"},
        {"kind": "package", "name": "libnccl-dev"},
        {"kind": "unit", "name": "munge.service"},
        {"kind": "command", "argv": ["apt-cache", "madison", "libnccl2"]},
        {"kind": "tree", "path": "/etc/slurm"},
    ]
    assert w.results == 10


def test_set_fact_and_include_vars_are_given_back_other_pure_results_say_nothing():
    w = window(
        ("ok", "ansible.builtin.set_fact", {"ansible_facts": {"__nccl_target": "2.22.3-1"}}),
        ("ok", "ansible.builtin.set_fact", {"results": [{"ansible_facts": {"a": 1}}, {"ansible_facts": {"b": 2}}]}),
        ("ok", "ansible.builtin.include_vars", {"ansible_facts": {"__nccl_packages": ["libnccl2"]}}),
        ("ok", "ansible.builtin.assert", {"msg": "All assertions passed"}),
        ("ok", "ansible.builtin.debug", {"ansible_facts": {"not": "given back"}}),
    )
    assert w.problems == [] and w.items == []
    assert w.facts == {"__nccl_target": "2.22.3-1", "a": 1, "b": 2, "__nccl_packages": ["libnccl2"]}


@pytest.mark.parametrize("status, action, result, problem", [
    ("ok", "ansible.builtin.template", {"changed": True, "dest": "/etc/nccl.conf"}, "changed"),
    ("failed", "ansible.builtin.command", {"rc": 1}, "failed"),
    ("unreachable", "ansible.builtin.command", {}, "unreachable"),
    ("ok", "ansible.builtin.command", {"changed": False, "cmd": ["sysctl", "-p", "/etc/sysctl.d/x.conf"]},
     "not one of the read-only probes"),
    ("ok", "ansible.builtin.shell", {"changed": False, "cmd": "cat /proc/1/status"}, "not one of the read-only"),
    ("ok", "ansible.builtin.uri", {"changed": False, "status": 200}, "cannot be observed again"),
    ("ok", "gpucluster.ops.slurm_account", {"changed": False}, "cannot be observed again"),
    ("ok", "ansible.builtin.apt", {"changed": False, "invocation": {"module_args": {"update_cache": True}}},
     "refreshes the package lists every run"),
    ("ok", "ansible.builtin.apt", {"changed": False, "invocation": {"module_args": {"name": "nvidia-*"}}},
     "cannot be observed again"),
    ("ok", "ansible.builtin.template", {"changed": False}, "no absolute path"),
    ("ok", "ansible.builtin.set_fact", {"results": [{"changed": True}]}, "changed"),
    ("ok", "ansible.builtin.set_fact", {"censored": "the output has been hidden"}, "no_log"),
    ("ok", "ansible.builtin.copy", {"censored": "the output has been hidden"}, "no path to template"),
])
def test_what_keeps_a_run_from_being_recorded(status, action, result, problem):
    w = window((status, action, result))
    assert len(w.problems) == 1 and problem in w.problems[0], w.problems


def test_a_no_log_file_task_is_observed_by_its_path_templated_later():
    w = rs.Window("slurm")
    w.add("ok", "ansible.builtin.copy", "key", {"censored": "hidden", "changed": False},
          task_args={"dest": "{{ __slurm_munge_key_file }}", "content": "{{ secret }}"})
    assert w.problems == [] and w.items == [{"kind": "file", "path": "{{ __slurm_munge_key_file }}", "template": True}]


def test_a_task_on_another_host_or_from_outside_the_collection():
    w = rs.Window("slurm")
    w.add("ok", "ansible.builtin.copy", "copy", {"changed": False, "dest": "/etc/munge/munge.key", "checksum": "c"},
          delegated=True)
    w.add("ok", "ansible.builtin.assert", "assert", {}, delegated=True)     # a condition checked anywhere is fine
    w.add("ok", "ansible.builtin.set_fact", "set", {"ansible_facts": {"a": 1}}, origin_ok=False)
    assert len(w.problems) == 2
    assert "another host" in w.problems[0] and "outside the collection" in w.problems[1]


def test_host_vars_digest_leaves_out_what_changes_between_runs_and_templates_lookups():
    base = {"nccl_version": "2.22.3", "inventory_hostname": "gpu01", "omit": "__omit_place_holder__1",
            "ansible_check_mode": False, "__nccl_madison": {"start": "2026-12-05 09:00"}, "playbook_dir": "/a",
            "ansible_facts": {"os_family": "Debian", "date_time": {"epoch": "1"}, "memfree_mb": 100}}
    registered = frozenset(["__nccl_madison"])
    first, why = rs.host_vars_digest(base, registered, None)
    assert why is None
    later = dict(base, omit="__omit_place_holder__2", ansible_check_mode=True, playbook_dir="/b",
                 __nccl_madison={"start": "2026-12-05 10:00"},
                 ansible_facts={"os_family": "Debian", "date_time": {"epoch": "2"}, "memfree_mb": 90})
    assert rs.host_vars_digest(later, registered, None)[0] == first
    for changed in (dict(base, nccl_version="2.22.4"),
                    dict(base, ansible_facts={"os_family": "RedHat"}),
                    dict(base, gpucluster_notes=["a note"])):
        assert rs.host_vars_digest(changed, registered, None)[0] != first
    looked_up = dict(base, proxy="{{ lookup('ansible.builtin.env', 'PROXY') }}")
    one = rs.host_vars_digest(looked_up, registered, lambda value: "http://proxy:3128")[0]
    two = rs.host_vars_digest(looked_up, registered, lambda value: "http://other:3128")[0]
    assert one != two

    def broken(value):
        raise ValueError("no such file")
    digest, why = rs.host_vars_digest(looked_up, registered, broken)
    assert digest is None and "proxy" in why and "no such file" in why


def test_canonical_sorts_keys_and_sets_and_is_stable():
    assert rs.digest_of({"b": 1, "a": {2, 1}}) == rs.digest_of({"a": {1, 2}, "b": 1})
    assert rs.digest_of({"a": [1, 2]}) != rs.digest_of({"a": [2, 1]})


def test_content_digest_changes_with_any_file_and_lists_registered_names(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    tasks = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    tasks.write_text("- name: x\n  ansible.builtin.command: [true]\n  register: __r_probe\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "__pycache__").mkdir()
    digest, registered = rs.content_digest(str(tmp_path))
    assert registered == frozenset(["__r_probe"])
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert rs.content_digest(str(tmp_path))[0] == digest
    tasks.write_text(tasks.read_text() + "\n")
    assert rs.content_digest(str(tmp_path))[0] != digest


def _collection_files(*patterns):
    for pattern in patterns:
        yield from glob.glob(os.path.join(ROOT, pattern), recursive=True)


def test_every_fact_the_collection_reads_is_in_the_wanted_state():
    read = set()
    for path in _collection_files("roles/**/*.yml", "roles/**/*.j2", "playbooks/**/*.yml", "playbooks/**/*.j2",
                                  "plugins/filter/*.py", "plugins/action/*.py", "plugins/plugin_utils/*.py"):
        with open(path) as handle:
            text = handle.read()
        read.update(re.findall(r"ansible_facts(?:\[\s*['\"]|\.|\.get\(\s*['\"])([a-z_0-9]+)", text))
    read.discard("ansible_local")     # hashed whole, as "local"
    assert read and read <= set(rs.FACTS), sorted(read - set(rs.FACTS))


def test_no_registered_result_is_read_outside_its_role():
    registered = {}
    for path in _collection_files("roles/**/*.yml"):
        role = os.path.relpath(path, ROOT).split(os.sep)[1]
        with open(path) as handle:
            for name in re.findall(r"^\s*register:\s*(\w+)\s*$", handle.read(), re.M):
                registered.setdefault(name, set()).add(role)
    registered.pop("__common_role_state")     # read by each role right after its import of the check
    crossing = []
    for path in _collection_files("roles/**/*.yml", "roles/**/*.j2", "playbooks/**/*.yml", "playbooks/**/*.j2"):
        parts = os.path.relpath(path, ROOT).split(os.sep)
        with open(path) as handle:
            text = handle.read()
        for name, roles in registered.items():
            if (parts[0] != "roles" or parts[1] not in roles) and re.search(r"\b%s\b" % name, text):
                crossing.append("%s (registered by %s) in %s" % (name, ", ".join(sorted(roles)), "/".join(parts)))
    assert crossing == []


def _imports_a_role(task):
    """Whether a task (or a block, at any depth) imports a role other than through role_state_check/record."""
    if not isinstance(task, dict):
        return False
    if any(isinstance(task.get(key), list) and any(_imports_a_role(t) for t in task[key])
           for key in ("block", "rescue", "always")):
        return True
    imported = task.get("ansible.builtin.import_role")
    return isinstance(imported, dict) and imported.get("tasks_from") not in ("role_state_check", "role_state_record")


def test_a_recorded_role_ends_itself_again_after_each_role_it_imports():
    """meta: end_role skips a converged node's tasks up to the first end of a role, and an imported role's tasks end
    with their own: the role must end itself again right after every such import, or a converged node would run the
    rest of the role (and its record task, which would then drop the record)."""
    checked = 0
    for main in _collection_files("roles/*/tasks/main.yml", "roles/monitoring/tasks/node_exporter.yml"):
        with open(main) as handle:
            text = handle.read()
        if "role_state_check" not in text:
            continue
        name = re.search(r"_common_role_state_name: (\S+)", text).group(1)
        files = [main] if main.endswith("node_exporter.yml") else \
            [f for f in glob.glob(os.path.join(os.path.dirname(main), "*.yml")) if not f.endswith("node_exporter.yml")]
        for path in files:
            with open(path) as handle:
                tasks = yaml.safe_load(handle) or []
            for index, task in enumerate(tasks):
                if not _imports_a_role(task):
                    continue
                checked += 1
                after = tasks[index + 1] if index + 1 < len(tasks) else {}
                when = str(after.get("when", ""))
                assert after.get("ansible.builtin.meta") == "end_role" and "__common_role_state.converged" in when \
                    and "== '%s'" % name in when, "%s: task %r is not followed by the end_role of a converged node" % (
                        os.path.relpath(path, ROOT), task.get("name"))
    assert checked >= 3
