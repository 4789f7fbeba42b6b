# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test suites' shared AnsiballZ cache (tests/support/callback_plugins/gpucluster_ansiballz_cache.py)."""

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGINS = os.path.join(ROOT, "tests", "support", "callback_plugins")
SPEC = importlib.util.spec_from_file_location("gpucluster_ansiballz_cache",
                                              os.path.join(PLUGINS, "gpucluster_ansiballz_cache.py"))
cache = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cache)


def _tree(root, source):
    path = root / "plugins" / "module_utils" / "_x.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return str(root)


def test_the_key_follows_every_plugin_source_and_the_path(tmp_path):
    one = _tree(tmp_path / "a", "X = 1\n")
    same = cache.cache_key(one)
    assert cache.cache_key(one) == same
    assert cache.cache_key(_tree(tmp_path / "a", "X = 2\n")) != same      # a changed module_utils file
    assert cache.cache_key(_tree(tmp_path / "b", "X = 1\n")) != same      # another checkout of the same sources
    (tmp_path / "a" / "plugins" / "notes.txt").write_text("not Python\n")
    assert cache.cache_key(one) == cache.cache_key(one)


def test_the_link_is_made_once_and_never_over_something_else(tmp_path):
    local = tmp_path / "ansible-local-1"
    local.mkdir()
    shared = cache.link_shared_cache(str(local), str(tmp_path / "shared"), "k1")
    assert shared == str(tmp_path / "shared" / "k1") and os.path.islink(local / "ansiballz_cache")
    assert cache.link_shared_cache(str(local), str(tmp_path / "shared"), "k1") == shared
    # a run whose cache directory exists already (or points elsewhere) keeps it
    assert cache.link_shared_cache(str(local), str(tmp_path / "shared"), "k2") is None
    (tmp_path / "file").write_text("")
    other = tmp_path / "ansible-local-2"
    other.mkdir()
    assert cache.link_shared_cache(str(other), str(tmp_path / "file"), "k1") is None
    assert not os.path.lexists(other / "ansiballz_cache")


def test_a_second_run_uses_the_module_the_first_built(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.stat: {path: /}\n      register: seen\n"
                        "    - ansible.builtin.assert: {that: [seen.stat.isdir]}\n")
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=PLUGINS, ANSIBLE_CALLBACKS_ENABLED="gpucluster_ansiballz_cache",
               GPUCLUSTER_ANSIBALLZ_CACHE=str(tmp_path / "shared"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    built = [p for p in (tmp_path / "shared").glob("*/ansible.modules.stat-*") if not p.name.endswith((".lock", "-part"))]
    assert len(built) == 1, list((tmp_path / "shared").rglob("*"))
    stamp = built[0].stat().st_mtime_ns
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert built[0].stat().st_mtime_ns == stamp          # read, not built again
    assert "ok=2" in second.stdout, second.stdout
    # each run's own temporary directory is gone, the shared cache stays
    assert not list((tmp_path / "local").glob("ansible-local-*")) and built[0].exists()
