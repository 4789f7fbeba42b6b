"""The Slurm config checker: one case per problem class, clean configs, Slurm's line syntax, and scontrol agreement."""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_keys as keys
from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_render as render
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_conf_parse import logical_lines
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_config_check import (
    check_config_dir, format_problem, normalize_version, parse_gres)
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import (
    gpu_facts, host_facts, needs_scontrol, scontrols)

HEAD = """\
ClusterName=lab
SlurmctldHost=ctl01
AuthType=auth/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
GresTypes=gpu
TopologyPlugin=topology/tree
AccountingStorageTRES=gres/gpu,gres/gpu:a100
PriorityWeightTRES=CPU=1000,GRES/gpu=2000
SlurmctldDebug=info
"""
NODES = """\
NodeName=gpu[001-004] CPUs=128 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2 RealMemory=1000448 Gres=gpu:a100:8
NodeName=cpu[01-02] CPUs=64 RealMemory=250000
PartitionName=gpu Nodes=gpu[001-004] Default=YES MaxTime=2-00:00:00 TRESBillingWeights=CPU=1.0,GRES/gpu=4.0
PartitionName=cpu Nodes=cpu[01-02] MaxTime=UNLIMITED
"""
GRES = """\
NodeName=gpu[001-004] Name=gpu Type=a100 File=/dev/nvidia[0-3] Cores=0-31
NodeName=gpu[001-004] Name=gpu Type=a100 File=/dev/nvidia[4-7] Cores=32-63
"""
TOPOLOGY = """\
SwitchName=leaf1 Nodes=gpu[001-002],cpu01
SwitchName=leaf2 Nodes=gpu[003-004],cpu02
SwitchName=spine Switches=leaf[1-2]
"""
CGROUP = "ConstrainCores=yes\nConstrainDevices=yes\nConstrainRAMSpace=yes\n"


def write(directory, slurm=HEAD + NODES, gres=GRES, topology=TOPOLOGY, cgroup=CGROUP, **extra):
    files = {"slurm.conf": slurm, "gres.conf": gres, "topology.conf": topology, "cgroup.conf": cgroup}
    files.update(extra)
    for name, text in files.items():
        if text is not None:
            path = os.path.join(str(directory), name)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            with open(path, "w") as handle:
                handle.write(text)
    return str(directory)


def problems(directory, version=None, **kwargs):
    return [format_problem(p) for p in check_config_dir(str(directory), version, **kwargs)]


def only(directory, version=None, **kwargs):
    """The single problem found (asserting there is exactly one)."""
    found = problems(directory, version, **kwargs)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("version", [None, "22.05", "24.11", "24.11.5"])
def test_clean_config(tmp_path, version):
    assert problems(write(tmp_path), version) == []


def test_only_slurm_conf(tmp_path):
    assert problems(write(tmp_path, slurm=HEAD.replace("TopologyPlugin=topology/tree\n", "") + NODES.replace(" Gres=gpu:a100:8", ""),
                          gres=None, topology=None, cgroup=None)) == []


def test_versions():
    assert normalize_version("any") is None and normalize_version("24.11.5") == "24.11"
    with pytest.raises(ValueError, match="unsupported Slurm version '23.02'"):
        normalize_version("23.02")


# --- Slurm's line syntax ---------------------------------------------------------------------------------------------

def test_logical_lines_follow_slurms_parser():
    text = ("A=1 # comment \\\n"          # a comment ends the line before the continuation is looked at
            "NodeName=n1 \\   \n"          # continued (blanks after the backslash are allowed)
            "  CPUs=4\n"
            "Path=/a\\#b\n"                # escaped #: kept, backslash removed
            "Two=\\\\\n"                   # an even number of backslashes: not continued
            "Last=1 \\")                   # continuation at end of file
    assert list(logical_lines(text)) == [(1, "A=1 "), (2, "NodeName=n1   CPUs=4"), (4, "Path=/a#b"), (5, "Two=\\"),
                                         (6, "Last=1 ")]


def test_continued_node_line_is_one_statement(tmp_path):
    slurm = HEAD + "NodeName=gpu[001-004] CPUs=128 \\\n  RealMemory=1000 \\\n  Gres=gpu:a100:8\n" + NODES.split("\n", 1)[1]
    assert problems(write(tmp_path, slurm=slurm)) == []


def test_keys_are_case_insensitive_and_blanks_around_equals_allowed(tmp_path):
    slurm = HEAD.replace("SelectType=", "selecttype = ") + NODES.replace("CPUs=64", "cpus=64")
    assert problems(write(tmp_path, slurm=slurm)) == []


def test_one_pair_per_plain_line_and_garbage(tmp_path):
    slurm = HEAD + NODES + "SlurmdTimeout=300 KillWait=30\njust words\nNodeName=n9 CPUs=1 trailing\n"
    assert problems(write(tmp_path, slurm=slurm)) == [
        "slurm.conf:17: SlurmdTimeout: text Slurm cannot parse: 'KillWait=30'",
        "slurm.conf:18: -: not a Key=Value line: 'just words'",
        "slurm.conf:19: NodeName: text Slurm cannot parse: 'trailing'",
        "topology.conf:1: Nodes: nodes n9 are under no switch (switches lack access to them)",
    ]


# --- one case per problem class --------------------------------------------------------------------------------------

