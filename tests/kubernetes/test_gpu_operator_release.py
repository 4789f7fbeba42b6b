"""The GPU Operator released into a real API server by the gpu_operator role (docs/kubernetes.md): the chart of
../shared/data/gpu-operator (chart-v26.3.3), stamped with its release as NVIDIA's packaging does (helm package
--version 26.3.3 --app-version v26.3.3), installed with upgrade --install --atomic --wait by kubernetes.core.helm
and the real helm. The API server accepts the ClusterPolicy (its own validation), the operator's Deployment and NFD's
DaemonSet have pods Running on the kwok nodes, and the nodes carry the labels the inventory asks for.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import NODES
from render_step import ansible_env
from skip_policy import require_shared, shared_path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = shared_path("GPUCLUSTER_SHARED_DATA", "data")
PLAY = [{"name": "GPU Operator", "hosts": "kubernetes_gpu_nodes", "gather_facts": False,
         "roles": [{"role": "gpucluster.ops.gpu_operator"}]}]


def _stamp(plane, release, out_dir):
    """The shared chart of `release` packaged as NVIDIA's release would be: version and appVersion set."""
    chart = os.path.join(DATA, "gpu-operator", "chart-v%s" % release)
    require_shared(chart, "the released GPU Operator charts")
    subprocess.run([os.path.join(plane.bin, "helm"), "package", chart, "--version", release, "--app-version",
                    "v" + release, "--destination", str(out_dir)], check=True, capture_output=True, text=True)
    return os.path.join(str(out_dir), "gpu-operator-%s.tgz" % release)


def _run(plane, folder, chart, release, args=(), **extra):
    folder.mkdir(parents=True, exist_ok=True)
    hosts = {node: {} for node in NODES}
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}], "nvidia_driver_version": "550.54.15"}
    inventory = {"all": {"vars": common, "children": {"gpu_nodes": {"hosts": hosts},
                                                      "kubernetes_gpu_nodes": {"hosts": hosts}}}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (folder / "play.yml").write_text(yaml.safe_dump(PLAY))
    settings = dict({"gpucluster_kubeconfig": plane.kubeconfig, "gpu_operator_helm": os.path.join(plane.bin, "helm"),
                     "gpu_operator_chart_path": chart, "gpu_operator_chart_version": "v" + release,
                     "gpu_operator_wait_timeout": "3m"}, **extra)
    (folder / "extra.json").write_text(json.dumps(settings))
    proc = subprocess.run(["ansible-playbook", "-i", str(folder / "hosts.yml"), str(folder / "play.yml"),
                           "-e", "@%s" % (folder / "extra.json")] + list(args),
                          capture_output=True, text=True, cwd=ROOT, env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False"),
                          check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _releases(plane):
    out = subprocess.run([os.path.join(plane.bin, "helm"), "--kubeconfig", plane.kubeconfig, "list", "-A", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    return {r["name"]: r for r in json.loads(out)}


@pytest.fixture(scope="module")
def installed(plane, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-operator")
    chart = _stamp(plane, "26.3.3", tmp)
    rc, out = _run(plane, tmp / "install", chart, "26.3.3")
    return rc, out


def test_the_release_is_installed_from_the_stamped_chart(plane, installed):
    rc, out = installed
    assert rc == 0, out[-6000:]
    release = _releases(plane)["gpu-operator"]
    assert release["status"] == "deployed" and release["chart"] == "gpu-operator-26.3.3", release
    assert release["app_version"] == "v26.3.3" and release["namespace"] == "gpu-operator", release


def test_the_api_server_accepted_the_cluster_policy(plane, installed):
    assert installed[0] == 0
    policy = json.loads(plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "json"))
    # our host stack: the driver is ours (nvidia_driver_version), the operator's off
    assert policy["spec"]["driver"]["enabled"] is False, policy["spec"]["driver"]


def test_the_operator_and_nfd_have_pods_running_on_the_kwok_nodes(plane, installed):
    assert installed[0] == 0
    pods = json.loads(plane.kubectl("get", "pods", "-n", "gpu-operator", "-o", "json"))["items"]
    running = {(p["metadata"].get("labels", {}).get("app.kubernetes.io/name") or p["metadata"]["name"], p["spec"].get("nodeName"))
               for p in pods if p["status"].get("phase") == "Running"}
    assert any(name == "gpu-operator" for name, _node in running), pods
    workers = {node for name, node in running if name == "node-feature-discovery"}
    assert set(NODES) <= workers or len([p for p in pods if "worker" in p["metadata"]["name"]]) >= len(NODES), running


def test_the_nodes_carry_the_inventorys_labels(plane, installed):
    assert installed[0] == 0
    for node in NODES:
        labels = json.loads(plane.kubectl("get", "node", node, "-o", "json"))["metadata"]["labels"]
        # operands on, the device plugin's default config (no time-slicing), the GPU type team_quota selects on
        assert {key: labels.get(key) for key in ("nvidia.com/gpu.deploy.operands", "nvidia.com/device-plugin.config",
                                                 "gpucluster.ops/gpu-type")} == {
            "nvidia.com/gpu.deploy.operands": "true", "nvidia.com/device-plugin.config": "default",
            "gpucluster.ops/gpu-type": "a100"}, labels


def _recap(out):
    return {line.split()[0]: dict(pair.split("=") for pair in line.split(":", 1)[1].split())
            for line in out.splitlines() if " : ok=" in line}


def test_a_rerun_changes_nothing(plane, installed, tmp_path):
    assert installed[0] == 0
    chart = _stamp(plane, "26.3.3", tmp_path)
    rc, out = _run(plane, tmp_path / "rerun", chart, "26.3.3")
    assert rc == 0, out[-6000:]
    assert all(counters["changed"] == "0" for counters in _recap(out).values()), out[-6000:]
    assert _releases(plane)["gpu-operator"]["revision"] == "1"


def test_check_mode_with_new_values_says_what_would_change_and_changes_nothing(plane, installed, tmp_path):
    assert installed[0] == 0
    chart = _stamp(plane, "26.3.3", tmp_path)
    before = plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "jsonpath={.spec}")
    rc, out = _run(plane, tmp_path / "check", chart, "26.3.3", args=["--check", "--diff"],
                   gpu_operator_time_slicing={"a100": 2})
    assert rc == 0, out[-6000:]
    assert "changed: [dgx01 -> localhost]" in out.split("Install or upgrade the GPU Operator release", 1)[1].split(
        "TASK", 1)[0], out[-6000:]
    assert _releases(plane)["gpu-operator"]["revision"] == "1"
    assert plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "jsonpath={.spec}") == before
    labels = json.loads(plane.kubectl("get", "node", "dgx01", "-o", "json"))["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "default", labels
