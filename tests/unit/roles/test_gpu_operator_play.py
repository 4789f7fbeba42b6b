"""The gpu_operator role run by ansible-playbook in check mode, with everything up to the release call for real.

No Kubernetes API server and no helm binary can exist where the unit tests run, so two things are stand-ins, named as
such: tests/unit/roles/standin/helm (a STAND-IN helm: its offline commands, show and template, are Helm's own engine
on the real chart; list and get values answer as a cluster without the release; anything that would change the
cluster is refused) and gpucluster_kubernetes_standin (the API check and the read-backs are left out, with notes).
Real: the argument specs, the Python kubernetes client check, the chart read (local chart path, as an air-gapped site
has it), the derivation from the inventory (our driver, DCGM and exporter on the nodes), the key check, the render and
its validation against the CRD schema, the values diff, and kubernetes.core.helm's own check-mode run.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from render_step import ansible_env
from skip_policy import require_shared, shared_path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = shared_path("GPUCLUSTER_SHARED_DATA", "data")
CHART = os.path.join(DATA, "gpu-operator", "chart-v26.7.0")
STANDIN = os.path.join(ROOT, "tests", "unit", "roles", "standin")

PLAY = [{"name": "GPU Operator", "hosts": "kubernetes_gpu_nodes", "gather_facts": False,
         "roles": [{"role": "gpucluster.ops.gpu_operator"}]}]


def inventory(extra_slurm=False):
    hosts = {"l40s05": {}, "l40s06": {}}
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "slurm_node_gres": [{"name": "gpu", "type": "l40s", "count": 3}], "nvidia_driver_version": "570.172.08"}
    return {"all": {"vars": dict(common, gpucluster_kubernetes_standin=True), "children": {
        "gpu_nodes": {"hosts": hosts},
        "kubernetes_gpu_nodes": {"hosts": hosts},
        "slurm_compute": {"hosts": {"l40s06": {}} if extra_slurm else {}}}}}


def start(tmp, name, extra=None, extra_slurm=False):
    """Start the check-mode run; return (Popen, log path)."""
    folder = tmp / name
    folder.mkdir()
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory(extra_slurm)))
    (folder / "play.yml").write_text(yaml.safe_dump(PLAY))
    settings = {"gpu_operator_chart_path": CHART, "gpu_operator_time_slicing": {"l40s": 4},
                "gpu_operator_chart_version": _chart_version()}
    settings.update(extra or {})
    (folder / "extra.json").write_text(json.dumps(settings))
    log = folder / "helm-calls.log"
    env = ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False", GPUOP_STANDIN_LOG=str(log))
    env["PATH"] = STANDIN + os.pathsep + env["PATH"]
    proc = subprocess.Popen(
        ["ansible-playbook", "--check", "--diff", "-i", str(folder / "hosts.yml"), str(folder / "play.yml"),
         "-e", "@%s" % (folder / "extra.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    return proc, log


def _chart_version():
    with open(os.path.join(CHART, "Chart.yaml")) as handle:
        return yaml.safe_load(handle)["version"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_shared(CHART, "the released GPU Operator charts")
    pytest.importorskip("helm_python", reason="the helm stand-in renders with helm-python-sdk (requirements.txt)")
    pytest.importorskip("kubernetes", reason="the preflight checks the Python kubernetes client (requirements.txt)")
    tmp = tmp_path_factory.mktemp("gpuop")
    started = {"good": start(tmp, "good"),
               "bad": start(tmp, "bad", {"gpu_operator_mig_strategy": "dual"}),
               "overlap": start(tmp, "overlap", extra_slurm=True)}
    result = {}
    for name, (proc, log) in started.items():
        out, _err = proc.communicate(timeout=300)
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        result[name] = (proc.returncode, out, calls)
    return result


def test_check_mode_runs_everything_up_to_the_release_call(runs):  # pylint: disable=redefined-outer-name
    rc, out, calls = runs["good"]
    assert rc == 0, out[-4000:]
    commands = [c[:2] for c in calls]
    assert ["show", "chart"] in commands and ["show", "crds"] in commands and ["template", "gpu-operator"] in commands
    # kubernetes.core.helm's check mode asked the stand-in cluster for the release and stopped there.
    assert ["list", "--output=yaml"] in commands
    assert "changed: [l40s05 -> localhost]" in out.split("Install or upgrade the GPU Operator release", 1)[1].split("TASK", 1)[0]
    assert not [c for c in calls if c[0] in ("install", "upgrade", "uninstall", "repo")], calls
    assert "(no release gpu-operator yet: a first install)" in out
    # Not silently: the skipped API check and read-backs are said (as notes).
    assert "TASK [gpucluster.ops._common : Say that the API was not checked (check mode against a stand-in)]" in out
    assert "TASK [gpucluster.ops.gpu_operator : Say what check mode against a stand-in left out]" in out
    assert "Validate the rendered ClusterPolicy against the chart's CRD schema" in out
    assert "Check that the Kubernetes API answers" in out and "Label the Kubernetes GPU nodes" in out


def test_bad_input_fails_before_the_release_call(runs):  # pylint: disable=redefined-outer-name
    rc, out, calls = runs["bad"]
    assert rc != 0
    assert "gpu_operator_mig_strategy is 'dual': one of none, single, mixed" in out
    assert not [c for c in calls if c[0] in ("list", "template")], calls


def test_a_node_in_slurm_too_is_refused_before_the_release_call(runs):  # pylint: disable=redefined-outer-name
    rc, out, calls = runs["overlap"]
    assert rc != 0
    assert "host l40s06: in both kubernetes_gpu_nodes and slurm_compute" in out
    assert not [c for c in calls if c[0] in ("list", "template")], calls
