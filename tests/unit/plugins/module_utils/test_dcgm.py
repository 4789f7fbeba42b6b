# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dcgmi diag parser: JSON (DCGM 2.x/3.x and 3.x/4.x shapes) and the text table."""

import json
import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils._dcgm import parse_dcgmi_diag

from parser_testlib import REAL, assert_shape, files_in, fixture, read_text, realdata

TOP = ("level", "results", "errors", "unreadable")
RESULT_KEYS = ("test", "category", "status", "gpus", "message")


def parse(text, **kwargs):
    result = parse_dcgmi_diag(text, **kwargs)
    assert_shape(result, TOP, "results", RESULT_KEYS)
    assert all(item["status"] in ("pass", "fail", "warn", "skip") for item in result["results"])
    return result


def statuses(result):
    return [(item["test"], item["status"], item["gpus"]) for item in result["results"]]


# ---------------------------------------------------------------- JSON


def test_json_dcgm3_shape_passing_run():
    result = parse(fixture("dcgm", "diag_r3_pass_dcgm3.json"), level=3)
    assert result["level"] == 3 and result["errors"] == [] and result["unreadable"] == []
    tests = {(item["category"], item["test"]): item for item in result["results"]}
    assert tests[("Deployment", "Denylist")] == {"test": "Denylist", "category": "Deployment", "status": "pass",
                                                 "gpus": list(range(8)), "message": None}
    assert tests[("Hardware", "GPU Memory")]["gpus"] == list(range(8))
    assert tests[("Stress", "Targeted Power")]["status"] == "skip"
    # info text of passing results is not a message
    assert tests[("Stress", "Targeted Stress")]["message"] is None
    assert {item["status"] for item in result["results"]} == {"pass", "skip"}


def test_json_dcgm4_shape_failing_run():
    result = parse(fixture("dcgm", "diag_r3_fail_dcgm4.json"))
    assert result["level"] is None and result["errors"] == []
    assert statuses(result) == [
        ("software", "pass", list(range(8))),
        ("memory", "fail", [5]), ("memory", "pass", [0, 1, 2, 3, 4, 6, 7]),
        ("pulse_test", "skip", None),
        ("pcie", "pass", [0, 1, 3, 4, 5, 6, 7]), ("pcie", "warn", [2])]
    failed = result["results"][1]
    assert failed["category"] == "Hardware"
    assert failed["message"] == "GPU 5: Memory test failed: 2 errors found. Drain the GPU and run field diagnostics."


def test_json_runtime_error_and_leading_warning_text():
    text = "WARNING: this version is deprecated\n" + json.dumps(
        {"DCGM GPU Diagnostic": {"runtime_error": "Unable to run diagnostic: NVVS binary not found", "version": "3.1.0"}})
    result = parse(text)
    assert result["results"] == []
    assert result["errors"] == [{"kind": "runtime_error", "message": "Unable to run diagnostic: NVVS binary not found"}]


def test_json_odd_shapes_are_tolerated():
    document = {"DCGM GPU Diagnostic": {"test_categories": [
        None, {"category": "Hardware", "tests": [None, {"name": "GPU Memory", "results": [
            None, {"gpu_ids": 0, "status": "Fail", "warnings": ["GPU 0: bad page"], "info": "checked 80 GiB"},
            {"gpu_ids": [1, "2"], "status": "WARNING"}, {"status": "Exploded"}]}]}]}}
    result = parse(json.dumps(document))
    assert statuses(result) == [("GPU Memory", "fail", [0]), ("GPU Memory", "warn", [1, 2])]
    assert result["results"][0]["message"] == "GPU 0: bad page; checked 80 GiB"
    assert result["unreadable"] == ["test GPU Memory: status 'Exploded' is not pass/fail/warn/skip"]


