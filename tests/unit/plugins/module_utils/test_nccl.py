# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests all_reduce_perf parser: current and old formats, launcher failures."""

import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils._nccl import parse_all_reduce

from parser_testlib import REAL, assert_shape, files_in, fixture, read_text, realdata

TOP = ("rows", "avg_busbw_gbps", "max_busbw_gbps", "errors", "unreadable")
ROW_KEYS = ("size_bytes", "count", "type", "redop", "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
            "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong")


def parse(text):
    result = parse_all_reduce(text)
    assert_shape(result, TOP, "rows", ROW_KEYS)
    return result


def test_new_format_with_root_column_and_interleaved_nccl_lines():
    result = parse(fixture("nccl", "all_reduce_perf_new_8xh100_plateau.txt"))
    assert result["errors"] == [] and result["unreadable"] == []
    assert len(result["rows"]) == 17
    assert result["rows"][0] == {"size_bytes": 0, "count": 0, "type": "float", "redop": "sum", "oop_time_us": 0.12,
                                 "oop_algbw": 0.0, "oop_busbw": 0.0, "oop_wrong": 0, "ip_time_us": 0.11, "ip_algbw": 0.0,
                                 "ip_busbw": 0.0, "ip_wrong": 0}
    last = result["rows"][-1]
    # integer times from 10000 us on
    assert (last["size_bytes"], last["oop_time_us"], last["ip_time_us"]) == (8589934592, 31254.0, 31098.0)
    assert result["avg_busbw_gbps"] == 181.503
    assert result["max_busbw_gbps"] == 483.39
    plateau = [row["oop_busbw"] for row in result["rows"] if row["size_bytes"] >= 536870912]
    assert min(plateau) > 470


def test_old_format_error_column_na_cells_and_crlf():
    text = fixture("nccl", "all_reduce_perf_old_2x8xa100.txt").replace("\n", "\r\n")  # stored with LF (sanity)
    result = parse(text)
    assert result["errors"] == [] and result["unreadable"] == []
    first, second, last = result["rows"][0], result["rows"][1], result["rows"][-1]
    assert (first["size_bytes"], first["oop_wrong"], first["ip_wrong"], first["redop"]) == (0, None, None, "sum")
    assert (second["oop_wrong"], last["ip_wrong"]) == (1e-07, 5e-07)
    assert isinstance(last["oop_time_us"], float) and last["oop_time_us"] >= 10000
    assert result["avg_busbw_gbps"] == 71.2044  # printed with a trailing space
    assert result["max_busbw_gbps"] == max(max(row["oop_busbw"], row["ip_busbw"]) for row in result["rows"])


def test_rows_without_a_header_are_read_by_width():
    text = ("        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.00    0.10    0.18      0\n"
            "        1024           256   float     sum    10.00    0.10    0.18  1e-07    10.00    0.10    0.18  1e-07\n")
    result = parse(text)
    assert [(row["redop"], row["oop_wrong"]) for row in result["rows"]] == [("sum", 0), ("sum", 1e-07)]


def test_mpirun_not_enough_slots_is_a_launcher_error():
    result = parse(fixture("nccl", "mpirun_not_enough_slots.txt"))
    assert result["rows"] == [] and result["unreadable"] == [] and result["avg_busbw_gbps"] is None
    assert result["errors"] == [{"kind": "launcher", "message": "There are not enough slots available in the system to "
                                                                "satisfy the 32 slots that were requested by the application:"}]


def test_repeated_banner_is_one_error():
    text = fixture("nccl", "mpirun_not_enough_slots.txt")
    assert len(parse(text + text)["errors"]) == 1


def test_nccl_failure_and_wrong_results():
    text = ("gpu-node-07: Test NCCL failure common.cu:958 'unhandled system error (run with NCCL_DEBUG=INFO for details)'\n"
            " .. gpu-node-07 pid 4242: Test failure common.cu:891\n"
            "# Out of bounds values : 12 FAILED\n")
    assert [error["kind"] for error in parse(text)["errors"]] == ["nccl", "test", "wrong_results"]


def test_row_with_wrong_number_of_cells_is_unreadable():
    result = parse("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
                   "        1024           256     float     sum      -1    10.00\n")
    assert result["rows"] == [] and result["unreadable"] == ["line 2: 6 cells do not fit the table's columns"]


def test_empty_and_unrelated_text():
    assert parse("") == {"rows": [], "avg_busbw_gbps": None, "max_busbw_gbps": None, "errors": [], "unreadable": []}
    assert parse("hello\n")["unreadable"] == ["no all_reduce_perf result rows found"]


# The "never raises" property tests (random input, truncated samples): test_parsers_never_raise.py.


# ---------------------------------------------------------------- real captures


@realdata
@pytest.mark.parametrize("path", files_in(os.path.join(REAL, "nccl-tests")), ids=os.path.basename)
def test_real_nccl_files_parse(path):
    result = parse(read_text(path))
    assert result["unreadable"] == []
    assert result["rows"] or result["errors"]


@realdata
@pytest.mark.parametrize("name, rows, avg, peak", [
    ("superbench_8xa100-sxm4-40gb_all_reduce_perf_old-format.log", 34, 68.4048, 235.26),
    ("a3mega_2x8xh100_all_reduce_perf.txt", 31, 70.742, 338.82),
    ("deepops_4xdgx-a100_all_reduce_perf_ib.txt", 13, 113.289, 191.56),
    ("deepops_2xdgx-a100_k8s_all_reduce_perf_sriov.txt", 30, 53.7098, 188.7),
    ("deepops_k8s-roce_all_reduce_perf_low-bw.txt", 29, 7.76739, 22.92),
    ("gcm_2x8xa100-sxm4-80gb_all_reduce_perf_pairwise.txt", 6, 150.209, 182.8),
    ("gcm_8xa100-sxm4-80gb_all_reduce_perf_single-node.txt", 6, 210.99, 231.72),
])
def test_real_nccl_known_values(name, rows, avg, peak):
    result = parse(read_text(os.path.join(REAL, "nccl-tests", name)))
    assert (len(result["rows"]), result["avg_busbw_gbps"], result["max_busbw_gbps"]) == (rows, avg, peak)


@realdata
def test_real_nccl_quirks():
    superbench = parse(read_text(os.path.join(REAL, "nccl-tests", "superbench_8xa100-sxm4-40gb_all_reduce_perf_old-format.log")))
    assert [row["size_bytes"] for row in superbench["rows"][:2]] == [0, 0] and superbench["rows"][0]["oop_wrong"] is None
    deepops = parse(read_text(os.path.join(REAL, "nccl-tests", "deepops_4xdgx-a100_all_reduce_perf_ib.txt")))
    assert deepops["rows"][0]["oop_wrong"] == 7e-07
    failure = parse(read_text(os.path.join(REAL, "nccl-tests", "gcm_mpirun_not-enough-slots_failure.txt")))
    assert failure["rows"] == [] and [error["kind"] for error in failure["errors"]] == ["launcher"]
    assert failure["errors"][0]["message"].startswith("There are not enough slots available in the system to satisfy the 16 slots")
