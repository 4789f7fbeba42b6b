# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for ``nv-fabricmanager --version``: the NVSwitch fabric manager's version.

The fabric manager prints ``Fabric Manager version is : 550.54.15`` (older releases ``Fabric Manager version is :
470.57.02`` too; some packagings add a build line). It starts only when its version equals the loaded driver's,
so the version is a fact the checks compare with ``nvidia-smi``'s ``driver_version``. The parser never raises.
Standard library only.

Public: ``parse_fabricmanager_version(text)`` -> ``{"version": "550.54.15" or None, "errors": [], "unreadable":
[...]}``: ``version`` is None when no version line is there (an empty output, an error, junk), with a note in
``unreadable`` saying what came instead.
"""

import re

try:
    from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import clean_text, new_result
except ImportError:  # loaded by path next to _parse_util.py (bin/gpucluster-health)
    from _parse_util import clean_text, new_result  # type: ignore  # pylint: disable=import-error

__all__ = ["parse_fabricmanager_version"]

# "Fabric Manager version is : 550.54.15"; the version is the driver's form: 3 numbers (535.183.01), or 2.
_VERSION_RE = re.compile(r"fabric\s*manager\s+version\s+is\s*:?\s*(\d+\.\d+(?:\.\d+)?)\b", re.IGNORECASE)


def parse_fabricmanager_version(text):
    """``{"version", "errors", "unreadable"}`` from ``nv-fabricmanager --version`` output (text or bytes)."""
    result = new_result(version=None)
    lines = clean_text(text).splitlines()
    for line in lines:
        match = _VERSION_RE.search(line)
        if match:
            result["version"] = match.group(1)
            return result
    first = next((line.strip() for line in lines if line.strip()), "")
    result["unreadable"].append("no 'Fabric Manager version is : X.Y.Z' line (first line: %r)" % first[:120]
                                if first else "the output is empty")
    return result
