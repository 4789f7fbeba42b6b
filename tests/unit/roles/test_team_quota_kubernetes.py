"""team_quota's Kubernetes entry point (tasks_from: kubernetes), run by the real ansible-playbook in check mode.

No Kubernetes API server can run here, so the host that has the kubeconfig (gpucluster_kubernetes_delegate,
localhost) is a STAND-IN: it has the offline_node connection (tests/support/connection_plugins/offline_node.py),
which answers the Kubernetes modules (kubernetes.core.k8s, k8s_info, k8s_cluster_info) from canned data and runs
nothing (their action plugins' temporary-directory commands get made-up answers: offline_node_tmp_dirs). The GPU
nodes are offline hosts too. Everything up to the calls runs for real: the role's argument spec, its settings
check, the model against the Kubernetes GPU nodes' GPUs (read from inventory as the Slurm side reads its nodes'),
the refusal of bad input, and the arguments each call is given, which the test compares with the filter's own
objects. What the stand-in cannot show (the API server's dry run, Kueue's webhooks, the read-back of a real cluster)
is listed in docs/kubernetes-quotas.md.
"""

import copy
import os

import yaml

from offline_preflight import DEBIAN12_CONTAINER, offline_hosts, offline_host, run_offline

from ansible_collections.gpucluster.ops.plugins.module_utils import _team_quota_model as model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PREFLIGHT = os.path.join(ROOT, "roles", "_common", "tasks", "kubernetes_preflight.yml")
EXAMPLE = os.path.join(ROOT, "inventories", "examples", "dgx-a100-50gpu", "group_vars", "all", "team_quota.yml")

# The stand-in's answers. A managed ClusterQueue of a team inventory no longer lists ("vision"), still running work.
LEFTOVER = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "vision", "labels": {"app.kubernetes.io/managed-by": "gpucluster.ops",
                                                      "gpucluster.ops/team": "vision"}},
            "status": {"admittedWorkloads": 2, "pendingWorkloads": 1}}
# This run's queue, which Kueue has made Active (the role reads it back until it is).
ACTIVE = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
          "metadata": {"name": "research", "labels": {"app.kubernetes.io/managed-by": "gpucluster.ops",
                                                      "gpucluster.ops/team": "research"}},
          "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit"}]}}
STAND_IN = [
    {"module": "kubernetes.core.k8s_cluster_info",
     "result": {"version": {"server": {"kubernetes": {"gitVersion": "v1.33.4"}}}, "apis": {}, "connection": {}}},
    {"module": "kubernetes.core.k8s_info", "args": {"kind": "ClusterQueue"},
     "result": {"api_found": True, "resources": [LEFTOVER, ACTIVE]}},
    {"module": "kubernetes.core.k8s_info", "result": {"api_found": True, "resources": []}},
    {"module": "kubernetes.core.k8s", "result": {"changed": True, "method": "apply", "result": {}}},
    {"module": "command", "result": {"rc": 0, "stdout": "", "stderr": ""}},
]


def _teams():
    with open(EXAMPLE) as handle:
        data = yaml.safe_load(handle)
    return data["team_quota_teams"], data["team_quota_gpu_types"]


def _run(tmp_path, teams, types):
    assert os.path.isfile(PREFLIGHT), (
        "roles/_common/tasks/kubernetes_preflight.yml (the shared Kubernetes preflight, written on branch wt/gpuop) "
        "is missing: the Kubernetes entry point includes it")
    gres = [{"name": "gpu", "type": "a100", "count": 3}]
    nodes = offline_hosts({"a100s05": DEBIAN12_CONTAINER, "a100s06": DEBIAN12_CONTAINER}, slurm_node_gres=gres)
    inventory = {"all": {"hosts": dict(nodes, localhost=offline_host({}, STAND_IN, offline_node_tmp_dirs=True)),
                         "vars": {"team_quota_teams": teams, "team_quota_gpu_types": types},
                         "children": {"kubernetes_gpu_nodes": {"hosts": {"a100s05": {}, "a100s06": {}}}}}}
    play = [{"name": "Kubernetes", "hosts": "kubernetes_gpu_nodes", "gather_facts": False, "check_mode": True,
             "tasks": [{"name": "Team quotas on Kubernetes", "ansible.builtin.include_role": {
                 "name": "gpucluster.ops.team_quota", "tasks_from": "kubernetes"}}]}]
    return run_offline(tmp_path, inventory, play)


def test_check_mode_hands_the_checked_objects_to_the_stand_in(tmp_path):
    teams, types = _teams()
    rc, out, calls = _run(tmp_path, teams, types)
    assert rc == 0, out
    assert not [c for c in calls if c.get("refused")], calls
    applied = [c for c in calls if c.get("module") == "kubernetes.core.k8s"]
    assert {c["host"] for c in applied} == {"localhost"}, applied      # delegated, and once
    cluster = {"nodes": {"a100s05": {"a100": 3}, "a100s06": {"a100": 3}}}
    want = model.build(teams, gpu_types=types, kubernetes_cluster=cluster,
                       kubernetes_name="the Kubernetes GPU nodes (inventory group kubernetes_gpu_nodes)")["kubernetes"]
    assert [c["args"]["definition"] for c in applied] == want
    for call in applied:
        assert call["args"]["state"] == "present" and call["args"]["apply"] is True, call
        assert call["args"]["server_side_apply"]["field_manager"] == "gpucluster.ops", call
    pool = [o for o in want if o["kind"] == "Cohort"][0]["spec"]["resourceGroups"][0]["flavors"]
    assert pool == [{"name": "gpu-a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "6"}]}]
    assert sorted(o["metadata"]["name"] for o in want if o["kind"] == "ClusterQueue") == ["research"]
    # The removed team's queue is named, with its work, and left alone (no delete was asked of the stand-in).
    assert "team_quota: ClusterQueue vision (team vision) is no longer in team_quota_teams and was left in place with 2 " \
           "admitted and 1 pending workload(s)" in " ".join(out.split()), out
    assert not [c for c in applied if c["args"].get("state") == "absent"]


def test_a_team_beyond_the_kubernetes_gpus_fails_before_any_call(tmp_path):
    teams, types = _teams()
    teams = copy.deepcopy(teams)
    teams["research"]["kubernetes_max_concurrent"] = 7
    rc, out, calls = _run(tmp_path, teams, types)
    assert rc == 2, out
    assert "team_quota_teams.research.kubernetes_max_concurrent is 7, more than the 6 GPUs on the Kubernetes GPU " \
           "nodes (inventory group kubernetes_gpu_nodes)" in " ".join(out.split()), out
    assert "host a100s05" in out, out
    assert not [c for c in calls if c.get("module") in ("kubernetes.core.k8s", "kubernetes.core.k8s_info")], calls
