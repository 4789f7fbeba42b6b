"""Acceptance: every real capture in ../shared/fixtures/real (and the peer's inputs) goes through
bin/gpucluster-health --from-dir without a traceback; nvidia-smi captures give GPUs or land in unreadable/errors.

Each capture is placed in a bundle under the file name the checker reads for its kind, and the real command line is
run with plain python3 (no Ansible on the path). Skipped when the shared folder is absent; under CI=true that
fails, naming it (tests/support/skip_policy.py)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from skip_policy import needs_shared, shared_path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
REAL = shared_path("GPUCLUSTER_REAL_FIXTURES", "fixtures", "real")
PEER = os.path.join(os.path.dirname(REAL), "peer-azurehpc")
CHECKER = os.path.join(ROOT, "bin", "gpucluster-health")
CONFIG = {"expected": {"gpu_count": 8, "nvlinks_per_gpu": 12, "nvswitch": True, "ib_port_count": 8,
                       "ib_rate_gbps": 200},
          "thresholds": {"nccl_busbw_min_gbps": 100}}
# Findings that mean the checker understood an nvidia-smi error message for what it is.
NVSMI_ERROR_CODES = {"GPU-NVML-MISMATCH", "GPU-DRIVER-NOT-LOADED", "GPU-NO-DEVICES", "GPU-FALLEN-OFF-BUS",
                     "GPU-NVSMI-FAILED"}


def _bundle_name(rel):
    """The bundle file a capture stands for, from its folder and name."""
    folder, name = rel.split("/", 1)[0], os.path.basename(rel)
    if folder == "nvidia-smi-xml":
        return "nvidia-smi-q.xml"
    if folder in ("nvidia-smi-q", "captures"):
        return "nvidia-smi-q.txt"
    if folder == "nvidia-smi-csv":
        return "nvidia-smi-query.csv"
    if folder == "nvlink-topo":
        return "topo.txt" if "topo" in name else "nvlink-status.txt"
    if folder == "infiniband":
        if os.path.isdir(os.path.join(REAL, rel)):
            return "sys-class-infiniband"
        return "kernel.log" if name.endswith(".log") else ("ibstat.txt" if "ibstat" in name else None)
    if folder == "xid":
        return "kernel.log" if name.endswith(".log") else None
    if folder == "dcgm":
        return "dcgmi-diag.json" if name.endswith(".json") else ("dcgmi-diag.txt" if "dcgmi" in name else None)
    if folder == "nccl-tests":
        return "nccl-all-reduce.txt"
    return None


def _captures():
    if not os.path.isdir(REAL):
        return []
    found = []
    for folder in sorted(os.listdir(REAL)):
        path = os.path.join(REAL, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            rel = "%s/%s" % (folder, name)
            if _bundle_name(rel):
                found.append((rel, _bundle_name(rel)))
    if os.path.isdir(PEER):
        peer_kinds = {"nvsmi": "nvidia-smi-q.txt", "nvlink": "nvlink-status.txt", "syslog": "kernel.log"}
        for name in sorted(os.listdir(PEER)):
            kind = next((v for k, v in peer_kinds.items() if k in name), None)
            if kind:
                found.append(("../peer-azurehpc/" + name, kind))
    return found


def _run(bundle, tmp_path):
    config = tmp_path / "health.json"
    config.write_text(json.dumps(CONFIG))
    proc = subprocess.run([sys.executable, "-I", CHECKER, "--from-dir", bundle, "--config", str(config),
                           "--level", "deep", "--format", "json", "--node", "replay"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    return proc


@pytest.mark.realdata
@needs_shared(REAL, "the real captures")
@pytest.mark.parametrize("rel,kind", _captures(), ids=[c[0] for c in _captures()])
def test_capture_replays_without_traceback(tmp_path, rel, kind):
    source = os.path.normpath(os.path.join(REAL, rel))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    target = bundle / kind
    if os.path.isdir(source):
        shutil.copytree(source, str(target))
    else:
        shutil.copy(source, str(target))
    (bundle / "captured_at").write_text("2026-11-30T07:00:00Z\n")
    proc = _run(str(bundle), tmp_path)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode in (0, 1, 2, 3), (proc.returncode, proc.stderr.decode())
    result = json.loads(proc.stdout)
    if kind.startswith("nvidia-smi"):
        codes = {f["code"] for f in result["findings"]}
        read_gpus = len(result["gpus"]) > 0
        assert read_gpus or result["unreadable"] or codes & NVSMI_ERROR_CODES, (rel, result)
        for gpu in result["gpus"]:
            assert gpu["bus_id"] is None or gpu["bus_id"].count(":") == 2, gpu


@pytest.mark.realdata
@needs_shared(REAL, "the real captures")
def test_every_capture_kind_is_covered():
    kinds = {kind for _rel, kind in _captures()}
    assert {"nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv", "nvlink-status.txt", "ibstat.txt",
            "sys-class-infiniband", "kernel.log", "dcgmi-diag.txt", "nccl-all-reduce.txt"} <= kinds
