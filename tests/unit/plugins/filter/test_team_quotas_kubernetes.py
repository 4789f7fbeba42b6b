"""The team quota model on Kubernetes: Kueue objects that mean what the Slurm QOS mean, validated against Kueue's own
CRD schemas (../shared/data/kueue/crds, Kueue v0.19.2; skipped when that folder is absent, failing under CI=true) and
the core objects against Kubernetes' schemas (kubernetes-validate), and the Slurm and Kubernetes sides compared for the
example teams.

No Kubernetes API server runs here: what only a cluster shows (the API server's CEL rules, Kueue's admission and
preemption at run time) is listed in docs/kubernetes-quotas.md. The two CEL rules of the ClusterQueue CRD that bear on
these objects are checked by hand below.
"""

import copy
import functools
import glob
import importlib.util
import os

import pytest
import yaml
from skip_policy import require_shared, shared_path

from ansible_collections.gpucluster.ops.plugins.filter.team_quotas import team_quotas
from ansible_collections.gpucluster.ops.plugins.module_utils import _team_quota_model as model
from test_team_quotas import SEED

jsonschema = pytest.importorskip("jsonschema")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
DATA = shared_path("GPUCLUSTER_SHARED_DATA", "data")
KUEUE_CRDS = os.path.join(DATA, "kueue", "crds")
EXAMPLES = os.path.join(ROOT, "inventories", "examples")
GPU = "nvidia.com/gpu"


def nodes(**per_type):
    """A Kubernetes cluster of one node per GPU type: nodes(a100=8, l40s=6)."""
    return {"nodes": dict(("k8s-%s" % gpu, {gpu: count}) for gpu, count in per_type.items())}


def objects(result, kind):
    return [o for o in result["kubernetes"] if o["kind"] == kind]


def by_name(result, kind):
    return dict((o["metadata"]["name"], o) for o in objects(result, kind))


def problems(teams, **options):
    with pytest.raises(model.TeamQuotaError) as caught:
        model.build(teams, **options)
    return caught.value.problems


# -- the schemas -----------------------------------------------------------------------------------------------------

@pytest.fixture(name="kueue_schemas", scope="module")
def fixture_kueue_schemas():
    """kind -> (storage version, openAPIV3Schema of that version) of Kueue's CRDs."""
    require_shared(KUEUE_CRDS, "Kueue's CRDs")
    schemas = {}
    for path in sorted(glob.glob(os.path.join(KUEUE_CRDS, "*.yaml"))):
        with open(path) as handle:
            crd = yaml.safe_load(handle)
        storage = [v for v in crd["spec"]["versions"] if v["storage"]][0]
        schemas[crd["spec"]["names"]["kind"]] = (crd["spec"]["group"] + "/" + storage["name"],
                                                 storage["schema"]["openAPIV3Schema"])
    return schemas


