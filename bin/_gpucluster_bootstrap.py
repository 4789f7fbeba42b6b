# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the collection's plugins importable as ansible_collections.gpucluster.ops.plugins, without Ansible.

The programs in bin/ (and the benchmarks in bench/) import this module first, after putting bin/ on sys.path:

    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import _gpucluster_bootstrap

The directory above bin/ is the collection root: a checkout, or the directory that the health_check and
dcgm_exporter roles install a program into (bin/ and plugins/module_utils/ beside each other, as in the collection,
with this file in bin/). Names already imported (a process that has the collection on its path) are left alone.
Standard library only: it runs on the nodes under python3 -I -S.
"""

import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PACKAGES = (
    ("ansible_collections", None),
    ("ansible_collections.gpucluster", None),
    ("ansible_collections.gpucluster.ops", ROOT),
    ("ansible_collections.gpucluster.ops.plugins", os.path.join(ROOT, "plugins")),
    ("ansible_collections.gpucluster.ops.plugins.module_utils", os.path.join(ROOT, "plugins", "module_utils")),
)


def bootstrap():
    """Register the packages above the collection's modules (once; done at import)."""
    for name, path in PACKAGES:
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path] if path else []
            sys.modules[name] = module


bootstrap()
