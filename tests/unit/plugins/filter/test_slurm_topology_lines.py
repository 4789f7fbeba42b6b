"""slurm_topology_lines: topology.conf for topology/tree."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.slurm_topology_lines import FilterModule, slurm_topology_lines


def fabric(leaves=4, per_leaf=2, spines=2, full=False, top=None):
    result = {"leaves": [{"name": "leaf%02d" % (i + 1), "nodes": "gpu[%03d-%03d]" % (i * per_leaf + 1, (i + 1) * per_leaf)}
                         for i in range(leaves)]}
    names = [leaf["name"] for leaf in result["leaves"]]
    result["spines"] = [{"name": "spine%02d" % (s + 1), "switches": names if full else names[s::spines]} for s in range(spines)]
    if top:
        result["top"] = top
    return result


def test_registered():
    assert FilterModule().filters()["slurm_topology_lines"] is slurm_topology_lines


def test_tree_with_top():
    assert slurm_topology_lines(fabric(top="core")) == [
        "SwitchName=leaf01 Nodes=gpu[001-002]", "SwitchName=leaf02 Nodes=gpu[003-004]",
        "SwitchName=leaf03 Nodes=gpu[005-006]", "SwitchName=leaf04 Nodes=gpu[007-008]",
        "SwitchName=spine01 Switches=leaf[01,03]", "SwitchName=spine02 Switches=leaf[02,04]",
        "SwitchName=core Switches=spine[01-02]",
    ]


def test_fat_tree_every_spine_reaches_every_leaf():
    lines = slurm_topology_lines(fabric(full=True))
    assert lines[-2:] == ["SwitchName=spine01 Switches=leaf[01-04]", "SwitchName=spine02 Switches=leaf[01-04]"]


def test_single_leaf_and_node_lists():
    assert slurm_topology_lines({"leaves": [{"name": "s0", "nodes": ["n2", "n1"]}]}) == ["SwitchName=s0 Nodes=n[1-2]"]


def test_partitioned_fabric_is_an_error_unless_allowed():
    with pytest.raises(AnsibleFilterError, match=r"no single switch reaches every leaf \(spine\[01-02\] are separate tops\)"):
        slurm_topology_lines(fabric())
    allowed = fabric()
    allowed["allow_partitioned"] = True
    assert len(slurm_topology_lines(allowed)) == 6


def test_leaves_without_spines_need_a_top():
    with pytest.raises(AnsibleFilterError, match="no single switch reaches every leaf"):
        slurm_topology_lines(fabric(spines=0))
    assert slurm_topology_lines(fabric(spines=0, top="core"))[-1] == "SwitchName=core Switches=leaf[01-04]"


def test_node_under_two_leaves():
    bad = fabric(top="core")
    bad["leaves"][1]["nodes"] = "gpu[002-004]"
    with pytest.raises(AnsibleFilterError, match=r"node gpu002 is under leaves leaf01 and leaf02"):
        slurm_topology_lines(bad)


def test_spine_naming_unknown_leaf():
    bad = fabric(top="core")
    bad["spines"][0]["switches"] = "leaf[01,09]"
    with pytest.raises(AnsibleFilterError, match=r"fabric spine spine01: leaf09 is not a leaf of the fabric"):
        slurm_topology_lines(bad)


def test_leaf_under_no_spine():
    bad = fabric(top="core")
    bad["spines"][1]["switches"] = ["leaf02"]
    with pytest.raises(AnsibleFilterError, match=r"fabric: leaves leaf04 are under no spine"):
        slurm_topology_lines(bad)


def test_unknown_node_when_known_nodes_given():
    with pytest.raises(AnsibleFilterError, match=r"fabric leaf leaf04: node gpu008 is not a Slurm node"):
        slurm_topology_lines(fabric(top="core"), ["gpu%03d" % i for i in range(1, 8)])


@pytest.mark.parametrize("bad, match", [
    ({"leaves": []}, "fabric has no leaves"),
    ({"leaves": [{"name": "a b", "nodes": "n1"}]}, r"switch name 'a b'"),
    ({"leaves": [{"name": "a", "nodes": ""}]}, "fabric leaf a nodes is empty"),
    ({"leaves": [{"name": "a", "nodes": "n[1-"}]}, r"fabric leaf a nodes: unclosed"),
    ({"leaves": [{"name": "a", "nodes": "n1"}, {"name": "a", "nodes": "n2"}], "top": "t"}, "switch a is defined twice"),
    ({"leaves": [{"name": "a", "nodes": "n1"}], "top": "a"}, "top switch a is also a leaf or spine"),
    ({"leaves": [{"name": "a", "nodes": "n1"}], "cores": []}, "unknown fields cores"),
    (["leaf"], "not a mapping"),
])
def test_bad_fabrics(bad, match):
    with pytest.raises(AnsibleFilterError, match=match):
        slurm_topology_lines(bad)
