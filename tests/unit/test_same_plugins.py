# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The path the tests take is the path users get (issue 43): ansible.cfg, molecule's configuration and the test
runner enable the same callback plugins, and no test configuration adds a plugin directory of its own."""

from __future__ import annotations

import configparser
import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _callbacks(value):
    return sorted(v.strip() for v in (value or "").split(",") if v.strip())


def _cfg(name):
    parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    parser.read(os.path.join(ROOT, name))
    return parser


def test_ansible_cfg_enables_the_collections_callbacks():
    assert _callbacks(_cfg("ansible.cfg").get("defaults", "callbacks_enabled")) == ["gpucluster.ops.preload"]


def test_molecule_enables_what_ansible_cfg_enables():
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    provisioner = config["provisioner"]
    env = provisioner.get("env") or {}
    defaults = (provisioner.get("config_options") or {}).get("defaults") or {}
    shipped = _callbacks(_cfg("ansible.cfg").get("defaults", "callbacks_enabled"))
    assert _callbacks(env.get("ANSIBLE_CALLBACKS_ENABLED") or defaults.get("callbacks_enabled")) == shipped
    plugin_dirs = [k for k in env if re.match(r"ANSIBLE_\w+_PLUGINS$", k)]
    plugin_dirs += [k for k in defaults if k.endswith("_plugins")]
    assert plugin_dirs == [], "molecule adds plugin directories users do not have: %s" % plugin_dirs


def test_no_scenario_overrides_the_plugins():
    found = []
    for top, _dirs, files in os.walk(os.path.join(ROOT, "molecule")):
        for name in files:
            if name == "molecule.yml":
                with open(os.path.join(top, name), encoding="utf-8") as handle:
                    text = handle.read()
                if re.search(r"ANSIBLE_CALLBACK|callbacks_enabled|_plugins:", text):
                    found.append(os.path.relpath(os.path.join(top, name), ROOT))
    assert found == []


def test_the_test_runner_reads_ansible_cfg():
    with open(os.path.join(ROOT, "scripts", "pytest.sh"), encoding="utf-8") as handle:
        text = handle.read()
    assert "ANSIBLE_CALLBACKS_ENABLED" not in text and "ANSIBLE_CALLBACK_PLUGINS" not in text
    assert re.search(r"^export ANSIBLE_CONFIG=\$\{ANSIBLE_CONFIG:-\$PWD/ansible.cfg\}$", text, re.M)
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        assert re.search(r"^export ANSIBLE_CONFIG := \$\(CURDIR\)/ansible.cfg$", handle.read(), re.M)


def test_the_fleet_profile_enables_the_same_callbacks():
    assert _callbacks(_cfg("ansible-fleet.cfg").get("defaults", "callbacks_enabled")) == \
        _callbacks(_cfg("ansible.cfg").get("defaults", "callbacks_enabled"))
