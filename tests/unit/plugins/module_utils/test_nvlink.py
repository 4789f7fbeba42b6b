# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of the nvidia-smi nvlink -s / nvlink -e / topo -m parsers against docs/health-model.md."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _nvlink as nvlink
import parser_testlib
from parser_testlib import capture_sections, ids, peer_files, read_text, real_files, realdata

LINK_PARSERS = (nvlink.parse_nvlink_status, nvlink.parse_nvlink_errors)
TOPO_KEYS = {"devices", "matrix", "cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_names", "errors", "unreadable"}


def fixture(name):
    """Text of one of our own fixtures."""
    return parser_testlib.fixture("nvlink", name)


def assert_links_contract(result):
    """Keys and types of an nvlink -s / -e result."""
    assert set(result) == {"gpus", "errors", "unreadable"}
    for gpu in result["gpus"]:
        assert set(gpu) == {"index", "name", "uuid", "supported", "links"}
        assert isinstance(gpu["index"], int)
        for link in gpu["links"]:
            assert isinstance(link["link"], int)
            if "active" in link:
                assert isinstance(link["active"], bool)
                assert link["speed_gbps"] is None or isinstance(link["speed_gbps"], float)
            else:
                assert all(v is None or isinstance(v, (int, float)) for v in link["counters"].values())
    assert all(isinstance(e["kind"], str) and isinstance(e["message"], str) for e in result["errors"])
    assert all(isinstance(note, str) for note in result["unreadable"])
    assert not any("internal parser error" in note for note in result["unreadable"])


def assert_topo_contract(result):
    """Keys and types of a topo -m result."""
    assert set(result) == TOPO_KEYS
    assert all(isinstance(name, str) for name in result["devices"])
    assert all(isinstance(row, dict) for row in result["matrix"].values())
    assert all(isinstance(note, str) for note in result["unreadable"])
    assert not any("internal parser error" in note for note in result["unreadable"])


# --------------------------------------------------------------------------------------------------------------------
# nvlink -s
# --------------------------------------------------------------------------------------------------------------------

