# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The simulated services and what they change: nv-fabricmanager --version, nvidia-smi -r, the unit processes
(``gpusim service UNIT``), the services log, and NVLink degradation that a fabric manager restart clears or not."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

SCRIPT = gpusim.__file__
ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 (start|stop|fail|reset) (\S+)$")


def run(tool, args, faults=(), env=None, profile="h100-sxm-8"):
    data = gpusim.load_profile(dict(ENV), profile) if isinstance(profile, str) else profile
    return gpusim.run_tool(tool, args, dict(env or ENV), data, list(faults))


# ---- tools, without services ------------------------------------------------------------------------------------

def test_fabricmanager_version_is_the_driver_s_unless_a_fault_installs_another():
    assert run("nv-fabricmanager", ["--version"]) == (0, "Fabric Manager version is : 550.127.05\n", "")
    assert run("nv-fabricmanager", ["--version"], ["fabricmanager_version:value=550.54.15"])[1] == \
        "Fabric Manager version is : 550.54.15\n"
    # the fabric manager follows a driver_version fault (both packages upgraded together)
    assert run("nv-fabricmanager", ["--version"], ["driver_version:value=535.183.01"])[1] == \
        "Fabric Manager version is : 535.183.01\n"
    assert run("nv-fabricmanager", ["--version"], ["fabricmanager_version"])[1] == \
        "Fabric Manager version is : 535.183.01\n"
    assert run("nv-fabricmanager", [])[0] == 1


def test_a_mismatched_fabric_manager_never_started_and_the_fabric_stays_in_progress():
    faults = ["fabricmanager_version:value=550.54.15"]
    assert run("systemctl", ["is-active", "nvidia-fabricmanager"], faults) == (3, "failed\n", "")
    text = run("nvidia-smi", ["-q"], faults)[1]
    assert text.count("In Progress") == 8 and "Completed" not in text
    assert run("nvidia-smi", ["-q"])[1].count("Completed") == 8


def test_gpu_reset_succeeds_on_idle_gpus_with_nvidia_smi_s_words():
    rc, out, _err = run("nvidia-smi", ["-r", "-i", "3"])
    assert (rc, out) == (0, "GPU 00000000:5D:00.0 was successfully reset.\n")
    rc, out, _err = run("nvidia-smi", ["--gpu-reset"])
    assert rc == 0 and len(out.splitlines()) == 8


def test_gpu_reset_is_refused_while_a_process_holds_the_gpu():
    rc, out, _err = run("nvidia-smi", ["-r", "-i", "1"], ["gpu_in_use:gpu=1"])
    assert rc == 255
    assert out == ("The following GPUs could not be reset:\n  GPU 00000000:2A:00.0: In use by another client\n\n"
                   "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                   "application, graphics application such as an X server, or a monitoring application such as "
                   "another instance of nvidia-smi). Please first kill all processes using this device and all "
                   "compute applications running in the system.\n")
    assert run("nvidia-smi", ["-r", "-i", "2"], ["gpu_in_use:gpu=1"])[0] == 0
    rc, out, _err = run("nvidia-smi", ["-r"], ["gpu_in_use"])
    assert rc == 255 and out.startswith("The following GPUs could not be reset:\n") and "8 devices are" in out
    assert run("nvidia-smi", ["-r"], ["fallen_off_bus:gpu=3"])[0] == 255


def test_compute_apps_lists_the_processes_that_hold_a_gpu():
    argv = ["--query-compute-apps=pid,process_name,gpu_bus_id", "--format=csv,noheader"]
    assert run("nvidia-smi", argv) == (0, "", "")
    rc, out, _err = run("nvidia-smi", argv, ["gpu_in_use:gpu=1,value=train.py"])
    assert rc == 0 and out.count("\n") == 1 and out.startswith("4001, train.py, 00000000:"), out
    rc, out, _err = run("nvidia-smi", ["--query-compute-apps=pid,process_name", "--format=csv"], ["gpu_in_use"])
    assert rc == 0 and out.splitlines()[0] == "pid, process_name" and len(out.splitlines()) == 9, out
    assert run("nvidia-smi", ["--query-compute-apps=colour", "--format=csv"])[0] == 2


def test_nvlink_degradation_shows_as_inactive_links_to_the_checker_at_the_quick_level():
    from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks, _nvlink
    for kind in ("recoverable", "persistent"):
        text = run("nvidia-smi", ["nvlink", "-s"], ["nvlink_degraded:gpu=4,value=%s,links=3" % kind])[1]
        snapshot = {"nvlink": _nvlink.parse_nvlink_status(text), "failures": {}}
        found = _health_checks.check_nvlink(snapshot, {"expected": {"nvlinks_per_gpu": 18}})
        assert [(f["code"], f["target"]) for f in found] == [("GPU-NVLINK-INACTIVE", "gpu4")]
        assert "0, 1, 2 inactive" in found[0]["message"]
    assert run("nvidia-smi", ["nvlink", "-s"], ["nvlink_degraded:gpu=1,value=sometimes"])[0] == 2


# ---- the unit processes --------------------------------------------------------------------------------------

