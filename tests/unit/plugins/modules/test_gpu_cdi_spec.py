"""gpu_cdi_spec main(): the collection's generator from a captured nvidia-smi -q -x and a Debian driver package list,
nvidia-ctk's spec, check mode, idempotence and the refusals (programs answered through a patched run_command)."""

import json
import os

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import gpu_cdi_spec
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
LIB = "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.163.01"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class Node(object):
    """nvidia-smi, dpkg-query and nvidia-ctk of a node; ``installed`` maps package to its file list."""

    def __init__(self, installed=None, smi=None, ctk=None):
        self.installed = {"libcuda1": [LIB, "/usr/share/doc/libcuda1/copyright"],
                          "nvidia-smi": ["/usr/lib/nvidia/current/nvidia-smi"]} if installed is None else installed
        self.smi = smi or (0, fixture("nvsmi/h100x8_v13.xml"), "")
        self.ctk = ctk
        self.calls = []

    def __call__(self, argv, environ_update=None, **_kwargs):
        self.calls.append(list(argv))
        assert argv[:2] == ["timeout", "120"] and environ_update == {"LC_ALL": "C", "LANG": "C"}
        argv = argv[2:]
        if argv[0].endswith("nvidia-smi"):
            return self.smi
        if argv[0] == "nvidia-ctk":
            return self.ctk
        if argv[:2] == ["dpkg-query", "-W"]:
            rows = ["%s\t%s" % (p, "installed" if p in self.installed else "not-installed") for p in argv[4:]]
            return 0, "".join(r + "\n" for r in rows), ""
        if argv[:2] == ["dpkg-query", "-L"]:
            return 0, "".join(f + "\n" for f in self.installed[argv[2]]), ""
        raise AssertionError(argv)


@pytest.fixture(autouse=True)
def node_files(monkeypatch):
    """Every listed driver file is a regular file here; the node has nvidiactl and no UVM device."""
    monkeypatch.setattr(gpu_cdi_spec, "regular_file", lambda path: path.startswith("/usr/lib/"))
    monkeypatch.setattr(gpu_cdi_spec, "exists", lambda path: path == "/dev/nvidiactl")


def test_the_spec_is_written_once_then_left_alone(tmp_path):
    dest = str(tmp_path / "cdi" / "nvidia.yaml")
    node = Node()
    result = run_module(gpu_cdi_spec, {"dest": dest, "nvidia_smi": "/opt/gpusim/bin/nvidia-smi"}, run_command=node)
    assert result["failed"] is False and result["changed"] is True, result
    with open(dest) as handle:
        spec = json.load(handle)
    assert oct(os.stat(dest).st_mode & 0o777) == "0o644"
    # the captured H100 node: nvidia-smi's GPU 0 has minor number 2
    assert result["gpus"]["2"] == "GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0" and len(result["gpus"]) == 8
    assert result["libraries"] == ["/usr/lib/nvidia/current/nvidia-smi", LIB]
    assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}]
    again = run_module(gpu_cdi_spec, {"dest": dest, "nvidia_smi": "/opt/gpusim/bin/nvidia-smi"}, run_command=Node())
    assert again["changed"] is False and again["diff"]["before"] == again["diff"]["after"]


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path):
    dest = str(tmp_path / "nvidia.yaml")
    result = run_module(gpu_cdi_spec, {"dest": dest}, check=True, run_command=Node())
    assert result["changed"] is True and not os.path.exists(dest)
    assert '"kind": "nvidia.com/gpu"' in result["diff"]["after"] and result["diff"]["before"] == ""


def test_nvidia_ctk_writes_the_spec_where_the_toolkit_is_installed(tmp_path):
    dest = str(tmp_path / "nvidia.yaml")
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": "GPU-aaaaaaaa-0000-0000-0000-000000000001", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
        "containerEdits": {}}
    node = Node(ctk=(0, json.dumps(spec), ""))
    result = run_module(gpu_cdi_spec, {"dest": dest, "generator": "nvidia-ctk"}, run_command=node)
    assert result["changed"] and result["gpus"] == {"0": "GPU-aaaaaaaa-0000-0000-0000-000000000001"}
    assert node.calls == [["timeout", "120", "nvidia-ctk", "cdi", "generate", "--format", "json",
                           "--device-name-strategy", "uuid", "--device-name-strategy", "index"]]
    failing = run_module(gpu_cdi_spec, {"dest": dest, "generator": "nvidia-ctk"},
                         run_command=Node(ctk=(1, "", "ERROR: failed to initialize NVML\n")))
    assert failing["failed"] and "failed (rc 1): ERROR: failed to initialize NVML" in failing["msg"]


@pytest.mark.parametrize("node, message", [
    (Node(installed={}), "the driver packages installed no libcuda.so.<version> (no library): a container with the "
                         "GPUs' device nodes but not the driver's libraries cannot start CUDA (driver packages "
                         "installed here: none)"),
    (Node(smi=(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "")),
     "did not list this node's GPUs"),
])
def test_a_node_without_driver_or_gpus_fails_and_writes_nothing(tmp_path, node, message):
    dest = str(tmp_path / "nvidia.yaml")
    result = run_module(gpu_cdi_spec, {"dest": dest}, run_command=node)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert not os.path.exists(dest)
