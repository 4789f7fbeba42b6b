# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The simulator prints what the real tools print: compared with the real captures in ../shared/fixtures/real."""

import csv
import re
import xml.etree.ElementTree as ET

import pytest
from skip_policy import require_shared

pytestmark = pytest.mark.realdata

MIG_DEVICE_PATHS = "gpu/mig_devices/mig_device"
PROCESS_PATHS = "gpu/processes/process_info"


def xml_paths(text, gpu_index=0):
    """The element paths under one <gpu> element."""
    gpu = ET.fromstring(text[text.index("<?xml"):]).findall("gpu")[gpu_index]
    paths = set()

    def walk(element, prefix):
        for child in element:
            path = prefix + "/" + child.tag
            paths.add(path)
            walk(child, path)
    walk(gpu, "gpu")
    return paths


def text_keys(text, block=1):
    """(indentation + key, has a value) of every line of one GPU block of nvidia-smi -q."""
    keys, current = [], 0
    for line in text.splitlines():
        if line.startswith("GPU "):
            current += 1
            continue
        if current != block or not line.strip():
            continue
        match = re.match(r"^( *)(.*?)(\s*: .*)?$", line)
        keys.append((match.group(1) + (match.group(2).rstrip() if match.group(3) else match.group(2)),
                     bool(match.group(3))))
    return keys


def smi(sim, env, profile, *args, faults=()):
    rc, out, err = sim.run_tool("nvidia-smi", list(args), env, profile, faults)
    assert rc == 0, (out, err)
    return out


# ---- nvidia-smi -q -x ----------------------------------------------------------------------------------------

def test_xml_paths_equal_the_v13_dtd_capture(sim, env, profile, read_real):
    """A v13 driver (595.84, the RTX 4000 SFF Ada capture) has exactly our element paths.

    The one difference: the capture lists running processes (process_info); a simulated node runs none.
    """
    real = xml_paths(read_real("nvidia-smi-xml/telegraf_rtx-4000-sff-ada_v13_drv595.xml"))
    mine_text = smi(sim, env, profile("h100-sxm-8", driver_version="595.84"), "-q", "-x")
    assert '"nvsmi_device_v13.dtd"' in mine_text
    mine = xml_paths(mine_text)
    assert mine - real == set()
    assert all(p.startswith(PROCESS_PATHS) for p in real - mine), sorted(real - mine)


def test_xml_paths_equal_the_v12_a100_capture(sim, env, profile, read_real):
    """The A100 profile on the capture's driver (535.54.03, DTD v12) has the capture's element paths.

    Differences, both from the capture's GPU being in MIG mode: its <mig_devices> has MIG instances, and its
    <remapped_rows> is N/A (nvidia-smi does not report row remapping while MIG is on).
    """
    real = xml_paths(read_real("nvidia-smi-xml/telegraf_a100-sxm4-80gb_mig_drv535.xml"))
    mine = xml_paths(smi(sim, env, profile("a100-sxm-8", driver_version="535.54.03"), "-q", "-x"))
    assert all(p.startswith(MIG_DEVICE_PATHS) for p in real - mine), sorted(real - mine)
    assert all(p.startswith("gpu/remapped_rows/") for p in mine - real), sorted(mine - real)


def test_xml_paths_of_the_550_driver_add_only_what_550_added(sim, env, profile, read_real):
    """On the profiles' 550 driver the A100 output is the 535 layout plus the fields 535.104+ and 550 added."""
    real = xml_paths(read_real("nvidia-smi-xml/telegraf_a100-sxm4-80gb_mig_drv535.xml"))
    mine = xml_paths(smi(sim, env, profile("a100-sxm-8"), "-q", "-x"))
    added_in_550 = {
        "gpu/c2c_mode", "gpu/gpu_virtualization_mode/vgpu_heterogeneous_mode", "gpu/pci/pci_base_class",
        "gpu/pci/pci_sub_class", "gpu/gpu_memory_power_readings", "gpu/gpu_memory_power_readings/power_draw",
        "gpu/fabric/cliqueId", "gpu/fabric/clusterUuid", "gpu/fabric/health", "gpu/fabric/health/bandwidth",
        # 535.129 and later (between the A100 capture's 535.54 and the H100 captures' 535.161)
        "gpu/inforom_bbx_flush", "gpu/inforom_bbx_flush/latest_timestamp", "gpu/inforom_bbx_flush/latest_duration",
        "gpu/sparse_operation_mode"}
    remapped = set(p for p in mine if p.startswith("gpu/remapped_rows/"))
    assert mine - real == added_in_550 | remapped
    assert all(p.startswith(MIG_DEVICE_PATHS) for p in real - mine)