def test_status_eight_gpus_eighteen_links_one_inactive():
    result = nvlink.parse_nvlink_status(fixture("h100x8_nvlink_status.txt"))
    assert_links_contract(result)
    assert result["errors"] == [] and result["unreadable"] == []
    assert [gpu["index"] for gpu in result["gpus"]] == list(range(8))
    assert all(len(gpu["links"]) == 18 for gpu in result["gpus"])
    assert result["gpus"][0]["uuid"] == "GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0"
    assert result["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    inactive = [(g["index"], l["link"]) for g in result["gpus"] for l in g["links"] if not l["active"]]
    assert inactive == [(5, 11)]
    assert result["gpus"][5]["links"][11] == {"link": 11, "active": False, "speed_gbps": None}
    assert result["gpus"][5]["links"][10] == {"link": 10, "active": True, "speed_gbps": 26.562}


def test_status_single_gpu_with_space_indent_and_crlf():
    text = fixture("h100x8_nvlink_status.txt").split("GPU 1:")[0].replace("\t ", "         ").replace("\n", "\r\n")
    result = nvlink.parse_nvlink_status(text)
    assert len(result["gpus"]) == 1 and len(result["gpus"][0]["links"]) == 18 and result["unreadable"] == []


@pytest.mark.parametrize("name,kind,index", [
    ("a100_gpu3_all_inactive.txt", "all_inactive", 3),
    ("h100_mig_unsupported.txt", "mig_unsupported", 0),
])
def test_status_errors(name, kind, index):
    result = nvlink.parse_nvlink_status(fixture(name))
    assert_links_contract(result)
    assert [(e["kind"], e["index"]) for e in result["errors"]] == [(kind, index)]
    assert result["gpus"][0]["links"] == [] and result["unreadable"] == []


def test_status_both_inactive_wordings():
    for line in ("NVML: Unable to retrieve NVLink information as all links are inactive",
                 "NVML: Unable to retrieve Nvlink information as all links are inActive"):
        assert nvlink.parse_nvlink_status(line)["errors"][0]["kind"] == "all_inactive"


def test_status_gpu_without_nvlink_is_not_an_error():
    result = nvlink.parse_nvlink_status(fixture("l40s_no_nvlink.txt"))
    assert result["errors"] == [] and result["unreadable"] == []
    assert result["gpus"][0]["supported"] is False and result["gpus"][0]["links"] == []
    assert nvlink.parse_nvlink_status("") == {"gpus": [], "errors": [], "unreadable": []}


def test_status_nvml_errors_and_stray_lines():
    result = nvlink.parse_nvlink_status("Failed to initialize NVML: Driver/library version mismatch\n\t Link 0: 25 GB/s\n")
    assert result["errors"][0]["kind"] == "driver_mismatch"
    assert result["unreadable"] == ["line 2: not a GPU header or link line: 'Link 0: 25 GB/s'"]


def test_status_unknown_link_state_is_inactive_and_noted():
    result = nvlink.parse_nvlink_status("GPU 0: NVIDIA H100 80GB HBM3\n\t Link 0: degraded\n\t Link 1: <inactive>\n")
    assert [link["active"] for link in result["gpus"][0]["links"]] == [False, False]
    assert result["unreadable"] == ["line 2: gpu 0 link 0 speed value 'degraded' is not a number"]
    assert result["gpus"][0]["uuid"] is None


# --------------------------------------------------------------------------------------------------------------------
# nvlink -e
# --------------------------------------------------------------------------------------------------------------------

def test_errors_eight_gpus():
    result = nvlink.parse_nvlink_errors(fixture("h100x8_nvlink_errors.txt"))
    assert_links_contract(result)
    assert result["errors"] == [] and result["unreadable"] == []
    assert all(len(gpu["links"]) == 18 for gpu in result["gpus"])
    assert result["gpus"][5]["links"][11]["counters"] == {"replay": 412, "recovery": 3, "crc_flit": 1877}
    assert result["gpus"][2]["links"][4]["counters"]["replay"] == 1
    nonzero = [(g["index"], l["link"]) for g in result["gpus"] for l in g["links"] if any(l["counters"].values())]
    assert nonzero == [(2, 4), (5, 11)]


def test_errors_older_wording_with_data_and_flit_crc():
    result = nvlink.parse_nvlink_errors(fixture("v100x2_nvlink_errors_old.txt"))
    assert result["unreadable"] == []
    assert result["gpus"][1]["links"][2]["counters"] == {"replay": 2, "recovery": 0, "crc_data": 7, "crc_flit": 19}
    assert all(len(gpu["links"]) == 6 for gpu in result["gpus"])


def test_errors_other_counters_and_values():
    text = ("GPU 0: NVIDIA GB300\n\t Link 0: Effective Errors: 3\n\t Link 0: Tx discards: N/A\n"
            "\t Link 0: Effective BER: 1.5e-12\n\t Link 0: CRC Flit Errors: 2\n\t Link 0: CRC Data Errors: 1\n")
    result = nvlink.parse_nvlink_errors(text)
    assert result["gpus"][0]["name"] == "NVIDIA GB300"
    expected = {"effective": 3, "tx_discards": None, "effective_ber": 1.5e-12, "crc_flit": 2, "crc_data": 1}
    assert result["gpus"][0]["links"][0]["counters"] == expected


def test_errors_mig_and_bad_counter_lines():
    result = nvlink.parse_nvlink_errors(fixture("h100_mig_unsupported.txt") + "\t Link 0: Replay Errors: lots\n")
    assert result["errors"][0]["kind"] == "mig_unsupported"
    assert result["gpus"][0]["links"][0]["counters"] == {"replay": None}
    assert result["unreadable"] == ["line 3: gpu 0 link 0 Replay Errors value 'lots' is not a number"]


# --------------------------------------------------------------------------------------------------------------------
# topo -m
# --------------------------------------------------------------------------------------------------------------------

def _expected_topo_row(result, name):
    return [result["matrix"][name][device] for device in result["devices"]]


def test_topo_eight_gpus_four_nics_with_legend():
    result = nvlink.parse_topo_matrix(fixture("h100x8_nic4_topo.txt"))
    assert_topo_contract(result)
    assert result["errors"] == [] and result["unreadable"] == []
    assert result["devices"] == ["GPU%d" % i for i in range(8)] + ["NIC%d" % i for i in range(4)]
    assert _expected_topo_row(result, "GPU0") == ["X"] + ["NV18"] * 7 + ["PXB", "NODE", "SYS", "SYS"]
    assert _expected_topo_row(result, "NIC3") == ["SYS"] * 4 + ["NODE", "NODE", "PXB", "PXB", "SYS", "SYS", "NODE", "X"]
    assert result["cpu_affinity"]["GPU0"] == "0-55,112-167" and result["cpu_affinity"]["GPU7"] == "56-111,168-223"
    assert result["numa_affinity"] == {"GPU%d" % i: str(i // 4) for i in range(8)}
    assert result["gpu_numa_id"] == {"GPU%d" % i: None for i in range(8)}
    assert "NIC0" not in result["cpu_affinity"]
    assert result["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_3", "NIC2": "mlx5_4", "NIC3": "mlx5_7"}


def test_topo_spaces_instead_of_tabs_and_markdown_quotes():
    text = fixture("h100x8_nic4_topo.txt")
    expected = nvlink.parse_topo_matrix(text)
    spaced = "\n".join("> " + line.replace("\t\t", "\t").replace("\t", "    ") for line in text.split("\n"))
    assert nvlink.parse_topo_matrix(spaced) == expected


def test_topo_errors_and_damage():
    assert nvlink.parse_topo_matrix("No devices were found\n")["errors"][0]["kind"] == "no_devices"
    assert nvlink.parse_topo_matrix("")["unreadable"] == []
    assert nvlink.parse_topo_matrix("just words")["unreadable"] == [
        "topo: no matrix header (a line of device names such as GPU0 GPU1) found"]
    short = nvlink.parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV4\t X \t0-7\n")
    assert short["unreadable"] == ["topo: line 2: row GPU0 has 1 of 2 link cells"]
    assert short["matrix"]["GPU1"] == {"GPU0": "NV4", "GPU1": "X"} and short["cpu_affinity"] == {"GPU1": "0-7"}
    odd = nvlink.parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tWEIRD\n")
    assert odd["unreadable"] == ["topo: line 2: GPU0/GPU1 link type 'WEIRD' is not known"]


# The "never raises" property tests of the three parsers (random text, damaged samples): test_parsers_never_raise.py.


# --------------------------------------------------------------------------------------------------------------------
# Real captures
# --------------------------------------------------------------------------------------------------------------------

NVLINK_REAL = real_files("nvlink-topo", "nvlink") + peer_files("nvlink")
TOPO_REAL = real_files("nvlink-topo", "topo")


@realdata
@pytest.mark.parametrize("path", NVLINK_REAL, ids=ids(NVLINK_REAL))
def test_real_nvlink_status(path):
    text = read_text(path)
    result = nvlink.parse_nvlink_status(text)
    assert_links_contract(result)
    assert result["unreadable"] == []
    assert result["gpus"] or not text.strip()
    for gpu in result["gpus"]:
        assert gpu["uuid"] is None or gpu["uuid"].startswith("GPU-")
        assert gpu["links"] or result["errors"]
        assert all(link["speed_gbps"] in (25.0, 26.562) for link in gpu["links"])


@realdata
@pytest.mark.parametrize("path", TOPO_REAL, ids=ids(TOPO_REAL))
def test_real_topo(path):
    result = nvlink.parse_topo_matrix(read_text(path))
    assert_topo_contract(result)
    assert result["unreadable"] == [] and result["errors"] == []
    assert result["devices"] and set(result["matrix"]) == set(result["devices"])
    assert all(row[name] == "X" for name, row in result["matrix"].items())
    assert set(result["cpu_affinity"]) == set(result["devices"])


OTHER_REAL = [p for p in real_files("nvlink-topo") if p not in NVLINK_REAL + TOPO_REAL]


@realdata
@pytest.mark.parametrize("path", OTHER_REAL, ids=ids(OTHER_REAL))
def test_real_other_files_land_in_unreadable(path):
    text = read_text(path)
    for parse in LINK_PARSERS:
        result = parse(text)
        assert_links_contract(result)
        assert result["gpus"] == [] and result["unreadable"]
    assert nvlink.parse_topo_matrix(text)["unreadable"]


@realdata
def test_real_known_values():
    nv12 = nvlink.parse_topo_matrix(read_text(real_files("nvlink-topo", "nv12")[0]))
    assert nv12["matrix"]["GPU3"]["GPU7"] == "NV12" and nv12["cpu_affinity"]["GPU4"] == "24-47"
    single = nvlink.parse_topo_matrix(read_text(real_files("nvlink-topo", "topo-m_single")[0]))
    assert single["gpu_numa_id"] == {"GPU0": None} and single["numa_affinity"] == {"GPU0": "0"}
    a100 = nvlink.parse_nvlink_status(read_text(real_files("nvlink-topo", "8xa100")[0]))
    assert [len(g["links"]) for g in a100["gpus"]] == [12] * 8
    inactive = nvlink.parse_nvlink_status(read_text(real_files("nvlink-topo", "all-inactive")[0]))
    assert inactive["errors"][0]["kind"] == "all_inactive" and inactive["errors"][0]["index"] == 6


@realdata
@pytest.mark.parametrize("path", real_files("captures"), ids=ids(real_files("captures")))
def test_real_capture_sections(path):
    seen = set()
    for command, body in capture_sections(read_text(path)):
        for parse in LINK_PARSERS:
            assert_links_contract(parse(body))  # any section: must not raise
        assert_topo_contract(nvlink.parse_topo_matrix(body))
        if command == "nvidia-smi topo -m":
            topo = nvlink.parse_topo_matrix(body)
            assert topo["devices"] == ["GPU0"] and topo["unreadable"] == []
            seen.add("topo")
        elif command == "nvidia-smi nvlink -s":
            status = nvlink.parse_nvlink_status(body)
            assert len(status["gpus"]) == 1 and status["unreadable"] == []
            assert status["gpus"][0]["links"] or status["errors"] or status["gpus"][0]["supported"] is False
            seen.add("nvlink")
    assert seen == {"topo", "nvlink"}
