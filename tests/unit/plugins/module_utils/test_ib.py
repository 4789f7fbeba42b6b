# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""InfiniBand parsers: ibstat, ibstatus and /sys/class/infiniband."""

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils._ib import parse_ibstat, read_sys_class_infiniband

from parser_testlib import REAL, assert_shape, files_in, fixture, read_text, realdata

TOP = ("devices", "errors", "unreadable")
DEVICE_KEYS = ("name", "type", "fw_ver", "board_id", "ports")
PORT_KEYS = ("port", "state", "physical_state", "rate_gbps", "link_layer", "counters")


def ports(result):
    """``{"mlx5_0/1": port}`` of a result."""
    return {"%s/%s" % (device["name"], port["port"]): port for device in result["devices"] for port in device["ports"]}


def check_shape(result):
    assert_shape(result, TOP, "devices", DEVICE_KEYS)
    for device in result["devices"]:
        for port in device["ports"]:
            assert set(PORT_KEYS) <= set(port)
            assert port["rate_gbps"] is None or isinstance(port["rate_gbps"], float)


def write_tree(root, files):
    """Create ``{"relative/path": "content" | None}`` under ``root`` (None: a directory)."""
    for rel, content in files.items():
        path = os.path.join(root, rel)
        if content is None:
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content)


def ndr_node_tree(count=8):
    """A healthy 8-port NDR node as sysfs files, plus a BlueField bond port on Ethernet."""
    files = {}
    for n in range(count):
        dev = "mlx5_%d" % n
        files.update({
            dev + "/fw_ver": "28.42.1274\n", dev + "/hca_type": "MT4129\n", dev + "/board_id": "MT_0000000970\n",
            dev + "/ports/1/state": "4: ACTIVE\n", dev + "/ports/1/phys_state": "5: LinkUp\n",
            dev + "/ports/1/rate": "400 Gb/sec (4X NDR)\n", dev + "/ports/1/link_layer": "InfiniBand\n",
            dev + "/ports/1/counters/link_downed": "0\n", dev + "/ports/1/counters/symbol_error": "%d\n" % n,
            dev + "/ports/1/counters/link_error_recovery": "0\n", dev + "/ports/1/counters/port_rcv_errors": "0\n",
            dev + "/ports/1/hw_counters/out_of_buffer": "12\n", dev + "/ports/1/hw_counters/link_downed": "3\n",
        })
    files.update({
        "mlx5_bond_0/fw_ver": "32.42.1000\n", "mlx5_bond_0/hca_type": "MT41692\n", "mlx5_bond_0/board_id": "MT_0000001093\n",
        "mlx5_bond_0/ports/1/state": "4: ACTIVE\n", "mlx5_bond_0/ports/1/phys_state": "5: LinkUp\n",
        "mlx5_bond_0/ports/1/rate": "200 Gb/sec (2X NDR)\n", "mlx5_bond_0/ports/1/link_layer": "Ethernet\n",
    })
    return files


# ---------------------------------------------------------------- ibstat


def test_healthy_ndr_node_tab_indented():
    result = parse_ibstat(fixture("ib", "ibstat_h100_8x_ndr_healthy.txt"))
    check_shape(result)
    assert result["errors"] == [] and result["unreadable"] == []
    assert [d["name"] for d in result["devices"]] == ["mlx5_%d" % n for n in range(8)] + ["mlx5_bond_0"]
    first = result["devices"][0]
    assert (first["type"], first["fw_ver"], first["board_id"]) == ("MT4129", "28.42.1274", None)
    assert first["ports"] == [{"port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400.0,
                               "link_layer": "InfiniBand", "counters": {}}]
    bond = result["devices"][-1]
    assert (bond["type"], bond["ports"][0]["link_layer"], bond["ports"][0]["rate_gbps"]) == ("MT41692", "Ethernet", 200.0)


def test_eight_space_indent_down_polling_disabled_and_downgraded_rate():
    result = parse_ibstat(fixture("ib", "ibstat_ports_down_polling_8space.txt"))
    check_shape(result)
    by_name = ports(result)
    assert len(by_name) == 8
    assert (by_name["mlx5_3/1"]["state"], by_name["mlx5_3/1"]["physical_state"]) == ("Down", "Polling")
    assert (by_name["mlx5_6/1"]["state"], by_name["mlx5_6/1"]["physical_state"]) == ("Down", "Disabled")
    # a down port still prints a rate: the rate alone says nothing about health
    assert by_name["mlx5_3/1"]["rate_gbps"] == 40.0
    assert (by_name["mlx5_5/1"]["state"], by_name["mlx5_5/1"]["rate_gbps"]) == ("Active", 200.0)
    assert sorted(name for name, port in by_name.items() if port["state"] != "Active") == ["mlx5_3/1", "mlx5_6/1"]


