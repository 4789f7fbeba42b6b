# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Each fault changes what it should, everywhere real hardware shows it, and nothing else."""

import csv
import fnmatch
import json
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

SMI_ALL = {"xml", "text", "csv", "list", "table", "nvlink_s", "nvlink_e", "topo", "version"}
GPU_STATE = {"xml", "text", "csv"}
DCGM = {"dcgm", "dcgm_text"}

# fault spec -> the outputs (see conftest.all_outputs) that change on the H100 profile
EXPECTED_OUTPUTS = {
    "gpu_missing:gpu=7": SMI_ALL - {"version"} | DCGM | {"nccl"},
    "wrong_model:gpu=2": GPU_STATE | {"list", "table", "nvlink_s", "nvlink_e", "nccl"},
    "driver_version": GPU_STATE | {"table", "version", "kernel"} | DCGM,
    "nvml_mismatch": SMI_ALL | DCGM | {"nccl", "kernel"},
    "driver_not_loaded": SMI_ALL | DCGM | {"nccl", "kernel"},
    "fallen_off_bus:gpu=3": SMI_ALL - {"version"} | DCGM | {"nccl", "kernel"},
    "persistence_off:gpu=1": GPU_STATE | {"table"} | DCGM,
    "ecc_disabled:gpu=1": GPU_STATE | {"table"} | DCGM,
    "ecc_pending_change:gpu=1": GPU_STATE,
    "ecc_uncorrectable_volatile:gpu=1": GPU_STATE | {"table", "kernel"} | DCGM,
    "ecc_uncorrectable_aggregate:gpu=1": GPU_STATE,
    "retired_pages_dbe:gpu=1": GPU_STATE,
    "retired_pages_pending:gpu=1": GPU_STATE | DCGM,
    "row_remap_pending:gpu=1": GPU_STATE | {"table", "kernel"} | DCGM,
    "row_remap_failure:gpu=1": GPU_STATE | {"kernel"} | DCGM,
    "nvlink_inactive:gpu=1,value=4": {"nvlink_s", "topo", "nccl"} | DCGM,
    "nvlink_errors:gpu=1": {"nvlink_e"} | DCGM,
    "pcie_downgraded:gpu=1": GPU_STATE | DCGM,
    "gpu_hot:gpu=1": GPU_STATE | {"table"} | DCGM,
    "memory_hot:gpu=1": GPU_STATE,
    "power_over_limit:gpu=1": GPU_STATE | {"table"},
    "power_capped:gpu=1": GPU_STATE | {"table"},
    "clock_hw_slowdown:gpu=1": GPU_STATE,
    "clock_thermal:gpu=1": GPU_STATE | {"table"} | DCGM,
    "clock_power_brake:gpu=1": GPU_STATE,
    "xid_app:gpu=1": {"kernel"},
    "xid_error:gpu=1,value=74": {"kernel"},
    "sxid_fatal:value=2": {"kernel"},
    "ib_port_down:port=mlx5_3/1": {"ibstat", "ibstatus", "sysfs", "kernel"},
    "ib_rate_low:port=mlx5_3": {"ibstat", "ibstatus", "sysfs"},
    "ib_port_missing:port=mlx5_3": {"ibstat", "ibstatus", "sysfs", "topo"},
    "ib_link_flap:port=mlx5_3": {"sysfs", "kernel"},
    "fabricmanager_down": {"xml", "text", "fm", "nccl"},
    "fabricmanager_version:value=550.54.15": {"xml", "text", "fm", "nccl"},
    "nvlink_degraded:gpu=1,value=recoverable": {"nvlink_s", "topo", "nccl"} | DCGM,
    "gpu_busy:gpu=1": GPU_STATE | {"table"},
    "gpu_in_use:gpu=1": set(),   # shows in nvidia-smi -r only (test_gpusim_services.py)
    "dcgm_fail:gpu=1": DCGM,
    "nccl_low_bw": {"nccl"},
}

