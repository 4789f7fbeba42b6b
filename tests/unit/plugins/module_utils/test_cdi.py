"""The CDI spec of a node (module_utils/_cdi.py): what the collection's generator writes, and the devices of a Slurm
allocation picked from it through gres.conf (also from a spec shaped as nvidia-ctk writes it)."""

import json

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _cdi

# Debian 13's driver packages (dpkg-query -L, shortened): the libraries under nvidia/current, nvidia-smi under
# /usr/lib/nvidia/current, documentation and the alternatives' directories.
LISTING = {
    "libcuda1": ["/.", "/usr", "/usr/lib/x86_64-linux-gnu/nvidia/current",
                 "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.163.01",
                 "/usr/share/doc/libcuda1/copyright", "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so",
                 "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"],
    "libnvidia-ml1": ["/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.550.163.01"],
    "nvidia-smi": ["/usr/lib/nvidia/current/nvidia-smi", "/usr/lib/nvidia/current/nvidia-smi.1.gz"],
    "libnvidia-pkcs11-openssl3": ["/usr/lib/x86_64-linux-gnu/libnvidia-pkcs11-openssl3.so.550.163.01"],
}
# nvidia-smi's index is PCI order; the minor number is the driver's: they differ (as on the captured H100 node).
GPUS = [{"index": 0, "minor_number": 2, "uuid": "GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0"},
        {"index": 1, "minor_number": 0, "uuid": "GPU-3f1c1b11-51a1-4c35-9b13-5e0d00c100e1"},
        {"index": 2, "minor_number": 1, "uuid": "GPU-3f1c2c22-51a2-4c4a-9b16-5e0d00c101e2"}]
HOOK = "/usr/local/lib/gpucluster-cdi/bin/gpu-cdi-ldcache"


def spec():
    libraries, programs = _cdi.driver_files(LISTING)
    return _cdi.build(GPUS, libraries, programs, ["/dev/nvidiactl", "/dev/nvidia-uvm"], HOOK)