def test_unknown_key(tmp_path):
    assert only(write(tmp_path, slurm=HEAD + NODES + "SlurmdTimout=300\n")) == "slurm.conf:17: SlurmdTimout: unknown key SlurmdTimout"


def test_key_of_the_other_version(tmp_path):
    directory = write(tmp_path, slurm=HEAD + NODES + "HashPlugin=hash/k12\n")
    assert problems(directory, "24.11") == []
    assert only(directory, "22.05") == "slurm.conf:17: HashPlugin: HashPlugin is not a key of Slurm 22.05 (only 24.11)"


def test_unknown_node_and_partition_keys(tmp_path):
    slurm = HEAD + NODES.replace("CPUs=64", "CPUs=64 Colour=red").replace("MaxTime=UNLIMITED", "MaxTime=UNLIMITED Size=9")
    assert problems(write(tmp_path, slurm=slurm)) == ["slurm.conf:14: Colour: unknown key Colour",
                                                      "slurm.conf:16: Size: unknown key Size"]


def test_removed_key(tmp_path):
    assert "removed from Slurm" in only(write(tmp_path, slurm=HEAD + NODES + "AccountingStorageLoc=/var/log/acct\n"))


@pytest.mark.parametrize("line, message", [
    ("SlurmdTimeout=abc", "'abc' is not a number"),
    ("SlurmdTimeout=70000", "70000 is larger than 65535"),
    ("TrackWCKey=on", "'on' is not a boolean"),
    ("EnforcePartLimits=sometimes", "'sometimes' is not one of ALL, ANY, NO, YES"),
    ("SlurmctldDebug=debug6", "'debug6' is not one of quiet"),
    ("PriorityDecayHalfLife=7 days", "text Slurm cannot parse"),
    ("PriorityMaxAge=1:2:3:4", "'1:2:3:4' is not a Slurm time"),
    ("SelectType=select/cons_tre", "'select/cons_tre' is not a plugin of Slurm"),
    ("ProctrackType=cgroup", "'cgroup' is not a plugin name (expected proctrack/NAME)"),
    ("TaskPlugin=task/affinity,task/numa", "'task/numa' is not a plugin of Slurm"),
    ("SelectTypeParameters=CR_Core,CR_Memory", "needs exactly one of CR_CPU"),
    ("AccountingStorageEnforce=limits,qos,bogus", "'bogus' is not one of all"),
])
def test_bad_typed_values(tmp_path, line, message):
    slurm = HEAD + NODES + line + "\n"
    assert message in " ".join(problems(write(tmp_path, slurm=slurm)))


def test_plugins_differ_by_version(tmp_path):
    directory = write(tmp_path, slurm=HEAD.replace("cons_tres", "cons_res") + NODES)
    assert problems(directory, "22.05") == []
    assert "'select/cons_res' is not a plugin of Slurm 24.11" in only(directory, "24.11")
    assert problems(directory, "24.11", allow_plugins=["select/cons_res"]) == []


@pytest.mark.parametrize("old, new, message", [
    ("MaxTime=2-00:00:00", "MaxTime=2days", "'2days' is not a Slurm time"),
    ("Default=YES", "Default=maybe", "'maybe' is not a boolean"),
    ("MaxTime=UNLIMITED", "MaxTime=UNLIMITED State=IDLE", "'IDLE' is not one of UP, DOWN, DRAIN, INACTIVE"),
    ("MaxTime=UNLIMITED", "MaxTime=UNLIMITED OverSubscribe=EXCLUSIVE:4", "is not EXCLUSIVE, NO, YES[:count] or FORCE[:count]"),
    ("RealMemory=250000", "RealMemory=250G", "'250G' is not a number"),
])
def test_bad_line_values(tmp_path, old, new, message):
    assert message in only(write(tmp_path, slurm=HEAD + NODES.replace(old, new)))


def test_duplicate_node_names_across_lines(tmp_path):
    slurm = HEAD + NODES + "NodeName=gpu[004-005],cpu01 CPUs=4 RealMemory=100\n"
    assert problems(write(tmp_path, slurm=slurm)) == [
        "slurm.conf:17: NodeName: node gpu004 is defined again (first at slurm.conf:13)",
        "slurm.conf:17: NodeName: node cpu01 is defined again (first at slurm.conf:14)",
        "topology.conf:1: Nodes: nodes gpu005 are under no switch (switches lack access to them)",
    ]


def test_duplicate_partition_and_two_defaults(tmp_path):
    slurm = HEAD + NODES + "PartitionName=cpu Nodes=cpu01 Default=YES\n"
    assert problems(write(tmp_path, slurm=slurm)) == [
        "slurm.conf:17: PartitionName: partition cpu is defined again (first at slurm.conf:16)",
        "slurm.conf:17: Default: partition cpu is Default=YES too (first: gpu at slurm.conf:15); Slurm keeps only one",
    ]


def test_partition_naming_undefined_nodes(tmp_path):
    slurm = HEAD + NODES.replace("Nodes=cpu[01-02]", "Nodes=cpu[01-03],login1")
    assert only(write(tmp_path, slurm=slurm)) == (
        "slurm.conf:16: Nodes: PartitionName cpu names undefined nodes cpu03,login1 (a reconfigure with this kills slurmctld)")