# fault spec -> XML paths (under <gpu>) that may change, all on the faulted GPU
EXPECTED_XML = {
    "wrong_model:gpu=2": ["product_name"],
    "persistence_off:gpu=1": ["persistence_mode"],
    "ecc_disabled:gpu=1": ["ecc_mode/*", "ecc_errors/*"],
    "ecc_pending_change:gpu=1": ["ecc_mode/pending_ecc"],
    "ecc_uncorrectable_volatile:gpu=1": ["ecc_errors/*/dram_uncorrectable"],
    "ecc_uncorrectable_aggregate:gpu=1": ["ecc_errors/aggregate/dram_uncorrectable"],
    "retired_pages_dbe:gpu=1": ["retired_pages/*"],
    "retired_pages_pending:gpu=1": ["retired_pages/*"],
    "row_remap_pending:gpu=1": ["remapped_rows/*", "ecc_errors/*/dram_uncorrectable"],
    "row_remap_failure:gpu=1": ["remapped_rows/*", "ecc_errors/aggregate/dram_uncorrectable"],
    "pcie_downgraded:gpu=1": ["pci/pci_gpu_link_info/pcie_gen/*current_link_gen",
                              "pci/pci_gpu_link_info/link_widths/current_link_width"],
    "gpu_hot:gpu=1": ["temperature/gpu_temp", "temperature/gpu_temp_tlimit", "clocks_event_reasons/*", "clocks/*"],
    "clock_thermal:gpu=1": ["temperature/gpu_temp", "temperature/gpu_temp_tlimit", "clocks_event_reasons/*",
                            "clocks/*"],
    "memory_hot:gpu=1": ["temperature/memory_temp"],
    "power_over_limit:gpu=1": ["gpu_power_readings/power_draw", "clocks_event_reasons/*", "clocks/*"],
    "power_capped:gpu=1": ["gpu_power_readings/current_power_limit", "gpu_power_readings/requested_power_limit"],
    "clock_hw_slowdown:gpu=1": ["clocks_event_reasons/*", "clocks/*"],
    "clock_power_brake:gpu=1": ["clocks_event_reasons/*", "clocks/*"],
}


@pytest.fixture(name="healthy", scope="module")
def fixture_healthy(profile, outputs):
    return outputs(profile())


def test_persistent_nvlink_degradation_shows_as_the_recoverable_one_until_a_restart(profile, outputs):
    # the two kinds differ only after a fabric manager restart (test_gpusim_services.py)
    recoverable = outputs(profile(), ["nvlink_degraded:gpu=1,value=recoverable"])
    assert outputs(profile(), ["nvlink_degraded:gpu=1,value=persistent"]) == recoverable
    assert "Link 1: <inactive>" in recoverable["nvlink_s"] and "Link 2: <inactive>" not in recoverable["nvlink_s"]


def test_every_fault_has_an_expectation():
    assert sorted(spec.split(":")[0] for spec in EXPECTED_OUTPUTS) == sorted(gpusim.FAULTS)


@pytest.mark.parametrize("spec", sorted(EXPECTED_OUTPUTS))
def test_fault_changes_the_outputs_that_show_it_and_no_other(spec, healthy, profile, outputs):
    faulted = outputs(profile(), [spec])
    changed = set(key for key in healthy if healthy[key] != faulted[key])
    assert changed == EXPECTED_OUTPUTS[spec]


def flat_xml(text):
    """{gpu bus id: {path: text}} of nvidia-smi -q -x (repeated tags get an index)."""
    root = ET.fromstring(text[text.index("<?xml"):])
    result = {}
    for gpu in root.findall("gpu"):
        flat = {}

        def walk(element, prefix):
            seen = {}
            for child in element:
                seen[child.tag] = seen.get(child.tag, -1) + 1
                path = prefix + child.tag + ("[%d]" % seen[child.tag] if seen[child.tag] else "")
                flat[path] = (child.text or "").strip()
                walk(child, path + "/")
        walk(gpu, "")
        result[gpu.get("id")] = flat
    return result