def _strict(schema):
    """The CRD schema as the API server prunes it: an object with properties takes no other keys."""
    if isinstance(schema, dict):
        schema = dict((k, _strict(v)) for k, v in schema.items() if not k.startswith("x-kubernetes-"))
        if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def validate_kueue(schemas, obj):
    api, schema = schemas[obj["kind"]]
    assert obj["apiVersion"] == api, (obj["kind"], obj["apiVersion"], api)
    body = dict((k, v) for k, v in obj.items() if k != "metadata")
    jsonschema.Draft7Validator(_strict(dict(schema, properties=dict(
        (k, v) for k, v in schema["properties"].items() if k != "metadata")))).validate(body)
    if obj["kind"] == "ClusterQueue":
        spec = obj["spec"]
        # CEL: "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" is refused.
        preemption = spec.get("preemption", {})
        assert not (preemption.get("reclaimWithinCohort", "Never") == "Never"
                    and preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"), obj
        # CEL: "borrowingLimit must be nil when cohort is empty"; and each flavor has one resource per covered one.
        for group in spec["resourceGroups"]:
            for flavor in group["flavors"]:
                assert len(flavor["resources"]) == len(group["coveredResources"]), obj
                assert spec.get("cohortName") or all("borrowingLimit" not in r for r in flavor["resources"]), obj


def validate_core(obj):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(obj, kubernetes_validate.utils.latest_version(), strict=True)


def _example_teams():
    found = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*", "group_vars", "all", "team_quota.yml"))):
        with open(path) as handle:
            data = yaml.safe_load(handle)
        found.append((path.split(os.sep)[-4], data["team_quota_teams"], data["team_quota_gpu_types"]))
    return found


def _renders():
    """Every shape of output: the seed with and without GPU types, unlimited teams, and the example teams."""
    yield "seed", model.build(SEED, kubernetes_cluster=nodes(a100=24))
    yield "seed-typed", model.build(dict(SEED, research=dict(SEED["research"], gpu_types=["h100"])),
                                    gpu_types=["a100", "h100"], kubernetes_cluster=nodes(a100=8, h100=16))
    yield "unlimited", model.build({"ops": None, "dev": {"max_concurrent": 2}}, kubernetes_cluster=nodes(l40s=4))
    yield "no-cluster", model.build(SEED)
    for name, teams, types in _example_teams():
        if name != "hgx-h100-256":      # refused on Kubernetes: test_example_teams_slurm_and_kubernetes_agree
            yield name, model.build(teams, gpu_types=types, kubernetes_cluster=_example_kubernetes(name, types))


@pytest.mark.realdata
def test_every_kueue_object_is_its_storage_version_and_passes_its_crd_schema(kueue_schemas):
    kinds = set()
    for name, result in _renders():
        for obj in result["kubernetes"]:
            if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
                kinds.add(obj["kind"])
                try:
                    validate_kueue(kueue_schemas, obj)
                except jsonschema.ValidationError as exc:
                    pytest.fail("%s: %s %s: %s" % (name, obj["kind"], obj["metadata"]["name"], exc.message))
    assert kinds == set(kueue_schemas), kinds     # every kind Kueue's CRDs define here is rendered and checked
    assert model.KUEUE_API == "kueue.x-k8s.io/v1beta2"


@pytest.mark.realdata
def test_the_schema_check_catches_the_old_field_names(kueue_schemas):
    """The check is not vacuous: v1beta1's 'cohort' and an unknown preemption value are refused."""
    queue = copy.deepcopy(by_name(model.build(SEED, kubernetes_cluster=nodes(a100=24)), "ClusterQueue")["research"])
    queue["spec"]["cohort"] = queue["spec"].pop("cohortName")
    with pytest.raises(jsonschema.ValidationError, match="cohort"):
        validate_kueue(kueue_schemas, queue)
    queue["spec"]["cohortName"] = queue["spec"].pop("cohort")
    queue["spec"]["preemption"]["borrowWithinCohort"]["policy"] = "Any"
    with pytest.raises(jsonschema.ValidationError):
        validate_kueue(kueue_schemas, queue)
    queue["spec"]["preemption"] = {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}
    with pytest.raises(AssertionError):
        validate_kueue(kueue_schemas, queue)


def test_every_core_object_passes_the_kubernetes_schema():
    kinds = set()
    for _name, result in _renders():
        for obj in result["kubernetes"]:
            if obj["apiVersion"] == "v1":
                kinds.add(obj["kind"])
                validate_core(obj)
    assert kinds == {"Namespace", "ResourceQuota"}


# -- what the objects mean -------------------------------------------------------------------------------------------

def test_the_gpus_are_one_pool_and_each_team_borrows_up_to_its_limit():
    result = model.build(dict(SEED, research=dict(SEED["research"], gpu_types=["h100"])), gpu_types=["a100", "h100"],
                         kubernetes_cluster={"nodes": {"n1": {"a100": 8}, "n2": {"a100": 8}, "n3": {"h100": 16}}})
    cohort = by_name(result, "Cohort")["gpucluster"]["spec"]["resourceGroups"]
    assert cohort == [{"coveredResources": [GPU], "flavors": [
        {"name": "gpu-a100", "resources": [{"name": GPU, "nominalQuota": "16"}]},
        {"name": "gpu-h100", "resources": [{"name": GPU, "nominalQuota": "16"}]}]}]
    queues = by_name(result, "ClusterQueue")
    assert queues["development"]["spec"]["resourceGroups"][0]["flavors"] == [
        {"name": "gpu-a100", "resources": [{"name": GPU, "nominalQuota": "0", "borrowingLimit": "8"}]},
        {"name": "gpu-h100", "resources": [{"name": GPU, "nominalQuota": "0", "borrowingLimit": "8"}]}]
    assert all(q["spec"]["cohortName"] == "gpucluster" for q in queues.values())
    # The cohort is created before the queues that join it, the namespaces before what lives in them.
    kinds = [o["kind"] for o in result["kubernetes"]]
    assert kinds.index("Cohort") < kinds.index("ClusterQueue") and kinds.index("Namespace") < kinds.index("LocalQueue")


def test_preemption_is_slurms_graph_as_priorities():
    result = model.build(SEED, kubernetes_cluster=nodes(a100=24))
    queues = by_name(result, "ClusterQueue")
    assert queues["research"]["spec"]["preemption"] == {
        "withinClusterQueue": "Never", "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 500}}
    assert queues["development"]["spec"]["preemption"] == {
        "withinClusterQueue": "Never", "reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}
    research = queues["research"]["metadata"]["annotations"]
    development = queues["development"]["metadata"]["annotations"]
    assert "gpucluster.ops/gpu-hours" in research and research["gpucluster.ops/gpu-hours"] == "20000/month"
    assert development["gpucluster.ops/min-runtime-before-preemption"] == "00:30:00"


def test_an_unlimited_team_borrows_without_a_limit_and_has_no_resource_quota():
    result = model.build({"ops": None}, kubernetes_cluster=nodes(l40s=4))
    resources = by_name(result, "ClusterQueue")["ops"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resources == [{"name": GPU, "nominalQuota": "0"}]
    assert objects(result, "ResourceQuota") == []


def test_kubernetes_max_concurrent_sets_the_kubernetes_side_and_zero_leaves_the_team_off():
    teams = dict(SEED, research=dict(SEED["research"], kubernetes_max_concurrent=6),
                 development=dict(SEED["development"], kubernetes_max_concurrent=0))
    result = model.build(teams, kubernetes_cluster=nodes(l40s=6))
    assert sorted(by_name(result, "ClusterQueue")) == ["research"]
    assert [n["metadata"]["name"] for n in objects(result, "Namespace")] == ["team-research"]
    assert objects(result, "ResourceQuota")[0]["spec"]["hard"] == {"requests.nvidia.com/gpu": "6"}
    # research preempts nobody on Kubernetes: development is not there.
    assert by_name(result, "ClusterQueue")["research"]["spec"]["preemption"]["borrowWithinCohort"] == {
        "policy": "Never"}
    # The Slurm side keeps max_concurrent.
    assert [q["grp_tres"] for q in result["slurm"]["qos"]] == [{"gres/gpu": 8}, {"gres/gpu": 16}]


def test_without_the_kubernetes_nodes_the_cohort_has_no_gpus():
    assert by_name(model.build(SEED), "Cohort")["gpucluster"]["spec"] == {}


# -- bad input -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("teams,options,expected", [
    (SEED, {"kubernetes_cluster": nodes(l40s=6)},
     "team_quota_teams.research.max_concurrent is 16, more than the 6 GPUs on the Kubernetes GPU nodes"),
    (dict(SEED, research=dict(SEED["research"], kubernetes_max_concurrent=7)),
     {"kubernetes_cluster": nodes(l40s=6), "kubernetes_name": "group kubernetes_gpu_nodes"},
     "team_quota_teams.research.kubernetes_max_concurrent is 7, more than the 6 GPUs on group kubernetes_gpu_nodes"),
    (dict(SEED, research=dict(SEED["research"], gpu_types=["a100"])),
     {"gpu_types": ["a100", "l40s"], "kubernetes_cluster": nodes(l40s=24)},
     "team_quota_teams.research.max_concurrent is 16, more than the 0 GPUs of its GPU types (a100) on"),
    ({"ops": None}, {"gpu_types": ["a100", "l40s"], "kubernetes_cluster": nodes(a100=0, l40s=0)},
     "team_quota_teams.ops reaches no GPU on the Kubernetes GPU nodes"),
    (SEED, {"gpu_types": ["a100"], "kubernetes_cluster": nodes(a100=24, l40s=4)},
     "team_quota_gpu_types is [a100], but the Kubernetes GPU nodes have 4 GPU(s) of type 'l40s'"),
    (dict(SEED, research=dict(SEED["research"], kubernetes_max_concurrent="six")), {"kubernetes_cluster": nodes(a=9)},
     "team_quota_teams.research.kubernetes_max_concurrent is 'six'"),
    ({"a": {"max_concurrent": 1, "priority": 100, "can_preempt": ["b"]}, "b": {"max_concurrent": 1, "priority": 500}},
     {"kubernetes_cluster": nodes(a100=2)},
     "team_quota_teams.a preempts b in Slurm, but its priority 100 is not above b's 500"),
    ({"a": {"max_concurrent": 1, "priority": 1000, "can_preempt": ["b"]}, "b": {"max_concurrent": 1, "priority": 500},
      "c": {"max_concurrent": 1, "priority": 100}}, {"kubernetes_cluster": nodes(a100=2)},
     "team_quota_teams.a preempts b in Slurm but not c, which Kueue cannot express: c's priority 100 is not above 500"),
    (SEED, {"kubernetes_cluster": {"nodes": {"n1": {"a100": -1}}}}, "the Kubernetes GPU nodes.nodes.n1 is"),
])
def test_bad_input_names_the_team_the_key_and_the_value(teams, options, expected):
    found = problems(teams, **options)
    assert any(expected in p for p in found), found


def test_kubernetes_checks_apply_only_with_the_kubernetes_nodes():
    """Slurm-only inventories keep every model Slurm accepts (the preemption Kueue cannot express included)."""
    teams = {"a": {"max_concurrent": 1, "priority": 100, "can_preempt": ["b"]}, "b": {"max_concurrent": 1}}
    assert model.build(teams)["slurm"]["qos"][0]["preempt"] == ["b"]


def test_the_filter_passes_the_kubernetes_nodes_on():
    result = team_quotas(SEED, kubernetes_cluster=nodes(a100=24), errors="return")
    assert result["errors"] == [] and by_name(result, "Cohort")["gpucluster"]["spec"]["resourceGroups"]
    found = team_quotas(SEED, kubernetes_cluster=nodes(a100=4), kubernetes_name="group k8s", errors="return")["errors"]
    assert any("more than the 4 GPUs on group k8s" in p for p in found), found


# -- the example teams: both sides agree ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _expected():
    """test_example_inventories.EXPECTED, the one place that says what each example's nodes come to."""
    path = os.path.join(ROOT, "tests", "unit", "test_example_inventories.py")
    spec = importlib.util.spec_from_file_location("_example_inventories_expected", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXPECTED


def _example_kubernetes(name, types):
    """The example's Kubernetes GPU nodes' GPUs (test_example_inventories.EXPECTED holds what each comes to); an
    example without any stands in its Slurm nodes' GPUs, as if Kubernetes ran them, to compare the two sides."""
    node_types = _expected()[name]["kubernetes"] or _expected()[name]["types"]
    return {"nodes": dict(("%s-%d-%d" % (gpu, kind, n), {gpu: per_node})
                          for kind, (gpu, count, per_node) in enumerate(node_types)
                          for n in range(count) if gpu in types)}


def _kueue_preempts(result):
    """Who can take GPUs from whose running work in Kueue: a borrowing workload (all are) of team T preempts the
    workloads of every other team whose priority is below T's and at most T's maxPriorityThreshold."""
    queues = by_name(result, "ClusterQueue")
    classes = dict((c["metadata"]["name"], c["value"]) for c in objects(result, "WorkloadPriorityClass"))
    prio = dict((n, classes["team-" + n.replace("_", "-")]) for n in queues)
    found = {}
    for name, queue in queues.items():
        policy = queue["spec"]["preemption"]["borrowWithinCohort"]
        if policy["policy"] == "Never":
            found[name] = []
            continue
        found[name] = sorted(o for o in queues if o != name and prio[o] < prio[name]
                             and prio[o] <= policy.get("maxPriorityThreshold", prio[o]))
    return found


def test_example_teams_slurm_and_kubernetes_agree():
    examples = _example_teams()
    assert len(examples) == 4
    for name, teams, types in examples:
        cluster = _example_kubernetes(name, types)
        if name == "hgx-h100-256":
            # foundation preempts applied (medium) but not evaluation (low): Kueue preempts by priority, so it
            # would take evaluation's GPUs too. Refused, naming it, rather than rendered to mean something else.
            found = problems(teams, gpu_types=types, kubernetes_cluster=cluster)
            assert found == [p for p in found if "team_quota_teams.foundation preempts applied in Slurm but not "
                             "evaluation, which Kueue cannot express" in p] and found, found
            continue
        result = model.build(teams, gpu_types=types, kubernetes_cluster=cluster)
        slurm = dict((q["name"], q) for q in result["slurm"]["qos"])
        queues = by_name(result, "ClusterQueue")
        quotas = dict((q["metadata"]["labels"]["gpucluster.ops/team"], q) for q in objects(result, "ResourceQuota"))
        on_kubernetes = set(queues)
        assert on_kubernetes, name
        for team in result["teams"]:
            if team["name"] not in on_kubernetes:
                assert team["kubernetes_max_concurrent"] == 0, (name, team["name"])
                continue
            queue = queues[team["name"]]
            limit = model.kubernetes_limit(team)[0]
            # GPUs at once: Slurm's GrpTRES (or the Kubernetes side's own limit), the queue's borrowing limit on
            # every flavor and the namespace's ResourceQuota.
            if team["kubernetes_max_concurrent"] is None:
                assert slurm[team["name"]]["grp_tres"]["gres/gpu"] == limit, (name, team["name"])
            for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
                assert flavor["resources"] == [{"name": GPU, "nominalQuota": "0", "borrowingLimit": str(limit)}]
            assert quotas[team["name"]]["spec"]["hard"] == {"requests.nvidia.com/gpu": str(limit)}
            # Budgets: Slurm's GrpTRESMins, as the annotation (in hours per period).
            hours, period = queue["metadata"]["annotations"]["gpucluster.ops/gpu-hours"].split("/")
            assert slurm[team["name"]]["grp_tres_mins"] == {"gres/gpu": int(hours) * 60} and period == team["period"]
            if team["min_runtime_s"]:
                assert queue["metadata"]["annotations"]["gpucluster.ops/min-runtime-before-preemption"] == \
                    slurm[team["name"]]["preempt_exempt_time"]
        # Who preempts whom: Slurm's Preempt lists, among the teams on Kubernetes.
        assert _kueue_preempts(result) == dict(
            (n, sorted(set(slurm[n]["preempt"]) & on_kubernetes)) for n in on_kubernetes), name


def test_quotas_count_the_time_sliced_gpus_the_device_plugin_advertises():
    """mixed-a100-l40s's L40S time-sliced four ways (gpu_operator_time_slicing: {l40s: 4}): the pool and the caps of
    the l40s flavor are 4x the physical GPUs; the A100s, not sliced, stay as they are; the checks stay physical."""
    teams = {"inference": {"max_concurrent": 4, "priority": "high", "gpu_types": ["l40s"], "members": ["a"]},
             "research": {"max_concurrent": 6, "priority": "low", "members": ["b"]}}
    cluster = {"nodes": {"l40s01": {"l40s": 4}, "l40s02": {"l40s": 4}, "a100k01": {"a100": 4}}}
    result = team_quotas(teams, ["a100", "l40s"], kubernetes_cluster=cluster, kubernetes_replicas={"l40s": 4})
    objects = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in result["kubernetes"]}
    pool = objects[("Cohort", "gpucluster", None)]["spec"]["resourceGroups"][0]["flavors"]
    assert pool == [{"name": "gpu-a100", "resources": [{"name": GPU, "nominalQuota": "4"}]},
                    {"name": "gpu-l40s", "resources": [{"name": GPU, "nominalQuota": "32"}]}]
    research = objects[("ClusterQueue", "research", None)]["spec"]["resourceGroups"][0]["flavors"]
    assert research == [{"name": "gpu-a100", "resources": [{"name": GPU, "nominalQuota": "0", "borrowingLimit": "6"}]},
                        {"name": "gpu-l40s", "resources": [{"name": GPU, "nominalQuota": "0", "borrowingLimit": "24"}]}]
    assert objects[("ResourceQuota", "gpu-quota", "team-research")]["spec"]["hard"] == {"requests.nvidia.com/gpu": "24"}
    assert objects[("ResourceQuota", "gpu-quota", "team-inference")]["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
    # physical checks: 9 GPUs at once of l40s is more than the 8 L40S, whatever the slices
    bad = dict(teams, inference=dict(teams["inference"], max_concurrent=9))
    errors = team_quotas(bad, ["a100", "l40s"], kubernetes_cluster=cluster, kubernetes_replicas={"l40s": 4},
                         errors="return")["errors"]
    assert any("inference" in e and "9" in e for e in errors), errors
    assert team_quotas(teams, ["a100", "l40s"], kubernetes_cluster=cluster, kubernetes_replicas={"l40s": 0},
                       errors="return")["errors"] == [
        "gpu_operator_time_slicing.l40s is 0: a whole number of replicas per GPU, at least 1"]
    # a model the quotas do not name would go uncounted: refused, naming it
    assert team_quotas(teams, ["a100", "l40s"], kubernetes_cluster=cluster, kubernetes_replicas={"l40s-48gb": 4},
                       errors="return")["errors"] == [
        "gpu_operator_time_slicing time-slices l40s-48gb, which is no GPU type of the quotas (a100, l40s): its slices "
        "cannot be counted; name the model as the type (gpu_operator_gpu_model) or the type as the model"]
