"""plugin_utils/_health_sweep.py: a node's record for the fleet report (the one definition behind the filter
health_sweep_record and the action health_fanout), the check of the sweep's variables, and the fan-out's ssh command
line. The playbook around them: tests/unit/test_health_sweep_playbook.py; real ssh: tests/integration/test_fleet_sweep_ssh.py."""

import json

import pytest

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _health_sweep as hs
from ansible_collections.gpucluster.ops.plugins.action.health_fanout import remote_command, run_probe, ssh_argv

PINNABLE = ["driver_version", "cuda_version", "nccl_version", "vbios_version", "ib_fw_version", "ofed_version",
            "gpu_count", "gpu_model"]
RESULT = {"node": "gpu01", "status": "ok", "driver_version": "550.127.05", "findings": [],
          "gpus": [{"index": 0, "vbios_version": "96.00.89.00.01"}, {"index": 1, "vbios_version": "96.00.89.00.01"},
                   {"index": 2, "vbios_version": ""}, {"index": 3}]}
STACK = {"driver": {"installed": "550.127.05", "loaded": "550.127.05"},
         "cuda": [{"version": "12.4", "default": False}, {"version": "12.6", "default": True}, {"version": "12.8"}],
         "nccl": {"installed": "2.22.3"}}


def probe(answer, rc=0, stderr=""):
    return {"rc": rc, "stdout": json.dumps(answer) + "\n", "stderr": stderr}


def answer(**kwargs):
    base = {"installed": True, "config_exists": True, "rc": 0, "result": RESULT, "error": None, "stack": STACK,
            "ofed_version": "MLNX_OFED_LINUX-24.10-1.1.4.0", "ib_fw": {"mlx5_0": "28.39.1002", "mlx5_1": "28.39.1002",
                                                                       "mlx5_2": "28.40.1000"}}
    base.update(kwargs)
    return base


def record(probe_result, module=None, **kwargs):
    args = dict(node_name="gpu01", groups=[], group_names=["gpu_nodes", "gpu_h100"],
                health_check_expected={"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvlinks_per_gpu": 18},
                health_sweep_expected={"ib_fw_version": "28.40.1000"}, pinnable=PINNABLE)
    args.update(kwargs)
    return hs.record(probe_result, module, **args)


def test_a_checked_node_has_its_result_versions_group_and_pins():
    rec = record(probe(answer()))
    assert rec["reachable"] is True and rec["error"] is None and rec["source"] == "cli" and rec["slurm"] is None
    assert rec["result"] == RESULT
    # the group: the GPU model when the node is in none of health_sweep_groups; pins: only the pinnable keys
    assert rec["group"] == "NVIDIA H100 80GB HBM3"
    assert rec["expected"] == {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "ib_fw_version": "28.40.1000"}
    assert rec["versions"] == {
        "driver_version": "550.127.05",
        "cuda_version": "12.6",                      # the default CUDA, not the newest
        "nccl_version": "2.22.3",
        "ofed_version": "MLNX_OFED_LINUX-24.10-1.1.4.0",
        "vbios_versions": ["96.00.89.00.01"],        # blank and missing ones left out, each once
        "ib_fw_versions": ["28.39.1002", "28.40.1000"],
    }


def test_the_first_sweep_group_the_node_is_in_wins_and_without_any_there_is_none():
    assert record(probe(answer()), groups=["gpu_a100", "gpu_h100", "gpu_nodes"])["group"] == "gpu_h100"
    assert record(probe(answer()), health_check_expected={})["group"] is None


def test_cuda_without_a_default_is_the_last_and_the_driver_falls_back_to_the_stack():
    stack = {"driver": {"installed": "535.216.03", "loaded": None}, "cuda": [{"version": "11.8"}, {"version": "12.2"}]}
    rec = record(probe(answer(stack=stack, result=dict(RESULT, driver_version=None))))
    assert rec["versions"]["cuda_version"] == "12.2"
    assert rec["versions"]["driver_version"] == "535.216.03"
    assert record(probe(answer(stack=None)))["versions"]["cuda_version"] is None


def test_an_unreachable_node_is_unknown_with_the_connection_error():
    rec = record({"unreachable": True, "msg": "Failed to connect to the host via ssh: Connection refused"})
    assert rec["reachable"] is False and rec["result"] is None
    assert rec["error"] == "unreachable: Failed to connect to the host via ssh: Connection refused"
    # the module's unreachable result says the same
    rec = record(probe(answer(installed=False, result=None)), {"unreachable": True, "msg": "gone"})
    assert rec["reachable"] is False and rec["error"] == "unreachable: gone"


