"""bin/gpucluster-slurm-metrics run as the program it is, with a fake scontrol and sshare: it writes the metrics file
in one step (0644, no temporary left), and a source that fails is down in the file, its metrics absent, exit 1."""

import os
import stat
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAM = os.path.join(ROOT, "bin", "gpucluster-slurm-metrics")
NODE = ("NodeName=gpu02 Gres=gpu:h100:8 GresUsed=gpu:h100:2(IDX:0-1) State=MIXED Partitions=dev,research "
        "BootTime=2026-12-06T20:43:49")
JOB = "JobId=7 JobName=wrap Account=research JobState=RUNNING Reason=None Partition=research AllocTRES=cpu=1,gres/gpu=2"


def _fake(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def _run(tmp_path, sshare_body):
    scontrol = _fake(tmp_path, "scontrol", 'case "$*" in *node) echo "%s";; *job) echo "%s";; esac' % (NODE, JOB))
    sshare = _fake(tmp_path, "sshare", sshare_body)
    out = tmp_path / "textfile" / "slurm.prom"
    out.parent.mkdir()
    done = subprocess.run([sys.executable, PROGRAM, "--out", str(out), "--scontrol", scontrol, "--sshare", sshare],
                          capture_output=True, text=True, check=False)
    return done, out


def test_writes_the_metrics_file_in_one_step(tmp_path):
    done, out = _run(tmp_path, 'echo " research||0.5|0.25|"; echo "  research|alice|0.5|0.25|0.8"')
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert 'slurm_partition_gpus{partition="research",state="allocated"} 2' in text
    assert 'slurm_account_gpus{account="research",partition="research",state="allocated"} 2' in text
    assert 'slurm_user_fairshare{account="research",user="alice"} 0.8' in text
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert os.listdir(out.parent) == ["slurm.prom"]


def test_a_failing_source_is_down_and_the_run_fails(tmp_path):
    done, out = _run(tmp_path, 'echo "sshare: error: slurmdbd: connection refused" >&2; exit 1')
    assert done.returncode == 1 and "connection refused" in done.stderr
    text = out.read_text()
    assert 'slurm_collector_source_up{source="fairshare"} 0' in text
    assert "slurm_user_fairshare" not in text and "slurm_account_shares" not in text
    assert 'slurm_collector_source_up{source="nodes"} 1' in text
