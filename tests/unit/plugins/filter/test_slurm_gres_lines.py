"""slurm_gres_lines: gres.conf lines with device files, types and Slurm core ids."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import FilterModule, slurm_gres_lines
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import gpu_facts, host_facts


def cluster(count=2, **kwargs):
    return dict(("gpu%03d" % i, host_facts(gpus=gpu_facts(**kwargs))) for i in range(1, count + 1))


def test_registered():
    assert FilterModule().filters()["slurm_gres_lines"] is slurm_gres_lines


def test_files_types_and_cores_fold_over_hosts():
    hostvars = cluster(3)
    assert slurm_gres_lines(sorted(hostvars), hostvars) == [
        "NodeName=gpu[001-003] Name=gpu Type=a100 File=/dev/nvidia[0-3] Cores=0-31",
        "NodeName=gpu[001-003] Name=gpu Type=a100 File=/dev/nvidia[4-7] Cores=32-63",
    ]


def test_hosts_without_gpus_are_left_out():
    hostvars = cluster(1)
    hostvars["cpu01"] = host_facts()
    assert all(line.startswith("NodeName=gpu001 ") for line in slurm_gres_lines(["cpu01", "gpu001"], hostvars))


def test_cpu_numbering_adjacent():
    """Sibling threads numbered next to each other: CPUs 0-63 are cores 0-31 of socket 0."""
    hostvars = cluster(1, affinity=("0-63", "64-127"))
    hostvars["gpu001"]["slurm_gres_cpu_numbering"] = "adjacent"
    assert [line.split("Cores=")[1] for line in slurm_gres_lines(["gpu001"], hostvars)] == ["0-31", "32-63"]


def test_h100_topo_affinity_as_nvidia_smi_prints_it():
    """2 x 48 cores with HT: GPU0-3 on 0-47,96-143 (socket 0), GPU4-7 on 48-95,144-191."""
    hostvars = {"h1": host_facts(sockets=2, cores=48, threads=2,
                                 gpus=gpu_facts(name="NVIDIA H100 80GB HBM3", affinity=("0-47,96-143", "48-95,144-191")))}
    assert slurm_gres_lines(["h1"], hostvars) == [
        "NodeName=h1 Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-47",
        "NodeName=h1 Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=48-95",
    ]


def test_unknown_affinity_leaves_cores_out():
    hostvars = cluster(1, affinity=None)
    hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"][0]["cpu_affinity"] = "N/A"
    assert slurm_gres_lines(["gpu001"], hostvars) == ["NodeName=gpu001 Name=gpu Type=a100 File=/dev/nvidia[0-7]"]


def test_gaps_in_minor_numbers():
    hostvars = cluster(1, affinity=None)
    hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"] = [
        dict(g, minor_number=m) for g, m in zip(gpu_facts(count=3, affinity=None), (0, 2, 3))]
    assert slurm_gres_lines(["gpu001"], hostvars) == ["NodeName=gpu001 Name=gpu Type=a100 File=/dev/nvidia[0,2-3]"]


def test_declared_gres_without_facts():
    hostvars = {"n1": {"slurm_node_cpus": 8, "slurm_node_gres": [
        {"name": "gpu", "type": "l40s", "count": 2}, {"name": "gpu", "type": "l4", "count": 1}, {"name": "shard", "count": 16}]}}
    assert slurm_gres_lines(["n1"], hostvars) == [
        "NodeName=n1 Name=gpu Type=l40s File=/dev/nvidia[0-1]",
        "NodeName=n1 Name=gpu Type=l4 File=/dev/nvidia2",
        "NodeName=n1 Name=shard Count=16",
    ]


def test_declared_single_type_renames_gathered_gpus():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_gres"] = [{"name": "gpu", "type": "a100-80g", "count": 8}]
    assert slurm_gres_lines(["gpu001"], hostvars)[0] == "NodeName=gpu001 Name=gpu Type=a100-80g File=/dev/nvidia[0-3] Cores=0-31"


def test_autodetect_nvml_per_host_and_default():
    hostvars = cluster(2)
    hostvars["gpu002"]["slurm_gres_autodetect"] = "nvml"
    lines = slurm_gres_lines(sorted(hostvars), hostvars)
    assert lines[-1] == "NodeName=gpu002 AutoDetect=nvml"
    assert slurm_gres_lines(sorted(hostvars), hostvars, autodetect="nvml") == ["NodeName=gpu[001-002] AutoDetect=nvml"]


def test_autodetect_needs_types_that_are_part_of_the_detected_name():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_gres_autodetect"] = "nvml"
    with pytest.raises(AnsibleFilterError, match=r"host gpu001: GPU type 'a100-80g' is not part of 'nvidia_a100-sxm4-80gb'"):
        slurm_gres_lines(["gpu001"], hostvars, gpu_type_map={"NVIDIA A100-SXM4-80GB": "a100-80g"})


@pytest.mark.parametrize("variable, value, match", [
    ("slurm_gres_autodetect", "rsmi", r"host gpu001: slurm_gres_autodetect is 'rsmi', not one of nvml, off"),
    ("slurm_gres_cpu_numbering", "linear", r"host gpu001: slurm_gres_cpu_numbering is 'linear'"),
])
def test_bad_host_settings(variable, value, match):
    hostvars = cluster(1)
    hostvars["gpu001"][variable] = value
    with pytest.raises(AnsibleFilterError, match=match):
        slurm_gres_lines(["gpu001"], hostvars)


@pytest.mark.parametrize("affinity, match", [
    ("0-31;64-95", r"host gpu001: GPU 0 cpu_affinity '0-31;64-95' is not a CPU list"),
    ("0-255", r"host gpu001: GPU 0 cpu_affinity '0-255' names CPUs beyond the 128 the node has"),
])
def test_bad_affinity(affinity, match):
    hostvars = cluster(1)
    hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"][0]["cpu_affinity"] = affinity
    with pytest.raises(AnsibleFilterError, match=match):
        slurm_gres_lines(["gpu001"], hostvars)


def test_non_numeric_declared_count():
    hostvars = {"n1": {"slurm_node_cpus": 8, "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": "eight"}]}}
    with pytest.raises(AnsibleFilterError, match=r"host n1: slurm_node_gres\[0\].count is 'eight'"):
        slurm_gres_lines(["n1"], hostvars)