@pytest.mark.parametrize("spec", sorted(EXPECTED_XML))
def test_fault_changes_only_its_own_xml_elements_on_its_own_gpu(spec, healthy, profile, outputs):
    faulted = flat_xml(outputs(profile(), [spec])["xml"])
    before = flat_xml(healthy["xml"])
    target = gpusim.build_node(profile(), {}, [spec]).gpus[int(spec.split("gpu=")[1].split(",")[0])]["bus_id"]
    for bus_id, elements in faulted.items():
        changed = set(p for p in set(elements) | set(before[bus_id]) if elements.get(p) != before[bus_id].get(p))
        if bus_id != target:
            assert not changed, (bus_id, changed)
            continue
        assert changed, "the fault changed nothing on its GPU"
        stray = [p for p in changed if not any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern + "/*")
                                               for pattern in EXPECTED_XML[spec])]
        assert not stray, stray


def csv_rows(text):
    rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    return [dict(zip(rows[0], row)) for row in rows[1:]]


@pytest.mark.parametrize("spec, column, value", [
    ("persistence_off:gpu=1", "persistence_mode", "Disabled"),
    ("ecc_disabled:gpu=1", "ecc.mode.current", "Disabled"),
    ("ecc_pending_change:gpu=1", "ecc.mode.pending", "Disabled"),
    ("ecc_uncorrectable_volatile:gpu=1,value=3", "ecc.errors.uncorrected.volatile.total", "3"),
    ("ecc_uncorrectable_aggregate:gpu=1,value=5", "ecc.errors.uncorrected.aggregate.total", "5"),
    ("retired_pages_dbe:gpu=1,value=2", "retired_pages.double_bit.count", "2"),
    ("retired_pages_pending:gpu=1", "retired_pages.pending", "Yes"),
    ("pcie_downgraded:gpu=1", "pcie.link.width.current", "8"),
    ("pcie_downgraded:gpu=1", "pcie.link.gen.current", "4"),
    ("gpu_hot:gpu=1,value=92", "temperature.gpu", "92"),
    ("memory_hot:gpu=1,value=99", "temperature.memory", "99"),
    ("power_over_limit:gpu=1,value=731.5", "power.draw [W]", "731.50 W"),
    ("power_over_limit:gpu=1", "clocks_event_reasons.sw_power_cap", "Active"),
    ("power_capped:gpu=1,value=450", "enforced.power.limit [W]", "450.00 W"),
    ("clock_hw_slowdown:gpu=1", "clocks_event_reasons.hw_slowdown", "Active"),
    ("clock_thermal:gpu=1", "clocks_event_reasons.hw_thermal_slowdown", "Active"),
    ("clock_thermal:gpu=1", "clocks_event_reasons.sw_thermal_slowdown", "Active"),
    ("clock_power_brake:gpu=1", "clocks_event_reasons.hw_power_brake_slowdown", "Active"),
    ("wrong_model:gpu=1,value=NVIDIA H800", "name", "NVIDIA H800"),
    ("gpu_busy:gpu=1,value=77", "utilization.gpu [%]", "77 %"),
])
def test_csv_shows_the_fault_on_its_gpu(spec, column, value, profile, outputs):
    rows = csv_rows(outputs(profile(), [spec])["csv"])
    assert rows[1][column] == value
    assert all(row[column] != value for index, row in enumerate(rows) if index != 1)