def test_partition_nodes_all_and_nodeset(tmp_path):
    slurm = HEAD + NODES + "NodeSet=gpus Feature=a100\nPartitionName=all Nodes=ALL\nPartitionName=set Nodes=gpus,cpu01\n"
    assert problems(write(tmp_path, slurm=slurm)) == []


def test_gres_without_grestypes(tmp_path):
    slurm = HEAD.replace("GresTypes=gpu\n", "") + NODES
    assert problems(write(tmp_path, slurm=slurm, gres=None)) == [
        "slurm.conf:12: Gres: Gres=gpu:a100:8 needs GresTypes=gpu; without it Slurm shows Gres=(null)",
        "gres.conf:0: Gres: slurm.conf declares gpu GRES but there is no gres.conf (slurmd drops file-less GPUs)",
    ]


def test_non_numeric_gres_count(tmp_path):
    slurm = HEAD + NODES.replace("Gres=gpu:a100:8", "Gres=gpu:a100:eight")
    found = problems(write(tmp_path, slurm=slurm))
    assert found[0] == ("slurm.conf:13: Gres: count 'eight' in 'gpu:a100:eight' is not a number "
                        "(Slurm reads it as another GRES type)")


@pytest.mark.parametrize("value, entries", [
    ("gpu:a100:8", [("gpu", "a100", 8)]), ("gpu:8", [("gpu", None, 8)]), ("gpu:a100", [("gpu", "a100", 1)]),
    ("gpu:a100:4(S:0-1),mps:400,bandwidth:lustre:4G", [("gpu", "a100", 4), ("mps", None, 400), ("bandwidth", "lustre", 4 << 30)]),
    ("(null)", []),
])
def test_parse_gres(value, entries):
    assert parse_gres(value) == (entries, [])


@pytest.mark.parametrize("gres, message", [
    (GRES.replace("Type=a100 File=/dev/nvidia[4-7]", "Type=h100 File=/dev/nvidia[4-7]"),
     "gres.conf:2: Gres: nodes gpu[001-004]: slurm.conf has gpu:a100:8, gres.conf gpu:a100:4,gpu:h100:4"),
    (GRES.replace("File=/dev/nvidia[4-7]", "File=/dev/nvidia[4-6]"),
     "gres.conf:2: Gres: nodes gpu[001-004]: slurm.conf has gpu:a100:8, gres.conf gpu:a100:7"),
    (GRES.replace("NodeName=gpu[001-004]", "NodeName=gpu[001-003]"),
     "slurm.conf:13: Gres: nodes gpu004: slurm.conf declares gpu but gres.conf has no record for it (slurmd drops file-less "
     "GPUs: node INVAL)"),
    (GRES + "NodeName=cpu01 Name=gpu Type=a100 File=/dev/nvidia0\n",
     "gres.conf:3: Gres: warning: nodes cpu01: gres.conf defines gpu:a100:1 that slurm.conf does not declare; slurmd ignores them"),
])
def test_gres_conf_disagreeing_with_slurm_conf(tmp_path, gres, message):
    assert only(write(tmp_path, gres=gres)) == message


def test_gres_conf_record_problems(tmp_path):
    gres = ("AutoDetect=nvlm\n"
            "NodeName=gpu[001-004] Name=gpu Type=a100 File=/dev/nvidia[0-7] Count=4 Cores=0-31,x\n"
            "NodeName=gpu009 Name=gpu Type=a100 File=/dev/nvidia[0-7] Flavour=mild\n"
            "Name=mps Count=100\n")
    assert problems(write(tmp_path, gres=gres)) == [
        "gres.conf:1: AutoDetect: 'nvlm' is not one of nrt, nvidia, nvml, off, oneapi, rsmi",
        "gres.conf:2: Count: Count=4 but File= lists 8 devices (slurmd stops)",
        "gres.conf:2: Cores: '0-31,x' is not a list of core ids and ranges",
        "gres.conf:3: Flavour: unknown key Flavour in gres.conf (slurmd stops)",
        "gres.conf:3: NodeName: names nodes that slurm.conf does not define: gpu009",
        "gres.conf:4: Name: mps is not in GresTypes of slurm.conf; slurmd ignores this line",
        "gres.conf:4: Gres: warning: nodes cpu[01-02],gpu[001-004]: gres.conf defines mps:100 that slurm.conf does not declare; "
        "slurmd ignores them",
        "gres.conf:4: Gres: nodes gpu[001-004]: slurm.conf has gpu:a100:8, gres.conf gpu:a100:4",
    ]


def test_gres_autodetect_skips_the_comparison(tmp_path):
    assert problems(write(tmp_path, gres="AutoDetect=nvml\n")) == []
    assert problems(write(tmp_path, gres="NodeName=gpu[001-004] AutoDetect=nvml\n")) == []


def test_gres_mixed_typed_and_untyped_records(tmp_path):
    gres = GRES.replace("Name=gpu Type=a100 File=/dev/nvidia[4-7]", "Name=gpu File=/dev/nvidia[4-7]")
    assert "some gpu records have Type= and others do not (slurmd stops)" in " ".join(problems(write(tmp_path, gres=gres)))


