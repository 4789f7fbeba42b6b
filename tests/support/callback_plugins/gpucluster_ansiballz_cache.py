# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests only: one AnsiballZ module cache for every ansible-playbook run of a test suite, instead of one per run.

Ansible builds each module's payload (its module_utils found by parsing their sources, zipped) once per run, in
the run's own temporary directory (DEFAULT_LOCAL_TMP/ansiballz_cache), and removes it at the end: every one of the
suite's hundreds of runs builds every module it uses again. This callback, loaded before the first task, links that
directory to a shared one, so that a module is built once for all the runs of a suite. Ansible itself writes and
reads it (atomic renames, an flock per module), so concurrent runs share it as the workers of one run do.

The shared directory is keyed by everything that goes into a payload: the versions of Python, ansible-core and the
ansible package (the modules of the other collections), this collection's path (the payload names its source files)
and the content of every Python file under its plugins/. A changed module or module_utils file gets a new
directory; the old ones stay until .cache is cleaned. The payloads are Ansible's own, byte for byte but for the zip's
timestamps, so a run behaves as without it. Where the directory cannot be made, the run goes on with its own cache.

Enabled by the test configurations (.config/molecule/config.yml, the Makefile's unit and integration targets):
ANSIBLE_CALLBACK_PLUGINS=tests/support/callback_plugins, ANSIBLE_CALLBACKS_ENABLED=gpucluster_ansiballz_cache;
GPUCLUSTER_ANSIBALLZ_CACHE names the parent directory (default: .cache/ansiballz in the checkout). No role or
playbook of the collection needs it, and the lab and the benches run without it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpucluster_ansiballz_cache
type: aggregate
short_description: Share Ansible's AnsiballZ module cache between the runs of a test suite (tests only)
description: Links the run's AnsiballZ cache directory to one shared directory keyed by the module sources.
requirements: [enabled by ANSIBLE_CALLBACKS_ENABLED or callbacks_enabled]
"""

import hashlib
import os
import sys

from ansible import constants as C
from ansible import release
from ansible.plugins.callback import CallbackBase

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _ansible_package_version():
    try:
        from importlib import metadata  # pylint: disable=import-outside-toplevel
        return metadata.version("ansible")
    except Exception:  # pylint: disable=broad-except
        return "none"


def cache_key(root=ROOT):
    """The shared directory's name: a digest of what goes into a module's payload."""
    digest = hashlib.sha256()
    for part in (sys.version, release.__version__, _ansible_package_version(), root):
        digest.update(part.encode("utf-8") + b"\0")
    plugins = os.path.join(root, "plugins")
    for top, dirs, files in os.walk(plugins):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(top, name)
                digest.update(os.path.relpath(path, plugins).encode("utf-8") + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()[:24]


def link_shared_cache(local_tmp, parent, key):
    """Make local_tmp/ansiballz_cache a link to parent/key; return the link's target, or None where it could not."""
    link = os.path.join(local_tmp, "ansiballz_cache")
    shared = os.path.join(parent, key)
    try:
        os.makedirs(shared, exist_ok=True)
        if os.path.lexists(link):
            return shared if os.path.realpath(link) == os.path.realpath(shared) else None
        os.symlink(shared, link)
    except OSError:
        return None
    return shared


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpucluster_ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        parent = os.environ.get("GPUCLUSTER_ANSIBALLZ_CACHE") or os.path.join(ROOT, ".cache", "ansiballz")
        self.shared = link_shared_cache(C.DEFAULT_LOCAL_TMP, parent, cache_key())