def test_gpu_missing_is_gone_from_every_output(profile, outputs):
    faulted = outputs(profile(), ["gpu_missing:gpu=3"])
    gone = gpusim.build_node(profile(), {}).gpus[3]
    for key in ("xml", "text", "csv", "list", "table", "nvlink_s", "nvlink_e"):
        assert gone["uuid"] not in faulted[key] and gone["bus_id"] not in faulted[key], key
    assert "<attached_gpus>7</attached_gpus>" in faulted["xml"]
    assert faulted["list"].count("GPU ") == 7 and faulted["list"].startswith("GPU 0:")
    assert "GPU7" not in faulted["topo"] and "GPU6\t" in faulted["topo"]
    rc, out, _err = gpusim.run_tool("all_reduce_perf", ["-g", "8"], {}, profile(), ["gpu_missing:gpu=3"])
    assert rc == 2 and "'invalid device ordinal'" in out


def test_fallen_off_bus_as_nvidia_smi_prints_it(profile, outputs):
    faulted = outputs(profile(), ["fallen_off_bus:gpu=3"])
    line = "Unable to determine the device handle for GPU0000:5D:00.0: Unknown Error\n"
    for key in ("xml", "text", "csv", "list", "table", "nvlink_s", "topo"):
        assert faulted[key].startswith("rc=255\n" + line), key
    assert "<attached_gpus>8</attached_gpus>" in faulted["xml"]
    assert faulted["xml"].count("<gpu id=") == 7
    assert "GPU 2:" in faulted["list"] and "GPU 3:" not in faulted["list"] and "GPU 4:" in faulted["list"]
    assert "Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." in \
        faulted["kernel"]


def test_driver_failures_fail_every_nvidia_smi_call(profile, outputs):
    mismatch = outputs(profile(), ["nvml_mismatch:value=550.144.03"])
    for key in SMI_ALL:
        assert mismatch[key] == ("rc=18\nFailed to initialize NVML: Driver/library version mismatch\n"
                                 "NVML library version: 550.144\n---\n"), key
    assert "NVRM: API mismatch: the client has the version 550.144.03, but" in mismatch["kernel"]
    missing = outputs(profile(), ["driver_not_loaded"])
    for key in SMI_ALL:
        assert missing[key].startswith("rc=9\nNVIDIA-SMI has failed because it couldn't communicate with the "
                                       "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and "
                                       "running.\n\n"), key


def test_fabricmanager_down_shows_in_the_fabric_state(profile, outputs):
    faulted = outputs(profile(), ["fabricmanager_down"])
    assert faulted["fm"] == "rc=3\ninactive\n---\n"
    assert faulted["xml"].count("<state>In Progress</state>") == 8
    assert "'system not yet initialized'" in faulted["nccl"]
    a100 = outputs(profile("a100-sxm-8"), ["fabricmanager_down"])
    assert a100["fm"] == "rc=3\ninactive\n---\n" and "<state>N/A</state>" in a100["xml"]


def test_nccl_low_bandwidth_plateaus_at_a_third(profile, outputs):
    def plateau(text):
        return float([line for line in text.splitlines() if line.strip().startswith("8589934592")][0].split()[7])
    normal = plateau(outputs(profile())["nccl"])
    low = plateau(outputs(profile(), ["nccl_low_bw"])["nccl"])
    assert abs(low - normal / 3) < 1.0


def test_ib_port_down_in_sysfs(profile, outputs):
    sysfs = json.loads(outputs(profile(), ["ib_port_down:port=mlx5_3,value=Polling"])["sysfs"])
    assert sysfs["mlx5_3/ports/1/state"] == "1: DOWN\n"
    assert sysfs["mlx5_3/ports/1/phys_state"] == "2: Polling\n"
    assert sysfs["mlx5_3/ports/1/counters/link_downed"] == "1\n"


def test_ib_link_flap_counts_link_downed(profile, outputs):
    sysfs = json.loads(outputs(profile(), ["ib_link_flap:port=mlx5_2/1,value=5"])["sysfs"])
    assert sysfs["mlx5_2/ports/1/counters/link_downed"] == "5\n"
    assert sysfs["mlx5_2/ports/1/state"] == "4: ACTIVE\n"


