# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit and property tests for the shared value normalisation helpers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _parse_util as pu


@pytest.mark.parametrize("raw", ["N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown", "[Unknown Error]",
                                 "Requested functionality has been deprecated",
                                 "[Requested functionality has been deprecated]", "", "  ", None])
def test_na_values_become_none(raw):
    assert pu.na_to_none(raw) is None
    assert pu.to_int(raw) is None
    assert pu.to_float(raw) is None
    assert pu.to_bool(raw) is None


@pytest.mark.parametrize("raw,expected", [
    ("81559 MiB", 81559), ("16x", 16), ("2560 bank(s)", 2560), ("4251825415 us", 4251825415), ("-8 C", -8),
    (" 42 ", 42), ("7.0", 7), ("0 %", 0),
])
def test_to_int_strips_units(raw, expected):
    assert pu.to_int(raw) == expected


def test_to_int_hex_only_when_asked():
    notes = []
    assert pu.to_int("0x1A", notes, "pci/bus") is None
    assert notes == ["pci/bus value '0x1A' is not a number"]
    assert pu.to_int("0x1A", allow_hex=True) == 26


@pytest.mark.parametrize("raw,expected", [("629.45 W", 629.45), ("26.562 GB/s", 26.562), ("100.00%", 100.0),
                                          ("200 Gb/sec", 200.0), ("25 GB/s", 25.0), ("1e3", 1000.0)])
def test_to_float_strips_units(raw, expected):
    assert pu.to_float(raw) == expected


def test_bad_numbers_are_noted_not_raised():
    notes = []
    assert pu.to_int("abc", notes, "gpu 3: temperature/gpu_temp") is None
    assert pu.to_int("1.5", notes, "x") is None
    assert pu.to_float("1,5 W", notes, "y") is None
    assert pu.to_int("\u0661\u0662", notes, "z") is None   # non-ASCII digits are not numbers here
    assert notes == ["gpu 3: temperature/gpu_temp value 'abc' is not a number", "x value '1.5' is not an integer",
                     "y value '1,5 W' is not a number", "z value '\u0661\u0662' is not a number"]


@pytest.mark.parametrize("raw,expected", [
    ("Enabled", True), ("Disabled", False), ("Active", True), ("Not Active", False), ("Yes", True), ("No", False),
    ("inactive", False), ("ON", True),
])
def test_to_bool(raw, expected):
    assert pu.to_bool(raw) is expected


def test_to_bool_notes_other_words():
    notes = []
    assert pu.to_bool("Maybe", notes, "persistence_mode") is None
    assert notes == ["persistence_mode value 'Maybe' is not a yes/no value"]


@pytest.mark.parametrize("raw,expected", [
    ("00000000:18:00.0", "00000000:18:00.0"), ("0000:18:00.0", "00000000:18:00.0"), ("18:00.0", "00000000:18:00.0"),
    ("PCI:0000:18:00", "00000000:18:00.0"), ("GPU0000:91:00.0", "00000000:91:00.0"), ("0000:1a:00.1", "00000000:1A:00.1"),
    ("00000001:00:00.0", "00000001:00:00.0"), ("00000000:00:0D.0", "00000000:00:0D.0"), ("pci@0000:3b:00.0", "00000000:3B:00.0"),
    ("for GPU0000:91:00.0: Unknown Error", "00000000:91:00.0"),
])
def test_normalize_bus_id(raw, expected):
    assert pu.normalize_bus_id(raw) == expected


@pytest.mark.parametrize("raw", ["N/A", "", None, "GPU-1234", "hello", "1:2:3:4:5"])
def test_normalize_bus_id_none(raw):
    assert pu.normalize_bus_id(raw) is None


def test_clean_text_handles_crlf_ansi_quotes_and_bytes():
    raw = b"> \x1b[4mGPU0\tCPU Affinity\x1b[0m  \r\n> GPU0\t X \r\n>\r\n"
    assert pu.clean_text(raw) == "GPU0\tCPU Affinity\nGPU0\t X\n\n"
    assert pu.clean_text(None) == ""
    assert pu.clean_text(b"\xff\xfe") == "\ufffd\ufffd"


def test_split_key_value_keeps_colons_in_values():
    assert pu.split_key_value("        Bus Id        : 00000000:18:00.0") == ("Bus Id", "00000000:18:00.0")
    assert pu.split_key_value("    Timestamp : Tue Jun 11 08:09:10 2024") == ("Timestamp", "Tue Jun 11 08:09:10 2024")
    assert pu.split_key_value("    ECC Errors") == ("ECC Errors", None)
    assert pu.split_key_value("Key :") == ("Key", "")


def test_sum_or_none_and_result_helpers():
    assert pu.sum_or_none([None, 1, 2]) == 3
    assert pu.sum_or_none([None, None]) is None
    assert pu.new_error("gpu_lost", " GPU is lost ", bus_id=None) == {"kind": "gpu_lost", "message": "GPU is lost", "bus_id": None}
    assert pu.new_result(gpus=[]) == {"gpus": [], "errors": [], "unreadable": []}


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary(), st.none()))
def test_helpers_never_raise(value):
    notes = []
    pu.clean_text(value)
    for func in (pu.to_int, pu.to_float, pu.to_bool):
        func(value if not isinstance(value, bytes) else pu.to_text(value), notes, "f")
    pu.to_int(pu.to_text(value), notes, "h", allow_hex=True)
    pu.normalize_bus_id(pu.to_text(value))
    pu.split_key_value(pu.to_text(value))
    assert all(isinstance(note, str) for note in notes)
