# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of the nvidia-smi parsers (-q -x, -q, --query-gpu CSV) against docs/health-model.md."""

import re
import time

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _nvsmi as nvsmi
import parser_testlib
from parser_testlib import capture_sections, ids, peer_files, read_text, real_files, real_text, realdata

PARSERS = {"xml": nvsmi.parse_query_xml, "text": nvsmi.parse_query_text, "csv": nvsmi.parse_query_csv}
FILES = {  # the same GPU state written in each format
    "h100x8": {"xml": "h100x8_v13.xml", "text": "h100x8_q.txt", "csv": "h100x8_query.csv"},
    "degraded": {"xml": "h100_degraded_v13.xml", "text": "h100_degraded_q.txt", "csv": "h100_degraded_query.csv"},
}
INVENTORY_KEYS = {"source", "driver_version", "cuda_version", "attached_gpus", "timestamp", "gpus", "errors", "unreadable"}
GPU_KEYS = {"index", "minor_number", "bus_id", "uuid", "name", "serial", "vbios_version", "board_id", "memory_total_mib",
            "persistence_mode", "ecc_mode", "mig_mode", "mig_devices", "ecc_errors", "retired_pages", "remapped_rows", "pcie",
            "temperature", "power", "clock_event_reasons", "fabric", "utilization", "errors"}
ALL_FORMATS = pytest.mark.parametrize("fmt", ["xml", "text", "csv"])
TREE_FORMATS = pytest.mark.parametrize("fmt", ["xml", "text"])


def fixture(name):
    """Text of one of our own fixtures."""
    return parser_testlib.fixture("nvsmi", name)


def parsed(state, fmt):
    """Inventory of fixture ``state`` written in format ``fmt``."""
    return PARSERS[fmt](fixture(FILES[state][fmt]))


def only_gpu(state, fmt):
    """The single GPU of a one-GPU fixture."""
    result = parsed(state, fmt)
    assert len(result["gpus"]) == 1, result["unreadable"]
    return result["gpus"][0]


def assert_contract(result, source):
    """Keys and types every inventory has, whatever the input."""
    assert set(result) == INVENTORY_KEYS
    assert result["source"] == source
    assert isinstance(result["gpus"], list) and isinstance(result["errors"], list)
    assert all(isinstance(note, str) for note in result["unreadable"])
    assert not any("internal parser error" in note for note in result["unreadable"])  # the safety net stays unused
    for error in result["errors"]:
        assert error["kind"] in ("nvml_init", "driver_mismatch", "device_handle", "no_devices", "gpu_lost", "other")
        assert isinstance(error["message"], str) and "bus_id" in error
    for index, gpu in enumerate(result["gpus"]):
        assert set(gpu) == GPU_KEYS
        assert gpu["index"] == index
        assert all(isinstance(value, bool) for value in gpu["clock_event_reasons"].values())


# --------------------------------------------------------------------------------------------------------------------
# Inventory header, contract, ordering
# --------------------------------------------------------------------------------------------------------------------

