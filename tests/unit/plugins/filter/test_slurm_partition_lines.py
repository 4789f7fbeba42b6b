"""slurm_partition_lines: PartitionName lines from slurm_partitions."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.slurm_partition_lines import FilterModule, slurm_partition_lines

GROUPS = {"gpu_a": ["gpu001", "gpu002"], "gpu_b": ["gpu003.cluster.example"], "empty": []}


def test_registered():
    assert FilterModule().filters()["slurm_partition_lines"] is slurm_partition_lines


def test_all_fields():
    parts = [{"name": "gpu", "groups": ["gpu_a", "gpu_b"], "default": True, "max_time": "2-00:00:00", "default_time": "60m",
              "qos": "normal", "allow_accounts": ["physics", "chem"], "allow_qos": "normal,high", "priority_tier": 10,
              "oversubscribe": "force:4", "preempt_mode": "requeue", "state": "up",
              "extra": {"maxnodes": 16, "ExclusiveUser": False}}]
    assert slurm_partition_lines(parts, GROUPS) == [
        "PartitionName=gpu Nodes=gpu[001-003] Default=YES MaxTime=2-00:00:00 DefaultTime=60 QOS=normal "
        "AllowAccounts=physics,chem AllowQos=normal,high PriorityTier=10 OverSubscribe=FORCE:4 PreemptMode=REQUEUE "
        "State=UP ExclusiveUser=NO MaxNodes=16"]


def test_nodes_hostlist_and_slurm_node_name():
    hostvars = {"gpu001": {"slurm_node_name": "a1"}, "gpu002": {}}
    parts = [{"name": "p", "groups": ["gpu_a"], "nodes": "spare[1-2]"}, {"name": "q", "nodes": ["x1", "x2"]}]
    assert slurm_partition_lines(parts, GROUPS, hostvars) == ["PartitionName=p Nodes=a1,gpu002,spare[1-2]",
                                                              "PartitionName=q Nodes=x[1-2]"]


@pytest.mark.parametrize("value", ["UNLIMITED", "infinite", 0, "90m", "90:00", "1:30:00", "2-12", "2-12:30",
                                   "2-12:30:15"])
def test_time_formats(value):
    assert slurm_partition_lines([{"name": "p", "nodes": "n1", "max_time": value}], {})


@pytest.mark.parametrize("value, written", [("90m", "90"), ("2h", "120"), ("1d", "1440"), ("1:30:00", "1:30:00")])
def test_units_are_written_as_minutes_and_slurm_times_as_given(value, written):
    assert slurm_partition_lines([{"name": "p", "nodes": "n1", "max_time": value}], {}) == [
        "PartitionName=p Nodes=n1 MaxTime=%s" % written]


@pytest.mark.parametrize("field, value", [("max_time", 90), ("default_time", "60"), ("max_time", 2880)])
def test_bare_number_time_is_refused(field, value):
    _fails([{"name": "gpu", "nodes": "n1", field: value}], r"partition gpu: %s is %r: .*bare number is ambiguous "
           r"\(Slurm reads it as minutes, a person may mean seconds\)" % (field, value))


# --- one test per error class ----------------------------------------------------------------------------------------

def _fails(parts, match):
    with pytest.raises(AnsibleFilterError, match=match):
        slurm_partition_lines(parts, GROUPS)


def test_undefined_group():
    _fails([{"name": "gpu", "groups": ["gpu_c"]}], r"partition gpu: inventory group 'gpu_c' is not defined")


def test_empty_node_set():
    _fails([{"name": "gpu", "groups": ["empty"]}], r"partition gpu has no nodes")


def test_two_default_partitions():
    _fails([{"name": "a", "nodes": "n1", "default": True}, {"name": "b", "nodes": "n2", "default": True}],
           r"partitions a, b are all default: true")


def test_node_in_two_exclusive_partitions():
    _fails([{"name": "a", "groups": ["gpu_a"], "exclusive_nodes": True},
            {"name": "b", "nodes": "gpu[002-004]", "exclusive_nodes": True}],
           r"node gpu002 is in partitions a and b, which both have exclusive_nodes: true")


def test_overlap_is_fine_without_exclusive_nodes():
    assert len(slurm_partition_lines([{"name": "a", "groups": ["gpu_a"], "exclusive_nodes": True},
                                      {"name": "b", "groups": ["gpu_a"]}], GROUPS)) == 2


@pytest.mark.parametrize("field, value", [("max_time", "2 days"), ("max_time", "1:2:3:4"), ("default_time", "1.5"),
                                          ("max_time", -5), ("default_time", "1-2-3"), ("max_time", True)])
def test_bad_time(field, value):
    _fails([{"name": "gpu", "nodes": "n1", field: value}], r"partition gpu: %s is %r, which is not a Slurm time" % (field, value))


@pytest.mark.parametrize("part, match", [
    ({"name": "p", "nodes": "n1", "colour": "red"}, r"partition p: unknown fields colour"),
    ({"name": "p", "nodes": "n1", "extra": {"Bogus": 1}}, r"partition p: extra key 'Bogus' is not a PartitionName key"),
    ({"name": "p", "nodes": "n1", "extra": {"QOS": "a b"}}, r"partition p: extra QOS is 'a b'"),
    ({"name": "p", "nodes": "n1", "state": "IDLE"}, r"partition p: state is 'IDLE', which Slurm does not accept"),
    ({"name": "p", "nodes": "n1", "oversubscribe": "EXCLUSIVE:2"}, r"partition p: oversubscribe is 'EXCLUSIVE:2'"),
    ({"name": "p", "nodes": "n1", "default": "yes"}, r"partition p: default is 'yes', not true or false"),
    ({"name": "p", "nodes": "n1", "priority_tier": "high"}, r"priority_tier is 'high'"),
    ({"name": "p", "nodes": "n1", "allow_accounts": ["a b"]}, r"partition p: allow_accounts is \['a b'\]"),
    ({"name": "p", "nodes": "gpu[05-01]"}, r"partition p: nodes 'gpu\[05-01\]': range '05-01'"),
    ({"name": "p q", "nodes": "n1"}, r"partition name 'p q'"),
    ({"nodes": "n1"}, r"has no name"),
])
def test_bad_entries(part, match):
    _fails([part], match)


def test_duplicate_partition():
    _fails([{"name": "p", "nodes": "n1"}, {"name": "p", "nodes": "n2"}], r"partition p is defined twice")


def test_not_a_list():
    _fails({"name": "p"}, r"slurm_partitions is")


NODE_LINES = ["NodeName=gpu[001-002] CPUs=128 RealMemory=1000000 Gres=gpu:a100:8 Features=a100",
              "NodeName=gpu003 CPUs=64 RealMemory=500000 Gres=gpu:l40s:2,nvme:1",
              "NodeName=cpu[01-02] CPUs=64 RealMemory=256000"]


def test_def_mem_per_gpu_is_the_least_memory_per_gpu_of_the_partitions_gpu_nodes():
    """Issue 45: without DefMemPerGPU a 1-GPU job without --mem takes a whole node's memory, and the node's other GPUs
    wait; with it each GPU brings its share. Node types differ: the partition takes the least share."""
    groups = dict(GROUPS, cpus=["cpu01", "cpu02"])
    parts = [{"name": "a100", "groups": ["gpu_a"]},
             {"name": "mixed", "groups": ["gpu_a", "gpu_b", "cpus"]},
             {"name": "cpu", "groups": ["cpus"]},
             {"name": "own", "groups": ["gpu_a"], "def_mem_per_gpu": 100000},
             {"name": "per-cpu", "groups": ["gpu_a"], "extra": {"DefMemPerCPU": 4000}}]
    assert slurm_partition_lines(parts, groups, None, NODE_LINES) == [
        "PartitionName=a100 Nodes=gpu[001-002] DefMemPerGPU=125000",
        "PartitionName=mixed Nodes=cpu[01-02],gpu[001-003] DefMemPerGPU=125000",
        "PartitionName=cpu Nodes=cpu[01-02]",
        "PartitionName=own Nodes=gpu[001-002] DefMemPerGPU=100000",
        "PartitionName=per-cpu Nodes=gpu[001-002] DefMemPerCPU=4000"]
    # without the node lines there is nothing to size by (the slurm role always gives them)
    assert slurm_partition_lines(parts[:1], groups) == ["PartitionName=a100 Nodes=gpu[001-002]"]
    with pytest.raises(AnsibleFilterError, match="def_mem_per_gpu"):
        slurm_partition_lines([{"name": "x", "groups": ["gpu_a"], "def_mem_per_gpu": "lots"}], groups, None, NODE_LINES)
