"""role_state's main() through the module harness, on a temp directory: a check without a record, a record, the
converged check that gives the facts back, each way a record stops standing for the node (a file changed, the wanted
state changed, a record that cannot be read), a refused record removing the old one, check mode writing nothing, and
state=absent."""

import json
import os

from ansible_collections.gpucluster.ops.plugins.modules import role_state
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

WANTED = {"content": "c1", "inventory": "i1", "host": "h1"}


def args(tmp_path, **extra):
    return dict(dict(name="nccl", path=str(tmp_path / "state"), wanted=WANTED), **extra)


def setup_node(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\n")
    observe = [{"kind": "file", "path": str(conf)}, {"kind": "command", "argv": ["cat", str(conf)]},
               {"kind": "file", "path": str(conf)}]
    return conf, observe


def test_no_record_then_a_record_then_converged_with_the_facts(tmp_path):
    conf, observe = setup_node(tmp_path)
    first = run_module(role_state, args(tmp_path))
    assert first["converged"] is False and first["reason"].startswith("no record yet")
    recorded = run_module(role_state, args(tmp_path, state="record", observe=observe, facts={"__nccl_target": "2.22"},
                                           host_facts={"gpucluster_ib_ports": []}))
    assert recorded["recorded"] is True and recorded["changed"] is False and recorded["observed"] == 2
    record = json.loads((tmp_path / "state" / "nccl.json").read_text())
    assert record["wanted"] == WANTED and len(record["items"]) == 2      # the same observation once
    check = run_module(role_state, args(tmp_path))
    assert check["converged"] is True and check["reason"] == ""
    assert check["facts"] == {"__nccl_target": "2.22"} and check["host_facts"] == {"gpucluster_ib_ports": []}
    assert conf.read_text() == "NCCL_DEBUG=WARN\n"


def test_what_makes_the_role_run_in_full_again_and_drops_the_record(tmp_path):
    conf, observe = setup_node(tmp_path)
    path = tmp_path / "state" / "nccl.json"

    def recorded():
        run_module(role_state, args(tmp_path, state="record", observe=observe))
        assert path.exists()

    recorded()
    in_check = run_module(role_state, args(tmp_path, wanted=dict(WANTED, host="h2")), check=True)
    assert not in_check["converged"] and path.exists()            # check mode removes nothing
    other = run_module(role_state, args(tmp_path, wanted=dict(WANTED, host="h2")))
    assert not other["converged"] and other["reason"] == "the wanted state changed since the record: host"
    assert not path.exists()      # a full run that changes the node and fails must not leave it standing
    recorded()
    assert not run_module(role_state, args(tmp_path, wanted={}))["converged"]
    recorded()
    conf.write_text("NCCL_DEBUG=INFO\n")
    edited = run_module(role_state, args(tmp_path))
    assert not edited["converged"] and edited["reason"].startswith("command [\"cat\"")   # commands sort first
    conf.write_text("NCCL_DEBUG=WARN\n")
    recorded()
    os.unlink(conf)
    gone = run_module(role_state, args(tmp_path))
    assert not gone["converged"] and gone["reason"] and not path.exists()
    path.write_text("{")
    broken = run_module(role_state, args(tmp_path))
    assert not broken["converged"] and "cannot be read" in broken["reason"]


def test_a_refused_record_removes_the_old_one_and_check_mode_writes_nothing(tmp_path):
    _conf, observe = setup_node(tmp_path)
    path = tmp_path / "state" / "nccl.json"
    in_check = run_module(role_state, args(tmp_path, state="record", observe=observe), check=True)
    assert in_check["recorded"] is True and not path.exists()
    run_module(role_state, args(tmp_path, state="record", observe=observe))
    assert path.exists()
    kept = run_module(role_state, args(tmp_path, state="record", refuse="task 'x' changed"), check=True)
    assert kept["recorded"] is False and path.exists()
    refused = run_module(role_state, args(tmp_path, state="record", refuse="task 'x' changed"))
    assert refused["recorded"] is False and refused["reason"] == "task 'x' changed" and not path.exists()
    run_module(role_state, args(tmp_path, state="record", observe=observe))
    bad = run_module(role_state, args(tmp_path, state="record", observe=[{"kind": "command", "argv": ["rm", "-rf", "/x"]}]))
    assert bad["recorded"] is False and "read-only" in bad["reason"] and not path.exists()
    run_module(role_state, args(tmp_path, state="record", observe=observe))
    assert run_module(role_state, args(tmp_path, state="absent"), check=True) and path.exists()
    run_module(role_state, args(tmp_path, state="absent"))
    assert not path.exists()


def test_a_name_that_is_not_a_file_name_fails(tmp_path):
    result = run_module(role_state, args(tmp_path, name="../etc/passwd"))
    assert result["failed"] and "name" in result["msg"]
