"""A node's GPU GRES count against its health_check_expected.gpu_count, and slurm_cluster_gpus (the cluster's GPUs
and partitions for checks of other models, such as the team quotas).

The GRES rule lives in _slurm_render.node_gres, which the node lines, the gres.conf lines and slurm_cluster_gpus all
use: each is tested here with the GRES from each source (slurm_node_gres, gathered GPU facts, none).
"""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.slurm_cluster_gpus import FilterModule, slurm_cluster_gpus
from ansible_collections.gpucluster.ops.plugins.filter.slurm_gres_lines import slurm_gres_lines
from ansible_collections.gpucluster.ops.plugins.filter.slurm_node_lines import slurm_node_lines
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import gpu_facts, host_facts

DECLARED = [{"name": "gpu", "type": "h100", "count": 8}]


def declared(expected=None, gres=None):
    hv = {"slurm_node_cpus": 64, "slurm_node_real_memory": 500000, "slurm_node_gres": gres or DECLARED}
    if expected is not None:
        hv["health_check_expected"] = expected
    return hv


def gathered(expected=None, count=8):
    hv = host_facts(gpus=gpu_facts(count))
    if expected is not None:
        hv["health_check_expected"] = expected
    return hv


def without_gpus(expected=None):
    hv = host_facts()
    if expected is not None:
        hv["health_check_expected"] = expected
    return hv


FILTERS = [
    ("slurm_node_lines", slurm_node_lines),
    ("slurm_gres_lines", slurm_gres_lines),
    ("slurm_cluster_gpus", slurm_cluster_gpus),
]


# -- GRES count against health_check_expected.gpu_count ----------------------------------------------------------

@pytest.mark.parametrize("name,call", FILTERS, ids=[f[0] for f in FILTERS])
@pytest.mark.parametrize("make,expected,words", [
    (declared, 4, "host gpu07: slurm_node_gres is gpu:h100:8 (8 GPUs), but health_check_expected.gpu_count is 4"),
    (lambda e: declared(e, [{"name": "gpu", "type": "h100", "count": 4}, {"name": "gpu", "type": "a100", "count": 2},
                            {"name": "shard", "count": 16}]), 4,
     "host gpu07: slurm_node_gres is gpu:h100:4,gpu:a100:2,shard:16 (6 GPUs), but health_check_expected.gpu_count is 4"),
    (gathered, 16, "host gpu07: the gathered facts (gpucluster_gpus) give Gres=gpu:a100:8 (8 GPUs), but "
                   "health_check_expected.gpu_count is 16"),
    (without_gpus, 8, "host gpu07: neither slurm_node_gres nor gathered GPU facts (gpucluster_gpus) give it a GPU "
                      "(0 GPUs), but health_check_expected.gpu_count is 8"),
    (declared, "4", "host gpu07: slurm_node_gres is gpu:h100:8 (8 GPUs), but health_check_expected.gpu_count is 4"),
])
def test_a_gres_count_that_differs_from_the_expected_gpu_count_is_refused(name, call, make, expected, words):
    with pytest.raises(AnsibleFilterError) as caught:
        call(["gpu07"], {"gpu07": make({"gpu_count": expected, "gpu_model": "x"})})
    assert "%s: %s" % (name, words) in str(caught.value)


@pytest.mark.parametrize("name,call", FILTERS, ids=[f[0] for f in FILTERS])
@pytest.mark.parametrize("hv", [
    declared({"gpu_count": 8}), declared({"gpu_count": "8"}), gathered({"gpu_count": 8}),
    without_gpus({"gpu_count": 0}),
    # nothing to compare with: no expectations, or expectations without a GPU count
    declared(), declared({}), declared({"gpu_model": "NVIDIA H100 80GB HBM3"}), gathered({"gpu_count": None}),
], ids=["declared", "declared-text", "gathered", "cpu-node", "no-expected", "empty", "no-count", "null-count"])
def test_an_agreeing_or_absent_expected_count_passes(name, call, hv):
    call(["gpu07"], {"gpu07": hv})


@pytest.mark.parametrize("value", [-1, "eight", True, 2.5])
def test_a_bad_expected_gpu_count_is_named(value):
    with pytest.raises(AnsibleFilterError) as caught:
        slurm_node_lines(["gpu07"], {"gpu07": declared({"gpu_count": value})})
    assert "host gpu07: health_check_expected.gpu_count is %r" % (value,) in str(caught.value)