@pytest.mark.parametrize("expr, message", [
    ("unit[0-1]rack", "text 'rack' after the last bracket range in 'unit[0-1]rack' (Slurm 22.05 rejects it)"),
    ("gpu[05-01]", "range '05-01' in 'gpu[05-01]' runs backwards"),
    ("gpu[01-", "unclosed '[' in 'gpu[01-'"),
])
def test_malformed_hostlists(tmp_path, expr, message):
    slurm = HEAD.replace("TopologyPlugin=topology/tree\n", "") + NODES + "NodeName=%s CPUs=1 RealMemory=100\n" % expr
    assert only(write(tmp_path, slurm=slurm, topology=None), "22.05") == "slurm.conf:16: NodeName: malformed hostlist: " + message


def test_suffix_hostlist_is_fine_for_24_11_only(tmp_path):
    slurm = HEAD.replace("TopologyPlugin=topology/tree\n", "") + NODES + "NodeName=unit[0-1]rack CPUs=1 RealMemory=100\n"
    directory = write(tmp_path, slurm=slurm, topology=None)
    assert problems(directory, "24.11") == []
    assert len(problems(directory, None)) == 1


def test_topology_plugin_without_topology_conf(tmp_path):
    assert only(write(tmp_path, topology=None)) == (
        "slurm.conf:9: TopologyPlugin: topology/tree needs topology.conf next to slurm.conf (slurmctld retries 60 s, then stops)")


@pytest.mark.parametrize("topology, message", [
    (TOPOLOGY.replace("gpu[003-004],cpu02", "gpu[002-004],cpu02"), "topology.conf:2: Nodes: node gpu002 is under switch leaf1 and leaf2"),
    (TOPOLOGY.replace(",cpu02", ",cpu02,gpu099"), "topology.conf:2: Nodes: switch leaf2 names node gpu099 that slurm.conf does not define"),
    (TOPOLOGY.replace(",cpu02", ""), "topology.conf:1: Nodes: nodes cpu02 are under no switch (switches lack access to them)"),
    (TOPOLOGY.replace("leaf[1-2]", "leaf[1-3]"), "topology.conf:3: Switches: switch spine names unknown switches leaf3 (slurmctld stops)"),
    (TOPOLOGY.replace("SwitchName=spine Switches=leaf[1-2]", "SwitchName=spine Switches=leaf[1-2] Nodes=cpu01"),
     "topology.conf:3: SwitchName: switch spine has both Nodes and Switches"),
    (TOPOLOGY + "SwitchName=spine Switches=leaf1\n", "topology.conf:4: SwitchName: switch spine is defined again (slurmctld stops)"),
    (TOPOLOGY.replace("SwitchName=spine Switches=leaf[1-2]\n", ""),
     "topology.conf:1: Switches: warning: no switch reaches every leaf: jobs cannot span the parts of the fabric"),
    (TOPOLOGY + "Speed=100\n", "topology.conf:4: Speed: unknown key Speed"),
])
def test_topology_problems(tmp_path, topology, message):
    assert message in problems(write(tmp_path, topology=topology))


def test_topology_cycle(tmp_path):
    topology = TOPOLOGY + "SwitchName=a Switches=b\nSwitchName=b Switches=a\n"
    assert "topology.conf:1: Switches: the switches do not form a tree (slurmctld stops)" in problems(write(tmp_path, topology=topology))


def test_gpu_tres_not_tracked(tmp_path):
    slurm = HEAD.replace("AccountingStorageTRES=gres/gpu,gres/gpu:a100", "AccountingStorageTRES=gres/gpu") + NODES
    slurm = slurm.replace("GRES/gpu=4.0", "GRES/gpu:a100=4.0")
    assert only(write(tmp_path, slurm=slurm)) == (
        "slurm.conf:15: TRESBillingWeights: GRES/gpu:a100 is not tracked: add it to AccountingStorageTRES")


def test_required_tres_for_gpu_limits(tmp_path):
    slurm = HEAD.replace("AccountingStorageTRES=gres/gpu,gres/gpu:a100\n", "").replace("PriorityWeightTRES=CPU=1000,GRES/gpu=2000\n", "")
    slurm += NODES.replace(" TRESBillingWeights=CPU=1.0,GRES/gpu=4.0", "")
    directory = write(tmp_path, slurm=slurm)
    assert problems(directory) == []
    assert only(directory, required_tres=["gres/gpu"]) == (
        "slurm.conf:0: AccountingStorageTRES: GPU limits use gres/gpu: AccountingStorageTRES must contain it "
        "(sacctmgr rejects the limit otherwise)")


def test_include_followed_inside_the_directory(tmp_path):
    slurm = HEAD + "Include nodes.d/%c-nodes.conf\nInclude missing.conf\nInclude ../outside.conf\n"
    directory = write(tmp_path / "etc", slurm=slurm, **{"nodes.d/lab-nodes.conf": NODES + "SlurmdTimout=1\n"})
    assert problems(directory) == [
        "slurm.conf:14: Include: 'missing.conf' does not exist (Slurm retries for 60 s, then fails)",
        "slurm.conf:15: Include: '../outside.conf' is outside the config directory; not checked",
        "nodes.d/lab-nodes.conf:5: SlurmdTimout: unknown key SlurmdTimout",
    ]


def test_include_loop(tmp_path):
    directory = write(tmp_path, slurm=HEAD + NODES + "Include more.conf\n", **{"more.conf": "Include more.conf\n"})
    assert problems(directory) == ["more.conf:1: Include: 'more.conf' includes itself"]