@ALL_FORMATS
def test_eight_h100_inventory(fmt):
    result = parsed("h100x8", fmt)
    assert_contract(result, fmt)
    assert result["errors"] == [] and result["unreadable"] == []
    assert result["driver_version"] == "570.124.06"
    assert result["attached_gpus"] == 8
    assert [gpu["bus_id"] for gpu in result["gpus"]] == [
        "00000000:%s:00.0" % bus for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    assert all(gpu["uuid"].startswith("GPU-") and gpu["name"] == "NVIDIA H100 80GB HBM3" for gpu in result["gpus"])
    assert result["gpus"][3]["serial"] == "1652923001282"
    assert result["gpus"][0]["memory_total_mib"] == 81559


@TREE_FORMATS
def test_tree_formats_carry_cuda_version_minor_numbers_and_board_ids(fmt):
    result = parsed("h100x8", fmt)
    assert result["cuda_version"] == "12.8"
    assert result["timestamp"] == "Tue Mar 18 09:14:27 2025"
    assert [gpu["minor_number"] for gpu in result["gpus"]] == [2, 0, 3, 1, 6, 4, 7, 5]
    assert result["gpus"][1]["board_id"] == "0x2a00"
    assert result["gpus"][0]["vbios_version"] == "96.00.99.00.12"


def test_csv_has_no_minor_number_or_cuda_version():
    result = parsed("h100x8", "csv")
    assert result["cuda_version"] is None
    assert result["timestamp"] == "2025/03/18 09:14:27.512"
    assert {gpu["minor_number"] for gpu in result["gpus"]} == {None}


def test_xml_gpus_out_of_order_are_sorted_by_bus_id_and_trimmed_capture_is_data():
    result = nvsmi.parse_query_xml(fixture("v100_retired_pages_v10.xml"))
    assert_contract(result, "xml")
    assert result["attached_gpus"] == 4 and len(result["gpus"]) == 2
    assert result["unreadable"] == []
    assert [(gpu["bus_id"], gpu["minor_number"]) for gpu in result["gpus"]] == [
        ("00000000:1A:00.0", 0), ("00000000:8A:00.0", 2)]


def test_xml_gpu_blocks_in_reverse_order_parse_the_same():
    text = fixture("h100x8_v13.xml")
    blocks = re.findall(r"\t<gpu id=.*?</gpu>\n", text, re.S)
    reordered = text.replace("".join(blocks), "".join(reversed(blocks)))
    assert reordered != text
    assert nvsmi.parse_query_xml(reordered) == nvsmi.parse_query_xml(text)


# --------------------------------------------------------------------------------------------------------------------
# Field groups, each format
# --------------------------------------------------------------------------------------------------------------------

@ALL_FORMATS
def test_ecc_totals(fmt):
    gpu = only_gpu("degraded", fmt)
    assert gpu["ecc_mode"] == {"current": True, "pending": False}
    assert gpu["ecc_errors"] == {"volatile": {"correctable": 13, "uncorrectable": 2},
                                 "aggregate": {"correctable": 157, "uncorrectable": 4}}
    healthy = parsed("h100x8", fmt)["gpus"]
    assert [gpu["ecc_errors"]["aggregate"]["correctable"] for gpu in healthy] == [0, 3, 0, 0, 2, 0, 1, 0]
    assert {gpu["ecc_errors"]["volatile"]["uncorrectable"] for gpu in healthy} == {0}


def test_ecc_old_schema_prefers_total_and_v12_sram_total():
    v100 = nvsmi.parse_query_xml(fixture("v100_retired_pages_v10.xml"))["gpus"][1]
    assert v100["ecc_errors"] == {"volatile": {"correctable": 3, "uncorrectable": 1},
                                  "aggregate": {"correctable": 27, "uncorrectable": 1}}
    a100 = nvsmi.parse_query_xml(fixture("a100_mig_v12.xml"))["gpus"][0]
    assert a100["ecc_errors"] == {"volatile": {"correctable": 4, "uncorrectable": 0},
                                  "aggregate": {"correctable": 33, "uncorrectable": 1}}


def test_ecc_old_schema_sums_parts_when_total_is_missing():
    text = fixture("v100_retired_pages_v10.xml").replace("<total>27</total>", "<total>N/A</total>")
    assert nvsmi.parse_query_xml(text)["gpus"][1]["ecc_errors"]["aggregate"]["correctable"] == 27


def test_ecc_text_old_single_double_bit_layout():
    text = OLD_TEXT_GPU.format(sbe_total="5", pending="Yes")
    gpu = nvsmi.parse_query_text(text)["gpus"][0]
    assert gpu["ecc_errors"]["volatile"] == {"correctable": 5, "uncorrectable": 0}
    assert gpu["ecc_errors"]["aggregate"] == {"correctable": 9, "uncorrectable": 1}


OLD_TEXT_GPU = """
==============NVSMI LOG==============

Timestamp                           : Thu Feb 13 17:22:08 2020
Driver Version                      : 418.87.01
CUDA Version                        : 10.1

Attached GPUs                       : 1
GPU 00000000:8A:00.0
    Product Name                    : Tesla V100-SXM2-16GB
    Persistence Mode                : Enabled
    ECC Mode
        Current                     : Enabled
        Pending                     : Enabled
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 3
                Register File       : 0
                L1 Cache            : 0
                L2 Cache            : 0
                Texture Memory      : N/A
                Texture Shared      : N/A
                CBU                 : N/A
                Total               : {sbe_total}
            Double Bit
                Device Memory       : 0
                Total               : 0
        Aggregate
            Single Bit
                Device Memory       : 8
                L2 Cache            : 1
                Total               : N/A
            Double Bit
                Device Memory       : 1
                Total               : 1
    Retired Pages
        Single Bit ECC              : 2
        Double Bit ECC              : 1
        Pending Page Blacklist      : {pending}
    Temperature
        GPU Current Temp            : 41 C
        GPU Shutdown Temp           : 90 C
        GPU Slowdown Temp           : 87 C
        GPU Max Operating Temp      : 83 C
        Memory Current Temp         : 44 C
        Memory Max Operating Temp   : 85 C
    Power Readings
        Power Management            : Supported
        Power Draw                  : 44.07 W
        Power Limit                 : 300.00 W
        Default Power Limit         : 300.00 W
        Enforced Power Limit        : 300.00 W
        Min Power Limit             : 150.00 W
        Max Power Limit             : 300.00 W
    Clocks Throttle Reasons
        Idle                        : Not Active
        Applications Clocks Setting : Not Active
        SW Power Cap                : Not Active
        HW Slowdown                 : Active
            HW Thermal Slowdown     : Active
            HW Power Brake Slowdown : Not Active
        Sync Boost                  : Not Active
        SW Thermal Slowdown         : Not Active
        Display Clock Setting       : Not Active
    Processes                       : None
"""

OLD_CSV = """\
index, pci.bus_id, name, retired_pages.single_bit_ecc.count, retired_pages.double_bit.count, retired_pages.pending, \
temperature.gpu, power.draw [W], power.limit [W], enforced.power.limit [W], clocks_throttle_reasons.hw_slowdown
0, 00000000:8A:00.0, Tesla V100-SXM2-16GB, 2, 1, Yes, 41, 44.07 W, 300.00 W, 250.00 W, Active
"""


def test_retired_pages_xml_v10():
    gpus = nvsmi.parse_query_xml(fixture("v100_retired_pages_v10.xml"))["gpus"]
    assert gpus[0]["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpus[1]["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}


def test_retired_pages_text_and_csv():
    text_gpu = nvsmi.parse_query_text(OLD_TEXT_GPU.format(sbe_total="3", pending="Yes"))["gpus"][0]
    csv_gpu = nvsmi.parse_query_csv(OLD_CSV)["gpus"][0]
    assert text_gpu["retired_pages"] == csv_gpu["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}


def test_retired_pages_pending_blacklist_of_dtd_v9():
    text = fixture("v100_retired_pages_v10.xml").replace(
        "<pending_retirement>Yes</pending_retirement>", "<pending_blacklist>Yes</pending_blacklist>")
    assert nvsmi.parse_query_xml(text)["gpus"][1]["retired_pages"]["pending"] is True


@ALL_FORMATS
def test_retired_pages_not_available_on_h100(fmt):
    assert only_gpu("degraded", fmt)["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}


@TREE_FORMATS
def test_remapped_rows(fmt):
    expected = {"correctable": 3, "uncorrectable": 2, "pending": True, "failure": False}
    assert only_gpu("degraded", fmt)["remapped_rows"] == expected
    assert parsed("h100x8", fmt)["gpus"][4]["remapped_rows"]["correctable"] == 1


def test_remapped_rows_csv_by_header_name_and_absent_from_query_fields():
    expected = {"correctable": None, "uncorrectable": None, "pending": None, "failure": None}
    assert only_gpu("degraded", "csv")["remapped_rows"] == expected
    text = ("pci.bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
            "remapped_rows.failure\n00000000:AB:00.0, 3, 2, Yes, No\n")
    gpu = nvsmi.parse_query_csv(text)["gpus"][0]
    assert gpu["remapped_rows"] == {"correctable": 3, "uncorrectable": 2, "pending": True, "failure": False}


@ALL_FORMATS
def test_pcie_link(fmt):
    pcie = only_gpu("degraded", fmt)["pcie"]
    assert (pcie["gen_current"], pcie["gen_max"], pcie["width_current"], pcie["width_max"]) == (4, 5, 8, 16)


@TREE_FORMATS
def test_pcie_replays_and_device_host_max(fmt):
    pcie = only_gpu("degraded", fmt)["pcie"]
    assert pcie["replay_counter"] == 1289
    assert (pcie["gen_device_max"], pcie["gen_host_max"]) == (5, 5)


def test_pcie_gen_max_falls_back_to_min_of_device_and_host_max():
    text = fixture("h100_degraded_v13.xml").replace("<max_link_gen>5</max_link_gen>", "<max_link_gen>N/A</max_link_gen>")
    text = text.replace("<max_host_link_gen>5</max_host_link_gen>", "<max_host_link_gen>4</max_host_link_gen>")
    assert nvsmi.parse_query_xml(text)["gpus"][0]["pcie"]["gen_max"] == 4


@ALL_FORMATS
def test_temperature(fmt):
    temperature = only_gpu("degraded", fmt)["temperature"]
    assert (temperature["gpu_c"], temperature["memory_c"]) == (79, 88)
    assert temperature["slowdown_c"] is None  # new drivers print thresholds relative to T.Limit only


@TREE_FORMATS
def test_temperature_tlimit(fmt):
    temperature = only_gpu("degraded", fmt)["temperature"]
    assert (temperature["tlimit_c"], temperature["slowdown_tlimit_c"], temperature["shutdown_tlimit_c"]) == (4, -2, -8)


def test_temperature_absolute_thresholds_of_older_drivers():
    expected = {"gpu_c": 41, "memory_c": 44, "slowdown_c": 87, "shutdown_c": 90, "max_operating_c": 83,
                "max_memory_c": 85, "tlimit_c": None, "slowdown_tlimit_c": None, "shutdown_tlimit_c": None}
    assert nvsmi.parse_query_xml(fixture("v100_retired_pages_v10.xml"))["gpus"][1]["temperature"] == expected
    assert nvsmi.parse_query_text(OLD_TEXT_GPU.format(sbe_total="0", pending="No"))["gpus"][0]["temperature"] == expected


@ALL_FORMATS
def test_power(fmt):
    expected = {"draw_w": 689.37, "limit_w": 500.0, "default_limit_w": 700.0, "max_limit_w": 700.0}
    assert only_gpu("degraded", fmt)["power"] == expected


def test_power_old_layouts_use_the_enforced_limit():
    expected = {"draw_w": 44.07, "limit_w": 300.0, "default_limit_w": 300.0, "max_limit_w": 300.0}
    assert nvsmi.parse_query_xml(fixture("v100_retired_pages_v10.xml"))["gpus"][1]["power"] == expected
    assert nvsmi.parse_query_text(OLD_TEXT_GPU.format(sbe_total="0", pending="No"))["gpus"][0]["power"] == expected
    assert nvsmi.parse_query_csv(OLD_CSV)["gpus"][0]["power"]["limit_w"] == 250.0
    assert nvsmi.parse_query_xml(fixture("a100_mig_v12.xml"))["gpus"][0]["power"]["draw_w"] == 54.18


@ALL_FORMATS
def test_clock_event_reasons(fmt):
    reasons = only_gpu("degraded", fmt)["clock_event_reasons"]
    active = sorted(key for key, value in reasons.items() if value)
    assert active == ["hw_slowdown", "hw_thermal_slowdown", "sw_power_cap", "sw_thermal_slowdown"]
    assert ("display_clocks_setting" in reasons) is (fmt != "csv")  # not a --query-gpu field


def test_clock_throttle_reasons_of_older_drivers():
    gpu = nvsmi.parse_query_text(OLD_TEXT_GPU.format(sbe_total="0", pending="No"))["gpus"][0]
    assert gpu["clock_event_reasons"]["hw_thermal_slowdown"] is True
    assert gpu["clock_event_reasons"]["gpu_idle"] is False
    assert len(gpu["clock_event_reasons"]) == 9
    assert nvsmi.parse_query_xml(fixture("a100_mig_v12.xml"))["gpus"][0]["clock_event_reasons"]["gpu_idle"] is True
    assert nvsmi.parse_query_csv(OLD_CSV)["gpus"][0]["clock_event_reasons"] == {"hw_slowdown": True}


def test_clock_reasons_only_keys_the_input_has():
    text = fixture("h100_degraded_v13.xml")
    text = re.sub(r"\s*<clocks_event_reason_sync_boost>.*?</clocks_event_reason_sync_boost>", "", text)
    text = text.replace("<clocks_event_reason_gpu_idle>Not Active", "<clocks_event_reason_gpu_idle>N/A")
    reasons = nvsmi.parse_query_xml(text)["gpus"][0]["clock_event_reasons"]
    assert "sync_boost" not in reasons and "gpu_idle" not in reasons and reasons["hw_slowdown"] is True


def test_mig_xml():
    result = nvsmi.parse_query_xml(fixture("a100_mig_v12.xml"))
    gpu = result["gpus"][0]
    assert gpu["mig_mode"] == {"current": True, "pending": True}
    assert gpu["mig_devices"] == [
        {"gpu_instance_id": 1, "compute_instance_id": 0, "index": 0, "profile": None, "memory_total_mib": 19968},
        {"gpu_instance_id": 5, "compute_instance_id": 0, "index": 1, "profile": None, "memory_total_mib": 9728},
        {"gpu_instance_id": 13, "compute_instance_id": 0, "index": 2, "profile": None, "memory_total_mib": 4864}]
    assert gpu["utilization"] == {"gpu_pct": None, "memory_pct": None}  # N/A in MIG mode


MIG_TEXT = """
Attached GPUs                         : 1
GPU 00000000:4E:00.0
    Product Name                      : NVIDIA A100-SXM4-40GB
    MIG Mode
        Current                       : Enabled
        Pending                       : Disabled
{devices}    Processes                         : None
"""
MIG_DEVICE_NEW = """    MIG Device
        Index                         : {index}
        GPU Instance ID               : {gi}
        Compute Instance ID           : 0
        Shared FB Memory Usage
            Total                     : {mem} MiB
"""
MIG_DEVICE_OLD = """        MIG Device
            Index                     : {index}
            GPU Instance ID           : {gi}
            Compute Instance ID       : 0
            FB Memory Usage
                Total                 : {mem} MiB
"""


@pytest.mark.parametrize("device,wrapper", [(MIG_DEVICE_NEW, ""), (MIG_DEVICE_OLD, "    MIG Devices\n")])
def test_mig_text_both_layouts(device, wrapper):
    devices = wrapper + device.format(index=0, gi=1, mem=19968) + device.format(index=1, gi=5, mem=9728)
    gpu = nvsmi.parse_query_text(MIG_TEXT.format(devices=devices))["gpus"][0]
    assert gpu["mig_mode"] == {"current": True, "pending": False}
    assert [(d["index"], d["gpu_instance_id"], d["memory_total_mib"]) for d in gpu["mig_devices"]] == [
        (0, 1, 19968), (1, 5, 9728)]


@ALL_FORMATS
def test_mig_mode_disabled(fmt):
    gpu = only_gpu("degraded", fmt)
    assert gpu["mig_mode"] == {"current": False, "pending": False} and gpu["mig_devices"] == []


@TREE_FORMATS
def test_fabric(fmt):
    assert only_gpu("degraded", fmt)["fabric"] == {"state": "In Progress", "status": None}
    assert {(g["fabric"]["state"], g["fabric"]["status"]) for g in parsed("h100x8", fmt)["gpus"]} == {("Completed", "Success")}


def test_fabric_csv_by_header_name():
    gpu = nvsmi.parse_query_csv("pci.bus_id, fabric.state, fabric.status\n00000000:18:00.0, Completed, Success\n")["gpus"][0]
    assert gpu["fabric"] == {"state": "Completed", "status": "Success"}


@ALL_FORMATS
def test_persistence_and_utilization(fmt):
    gpu = only_gpu("degraded", fmt)
    assert gpu["persistence_mode"] is False
    assert gpu["utilization"] == {"gpu_pct": 97, "memory_pct": 61}
    assert {g["persistence_mode"] for g in parsed("h100x8", fmt)["gpus"]} == {True}


# --------------------------------------------------------------------------------------------------------------------
# Cross-format consistency
# --------------------------------------------------------------------------------------------------------------------

def _csv_carried(gpu):
    """The parts of a GPU that QUERY_GPU_FIELDS carries."""
    fields = set(nvsmi.QUERY_GPU_FIELDS)
    out = {"bus_id": gpu["bus_id"], "ecc_errors": gpu["ecc_errors"],
           "clock_event_reasons": {k: v for k, v in gpu["clock_event_reasons"].items() if k != "display_clocks_setting"}}
    for entry in nvsmi._FIELDS:  # pylint: disable=protected-access
        if fields.intersection(entry[5]):
            out[(entry[0], entry[1])] = gpu[entry[1]] if entry[0] is None else gpu[entry[0]][entry[1]]
    return out


@pytest.mark.parametrize("state", sorted(FILES))
def test_xml_and_text_parse_to_the_same_gpus(state):
    assert parsed(state, "xml")["gpus"] == parsed(state, "text")["gpus"]


@pytest.mark.parametrize("state", sorted(FILES))
def test_csv_agrees_with_xml_on_the_fields_it_carries(state):
    xml_gpus = [_csv_carried(gpu) for gpu in parsed(state, "xml")["gpus"]]
    csv_gpus = [_csv_carried(gpu) for gpu in parsed(state, "csv")["gpus"]]
    assert csv_gpus == xml_gpus
    assert len(xml_gpus[0]) >= 25


def test_csv_noheader_nounits_equals_csv_with_header_and_units():
    assert nvsmi.parse_query_csv(fixture("h100x8_query_noheader_nounits.csv")) == parsed("h100x8", "csv")


# --------------------------------------------------------------------------------------------------------------------
# nvidia-smi errors, mixed and damaged output
# --------------------------------------------------------------------------------------------------------------------

@ALL_FORMATS
@pytest.mark.parametrize("name,kind,bus_id", [
    ("error_driver_mismatch.txt", "driver_mismatch", None),
    ("error_no_driver.txt", "nvml_init", None),
    ("error_nvml_unknown.txt", "nvml_init", None),
    ("error_device_handle.txt", "device_handle", "00000000:9A:00.0"),
    ("error_gpu_lost.txt", "gpu_lost", "00000000:5D:00.0"),
    ("error_no_devices.txt", "no_devices", None),
])
def test_tool_error_messages(fmt, name, kind, bus_id):
    result = PARSERS[fmt](fixture(name))
    assert_contract(result, fmt)
    assert [(e["kind"], e["bus_id"]) for e in result["errors"]] == [(kind, bus_id)]
    assert result["gpus"] == [] and result["unreadable"] == []


def test_driver_mismatch_keeps_the_nvml_library_version():
    error = nvsmi.parse_query_text(fixture("error_driver_mismatch.txt"))["errors"][0]
    assert error["nvml_version"] == "570.133" and "570.133" in error["message"]


def test_quoted_error_from_a_markdown_capture():
    result = nvsmi.parse_query_text("> " + fixture("error_device_handle.txt"))
    assert result["errors"][0]["kind"] == "device_handle" and result["unreadable"] == []


def _without_gpu(text, bus, block_re):
    """``text`` with the block of GPU ``bus`` removed."""
    out, count = re.subn(block_re % bus, "", text, flags=re.S)
    assert count == 1
    return out


@pytest.mark.parametrize("fmt,block_re", [
    ("xml", r"\t<gpu id=\"00000000:%s:00.0\">.*?</gpu>\n"),
    ("text", r"GPU 00000000:%s:00.0\n.*?\n\n"),
    ("csv", r"\d, 00000000:%s:00.0[^\n]*\n"),
])
def test_error_line_for_one_gpu_plus_output_for_the_rest(fmt, block_re):
    text = fixture("error_device_handle.txt") + _without_gpu(fixture(FILES["h100x8"][fmt]), "9A", block_re)
    result = PARSERS[fmt](text)
    assert [(e["kind"], e["bus_id"]) for e in result["errors"]] == [("device_handle", "00000000:9A:00.0")]
    assert len(result["gpus"]) == 7 and result["unreadable"] == []
    assert result["attached_gpus"] == 8


def test_truncated_xml_keeps_the_complete_gpus():
    text = fixture("h100x8_v13.xml")
    cut = text.index('<gpu id="00000000:9A:00.0">') + 4000
    result = nvsmi.parse_query_xml(text[:cut])
    assert [gpu["bus_id"][9:11] for gpu in result["gpus"]] == ["18", "2A", "3A", "5D"]
    assert len(result["unreadable"]) == 1 and "4 complete <gpu> elements" in result["unreadable"][0]


def test_truncated_text_reports_the_missing_sections():
    text = fixture("h100x8_q.txt")
    cut = text.index("GPU 00000000:DB:00.0")
    cut = text.index("    Clocks Event Reasons Counters", cut)
    result = nvsmi.parse_query_text(text[:cut])
    assert len(result["gpus"]) == 8
    assert result["gpus"][7]["temperature"]["gpu_c"] is None
    assert result["unreadable"] == [
        "gpu 00000000:DB:00.0: GPU section is cut short (no Processes section); missing: FB Memory Usage, Utilization, "
        "ECC Mode, ECC Errors, Retired Pages, Remapped Rows, Temperature, GPU Power Readings"]


def test_text_elisions_are_reported():
    text = fixture("h100_degraded_q.txt").replace("    Accounting Mode ", "    [...]\n    Accounting Mode ", 1)
    result = nvsmi.parse_query_text(text)
    assert result["unreadable"] == ["text: line 21 is an elision '[...]': the lines left out are missing"]
    assert result["gpus"][0]["remapped_rows"]["pending"] is True


def test_per_gpu_error_values():
    text = fixture("h100_degraded_v13.xml").replace("<gpu_temp>79 C</gpu_temp>", "<gpu_temp>Unknown Error</gpu_temp>")
    text = text.replace("<product_name>NVIDIA H100 80GB HBM3", "<product_name>[GPU requires reset]")
    gpu = nvsmi.parse_query_xml(text)["gpus"][0]
    assert gpu["temperature"]["gpu_c"] is None and gpu["name"] is None
    assert gpu["errors"] == ["product_name: [GPU requires reset]", "temperature/gpu_temp: Unknown Error"]


def test_bad_values_are_unreadable_not_raised():
    text = fixture("h100_degraded_v13.xml").replace("<gpu_temp>79 C</gpu_temp>", "<gpu_temp>hot</gpu_temp>")
    result = nvsmi.parse_query_xml(text)
    assert result["unreadable"] == ["gpu 00000000:AB:00.0: temperature/gpu_temp value 'hot' is not a number"]


@pytest.mark.parametrize("text,note", [
    ("", None),
    ("<nvidia_smi_log><gpu id='1'>", "xml: no element found"),
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log/>', "xml: entity declarations"),
    ("<?xml version='1.0'?><other/>", "xml: root element <other>"),
    ("random words", "xml: no <nvidia_smi_log> document"),
])
def test_xml_damage(text, note):
    result = nvsmi.parse_query_xml(text)
    assert_contract(result, "xml")
    assert result["gpus"] == []
    if note is None:
        assert result["unreadable"] == []
    else:
        assert result["unreadable"] and result["unreadable"][0].startswith(note)


def test_csv_column_mismatch_and_special_values():
    header = "index, pci.bus_id, name, temperature.gpu, power.draw [W], ecc.mode.current\n"
    rows = ("0, 00000000:18:00.0, NVIDIA H100 80GB HBM3, [Not Supported], [Requested functionality has been deprecated], "
            "[N/A]\n1, 00000000:2A:00.0, too few\n")
    result = nvsmi.parse_query_csv(header + rows)
    assert len(result["gpus"]) == 1
    gpu = result["gpus"][0]
    assert (gpu["temperature"]["gpu_c"], gpu["power"]["draw_w"], gpu["ecc_mode"]["current"]) == (None, None, None)
    assert result["unreadable"] == ["csv: line 3 has 3 columns, the header 6"]


def test_csv_alias_names_and_crlf():
    text = "gpu_name, gpu_bus_id, gpu_uuid\r\nNVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0\r\n"
    gpu = nvsmi.parse_query_csv(text)["gpus"][0]
    assert (gpu["name"], gpu["bus_id"], gpu["uuid"][:12]) == ("NVIDIA H100 80GB HBM3", "00000000:18:00.0", "GPU-3f1c0a00")


def test_query_gpu_fields_are_documented_names():
    assert len(set(nvsmi.QUERY_GPU_FIELDS)) == len(nvsmi.QUERY_GPU_FIELDS)
    assert "minor_number" not in nvsmi.QUERY_GPU_FIELDS  # not a --query-gpu field on any driver
    assert all(re.match(r"^[a-z_]+(\.[a-z_]+)*$", name) for name in nvsmi.QUERY_GPU_FIELDS)


# The "never raises" property tests of the three parsers (random text, damaged samples): test_parsers_never_raise.py.


# --------------------------------------------------------------------------------------------------------------------
# Speed
# --------------------------------------------------------------------------------------------------------------------

def test_parsing_speed():
    timings = {}
    for fmt in ("xml", "text", "csv"):
        text = fixture(FILES["h100x8"][fmt])
        PARSERS[fmt](text)
        start = time.process_time()
        for _repeat in range(20):
            PARSERS[fmt](text)
        timings[fmt] = (time.process_time() - start) / 20 * 1000
    print("8x H100 parse CPU ms: " + ", ".join("%s %.1f" % item for item in sorted(timings.items())))
    assert timings["xml"] < 60 and timings["csv"] < 20


# --------------------------------------------------------------------------------------------------------------------
# Real captures
# --------------------------------------------------------------------------------------------------------------------

def assert_sane(result, source):
    """Every GPU has a normalised bus id, a GPU- (or masked) uuid and a name, or the output went to errors/unreadable."""
    assert_contract(result, source)
    assert result["gpus"] or result["errors"] or result["unreadable"]
    for gpu in result["gpus"]:
        assert gpu["bus_id"] is None or re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", gpu["bus_id"])
        assert gpu["uuid"] is None or gpu["uuid"].startswith("GPU-")
        assert gpu["name"] is None or gpu["name"].strip()
        for value in (gpu["temperature"]["gpu_c"], gpu["power"]["draw_w"], gpu["memory_total_mib"]):
            assert value is None or value >= 0


@realdata
@pytest.mark.parametrize("path", real_files("nvidia-smi-xml"), ids=ids(real_files("nvidia-smi-xml")))
def test_real_xml(path):
    result = nvsmi.parse_query_xml(read_text(path))
    assert_sane(result, "xml")
    assert result["gpus"] and result["unreadable"] == [] and result["errors"] == []
    assert all(gpu["name"] and gpu["bus_id"] for gpu in result["gpus"])


@realdata
@pytest.mark.parametrize("path", real_files("nvidia-smi-q") + peer_files("nvsmi"),
                         ids=ids(real_files("nvidia-smi-q") + peer_files("nvsmi")))
def test_real_text(path):
    assert_sane(nvsmi.parse_query_text(read_text(path)), "text")


@realdata
@pytest.mark.parametrize("path", real_files("nvidia-smi-csv"), ids=ids(real_files("nvidia-smi-csv")))
def test_real_csv(path):
    assert_sane(nvsmi.parse_query_csv(read_text(path)), "csv")


@realdata
def test_real_known_values_xml():
    mig = nvsmi.parse_query_xml(real_text("nvidia-smi-xml", "telegraf_a100-sxm4-80gb_mig_drv535.xml"))
    assert mig["attached_gpus"] == 4 and len(mig["gpus"]) == 1
    assert [(d["gpu_instance_id"], d["memory_total_mib"]) for d in mig["gpus"][0]["mig_devices"]] == [
        (3, 19968), (4, 19968), (5, 19968), (6, 19968)]
    assert len(nvsmi.parse_query_xml(real_text("nvidia-smi-xml", "netdata_a100-sxm4-40gb_mig_drv510.xml"))["gpus"][0]["mig_devices"]) == 2
    dgx2 = nvsmi.parse_query_xml(real_text("nvidia-smi-xml", "openpai_v100-sxm3-32gb_dgx2_retired-pages_drv410.xml"))
    assert dgx2["gpus"][0]["retired_pages"] == {"single_bit": 0, "double_bit": 2, "pending": True}
    assert dgx2["attached_gpus"] == 16
    k80 = nvsmi.parse_query_xml(real_text("nvidia-smi-xml", "openpai_4xtesla-k80_retired-pages_drv430.xml"))
    assert [g["minor_number"] for g in k80["gpus"]] == [1, 2, 3, 0]
    assert [g["bus_id"] for g in k80["gpus"]] == sorted(g["bus_id"] for g in k80["gpus"])
    v13 = nvsmi.parse_query_xml(real_text("nvidia-smi-xml", "telegraf_rtx-4000-sff-ada_v13_drv595.xml"))["gpus"][0]
    assert v13["clock_event_reasons"]["gpu_idle"] is True and v13["temperature"]["tlimit_c"] == 49


@realdata
def test_real_known_values_text():
    h100 = nvsmi.parse_query_text(real_text("nvidia-smi-q", "gpuexporter_h100-80gb-hbm3_load_q.txt"))["gpus"][0]
    assert h100["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert h100["fabric"] == {"state": "Completed", "status": "Success"}
    excerpt = nvsmi.parse_query_text(real_text("nvidia-smi-q", "mleng_a100-sxm4-80gb_q_remapped-rows-pending_excerpt.txt"))
    gpu = excerpt["gpus"][0]
    assert gpu["ecc_errors"]["volatile"]["correctable"] == 177
    assert gpu["remapped_rows"] == {"correctable": 1, "uncorrectable": 0, "pending": True, "failure": False}
    assert sum("elision" in note for note in excerpt["unreadable"]) == 2
    truncated = nvsmi.parse_query_text(real_text("nvidia-smi-q", "gpud_h100_drv535.183.01_q_truncated-invalid.txt"))
    assert truncated["attached_gpus"] == 8 and len(truncated["gpus"]) == 1
    assert "missing: FB Memory Usage" in truncated["unreadable"][0] and "ECC Errors" in truncated["unreadable"][0]
    handle = nvsmi.parse_query_text(real_text("nvidia-smi-q", "gpud_nvidia-smi_unable-to-determine-device-handle_quoted.txt"))
    assert handle["errors"][0]["bus_id"] == "00000000:91:00.0"
    h200 = nvsmi.parse_query_text(real_text("nvidia-smi-q", "gpuexporter_h200-mig_load_q.txt"))["gpus"][0]
    assert [d["gpu_instance_id"] for d in h200["mig_devices"]] == [2, 2, 3, 9, 10]
    hgx = nvsmi.parse_query_text(real_text("nvidia-smi-q", "gpud_8xh100-80gb-hbm3_drv535.161.08_q.txt"))
    assert len(hgx["gpus"]) == 8 and hgx["gpus"][0]["clock_event_reasons"]["hw_power_brake_slowdown"] is True


@realdata
def test_real_known_values_csv():
    h100 = nvsmi.parse_query_csv(real_text("nvidia-smi-csv", "gpuexporter_h100-80gb-hbm3_load_query-gpu-all.csv"))["gpus"][0]
    assert h100["remapped_rows"]["pending"] is False and h100["fabric"]["state"] == "Completed"
    assert h100["power"]["draw_w"] == 631.95 and h100["temperature"]["tlimit_c"] == 26
    mig = nvsmi.parse_query_csv(real_text("nvidia-smi-csv", "gpuexporter_h100-mig_load_query-gpu-all.csv"))["gpus"][0]
    assert mig["mig_mode"]["current"] is True


CAPTURE_PARSERS = (("-q -x", "xml"), ("--query-gpu=", "csv"), ("-q", "text"))


@realdata
@pytest.mark.parametrize("path", real_files("captures"), ids=ids(real_files("captures")))
def test_real_capture_sections(path):
    parsed_sections = 0
    for command, body in capture_sections(read_text(path)):
        nvsmi.parse_query_text(body)  # every section, whatever it is: must not raise
        for flag, fmt in CAPTURE_PARSERS:
            if command.startswith("nvidia-smi ") and command.split(" ", 1)[1].startswith(flag):
                result = PARSERS[fmt](body)
                assert_sane(result, fmt)
                assert len(result["gpus"]) == 1 and result["unreadable"] == []
                parsed_sections += 1
                break
    assert parsed_sections == 4