def test_xml_is_tab_indented_like_the_real_tool(sim, env, profile, read_real):
    real = read_real("nvidia-smi-xml/telegraf_rtx-4000-sff-ada_v13_drv595.xml")
    mine = smi(sim, env, profile("h100-sxm-8", driver_version="595.84"), "-q", "-x")
    for text in (real, mine):
        assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n')
        assert "\t<gpu id=\"" in text and text.endswith("\t</gpu>\n\n</nvidia_smi_log>\n")
        assert "<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>" in text
        assert "<accounted_processes>\n\t\t</accounted_processes>" in text


# ---- nvidia-smi -q -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("capture, driver", [
    ("nvidia-smi-q/gpud_8xh100-80gb-hbm3_drv535.183.01_q.txt", "535.183.01"),
    ("nvidia-smi-q/gpud_8xh100-80gb-hbm3_drv535.161.08_q.txt", "535.161.08"),
    ("nvidia-smi-q/gpuexporter_h100-80gb-hbm3_load_q.txt", "590.48.01"),
])
def test_text_sections_keys_and_indentation_match_the_h100_captures(sim, env, profile, read_real, capture, driver):
    """Every section, key and indentation of a GPU block is the real H100's on the same driver.

    The 590 capture was taken under load: its Processes section lists processes where ours says None.
    """
    real = text_keys(read_real(capture))
    mine = text_keys(smi(sim, env, profile("h100-sxm-8", driver_version=driver), "-q"))
    if ("    Processes", False) in real:
        real = real[:real.index(("    Processes", False))] + [("    Processes", True)] + [
            k for k in real[real.index(("    Processes", False)):] if k[0].startswith("    Capabilities")
            or k[0].startswith("        EGM")]
    assert mine == real


def capture_section(text, command):
    """The output of the first '# $ <command>' section of a multi-command capture (gpuexporter captures)."""
    start = text.index("# $ %s\n" % command)
    start = text.index("\n", text.index("####", start)) + 1
    return text[start:text.index("\n####", start)]


@pytest.mark.parametrize("capture, name, driver", [
    ("captures/gpuexporter_linux__nvidia-h100-80gb-hbm3__590.48.01.txt", "h100-sxm-8", "590.48.01"),
    ("captures/gpuexporter_linux__nvidia-h200__590.48.01.txt", "h100-sxm-8", "590.48.01"),
    ("captures/gpuexporter_linux__nvidia-l40s__595.80.txt", "l40s-pcie-4", "595.80"),
])
def test_text_layout_matches_the_idle_captures(sim, env, profile, read_real, capture, name, driver):
    """Idle captures (no processes) of H100/H200 on 590 and L40S on 595: identical keys and indentation."""
    real = text_keys(capture_section(read_real(capture), "nvidia-smi -q"))
    assert text_keys(smi(sim, env, profile(name, driver_version=driver), "-q")) == real


def _without_sections(keys, sections):
    """Keys with the named top-level sections (and their children) left out."""
    kept, skipping = [], False
    for key, has_value in keys:
        if key.startswith("    ") and not key.startswith("     "):
            skipping = key.strip() in sections
        if not skipping:
            kept.append((key, has_value))
    return kept


def test_text_layout_of_560_matches_the_titan_v_capture(sim, env, profile, read_real):
    """The 560 layout (C2C mode, vGPU heterogeneous mode, GSP after reset status, outbound atomic caps first,
    Capabilities) is the real 560.35.03 one. Left out: what a Volta GPU has instead of an A100's (single/double-bit
    ECC counters, no row remapping) and the capture's running processes."""
    sections = ("ECC Errors", "Remapped Rows", "Processes")
    real = _without_sections(text_keys(read_real("nvidia-smi-q/gpud_titan-v_drv560.35.03_q.txt")), sections)
    mine = _without_sections(text_keys(smi(sim, env, profile("a100-sxm-8", driver_version="560.35.03"), "-q")),
                             sections)
    assert mine == real


