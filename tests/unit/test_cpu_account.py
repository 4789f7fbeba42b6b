"""tests/support/cpu_account.py: the CPU of the shared cluster's test modules, as the time report reads it."""

import json

import cpu_account


def test_a_container_cgroup_is_read_in_v1_and_v2_and_none_when_absent(tmp_path, monkeypatch):
    (tmp_path / "v1-aaa").write_text("2500000000\n")
    (tmp_path / "v2-bbb").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    monkeypatch.setattr(cpu_account, "CGROUP_V1", str(tmp_path / "v1-{id}"))
    monkeypatch.setattr(cpu_account, "CGROUP_V2", str(tmp_path / "v2-{id}"))
    assert cpu_account.container_cpu_s("aaa") == 2.5
    assert cpu_account.container_cpu_s("bbb") == 1.5
    assert cpu_account.container_cpu_s("gone") is None
    (tmp_path / "v1-bad").write_text("not a number\n")
    assert cpu_account.container_cpu_s("bad") is None


def test_the_nodes_delta_is_unknown_when_a_counter_went_back_or_could_not_be_read():
    assert cpu_account.nodes_delta({"a": 1.0, "b": 2.0}, {"a": 4.0, "b": 2.5}) == 3.5
    assert cpu_account.nodes_delta({"a": 10.0}, {"a": 1.0}) is None      # restarted: its counter began again
    assert cpu_account.nodes_delta({"a": 1.0}, {"a": None}) is None      # stopped: no cgroup
    assert cpu_account.nodes_delta({"a": None}, {"a": 1.0}) is None
    assert cpu_account.nodes_delta({"a": 1.0}, {}) is None


def test_the_controller_cpu_counts_this_process_and_its_waited_children():
    import subprocess
    before = cpu_account.controller_cpu_s()
    subprocess.run(["python3", "-c", "sum(range(3 * 10 ** 6))"], check=True)
    assert cpu_account.controller_cpu_s() > before


def test_the_recorder_writes_the_session_and_one_line_per_module(tmp_path, monkeypatch):
    readings = iter([{"h1": 5.0, "h2": 7.0}, {"h1": 5.0, "h2": 7.0}, {"h1": 6.0, "h2": 9.5},
                     {"h1": 6.0, "h2": 9.5}, {"h1": 0.5, "h2": 9.5}])
    monkeypatch.setattr(cpu_account, "container_ids", lambda names: {n: "id-" + n for n in names})
    monkeypatch.setattr(cpu_account, "nodes_cpu_s", lambda ids: next(readings))
    path = tmp_path / "logs" / "cluster.cpu.jsonl"
    recorder = cpu_account.Recorder(str(path), ["h1", "h2"])
    recorder.start_session()
    started = recorder.span()
    first = recorder.end("test_one.py", started)
    started = recorder.span()
    second = recorder.end("test_two.py", started)     # h1 restarted during the module
    recorder.end_session()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["session"] == "start" and lines[0]["nodes_cpu_s"] == 12.0
    assert first["nodes_cpu_s"] == 3.5 and lines[1] == first
    assert second["nodes_cpu_s"] is None and lines[2]["module"] == "test_two.py"
    assert lines[3]["session"] == "end" and lines[3]["controller_cpu_s"] >= lines[0]["controller_cpu_s"]


def test_a_container_that_could_not_be_found_makes_every_nodes_figure_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_account, "container_ids", lambda names: {"h1": "id-h1"})
    monkeypatch.setattr(cpu_account, "nodes_cpu_s", lambda ids: {"h1": 1.0})
    recorder = cpu_account.Recorder(str(tmp_path / "c.jsonl"), ["h1", "h2"])
    recorder.start_session()
    assert recorder.end("test_one.py", recorder.span())["nodes_cpu_s"] is None
    assert json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["nodes_cpu_s"] is None
