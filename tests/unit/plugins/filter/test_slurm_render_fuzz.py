"""Whatever the inventory holds, the Slurm filters answer with lines or an AnsibleFilterError, nothing else."""

from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import slurm_gres_lines
from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import slurm_node_lines
from ansible_collections.gpucluster.ops.plugins.filter.slurm_partition_lines import slurm_partition_lines
from ansible_collections.gpucluster.ops.plugins.filter.slurm_topology_lines import slurm_topology_lines
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import gpu_facts, host_facts

ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.text(max_size=12)),
                   lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                   max_leaves=6)
VARIABLES = ["slurm_node_cpus", "slurm_node_sockets", "slurm_node_cores_per_socket", "slurm_node_threads_per_core",
             "slurm_node_real_memory", "slurm_node_gres", "slurm_node_features", "slurm_node_weight", "slurm_node_name",
             "slurm_node_memory_reserve_mib", "slurm_gres_autodetect", "slurm_gres_cpu_numbering", "slurm_gpu_type_map"]
GPU_FIELDS = ["minor_number", "name", "memory_total_mib", "cpu_affinity", "mig_mode"]


def _answers(function, *args):
    try:
        result = function(*args)
    except AnsibleFilterError:
        return
    assert isinstance(result, list) and all(isinstance(line, str) for line in result)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(VARIABLES), ANY, max_size=4),
       st.dictionaries(st.sampled_from(GPU_FIELDS), ANY, max_size=2),
       st.dictionaries(st.sampled_from(["processor_count", "processor_vcpus", "memtotal_mb", "gpucluster_gpus"]), ANY, max_size=2))
def test_node_and_gres_lines(variables, gpu_changes, fact_changes):
    hostvars = {"gpu001": host_facts(gpus=gpu_facts()), "gpu002": host_facts(gpus=gpu_facts())}
    hostvars["gpu002"].update(variables)
    hostvars["gpu002"]["ansible_facts"]["gpucluster_gpus"][0].update(gpu_changes)
    hostvars["gpu002"]["ansible_facts"].update(fact_changes)
    _answers(slurm_node_lines, ["gpu001", "gpu002"], hostvars)
    _answers(slurm_gres_lines, ["gpu001", "gpu002"], hostvars)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(ANY, st.fixed_dictionaries({"name": ANY}, optional={
    "groups": ANY, "nodes": ANY, "default": ANY, "max_time": ANY, "oversubscribe": ANY, "extra": ANY, "exclusive_nodes": ANY})),
    max_size=3))
def test_partition_lines(partitions):
    _answers(slurm_partition_lines, partitions, {"g": ["n1", "n2"]})


@settings(max_examples=150, deadline=None)
@given(st.one_of(ANY, st.fixed_dictionaries({"leaves": ANY}, optional={"spines": ANY, "top": ANY, "allow_partitioned": ANY})))
def test_topology_lines(fabric):
    _answers(slurm_topology_lines, fabric)
