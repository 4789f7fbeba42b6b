"""The slurm_config_check module (AnsibleModule with patched args) and bin/slurm-config-check (subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.ops.plugins.modules import slurm_config_check
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module as harness_run

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "bin", "slurm-config-check")
GOOD = ("ClusterName=lab\nSlurmctldHost=ctl\nGresTypes=gpu\n"
        "NodeName=gpu[1-2] CPUs=8 RealMemory=1000 Gres=gpu:a100:2\nPartitionName=p Nodes=gpu[1-2] Default=YES\n")
GRES = "NodeName=gpu[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1]\n"


def make(directory, slurm=GOOD, gres=GRES):
    directory.mkdir(exist_ok=True)
    (directory / "slurm.conf").write_text(slurm)
    (directory / "gres.conf").write_text(gres)
    return str(directory)


def run_module(args, run_command=None):
    """Run main() with ``args``; return the result (``failed`` tells exit from fail)."""
    return harness_run(slurm_config_check, args, run_command=run_command)


def test_module_clean(tmp_path):
    result = run_module({"path": make(tmp_path / "c"), "version": "24.11", "_ansible_check_mode": True})
    assert result == {"changed": False, "failed": False, "problems": [], "errors": 0, "warnings_count": 0}


def test_module_fails_with_the_problem_list(tmp_path):
    path = make(tmp_path / "c", slurm=GOOD + "SlurmdTimout=5\nSelectType=select/cons_tres\nSelectType=select/cons_tres\n")
    result = run_module({"path": path})
    assert result["failed"] and result["errors"] == 1 and result["warnings_count"] == 1
    assert result["msg"].splitlines() == ["1 problem(s) in %s:" % path, "slurm.conf:6: SlurmdTimout: unknown key SlurmdTimout"]
    assert result["problems"][0] == {"file": "slurm.conf", "line": 6, "key": "SlurmdTimout",
                                     "message": "unknown key SlurmdTimout", "severity": "error"}


def test_module_warnings(tmp_path):
    path = make(tmp_path / "c", slurm=GOOD + "KillWait=30\nKillWait=60\n")
    assert run_module({"path": path})["failed"] is False
    assert run_module({"path": path, "fail_on_warnings": True})["failed"] is True


def test_module_required_tres_and_allowed_plugins(tmp_path):
    path = make(tmp_path / "c", slurm=GOOD + "SwitchType=switch/hpe_slingshot\n")
    result = run_module({"path": path, "required_tres": ["gres/gpu"], "allow_plugins": ["switch/hpe_slingshot"]})
    assert [p["key"] for p in result["problems"]] == ["AccountingStorageTRES"]


def test_module_bad_version(tmp_path):
    result = run_module({"path": make(tmp_path / "c"), "version": "21.08"})
    assert result["failed"] and "unsupported Slurm version '21.08'" in result["msg"]


def test_module_scontrol_parse_reads_stderr(tmp_path):
    """scontrol exits 0 on some errors: what it prints on stderr is a problem."""
    calls = []

    def run_command(args, environ_update=None, **_kwargs):
        calls.append((args, environ_update))
        return 0, "x\n", "scontrol: error: Invalid hostlist: gpu[05-01]\n"

    path = make(tmp_path / "c")
    result = run_module({"path": path, "scontrol_parse": True}, run_command=run_command)
    assert result["failed"]
    assert result["problems"] == [{"file": "slurm.conf", "line": 0, "key": "scontrol", "severity": "error",
                                   "message": "error: Invalid hostlist: gpu[05-01]"}]
    assert calls == [(["/usr/bin/scontrol", "show", "hostnames", "x"],
                      {"SLURM_CONF": os.path.join(path, "slurm.conf"), "LC_ALL": "C"})]


# --- bin/slurm-config-check --------------------------------------------------------------------------------------------

def run_script(*args):
    """Run the script with python3 -S: no site-packages, so it cannot lean on Ansible."""
    proc = subprocess.run([sys.executable, "-S", SCRIPT] + list(args), capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_script_clean(tmp_path):
    assert run_script(make(tmp_path / "c")) == (0, "", "")


def test_script_problems_one_per_line(tmp_path):
    path = make(tmp_path / "c", slurm=GOOD + "SlurmdTimout=5\nPartitionName=q Nodes=gpu[1-3]\n", gres=GRES.replace("a100", "h100"))
    rc, out, err = run_script("--version", "22.05", path)
    assert (rc, err) == (1, "")
    assert out.splitlines() == [
        "slurm.conf:6: SlurmdTimout: unknown key SlurmdTimout",
        "slurm.conf:7: Nodes: PartitionName q names undefined nodes gpu3 (a reconfigure with this kills slurmctld)",
        "gres.conf:1: Gres: nodes gpu[1-2]: slurm.conf has gpu:a100:2, gres.conf gpu:h100:2",
    ]


def test_script_warnings_and_strict(tmp_path):
    path = make(tmp_path / "c", slurm=GOOD + "KillWait=30\nKillWait=60\n")
    rc, out, _err = run_script(path)
    assert rc == 0 and "warning: set again" in out
    assert run_script("--strict", path)[0] == 1


def test_script_require_tres(tmp_path):
    rc, out, _err = run_script("--require-tres", "gres/gpu", make(tmp_path / "c"))
    assert rc == 1 and "AccountingStorageTRES must contain it" in out


@pytest.mark.parametrize("args", [[], ["--version", "23.02", "."], ["/nonexistent"], ["--bogus", "."]])
def test_script_usage_errors(args):
    rc, out, err = run_script(*args)
    assert rc == 2 and out == "" and "usage: slurm-config-check" in err


def test_script_does_not_import_ansible(tmp_path):
    """Plain python3 from a checkout: the module_utils are found by path, Ansible is never imported."""
    code = ("import runpy, sys; sys.argv = ['slurm-config-check', %r]\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ansible')))") % (make(tmp_path / "c"), SCRIPT)
    proc = subprocess.run([sys.executable, "-S", "-c", "import json\n" + code], capture_output=True, text=True, check=False)
    assert json.loads(proc.stdout.splitlines()[-1]) == []
