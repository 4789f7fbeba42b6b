"""GPU type names for the product names found in real nvidia-smi captures (read in place, never copied)."""

import os
import re

import pytest
from skip_policy import needs_shared, shared_path

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import NAME_RE, gpu_type

REAL = shared_path("GPUCLUSTER_REAL_FIXTURES", "fixtures", "real")
PATTERNS = (re.compile(r"Product Name\s*:\s*(.+?)\s*$", re.M), re.compile(r"<product_name>\s*(.+?)\s*</product_name>"))
EXPECTED = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200", "NVIDIA L40S": "l40s", "NVIDIA A100-SXM4-80GB": "a100",
            "NVIDIA A100-SXM4-40GB": "a100", "NVIDIA A10G": "a10g", "Tesla V100S-PCIE-32GB": "v100s", "Tesla T4": "t4"}


def _product_names():
    names = set()
    for folder, _dirs, files in os.walk(REAL):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
            for pattern in PATTERNS:
                names.update(pattern.findall(text))
    return sorted(names)


@pytest.mark.realdata
@needs_shared(REAL, "the real captures (or set GPUCLUSTER_REAL_FIXTURES)")
def test_every_real_product_name_gets_a_type_autodetect_can_match():
    names = _product_names()
    assert len(names) >= 10
    for name in names:
        gres_type = gpu_type(name)
        assert NAME_RE.match(gres_type), name
        assert gres_type in "_".join(name.lower().split()), name
    for name, gres_type in EXPECTED.items():
        if name in names:
            assert gpu_type(name) == gres_type
    assert set(EXPECTED) & set(names)