def test_text_header_and_gpu_blocks_match_the_8_gpu_capture(sim, env, profile, read_real):
    real = read_real("nvidia-smi-q/gpud_8xh100-80gb-hbm3_drv535.183.01_q.txt")
    mine = smi(sim, env, profile("h100-sxm-8", driver_version="535.183.01"), "-q")
    header = re.compile(r"^(Timestamp|Driver Version|CUDA Version|Attached GPUs) {2,}: \S", re.M)
    assert len(header.findall(real)) == len(header.findall(mine)) == 4
    gpu_line = re.compile(r"^GPU [0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", re.M)
    assert len(gpu_line.findall(real)) == len(gpu_line.findall(mine)) == 8
    assert "==============NVSMI LOG==============\n\nTimestamp" in real
    assert "==============NVSMI LOG==============\n\nTimestamp" in mine
    for line in mine.splitlines():
        if " : " in line:
            assert line.index(" : ") == 41 or line.startswith("Timestamp"), line


def test_text_values_have_the_real_units(sim, env, profile, read_real):
    real = read_real("nvidia-smi-q/gpud_8xh100-80gb-hbm3_drv535.183.01_q.txt")
    mine = smi(sim, env, profile("h100-sxm-8", driver_version="535.183.01"), "-q")

    def shapes(text):
        out = {}
        for key, value in re.findall(r"^ *(.*?) +: (.*)$", text, re.M):
            out.setdefault(key, re.sub(r"[0-9A-Fa-f]+", "9", value) if re.search(r"\d", value) else value)
        return out
    real_shapes, mine_shapes = shapes(real), shapes(mine)
    for key in ("Total", "Power Draw", "Current Power Limit", "GPU Current Temp", "Graphics", "Max", "Bus Id",
                "Board ID", "GPU UUID", "Tx Throughput", "Device Id", "Bus"):
        assert mine_shapes[key] == real_shapes[key], key


# ---- --query-gpu CSV -----------------------------------------------------------------------------------------

def test_csv_header_and_value_units_match_the_real_query(sim, env, profile, read_real):
    """For every field both know, the header cell (name [unit]) and the value's form (unit, [N/A]) are the real ones."""
    rows = list(csv.reader(read_real("nvidia-smi-csv/gpuexporter_h100-80gb-hbm3_load_query-gpu-all.csv")
                           .splitlines(), skipinitialspace=True))
    real = dict(zip(rows[0], rows[1]))
    names = [cell.split(" [")[0] for cell in rows[0]]
    known = [n for n in names if sim.find_query_field(n, (590, 48, 1)) and n not in ("hostname",)]
    assert len(known) >= 140
    text = smi(sim, env, profile("h100-sxm-8", driver_version="590.48.01"), "--query-gpu=" + ",".join(known),
               "--format=csv")
    mine_rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    assert [c.split(" [")[0] for c in mine_rows[0]] == known
    for header, value in zip(mine_rows[0], mine_rows[1]):
        assert header in real, header
        assert _value_form(value) == _value_form(real[header]), (header, value, real[header])


def _value_form(value):
    if value.startswith("["):
        return value
    if re.match(r"^-?\d+(\.\d+)? \S+$", value):
        return "number " + value.split(" ")[1]
    if re.match(r"^-?\d+(\.\d+)?$", value):
        return "number"
    return "text"


def test_csv_nounits_keeps_the_units_in_the_header(sim, env, profile, read_real):
    real = read_real("nvidia-smi-csv/netdata_tesla-p100_query-gpu_units.csv").splitlines()
    fields = "name,uuid,fan.speed,pstate,memory.reserved,memory.used,power.draw,clocks.current.graphics"
    mine = smi(sim, env, profile(), "--query-gpu=" + fields, "--format=csv,nounits").splitlines()
    for cell in ("fan.speed [%]", "memory.used [MiB]", "power.draw [W]", "clocks.current.graphics [MHz]"):
        assert cell in real[0] and cell in mine[0]
    assert re.match(r"^NVIDIA H100 80GB HBM3, GPU-[0-9a-f-]{36}, \[N/A\], P0, 551, 1, \d+\.\d\d, 345$", mine[1])


