"""bin/gpu-job as its users run it: a subprocess under python3 -I -S (as installed), with fake Slurm programs.

The fakes (sbatch, squeue, sacct, scancel, scontrol) on PATH record every call (argv and stdin) and answer from the
files of tests/unit/fixtures/gpu_job, so a test sees exactly what the command asked Slurm and what it submitted. Bad
input must give one line on stderr, exit 2 and call no Slurm program at all.
"""

import json
import os
import pwd
import re
import subprocess
import sys
import time

import fake_prometheus
import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_job
from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAM = os.path.join(ROOT, "bin", "gpu-job")
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "gpu_job")
USER = pwd.getpwuid(os.getuid()).pw_name

FAKE = r'''#!%(python)s
import json, os, sys
name = os.path.basename(sys.argv[0])
data = sys.stdin.read() if name == "sbatch" else None
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(json.dumps({"argv": [name] + sys.argv[1:], "stdin": data}) + "\n")
# FAKE_<NAME>_<WORD> answers calls with that word among their arguments (scontrol's job, squeue's --start), before
# FAKE_<NAME>.
answer = next((os.environ[key] for key in ["FAKE_%%s_%%s" %% (name.upper(), word.strip("-").upper())
                                           for word in sys.argv[1:]] if key in os.environ),
              os.environ.get("FAKE_" + name.upper()))
if answer and answer.startswith("rc="):
    code, _sep, message = answer[3:].partition(":")
    sys.stderr.write("%%s: error: %%s\n" %% (name, message or "refused"))
    sys.exit(int(code))
if answer:
    with open(answer) as handle:
        sys.stdout.write(handle.read())
'''


@pytest.fixture(name="env")
def _env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sreport", "sprio"):
        path = bindir / name
        path.write_text(FAKE % {"python": sys.executable})
        path.chmod(0o755)
    model = build({"training": {"gpu_hours": "60000/month", "max_concurrent": 64, "gpu_types": ["a100"],
                                "partitions": ["a100"], "members": [{"name": USER, "default": True}]},
                   "research": {"gpu_hours": "10/day", "max_concurrent": 16, "members": [USER]},
                   "other": {"members": ["someoneelse"]}}, gpu_types=["a100", "l40s"])
    cluster = {"nodes": dict([("dgx%02d" % i, {"a100": 8}) for i in range(1, 5)] + [("l40s01", {"l40s": 4})]),
               "partitions": {"a100": ["dgx%02d" % i for i in range(1, 5)], "l40s": ["l40s01"]}}
    config = _gpu_job.build_config(cluster, [{"name": "a100", "default": True, "max_time": "3-00:00:00"},
                                             {"name": "l40s", "max_time": "1-00:00:00"}],
                                   model["teams"], model["users"], datasets={"imagenet": "/data/imagenet"},
                                   topology=True, log_dir=str(tmp_path / "logs"), state_dir=str(tmp_path / "state"))
    (tmp_path / "gpu-job.json").write_text(json.dumps(config))
    (tmp_path / "sbatch.out").write_text("4242\n")
    return {"PATH": "%s:/usr/bin:/bin" % bindir, "GPU_JOB_CONFIG": str(tmp_path / "gpu-job.json"),
            "FAKE_SLURM_LOG": str(tmp_path / "calls.jsonl"), "FAKE_SBATCH": str(tmp_path / "sbatch.out"),
            "FAKE_SCONTROL": os.path.join(FIXTURES, "assoc_mgr_qos.txt"), "tmp": str(tmp_path)}


def _run(env, *args, cwd=None):
    environ = dict((k, v) for k, v in env.items() if k != "tmp")
    proc = subprocess.run([sys.executable, "-I", "-S", PROGRAM] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=environ, cwd=cwd or env["tmp"], timeout=60,
                          check=False)
    log = env["FAKE_SLURM_LOG"]
    calls = []
    if os.path.exists(log):
        with open(log) as handle:
            calls = [json.loads(line) for line in handle]
        os.unlink(log)
    return proc.returncode, proc.stdout, proc.stderr, calls


SUBMIT = ["submit", "--name", "my-training", "--image", "pytorch:2.4", "--command", "python train.py"]


def test_submit_sends_exactly_the_dry_run_script(env):
    rc, dry, err, calls = _run(env, *SUBMIT, "--gpus", "8", "--dataset", "imagenet", "--time", "4h", "--dry-run")
    assert (rc, err, calls) == (0, "", [])
    lines = dry.splitlines()
    assert lines[2:12] == ["#SBATCH --job-name=my-training", "#SBATCH --account=training", "#SBATCH --qos=training",
                           "#SBATCH --partition=a100", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
                           "#SBATCH --gpus-per-node=a100:8", "#SBATCH --time=04:00:00",
                           "#SBATCH --output=%s/logs/%%j.out" % env["tmp"], "#SBATCH --requeue"]
    assert " --volume /data/imagenet:/data/imagenet:ro " in lines[-1]
    assert lines[-1].endswith(" pytorch:2.4 sh -c 'python train.py'")
    rc, out, err, calls = _run(env, *SUBMIT, "--gpus", "8", "--dataset", "imagenet", "--time", "4h")
    assert rc == 0, err
    assert [c["argv"] for c in calls] == [
        ["scontrol", "-o", "show", "assoc_mgr", "flags=qos"], ["sbatch", "--parsable"]]
    assert calls[1]["stdin"] == dry
    assert out.startswith("submitted job 4242: 8 GPU(s) (1 node(s) x 8 a100) on partition a100 for team training")
    assert os.path.isdir(os.path.join(env["tmp"], "logs"))