@pytest.mark.parametrize("bad", [
    {"rc": 127, "stdout": "", "stderr": "sh: 1: python3: not found\n"},
    {"rc": 0, "stdout": "Traceback (most recent call last):\n", "stderr": ""},
    {"rc": 0, "stdout": "{not json}", "stderr": ""},
    {"rc": 0, "stdout": "[1, 2]", "stderr": ""},
])
def test_a_probe_without_an_answer_gives_no_result_and_says_so(bad):
    assert hs.answer_of(bad) == {}
    rec = record(bad)
    assert rec["reachable"] is True and rec["result"] is None
    assert rec["error"].startswith("the sweep got no result: the probe printed no JSON (rc %d)" % bad["rc"])


def test_a_long_stderr_is_cut_at_a_word_as_jinja_truncate_does():
    rec = record({"rc": 1, "stdout": "", "stderr": "word " * 100})
    tail = rec["error"].split("): ", 1)[1]
    assert tail.endswith("...") and len(tail) <= 200 and not tail[:-3].endswith(" ")
    assert hs._truncate("x" * 205) == "x" * 205


def test_the_checkers_own_error_wins():
    rec = record(probe(answer(result=None, error="gpucluster-health exited 64 without a result: bad config")))
    assert rec["error"] == "gpucluster-health exited 64 without a result: bad config" and rec["result"] is None


def test_a_module_result_is_the_record_without_ansibles_keys_and_named_without_a_config():
    module = dict(RESULT, changed=False, failed=False, invocation={"module_args": {}}, warnings=[],
                  _ansible_no_log=False, node="gpu01.example")
    rec = record(probe(answer(installed=False, config_exists=False, result=None)), module, node_name="gpu01")
    assert rec["source"] == "module" and rec["error"] is None
    assert "invocation" not in rec["result"] and "_ansible_no_log" not in rec["result"]
    assert rec["result"]["node"] == "gpu01"     # no config on the node: the name a config would give
    rec = record(probe(answer(installed=False, result=None)), module, node_name="gpu01")
    assert rec["result"]["node"] == "gpu01.example"
    # a skipped module task is no module result; a failed one without a status is an error with its message
    assert record(probe(answer()), {"skipped": True, "skip_reason": "Conditional result was False"})["source"] == "cli"
    rec = record(probe(answer(installed=False, result=None)), {"failed": True, "msg": "no python3"})
    assert rec["error"] == "the sweep got no result: no python3" and rec["source"] == "module"


def test_a_replayed_bundle_is_marked_as_such():
    assert record(probe(answer()), replay=True)["source"] == "replay"


def test_the_module_is_needed_only_without_a_result_or_error():
    assert not hs.needs_module(answer())
    assert not hs.needs_module(answer(result=None, error="bad config"))
    assert hs.needs_module(answer(installed=False, result=None))
    assert hs.needs_module({})
    assert hs.needs_module(answer(result=None), method="module")
    assert hs.needs_module(answer(result=None), check_mode=True, level="standard")
    assert not hs.needs_module(answer(result=None), check_mode=True, level="quick")


# -- the sweep's variables ---------------------------------------------------------------------------------------

def test_good_variables_and_their_defaults_have_no_problem():
    assert hs.problems("gpu01", {}, PINNABLE) == []
    good = {"health_sweep_level": "deep", "health_sweep_drain": "yes", "health_sweep_max_out_of_service": " .5 ",
            "health_sweep_method": "module", "health_sweep_fanout": False, "health_sweep_expected": {"ofed_version": "x"},
            "health_sweep_groups": ["gpu_a100"], "health_sweep_from_dir": "/bundles/gpu01"}
    assert hs.problems("gpu01", good, PINNABLE, isdir=lambda path: path == "/bundles/gpu01") == []
    for share in (0, 1, 0.25, "1", "0.0"):
        assert hs.problems("gpu01", {"health_sweep_max_out_of_service": share}, PINNABLE) == [], share