def test_every_host_of_the_cluster_is_checked():
    hostvars = {"gpu%02d" % i: declared({"gpu_count": 8}) for i in range(1, 33)}
    hostvars["gpu17"] = declared({"gpu_count": 4})
    with pytest.raises(AnsibleFilterError) as caught:
        slurm_node_lines(sorted(hostvars), hostvars)
    assert "host gpu17: slurm_node_gres is gpu:h100:8 (8 GPUs), but health_check_expected.gpu_count is 4" \
        in str(caught.value)


# -- slurm_cluster_gpus ------------------------------------------------------------------------------------------

def test_registered():
    assert FilterModule().filters()["slurm_cluster_gpus"] is slurm_cluster_gpus


def test_nodes_and_partitions_as_slurm_conf_declares_them():
    hostvars = {
        "dgx01.example.org": declared(gres=[{"name": "gpu", "type": "a100", "count": 8}]),
        "dgx02.example.org": declared(gres=[{"name": "gpu", "type": "a100", "count": 8}]),
        "l40s01": dict(declared(gres=[{"name": "gpu", "type": "l40s", "count": 4}]), slurm_node_name="inf01"),
        "old01": dict(declared(gres=[{"name": "gpu", "count": 2}, {"name": "shard", "count": 8}])),
        "cpu01": {"slurm_node_cpus": 64},                       # no CPU layout or memory needed: GPUs only
        "gh01": gathered(count=4),
    }
    groups = {"all": sorted(hostvars), "dgx": ["dgx01.example.org", "dgx02.example.org"], "inf": ["l40s01"]}
    partitions = [{"name": "a100", "groups": ["dgx"], "default": True}, {"name": "inference", "groups": ["inf"]},
                  {"name": "debug", "nodes": "dgx02,old01"}, {"name": "all", "groups": ["all"]}]
    result = slurm_cluster_gpus(sorted(hostvars), hostvars, partitions=partitions, groups=groups)
    assert result == {
        "nodes": {"dgx01": {"a100": 8}, "dgx02": {"a100": 8}, "inf01": {"l40s": 4}, "old01": {"": 2}, "cpu01": {},
                  "gh01": {"a100": 4}},
        "partitions": {"a100": ["dgx01", "dgx02"], "inference": ["inf01"], "debug": ["dgx02", "old01"],
                       "all": ["cpu01", "dgx01", "dgx02", "gh01", "inf01", "old01"]},
        "undeclared": [],
    }
    assert slurm_cluster_gpus(["cpu01"], hostvars) == {"nodes": {"cpu01": {}}, "partitions": {}, "undeclared": []}


def test_undeclared_ok_leaves_out_the_hosts_whose_gpus_nothing_declares_yet():
    """The site run's first check runs before the GPU facts are gathered: such a host is listed, not judged."""
    hostvars = {"gpu01": {"health_check_expected": {"gpu_count": 8}},
                "gpu02": {"health_check_expected": {"gpu_count": 8},
                          "slurm_node_gres": [{"name": "gpu", "type": "h100", "count": 8}]}}
    assert slurm_cluster_gpus(["gpu01", "gpu02"], hostvars, undeclared_ok=True) == {
        "nodes": {"gpu02": {"h100": 8}}, "partitions": {}, "undeclared": ["gpu01"]}
    with pytest.raises(AnsibleFilterError, match="host gpu01: neither slurm_node_gres nor gathered GPU facts"):
        slurm_cluster_gpus(["gpu01", "gpu02"], hostvars)
    hostvars["gpu02"]["slurm_node_gres"][0]["count"] = 4
    with pytest.raises(AnsibleFilterError, match="host gpu02: slurm_node_gres is gpu:h100:4"):
        slurm_cluster_gpus(["gpu01", "gpu02"], hostvars, undeclared_ok=True)


@pytest.mark.parametrize("hostvars,partitions,words", [
    ({"a.x": declared(), "a.y": declared()}, None, "hosts a.x and a.y have the same Slurm node name a"),
    ({"n1": declared(gres=[{"name": "gpu", "type": "h100"}])}, None, "host n1: slurm_node_gres[0] has no count"),
    ({"n1": declared()}, [{"name": "p", "groups": ["nope"]}], "partition p: inventory group 'nope' is not defined"),
    ({"n1": declared()}, "gpu", "slurm_partitions is 'gpu', not a list"),
])
def test_bad_input_is_named(hostvars, partitions, words):
    with pytest.raises(AnsibleFilterError) as caught:
        slurm_cluster_gpus(sorted(hostvars), hostvars, partitions=partitions, groups={"all": sorted(hostvars)})
    assert "slurm_cluster_gpus: " + words in str(caught.value)
