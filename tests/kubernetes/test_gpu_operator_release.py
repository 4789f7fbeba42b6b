"""The GPU Operator released into a real API server by the gpu_operator role (docs/kubernetes.md), in the order a site
lives it: the charts of ../shared/data/gpu-operator stamped with their releases as NVIDIA's packaging does (helm
package --version 26.3.3 --app-version v26.3.3), v26.3.3 installed with upgrade --install --atomic --wait by
kubernetes.core.helm and the real helm, check mode, the upgrade to v26.7.0 (the role applies the chart's CRDs
itself and reads them back), a rerun that changes nothing, an upgrade that never becomes ready rolled back by
--atomic, and the removal. The API server accepts the ClusterPolicy (its own validation), the operator's Deployment
and NFD's DaemonSet have pods Running on the kwok nodes, and the nodes carry the labels the inventory asks for.
The tests of this file run in its order, each on the cluster the one before left.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import NODES, recap
from k8s_control_plane import KWOK_UNREADY_ANNOTATION
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
    # site.yml's GPU nodes: our driver, container toolkit, DCGM and exporter on the host
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "slurm_node_gres": [{"name": "gpu", "type": "a100", "count": 8}], "nvidia_driver_version": "550.54.15"}
    inventory = {"all": {"vars": common, "children": {"gpu_nodes": {"hosts": hosts},
                                                      "kubernetes_gpu_nodes": {"hosts": hosts}}}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (folder / "play.yml").write_text(yaml.safe_dump(PLAY))
    settings = dict({"gpucluster_kubeconfig": plane.kubeconfig,
                     "gpucluster_kubernetes_operations_kubeconfig": os.path.join(os.path.dirname(plane.kubeconfig),
                                                                                 "operations.kubeconfig"),
                     "gpu_operator_helm": os.path.join(plane.bin, "helm"),
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


def _history(plane):
    out = subprocess.run([os.path.join(plane.bin, "helm"), "--kubeconfig", plane.kubeconfig, "history", "gpu-operator",
                          "-n", "gpu-operator", "-o", "json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _crd(plane, name):
    return json.loads(plane.kubectl("get", "crd", name, "-o", "json", "--show-managed-fields"))


def _task(out, name):
    """The output of the task called ``name`` (up to the next TASK)."""
    return out.split("TASK [gpucluster.ops.gpu_operator : %s]" % name, 1)[1].split("TASK [", 1)[0]


@pytest.fixture(scope="module")
def charts(plane, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("charts")
    return {release: _stamp(plane, release, tmp) for release in ("26.3.3", "26.7.0")}


@pytest.fixture(scope="module")
def installed(plane, charts, tmp_path_factory):
    return _run(plane, tmp_path_factory.mktemp("install"), charts["26.3.3"], "26.3.3")


def test_the_release_is_installed_from_the_stamped_chart(plane, installed):
    rc, out = installed
    assert rc == 0, out[-6000:]
    release = _releases(plane)["gpu-operator"]
    assert release["status"] == "deployed" and release["chart"] == "gpu-operator-26.3.3", release
    assert release["app_version"] == "v26.3.3" and release["namespace"] == "gpu-operator", release


def test_the_role_wrote_the_operations_kubeconfig(plane, installed):
    """site.yml's path to the operations' access (tests/kubernetes/test_k8s_node_health.py tries its rights)."""
    path = os.path.join(os.path.dirname(plane.kubeconfig), "operations.kubeconfig")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    whoami = subprocess.run([os.path.join(plane.bin, "kubectl"), "--kubeconfig", path, "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, check=True).stdout
    assert json.loads(whoami)["status"]["userInfo"]["username"] == \
        "system:serviceaccount:gpucluster-ops:gpucluster-ops-operations", whoami


def test_the_role_applied_the_charts_crds_itself(plane, installed):
    assert installed[0] == 0
    # v26.3.3's crds/ and NFD's: applied server-side by the role before helm saw them
    for name in ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com", "nodefeatures.nfd.k8s-sigs.io",
                 "nodefeaturerules.nfd.k8s-sigs.io", "nodefeaturegroups.nfd.k8s-sigs.io"):
        managers = {m["manager"]: m["operation"] for m in _crd(plane, name)["metadata"]["managedFields"]}
        assert managers.get("gpucluster.ops") == "Apply", (name, managers)
    assert "The 5 CRDs of chart v26.3.3 are served" in installed[1], installed[1][-6000:]


def test_the_api_server_accepted_the_cluster_policy(plane, installed):
    assert installed[0] == 0
    policy = json.loads(plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "json"))
    # our host stack: the driver is ours (nvidia_driver_version), the operator's off; so is its CRD hook
    assert policy["spec"]["driver"]["enabled"] is False, policy["spec"]["driver"]
    assert not plane.kubectl("get", "jobs", "-n", "gpu-operator", "-o", "name").strip()


def test_the_operator_and_nfd_have_pods_running_on_the_kwok_nodes(plane, installed):
    assert installed[0] == 0
    pods = json.loads(plane.kubectl("get", "pods", "-n", "gpu-operator", "-o", "json"))["items"]
    running = {(p["metadata"].get("labels", {}).get("app.kubernetes.io/name") or p["metadata"]["name"], p["spec"].get("nodeName"))
               for p in pods if p["status"].get("phase") == "Running"}
    assert any(name == "gpu-operator" for name, _node in running), pods
    workers = {node for name, node in running if name == "node-feature-discovery"}
    assert set(NODES) <= workers or len([p for p in pods if "worker" in p["metadata"]["name"]]) >= len(NODES), running


def test_the_nodes_carry_the_inventorys_labels_and_none_of_nfds_or_gfds(plane, installed):
    assert installed[0] == 0
    for node in NODES:
        labels = json.loads(plane.kubectl("get", "node", node, "-o", "json"))["metadata"]["labels"]
        # operands on, the device plugin's default config (no time-slicing), the driver the host's (nvidia_driver),
        # the GPU type team_quota selects on; the toolkit the operator's (container_toolkit configures no runtime)
        assert {key: labels.get(key) for key in (
            "nvidia.com/gpu.deploy.operands", "nvidia.com/device-plugin.config", "nvidia.com/gpu.deploy.driver",
            "gpucluster.ops/gpu-type")} == {
            "nvidia.com/gpu.deploy.operands": "true", "nvidia.com/device-plugin.config": "default",
            "nvidia.com/gpu.deploy.driver": "false", "gpucluster.ops/gpu-type": "a100"}, labels
        assert "nvidia.com/gpu.deploy.container-toolkit" not in labels, labels
        # NFD's and GPU Feature Discovery's labels are theirs (no NFD worker runs on kwok: none at all)
        assert not [k for k in labels if k.startswith("feature.node.kubernetes.io/") or k in (
            "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.present")], labels


def test_check_mode_of_the_upgrade_says_what_would_change_and_changes_nothing(plane, charts, installed, tmp_path):
    assert installed[0] == 0
    before = {name: _crd(plane, name)["metadata"]["resourceVersion"] for name in ("clusterpolicies.nvidia.com",)}
    policy = plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "jsonpath={.spec}")
    rc, out = _run(plane, tmp_path / "check", charts["26.7.0"], "26.7.0", args=["--check", "--diff"],
                   gpu_operator_time_slicing={"a100": 2})
    assert rc == 0, out[-6000:]
    applied = _task(out, "Apply the chart's CRDs (server-side, before the release)")
    assert "changed: [dgx01 -> localhost] => (item=clusterpolicies.nvidia.com)" in applied, applied
    assert "(item=gpuclusters.nvidia.com)" in applied  # new in v26.7.0
    assert "changed: [dgx01 -> localhost]" in _task(out, "Install or upgrade the GPU Operator release"), out[-6000:]
    assert "devicePlugin.config.data.a100" in out  # the values' difference, shown
    assert _releases(plane)["gpu-operator"]["revision"] == "1"
    assert {name: _crd(plane, name)["metadata"]["resourceVersion"] for name in before} == before
    assert "gpuclusters.nvidia.com" not in plane.kubectl("get", "crd", "-o", "name")
    assert plane.kubectl("get", "clusterpolicies.nvidia.com", "cluster-policy", "-o", "jsonpath={.spec}") == policy
    labels = json.loads(plane.kubectl("get", "node", "dgx01", "-o", "json"))["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "default", labels


@pytest.fixture(scope="module")
def upgraded(plane, charts, installed, tmp_path_factory):
    assert installed[0] == 0
    return _run(plane, tmp_path_factory.mktemp("upgrade"), charts["26.7.0"], "26.7.0")


def test_the_upgrade_to_v26_7_0_upgrades_the_crds_and_reads_them_back(plane, upgraded):
    rc, out = upgraded
    assert rc == 0, out[-6000:]
    release = _releases(plane)["gpu-operator"]
    assert release["chart"] == "gpu-operator-26.7.0" and release["revision"] == "2" and release["status"] == "deployed"
    assert "The 8 CRDs of chart v26.7.0 are served" in out, out[-6000:]
    # the new CRDs are served, and the ClusterPolicy one has v26.7.0's schema (a field v26.3.3's lacks)
    for name in ("gpuclusters.nvidia.com", "computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"):
        crd = _crd(plane, name)
        assert [v["name"] for v in crd["spec"]["versions"] if v["served"]], crd["spec"]["versions"]
    with open(os.path.join(DATA, "gpu-operator", "chart-v26.7.0", "crds", "nvidia.com_clusterpolicies.yaml")) as handle:
        chart_crd = [d for d in yaml.safe_load_all(handle) if d][0]
    live = _crd(plane, "clusterpolicies.nvidia.com")
    assert live["spec"]["versions"][0]["schema"] == chart_crd["spec"]["versions"][0]["schema"]
    # no hook Job ran: the role's apply did what the chart's hook would
    assert "upgrade-crd" not in plane.kubectl("get", "jobs,serviceaccounts", "-n", "gpu-operator", "-o", "name")


def test_a_rerun_of_the_upgrade_changes_nothing(plane, charts, upgraded, tmp_path):
    assert upgraded[0] == 0
    rc, out = _run(plane, tmp_path / "rerun", charts["26.7.0"], "26.7.0")
    assert rc == 0, out[-6000:]
    assert all(counters["changed"] == "0" for counters in recap(out).values()), out[-6000:]
    assert _releases(plane)["gpu-operator"]["revision"] == "2"


def test_an_upgrade_that_never_becomes_ready_is_rolled_back(plane, charts, upgraded, tmp_path):
    assert upgraded[0] == 0
    # the operator's new pod is one kwok never makes ready, as an image that cannot be pulled would be
    values = {"operator": {"annotations": {KWOK_UNREADY_ANNOTATION: "true"}}}
    rc, out = _run(plane, tmp_path / "atomic", charts["26.7.0"], "26.7.0", gpu_operator_values=values,
                   gpu_operator_wait_timeout="10s")
    assert rc != 0, out[-6000:]
    # the fail task's message as ansible-core prints it, unquoted, before the task's origin: in one line
    failed = _task(out, "Say what failed and what the cluster runs now")
    message = " ".join(failed.split("Action failed:", 1)[-1].split("Origin:", 1)[0].split())
    assert "did not become ready within gpu_operator_wait_timeout '10s'" in message, out[-6000:]
    assert message.count("UPGRADE FAILED") == 1, message
    assert "gpu_operator_atomic rolled it back: the cluster runs gpu-operator-26.7.0 (revision 4, deployed)" \
        in message, out[-6000:]
    history = _history(plane)
    assert [(h["revision"], h["status"]) for h in history[-3:]] == [(2, "superseded"), (3, "failed"), (4, "deployed")], history
    assert "Rollback to 2" in history[-1]["description"], history[-1]
    template = json.loads(plane.kubectl("get", "deployment", "gpu-operator", "-n", "gpu-operator", "-o", "json"))
    assert KWOK_UNREADY_ANNOTATION not in template["spec"]["template"]["metadata"].get("annotations", {})


def test_without_atomic_a_failed_upgrade_stays_and_the_run_says_how_back(plane, charts, upgraded, tmp_path):
    assert upgraded[0] == 0
    values = {"operator": {"annotations": {KWOK_UNREADY_ANNOTATION: "true"}}}
    rc, out = _run(plane, tmp_path / "no-atomic", charts["26.7.0"], "26.7.0", gpu_operator_values=values,
                   gpu_operator_wait_timeout="10s", gpu_operator_atomic=False)
    assert rc != 0, out[-6000:]
    failed = _task(out, "Say what failed and what the cluster runs now")
    message = " ".join(failed.split("Action failed:", 1)[-1].split("Origin:", 1)[0].split())
    newest = _history(plane)[-1]
    assert newest["status"] == "failed", newest
    assert "The newest revision, %s (gpu-operator-26.7.0), is failed" % newest["revision"] in message, message
    assert "gpu_operator_atomic is false: helm left the failed revision in place" in message, message
    assert "rolled it back" not in message, message


def test_state_absent_removes_the_release_and_keeps_the_crds(plane, charts, upgraded, tmp_path):
    assert upgraded[0] == 0
    rc, out = _run(plane, tmp_path / "absent", charts["26.7.0"], "26.7.0", gpu_operator_state="absent")
    assert rc == 0, out[-6000:]
    assert "gpu-operator" not in _releases(plane)
    assert not plane.kubectl("get", "clusterpolicies.nvidia.com", "-o", "name").strip()
    assert not plane.kubectl("get", "deployments", "-n", "gpu-operator", "-o", "name").strip()
    crds = plane.kubectl("get", "crd", "-o", "name")
    for name in ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com", "gpuclusters.nvidia.com",
                 "nodefeatures.nfd.k8s-sigs.io"):
        assert name in crds, crds
    rc, out = _run(plane, tmp_path / "absent-again", charts["26.7.0"], "26.7.0", gpu_operator_state="absent")
    assert rc == 0 and all(c["changed"] == "0" for c in recap(out).values()), out[-6000:]