def test_ibpanic_ending_is_an_error_and_keeps_the_cas_before_it():
    result = parse_ibstat(fixture("ib", "ibstat_ibpanic_mlx5_2.txt"))
    assert [d["name"] for d in result["devices"]] == ["mlx5_0", "mlx5_1"]
    assert result["errors"] == [{"kind": "ibpanic", "device": "mlx5_2",
                                 "message": "ibpanic: [2718281] main: stat of IB device 'mlx5_2' failed: No such file or directory"}]
    assert result["unreadable"] == []


def test_ibstatus_numbered_states_and_rate_strings():
    result = parse_ibstat(fixture("ib", "ibstatus_hdr_one_down.txt"))
    check_shape(result)
    by_name = ports(result)
    assert by_name["mlx5_0/1"] == {"port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 200.0,
                                   "link_layer": "InfiniBand", "counters": {}}
    assert (by_name["mlx5_1/1"]["state"], by_name["mlx5_1/1"]["physical_state"], by_name["mlx5_1/1"]["rate_gbps"]) == \
        ("Down", "Polling", 10.0)
    assert result["devices"][0]["type"] is None and result["unreadable"] == []


def test_many_cas_sort_in_natural_order():
    text = "".join("CA 'mlx5_%d'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n" % n for n in (10, 2, 11, 0, 1))
    assert [d["name"] for d in parse_ibstat(text)["devices"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_11"]


@pytest.mark.parametrize("value, expected", [
    ("4: ACTIVE", "Active"), ("ACTIVE", "Active"), ("Active", "Active"), ("1: DOWN", "Down"), ("2: INIT", "Initializing"),
    ("3: ARMED", "Armed"),
])
def test_state_loses_its_number(value, expected):
    assert ports(parse_ibstat("CA 'x'\n\tPort 1:\n\t\tState: %s\n" % value))["x/1"]["state"] == expected


@pytest.mark.parametrize("value, expected", [
    ("5: LinkUp", "LinkUp"), ("2: Polling", "Polling"), ("3: Disabled", "Disabled"), ("LINKUP", "LinkUp"),
    ("4: PortConfigurationTraining", "PortConfigurationTraining"), ("6: LinkErrorRecovery", "LinkErrorRecovery"),
])
def test_physical_state_loses_its_number(value, expected):
    assert ports(parse_ibstat("CA 'x'\n\tPort 1:\n\t\tPhysical state: %s\n" % value))["x/1"]["physical_state"] == expected


def test_crlf_ansi_and_markdown_quotes_are_tolerated():
    text = "> CA 'mlx5_0'\r\n>\r\n> \tCA type: MT4129\r\n> \tPort 1:\r\n> \t\tState: \x1b[32mActive\x1b[0m   \r\n"
    assert ports(parse_ibstat(text))["mlx5_0/1"]["state"] == "Active"


def test_bad_rate_is_unreadable_not_an_exception():
    result = parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tRate: fast\n")
    assert ports(result)["mlx5_0/1"]["rate_gbps"] is None
    assert result["unreadable"] == ["mlx5_0/1 rate_gbps value 'fast' is not a rate"]


def test_empty_output_has_no_devices():
    result = parse_ibstat("")
    assert result == {"devices": [], "errors": [], "unreadable": []}


# ---------------------------------------------------------------- /sys/class/infiniband


def test_sysfs_healthy_ndr_node(tmp_path):
    write_tree(str(tmp_path), ndr_node_tree())
    result = read_sys_class_infiniband(str(tmp_path))
    check_shape(result)
    assert result["errors"] == [] and result["unreadable"] == []
    assert [d["name"] for d in result["devices"]] == ["mlx5_%d" % n for n in range(8)] + ["mlx5_bond_0"]
    dev = result["devices"][7]
    assert (dev["type"], dev["fw_ver"], dev["board_id"]) == ("MT4129", "28.42.1274", "MT_0000000970")
    port = dev["ports"][0]
    assert (port["state"], port["physical_state"], port["rate_gbps"], port["link_layer"]) == ("Active", "LinkUp", 400.0, "InfiniBand")
    # counters/ and hw_counters/ merged; a name in both keeps counters/ and gets hw_ for the other
    assert port["counters"] == {"link_downed": 0, "symbol_error": 7, "link_error_recovery": 0, "port_rcv_errors": 0,
                                "out_of_buffer": 12, "hw_link_downed": 3}
    bond = result["devices"][-1]["ports"][0]
    assert (bond["rate_gbps"], bond["link_layer"], bond["counters"]) == (200.0, "Ethernet", {})


def test_sysfs_missing_files_and_bad_counters_are_notes(tmp_path):
    tree = ndr_node_tree(1)
    del tree["mlx5_0/fw_ver"]
    tree["mlx5_0/ports/1/counters/symbol_error"] = "lots\n"
    tree["mlx5_0/ports/1/counters/VL15_dropped"] = "N/A (no PMA)\n"
    tree["mlx5_0/ports/1/state"] = "1: DOWN\n"
    tree["mlx5_0/ports/1/phys_state"] = "3: Disabled\n"
    write_tree(str(tmp_path), tree)
    result = read_sys_class_infiniband(str(tmp_path))
    dev = result["devices"][0]
    assert dev["fw_ver"] is None
    assert dev["ports"][0]["counters"]["symbol_error"] is None and dev["ports"][0]["counters"]["VL15_dropped"] is None
    assert (dev["ports"][0]["state"], dev["ports"][0]["physical_state"]) == ("Down", "Disabled")
    assert result["unreadable"] == ["mlx5_0/fw_ver: cannot read (No such file or directory)",
                                    "mlx5_0/1/counters/symbol_error value 'lots' is not a number"]


@pytest.mark.parametrize("name,value", [("phys_state", "-\n"), ("phys_state", "N/A\n"), ("phys_state", "LinkUp\n"),
                                        ("state", "ACTIVE\n"), ("state", "[Unknown]\n")])
def test_sysfs_state_not_in_the_kernels_numbered_form_is_unreadable(tmp_path, name, value):
    """The kernel writes "<number>: <word>"; anything else (a dash, N/A, a word alone) is a damaged copy, never a
    state taken on trust or dropped as "not available"."""
    tree = ndr_node_tree(1)
    tree["mlx5_0/ports/1/%s" % name] = value
    write_tree(str(tmp_path), tree)
    result = read_sys_class_infiniband(str(tmp_path))
    field = "physical_state" if name == "phys_state" else "state"
    assert result["devices"][0]["ports"][0][field] is None
    assert result["unreadable"] == ["mlx5_0/1/%s value %r is not the kernel's '<number>: <word>'" % (name, value.strip())]


def test_sysfs_file_that_cannot_be_read_is_a_note(tmp_path):
    tree = ndr_node_tree(1)
    del tree["mlx5_0/hca_type"]
    tree["mlx5_0/hca_type/oops"] = "x"  # a directory where a file should be: open() fails, also for root
    write_tree(str(tmp_path), tree)
    result = read_sys_class_infiniband(str(tmp_path))
    assert result["devices"][0]["type"] is None
    assert result["unreadable"] == ["mlx5_0/hca_type: is a directory, not a regular file"]


def test_sysfs_missing_tree_is_an_error_and_empty_tree_has_no_devices(tmp_path):
    missing = read_sys_class_infiniband(str(tmp_path / "nope"))
    assert missing["devices"] == [] and [e["kind"] for e in missing["errors"]] == ["no_devices"]
    assert read_sys_class_infiniband(str(tmp_path)) == {"devices": [], "errors": [], "unreadable": []}


# ---------------------------------------------------------------- never raises

# The "never raises" property tests of parse_ibstat (random input, truncated samples): test_parsers_never_raise.py.


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["state", "phys_state", "rate", "link_layer", "counters/link_downed",
                                        "hw_counters/out_of_buffer", "../fw_ver", "../hca_type"]),
                       st.binary(max_size=64), min_size=1))
