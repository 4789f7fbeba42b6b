# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The simulator's own commands: determinism, bundle, setup, symlink dispatch, argument errors."""

import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

BUNDLE_FILES = ("nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv", "nvlink-status.txt",
                "nvlink-errors.txt", "topo.txt", "ibstat.txt", "sys-class-infiniband", "kernel.log",
                "dcgmi-diag.json", "nccl-all-reduce.txt", "fabricmanager.state", "fabricmanager-version.txt",
                "captured_at")
PROFILES = ("h100-sxm-8", "a100-sxm-8", "l40s-pcie-4")


# ---- determinism ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PROFILES)
def test_same_profile_and_faults_give_identical_output(name, profile, outputs):
    faults = ["gpu_hot:gpu=1", "xid_app:gpu=0", "ib_link_flap"]
    first, second = outputs(profile(name), faults), outputs(profile(name), faults)
    assert first == second


def test_identity_comes_from_the_host_name_and_index(profile):
    one = gpusim.build_node(profile(), {"GPUSIM_HOSTNAME": "node-a"})
    again = gpusim.build_node(profile(), {"GPUSIM_HOSTNAME": "node-a"})
    other = gpusim.build_node(profile(), {"GPUSIM_HOSTNAME": "node-b"})
    assert [g["uuid"] for g in one.gpus] == [g["uuid"] for g in again.gpus]
    assert not set(g["uuid"] for g in one.gpus) & set(g["uuid"] for g in other.gpus)
    assert len(set(g["serial"] for g in one.gpus)) == 8
    assert all(g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40 for g in one.gpus)


def test_time_comes_from_gpusim_now(profile):
    node = gpusim.build_node(profile(), {"GPUSIM_NOW": "2026-03-04T05:06:07+01:00"})
    assert gpusim.ctime(node.now) == "Wed Mar  4 04:06:07 2026"
    assert gpusim.render_kernel_log(node).startswith("2026-03-04T03:06:07+00:00 ")


# ---- bundle ---------------------------------------------------------------------------------------------------

def bundle(tmp_path, *args):
    directory = str(tmp_path / "bundle")
    rc, out, err = gpusim.main(["gpusim", "bundle", directory, "--profile", "h100-sxm-8",
                                "--captured-at", "2026-11-30T07:00:00Z"] + list(args), {"GPUSIM_HOSTNAME": "n1"})
    assert rc == 0, err
    return directory, out


def test_bundle_writes_every_file(tmp_path):
    directory, out = bundle(tmp_path)
    for name in BUNDLE_FILES:
        assert os.path.exists(os.path.join(directory, name)), name
    assert not [name for name in os.listdir(directory) if name.endswith(".rc")]
    with open(os.path.join(directory, "captured_at")) as handle:
        assert handle.read() == "2026-11-30T07:00:00Z\n"
    with open(os.path.join(directory, "fabricmanager.state")) as handle:
        assert handle.read() == "active\n"
    with open(os.path.join(directory, "nvidia-smi-q.xml")) as handle:
        assert ET.fromstring(handle.read()).findtext("attached_gpus") == "8"
    with open(os.path.join(directory, "sys-class-infiniband", "mlx5_0", "ports", "1", "rate")) as handle:
        assert handle.read() == "400 Gb/sec (4X NDR)\n"
    assert os.path.join(directory, "kernel.log") in out


def test_bundle_kernel_log_is_just_before_captured_at(tmp_path):
    directory, _out = bundle(tmp_path, "--fault", "xid_error:gpu=2")
    with open(os.path.join(directory, "kernel.log")) as handle:
        lines = handle.read().splitlines()
    assert lines[-1].startswith("2026-11-30T06:59:5") and "): 48, " in lines[-1]


def test_failing_commands_leave_rc_and_stderr(tmp_path):
    directory, _out = bundle(tmp_path, "--fault", "nvml_mismatch")
    for name in ("nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv", "nvlink-status.txt", "topo.txt"):
        with open(os.path.join(directory, name + ".rc")) as handle:
            assert handle.read() == "18\n"
        assert os.path.exists(os.path.join(directory, name + ".stderr"))
    with open(os.path.join(directory, "nvidia-smi-q.xml")) as handle:
        assert handle.read().startswith("Failed to initialize NVML: Driver/library version mismatch\n")
    assert not os.path.exists(os.path.join(directory, "ibstat.txt.rc"))