@pytest.mark.parametrize("name, value, words", [
    ("health_sweep_level", "thorough", ['"thorough"', "quick, standard, deep"]),
    ("health_sweep_drain", "sometimes", ['"sometimes"', "true or false"]),
    ("health_sweep_max_out_of_service", True, ["true", "from 0 to 1"]),
    ("health_sweep_max_out_of_service", "1e-1", ['"1e-1"']),
    ("health_sweep_max_out_of_service", 1.01, ["1.01"]),
    ("health_sweep_method", "ssh", ['"ssh"', "auto", "module"]),
    ("health_sweep_fanout", "maybe", ['"maybe"', "true", "false"]),
    ("health_sweep_expected", {"bios_version": "1"}, ["bios_version", "driver_version"]),
    ("health_sweep_expected", ["driver_version"], ['["driver_version"]', "mapping"]),
    ("health_sweep_groups", "gpu_a100", ['"gpu_a100"', "list"]),
    ("health_sweep_groups", {"gpu_a100": 1}, ["gpu_a100", "list"]),
    ("health_sweep_from_dir", "/nonexistent/bundle", ['"/nonexistent/bundle"', "directory on this machine"]),
    ("health_sweep_from_dir", None, ["null", "directory"]),
])
def test_a_bad_variable_is_named_with_its_host_and_value(name, value, words):
    found = hs.problems("gpu07", {name: value}, PINNABLE, isdir=lambda path: False)
    assert len(found) == 1, found
    assert found[0].startswith("host gpu07: %s is " % name)
    for word in words:
        assert word in found[0], (word, found)


def test_every_bad_variable_of_a_host_is_named():
    found = hs.problems("gpu07", {"health_sweep_level": "x", "health_sweep_method": "y"}, PINNABLE)
    assert [f.split(" is ")[0] for f in found] == ["host gpu07: health_sweep_level", "host gpu07: health_sweep_method"]


# -- the fan-out's ssh ---------------------------------------------------------------------------------------------

OPTIONS = {"host": "10.1.2.3", "port": 2222, "remote_user": "sweeper", "private_key_file": "~/.ssh/fleet",
           "timeout": 7, "host_key_checking": True, "ssh_executable": "ssh",
           "ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s",
           "ssh_common_args": "-o ProxyJump=bastion -o 'UserKnownHostsFile=/etc/fleet known_hosts'",
           "ssh_extra_args": "-o LogLevel=ERROR"}


def test_the_ssh_command_is_the_hosts_without_a_master_left_behind():
    argv = ssh_argv(OPTIONS, "python3 -c 'print(1)'")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "10.1.2.3", "python3 -c 'print(1)'"]
    text = " ".join(argv)
    for option in ("BatchMode=yes", "Port=2222", 'User="sweeper"', "ConnectTimeout=7", "ProxyJump=bastion",
                   "UserKnownHostsFile=/etc/fleet known_hosts", "LogLevel=ERROR"):
        assert option in argv or option in text, option
    assert 'IdentityFile="' in text and "/.ssh/fleet" in text and "~" not in text
    # the first -o of a name wins in OpenSSH: ours before the configuration's ControlMaster=auto
    assert argv.index("ControlMaster=no") < argv.index("ControlMaster=auto")
    assert "StrictHostKeyChecking=no" not in argv
    assert "StrictHostKeyChecking=no" in ssh_argv(dict(OPTIONS, host_key_checking=False), "true")


def test_ssh_failing_to_connect_is_unreachable_and_a_command_that_runs_too_long_is_cut(tmp_path):
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\necho 'ssh: connect to host 10.1.2.3 port 22: Connection refused' >&2\nexit 255\n")
    fake.chmod(0o755)
    result, _seconds = run_probe([str(fake), "host", "true"], 5)
    assert result == {"unreachable": True, "msg": "Failed to connect to the host via ssh: ssh: connect to host "
                                                  "10.1.2.3 port 22: Connection refused"}
    result, _seconds = run_probe(["sh", "-c", "sleep 5"], 1)
    assert result["timed_out"] and result["rc"] == 124 and "past 1 s" in result["stderr"]
    result, _seconds = run_probe(["sh", "-c", "echo '{\"a\": 1}'; exit 3"], 5)
    assert result == {"rc": 3, "stdout": '{"a": 1}\n', "stderr": ""}
    result, _seconds = run_probe([str(tmp_path / "no-such-ssh")], 5)
    assert result["unreachable"] and "no-such-ssh" in result["msg"]


def test_the_remote_command_survives_the_shell():
    # what the action sends: python -c SCRIPT ARGS, each quoted for the remote shell
    script = "import sys, json; print(json.dumps(json.loads(sys.argv[1])))"
    args = {"cli": "/usr/local/lib/gpucluster-health/bin/gpucluster-health", "level": "quick", "x": "it's $HOME"}
    result, _seconds = run_probe(["sh", "-c", remote_command("python3", script, args)], 10)
    assert json.loads(result["stdout"]) == args
