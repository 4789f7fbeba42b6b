"""slurm_node_lines: NodeName lines from hostvars, facts and declared variables."""

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import FilterModule, slurm_node_lines
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_render import gpu_type
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import gpu_facts, host_facts

A100 = "CPUs=128 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2 RealMemory=1000448 Gres=gpu:a100:8"


def cluster(count=4, **kwargs):
    return dict(("gpu%03d" % i, host_facts(gpus=gpu_facts(), **kwargs)) for i in range(1, count + 1))


def test_registered():
    assert FilterModule().filters()["slurm_node_lines"] is slurm_node_lines


def test_identical_hosts_fold_into_one_line():
    hostvars = cluster(4)
    assert slurm_node_lines(sorted(hostvars), hostvars) == ["NodeName=gpu[001-004] " + A100]


def test_memtotal_jitter_still_folds():
    """Identical servers report memtotal a few MiB apart; RealMemory is rounded so they share a line."""
    hostvars = cluster(3)
    hostvars["gpu002"]["ansible_facts"]["memtotal_mb"] += 7
    hostvars["gpu003"]["ansible_facts"]["memtotal_mb"] -= 5
    assert len(slurm_node_lines(sorted(hostvars), hostvars)) == 1


def test_node_types_give_one_line_each_in_slurm_order():
    hostvars = cluster(2)
    hostvars["cpu01"] = host_facts(sockets=2, cores=16, threads=1, memtotal=257000)
    hostvars["gpu002"]["slurm_node_features"] = ["nvme"]
    lines = slurm_node_lines(["gpu002", "cpu01", "gpu001"], hostvars)
    assert lines == [
        "NodeName=cpu01 CPUs=32 Sockets=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=248832",
        "NodeName=gpu001 " + A100,
        "NodeName=gpu002 " + A100 + " Features=nvme",
    ]


def test_declared_variables_win_over_facts():
    hostvars = cluster(1)
    hostvars["gpu001"].update(slurm_node_cpus=64, slurm_node_sockets=2, slurm_node_cores_per_socket=32,
                              slurm_node_threads_per_core=1, slurm_node_real_memory=500000, slurm_node_weight=10,
                              slurm_node_gres=[{"name": "gpu", "type": "a100", "count": 8}, {"name": "shard", "count": "64"}],
                              slurm_node_features=["a100", "ib"], slurm_node_name="node1")
    assert slurm_node_lines(["gpu001"], hostvars) == [
        "NodeName=node1 CPUs=64 Sockets=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=500000 "
        "Gres=gpu:a100:8,shard:64 Features=a100,ib Weight=10"]


def test_variables_only_without_facts():
    hostvars = {"n1.cluster.example": {"slurm_node_cpus": "8", "slurm_node_real_memory": "16000"}}
    assert slurm_node_lines(["n1.cluster.example"], hostvars) == ["NodeName=n1 CPUs=8 RealMemory=16000"]


def test_memory_reserve_options_and_variable():
    hostvars = {"n1": host_facts(memtotal=100000), "n2": host_facts(memtotal=100000)}
    hostvars["n2"]["slurm_node_memory_reserve_mib"] = 0
    lines = slurm_node_lines(["n1", "n2"], hostvars, memory_reserve_percent=10, memory_round_mib=1000)
    assert [line.split("RealMemory=")[1] for line in lines] == ["90000", "100000"]


def test_gpu_type_map_renames():
    hostvars = cluster(1)
    lines = slurm_node_lines(["gpu001"], hostvars, gpu_type_map={"NVIDIA A100-SXM4-80GB": "a100-80g"})
    assert "Gres=gpu:a100-80g:8" in lines[0]
    hostvars["gpu001"]["slurm_gpu_type_map"] = {"nvidia  a100-sxm4-80gb": "big"}
    assert "Gres=gpu:big:8" in slurm_node_lines(["gpu001"], hostvars)[0]


@pytest.mark.parametrize("name, gres_type", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A10G", "a10g"),
    ("Tesla V100S-PCIE-32GB", "v100s"), ("Tesla T4", "t4"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA RTX A5000", "a5000"), ("NVIDIA GeForce RTX 4090", "geforce_rtx_4090"), ("NVIDIA TITAN V", "titan_v"),
])
def test_gpu_type_rule(name, gres_type):
    assert gpu_type(name) == gres_type
    assert gres_type in "_".join(name.lower().split()), "must be part of what AutoDetect=nvml reports"


# --- one test per error class ----------------------------------------------------------------------------------------

def _fails(hostvars, match, **kwargs):
    with pytest.raises(AnsibleFilterError, match=match):
        slurm_node_lines(sorted(hostvars), hostvars, **kwargs)


def test_missing_cpu_count_names_host_and_variable():
    _fails({"n1": {"slurm_node_real_memory": 1000}}, r"host n1: no CPU count: set slurm_node_cpus")


def test_missing_memory_names_host_and_variable():
    _fails({"n1": {"slurm_node_cpus": 4}}, r"host n1: no memory size: set slurm_node_real_memory")