def test_unknown_field_is_refused_like_nvidia_smi(sim, env, profile):
    rc, out, _err = sim.run_tool("nvidia-smi", ["--query-gpu=index,device_minor", "--format=csv,noheader"], env,
                                 profile())
    assert (rc, out) == (2, 'Field "device_minor" is not a valid field to query.\n\n')


# ---- nvlink, topo, default table, -L ----------------------------------------------------------------------------

NVLINK_TITLE = re.compile(r"^GPU \d+: [^()]+ \(UUID: GPU-[0-9a-f-]{36}\)$")
NVLINK_LINE = re.compile(r"^\t Link \d+: (\d+(\.\d+)? GB/s|<inactive>)$")


@pytest.mark.parametrize("capture, name, links, speed", [
    ("nvlink-topo/gpuexporter_h100_nvlink-s.txt", "h100-sxm-8", 18, "26.562 GB/s"),
    ("nvlink-topo/azhpc_a100_nvlink-status_gpu7.txt", "a100-sxm-8", 12, "25 GB/s"),
])
def test_nvlink_status_lines_match_the_real_format(sim, env, profile, read_real, capture, name, links, speed):
    real = read_real(capture).splitlines()
    mine = smi(sim, env, profile(name), "nvlink", "-s", "-i", "0").splitlines()
    for lines in (real, mine):
        assert NVLINK_TITLE.match(re.sub(r"GPU-0{8}-0{4}-0{4}-0{4}-0{12}", "GPU-%s" % ("0" * 32), lines[0])
                                  .replace("GPU-" + "0" * 32, "GPU-00000000-0000-0000-0000-000000000000"))
        assert all(NVLINK_LINE.match(line) for line in lines[1:]), lines
        assert len(lines) == links + 1
        assert lines[1] == "\t Link 0: " + speed


def test_nvlink_status_is_empty_for_a_gpu_without_nvlink_on_a_535_to_565_driver(sim, env, profile, read_real):
    assert read_real("nvlink-topo/gpud_a10_nvlink-status_empty.txt") == ""
    assert smi(sim, env, profile("l40s-pcie-4"), "nvlink", "-s") == ""


def test_nvlink_status_of_a_gpu_without_nvlink_on_a_570_or_later_driver(sim, env, profile, read_real):
    real = capture_section(read_real("captures/gpuexporter_linux__nvidia-l40s__595.80.txt"), "nvidia-smi nvlink -s")
    mine = smi(sim, env, profile("l40s-pcie-4", driver_version="595.80"), "nvlink", "-s", "-i", "0")
    assert mine.splitlines()[1:] == real.strip("\n").splitlines()[1:] == ["Device does not have or support Nvlink"]


def test_inactive_link_and_all_inactive_wording(sim, env, profile, read_real):
    real = read_real("nvlink-topo/azhpc_a100_nvlink-status_all-inactive.txt").splitlines()
    faults = [{"name": "nvlink_inactive", "gpu": 6, "link": n} for n in range(12)]
    mine = smi(sim, env, profile("a100-sxm-8"), "nvlink", "-s", "-i", "6", faults=faults).splitlines()
    assert mine[1] == real[1] == "NVML: Unable to retrieve NVLink information as all links are inactive"
    one = smi(sim, env, profile(), "nvlink", "-s", "-i", "2", faults=["nvlink_inactive:gpu=2,value=5"])
    assert "\t Link 5: <inactive>\n" in one and one.count("GB/s") == 17