def test_key_set_twice_is_a_warning(tmp_path):
    assert only(write(tmp_path, slurm=HEAD + NODES + "SelectType=select/cons_tres\n")) == (
        "slurm.conf:17: SelectType: warning: set again (first at slurm.conf:4); Slurm uses the last value")


def test_cgroup_conf(tmp_path):
    cgroup = CGROUP + "ConstrainKmemSpace=no\nCgroupPlugin=disabled\nMaxRAMPercent=abc\nTaskAffinity=yes\n"
    directory = write(tmp_path, cgroup=cgroup)
    assert problems(directory, "24.11") == [
        "cgroup.conf:4: ConstrainKmemSpace: ConstrainKmemSpace is not a key of Slurm 24.11 (only 22.05)",
        "cgroup.conf:6: MaxRAMPercent: 'abc' is not a number",
        "cgroup.conf:7: TaskAffinity: unknown key TaskAffinity",
    ]
    assert "cgroup.conf:5: CgroupPlugin: 'disabled' is not one of autodetect, cgroup/v1, cgroup/v2" in problems(directory, "22.05")


def test_missing_directory_and_slurm_conf(tmp_path):
    assert problems(tmp_path / "nope") == [":0: -: %s is not a directory" % (tmp_path / "nope")]
    assert problems(tmp_path) == ["slurm.conf:0: -: no slurm.conf in %s" % tmp_path]


def test_unreadable_bytes(tmp_path):
    directory = write(tmp_path)
    with open(os.path.join(directory, "cgroup.conf"), "wb") as handle:
        handle.write(b"ConstrainCores=yes\x00junk\n\xff\xfe=\n")
    found = problems(directory)
    assert found[0] == "cgroup.conf:0: -: contains NUL bytes; Slurm ignores the rest of those lines"
    assert len(found) == 2


# --- never raises ----------------------------------------------------------------------------------------------------

REAL_LOOKING = {"slurm.conf": HEAD + NODES, "gres.conf": GRES, "topology.conf": TOPOLOGY, "cgroup.conf": CGROUP}


def _truncated(text):
    return st.integers(0, len(text)).map(lambda n: text[:n])


def _spliced(text):
    """A real-looking file with random text put in at a random place."""
    return st.tuples(st.integers(0, len(text)), st.text(max_size=40)).map(lambda cut: text[:cut[0]] + cut[1] + text[cut[0]:])