def test_bundle_over_an_old_bundle_removes_stale_failures(tmp_path):
    bundle(tmp_path, "--fault", "driver_not_loaded")
    directory, _out = bundle(tmp_path)
    assert not [name for name in os.listdir(directory) if name.endswith(".rc")]


def test_bundle_without_fabric_manager_records_inactive(tmp_path):
    directory = str(tmp_path / "l40s")
    rc, _out, _err = gpusim.main(["gpusim", "bundle", directory, "--profile", "l40s-pcie-4",
                                  "--query-fields", "index,name,temperature.gpu"], {})
    assert rc == 0
    with open(os.path.join(directory, "fabricmanager.state")) as handle:
        assert handle.read() == "inactive\n"
    with open(os.path.join(directory, "fabricmanager.state.rc")) as handle:
        assert handle.read() == "3\n"
    with open(os.path.join(directory, "nvidia-smi-query.csv")) as handle:
        assert handle.readline() == "index, name, temperature.gpu\n"
    with open(os.path.join(directory, "nvlink-status.txt")) as handle:
        assert handle.read() == ""


def test_bundles_are_reproducible(tmp_path):
    def read_all(directory):
        files = {}
        for dirpath, _dirs, names in os.walk(directory):
            for name in names:
                with open(os.path.join(dirpath, name)) as handle:
                    files[os.path.relpath(os.path.join(dirpath, name), directory)] = handle.read()
        return files
    one, _out = bundle(tmp_path / "a", "--fault", "fallen_off_bus:gpu=1")
    two, _out = bundle(tmp_path / "b", "--fault", "fallen_off_bus:gpu=1")
    assert read_all(one) == read_all(two)


# ---- setup ----------------------------------------------------------------------------------------------------

@pytest.fixture(name="setup_env")
def fixture_setup_env(tmp_path):
    (tmp_path / "dev").mkdir()
    return {"GPUSIM_ROOT": str(tmp_path / "opt"), "GPUSIM_DEV_DIR": str(tmp_path / "dev"),
            "GPUSIM_LOG_DIR": str(tmp_path / "log"), "GPUSIM_HOSTNAME": "lab-gpu01"}


def setup(env, *args):
    rc, out, err = gpusim.main(["gpusim", "setup", "--profile", "h100-sxm-8"] + list(args), env)
    assert rc == 0, err
    return json.loads(out)


def test_setup_writes_sysfs_kernel_log_and_fabric_state(setup_env):
    report = setup(setup_env, "--fault", "xid_app:gpu=2")
    assert report["changed"]
    ib = os.path.join(setup_env["GPUSIM_ROOT"], "sys", "class", "infiniband")
    assert sorted(os.listdir(ib)) == ["mlx5_%d" % i for i in range(8)] + ["mlx5_bond_0"]
    with open(os.path.join(ib, "mlx5_0", "ports", "1", "state")) as handle:
        assert handle.read() == "4: ACTIVE\n"
    with open(os.path.join(setup_env["GPUSIM_ROOT"], "fabricmanager.state")) as handle:
        assert handle.read() == "active\n"
    with open(os.path.join(setup_env["GPUSIM_LOG_DIR"], "kern.log")) as handle:
        log = handle.read()
    assert " lab-gpu01 kernel: NVRM: Xid (PCI:0000:3a:00): 13, " in log


def test_setup_is_idempotent(setup_env):
    setup(setup_env, "--fault", "ib_port_down:port=mlx5_1")
    log_path = os.path.join(setup_env["GPUSIM_LOG_DIR"], "kern.log")
    with open(log_path) as handle:
        log = handle.read()
    again = setup(setup_env, "--fault", "ib_port_down:port=mlx5_1")
    assert again["changed"] is False and again["changes"] == []
    with open(log_path) as handle:
        assert handle.read() == log
    assert setup(setup_env, "--check", "--fault", "ib_port_down:port=mlx5_1")["changed"] is False