def test_sysfs_never_raises_on_odd_file_contents(contents):
    with tempfile.TemporaryDirectory() as root:
        port = os.path.join(root, "mlx5_0", "ports", "1")
        os.makedirs(os.path.join(port, "counters"))
        os.makedirs(os.path.join(port, "hw_counters"))
        for rel, data in contents.items():
            with open(os.path.normpath(os.path.join(port, rel)), "wb") as handle:
                handle.write(data)
        check_shape(read_sys_class_infiniband(root))


# ---------------------------------------------------------------- real captures


def extract_ttar(text, dest):
    """Unpack a ttar text archive (node_exporter's fixture format) under ``dest``; test-only."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("Directory: "):
            os.makedirs(os.path.join(dest, line[len("Directory: "):]), exist_ok=True)
        elif line.startswith("Path: ") and index + 1 < len(lines) and lines[index + 1].startswith("Lines: "):
            count = int(lines[index + 1][len("Lines: "):])
            path = os.path.join(dest, line[len("Path: "):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write("".join(content + "\n" for content in lines[index + 2:index + 2 + count]))
            index += 1 + count
        index += 1


IBSTAT_FILES = [path for path in files_in(os.path.join(REAL, "infiniband")) if "ibstat" in os.path.basename(path)]


@realdata
@pytest.mark.parametrize("path", IBSTAT_FILES, ids=os.path.basename)
def test_real_ibstat_captures_parse(path):
    result = parse_ibstat(read_text(path))
    check_shape(result)
    assert result["devices"] and result["unreadable"] == []
    assert all(port["state"] and port["physical_state"] and port["rate_gbps"] for port in ports(result).values())


@realdata
def test_real_ibstat_known_values():
    some_down = parse_ibstat(read_text(os.path.join(REAL, "infiniband", "gpud_ibstat_h100_some-down.txt")))
    down = {name: port for name, port in ports(some_down).items() if port["state"] == "Down"}
    assert len(ports(some_down)) == 12 and len(down) == 3
    assert all(port["physical_state"] == "Disabled" and port["rate_gbps"] == 40.0 for port in down.values())
    assert {port["link_layer"] for port in ports(some_down).values()} == {"InfiniBand", "Ethernet"}
    polling = parse_ibstat(read_text(os.path.join(REAL, "infiniband", "gpud_ibstat_h100_down-polling.txt")))
    assert "Polling" in {port["physical_state"] for port in ports(polling).values()}
    panic = parse_ibstat(read_text(os.path.join(REAL, "infiniband", "gpud_ibstat_a100_ibpanic-exit255.txt")))
    assert [(e["kind"], e["device"]) for e in panic["errors"]] == [("ibpanic", "mlx5_8")] and len(panic["devices"]) == 8
    status = parse_ibstat(read_text(os.path.join(REAL, "infiniband", "gpud_ibstatus_a100_all-active.txt")))
    rates = {name: port["rate_gbps"] for name, port in ports(status).items()}
    assert {(p["state"], p["physical_state"]) for p in ports(status).values()} == {("Active", "LinkUp")}
    assert rates.pop("mlx5_8/1") == 40.0 and set(rates.values()) == {200.0}  # one HCA trained at QDR


@realdata
def test_real_sysfs_tree_h100():
    result = read_sys_class_infiniband(os.path.join(REAL, "infiniband", "gpud_sys-class-infiniband-h100"))
    check_shape(result)
    assert result["errors"] == [] and result["unreadable"] == []
    names = [d["name"] for d in result["devices"]]
    assert names[-1] == "mlx5_bond_0" and len(names) == 9
    ib_ports = [d["ports"][0] for d in result["devices"] if d["type"] == "MT4129"]
    assert len(ib_ports) == 8 and {p["rate_gbps"] for p in ib_ports} == {400.0}
    assert all("link_downed" in p["counters"] and "symbol_error" in p["counters"] for p in ib_ports)
    bond = result["devices"][-1]
    assert (bond["type"], bond["ports"][0]["link_layer"], bond["ports"][0]["rate_gbps"]) == ("MT41692", "Ethernet", 200.0)


@realdata
def test_real_node_exporter_ttar(tmp_path):
    extract_ttar(read_text(os.path.join(REAL, "infiniband", "node_exporter_sys-class-infiniband_excerpt.ttar")), str(tmp_path))
    result = read_sys_class_infiniband(str(tmp_path / "sys" / "class" / "infiniband"))
    check_shape(result)
    by_name = {d["name"]: d for d in result["devices"]}
    assert sorted(by_name) == ["i40iw0", "mlx4_0"]
    assert [p["rate_gbps"] for p in by_name["mlx4_0"]["ports"]] == [40.0, 40.0]
    assert by_name["i40iw0"]["ports"][0]["rate_gbps"] == 10.0
    # "N/A (no PMA)" counters are unknown, not unreadable
    assert by_name["i40iw0"]["ports"][0]["counters"]["symbol_error"] is None
    assert by_name["mlx4_0"]["ports"][0]["counters"]["port_xmit_wait"] == 4294967295
    assert result["unreadable"] == []
