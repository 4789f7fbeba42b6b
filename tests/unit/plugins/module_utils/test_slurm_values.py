"""The Slurm value codec: durations a person writes, times Slurm prints, time limits, TRES, names and counts."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_values as values
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SlurmOutputError, SpecError


# -- what Slurm prints -----------------------------------------------------------------------------------------------

def test_tres_values():
    assert values.parse_tres("gres/gpu:h100=0,gres/gpu=8") == {"gres/gpu:h100": 0, "gres/gpu": 8}
    assert values.parse_tres("") == {}
    assert values.format_tres({"gres/gpu": 8, "cpu": None}) == "cpu=-1,gres/gpu=8"
    with pytest.raises(SlurmOutputError):
        values.parse_tres("gres/gpu=lots")
    with pytest.raises(SlurmOutputError):
        values.parse_tres("=8")


def test_times_slurm_prints_a_bare_number_is_minutes():
    assert [values.parse_time(t) for t in ("", "00:00:20", "01:30:00", "2-00:00:00", "5:00", "7")] == [
        0, 20, 5400, 172800, 300, 420]
    with pytest.raises(SlurmOutputError):
        values.parse_time("soon")


def test_time_format():
    assert values.format_time(172800) == "2-00:00:00"
    assert [values.format_time(s) for s in (0, 20, 5400, 172800, 90061)] == [
        "00:00:00", "00:00:20", "01:30:00", "2-00:00:00", "1-01:01:01"]


def test_slurm_syntax_as_slurm_reads_it():
    slurm_times = ("90", "90:00", "1:30:00", "2-12", "2-12:30:15", "unlimited", "INFINITE")
    assert all(values.is_slurm_time(t) for t in slurm_times)
    assert not any(values.is_slurm_time(t) for t in ("2days", "1:2:3:4", "1.5", "1-2-3", "30m", ""))


# -- what a person writes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [
    ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("45s", 45), ("1d", 86400), ("10min", 600), ("1h 30m", 5400),
    ("00:30:00", 1800), ("30:00", 1800), ("1:30:00", 5400), ("2-00:00:00", 172800), ("1-12", 129600),
    (0, 0), ("0", 0), (None, None),
])
def test_duration(text, seconds):
    assert values.parse_duration(text, "x") == seconds


@pytest.mark.parametrize("text,message", [
    (30, "x is 30: a bare number is ambiguous (Slurm reads it as minutes, a person may mean seconds); write '30m', "
         "'30s' or a Slurm time such as '00:30:00'"),
    ("90", "x is '90': a number in a string is a bare number, and a bare number is ambiguous"),
    (" 90 ", "write '90m', '90s'"),
    (90, "bare number is ambiguous"), (172800, "bare number is ambiguous"),
    ("-5m", "cannot be negative"),
    (-1, "x is -1, which is not a Slurm time or a duration: a duration cannot be negative"),
    ("soon", "write a duration"), ("later", "write a duration"), ([1], "write a duration"), (True, "write a duration"),
    (1.5, "write a duration"), ("1:75:00", "0 to 59"), ("1:99:00", "0 to 59"), ("1-2:60", "0 to 59"),
])
def test_duration_bad(text, message):
    with pytest.raises(SpecError) as caught:
        values.parse_duration(text, "x")
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("value,expected", [
    ("UNLIMITED", "UNLIMITED"), ("infinite", "INFINITE"), (0, "0"), ("0", "0"), ("90:00", "90:00"),
    ("1:30:00", "1:30:00"), (" 2-12 ", "2-12"), ("2-12:30", "2-12:30"), ("2-12:30:15", "2-12:30:15"),
    ("90m", "90"), ("60m", "60"), ("2h", "120"), ("1d", "1440"), ("1h30m", "90"), ("120s", "2"),
])
def test_time_limit(value, expected):
    assert values.time_limit(value, "partition p: max_time") == expected


@pytest.mark.parametrize("value,message", [
    (90, "partition p: max_time is 90: a bare number is ambiguous"),
    ("60", "partition p: max_time is '60': a number in a string is a bare number"),
    ("90s", "partition p: max_time is '90s': Slurm keeps this limit in whole minutes"),
    ("1:75:00", "0 to 59"), (None, "partition p: max_time is None, which is not a Slurm time"),
    ("2 days", "partition p: max_time is '2 days', which is not a Slurm time"),
    (-5, "partition p: max_time is -5, which is not a Slurm time"),
])
def test_time_limit_bad(value, message):
    with pytest.raises(SpecError) as caught:
        values.time_limit(value, "partition p: max_time")
    assert message in str(caught.value)


# -- counts, text and names ------------------------------------------------------------------------------------------

def test_counts_names_and_tres_specs():
    assert values.check_int("7", "x") == 7 and values.check_int(0, "x") == 0
    assert values.check_name_list("b,a", "x") == ["a", "b"] and values.check_name_list(None, "x") is None
    assert values.check_tres({"gres/gpu": "4"}, "x") == {"gres/gpu": 4} and values.check_tres(None, "x") is None
    assert values.check_text("team a", "x") == "team a"
    for call, args, message in [
            (values.check_int, (True, "x"), "x is True, which is not a whole number"),
            (values.check_int, (5, "x", 0, 4), "x is 5: it must be from 0 to 4"),
            (values.check_name, ("Bad", "x"), "x is 'Bad', which is not a valid name"),
            (values.check_name_list, (["a", "a"], "x"), "it names something twice"),
            (values.check_tres, ({"gpus": 1}, "x"), "x has TRES 'gpus'"),
            (values.check_tres, ([1], "x"), "give a mapping of TRES name to count"),
            (values.check_text, ("a|b", "x"), "x is 'a|b': up to 200 characters")]:
        with pytest.raises(SpecError) as caught:
            call(*args)
        assert message in str(caught.value)