def test_setup_check_changes_nothing(setup_env):
    report = setup(setup_env, "--check")
    assert report["changed"] and report["check"]
    assert not os.path.exists(setup_env["GPUSIM_ROOT"])
    assert os.listdir(setup_env["GPUSIM_DEV_DIR"]) == []


def test_setup_follows_a_changed_fault_list(setup_env):
    setup(setup_env)
    report = setup(setup_env, "--fault", "ib_port_missing:port=mlx5_4", "--fault", "fabricmanager_down")
    assert report["changed"]
    assert "mlx5_4" not in os.listdir(os.path.join(setup_env["GPUSIM_ROOT"], "sys", "class", "infiniband"))
    with open(os.path.join(setup_env["GPUSIM_ROOT"], "fabricmanager.state")) as handle:
        assert handle.read() == "inactive\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_setup_makes_device_nodes_as_root(setup_env):
    setup(setup_env)
    dev = setup_env["GPUSIM_DEV_DIR"]
    assert sorted(os.listdir(dev)) == ["infiniband"] + ["nvidia%d" % i for i in range(8)] + ["nvidiactl"]
    info = os.lstat(os.path.join(dev, "nvidiactl"))
    assert stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == 195 and os.minor(info.st_rdev) == 255
    assert stat.S_IMODE(os.lstat(os.path.join(dev, "nvidia3")).st_mode) == 0o666
    # one verbs device per InfiniBand/RoCE device of the profile (8 ConnectX-7 and the BlueField bond)
    verbs = os.path.join(dev, "infiniband")
    assert sorted(os.listdir(verbs)) == sorted("uverbs%d" % i for i in range(9))
    info = os.lstat(os.path.join(verbs, "uverbs8"))
    assert stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == (231, 200)
    setup(setup_env, "--fault", "gpu_missing:gpu=7")
    assert "nvidia7" not in os.listdir(dev)
    setup(setup_env, "--fault", "driver_not_loaded")
    assert os.listdir(dev) == ["infiniband"]


def test_setup_skips_mknod_when_not_root(setup_env, monkeypatch):
    monkeypatch.setattr(gpusim.os, "geteuid", lambda: 1000)
    report = setup(setup_env)
    # 8 GPUs and nvidiactl, 9 verbs devices
    assert len(report["skipped"]) == 18 and all(s.startswith("mknod ") for s in report["skipped"])
    assert os.listdir(setup_env["GPUSIM_DEV_DIR"]) == []


# ---- command lines ----------------------------------------------------------------------------------------------

