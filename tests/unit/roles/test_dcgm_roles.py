"""What the dcgm and dcgm_exporter roles derive and write: DCGM's CUDA flavour and pin, dcgm-exporter's unit and
counters file."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils._dcgm_counters import check_counters

from .rolerender import DEBIAN13, RHEL9, UBUNTU_2204, RoleRender


def dcgm(facts=None, os_vars="Debian.yml", **overrides):
    return RoleRender("dcgm", os_vars, facts or UBUNTU_2204, **overrides)


@pytest.mark.parametrize("branch,cuda", [("470", "11"), ("520", "11"), ("525", "12"), ("550", "12"), ("575", "12"),
                                         ("580", "13"), ("590", "13"), ("418", "")])
def test_the_driver_branch_picks_the_cuda_flavour_of_dcgm_4(branch, cuda):
    r = dcgm(dcgm_driver_branch=branch)
    assert r.var("__dcgm_cuda_effective") == cuda
    if cuda:
        assert r.var("__dcgm_packages") == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda" + cuda]
        assert sorted(r.var("__dcgm_other_flavours")) == sorted(
            "datacenter-gpu-manager-4-cuda" + c for c in ("11", "12", "13") if c != cuda)


def test_the_installed_driver_decides_when_no_branch_is_given_and_an_explicit_flavour_wins():
    assert dcgm(dcgm_driver_branch="", __dcgm_installed_driver="550.163.01").var("__dcgm_cuda_effective") == "12"
    assert dcgm(dcgm_driver_branch="", __dcgm_installed_driver="").var("__dcgm_cuda_effective") == ""
    assert dcgm(dcgm_driver_branch="550", dcgm_cuda_major="13").var("__dcgm_cuda_effective") == "13"


def test_the_nvidia_driver_roles_branch_is_the_default():
    assert dcgm(nvidia_driver_branch="580").var("__dcgm_cuda_effective") == "13"


def test_dcgm_3_is_one_package():
    r = dcgm(dcgm_major_version=3, dcgm_driver_branch="535")
    assert r.var("__dcgm_packages") == ["datacenter-gpu-manager"]
    assert r.var("__dcgm_other_flavours") == []
    assert r.var("__dcgm_probe_package") == "datacenter-gpu-manager"


@pytest.mark.parametrize("version,pin", [("", "Pin: version 1:4.*"), ("4.2.3", "Pin: version 1:4.2.3-1")])
def test_the_pin_holds_the_major_version_or_the_exact_one(version, pin):
    r = dcgm(dcgm_driver_branch="550", dcgm_version=version, __dcgm_target="1:4.2.3-1")
    text = r.template("apt-preferences.j2")
    assert text.startswith("#")
    assert "Package: datacenter-gpu-manager-4-core datacenter-gpu-manager-4-cuda12\n" in text
    assert pin + "\n" in text and "Pin-Priority: 1001" in text
    assert "CUDA 12 flavour for driver branch 550" in text


def exporter(**overrides):
    return RoleRender("dcgm_exporter", None, DEBIAN13, **overrides)


def exec_start(text):
    return [line for line in text.splitlines() if line.startswith("ExecStart")]


def test_the_binary_unit_runs_the_program_with_the_settings():
    text = exporter().template("dcgm-exporter.service.j2")
    assert text.startswith("#")
    assert exec_start(text) == ["ExecStart=/usr/local/bin/dcgm-exporter --collectors /etc/dcgm-exporter/counters.csv "
                                "--address :9400 --collect-interval 30000 --remote-hostengine-info localhost:5555"]
    assert "Wants=network-online.target nvidia-dcgm.service" in text
    assert "[Install]\nWantedBy=multi-user.target" in text


def test_an_address_an_embedded_host_engine_and_extra_arguments():
    text = exporter(dcgm_exporter_listen_address="fd00::5", dcgm_exporter_port=9500, dcgm_exporter_hostengine="",
                    dcgm_exporter_collect_interval_ms=10000,
                    dcgm_exporter_extra_args=["--hpc-job-mapping-dir", "/run/dcgm job map"]).template("dcgm-exporter.service.j2")
    assert exec_start(text) == ["ExecStart=/usr/local/bin/dcgm-exporter --collectors /etc/dcgm-exporter/counters.csv "
                                "--address '[fd00::5]:9500' --collect-interval 10000 --hpc-job-mapping-dir "
                                "'/run/dcgm job map'"]
    assert "nvidia-dcgm" not in text


@pytest.mark.parametrize("engine,gpus", [("docker", "--gpus all"), ("podman", "--device nvidia.com/gpu=all")])
def test_the_container_unit(engine, gpus):
    path = "/usr/bin/" + engine
    text = exporter(dcgm_exporter_method="container", dcgm_exporter_container_engine=engine,
                    __dcgm_exporter_engine={"stdout": path + "\n"}).template("dcgm-exporter.service.j2")
    assert exec_start(text) == [
        "ExecStartPre=-%s rm --force dcgm-exporter" % path,
        "ExecStart=%s run --rm --name dcgm-exporter %s --cap-add SYS_ADMIN --network host --volume "
        "/etc/dcgm-exporter:/etc/dcgm-exporter/gpucluster:ro nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04 "
        "--collectors /etc/dcgm-exporter/gpucluster/counters.csv --address :9400 --collect-interval 30000 "
        "--remote-hostengine-info localhost:5555" % (path, gpus)]
    assert ("Requires=docker.service" in text) == (engine == "docker")


def test_the_counters_file_holds_the_defaults_and_passes_the_checker():
    r = exporter(dcgm_exporter_extra_counters=[{"field": "DCGM_FI_PROF_SM_ACTIVE", "type": "gauge",
                                                "help": "Ratio of cycles an SM has at least 1 warp assigned."}])
    text = r.template("counters.csv.j2")
    result = check_counters(text)
    assert result["problems"] == []
    fields = [c["field"] for c in result["counters"]]
    defaults = [c["field"] for c in r.var("dcgm_exporter_counters")]
    assert fields == defaults + ["DCGM_FI_PROF_SM_ACTIVE"]
    # the standard set plus Xid, remapped rows, NVLink errors and PCIe replays
    for field in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                  "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                  "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_PROF_PCIE_TX_BYTES"):
        assert field in fields


@pytest.mark.parametrize("entry", [
    "not a mapping", {"type": "gauge", "help": "h"}, {"field": "gpu_temp", "type": "gauge", "help": "h"},
    {"field": "DCGM_FI_DEV_GPU_TEMP", "help": "h"}, {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "histogram", "help": "h"},
    {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge"}, {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "a, b"},
    {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": 'say "x"'},
])
def test_the_preflight_finds_entries_dcgm_exporter_cannot_read(entry):
    assert exporter(dcgm_exporter_extra_counters=[entry]).var("__dcgm_exporter_bad_counters") == [entry]


def test_good_entries_are_not_flagged():
    assert exporter().var("__dcgm_exporter_bad_counters") == []


def test_rhel_uses_dnf():
    assert dcgm(RHEL9, "RedHat.yml").var("__dcgm_package_manager") == "dnf"
