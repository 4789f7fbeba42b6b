# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test helpers: run Slurm's scontrol (when installed) as the reference parser.

``GPUCLUSTER_SCONTROL`` may name several scontrol commands separated by blanks (for example a Slurm 24.11 build next
to the system's 22.05); by default it is ``scontrol`` when that is on PATH. Tests that need one skip without it.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

MINIMAL_CONF = "ClusterName=test\nSlurmctldHost=ctl\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n"


def scontrol_commands():
    """The scontrol commands to compare with, possibly none."""
    configured = os.environ.get("GPUCLUSTER_SCONTROL")
    if configured:
        return configured.split()
    return ["scontrol"] if shutil.which("scontrol") else []


needs_scontrol = pytest.mark.skipif(not scontrol_commands(), reason="scontrol is not installed")


class Scontrol(object):
    """One scontrol command with a scratch slurm.conf."""

    def __init__(self, command, directory):
        self.command = command
        self.conf = os.path.join(directory, "slurm.conf")
        with open(self.conf, "w") as handle:
            handle.write(MINIMAL_CONF)

    @property
    def version(self):
        """Major.minor of this scontrol, e.g. "22.05"."""
        if not hasattr(self, "_version"):
            out = self.run("-V")[1].split()
            self._version = ".".join(out[-1].split(".")[:2]) if out else "unknown"
        return self._version

    def run(self, *args, **kwargs):
        """Run ``scontrol ARGS`` with SLURM_CONF (default: the scratch file); return (rc, stdout, stderr)."""
        env = dict(os.environ, SLURM_CONF=kwargs.get("conf", self.conf), LC_ALL="C")
        proc = subprocess.run([self.command] + list(args), env=env, capture_output=True, text=True, timeout=60, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def parse_errors(self, conf):
        """What scontrol's parse of slurm.conf ``conf`` complains about (stderr lines; rc != 0 counts too)."""
        rc, _out, err = self.run("show", "hostnames", "x", conf=conf)
        lines = [line for line in err.splitlines() if line.strip()]
        return lines if lines or rc == 0 else ["exit status %d" % rc]


def scontrols():
    """Scontrol objects for every configured command, sharing one scratch directory."""
    directory = tempfile.mkdtemp(prefix="gpucluster-scontrol-")
    result = []
    for index, command in enumerate(scontrol_commands()):
        sub = os.path.join(directory, str(index))
        os.mkdir(sub)
        result.append(Scontrol(command, sub))
    return result


def gpu_facts(count=8, name="NVIDIA A100-SXM4-80GB", memory=81920, affinity=("0-31,64-95", "32-63,96-127")):
    """gpucluster_gpus as the gpu_facts module gathers them: the first half of the GPUs on socket 0."""
    gpus = []
    for index in range(count):
        gpu = {"minor_number": index, "name": name, "memory_total_mib": memory}
        if affinity:
            gpu["cpu_affinity"] = affinity[0] if index < count // 2 else affinity[1]
        gpus.append(gpu)
    return gpus


def host_facts(sockets=2, cores=32, threads=2, memtotal=1031800, gpus=None):
    """hostvars of one node with Ansible's hardware facts (and GPU facts when given)."""
    facts = {"processor_count": sockets, "processor_cores": cores, "processor_threads_per_core": threads,
             "processor_vcpus": sockets * cores * threads, "memtotal_mb": memtotal}
    if gpus is not None:
        facts["gpucluster_gpus"] = gpus
    return {"ansible_facts": facts}
