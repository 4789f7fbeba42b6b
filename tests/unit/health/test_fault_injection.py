"""Acceptance: every fault class injected into a healthy 8-GPU node (the simulator's bundles) is found by the checker
with the right code and severity, and the healthy node gives no finding above ok."""

import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILES = {
    "h100-sxm-8": {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
                   "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400},
    "a100-sxm-8": {"gpu_count": 8, "gpu_model": "NVIDIA A100-SXM4-80GB", "driver_version": "550.127.05",
                   "nvlinks_per_gpu": 12, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 200},
}
NCCL_MIN = {"h100-sxm-8": 300, "a100-sxm-8": 150}

# fault -> (code, severity, target or None)
FAULTS = {
    "gpu_missing": ("GPU-COUNT-LOW", "error", "node"),
    "wrong_model": ("GPU-MODEL-MISMATCH", "error", None),
    "driver_version": ("GPU-DRIVER-VERSION", "error", "node"),
    "nvml_mismatch": ("GPU-NVML-MISMATCH", "error", "node"),
    "driver_not_loaded": ("GPU-DRIVER-NOT-LOADED", "error", "node"),
    "fallen_off_bus": ("GPU-FALLEN-OFF-BUS", "error", None),
    "persistence_off": ("GPU-PERSISTENCE-OFF", "warning", "gpu2"),
    "ecc_disabled": ("GPU-ECC-DISABLED", "error", "gpu2"),
    "ecc_pending_change": ("GPU-ECC-PENDING", "warning", "gpu2"),
    "ecc_uncorrectable_volatile": ("GPU-ECC-UNCORRECTABLE-VOLATILE", "error", "gpu2"),
    "ecc_uncorrectable_aggregate": ("GPU-ECC-UNCORRECTABLE-AGGREGATE", "warning", "gpu2"),
    "retired_pages_dbe": ("GPU-RETIRED-PAGES-DBE", "warning", "gpu2"),
    "retired_pages_pending": ("GPU-RETIRED-PAGES-PENDING", "error", "gpu2"),
    "row_remap_pending": ("GPU-ROW-REMAP-PENDING", "error", "gpu2"),
    "row_remap_failure": ("GPU-ROW-REMAP-FAILURE", "error", "gpu2"),
    "nvlink_inactive": ("GPU-NVLINK-INACTIVE", "error", "gpu2"),
    "nvlink_errors": ("GPU-NVLINK-ERRORS", "warning", None),
    "pcie_downgraded": ("GPU-PCIE-WIDTH", "error", "gpu2"),
    "gpu_hot": ("GPU-TEMP-HIGH", "error", "gpu2"),
    "memory_hot": ("GPU-MEMORY-TEMP-HIGH", "warning", "gpu2"),
    "power_over_limit": ("GPU-POWER-OVER-LIMIT", "warning", "gpu2"),
    "power_capped": ("GPU-POWER-CAPPED", "warning", "gpu2"),
    "clock_hw_slowdown": ("GPU-CLOCK-HW-SLOWDOWN", "error", "gpu2"),
    "clock_thermal": ("GPU-CLOCK-THERMAL", "error", "gpu2"),
    "clock_power_brake": ("GPU-CLOCK-POWER-BRAKE", "error", "gpu2"),
    "xid_app": ("GPU-XID-APP", "warning", "gpu2"),
    "xid_error": ("GPU-XID-ERROR", "error", "gpu2"),
    "sxid_fatal": ("NVSWITCH-SXID-FATAL", "error", None),
    "ib_port_down": ("IB-PORT-DOWN", "error", "mlx5_2/1"),
    "ib_rate_low": ("IB-RATE-LOW", "error", "mlx5_2/1"),
    "ib_port_missing": ("IB-PORT-COUNT", "error", "node"),
    "ib_link_flap": ("IB-LINK-FLAP", "warning", None),
    "fabricmanager_down": ("NODE-FABRICMANAGER-DOWN", "error", "node"),
    "dcgm_fail": ("DCGM-DIAG-FAIL", "error", None),
    "nccl_low_bw": ("NCCL-BUSBW-LOW", "error", "node"),
}


def bundle(tmp_path, profile, faults=()):
    path = str(tmp_path / "bundle")
    argv = ["gpusim", "bundle", path, "--profile", os.path.join(os.path.dirname(gpusim.__file__), "profiles", profile + ".json")]
    for spec in faults:
        argv += ["--fault", spec]
    rc, _out, err = gpusim.main(argv, env=dict(ENV))
    assert rc == 0, err
    return path


def check(path, profile, level="deep"):
    config = _health.load_config(None, {"node": "gpu-node-07", "expected": PROFILES[profile],
                                        "thresholds": {"nccl_busbw_min_gbps": NCCL_MIN[profile]}})
    result, _runner = _health.run(config, level=level, from_dir=path, use_state=False)
    return result


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_healthy_bundle_has_nothing_above_ok(tmp_path, profile):
    result = check(bundle(tmp_path, profile), profile)
    assert result["status"] == "ok", result["findings"]
    assert result["findings"] == [] and result["unreadable"] == [] and len(result["gpus"]) == 8


NODE_WIDE = ("driver_version", "driver_not_loaded", "nvml_mismatch", "sxid_fatal", "fabricmanager_down", "nccl_low_bw")


def _spec(fault):
    """The fault on GPU 2 or on port mlx5_2/1, or on the node for node-wide faults."""
    if fault.startswith("ib_"):
        return "%s:port=mlx5_2" % fault
    return fault if fault in NODE_WIDE else "%s:gpu=2" % fault


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_fault_is_found(tmp_path, profile, fault):
    code, severity, target = FAULTS[fault]
    result = check(bundle(tmp_path, profile, [_spec(fault)]), profile)
    found = [(f["code"], f["severity"], f["target"]) for f in result["findings"]]
    match = [f for f in found if f[0] == code and f[1] == severity and (target is None or f[2] == target)]
    assert match, "%s on %s: expected %s/%s/%s, found %s" % (fault, profile, code, severity, target, found)
    assert result["exit_code"] == {"warning": 1, "error": 2}[severity] or result["status"] == "error"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_busy_gpu_is_healthy(tmp_path, profile):
    """gpu_busy (a job's kernels at 80 %) is load, not a fault: the checker finds nothing above ok."""
    result = check(bundle(tmp_path, profile, ["gpu_busy:gpu=2,value=80"]), profile)
    assert result["status"] == "ok", result["findings"]
