# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dcgm-exporter counters file checker: module_utils/_dcgm_counters.py and bin/dcgm-counters-check."""

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skip_policy import needs_shared, shared_path

from ansible_collections.gpucluster.ops.plugins.module_utils._dcgm_counters import check_counters, format_problem

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
CHECKER = os.path.join(REPO, "bin", "dcgm-counters-check")
UPSTREAM = shared_path("GPUCLUSTER_DCGM_EXPORTER_DATA", "data", "dcgm-exporter")
upstream = needs_shared(UPSTREAM, "dcgm-exporter's upstream counters lists")

GOOD = """# Format
# DCGM FIELD, Prometheus metric type, help message

DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DRIVER_VERSION,        label, Driver Version
"""


def problems(text):
    return [(p["line"], p["message"]) for p in check_counters(text)["problems"]]


def test_a_good_file_is_read_with_spaces_comments_and_blank_lines():
    result = check_counters(GOOD)
    assert result["problems"] == []
    assert [(c["line"], c["field"], c["type"]) for c in result["counters"]] == [
        (4, "DCGM_FI_DEV_GPU_TEMP", "gauge"), (5, "DCGM_FI_DEV_DEC_UTIL", "gauge"),
        (6, "DCGM_FI_DEV_XID_ERRORS", "gauge"), (7, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"),
        (8, "DCGM_FI_DRIVER_VERSION", "label")]
    assert result["counters"][0]["help"] == "GPU temperature (in C)."


@upstream
@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_the_upstream_lists_pass(name):
    with open(os.path.join(UPSTREAM, name)) as handle:
        result = check_counters(handle.read())
    assert result["problems"] == []
    assert len(result["counters"]) > 20


@pytest.mark.parametrize("line,message", [
    ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature, in C", "expected 3 comma-separated fields (DCGM field, type, help), found 4"),
    ("DCGM_FI_DEV_GPU_TEMP, gauge", "found 2"),
    ("dcgm_fi_dev_gpu_temp, gauge, t", "'dcgm_fi_dev_gpu_temp' is not a DCGM field name"),
    ("GPU_TEMP, gauge, t", "'GPU_TEMP' is not a DCGM field name"),
    ("DCGM_FI_DEV_GPU_TEMP, histogram, t", "DCGM_FI_DEV_GPU_TEMP: type 'histogram' is not one of gauge, counter, label"),
    ("DCGM_FI_DEV_GPU_TEMP, Gauge, t", "type 'Gauge'"),
    ("DCGM_FI_DEV_GPU_TEMP, gauge, ", "DCGM_FI_DEV_GPU_TEMP: the help message is empty"),
    ('DCGM_FI_DEV_GPU_TEMP, gauge, "GPU, temperature"', "quotes are not allowed"),
    ("DCGM_FI_DEV_GPU_TEMP, gauge, " + "x" * 301, "longer than 300 characters"),
])
def test_a_line_dcgm_exporter_would_refuse_is_a_problem_with_its_line_number(line, message):
    found = problems("# header\n" + line + "\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n")
    assert len(found) == 1 and found[0][0] == 2 and message in found[0][1], found


def test_a_field_listed_twice_names_both_lines():
    assert problems("DCGM_FI_DEV_GPU_TEMP, gauge, a\n\nDCGM_FI_DEV_GPU_TEMP, gauge, b\n") == [
        (3, "DCGM_FI_DEV_GPU_TEMP is listed twice (first on line 1)")]


@pytest.mark.parametrize("text", ["", "# only comments\n\n", "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"])
def test_a_file_without_metrics_is_refused(text):
    assert problems(text) == [(0, "no gauge or counter: dcgm-exporter would export nothing")]


def test_nul_bytes_and_non_text():
    assert problems("DCGM_FI_DEV_GPU_TEMP, gauge, t\x00\n") == [(0, "the file holds NUL bytes")]
    assert check_counters(b"DCGM_FI_DEV_GPU_TEMP, gauge, t")["problems"][0]["message"] == "the file is not text"


def test_format_problem():
    assert format_problem({"line": 3, "message": "m"}, "/etc/dcgm-exporter/counters.csv") == "/etc/dcgm-exporter/counters.csv:3: m"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=2000), st.binary(max_size=500),
                 st.lists(st.sampled_from(["DCGM_FI_DEV_GPU_TEMP", "gauge", "counter", "label", ",", " ", "#", "\n",
                                           "x", '"', "DCGM_EXP_XID_ERRORS_COUNT"]), max_size=60).map("".join)))
def test_never_raises_and_keeps_its_shape(text):
    result = check_counters(text)
    assert set(result) == {"counters", "problems"}
    assert all(set(c) == {"line", "field", "type", "help"} for c in result["counters"])
    assert all(isinstance(p["line"], int) and p["message"] for p in result["problems"])
    fields = [c["field"] for c in result["counters"]]
    assert len(fields) == len(set(fields))


def _run(*args):
    return subprocess.run([sys.executable, CHECKER] + list(args), capture_output=True, text=True, check=False)


def test_the_command_exits_0_on_a_good_file_and_counts(tmp_path):
    path = tmp_path / "counters.csv"
    path.write_text(GOOD)
    proc = _run(str(path))
    assert (proc.returncode, proc.stdout) == (0, "%s: 4 metric(s), 1 label(s)\n" % path)


def test_the_command_exits_1_with_one_line_per_problem(tmp_path):
    path = tmp_path / "counters.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, a, b\nDCGM_FI_DEV_GPU_UTIL, percent, u\nDCGM_FI_DEV_FB_USED, gauge, f\n")
    proc = _run(str(path))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "%s:1: expected 3 comma-separated fields (DCGM field, type, help), found 4" % path,
        "%s:2: DCGM_FI_DEV_GPU_UTIL: type 'percent' is not one of gauge, counter, label" % path]


def test_the_command_refuses_non_utf8_and_reports_usage_errors(tmp_path):
    path = tmp_path / "counters.csv"
    path.write_bytes(b"DCGM_FI_DEV_GPU_TEMP, gauge, \xff\n")
    proc = _run(str(path))
    assert (proc.returncode, proc.stdout) == (1, "%s:0: the file is not UTF-8 text\n" % path)
    assert _run().returncode == 2
    assert _run(str(tmp_path / "missing.csv")).returncode == 2
