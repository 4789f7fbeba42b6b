# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers of the InfiniBand, kernel log, DCGM and NCCL parser tests.

- ``fixture(area, name)``: one of our own captures under tests/unit/fixtures/<area>/.
- ``REAL``/``PEER`` and ``realdata``: the public captures in ../shared/fixtures (``GPUCLUSTER_REAL_FIXTURES``), read
  in place and never copied; tests marked ``realdata`` skip when the folder is absent.
- ``garbage()``, ``truncated(samples)``: hypothesis strategies for the "never raises" property.
- ``assert_shape(result, top, item_key, item_keys)``: the contract's keys are all there, lists are lists, no
  "internal error" note (a parser that caught its own exception still has a bug).
"""

import os

import pytest
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures")
REAL = os.environ.get("GPUCLUSTER_REAL_FIXTURES") or os.path.join(REPO, "..", "shared", "fixtures", "real")
PEER = os.path.join(os.path.dirname(os.path.abspath(REAL)), "peer-azurehpc")

realdata = pytest.mark.skipif(not os.path.isdir(REAL), reason="real captures not present at %s" % REAL)


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


def files_in(folder):
    """Paths of the plain files directly under ``folder`` (sorted; none when it is absent)."""
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name)))


def real(*parts):
    """Text of one real capture."""
    return read_text(os.path.join(REAL, *parts))


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