def test_ib_rate_low_on_an_ndr_port(profile, outputs):
    faulted = outputs(profile(), ["ib_rate_low:port=mlx5_0"])
    assert "\t\tRate: 200\n" in faulted["ibstat"]
    assert "rate:\t\t 200 Gb/sec (4X HDR)" in faulted["ibstatus"]


def test_dcgm_findings_follow_the_gpu_state(profile, outputs):
    def failing(spec):
        text = outputs(profile(), [spec])["dcgm"]
        if text.startswith("rc="):
            text = text.split("\n", 1)[1].rsplit("---\n", 1)[0]
        data = json.loads(text)["DCGM GPU Diagnostic"]
        return sorted((test["name"], result.get("gpu_ids"), result["status"])
                      for category in data["test_categories"] for test in category["tests"]
                      for result in test["results"] if result["status"] != "Pass")
    assert failing("persistence_off:gpu=2") == [("Persistence Mode", None, "Fail")]
    assert failing("pcie_downgraded:gpu=2") == [("PCIe", "2", "Fail")]
    assert failing("nvlink_inactive:gpu=2") == [("PCIe", "2", "Fail")]
    assert failing("gpu_hot:gpu=2") == [("GPU Memory", "2", "Fail")]
    assert failing("ecc_disabled:gpu=2") == [("GPU Memory", "2", "Skip")]
    assert failing("dcgm_fail:gpu=5,value=Targeted Stress") == [("Targeted Stress", "5", "Fail")]


def test_fault_specs_and_errors(profile):
    with pytest.raises(gpusim.SimError) as error:
        gpusim.build_node(profile(), {}, ["no_such_fault"])
    assert "unknown fault 'no_such_fault'" in error.value.stderr
    with pytest.raises(gpusim.SimError):
        gpusim.build_node(profile(), {}, ["gpu_hot:gpu=x"])
    with pytest.raises(gpusim.SimError):
        gpusim.build_node(profile(), {}, ["gpu_hot:gpu=9"])
    with pytest.raises(gpusim.SimError):
        gpusim.build_node(profile("l40s-pcie-4"), {}, ["nvlink_inactive"])
    with pytest.raises(gpusim.SimError):
        gpusim.build_node(profile("l40s-pcie-4"), {}, ["sxid_fatal"])
    with pytest.raises(gpusim.SimError):
        gpusim.build_node(profile(), {}, ["ib_port_down:port=mlx5_42"])
    node = gpusim.build_node(profile(), {}, [{"name": "gpu_hot", "gpu": "4", "value": 95}])
    assert node.gpus[4]["temp"] == 95


def test_gpu_missing_uses_board_indices_for_other_faults(profile):
    node = gpusim.build_node(profile(), {}, ["gpu_missing:gpu=2", "gpu_hot:gpu=5"])
    assert [g["index"] for g in node.gpus] == list(range(7))
    assert node.gpus[4]["temp"] > 85 and node.gpus[4]["slot"] == 5


def test_hot_gpu_thresholds_are_relative_to_tlimit_on_hopper(profile, outputs):
    """absolute threshold = current + T.Limit headroom - relative threshold (docs/health-model.md)."""
    gpu = flat_xml(outputs(profile(), ["gpu_hot:gpu=1,value=91"])["xml"])["00000000:2A:00.0"]

    def degrees(key):
        return int(gpu["temperature/" + key].split()[0])
    assert degrees("gpu_temp") == 91 and degrees("gpu_temp_tlimit") == -5
    assert degrees("gpu_temp") + degrees("gpu_temp_tlimit") - degrees("gpu_temp_slow_tlimit_threshold") == 88
    assert degrees("gpu_temp") + degrees("gpu_temp_tlimit") - degrees("gpu_temp_max_tlimit_threshold") == 94
    a100 = flat_xml(outputs(profile("a100-sxm-8"), ["gpu_hot:gpu=1"])["xml"])["00000000:0F:00.0"]
    assert a100["temperature/gpu_temp_slow_threshold"] == "89 C" and a100["temperature/gpu_temp"] == "91 C"