@pytest.fixture(name="node")
def fixture_node(tmp_path):
    """A managed node in a scratch tree: its profile file (services: systemd) and the environment of its units."""
    env = dict(os.environ, GPUSIM_ROOT=str(tmp_path / "opt"), GPUSIM_LOG_DIR=str(tmp_path / "log"),
               GPUSIM_DEV_DIR=str(tmp_path / "dev"), GPUSIM_HOSTNAME="gpu-node-07")
    for name in ("log", "dev"):
        (tmp_path / name).mkdir()
    path = tmp_path / "profile.json"
    env["GPUSIM_PROFILE"] = str(path)
    started = []

    def set_faults(*faults):
        data = gpusim.load_profile(dict(ENV), "h100-sxm-8")
        data.update(services="systemd", faults=list(faults))
        path.write_text(json.dumps(data))
        rc, _out, err = gpusim.main(["gpusim", "setup"], dict(env))
        assert rc == 0, err

    def start(unit):
        proc = subprocess.Popen([sys.executable, SCRIPT, "service", unit], env=env, stderr=subprocess.PIPE)
        pid_file = tmp_path / "opt" / "run" / (unit + ".pid")
        deadline = time.monotonic() + 20
        while not pid_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        started.append(proc)
        return proc

    def stop(proc):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0

    def tool(name, *args):
        return gpusim.main([name] + list(args), dict(env))

    def log():
        lines = (tmp_path / "log" / "services.log").read_text().splitlines()
        assert all(LOG_LINE.match(line) for line in lines), lines
        return [tuple(line.split()[1:]) for line in lines]

    def fm_state():
        return (tmp_path / "opt" / "fabricmanager.state").read_text()

    set_faults()
    yield type("Node", (), {"set_faults": staticmethod(set_faults), "start": staticmethod(start),
                            "stop": staticmethod(stop), "tool": staticmethod(tool), "log": staticmethod(log),
                            "fm_state": staticmethod(fm_state)})
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_units_log_their_starts_and_stops_and_hold_the_gpus(node):
    units = [node.start(u) for u in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")]
    assert node.fm_state() == "active\n"
    assert node.tool("systemctl", "is-active", "nvidia-fabricmanager") == (0, "active\n", "")
    assert node.tool("dcgmi", "diag", "-r", "1")[0] == 0
    assert node.tool("nvidia-smi", "-r")[0] == 255
    for proc in reversed(units):
        node.stop(proc)
    assert node.fm_state() == "inactive\n"
    assert node.tool("nvidia-smi", "-q")[1].count("In Progress") == 8
    assert node.tool("dcgmi", "diag", "-r", "1")[0] == 235   # no host engine
    assert node.tool("nvidia-smi", "-r", "-i", "0")[0] == 0
    assert node.log() == [("start", "nvidia-persistenced"), ("start", "nvidia-fabricmanager"),
                          ("start", "nvidia-dcgm"), ("stop", "nvidia-dcgm"), ("stop", "nvidia-fabricmanager"),
                          ("stop", "nvidia-persistenced"), ("reset", "gpu0")]


def test_a_fabric_manager_restart_clears_recoverable_degradation_only(node):
    fm = node.start("nvidia-fabricmanager")
    node.set_faults({"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"},
                    {"name": "nvlink_degraded", "gpu": 2, "value": "persistent"})
    status = node.tool("nvidia-smi", "nvlink", "-s")[1]
    assert status.count("<inactive>") == 4
    node.stop(fm)
    fm = node.start("nvidia-fabricmanager")
    status = node.tool("nvidia-smi", "nvlink", "-s")[1]
    assert status.count("<inactive>") == 2 and "GPU 2:" in status.split("<inactive>")[0]
    # the fault cleared and set again needs another restart
    node.set_faults({"name": "nvlink_degraded", "gpu": 2, "value": "persistent"})
    node.set_faults({"name": "nvlink_degraded", "gpu": 1, "value": "recoverable"},
                    {"name": "nvlink_degraded", "gpu": 2, "value": "persistent"})
    assert node.tool("nvidia-smi", "nvlink", "-s")[1].count("<inactive>") == 4
    node.stop(fm)


def test_a_fabric_manager_of_another_version_fails_to_start(node):
    node.set_faults({"name": "fabricmanager_version", "value": "550.54.15"})
    proc = node.start("nvidia-fabricmanager")
    assert proc.wait(timeout=20) == 1
    assert b"don't match with driver version 550.127.05" in proc.stderr.read()
    assert node.fm_state() == "failed\n"
    assert node.tool("systemctl", "is-active", "nvidia-fabricmanager") == (3, "failed\n", "")
    assert node.tool("nvidia-smi", "-q")[1].count("In Progress") == 8
    assert node.log() == [("fail", "nvidia-fabricmanager")]
    node.set_faults()
    node.stop(node.start("nvidia-fabricmanager"))
    assert node.log()[-2:] == [("start", "nvidia-fabricmanager"), ("stop", "nvidia-fabricmanager")]


def test_service_refuses_an_unknown_unit():
    rc, _out, err = gpusim.main(["gpusim", "service", "sshd"], dict(ENV))
    assert rc == 2 and "usage: gpusim service" in err
