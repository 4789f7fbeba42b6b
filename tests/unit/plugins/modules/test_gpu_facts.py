"""gpu_facts main() on captured nvidia-smi outputs (tests/unit/fixtures) replayed through a patched run_command."""

import os
import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import gpu_facts
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
XML = "nvsmi/h100x8_v13.xml"
TOPO = "nvlink/h100x8_nic4_topo.txt"
NVLINK = "nvlink/h100x8_nvlink_status.txt"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class FakeSmi(object):
    """nvidia-smi answering from fixtures: ``answers`` maps the arguments after the program to (rc, out, err)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, environ_update=None, **_kwargs):
        self.calls.append(list(argv))
        assert argv[:2] == ["timeout", "60"] and environ_update == {"LC_ALL": "C", "LANG": "C"}
        return self.answers[tuple(argv[3:])]


def healthy(changes=None):
    answers = {("-q", "-x"): (0, fixture(XML), ""), ("topo", "-m"): (0, fixture(TOPO), ""),
               ("nvlink", "-s"): (0, fixture(NVLINK), "")}
    answers.update(changes or {})
    return FakeSmi(answers)


def expected_from_the_xml():
    """What the capture holds, read with ElementTree: (driver, cuda, [(bus id, minor, name, uuid)])."""
    root = ET.fromstring(fixture(XML))
    gpus = [(gpu.get("id"), int(gpu.findtext("minor_number")), gpu.findtext("product_name"), gpu.findtext("uuid"))
            for gpu in root.findall("gpu")]
    return root.findtext("driver_version"), root.findtext("cuda_version"), gpus


def active_links_per_gpu():
    """Active links of each GPU in the nvlink -s capture (a link line with a speed)."""
    counts, current = {}, None
    for line in fixture(NVLINK).splitlines():
        header = re.match(r"^GPU (\d+):", line)
        if header:
            current = int(header.group(1))
            counts[current] = 0
        elif re.match(r"^\s+Link \d+: [\d.]+ GB/s", line):
            counts[current] += 1
    return counts


@pytest.mark.parametrize("check", [False, True])
def test_facts_are_the_capture(check):
    smi = healthy()
    result = run_module(gpu_facts, {}, check=check, run_command=smi)
    assert result["failed"] is False and result["changed"] is False and result["unreadable"] == []
    facts = result["ansible_facts"]
    driver, cuda, gpus = expected_from_the_xml()
    assert (facts["gpucluster_gpu_driver_version"], facts["gpucluster_gpu_cuda_version"]) == (driver, cuda)
    assert facts["gpucluster_gpu_count"] == len(gpus) == 8 and facts["gpucluster_gpu_error"] == ""
    assert [(g["bus_id"], g["minor_number"], g["name"], g["uuid"]) for g in facts["gpucluster_gpus"]] == gpus
    assert [g["index"] for g in facts["gpucluster_gpus"]] == list(range(8))
    links = active_links_per_gpu()
    assert [g["nvlinks_active"] for g in facts["gpucluster_gpus"]] == [links[i] for i in range(8)]
    first, last = facts["gpucluster_gpus"][0], facts["gpucluster_gpus"][7]
    assert (first["cpu_affinity"], first["numa_affinity"]) == ("0-55,112-167", "0")
    assert (last["cpu_affinity"], last["numa_affinity"]) == ("56-111,168-223", "1")
    assert first["nvlink_peers"] == ["GPU%d" % i for i in range(1, 8)]
    # check mode reads the same: the module only reads
    assert smi.calls == [["timeout", "60", "nvidia-smi", "-q", "-x"], ["timeout", "60", "nvidia-smi", "topo", "-m"],
                         ["timeout", "60", "nvidia-smi", "nvlink", "-s"]]


def test_topology_and_nvlink_can_be_left_out_and_the_program_named():
    smi = FakeSmi({("-q", "-x"): (0, fixture(XML), "")})
    result = run_module(gpu_facts, {"nvidia_smi": "/opt/nv/nvidia-smi", "topology": False, "nvlink": False},
                        run_command=smi)
    assert smi.calls == [["timeout", "60", "/opt/nv/nvidia-smi", "-q", "-x"]]
    gpu = result["ansible_facts"]["gpucluster_gpus"][0]
    assert (gpu["cpu_affinity"], gpu["numa_affinity"], gpu["nvlinks_active"], gpu["nvlink_peers"]) == (None, None, None, None)


def test_failed_topology_and_nvlink_leave_their_facts_unknown():
    smi = healthy({("topo", "-m"): (1, "", "topo: error"), ("nvlink", "-s"): (124, "", "")})
    result = run_module(gpu_facts, {}, run_command=smi)
    gpus = result["ansible_facts"]["gpucluster_gpus"]
    assert len(gpus) == 8 and all(g["cpu_affinity"] is None and g["nvlinks_active"] is None for g in gpus)
    # no peers read is not "no peers": a failed topology leaves them unknown
    assert all(g["nvlink_peers"] is None for g in gpus)


@pytest.mark.parametrize("name,rc,message", [
    ("nvsmi/error_no_driver.txt", 9, "couldn't communicate with the NVIDIA driver"),
    ("nvsmi/error_driver_mismatch.txt", 18, "Driver/library version mismatch"),
    ("nvsmi/error_no_devices.txt", 6, "No devices were found"),
])
def test_a_failing_nvidia_smi_gives_no_gpu_and_the_reason(name, rc, message):
    smi = healthy({("-q", "-x"): (rc, fixture(name), "")})
    result = run_module(gpu_facts, {}, run_command=smi)
    facts = result["ansible_facts"]
    assert result["failed"] is False and facts["gpucluster_gpus"] == [] and facts["gpucluster_gpu_count"] == 0
    assert message in facts["gpucluster_gpu_error"]
    assert len(smi.calls) == 1                  # no GPU: topo and nvlink are not asked
    failed = run_module(gpu_facts, {"fail_on_error": True}, run_command=smi)
    assert failed["failed"] and failed["msg"].startswith("no GPU listed by nvidia-smi: ") and message in failed["msg"]
    assert failed["ansible_facts"] == facts


@pytest.mark.parametrize("rc,out,err,message", [
    (127, "", "timeout: failed to run command 'nvidia-smi': No such file or directory",
     "nvidia-smi -q -x: rc 127: timeout: failed to run command"),
    (124, "", "", "nvidia-smi -q -x: rc 124: no output"),
    (0, "Segmentation fault\n", "", "nvidia-smi -q -x: xml: no <nvidia_smi_log> document in the input"),
    (0, fixture(XML)[:3000], "", "nvidia-smi -q -x: xml: unclosed token"),     # cut short
    (0, "", "", "nvidia-smi -q -x printed nothing"),
])
def test_no_answer_or_garbage_is_an_error_never_an_empty_node(rc, out, err, message):
    """Never OK when unsure: what cannot be read is an error fact (and a failure with fail_on_error)."""
    result = run_module(gpu_facts, {}, run_command=healthy({("-q", "-x"): (rc, out, err)}))
    facts = result["ansible_facts"]
    assert facts["gpucluster_gpus"] == [] and facts["gpucluster_gpu_error"].startswith(message), facts
    failed = run_module(gpu_facts, {"fail_on_error": True}, run_command=healthy({("-q", "-x"): (rc, out, err)}))
    assert failed["failed"] and message in failed["msg"]
