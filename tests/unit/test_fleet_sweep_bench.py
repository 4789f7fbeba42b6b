"""bench/fleet_sweep.py's pure logic: its arguments, the nodes' names, addresses and faults, the report comparison,
the projection and the memory sizing (the bench itself needs root and namespaces: it is run by hand, never timed
here)."""

import configparser
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("fleet_sweep", os.path.join(ROOT, "bench", "fleet_sweep.py"))
fs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(fs)


def test_sizes_are_sorted_unique_and_bounded():
    assert fs.parse_sizes("400,50,200,50") == [50, 200, 400]
    assert fs.parse_sizes(" 3 ") == [3]
    for bad in ("", "0", "-5", "ten", "65001", "1.5"):
        with pytest.raises(ValueError):
            fs.parse_sizes(bad)


def test_paths_keep_the_bench_order_and_refuse_unknown_names():
    assert fs.parse_paths("module,floor") == ["floor", "module"]
    assert fs.parse_paths("fast") == ["fast"]
    for bad in ("", "fast,cli", "raw"):
        with pytest.raises(ValueError):
            fs.parse_paths(bad)


def test_addresses_are_unique_private_and_leave_the_controller_free():
    addresses = [fs.node_address(i) for i in range(65000)]
    assert len(set(addresses)) == len(addresses)
    assert fs.CONTROLLER_ADDRESS not in addresses
    for address in addresses:
        parts = [int(p) for p in address.split(".")]
        assert parts[:2] == [10, 213]
        assert 1 <= parts[3] <= 250
    assert fs.node_address(0) == "10.213.0.1"
    assert fs.node_address(250) == "10.213.1.1"
    assert fs.node_name(0) == "gpu0001"


def test_a_few_nodes_are_faulty():
    faults = [fs.node_faults(i) for i in range(400)]
    faulty = [f for f in faults if f]
    assert 0 < len(faulty) < 40
    assert fs.node_faults(36) == ({"name": "fallen_off_bus", "gpu": 2},)
    assert fs.node_faults(0) == ()


def report(created, source, checked, status="ok"):
    return {"schema_version": 1, "created_at": created, "options": {"method": source},
            "summary": {"nodes": 1, "ok": 1},
            "diff": {"previous": "/x/%s" % created},
            "nodes": {"gpu0001": {"host": "gpu0001", "source": source, "checked_at": checked, "status": status,
                                  "findings": [{"code": "GPU-HOT", "target": "gpu3"}]}}}


def test_reports_of_both_paths_compare_without_time_and_source():
    fast = report("2026-12-02T18:00:00Z", "cli", "2026-12-02T18:00:01Z")
    module = report("2026-12-02T18:05:00Z", "module", "2026-12-02T18:05:09Z")
    assert fs.report_differences(fs.normalize_report(fast), fs.normalize_report(module)) == []
    # The original is not changed.
    assert fast["nodes"]["gpu0001"]["source"] == "cli"


def test_a_real_difference_is_named_by_its_path():
    fast = report("a", "cli", "b")
    module = report("c", "module", "d", status="error")
    module["nodes"]["gpu0001"]["findings"].append({"code": "GPU-FALLEN-OFF-BUS", "target": "gpu2"})
    module["nodes"]["gpu0002"] = {"host": "gpu0002"}
    found = fs.report_differences(fs.normalize_report(fast), fs.normalize_report(module))
    assert "/nodes/gpu0001/status: \"ok\" != \"error\"" in found
    assert any(f.startswith("/nodes/gpu0001/findings: ") for f in found)
    assert "/nodes/gpu0002: only in the second" in found
    assert len(fs.report_differences({"a": list(range(50))}, {"a": list(range(1, 51))}, limit=5)) == 5


def test_projection_is_the_least_squares_line():
    value, slope, intercept = fs.project([(50, 12.0), (200, 42.0), (400, 82.0)], 400)
    assert slope == pytest.approx(0.2)
    assert intercept == pytest.approx(2.0)
    assert value == pytest.approx(82.0)
    value, slope, _intercept = fs.project([(100, 30.0)], 400)
    assert (value, slope) == (pytest.approx(120.0), pytest.approx(0.3))
    with pytest.raises(ValueError):
        fs.project([], 400)


def test_memory_sizing():
    assert fs.nodes_memory_holds(24 << 30, 8 << 20, 4 << 30) == 2560
    assert fs.nodes_memory_holds(1 << 30, 8 << 20, 4 << 30) == 0
    with pytest.raises(ValueError):
        fs.nodes_memory_holds(1, 0, 0)


def test_the_fleet_profile_keeps_host_key_checking_and_the_linear_strategy():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "ansible-fleet.cfg"))
    assert config.getboolean("defaults", "host_key_checking")
    assert config.getboolean("ssh_connection", "pipelining")
    assert "ControlPersist" in config.get("ssh_connection", "ssh_args")
    assert not config.has_option("defaults", "strategy_plugins")
    assert config.get("defaults", "strategy", fallback="linear") == "linear"