def test_truncated_json_is_unreadable():
    text = fixture("dcgm", "diag_r3_pass_dcgm3.json")
    result = parse(text[:len(text) // 2])
    assert result["results"] == [] and result["unreadable"][0].startswith("JSON document not readable")


# ---------------------------------------------------------------- text table


def test_table_r1_pass_with_metadata_section():
    result = parse(fixture("dcgm", "diag_r1_pass_table.txt"))
    assert result["level"] == 1 and result["errors"] == [] and result["unreadable"] == []
    assert [item["test"] for item in result["results"]] == [
        "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
        "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
    assert {(item["category"], item["status"], item["gpus"]) for item in result["results"]} == {("Deployment", "pass", None)}


def test_table_r2_fail_second_status_on_continuation_row_and_wrapped_warnings():
    result = parse(fixture("dcgm", "diag_r2_fail_table.txt"), level=2)
    assert result["level"] == 2 and result["unreadable"] == []
    tail = statuses(result)[-4:]
    assert tail == [("PCIe", "pass", [0, 1, 2, 3, 4, 5, 7]), ("PCIe", "warn", [6]),
                    ("GPU Memory", "pass", [0, 1, 2, 3, 5, 6, 7]), ("GPU Memory", "fail", [4])]
    pcie_warn, memory_fail = result["results"][-3], result["results"][-1]
    # wrapped mid-word ("thr|eshold") and just before a space ("flips| at") alike
    assert pcie_warn["message"] == "GPU 6 PCIe replay counter 212 exceeds the threshold of 100 replays; check the riser and slot seating."
    assert memory_fail["message"] == "GPU 4 Memory test found 3 uncorrectable flips at 0x1c4f20000. Drain the node and reset the GPU."
    assert result["results"][-2]["message"] is None
    assert (memory_fail["category"], pcie_warn["category"]) == ("Hardware", "Integration")


def test_table_old_labels_and_unterminated_table():
    text = ("|-----  Deployment  --------+------------------------------------------------|\n"
            "| Blacklist                 | Pass                                           |\n"
            "| Page Retirement           | Fail                                           |\n"
            "| Error                     | GPU 2 has more than 60 retired pages           |\n")
    result = parse(text)
    assert statuses(result) == [("Blacklist", "pass", None), ("Page Retirement", "fail", None)]
    assert result["results"][1]["message"] == "GPU 2 has more than 60 retired pages"


def test_table_error_row_without_a_test_is_a_failed_result():
    text = ("|-----  Deployment  --------+------------------------------------------------|\n"
            "| Error                     | GPU 7 has uncorrectable memory errors and row  |\n"
            "|                           |  remappings are pending                        |\n")
    result = parse(text)
    assert result["results"] == [{"test": "Error", "category": "Deployment", "status": "fail", "gpus": [7],
                                  "message": "GPU 7 has uncorrectable memory errors and row remappings are pending"}]


def test_table_unknown_result_is_unreadable():
    result = parse("| Memory                    | Exploded                                       |\n")
    assert result["results"] == [] and result["unreadable"] == ["line 1: test Memory: result 'Exploded' not understood"]


def test_hostengine_error():
    result = parse(fixture("dcgm", "diag_hostengine_error.txt"))
    assert [error["kind"] for error in result["errors"]] == ["no_hostengine", "no_hostengine"]
    assert result["results"] == [] and result["unreadable"] == []


def test_crlf_and_markdown_quotes():
    text = fixture("dcgm", "diag_r1_pass_table.txt").replace("\n", "\r\n")
    text = "".join("> " + line + "\n" for line in text.split("\n"))
    assert len(parse(text)["results"]) == 9


# The "never raises" property tests (random input, truncated samples): test_parsers_never_raise.py.


# ---------------------------------------------------------------- real captures


@realdata
@pytest.mark.parametrize("path", files_in(os.path.join(REAL, "dcgm")), ids=os.path.basename)
def test_real_dcgm_files_parse(path):
    result = parse(read_text(path))
    if "dcgmi-diag" in path:
        assert result["results"] and result["unreadable"] == []


@realdata
def test_real_dcgm_known_values():
    failed = parse(read_text(os.path.join(REAL, "dcgm", "deepops_dcgmi-diag-r1_fail_dcgm2-era.txt")))
    assert failed["level"] == 1
    assert sorted(item["test"] for item in failed["results"] if item["status"] == "fail") == [
        "Environment Variables", "Graphics Processes", "Inforom", "Page Retirement", "Persistence Mode"]
    assert "Blacklist" in [item["test"] for item in failed["results"]]
    thermal = parse(read_text(os.path.join(REAL, "dcgm", "mleng_dcgmi-diag-r2_gpu0-thermal-fail_excerpt.txt")))
    assert statuses(thermal) == [("GPU Memory", "pass", [1, 2, 3, 4, 5, 6, 7]), ("GPU Memory", "fail", [0])]
    assert "13.3 seconds started at 9.7 seconds into the test for GPU 0 Verify" in thermal["results"][1]["message"]
    remap = parse(read_text(os.path.join(REAL, "dcgm", "mleng_dcgmi-diag_row-remap-pending_excerpt.txt")))
    assert [(item["test"], item["status"], item["gpus"]) for item in remap["results"]] == [("Error", "fail", [3])]
    assert remap["results"][0]["message"] == "GPU 3 has uncorrectable memory errors and row remappings are pending"
