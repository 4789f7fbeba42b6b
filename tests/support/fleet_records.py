"""Made-up health sweep records (the ``nodes`` option of gpucluster.ops.fleet_report), in one place.

The fleet model's and the module's unit tests, the headless-browser test of the page (tests/unit/test_fleet_browser.py)
and bench/fleet_report.py build their fleets from these. A record has the shape docs/health-sweep.md gives; ``result``
has the shape the checker's result has (gpu_health's RETURN), the GPUs those of the simulator's H100 profile.
"""

import copy

MODEL = "NVIDIA H100 80GB HBM3"
VBIOS = "96.00.99.00.01"
VERSIONS = {"driver_version": "550.127.05", "cuda_version": "12.4", "nccl_version": "2.21.5",
            "ofed_version": "MLNX_OFED_LINUX-24.07-0.6.1.0", "vbios_versions": [VBIOS],
            "ib_fw_versions": ["28.39.1002"]}
EXPECTED = {"gpu_count": 8, "gpu_model": MODEL, "driver_version": "550"}
CHECKED_AT = "2026-12-01T06:00:00Z"


def gpus(host, count=8, vbios=VBIOS):
    """``count`` GPUs of an HGX H100 board; serials and UUIDs derive from the host name and index."""
    number = sum(ord(c) for c in host)
    return [{"index": i, "bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * i), "uuid": "GPU-%08x-%04d" % (number, i),
             "name": MODEL, "serial": "1654%05d%04d" % (number, i), "vbios_version": vbios} for i in range(count)]


def finding(code, severity, target, message, check="memory", action="drain the node and reset the GPU"):
    return {"check": check, "code": code, "severity": severity, "target": target, "message": message,
            "action": action}


def record(host, findings=(), group="gpu_h100", count=8, source="cli", slurm_state="IDLE", slurm_reason=None,
           versions=None, expected=None):
    """A reachable node's record; its status is the worst of ``findings`` (ok without any)."""
    order = ("ok", "info", "warning", "unknown", "error")
    status = max([f["severity"] for f in findings] or ["ok"], key=order.index)
    return {
        "reachable": True, "error": None, "source": source, "group": group,
        "expected": copy.deepcopy(EXPECTED if expected is None else expected),
        "versions": copy.deepcopy(VERSIONS if versions is None else versions),
        "slurm": {"name": host, "state": slurm_state, "reason": slurm_reason},
        "result": {"status": status, "findings": list(findings), "gpus": gpus(host, count), "node": host,
                   "level": "quick", "source": "live", "checked_at": CHECKED_AT, "driver_version": "550.127.05",
                   "unreadable": [], "missing_inputs": [], "notes": []},
    }


def unreachable(error="Failed to connect to the host via ssh: Connection timed out"):
    return {"reachable": False, "error": error, "source": None, "group": "gpu_h100", "expected": {},
            "versions": {}, "slurm": None, "result": None}


REMAP_FAILURE = finding("GPU-ROW-REMAP-FAILURE", "error", "gpu3", "GPU 3 (00000000:48:00.0) has a row remapping "
                        "failure", action="drain the node, reset the GPU and contact support (likely RMA)")


def three_nodes():
    """Three nodes, gpu02 faulty: a row remapping failure on GPU 3 (an RMA), drained by the health checks."""
    return {
        "gpu01": record("gpu01"),
        "gpu02": record("gpu02", [REMAP_FAILURE], slurm_state="DRAINED",
                        slurm_reason="gpucluster-health: GPU-ROW-REMAP-FAILURE"),
        "gpu03": record("gpu03"),
    }


def fleet(count, gpus_per_node=8):
    """``count`` nodes of ``gpus_per_node`` GPUs in four groups; a few are faulty, one unreachable, one drifts."""
    nodes = {}
    expected = dict(EXPECTED, gpu_count=gpus_per_node)
    for n in range(count):
        host = "gpu%04d" % n
        group = "gpu_h100_%d" % (n % 4)
        if n % 97 == 5:
            nodes[host] = record(host, [REMAP_FAILURE], group=group, count=gpus_per_node, slurm_state="DRAINED",
                                 slurm_reason="gpucluster-health: GPU-ROW-REMAP-FAILURE", expected=expected)
        elif n % 131 == 7:
            nodes[host] = unreachable()
        elif n % 53 == 11:
            nodes[host] = record(host, group=group, count=gpus_per_node, expected=expected,
                                 versions=dict(VERSIONS, driver_version="535.161.08"))
        else:
            nodes[host] = record(host, group=group, count=gpus_per_node, expected=expected)
    return nodes
