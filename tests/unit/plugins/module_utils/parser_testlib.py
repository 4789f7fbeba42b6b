# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers of the parser tests (nvidia-smi, NVLink, InfiniBand, kernel log, DCGM, NCCL).

- ``fixture(area, name)``, ``fixture_names(area)``, ``samples(area)``: our own captures under
  tests/unit/fixtures/<area>/.
- ``REAL``/``PEER`` and ``realdata``: the public captures in ../shared/fixtures (``GPUCLUSTER_REAL_FIXTURES``), read
  in place and never copied; tests marked ``realdata`` skip when the folder is absent, and fail naming it under
  CI=true (tests/support/skip_policy.py). ``real_files``,
  ``peer_files``, ``files_in`` list them, ``real_text`` reads one, ``capture_sections`` splits a multi-command capture.
- ``garbage()``, ``truncated(samples)``, ``damaged_samples(samples)``: hypothesis strategies for the "never raises"
  property (test_parsers_never_raise.py).
- ``assert_shape(result, top, item_key, item_keys)``: the contract's keys are all there, lists are lists, no
  "internal error" note (a parser that caught its own exception still has a bug).
"""

import os
import re

import pytest
from hypothesis import strategies as st
from skip_policy import needs_shared, shared_path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures")
REAL = shared_path("GPUCLUSTER_REAL_FIXTURES", "fixtures", "real")
PEER = os.path.join(os.path.dirname(os.path.abspath(REAL)), "peer-azurehpc")

_NEEDS_REAL = needs_shared(REAL, "the real captures")

_SECTION_RE = re.compile(r"^#{20,}\n# (?P<title>[^\n]*)\n(?P<commands>(?:# \$ [^\n]*\n)*)#{20,}\n", re.MULTILINE)


def read_text(path):
    """A file as text (UTF-8, bad bytes replaced), as a node would hand it to a parser."""
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def fixture(area, name):
    """One of our own captures."""
    return read_text(os.path.join(FIXTURES, area, name))


def fixture_names(area):
    """Names of our own captures of an area."""
    return sorted(os.listdir(os.path.join(FIXTURES, area)))


def realdata(test):
    """Marks a test ``realdata`` (``-m "not realdata"`` leaves it out) and ``needs_shared`` the real captures: absent,
    it skips, or fails naming them under CI=true."""
    return pytest.mark.realdata(_NEEDS_REAL(test))


def samples(area, *prefixes):
    """Texts of our own captures of an area (those whose names start with one of ``prefixes`` when given)."""
    return [fixture(area, name) for name in fixture_names(area) if not prefixes or name.startswith(prefixes)]


def files_in(folder, pattern=None):
    """Sorted paths of the plain files directly under ``folder`` (names matching ``pattern`` when given); [] when
    the folder is absent."""
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    return [os.path.join(folder, n) for n in names if pattern is None or re.search(pattern, n)]


def real_files(subdir, pattern=None):
    """Sorted paths of the real captures in ``REAL/subdir`` (names matching ``pattern`` when given)."""
    return files_in(os.path.join(REAL, subdir), pattern)


def peer_files(pattern):
    """Sorted paths of the peer-azurehpc captures whose names match ``pattern``."""
    return files_in(PEER, pattern)


def real_text(*parts):
    """Text of one real capture."""
    return read_text(os.path.join(REAL, *parts))


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


def garbage():
    """Random text and random bytes, the two ways junk reaches a parser."""
    return st.one_of(st.text(max_size=2000), st.binary(max_size=2000))


def truncated(samples):
    """A sample cut at a random point, with a random slice of its lines dropped or repeated."""
    @st.composite
    def build(draw):
        text = draw(st.sampled_from(samples))
        lines = text.split("\n")
        start = draw(st.integers(min_value=0, max_value=len(lines)))
        stop = draw(st.integers(min_value=start, max_value=len(lines)))
        mode = draw(st.sampled_from(("drop", "repeat", "keep")))
        if mode == "drop":
            lines = lines[:start] + lines[stop:]
        elif mode == "repeat":
            lines = lines[:stop] + lines[start:]
        text = "\n".join(lines)
        return text[:draw(st.integers(min_value=0, max_value=len(text)))]
    return build()


def damaged_samples(samples):
    """A sample as UTF-8 bytes, cut at a random fraction of its length and with up to 8 random bytes overwritten."""
    return st.builds(damaged, st.sampled_from([text.encode("utf-8") for text in samples]), st.floats(0, 1),
                     st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=8))


def assert_shape(result, top, item_key=None, item_keys=()):
    """The result has every top-level key of the contract, list fields are lists, items have their keys."""
    assert isinstance(result, dict)
    for key in top:
        assert key in result, key
    for key in ("errors", "unreadable"):
        assert isinstance(result[key], list), key
    assert not any(note.startswith("internal error") for note in result["unreadable"]), result["unreadable"]
    for error in result["errors"]:
        assert isinstance(error.get("kind"), str) and isinstance(error.get("message"), str), error
    if item_key:
        assert isinstance(result[item_key], list)
        for item in result[item_key]:
            assert set(item_keys) <= set(item), (set(item_keys) - set(item), item)