def _content(name):
    return st.one_of(st.text(max_size=300), st.binary(max_size=300), _truncated(REAL_LOOKING[name]), _spliced(REAL_LOOKING[name]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.fixed_dictionaries(dict((name, _content(name)) for name in REAL_LOOKING)), st.sampled_from([None, "22.05", "24.11"]))
def test_never_raises(tmp_path_factory, contents, version):
    directory = tmp_path_factory.mktemp("fuzz")
    for name, content in contents.items():
        with open(os.path.join(str(directory), name), "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    found = check_config_dir(str(directory), version)
    assert all(set(p) == {"file", "line", "key", "message", "severity"} for p in found)
    assert all(isinstance(p["line"], int) and isinstance(p["message"], str) for p in found)


# --- against scontrol ------------------------------------------------------------------------------------------------

SCONTROLS = scontrols()


def _rendered_cluster(directory):
    """A config rendered by the filters from a small inventory: must be clean for us and for Slurm."""
    hostvars = {}
    for index in range(1, 7):
        hostvars["gpu%02d" % index] = host_facts(gpus=gpu_facts(name="NVIDIA H100 80GB HBM3", affinity=("0-31,64-95", "32-63,96-127")))
    hostvars["gpu06"]["slurm_node_features"] = ["nvme"]
    hosts = sorted(hostvars)
    groups = {"gpu": hosts, "nvme": ["gpu06"]}
    node = render.node_lines(hosts, hostvars)
    part = render.partition_lines([{"name": "batch", "groups": ["gpu"], "default": True, "max_time": "1-00:00:00"},
                                   {"name": "nvme", "groups": ["nvme"], "max_time": "90m", "priority_tier": 2}], groups, hostvars)
    gres = render.gres_lines(hosts, hostvars)
    topology = render.topology_lines({"leaves": [{"name": "leaf1", "nodes": hosts[:3]}, {"name": "leaf2", "nodes": hosts[3:]}],
                                      "spines": [{"name": "spine1", "switches": "leaf[1-2]"}]})
    head = HEAD.replace("gres/gpu:a100", "gres/gpu:h100")
    return write(directory, slurm=head + "\n".join(node + part) + "\n", gres="\n".join(gres) + "\n",
                 topology="\n".join(topology) + "\n")


def test_rendered_config_is_clean(tmp_path):
    assert problems(_rendered_cluster(tmp_path), "22.05") == []
    assert problems(_rendered_cluster(tmp_path), "24.11") == []


@needs_scontrol
@pytest.mark.parametrize("builder", [_rendered_cluster, write])
def test_clean_configs_pass_slurms_own_parse(tmp_path, builder):
    directory = builder(tmp_path)
    for scontrol in SCONTROLS:
        assert scontrol.parse_errors(os.path.join(directory, "slurm.conf")) == [], scontrol.command


@needs_scontrol
@pytest.mark.parametrize("line", ["SlurmdTimout=300", "SlurmdTimeout=abc", "TrackWCKey=on", "NodeName=n9 Colour=red",
                                  "PartitionName=q Nodes=gpu001 MaxTime=1:2:3:4", "SelectTypeParameters=CR_Core,CR_Memory",
                                  "SlurmdTimeout=300 KillWait=30", "AccountingStorageLoc=/x"])
def test_what_we_flag_slurm_rejects_too(tmp_path, line):
    directory = write(tmp_path, slurm=HEAD + NODES + line + "\n")
    assert problems(directory)
    for scontrol in SCONTROLS:
        assert scontrol.parse_errors(os.path.join(directory, "slurm.conf")), scontrol.command


@needs_scontrol
def test_key_table_matches_scontrol_sample(tmp_path):
    """A sample of the top-level keys of each version: scontrol knows them (no "unrecognized key")."""
    table = keys.SLURM_CONF["top"]
    rng = random.Random(1)
    for scontrol in SCONTROLS:
        version = scontrol.version
        known = sorted(k for k, (_kind, versions) in table.items() if version in versions)
        other = sorted(k for k, (_kind, versions) in table.items() if version not in versions)
        for key in rng.sample(known, 12) + other[:4]:
            conf = write(tmp_path, slurm=HEAD + NODES + "%s=zzq\n" % key)
            errors = " ".join(scontrol.parse_errors(os.path.join(conf, "slurm.conf")))
            assert ("unrecognized key" in errors) == (key in other), (scontrol.command, key, errors)


# --- what slurmctld refuses although the key and its type are right --------------------------------------------------
# Each case was run with `slurmctld -D -i -f FILE` (and `SLURM_CONF=FILE scontrol show hostnames x`) of Slurm 22.05.8
# (Debian 12) and 24.11.5 (Debian 13) on a minimal config; the test id is what both daemons printed.
# docs/slurm-config.md, "Values slurmctld refuses", has the table.

def _without(line_start):
    return "".join(line + "\n" for line in (HEAD + NODES).splitlines() if not line.startswith(line_start))


@pytest.mark.parametrize("slurm, version, message", [
    pytest.param(_without("ClusterName="), None,
                 'slurm.conf:0: ClusterName: no ClusterName: slurmctld stops ("ClusterName needs to be specified")',
                 id="ClusterName needs to be specified"),
    pytest.param(_without("SlurmctldHost="), None,
                 'slurm.conf:0: SlurmctldHost: no SlurmctldHost: slurmctld, slurmd and every client stop ("No SlurmctldHost '
                 'defined.")', id="No SlurmctldHost defined."),
    pytest.param(_without("PartitionName="), "22.05",
                 'slurm.conf:0: PartitionName: no partition: Slurm 22.05 stops ("No PartitionName information available!"), '
                 "24.11 starts with no default partition", id="22.05: No PartitionName information available!"),
    pytest.param(_without("PartitionName="), "24.11",
                 'slurm.conf:0: PartitionName: warning: no partition: Slurm 24.11 starts without a default partition '
                 '("default partition not set"); jobs have nowhere to run', id="24.11: read_slurm_conf: default partition not set."),
    pytest.param(HEAD.replace("ClusterName=lab", "ClusterName=Lab") + NODES, None,
                 "slurm.conf:1: ClusterName: warning: Slurm uses the name in lower case (lab): write it so, as sacctmgr and "
                 "Include %c see it", id="ClusterName=Lab shows as lab"),
])
def test_required_keys(tmp_path, slurm, version, message):
    assert only(write(tmp_path, slurm=slurm), version) == message


def test_controlmachine_still_names_the_controller(tmp_path):
    # Both versions start with the old key instead of SlurmctldHost.
    assert problems(write(tmp_path, slurm=HEAD.replace("SlurmctldHost=", "ControlMachine=") + NODES)) == []


@pytest.mark.parametrize("line, message", [
    pytest.param("SlurmctldPort=0", '0 is outside 1-65535 (slurmctld stops on 0: "Invalid SlurmctldPort"',
                 id="Invalid SlurmctldPort 0"),
    pytest.param("SlurmctldPort=0-3", "0-3 is outside 1-65535", id="Invalid SlurmctldPort 0-3"),
    pytest.param("SlurmctldPort=6820-6817", '6820-6817 runs backwards (slurmctld stops: "Invalid SlurmctldPort 6820-6817")',
                 id="Invalid SlurmctldPort 6820-6817"),
    pytest.param("SlurmctldPort=70000", "70000 is outside 1-65535", id="starts, listens on 4464"),
    pytest.param("SlurmctldPort=65530-65540", "65530-65540 is outside 1-65535", id="starts, listens on 65530-65535,1-4,random"),
    pytest.param("SlurmdPort=0", "port 0 is outside 1-65535", id="_validate_slurmd_addr or _set_node_addrs: failure on n"),
    pytest.param("SlurmdPort=70000", "port 70000 is outside 1-65535", id="starts, slurmd listens on 4464"),
    pytest.param("SrunPortRange=60001", "'60001' is not MIN-MAX", id="ignored: SrunPortRange = 0-0 (single port)"),
    pytest.param("SrunPortRange=60001-70000", "'60001-70000' is not MIN-MAX", id="ignored: SrunPortRange = 0-0 (above 65533)"),
    pytest.param("SrunPortRange=60001-65534", "MIN < MAX <= 65533", id="ignored: SrunPortRange = 0-0 (65534)"),
    pytest.param("SrunPortRange=63000-62000", "'63000-62000' is not MIN-MAX", id="ignored: SrunPortRange = 0-0 (backwards)"),
    pytest.param("SrunPortRange=1000-1000", "'1000-1000' is not MIN-MAX", id="ignored: SrunPortRange = 0-0 (one port)"),
    pytest.param("MaxJobCount=0", 'MaxJobCount=0 must be at least 1: slurmctld stops: "MaxJobCount=0, No jobs permitted"',
                 id="MaxJobCount=0, No jobs permitted"),
    pytest.param("MaxStepCount=0", "MaxStepCount=0 must be at least 1", id="MaxStepCount=0, No steps permitted"),
    pytest.param("FirstJobId=0", "FirstJobId=0 must be at least 1", id="FirstJobId cannot be zero"),
    pytest.param("FirstJobId=67043329", "FirstJobId=67043329 is above MaxJobId=67043328 (the default)", id="FirstJobId > MaxJobId"),
    pytest.param("MaxJobId=67108864", "MaxJobId=67108864 must be at most 67108863",
                 id="MaxJobId can not exceed MAX_JOB_ID, resetting value"),
    pytest.param("MaxArraySize=4000002", "MaxArraySize=4000002 must be at most 4000001",
                 id="MaxArraySize value (4000002) is greater than 4000001"),
    pytest.param("MinJobAge=0", "MinJobAge=0 must be at least 2", id="MinJobAge must be at least 2"),
    pytest.param("TreeWidth=0", "TreeWidth=0 must be at least 1", id="TreeWidth=0 is invalid"),
    pytest.param("SchedulerTimeSlice=4", "SchedulerTimeSlice=4 must be at least 5", id="SchedulerTimeSlice must be at least 5 seconds"),
    pytest.param("PropagatePrioProcess=3", "PropagatePrioProcess=3 must be 0-2", id="Bad PropagatePrioProcess: 3"),
    pytest.param("DefMemPerCPU=100\nDefMemPerNode=100", "DefMemPerCPU and DefMemPerNode exclude each other",
                 id="DefMemPerCPU ignored, since it's mutually exclusive with DefMemPerNode"),
    pytest.param("MaxMemPerCPU=100\nMaxMemPerNode=100", "MaxMemPerCPU and MaxMemPerNode exclude each other",
                 id="MaxMemPerCPU ignored, since it's mutually exclusive with MaxMemPerNode"),
])
def test_values_slurmctld_refuses(tmp_path, line, message):
    found = only(write(tmp_path, slurm=HEAD + NODES + line + "\n"))
    assert message in found and ": warning: " not in found


def test_first_job_id_above_the_given_max_job_id(tmp_path):
    assert only(write(tmp_path, slurm=HEAD + NODES + "FirstJobId=100\nMaxJobId=50\n")) == (
        'slurm.conf:17: FirstJobId: FirstJobId=100 is above MaxJobId=50: slurmctld stops ("FirstJobId > MaxJobId")')


def test_message_timeout_above_100_is_a_warning(tmp_path):
    # Both versions start and log "MessageTimeout is too high for effective fault-tolerance".
    assert ": warning: MessageTimeout=200" in only(write(tmp_path, slurm=HEAD + NODES + "MessageTimeout=200\n"))


# The edges of each rule above, each of which both slurmctld versions started with (checked the same way).
@pytest.mark.parametrize("line", [
    "SlurmctldPort=1", "SlurmctldPort=65535", "SlurmctldPort=6817-6820", "SlurmctldPort=6817-6817", "SlurmdPort=1",
    "SlurmdPort=65535", "SrunPortRange=60001-65533", "SrunPortRange=1000-1001", "SrunPortRange=0-100", "MaxJobCount=1",
    "MaxStepCount=1", "FirstJobId=1", "FirstJobId=67043328", "FirstJobId=100\nMaxJobId=100", "MaxJobId=67108863",
    "MaxArraySize=4000001", "MaxArraySize=0", "MinJobAge=2", "TreeWidth=1", "TreeWidth=65534", "SchedulerTimeSlice=5",
    "PropagatePrioProcess=2", "DefMemPerCPU=100", "MaxMemPerNode=100", "MessageTimeout=100", "AccountingStoragePort=0",
    "SlurmdTimeout=0", "SlurmctldTimeout=0", "KillWait=0", "MaxTasksPerNode=0", "ReturnToService=3",
])
def test_edges_slurmctld_accepts(tmp_path, line):
    assert problems(write(tmp_path, slurm=HEAD + NODES + line + "\n")) == []


@pytest.mark.parametrize("old, new, message", [
    pytest.param("NodeName=cpu[01-02] CPUs=64", "NodeName= CPUs=64",
                 "slurm.conf:14: NodeName: NodeName has no name: Slurm reads 'CPUs=64' as the name", id="NodeName= (no name)"),
    pytest.param("PartitionName=cpu Nodes", "PartitionName= Nodes",
                 "slurm.conf:16: PartitionName: PartitionName has no name: Slurm reads 'Nodes=cpu[01-02]' as the name",
                 id="PartitionName= (no name)"),
    pytest.param("CPUs=64", "CPUs=0", 'slurm.conf:14: CPUs: CPUs=0 is invalid: Slurm resets it to 1 ("NodeNames=cpu[01-02] '
                 'CPUs=0 is invalid, reset to 1")', id="NodeNames=n CPUs=0 is invalid, reset to 1"),
    pytest.param("ThreadsPerCore=2", "ThreadsPerCore=0", "slurm.conf:13: ThreadsPerCore: ThreadsPerCore=0 is invalid",
                 id="NodeNames=n ThreadsPerCore=0 is invalid, reset to 1"),
    pytest.param("CPUs=128", "CPUs=100", "slurm.conf:13: CPUs: CPUs=100 matches no Sockets (2), Sockets*CoresPerSocket (64) or "
                 "Sockets*CoresPerSocket*ThreadsPerCore (128): Slurm resets CPUs",
                 id="CPUs=100 match no Sockets, Sockets*CoresPerSocket or Sockets*CoresPerSocket*ThreadsPerCore"),
    pytest.param("CPUs=64", "CPUs=64 Port=70000", "slurm.conf:14: Port: '70000' is outside 1-65535 (slurmctld stops: "
                 '"Invalid Port 70000")', id="fatal: Invalid Port 70000"),
    pytest.param("CPUs=64", "CPUs=64 Port=0", "'0' is outside 1-65535", id="fatal: Invalid Port 0"),
    pytest.param("CPUs=64", "CPUs=64 Port=abc", "'abc' is not a port", id="fatal: Invalid Port abc"),
    pytest.param("CPUs=64", "CPUs=64 Port=[17001-17003]", "slurm.conf:14: Port: 3 ports for 2 nodes: slurmctld stops",
                 id="fatal: Port count must equal that of NodeName records or there must be no more than one"),
])
def test_node_and_partition_values_slurmctld_refuses(tmp_path, old, new, message):
    assert message in " ".join(problems(write(tmp_path, slurm=HEAD + NODES.replace(old, new, 1))))


@pytest.mark.parametrize("old, new", [
    ("CPUs=128", "CPUs=64"),                         # Sockets*CoresPerSocket: Slurm's core-level CPU counting
    ("CPUs=128 Sockets=2", "CPUs=2 Sockets=2"),      # Sockets
    ("CPUs=64", "CPUs=64 Port=17001"),               # one port for all nodes
    ("CPUs=64", "CPUs=64 Port=[17001-17002]"),       # one port per node
])
def test_node_values_slurmctld_accepts(tmp_path, old, new):
    assert problems(write(tmp_path, slurm=HEAD + NODES.replace(old, new, 1))) == []


def test_node_defaults_count_for_the_cpu_product(tmp_path):
    slurm = HEAD + "NodeName=DEFAULT Sockets=2 CoresPerSocket=32 ThreadsPerCore=2\n" + NODES.replace(
        "CPUs=128 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2", "CPUs=96")
    assert "slurm.conf:14: CPUs: CPUs=96 matches no Sockets (2)" in " ".join(problems(write(tmp_path, slurm=slurm)))


SCONTROL_REFUSES = [  # (id, slurm.conf, the scontrol versions that report it)
    ("no ClusterName", _without("ClusterName="), keys.BOTH), ("no SlurmctldHost", _without("SlurmctldHost="), keys.BOTH),
    ("SlurmctldPort=0", HEAD + NODES + "SlurmctldPort=0\n", keys.BOTH),
    ("SlurmctldPort backwards", HEAD + NODES + "SlurmctldPort=6820-6817\n", keys.BOTH),
    ("MaxJobCount=0", HEAD + NODES + "MaxJobCount=0\n", keys.BOTH), ("MaxStepCount=0", HEAD + NODES + "MaxStepCount=0\n", keys.BOTH),
    ("FirstJobId=0", HEAD + NODES + "FirstJobId=0\n", keys.BOTH),
    ("FirstJobId>MaxJobId", HEAD + NODES + "FirstJobId=100\nMaxJobId=50\n", keys.BOTH),
    ("PropagatePrioProcess=3", HEAD + NODES + "PropagatePrioProcess=3\n", keys.BOTH),
    ("MaxJobId too big", HEAD + NODES + "MaxJobId=67108864\n", keys.BOTH), ("TreeWidth=0", HEAD + NODES + "TreeWidth=0\n", keys.BOTH),
    ("SchedulerTimeSlice=4", HEAD + NODES + "SchedulerTimeSlice=4\n", keys.BOTH),
    ("DefMemPerCPU+DefMemPerNode", HEAD + NODES + "DefMemPerCPU=1\nDefMemPerNode=1\n", keys.BOTH),
    # 24.11's scontrol no longer builds the node table: only its slurmctld reports these.
    ("CPUs=0", HEAD + NODES.replace("CPUs=64", "CPUs=0"), keys.V22),
    ("CPUs match no product", HEAD + NODES.replace("CPUs=128", "CPUs=100"), keys.V22),
]


@needs_scontrol
@pytest.mark.parametrize("slurm, versions", [pytest.param(s, v, id=i) for i, s, v in SCONTROL_REFUSES])
def test_what_slurmctld_refuses_scontrol_reports_too(tmp_path, slurm, versions):
    """The rules above that scontrol's parse also reports (the others only the daemons show)."""
    directory = write(tmp_path, slurm=slurm)
    assert [p for p in check_config_dir(directory) if p["severity"] == "error"]
    for scontrol in SCONTROLS:
        if scontrol.version in versions:
            assert scontrol.parse_errors(os.path.join(directory, "slurm.conf")), scontrol.command