def test_topo_matrix_uses_the_real_header_escapes_and_legend(sim, env, profile, read_real):
    real = read_real("nvlink-topo/gpuexporter_h100_topo-m_single.txt").splitlines()
    mine = smi(sim, env, profile(), "topo", "-m").splitlines()
    assert real[0].startswith("\t\x1b[4mGPU0\t") and mine[0].startswith("\t\x1b[4mGPU0\t")
    assert real[0].endswith("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    assert mine[0].endswith("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    legend = real[real.index("Legend:"):]
    assert mine[mine.index("Legend:"):mine.index("Legend:") + len(legend)] == legend
    assert re.match(r"^GPU0\t X \t(NV18\t){7}PXB\t", mine[1])
    assert re.match(r"^GPU0\t X \t[\d,-]+\t\d\t\tN/A$", real[1])
    assert re.search(r"\t0-55,112-167\t0\t\tN/A$", mine[1])
    assert "  NIC8: mlx5_bond_0" in mine


def test_default_table_matches_the_550_layout(sim, env, profile, read_real):
    real = read_real("nvidia-smi-q/gpud_8xh100_drv550.90.07_default-table.txt").splitlines()
    mine = smi(sim, env, profile()).splitlines()
    assert all(len(line) == 91 for line in mine[1:] if line)
    assert all(len(line) == 91 for line in real[1:] if line)
    assert mine[3:8] == real[3:8]
    assert mine[-7:] == real[-7:]
    row = re.compile(r"^\|\s+\d  NVIDIA H100 80GB HBM3\s+On  \|   [0-9A-F]{8}:[0-9A-F]{2}:00\.0 Off \|\s+0 \|$")
    assert row.match(real[8]) and row.match(mine[8])
    usage = re.compile(r"^\| N/A   \d\dC    P0\s+\d+W /  700W \|\s+\d+MiB /  81559MiB \|\s+0%      Default \|$")
    assert usage.match(real[9]) and usage.match(mine[9])
    assert re.match(r"^\| NVIDIA-SMI [\d.]+ +Driver Version: [\d.]+ +CUDA Version: [\d.]+ +\|$", mine[2])


@pytest.mark.parametrize("capture, name, driver", [
    ("captures/gpuexporter_linux__nvidia-h100-80gb-hbm3__590.48.01.txt", "h100-sxm-8", "590.48.01"),
    ("captures/gpuexporter_linux__nvidia-l40s__595.80.txt", "l40s-pcie-4", "595.80"),
])
def test_default_table_matches_the_570_and_later_layout(sim, env, profile, read_real, capture, name, driver):
    real = capture_section(read_real(capture), "nvidia-smi ").splitlines()
    mine = smi(sim, env, profile(name, driver_version=driver)).splitlines()
    assert mine[2] == real[2]
    assert mine[3:8] == real[3:8]
    assert mine[-7:] == real[-8:-1]


def test_list_format(sim, env, profile, read_real):
    real = read_real("nvidia-smi-q/gpuexporter_8xh100_mig-1g.10gb_list-L.txt").splitlines()[0]
    mine = smi(sim, env, profile(), "-L").splitlines()
    assert NVLINK_TITLE.match(real) and all(NVLINK_TITLE.match(line) for line in mine) and len(mine) == 8


# ---- InfiniBand --------------------------------------------------------------------------------------------

def ib_blocks(text):
    blocks = re.split(r"^(?=CA ')", text, flags=re.M)
    return [b for b in blocks if b.strip()]


def ib_keys(block):
    return [re.sub(r":.*", ":", line) for line in block.splitlines()]


def test_ibstat_matches_the_real_h100_format(sim, env, profile, read_real):
    real = ib_blocks(read_real("infiniband/gpud_ibstat_h100_all-active.txt"))
    mine = ib_blocks(sim.run_tool("ibstat", [], env, profile())[1])
    assert len(mine) == 9
    assert set(tuple(ib_keys(b)[1:]) for b in mine) == set(tuple(ib_keys(b)[1:]) for b in real)
    names_real = [re.match(r"CA '(.*)'", b).group(1) for b in real]
    assert names_real == sorted(names_real)
    ib_port = [b for b in mine if "Link layer: InfiniBand" in b][0]
    real_ib = [b for b in ib_blocks(read_real("infiniband/gpud_ibstat_h100_some-down.txt"))
               if "Link layer: InfiniBand" in b][0]
    for pattern in (r"\tCA type: MT4129\n", r"\t\tRate: 400\n", r"\tNode GUID: 0x[0-9a-f]{16}\n",
                    r"\t\tCapability mask: 0x[0-9a-f]{8}\n", r"\t\tState: Active\n\t\tPhysical state: LinkUp\n"):
        assert re.search(pattern, ib_port) and re.search(pattern, real_ib), pattern


def test_ibstat_down_port_matches_the_real_down_port(sim, env, profile, read_real):
    real = [b for b in ib_blocks(read_real("infiniband/gpud_ibstat_h100_some-down.txt")) if "State: Down" in b][0]
    out = sim.run_tool("ibstat", ["mlx5_bond_0"], env, profile(), ["ib_port_down:port=mlx5_bond_0"])[1]
    for line in ("\t\tState: Down", "\t\tPhysical state: Disabled", "\t\tRate: 40", "\t\tBase lid: 0",
                 "\t\tSM lid: 0", "\t\tLink layer: Ethernet"):
        assert line in real.splitlines() and line in out.splitlines(), line


def test_ibstat_unknown_ca_panics_like_ibstat(sim, env, profile, read_real):
    real = [line for line in read_real("infiniband/gpud_ibstat_a100_ibpanic-exit255.txt").splitlines()
            if line.startswith("ibpanic")][0]
    rc, out, err = sim.run_tool("ibstat", ["mlx5_8"], env, profile())
    pattern = r"^ibpanic: \[\d+\] main: stat of IB device 'mlx5_8' failed: No such file or directory$"
    assert re.match(pattern, real) and re.match(pattern, err.strip()) and rc == 255 and out == ""


def test_ibstatus_matches_the_real_format(sim, env, profile, read_real):
    real = read_real("infiniband/gpud_ibstatus_a100_all-active.txt").split("\n\n")[0].splitlines()
    mine = sim.run_tool("ibstatus", [], env, profile("a100-sxm-8"))[1].expandtabs(8).split("\n\n")[0].splitlines()
    assert [line[:25] for line in mine] == [line[:25] for line in real]
    assert mine[5:] == real[5:]


def test_sysfs_tree_has_the_real_files(sim, env, profile, real_dir):
    import os  # pylint: disable=import-outside-toplevel
    top = require_shared(os.path.join(real_dir, "infiniband", "gpud_sys-class-infiniband-h100", "mlx5_0"),
                         "the real sysfs capture")
    real = set(os.path.relpath(os.path.join(d, f), top) for d, _dirs, files in os.walk(top) for f in files)
    node = sim.build_node(profile(), env)
    mine = set(path[len("mlx5_0/"):] for path in sim.sysfs_files(node) if path.startswith("mlx5_0/"))
    assert real <= mine
    with open(os.path.join(top, "ports", "1", "rate")) as handle:
        assert handle.read().strip() == sim.sysfs_files(node)["mlx5_0/ports/1/rate"].strip()
    with open(os.path.join(top, "ports", "1", "state")) as handle:
        assert handle.read().strip() == sim.sysfs_files(node)["mlx5_0/ports/1/state"].strip()


# ---- kernel log, DCGM, NCCL --------------------------------------------------------------------------------

XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})\): (\d+), pid=('<unknown>'|\d+), "
                 r"(name=(<unknown>|[^,]+), )?(.+)$")
SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \(PCI:([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d)\): (\d+), (.+)$")
JOURNAL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 gpu-node-07 (kernel|systemd-networkd\[\d+\]): ")


def test_xid_and_sxid_lines_match_the_real_ones(sim, env, profile, read_real):
    real = "\n".join(read_real(name) for name in (
        "xid/gpud_dmesg_iso_xid48-63-94.log", "xid/gpud_xid79-fallen-off-bus_plus_nvswitch-sxid20034_quoted.log",
        "xid/nvsentinel_xid13_sm-warp-exception.log", "xid/mleng_xid63_row-remapper_a100.log"))
    real_xids = [line for line in real.splitlines() if "Xid (" in line and "SXid" not in line]
    assert real_xids and all(XID.search(line) for line in real_xids)
    assert all(SXID.search(line) for line in real.splitlines() if "SXid" in line)
    faults = ["xid_app:gpu=1", "xid_error:gpu=2,value=94", "fallen_off_bus:gpu=3", "row_remap_pending:gpu=4",
              "row_remap_failure:gpu=5", "sxid_fatal", "ecc_uncorrectable_volatile:gpu=6"]
    log = sim.render_kernel_log(sim.build_node(profile(), env, faults)).splitlines()
    assert all(JOURNAL.match(line) for line in log)
    codes = [int(XID.search(line).group(2)) for line in log if "Xid (" in line and "SXid" not in line]
    assert sorted(codes) == [13, 31, 48, 48, 63, 64, 79, 94]
    assert len([line for line in log if SXID.search(line)]) == 3
    fallen = [line for line in log if "fallen off the bus" in line]
    assert fallen[0].endswith("NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                              "the bus.")
    assert any(line.endswith("NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.") for line in fallen)


def test_link_flap_lines_match_the_real_networkd_lines(sim, env, profile, read_real):
    real = [line for line in read_real("infiniband/azhpc_syslog_ib6_link-flap.log").splitlines() if "carrier" in line]
    pattern = re.compile(r"systemd-networkd\[\d+\]: ib\d: (lost carrier|Gained carrier)$")
    assert all(pattern.search(line) for line in real)
    log = sim.render_kernel_log(sim.build_node(profile(), env, ["ib_link_flap:port=mlx5_6,value=4"])).splitlines()
    flaps = [line for line in log if "carrier" in line]
    assert len(flaps) == 8 and all(pattern.search(line) and JOURNAL.match(line) for line in flaps)


def test_dcgmi_text_table_matches_the_real_table(sim, env, profile, read_real):
    real = read_real("dcgm/deepops_dcgmi-diag-r1_pass_dcgm2-era.txt").splitlines()
    mine = sim.run_tool("dcgmi", ["diag", "-r", "1"], env, profile())[1].splitlines()
    assert mine[:4] == real[:4]
    assert "|-----  Deployment  --------+------------------------------------------------|" in mine
    assert all(len(line) == len(real[1]) for line in mine[1:])
    failing = read_real("dcgm/mleng_dcgmi-diag_row-remap-pending_excerpt.txt").splitlines()
    rc, out, _err = sim.run_tool("dcgmi", ["diag", "-r", "1"], env, profile(), ["row_remap_pending:gpu=3"])
    assert rc == 226
    assert failing[-2] in out.splitlines() and failing[-1] in out.splitlines()


def test_dcgmi_json_has_the_3x_shape(sim, env, profile):
    import json  # pylint: disable=import-outside-toplevel
    rc, out, _err = sim.run_tool("dcgmi", ["diag", "-r", "2", "-j"], env, profile(), ["dcgm_fail:gpu=3"])
    data = json.loads(out)["DCGM GPU Diagnostic"]
    assert rc == 226 and data["version"].startswith("3.")
    categories = [c["category"] for c in data["test_categories"]]
    assert categories == ["Deployment", "Integration", "Hardware"]
    memory = [t for c in data["test_categories"] for t in c["tests"] if t["name"] == "GPU Memory"][0]
    statuses = dict((r["gpu_ids"], r["status"]) for r in memory["results"])
    assert statuses["3"] == "Fail" and set(statuses.values()) == {"Pass", "Fail"}
    assert out.startswith('{\n\t"DCGM GPU Diagnostic" : \n\t{\n')


def test_all_reduce_output_matches_nccl_tests(sim, env, profile, read_real):
    real = read_real("nccl-tests/a3mega_2x8xh100_all_reduce_perf.txt").splitlines()
    mine = sim.run_tool("all_reduce_perf", ["-b", "8", "-e", "8G", "-f", "2", "-g", "8"], env, profile())[1]
    lines = mine.splitlines()
    header = [line.rstrip() for line in real if line.startswith("#       size") or line.startswith("#        (B)")]
    assert [line.rstrip() for line in lines if line.startswith("#       size") or line.startswith("#        (B)")] \
        == header
    row = re.compile(r"^ +\d+ +\d+ +float +sum +-1 +[\d.]+ +[\d.]+ +[\d.]+ +0 +[\d.]+ +[\d.]+ +[\d.]+ +0$")
    real_rows = [line for line in real if row.match(line)]
    mine_rows = [line for line in lines if row.match(line)]
    assert len(real_rows) == len(mine_rows) == 31
    assert [len(line) for line in mine_rows] == [len(line) for line in real_rows]
    assert re.match(r"^# Avg bus bandwidth    : [\d.]+$", [line for line in lines if "Avg bus" in line][0])
    plateau = float(mine_rows[-1].split()[7])
    assert 470 < plateau < 481