def test_the_driver_files_are_the_libraries_and_programs():
    libraries, programs = _cdi.driver_files(LISTING)
    assert libraries == [
        "/usr/lib/x86_64-linux-gnu/libnvidia-pkcs11-openssl3.so.550.163.01",
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.163.01",
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.550.163.01"]
    assert programs == [("/usr/lib/nvidia/current/nvidia-smi", "nvidia-smi")]


def test_the_spec_names_each_gpu_by_uuid_and_index_with_its_minors_device_node():
    built = spec()
    assert (built["cdiVersion"], built["kind"]) == ("0.5.0", "nvidia.com/gpu")
    devices = dict((d["name"], [n["path"] for n in d["containerEdits"]["deviceNodes"]]) for d in built["devices"])
    assert devices["GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0"] == devices["0"] == ["/dev/nvidia2"]
    assert devices["GPU-3f1c1b11-51a1-4c35-9b13-5e0d00c100e1"] == devices["1"] == ["/dev/nvidia0"]
    assert devices["all"] == ["/dev/nvidia2", "/dev/nvidia0", "/dev/nvidia1"]
    assert len(devices) == 7


def test_the_shared_edits_are_the_control_nodes_the_driver_files_and_the_ldcache_hook():
    edits = spec()["containerEdits"]
    assert edits["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    mounts = dict((m["containerPath"], m) for m in edits["mounts"])
    lib = "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.163.01"
    assert mounts[lib] == {"hostPath": lib, "containerPath": lib, "options": ["ro", "nosuid", "nodev", "bind"]}
    assert mounts["/usr/bin/nvidia-smi"]["hostPath"] == "/usr/lib/nvidia/current/nvidia-smi"
    # the hook runs with a fixed environment (never the container's) and a time limit
    assert edits["hooks"] == [{"hookName": "createContainer", "path": HOOK, "args": [
        "gpu-cdi-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu", "--folder",
        "/usr/lib/x86_64-linux-gnu/nvidia/current"], "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": 30}]


def test_the_file_is_json_that_reads_back_the_same():
    text = _cdi.dumps(spec())
    assert _cdi.loads(text, "x") == spec() and text == _cdi.dumps(json.loads(text))


@pytest.mark.parametrize("libraries, gpus, message", [
    ([], GPUS, "installed no libcuda.so.<version> (no library)"),
    (["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.1"], GPUS, "cannot start CUDA"),
    (["/usr/lib/libcuda.so.550.1"], [], "lists no GPU"),
    (["/usr/lib/libcuda.so.550.1"], [dict(GPUS[0], uuid=None)], "no index, minor number or UUID"),
    (["/usr/lib/libcuda.so.550.1"], [GPUS[0], dict(GPUS[1], minor_number=2)], "two GPUs have the minor number 2"),
])
def test_a_spec_without_what_cuda_needs_is_refused(libraries, gpus, message):
    with pytest.raises(_cdi.CDIError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _cdi.build(gpus, libraries, [], [], HOOK)


def test_a_file_that_is_not_a_spec_is_refused():
    with pytest.raises(_cdi.CDIError, match="/etc/cdi/nvidia.yaml is not a JSON CDI spec"):
        _cdi.loads("cdiVersion: 0.5.0\n", "/etc/cdi/nvidia.yaml")
    with pytest.raises(_cdi.CDIError, match="not a CDI spec of kind nvidia.com/gpu"):
        _cdi.loads('{"kind": "example.com/x", "devices": []}', "f")


GRES = """# Generic resources
NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[1-2] \\
    Cores=0-3
NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia0
NodeName=other Name=gpu Type=a100 File=/dev/nvidia[0-7]
Name=mps Count=100
"""


def test_the_gres_files_of_a_node_in_gres_conf_order():
    assert _cdi.gres_gpu_files(GRES, "gpu02") == ["/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia0"]
    assert len(_cdi.gres_gpu_files(GRES, "other")) == 8
    assert _cdi.gres_gpu_files("AutoDetect=nvml\n", "gpu01") == []


def test_the_allocation_is_slurms_device_numbers_checked_against_gres_conf_and_named_by_uuid():
    # SLURM_STEP_GPUS holds the N of each allocated /dev/nvidiaN (Slurm's dev_num), not a position in gres.conf:
    # /dev/nvidia0 is the GPU of minor number 0, nvidia-smi's index 1
    assert _cdi.allocation(spec(), GRES, "gpu01", "0,1") == [
        "nvidia.com/gpu=GPU-3f1c1b11-51a1-4c35-9b13-5e0d00c100e1", "nvidia.com/gpu=GPU-3f1c2c22-51a2-4c4a-9b16-5e0d00c101e2"]
    assert _cdi.allocation(spec(), GRES, "gpu01", "") == []
    # AutoDetect=nvml: gres.conf names no files, slurmd found them; the device number is still the minor
    assert _cdi.allocation(spec(), "AutoDetect=nvml\n", "gpu01", "2") == [
        "nvidia.com/gpu=GPU-3f1c0a00-51a0-4c2e-9b10-5e0d00c0ffe0"]


def test_the_allocation_from_a_spec_named_as_nvidia_ctk_names_devices():
    # nvidia-ctk: one device per name strategy, with the DRI nodes beside /dev/nvidiaN
    ctk = {"kind": "nvidia.com/gpu", "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}, {"path": "/dev/dri/card1"}]}},
        {"name": "GPU-aaaaaaaa-0000-0000-0000-000000000001",
         "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}, {"path": "/dev/dri/card1"}]}},
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}]}
    assert _cdi.devices_by_minor(ctk) == {1: "GPU-aaaaaaaa-0000-0000-0000-000000000001"}
    assert _cdi.allocation(ctk, GRES, "gpu02", "1") == ["nvidia.com/gpu=GPU-aaaaaaaa-0000-0000-0000-000000000001"]


@pytest.mark.parametrize("ids, message", [
    ("3", "Slurm allocated /dev/nvidia3 on gpu01, which this node's gres.conf does not name"),
    ("x", "Slurm allocated GPU 'x' on gpu01: not the number of a /dev/nvidiaN device"),
    ("NoDevFiles", "without device files (NoDevFiles)"),
])
def test_an_allocation_gres_conf_does_not_have_is_refused(ids, message):
    with pytest.raises(_cdi.CDIError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _cdi.allocation(spec(), GRES, "gpu01", ids)


def test_an_allocated_gpu_the_spec_lacks_is_refused():
    one = _cdi.build(GPUS[:1], ["/usr/lib/libcuda.so.550.1"], [], [], HOOK)
    with pytest.raises(_cdi.CDIError, match="f has no device for /dev/nvidia1 .a GPU of this job on gpu01.: rerun"):
        _cdi.allocation(one, GRES, "gpu01", "1", "f")