@pytest.mark.parametrize("variable, value", [
    ("slurm_node_cpus", "abc"), ("slurm_node_cpus", 0), ("slurm_node_cpus", True), ("slurm_node_sockets", -2),
    ("slurm_node_real_memory", "1.5G"), ("slurm_node_weight", "heavy"),
])
def test_bad_numbers_name_host_variable_and_value(variable, value):
    hostvars = cluster(1)
    hostvars["gpu001"][variable] = value
    _fails(hostvars, r"host gpu001: %s is %r, which is not an integer" % (variable, value))


def test_non_numeric_gres_count():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_gres"] = [{"name": "gpu", "type": "a100", "count": "eight"}]
    _fails(hostvars, r"host gpu001: slurm_node_gres\[0\].count is 'eight', which is not an integer")


@pytest.mark.parametrize("gres, match", [
    ("gpu:8", r"slurm_node_gres is 'gpu:8', not a list"),
    ([{"name": "gpu 1", "count": 1}], r"slurm_node_gres\[0\].name is 'gpu 1'"),
    ([{"name": "gpu", "type": "a 100", "count": 1}], r"slurm_node_gres\[0\].type is 'a 100'"),
    ([{"name": "gpu", "type": "a100"}], r"slurm_node_gres\[0\] has no count"),
])
def test_bad_gres_declarations(gres, match):
    hostvars = {"n1": host_facts()}
    hostvars["n1"]["slurm_node_gres"] = gres
    _fails(hostvars, match)


def test_declared_gres_disagreeing_with_gathered_gpus():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_gres"] = [{"name": "gpu", "type": "a100", "count": 4}]
    _fails(hostvars, r"host gpu001: slurm_node_gres declares 4 GPUs but the gathered facts list 8 \(NVIDIA A100-SXM4-80GB\)")


@pytest.mark.parametrize("features", [["has space"], "a,b c", [1], {"a": 1}])
def test_bad_feature_names(features):
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_features"] = features
    _fails(hostvars, r"host gpu001: slurm_node_features")


def test_cpus_disagreeing_with_layout():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_cpus"] = 100
    _fails(hostvars, r"host gpu001: CPUs=100 does not match sockets 2 x cores 32 x threads 2")


def test_incomplete_layout():
    _fails({"n1": {"slurm_node_cpus": 8, "slurm_node_sockets": 2, "slurm_node_real_memory": 100}},
           r"host n1: incomplete CPU layout: set slurm_node_cores_per_socket, slurm_node_threads_per_core")


def test_reserve_larger_than_memory():
    hostvars = {"n1": host_facts(memtotal=2000)}
    hostvars["n1"]["slurm_node_memory_reserve_mib"] = 4096
    _fails(hostvars, r"host n1: memtotal 2000 MiB minus the reserve 4096 MiB leaves no memory")


def test_duplicate_node_names():
    hostvars = cluster(2)
    hostvars["gpu002"]["slurm_node_name"] = "gpu001"
    _fails(hostvars, r"hosts gpu001 and gpu002 have the same Slurm node name gpu001")


def test_bad_node_name():
    hostvars = cluster(1)
    hostvars["gpu001"]["slurm_node_name"] = "gpu[1]"
    _fails(hostvars, r"host gpu001: the Slurm node name 'gpu\[1\]'")


def test_mig_enabled_gpu():
    hostvars = cluster(1)
    hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"][3]["mig_mode"] = {"current": True, "pending": True}
    _fails(hostvars, r"host gpu001: gpucluster_gpus\[3\]: MIG is enabled")


def test_gpu_without_name_or_minor():
    hostvars = cluster(1)
    hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"][0]["name"] = None
    _fails(hostvars, r"host gpu001: gpucluster_gpus\[0\]: no product name")
    hostvars = cluster(1)
    del hostvars["gpu001"]["ansible_facts"]["gpucluster_gpus"][1]["minor_number"]
    _fails(hostvars, r"host gpu001: gpucluster_gpus\[1\]: minor_number is None")


def test_memory_variants_of_one_type_need_a_map():
    hostvars = cluster(2)
    hostvars["gpu002"]["ansible_facts"]["gpucluster_gpus"] = gpu_facts(name="NVIDIA A100-SXM4-40GB", memory=40960)
    _fails(hostvars, r"hosts gpu001 \(NVIDIA A100-SXM4-80GB\) and gpu002 \(NVIDIA A100-SXM4-40GB\) both map to GPU type 'a100'")
    lines = slurm_node_lines(sorted(hostvars), hostvars, gpu_type_map={"NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb"})
    assert [line.split("Gres=")[1] for line in lines] == ["gpu:a100:8", "gpu:a100-sxm4-40gb:8"]


def test_host_not_in_hostvars_and_bad_input():
    with pytest.raises(AnsibleFilterError, match="host ghost: not in hostvars"):
        slurm_node_lines(["ghost"], {})
    with pytest.raises(AnsibleFilterError, match="expected a list of inventory host names"):
        slurm_node_lines("gpu001", cluster(1))


def test_bad_options():
    with pytest.raises(AnsibleFilterError, match="option memory_round_mib is 0"):
        slurm_node_lines(["gpu001"], cluster(1), memory_round_mib=0)


def test_input_not_modified():
    hostvars = cluster(2)
    before = copy.deepcopy(hostvars)
    slurm_node_lines(sorted(hostvars), hostvars)
    assert hostvars == before