def test_symlink_named_after_the_tool_runs_that_tool(tmp_path):
    link = tmp_path / "nvidia-smi"
    link.symlink_to(os.path.abspath(gpusim.__file__))
    env = dict(os.environ, GPUSIM_PROFILE="a100-sxm-8", GPUSIM_HOSTNAME="n1",
               GPUSIM_PROFILE_DIR=os.path.join(os.path.dirname(os.path.abspath(gpusim.__file__)), "profiles"))
    result = subprocess.run([sys.executable, str(link), "-L"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")


def test_installed_launcher_runs_the_compiled_simulator(tmp_path):
    """install.yml's layout: bin/gpusim (launcher.py) runs lib/gpusim.py, byte-compiled, through the tools' links;
    its output, errors and exit codes are the script's own."""
    here = os.path.dirname(os.path.abspath(gpusim.__file__))
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    with open(os.path.join(here, "gpusim.py")) as handle:
        (tmp_path / "lib" / "gpusim.py").write_text(handle.read())
    subprocess.run([sys.executable, "-I", "-m", "py_compile", str(tmp_path / "lib" / "gpusim.py")], check=True)
    with open(os.path.join(here, "launcher.py")) as handle:
        (tmp_path / "bin" / "gpusim").write_text("#!%s -IS\n%s" % (sys.executable, handle.read().split("\n", 1)[1]))
    (tmp_path / "bin" / "gpusim").chmod(0o755)
    (tmp_path / "bin" / "nvidia-smi").symlink_to("gpusim")
    env = dict(os.environ, GPUSIM_PROFILE="h100-sxm-8", GPUSIM_HOSTNAME="n1", GPUSIM_NOW="2026-11-30T07:00:00Z",
               GPUSIM_PROFILE_DIR=os.path.join(here, "profiles"), GPUSIM_ROOT=str(tmp_path / "root"),
               GPUSIM_DEV_DIR=str(tmp_path / "dev"), GPUSIM_LOG_DIR=str(tmp_path / "log"))
    for args in (["-q", "-x"], ["nvlink", "-s"], ["-i", "9", "-L"]):
        launched = subprocess.run([str(tmp_path / "bin" / "nvidia-smi")] + args, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True, check=False)
        script = subprocess.run([sys.executable, os.path.join(here, "gpusim.py"), "nvidia-smi"] + args, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        assert (launched.returncode, launched.stdout, launched.stderr) == (
            script.returncode, script.stdout, script.stderr), args
    assert launched.returncode != 0 and launched.stdout  # GPU 9 of 8: "No devices were found", as the real one
    assert os.listdir(str(tmp_path / "lib" / "__pycache__"))


def test_main_dispatches_on_the_program_name(profile):
    env = {"GPUSIM_PROFILE": "l40s-pcie-4", "GPUSIM_HOSTNAME": "n1"}
    assert gpusim.main(["/opt/gpusim/bin/ibstat", "-l"], env)[1] == "mlx5_0\n"
    assert gpusim.main(["gpusim.py", "ibstatus"], env)[1].startswith("Infiniband device 'mlx5_0' port 1 status:")
    rc, out, _err = gpusim.main(["gpusim", "systemctl", "is-active", "nvidia-fabricmanager"], env)
    assert (rc, out) == (3, "inactive\n")
    assert gpusim.main(["gpusim"], env)[0] == 2
    assert gpusim.main(["gpusim", "frobnicate"], env)[0] == 2


def test_faults_lists_every_fault():
    rc, out, _err = gpusim.main(["gpusim", "faults"], {})
    assert rc == 0 and [line.split()[0] for line in out.splitlines()] == list(gpusim.FAULTS)
    assert len(gpusim.FAULTS) == 39


@pytest.mark.parametrize("args, rc, text", [
    (["--frobnicate"], 2, "Invalid combination of input arguments"),
    (["-q", "-i", "9"], 6, "No devices were found"),
    (["--query-gpu=index", "--format=xml"], 2, "Invalid combination"),
    (["nvlink"], 2, "Invalid combination"),
])
def test_nvidia_smi_refuses_bad_arguments(args, rc, text, profile):
    result = gpusim.run_tool("nvidia-smi", args, {}, profile())
    assert result[0] == rc and text in result[1]


@pytest.mark.parametrize("wanted", ["3", "GPU-", "00000000:5D:00.0", "0000:5d:00.0"])
def test_nvidia_smi_selects_a_gpu_by_index_uuid_or_bus_id(wanted, profile):
    node = gpusim.build_node(profile(), {})
    if wanted == "GPU-":
        wanted = node.gpus[3]["uuid"]
    rc, out, _err = gpusim.run_tool("nvidia-smi", ["-q", "-i", wanted], {}, profile())
    assert rc == 0 and out.count("\nGPU 0000") == 1 and "GPU 00000000:5D:00.0\n" in out


def test_profile_base_and_overrides(tmp_path):
    path = tmp_path / "custom.json"
    path.write_text(json.dumps({"base": "h100-sxm-8", "gpu_count": 4, "driver_version": "535.183.01",
                                "gpu": {"name": "NVIDIA H800"}, "faults": ["persistence_off:gpu=1"]}))
    node = gpusim.build_node(gpusim.load_profile({}, str(path)), {})
    assert len(node.gpus) == 4 and node.gpus[0]["name"] == "NVIDIA H800" and not node.gpus[1]["persistence"]
    assert node.cuda_version == "12.4"
    loop = tmp_path / "loop.json"
    loop.write_text(json.dumps({"base": str(loop)}))
    with pytest.raises(gpusim.SimError):
        gpusim.load_profile({}, str(loop))
    with pytest.raises(gpusim.SimError):
        gpusim.load_profile({}, "no-such-profile")


def test_all_reduce_arguments(profile):
    rc, out, _err = gpusim.run_tool("all_reduce_perf", ["--minbytes=1M", "-e", "4M", "-f", "2", "-g", "4"], {},
                                    profile())
    assert rc == 0 and out.startswith("# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor)")
    assert gpusim.run_tool("all_reduce_perf", ["-b", "lots"], {}, profile())[0] == 1


# ---- robustness: any faults on any profile -------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(PROFILES),
       faults=st.lists(st.tuples(st.sampled_from(sorted(gpusim.FAULTS)), st.integers(0, 9)), max_size=4),
       driver=st.sampled_from(["535.54.03", "535.183.01", "550.127.05", "560.35.03", "570.86.15", "590.48.01",
                               "595.84"]))
def test_any_faults_on_any_profile_render_or_fail_cleanly(name, faults, driver, profile):
    data = profile(name, driver_version=driver)
    specs = [{"name": fault, "gpu": index % data["gpu_count"]} for fault, index in faults]
    try:
        node = gpusim.build_node(data, {"GPUSIM_NOW": "2026-11-30T07:00:00Z"}, specs)
    except gpusim.SimError as error:
        assert error.rc == 2 and error.stderr.startswith("gpusim: ")
        return
    for tool, args in (("nvidia-smi", ["-q", "-x"]), ("nvidia-smi", ["-q"]), ("nvidia-smi", []),
                       ("nvidia-smi", ["--query-gpu=" + gpusim.DEFAULT_QUERY, "--format=csv"]),
                       ("nvidia-smi", ["nvlink", "-s"]), ("nvidia-smi", ["topo", "-m"]), ("ibstat", []),
                       ("dcgmi", ["diag", "-r", "2", "-j"]), ("all_reduce_perf", ["-g", "2"])):
        rc, out, _err = gpusim.run_tool(tool, args, {"GPUSIM_NOW": "2026-11-30T07:00:00Z"}, data, specs)
        assert rc in (0, 2, 3, 6, 9, 18, 226, 235, 255)
        if tool == "nvidia-smi" and args == ["-q", "-x"] and "<?xml" in out:
            ET.fromstring(out[out.index("<?xml"):])
        if tool == "dcgmi" and out.startswith("{"):
            json.loads(out)
    assert gpusim.render_kernel_log(node).count("\n") >= len(node.events)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_uuid5_and_xml_escape_are_the_standard_librarys(text):
    # gpusim does both itself so that a tool call imports neither uuid nor xml.sax.saxutils (their imports cost more
    # than most calls take); they must give what the standard library gives.
    import uuid  # pylint: disable=import-outside-toplevel
    from xml.sax.saxutils import escape  # pylint: disable=import-outside-toplevel
    namespace = uuid.UUID(bytes=gpusim.UUID_NAMESPACE)
    assert str(namespace) == "6b1d3c1e-8f0a-4f7e-9a51-6a0d5b7c2e11"
    assert gpusim.uuid5(gpusim.UUID_NAMESPACE, text) == str(uuid.uuid5(namespace, text))
    assert gpusim.xml_escape(text) == escape(text)


def test_a_tool_call_does_not_import_what_it_does_not_need():
    probe = ("import runpy, sys; sys.argv = ['nvidia-smi', '-L']; "
             "sys.modules.pop('__main__', None)\n"
             "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print('imported:', *sorted(m for m in ('uuid', 'socket', 'signal', 'shutil', 'xml.sax.saxutils',"
             " 'urllib.request') if m in sys.modules))" % gpusim.__file__)
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=False,
                         env={"GPUSIM_NOW": "2026-11-30T07:00:00Z", "PATH": os.environ.get("PATH", "")})
    assert out.stdout.splitlines()[-1:] == ["imported:"], out.stdout + out.stderr
