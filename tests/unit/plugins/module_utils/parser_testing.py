# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the parser tests: the shared real captures for ``realdata`` tests (read in place, never copied into
the repository) and damaged copies of fixtures for the property tests."""

import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
REAL = os.environ.get("GPUCLUSTER_REAL_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures", "real"))
PEER = os.path.join(os.path.dirname(os.path.abspath(REAL)), "peer-azurehpc")

requires_real = pytest.mark.skipif(not os.path.isdir(REAL), reason="real captures not found at %s" % REAL)

_SECTION_RE = re.compile(r"^#{20,}\n# (?P<title>[^\n]*)\n(?P<commands>(?:# \$ [^\n]*\n)*)#{20,}\n", re.MULTILINE)


def real_files(subdir, pattern=None):
    """Sorted paths of the files in ``REAL/subdir`` (names matching ``pattern`` when given); [] without the folder."""
    folder = os.path.join(REAL, subdir)
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    return [os.path.join(folder, n) for n in names if pattern is None or re.search(pattern, n)]


def peer_files(pattern):
    """Sorted paths of the peer-azurehpc captures whose names match ``pattern``."""
    if not os.path.isdir(PEER):
        return []
    return [os.path.join(PEER, n) for n in sorted(os.listdir(PEER)) if re.search(pattern, n)]


def read(path):
    """File text, undecodable bytes replaced."""
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def capture_sections(text):
    """``[(command, body)]`` of a multi-command capture file (``#####`` banner, ``# title``, ``# $ command``)."""
    matches = list(_SECTION_RE.finditer(text))
    sections = []
    for number, match in enumerate(matches):
        end = matches[number + 1].start() if number + 1 < len(matches) else len(text)
        command = match.group("commands").strip()[len("# $ "):].strip()
        sections.append((command, text[match.end():end]))
    return sections


def ids(paths):
    """Test ids: the file names."""
    return [os.path.basename(p) for p in paths]


def damaged(data, cut, flips):
    """``data`` (bytes) cut to the fraction ``cut`` of its length, then with ``(where, byte)`` flips applied."""
    data = bytearray(data[:int(len(data) * cut)])
    for where, byte in flips:
        if data:
            data[min(int(where * len(data)), len(data) - 1)] = byte
    return bytes(data)
