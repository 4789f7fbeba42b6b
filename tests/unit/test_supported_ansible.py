# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ansible-core range meta/runtime.yml declares is the range the tests run (issue 43): the host's .venv
(requirements.txt) at its low end, the controller of scripts/controller.sh (controllers/ansible-*.txt) at its high
end, and the Makefile runs a scenario, sanity and the plugin tests on that controller."""

from __future__ import annotations

import glob
import os
import re

import yaml
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pinned_core(path):
    with open(path, encoding="utf-8") as handle:
        found = re.findall(r"^ansible-core==([0-9.]+)$", handle.read(), re.M)
    assert len(found) == 1, path
    return found[0]


def _requires():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["requires_ansible"]


def test_requires_ansible_is_the_tested_range():
    assert _requires() == ">=2.19.0,<2.22.0"


def test_every_tested_core_is_in_the_declared_range():
    spec = SpecifierSet(_requires())
    host = _pinned_core(os.path.join(ROOT, "requirements.txt"))
    controllers = {os.path.basename(p)[len("ansible-"):-len(".txt")]: _pinned_core(p)
                   for p in glob.glob(os.path.join(ROOT, "controllers", "ansible-*.txt"))}
    assert host.startswith("2.19.") and host in spec
    assert controllers and all(v.startswith(k + ".") and v in spec for k, v in controllers.items()), controllers
    assert "2.21" in controllers


def test_the_makefile_runs_the_controller():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        make = handle.read()
    controller = re.search(r"^CONTROLLER \?= (\S+)$", make, re.M).group(1)
    assert os.path.exists(os.path.join(ROOT, "controllers", "ansible-%s.txt" % controller))
    for target, command in (("platform", "scripts/controller.sh build $(CONTROLLER)"),
                            ("sanity", "scripts/controller.sh run $(CONTROLLER) scripts/sanity.sh"),
                            ("unit", "scripts/controller.sh run $(CONTROLLER) scripts/pytest.sh")):
        body = re.search(r"^%s:.*\n((?:\t.*\n)+)" % target, make, re.M).group(1)
        assert command in body, (target, body)
    assert re.search(r"^MOLECULE_CONTROLLERS \?= cluster-deb1[23]=\$\(CONTROLLER\)$", make, re.M)