def test_multi_node_jobs_take_whole_nodes_under_one_switch(env):
    rc, out, _err, _calls = _run(env, *SUBMIT, "--gpus", "16", "--team", "research", "--dry-run")
    assert rc == 0
    assert {"#SBATCH --nodes=2", "#SBATCH --gpus-per-node=a100:8", "#SBATCH --exclusive",
            "#SBATCH --switches=1@00:30:00", "#SBATCH --account=research"} <= set(out.splitlines())


@pytest.mark.parametrize("args,message", [
    (["--gpus", "0"], "gpu-job: --gpus is '0': give a whole number of GPUs, from 1 to 100000"),
    (["--gpus", "1000"], "gpu-job: --gpus is 1000: team training may use at most 64 GPUs at once"),
    (["--gpus", "lots"], "gpu-job: --gpus is 'lots'"),
    (["--gpus", "1", "--time", "forever"], "gpu-job: --time is 'forever': a job needs a time limit"),
    (["--gpus", "1", "--time", "30"], "gpu-job: --time is '30': a number in a string is a bare number"),
    (["--gpus", "1", "--time", "4d"], "gpu-job: --time is 4-00:00:00: partition a100 allows at most 3-00:00:00"),
    (["--gpus", "1", "--image", "pytorch:2.4; rm -rf ~"], "gpu-job: --image is 'pytorch:2.4; rm -rf ~'"),
    (["--gpus", "1", "--image", "$(curl x)"], "gpu-job: --image is '$(curl x)'"),
    (["--gpus", "1", "--name", "a b"], "gpu-job: --name is 'a b'"),
    (["--gpus", "1", "--command", " "], "gpu-job: --command is ' '"),
    (["--gpus", "1", "--team", "nope"], "gpu-job: --team is 'nope': no such team (teams: other, research, training)"),
    (["--gpus", "1", "--team", "other"], "gpu-job: --team is 'other': user %s is not a member of team other" % USER),
    (["--gpus", "1", "--dataset", "imagenett"], "gpu-job: --dataset is 'imagenett': no such dataset (did you mean "
                                                "'imagenet'?)"),
    (["--gpus", "1", "--gpu-type", "h100"], "gpu-job: --gpu-type is 'h100': no such GPU type on this cluster"),
    (["--gpus", "12"], "gpu-job: no node type can run 12 GPUs for team training"),
    (["--gpus", "8", "--nodes", "0"], "gpu-job: --nodes is '0'"),
    (["--gpus", "40", "--team", "research", "--gpu-type", "a100"], "gpu-job: --gpus is 40: team research may use"),
    (["--gpus", "1", "--bogus"], "gpu-job: unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_submitted(env, args, message):
    base = list(SUBMIT)
    for flag in ("--image", "--name", "--command"):
        if flag in args:
            index = base.index(flag)
            del base[index:index + 2]
    rc, out, err, calls = _run(env, *(base + args))
    assert (rc, out, calls) == (2, "", [])
    assert len(err.splitlines()) == 1 and err.startswith(message), err


def test_missing_arguments_and_configs_are_one_line_exit_2(env, tmp_path):
    rc, _out, err, calls = _run(env)
    assert (rc, calls) == (2, [])
    assert err == ("gpu-job: give a subcommand: submit, status, logs, cancel, quota, queue, why, usage, reserve, "
                   "reservations or cancel-booking (see gpu-job --help)\n")
    rc, _out, err, calls = _run(env, "submit", "--gpus", "1")
    assert (rc, calls, len(err.splitlines())) == (2, [], 1)
    assert "the following arguments are required: --name, --image, --command" in err
    rc, _out, err, calls = _run(dict(env, GPU_JOB_CONFIG=str(tmp_path / "none.json")), *SUBMIT, "--gpus", "1")
    assert (rc, calls) == (2, [])
    assert err == "gpu-job: cannot read the config %s: No such file or directory (is the user_tools role applied " \
                  "here?)\n" % (tmp_path / "none.json")
    (tmp_path / "old.json").write_text(json.dumps({"version": 1, "runtime": {"name": "none"}, "partitions": [],
                                                   "teams": [], "users": {}, "datasets": {}, "default_time_s": 1,
                                                   "log_dir": "/tmp"}))
    rc, _out, err, calls = _run(dict(env, GPU_JOB_CONFIG=str(tmp_path / "old.json")), *SUBMIT, "--gpus", "1")
    assert (rc, calls) == (2, [])
    assert "gpu job never runs" not in err and "gpu-job never runs a job outside a container" in err


def test_a_directory_podman_cannot_mount_is_refused(env, tmp_path):
    odd = tmp_path / "run:1"
    odd.mkdir()
    rc, out, err, calls = _run(env, *SUBMIT, "--gpus", "1", "--dry-run", cwd=str(odd))
    assert (rc, out, calls) == (2, "", [])
    assert err == "gpu-job: the current directory %r has ':', ',' or a line break in its path, which podman cannot " \
                  "mount: run gpu-job from another directory\n" % str(odd)


def test_an_exhausted_budget_is_refused_with_when_it_resets(env):
    rc, out, err, calls = _run(env, *SUBMIT, "--gpus", "4", "--team", "research")
    assert (rc, out) == (2, "")
    assert [c["argv"][0] for c in calls] == ["scontrol"]
    assert err.startswith("gpu-job: team research has used its GPU-hour budget (10.0 of 10 GPU-hours this day); it "
                          "resets ") and len(err.splitlines()) == 1


def test_sbatch_refusing_is_exit_1(env):
    rc, _out, err, calls = _run(dict(env, FAKE_SBATCH="rc=1"), *SUBMIT, "--gpus", "8")
    assert rc == 1 and [c["argv"][0] for c in calls] == ["scontrol", "sbatch"]
    assert err == "gpu-job: sbatch --parsable failed (rc 1): sbatch: error: refused\n"


def test_quota_reads_the_qos_counters_as_team_usage_does(env):
    rc, out, err, calls = _run(env, "quota")
    assert (rc, err) == (0, "")
    assert [c["argv"] for c in calls] == [["scontrol", "-o", "show", "assoc_mgr", "flags=qos"]]
    lines = out.splitlines()
    assert lines[0].split() == ["team", "period", "budget", "GPU-h", "used", "GPU-h", "used", "%", "left", "GPU-h",
                                "GPUs", "now"]
    assert lines[2].split() == ["research", "day", "10", "10.0", "100.0%", "0.0", "0/16"]
    assert lines[3].split() == ["training", "month", "60000", "25.0", "0.0%", "59975.0", "16/64"]
    assert lines[4].startswith("team research: the budget resets ")
    assert lines[5].startswith("team training: the budget resets ") and lines[5].endswith("-01 00:00")


def _priced(env, prices):
    path = os.path.join(env["tmp"], "gpu-job.json")
    with open(path) as handle:
        config = json.load(handle)
    config.update({"prices": prices, "currency": "EUR", "gpu_types": ["a100", "l40s"]})
    with open(path, "w") as handle:
        json.dump(config, handle)
    return dict(env, FAKE_SREPORT=os.path.join(FIXTURES, "sreport_tres.txt"))


def test_quota_cost_is_gpu_hours_times_price_per_type(env):
    env = _priced(env, {"a100": 2.5, "l40s": 1.0})
    rc, out, err, calls = _run(env, "quota")
    assert (rc, err) == (0, "")
    sreports = [c["argv"] for c in calls if c["argv"][0] == "sreport"]
    assert len(sreports) == 2 and all("gres/gpu,gres/gpu:a100,gres/gpu:l40s" in a for a in sreports)
    lines = out.splitlines()
    assert lines[0].split()[-4:] == ["GPU-h", "since", "cost", "EUR"]
    assert lines[2].split() == ["research", "day", "10", "10.0", "100.0%", "0.0", "0/16", "10.0", "19.00"]  # 6x2.5+4x1
    assert lines[3].split() == ["training", "month", "60000", "25.0", "0.0%", "59975.0", "16/64", "20.0", "50.00"]
    rc, out, err, _calls = _run(env, "quota", "--format", "json")
    data = json.loads(out)
    costs = dict((t["team"], (t["accounted_gpu_hours"], t["gpu_hours_by_type"], t["cost"])) for t in data["teams"])
    assert costs == {"research": (10.0, {"a100": 6.0, "l40s": 4.0}, 19.0), "training": (20.0, {"a100": 20.0}, 50.0)}
    rc, out, err, _calls = _run(env, "quota", "--format", "csv")
    rows = out.splitlines()
    assert rows[0].startswith("team,period,since,budget_gpu_hours,used_gpu_hours")
    assert rows[1].startswith("research,day,") and ",10.0,19.0,EUR,True," in rows[1]


def test_quota_cost_without_a_price_for_a_used_type_is_unknown(env):
    env = _priced(env, {"a100": 2.5})
    rc, out, err, _calls = _run(env, "quota", "--format", "json")
    assert (rc, err) == (0, "")
    teams = dict((t["team"], t) for t in json.loads(out)["teams"])
    assert teams["research"]["cost"] is None and "no price for GPU type l40s" in teams["research"]["cost_unknown_because"]
    assert teams["training"]["cost"] == 50.0
    rc, out, _err, _calls = _run(env, "quota")
    assert "  research: cost unknown (no price for GPU type l40s)" in out.splitlines()
    assert out.splitlines()[2].split()[-1] == "-"


def test_quota_with_sreport_failing_fails_and_prints_no_cost(env):
    env = dict(_priced(env, {"a100": 2.5, "l40s": 1.0}), FAKE_SREPORT="rc=1:Problem talking to the database")
    rc, out, err, _calls = _run(env, "quota")
    assert rc == 1 and "sreport" in err and "Problem talking to the database" in err and "cost" not in out


def test_quota_bad_format_is_a_usage_error(env):
    rc, _out, err, calls = _run(env, "quota", "--format", "xml")
    assert rc == 2 and "invalid choice: 'xml'" in err and calls == []


def test_queue_says_why_in_plain_words(env):
    rc, out, _err, calls = _run(dict(env, FAKE_SQUEUE=os.path.join(FIXTURES, "squeue_pending.txt")), "queue")
    assert rc == 0
    assert calls[0]["argv"] == ["squeue", "-h", "-u", USER, "-t", "PENDING", "-o", "%i|%j|%T|%M|%l|%D|%b|%P|%a|%r"]
    assert out.splitlines() == [
        "4101  big-train  waits: your team's GPU limit is in use: it starts when the team's other jobs free GPUs "
        "[QOSGrpGRES]",
        "4102  sweep  waits: other jobs come first (higher priority); it starts when its turn comes [Priority]",
        "4103  odd  waits: Slurm says 'SomethingNew' (see 'man squeue', JOB REASON CODES) [SomethingNew]"]
    rc, out, _err, _calls = _run(env, "queue")
    assert (rc, out) == (0, "no pending jobs of yours\n")


def test_status_cancel_and_logs(env):
    rc, out, _err, calls = _run(dict(env, FAKE_SQUEUE=os.path.join(FIXTURES, "squeue_mine.txt")), "status")
    assert rc == 0 and calls[0]["argv"][:4] == ["squeue", "-h", "-u", USER]
    assert calls[1]["argv"][:7] == ["sacct", "-n", "-P", "-X", "-u", USER, "-S"]
    assert out.splitlines()[-1] == "none of your jobs ended in the last 24 hours"
    assert out.splitlines()[1].endswith("PENDING  elapsed 0:00 of 4:00:00  2 node(s)  gres/gpu:a100:8  a100  "
                                        "(your team's GPU limit is in use: it starts when the team's other jobs "
                                        "free GPUs)")
    rc, out, err, calls = _run(env, "status", "4242")
    assert (rc, [c["argv"][0] for c in calls]) == (2, ["squeue", "sacct"])
    assert err == "gpu-job: job 4242: Slurm knows no such job\n"
    sacct = os.path.join(env["tmp"], "sacct.out")
    with open(sacct, "w") as handle:
        handle.write("4242|my-training|COMPLETED|01:00:03|0:0|dgx01|2026-12-05T10:00:00\n")
    gone = dict(env, FAKE_SQUEUE="rc=1:slurm_load_jobs error: Invalid job id specified", FAKE_SACCT=sacct)
    rc, out, err, calls = _run(gone, "status", "4242")
    assert (rc, out.splitlines()[0]) == (0, "4242  my-training  COMPLETED  elapsed 01:00:03  exit 0:0"), err
    assert out.splitlines()[1] == ("  log %s/logs/4242.out on dgx01 (the log directory is not shared with this login "
                                   "node)" % env["tmp"])
    assert calls[1]["argv"] == ["sacct", "-n", "-P", "-X", "-j", "4242", "-o",
                                "JobID,JobName,State,Elapsed,ExitCode,NodeList,End"]
    down = dict(env, FAKE_SQUEUE="rc=1:slurm_load_jobs error: Unable to contact slurm controller")
    rc, out, err, calls = _run(down, "status", "4242")
    assert (rc, out, len(calls)) == (1, "", 1)
    assert err.startswith("gpu-job: squeue -h -j failed (rc 1): squeue: error: slurm_load_jobs error: Unable to")
    for bad in (["cancel", "42;reboot"], ["logs", "../x"], ["status", "-1"]):
        rc, out, err, calls = _run(env, *bad)
        assert (rc, calls, len(err.splitlines())) == (2, [], 1), bad
    os.makedirs(os.path.join(env["tmp"], "logs"))
    with open(os.path.join(env["tmp"], "logs", "4242.out"), "w") as handle:
        handle.write("epoch 1\n")
    rc, out, _err, calls = _run(env, "logs", "4242")
    assert (rc, out, calls) == (0, "epoch 1\n", [])
    rc, out, _err, calls = _run(env, "logs", "-f", "4242")        # the job is no longer queued: follow ends
    assert (rc, out, [c["argv"][0] for c in calls]) == (0, "epoch 1\n", ["squeue"])
    rc, _out, err, _calls = _run(env, "logs", "4243")
    assert rc == 2 and err.startswith("gpu-job: job 4243: Slurm knows no such job, and there is no log at ")


def _answer(env, name, text):
    """A file the fake Slurm program ``name`` prints."""
    path = os.path.join(env["tmp"], "%s-%d.out" % (name, abs(hash(text))))
    with open(path, "w") as handle:
        handle.write(text)
    return path


RUNNING = "4242|my-training|RUNNING|1:00|4:00:00|1|gres/gpu:a100:2|a100|training|None\n"


def test_cancel_tells_a_cancelled_job_from_an_ended_and_an_unknown_one(env):
    # a queued job: cancelled, exit 0, saying what it was
    rc, out, err, calls = _run(dict(env, FAKE_SQUEUE=_answer(env, "squeue", RUNNING)), "cancel", "4242")
    assert (rc, out, err) == (0, "cancelled job 4242 (it was RUNNING)\n", "")
    assert [c["argv"][0] for c in calls] == ["squeue", "scancel"] and calls[1]["argv"] == ["scancel", "4242"]
    # one that already ended (here: cancelled before): nothing to cancel, exit 1, no scancel
    ended = _answer(env, "sacct", "4242|my-training|CANCELLED by 1000|00:01:00|0:15|dgx01|2026-12-05T10:00:00\n")
    rc, out, err, calls = _run(dict(env, FAKE_SACCT=ended), "cancel", "4242")
    assert (rc, out) == (1, "")
    assert err == "gpu-job: job 4242 had already ended (CANCELLED); nothing was cancelled\n"
    assert [c["argv"][0] for c in calls] == ["squeue", "sacct"]
    # one Slurm does not know (never existed, or another user's under PrivateData): exit 2, no scancel
    rc, out, err, calls = _run(env, "cancel", "999")
    assert (rc, out) == (2, "")
    assert err == "gpu-job: job 999: Slurm knows no such job; nothing was cancelled\n"
    assert [c["argv"][0] for c in calls] == ["squeue", "sacct"]
    # a job that is already completing is not cancelled again
    completing = _answer(env, "squeue", RUNNING.replace("RUNNING", "COMPLETING"))
    rc, _out, err, calls = _run(dict(env, FAKE_SQUEUE=completing), "cancel", "4242")
    assert rc == 1 and "already ending (COMPLETING)" in err and "scancel" not in [c["argv"][0] for c in calls]


def test_logs_says_where_the_log_is_when_this_node_has_none(env):
    path = "%s/logs/4242.out" % env["tmp"]
    pending = dict(env, FAKE_SQUEUE=_answer(env, "squeue", "PENDING|\n"))
    rc, _out, err, calls = _run(pending, "logs", "4242")
    assert (rc, err) == (1, "gpu-job: job 4242 has not started yet; its log will be %s\n" % path)
    assert calls[0]["argv"] == ["squeue", "-h", "-j", "4242", "-o", "%T|%N"]
    running = dict(env, FAKE_SQUEUE=_answer(env, "squeue", "RUNNING|dgx02\n"))
    rc, _out, err, _calls = _run(running, "logs", "4242")
    assert rc == 1 and err == ("gpu-job: job 4242 is RUNNING on dgx02; its log is %s on that node (the log directory "
                               "is not shared with this login node)\n" % path)
    ended = _answer(env, "sacct", "4242|my-training|FAILED|00:10:00|1:0|dgx03|2026-12-05T10:00:00\n")
    rc, _out, err, _calls = _run(dict(env, FAKE_SACCT=ended), "logs", "4242")
    assert rc == 1 and err == ("gpu-job: job 4242 failed (FAILED); log %s on dgx03 (the log directory is not shared "
                               "with this login node)\n" % path)
    rc, _out, err, _calls = _run(env, "logs", "4242")
    assert rc == 2 and err == "gpu-job: job 4242: Slurm knows no such job, and there is no log at %s\n" % path
    down = dict(env, FAKE_SQUEUE="rc=1:slurm_load_jobs error: Unable to contact slurm controller")
    rc, _out, err, _calls = _run(down, "logs", "4242")
    assert rc == 1 and err.startswith("gpu-job: job 4242: no log at %s, and Slurm could not say where" % path)


def test_status_lists_the_jobs_that_ended_with_how_and_where_their_log_is(env):
    os.makedirs(os.path.join(env["tmp"], "logs"))
    with open(os.path.join(env["tmp"], "logs", "4240.out"), "w") as handle:
        handle.write("done\n")
    ended = _answer(env, "sacct", "4240|prep|COMPLETED|00:01:00|0:0|dgx01|2026-12-05T09:00:00\n"
                                  "4241|train|FAILED|00:10:00|3:0|dgx02|2026-12-05T10:00:00\n"
                                  "4242|sweep|RUNNING|00:05:00|0:0|dgx03|Unknown\n"
                                  "4243|big|OUT_OF_MEMORY|00:02:00|0:125|dgx04|2026-12-05T10:05:00\n")
    rc, out, _err, calls = _run(dict(env, FAKE_SACCT=ended), "status")
    assert rc == 0
    since = calls[1]["argv"][calls[1]["argv"].index("-S") + 1]
    assert calls[1]["argv"][-4:] == ["-E", "now", "-o", "JobID,JobName,State,Elapsed,ExitCode,NodeList,End"], calls
    assert len(since) == 19 and since[10] == "T", since
    logs = "%s/logs" % env["tmp"]
    assert out.splitlines() == [
        "no jobs of yours in the queue",
        "ended in the last 24 hours (newest last):",
        "4240  prep  COMPLETED  completed, ended 2026-12-05T09:00:00, elapsed 00:01:00  log %s/4240.out" % logs,
        "4241  train  FAILED  failed (exit code 3), ended 2026-12-05T10:00:00, elapsed 00:10:00  log %s/4241.out on "
        "dgx02 (the log directory is not shared with this login node)" % logs,
        "4243  big  OUT_OF_MEMORY  ran out of memory, ended 2026-12-05T10:05:00, elapsed 00:02:00  log %s/4243.out on "
        "dgx04 (the log directory is not shared with this login node)" % logs]


RESERVATION = ("ReservationName=book-training-alice-1 StartTime=2026-12-05T09:00:00 EndTime=2026-12-05T11:00:00 "
               "Duration=02:00:00 Nodes=dgx01 NodeCnt=1 CoreCnt=128 Features=(null) PartitionName=(null) Flags= "
               "TRES=cpu=128 Users=(null) Groups=(null) Accounts=training Licenses=(null) State=ACTIVE "
               "BurstBuffer=(null) MaxStartDelay=(null)\n")


def test_a_reservation_slurm_does_not_have_is_refused_before_the_dry_run(env):
    missing = dict(env, FAKE_SCONTROL="rc=1:Reservation nope not found")
    rc, out, err, calls = _run(missing, *(SUBMIT + ["--gpus", "2", "--reservation", "nope", "--dry-run"]))
    assert (rc, out) == (2, "")
    assert err == ("gpu-job: --reservation is 'nope': Slurm has no such reservation (gpu-job reservations lists "
                   "them)\n")
    assert [c["argv"] for c in calls] == [["scontrol", "show", "reservation", "nope", "-o"]]
    there = dict(env, FAKE_SCONTROL=_answer(env, "scontrol", RESERVATION))
    rc, out, err, calls = _run(there, *(SUBMIT + ["--gpus", "2", "--reservation", "book-training-alice-1",
                                                  "--dry-run"]))
    assert rc == 0, err
    assert "#SBATCH --reservation=book-training-alice-1\n" in out
    assert [c["argv"][0] for c in calls] == ["scontrol"]


def test_status_says_so_where_slurm_keeps_no_accounting_and_fails_when_sacct_does(env):
    disabled = dict(env, FAKE_SACCT="rc=1:Slurm accounting storage is disabled")
    rc, out, _err, _calls = _run(disabled, "status")
    assert (rc, out.splitlines()[-1]) == (0, "the jobs that ended: this cluster keeps no job accounting (no slurmdbd)")
    down = dict(env, FAKE_SACCT="rc=1:Problem talking to the database: Connection refused")
    rc, out, err, _calls = _run(down, "status")
    assert rc == 1 and out == "no jobs of yours in the queue\n" and "Problem talking to the database" in err


HELD_JOB = ("JobId=4301 JobName=big-train UserId=%s(1000) GroupId=x(1000) Priority=7000 Account=research QOS=research "
            "JobState=PENDING Reason=QOSGrpGRES Dependency=(null) Partition=a100 Reservation=(null) "
            "ReqTRES=cpu=2,mem=64G,node=2,billing=2,gres/gpu=16 Command=/bin/sh -c 'a b' WorkDir=/home/x\n" % USER)
HELD_QOS = ("QOS=research(3) UsageRaw=10.0 GrpJobs=N(1) GrpTRES=cpu=N(2),gres/gpu=16(16),gres/gpu:a100=N(16) "
            "GrpTRESMins=cpu=N(0),gres/gpu=600(200) GrpTRESRunMins=cpu=N(0),gres/gpu=N(900)\n")


def _why_env(env, **answers):
    answers.setdefault("FAKE_SCONTROL_JOB", HELD_JOB)
    answers.setdefault("FAKE_SCONTROL", HELD_QOS)
    answers.setdefault("FAKE_SPRIO", "7000|0|2000|0|0|5000|0\n")
    answers.setdefault("FAKE_SQUEUE", "4300|9000\n4301|7000\n4302|7000\n4299|100\n")
    answers.setdefault("FAKE_SQUEUE_START", "2026-12-08T10:00:00\n")
    return dict(env, **{key: value if value.startswith("rc=") else _answer(env, key, value)
                        for key, value in answers.items()})


def test_why_names_the_binding_limit_priority_place_and_start(env):
    """Issue 52: a job held by its team's GPU limit: the QOS counter with its numbers, sprio's factors, its place
    among the pending jobs the user sees in its partition, and squeue --start's estimate."""
    rc, out, err, calls = _run(_why_env(env), "why", "4301")
    assert (rc, err) == (0, ""), out + err
    assert out.splitlines() == [
        "job 4301 (big-train) waits in partition a100 for team research",
        "why:      your team's GPU limit is in use: it starts when the team's other jobs free GPUs [QOSGrpGRES]",
        "limit:    QOS research GrpTRES gres/gpu=16 (the team's GPUs at once): 16 in use, this job asks for 16",
        "priority: 7000 (QOS 5000, fair-share 2000, age 0, job size 0, partition 0)",
        "place:    2 of the 4 pending jobs you can see in partition a100 (PrivateData may hide others' jobs)",
        "start:    Slurm expects it to start at 2026-12-08T10:00:00 (an estimate: jobs that end early move it "
        "forward)"]
    assert [c["argv"] for c in calls] == [
        ["scontrol", "-o", "show", "job", "4301"],
        ["scontrol", "-o", "show", "assoc_mgr", "flags=qos", "qos=research"],
        ["sprio", "-h", "-j", "4301", "-o", "%Y|%A|%F|%J|%P|%Q|%N"],
        ["squeue", "-h", "-r", "-t", "PENDING", "-p", "a100", "-o", "%i|%Q"],
        ["squeue", "-h", "--start", "-j", "4301", "-o", "%S"]]


def test_why_of_a_budget_reason_names_the_gpu_minutes_and_a_reservation(env):
    job = HELD_JOB.replace("QOSGrpGRES", "QOSGrpGRESMinutes").replace("Reservation=(null)", "Reservation=maint")
    rc, out, _err, _calls = _run(_why_env(env, FAKE_SCONTROL_JOB=job, FAKE_SQUEUE_START="N/A\n"), "why", "4301")
    assert rc == 0
    assert ("limit:    QOS research GrpTRESMins gres/gpu=600 (the team's GPU-minutes since the last reset): 200 used"
            in out.splitlines()), out
    assert "booking:  it will run in reservation maint" in out.splitlines()
    assert out.splitlines()[-1].startswith("start:    Slurm has no estimate yet")


def test_why_says_unknown_and_fails_where_slurm_does_not_answer(env):
    # QOSGrpTRES names no TRES: the counters must show one whose use and the request pass its limit
    rc, out, err, _calls = _run(_why_env(env, FAKE_SPRIO="rc=1:Unable to contact slurm controller",
                                         FAKE_SCONTROL_JOB=HELD_JOB.replace("QOSGrpGRES", "QOSGrpTRES"),
                                         FAKE_SCONTROL=HELD_QOS.replace("16(16)", "16(0)")), "why", "4301")
    assert rc == 1
    assert "priority: unknown (sprio -h -j failed (rc 1): sprio: error: Unable to contact slurm controller)" in out
    assert "limit:    unknown (QOS research's counters show no limit reached; Slurm may have freed it since)" in out
    assert "gpu-job: 2 part(s) of the answer are unknown" in err


def test_why_of_a_running_an_unknown_and_a_bad_job_id(env):
    running = HELD_JOB.replace("JobState=PENDING Reason=QOSGrpGRES", "JobState=RUNNING Reason=None") + ""
    running = running.replace("Partition=a100", "Partition=a100 NodeList=dgx[01-02]")
    rc, out, _err, calls = _run(_why_env(env, FAKE_SCONTROL_JOB=running), "why", "4301")
    assert (rc, out) == (0, "job 4301 (big-train) is RUNNING on dgx[01-02]: it is not waiting\n")
    assert len(calls) == 1
    rc, out, err, _calls = _run(_why_env(env, FAKE_SCONTROL_JOB="rc=1:Invalid job id specified"), "why", "4301")
    assert (rc, out) == (2, "") and "Slurm knows no such job of yours" in err
    rc, _out, err, calls = _run(env, "why", "42;rm")
    assert rc == 2 and calls == []


USAGE_SACCT = ("4401|training|billing=8,cpu=8,gres/gpu:a100=8,gres/gpu=8,mem=64G,node=1|2026-12-01T10:00:00|"
               "2026-12-01T11:30:00\n"
               "4402|research|cpu=4,gres/gpu=4,gres/gpu:l40s=4,node=1|2026-12-02T00:00:00|Unknown\n"
               "4403|research|cpu=1,mem=1G,node=1|2026-12-02T00:00:00|2026-12-02T05:00:00\n"
               "4404|training|cpu=1,gres/gpu=2,gres/gpu:a100=2,node=1|None|Unknown\n")


def test_usage_sums_the_users_own_gpu_hours_from_sacct_per_team_with_cost(env):
    """Issue 52: gpu-job usage: the user's own GPU-hours this month from sacct's allocations (AllocTRES x the time in
    the month, a running job up to now), per team and GPU type, priced as quota prices them."""
    env = _priced(dict(env, FAKE_SACCT=_answer(env, "sacct", USAGE_SACCT)), {"a100": 2.0, "l40s": 1.0})
    rc, out, err, calls = _run(env, "usage", "--since", "2026-12-01")
    assert (rc, err) == (0, ""), err
    argv = calls[0]["argv"]
    assert argv[:6] == ["sacct", "-n", "-P", "-X", "-u", USER]
    assert argv[6:8] == ["-S", "2026-12-01T00:00:00"] and argv[-2:] == ["-o", "JobID,Account,AllocTRES,Start,End"]
    lines = out.splitlines()
    assert lines[0].startswith("GPU-hours of %s from 2026-12-01 00:00 to " % USER)
    # 4402 runs on: 4 GPUs since 2026-12-02 00:00, so its hours grow with the clock; 4403 used no GPU
    research = re.match(r"^research +([0-9.]+) GPU-hours \(l40s ([0-9.]+)\)  cost ([0-9.]+) EUR$", lines[1])
    assert research and float(research.group(1)) == float(research.group(2)) > 4 * 24, lines
    assert float(research.group(3)) == pytest.approx(float(research.group(1)) * 1.0, abs=0.01)
    assert lines[2].split() == ["training", "12.00", "GPU-hours", "(a100", "12.00)", "cost", "24.00", "EUR"]
    rc, _out, err, calls = _run(env, "usage", "--since", "yesterday")
    assert rc == 2 and "--since is 'yesterday'" in err and calls == []


def test_why_of_an_array_task_and_a_held_job(env):
    """An array task is named 123_4 by its user and squeue -r; sprio and squeue --start take its own JobId. A held
    job (Priority 0) has no sprio factors, which is no failure."""
    task = HELD_JOB.replace("JobId=4301", "JobId=4310 ArrayJobId=4305 ArrayTaskId=4")
    rc, out, err, calls = _run(_why_env(env, FAKE_SCONTROL_JOB=task, FAKE_SQUEUE="4305_4|7000\n4300+0|9000\n"),
                               "why", "4305_4")
    assert (rc, err) == (0, ""), out + err
    assert "place:    2 of the 2 pending jobs you can see in partition a100 (PrivateData may hide others' jobs)" in out
    assert [c["argv"][3] for c in calls if c["argv"][0] == "sprio"] == ["4310"]
    assert [c["argv"][4] for c in calls if c["argv"][:3] == ["squeue", "-h", "--start"]] == ["4310"]
    held = HELD_JOB.replace("Priority=7000", "Priority=0").replace("QOSGrpGRES", "JobHeldUser")
    rc, out, err, calls = _run(_why_env(env, FAKE_SCONTROL_JOB=held, FAKE_SPRIO="\n"), "why", "4301")
    assert (rc, err) == (0, ""), out + err
    assert "priority: 0 (held: it does not start until it is released)" in out.splitlines()
    assert "sprio" not in [c["argv"][0] for c in calls]
    eligible_later = HELD_JOB.replace("QOSGrpGRES", "BeginTime")
    rc, out, err, _calls = _run(_why_env(env, FAKE_SCONTROL_JOB=eligible_later, FAKE_SPRIO="\n"), "why", "4301")
    assert (rc, err) == (0, "") and "priority: 7000 (sprio gives no factors for it" in out, out + err


class _FakePrometheus(object):
    """Prometheus's /api/v1/query for gpu-job usage --team: research's 2 GPUs busy, one idle job of training."""
    seen = []

    @classmethod
    def answer(cls, _path, params):
        query = params["query"][0]
        cls.seen.append(query)
        result = []
        if "account_gpus_allocated" in query or "account_gpus_busy" in query:
            result = [{"metric": {"account": "research"}, "value": [0, "120"]}]
        if "account_gpus_allocated" in query or "account_gpus_idle" in query:
            result.append({"metric": {"account": "training"}, "value": [0, "480"]})
        if "gpucluster:job_gpus" in query:
            result = [{"metric": {"jobid": "4501", "account": "training", "user": USER}, "value": [0, "480"]}]
        if query.startswith("count_over_time("):
            result = [{"metric": {}, "value": [0, "60"]}]
        if "slurm_job_gpus_unmapped" in query:
            result = []
        if query == "min(prometheus_tsdb_lowest_timestamp_seconds)":
            result = [{"metric": {}, "value": [0, "%d" % (time.time() - 3600)]}]
        return 200, fake_prometheus.vector(result)


def test_usage_team_reports_how_busy_the_users_teams_gpus_were_from_prometheus(env):
    """Issue 53: gpu-job usage --team: per team of the user GPU-hours held, busy and idle, and the most idle jobs,
    from Prometheus's recorded series (the same model as playbooks/team_usage.yml); only the user's own teams."""
    with open(env["GPU_JOB_CONFIG"]) as handle:
        config = json.load(handle)
    rc, _out, err, _calls = _run(env, "usage", "--team")
    assert rc == 1 and "has no Prometheus to ask (the admins set user_tools_prometheus_url)" in err
    with fake_prometheus.serving(_FakePrometheus.answer) as url:
        config["gpu_use"] = {"prometheus_url": url, "step_s": 60, "busy_util_pct": 10, "top": 5}
        with open(env["GPU_JOB_CONFIG"], "w") as handle:
            json.dump(config, handle)
        _FakePrometheus.seen = []
        rc, out, err, calls = _run(env, "usage", "--team", "--since", "2026-12-01T10:00")
        assert (rc, err, calls) == (0, "", []), err
        assert all('account=~`research|training`' in q for q in _FakePrometheus.seen if "account" in q), \
            _FakePrometheus.seen
        # the most idle jobs asked for are the user's own (PrivateData may hide teammates' jobs)
        assert all("user=`%s`" % USER in q for q in _FakePrometheus.seen if "gpucluster:job_gpus" in q)
        assert "min(prometheus_tsdb_lowest_timestamp_seconds)" not in _FakePrometheus.seen
        lines = out.splitlines()
        assert lines[0].startswith("GPUs held by Slurm jobs from 2026-12-01 10:00:00 to ")
        assert lines[3].split() == ["research", "2.00", "2.00", "0.00", "0.0", "0.00"]
        assert lines[4].split() == ["training", "8.00", "0.00", "8.00", "100.0", "0.00"]
        assert "  job 4501 of %s (training): 8.00 idle of 8.00 GPU-hours held" % USER in lines
        _FakePrometheus.seen = []
        rc, out, err, _calls = _run(env, "usage", "--team", "research", "--json")
        assert rc == 0, err
        assert set(json.loads(out)["teams"]) == {"research"} and json.loads(out)["threshold_pct"] == 10
        assert all('account=~`research`' in q for q in _FakePrometheus.seen if "account" in q)
        # without --since: this month, or as far back as Prometheus keeps data (an hour here), which it says
        assert _FakePrometheus.seen[0] == "min(prometheus_tsdb_lowest_timestamp_seconds)"
        assert json.loads(out)["history_from"] == json.loads(out)["since"] > time.time() - 3700
        rc, _out, err, _calls = _run(env, "usage", "--team", "other")
        assert rc == 2 and "is not a member of team other" in err
        rc, _out, err, _calls = _run(env, "usage", "--team", "--since", "2026-12-01 10:00")
        assert rc == 2 and "or a time as YYYY-MM-DDTHH:MM[:SS]" in err
        rc, _out, err, _calls = _run(env, "usage", "--json")
        assert rc == 2 and "--json goes with --team" in err
