# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fixtures for the GPU node simulator's tests: the module, the real captures, and every output of a node."""

import json
import os

import pytest
from skip_policy import require_shared, shared_path

from ansible_collections.gpucluster.ops.tests.gpusim import gpusim as gpusim_module

NOW = "2026-11-30T07:00:00Z"
ENV = {"GPUSIM_NOW": NOW, "GPUSIM_HOSTNAME": "gpu-node-07"}


@pytest.fixture(name="sim")
def fixture_sim():
    """The simulator module."""
    return gpusim_module


@pytest.fixture(name="env")
def fixture_env():
    """A fixed time and host name, so outputs are comparable."""
    return dict(ENV)


@pytest.fixture(name="real_dir", scope="session")
def fixture_real_dir():
    """The real captures (absent: skip, or fail naming them under CI=true)."""
    return require_shared(shared_path("GPUCLUSTER_REAL_FIXTURES", "fixtures", "real"), "the real captures")


@pytest.fixture(name="read_real")
def fixture_read_real(real_dir):
    """Read a real capture by its path under the real captures folder."""
    def read(relative):
        path = require_shared(os.path.join(real_dir, relative), "a real capture")
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    return read


@pytest.fixture(name="profile", scope="session")
def fixture_profile():
    """A built-in profile with some fields overridden (driver_version=..., gpu_count=...)."""
    def make(name="h100-sxm-8", **overrides):
        data = gpusim_module.load_profile(dict(ENV), name)
        if "driver_version" in overrides:
            data.pop("cuda_version", None)
        data.update(overrides)
        return data
    return make


def _run(tool, args, profile, faults):
    rc, out, err = gpusim_module.run_tool(tool, args, dict(ENV), profile, faults)
    return out if rc == 0 else "rc=%d\n%s---\n%s" % (rc, out, err)


def all_outputs(profile, faults=()):
    """Every output of a node, keyed by a short name (a failing command shows its rc, stdout and stderr)."""
    node = gpusim_module.build_node(profile, dict(ENV), faults)
    gpus = max(1, len(node.gpus))
    commands = {
        "xml": ("nvidia-smi", ["-q", "-x"]), "text": ("nvidia-smi", ["-q"]),
        "csv": ("nvidia-smi", ["--query-gpu=" + gpusim_module.DEFAULT_QUERY, "--format=csv"]),
        "list": ("nvidia-smi", ["-L"]), "table": ("nvidia-smi", []), "version": ("nvidia-smi", ["--version"]),
        "nvlink_s": ("nvidia-smi", ["nvlink", "-s"]), "nvlink_e": ("nvidia-smi", ["nvlink", "-e"]),
        "topo": ("nvidia-smi", ["topo", "-m"]), "ibstat": ("ibstat", []), "ibstatus": ("ibstatus", []),
        "dcgm": ("dcgmi", ["diag", "-r", "3", "-j"]), "dcgm_text": ("dcgmi", ["diag", "-r", "3"]),
        "nccl": ("all_reduce_perf", ["-b", "8", "-e", "8G", "-f", "2", "-g", str(gpus)]),
        "fm": ("systemctl", ["is-active", "nvidia-fabricmanager"]),
    }
    outputs = dict((key, _run(tool, args, profile, faults)) for key, (tool, args) in commands.items())
    outputs["sysfs"] = json.dumps(gpusim_module.sysfs_files(node), sort_keys=True)
    outputs["kernel"] = gpusim_module.render_kernel_log(node)
    return outputs


@pytest.fixture(name="outputs", scope="session")
def fixture_outputs():
    """all_outputs(profile, faults)."""
    return all_outputs
