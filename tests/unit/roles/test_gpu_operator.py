"""The gpu_operator role's values: derived from what the collection manages on the Kubernetes GPU nodes (driver off
where nvidia_driver installs it, the exporter conflict, DCGM, MIG, time-slicing per GPU model, the registry), bad
input failing with the variable and the value, the keys checked against the chart's values.yaml and the ClusterPolicy
CRD, and the rendered ClusterPolicy against the CRD's schema.

The real charts (../shared/data/gpu-operator/chart-v26.7.0 and chart-v26.3.3, with their CRDs and the vendored
node-feature-discovery subchart) are rendered with a real Helm engine, helm-python-sdk (Helm's Go SDK through
libhelm_c, no helm binary; docs/kubernetes.md says why), once per chart for the module; the rendered ClusterPolicy is
validated with jsonschema against the CRD's openAPIV3Schema as well as with the role's own structural check, and
every core object with kubernetes-validate. Those tests skip, naming the path, when the data folder is absent (under
CI=true they fail, naming it: tests/support/skip_policy.py).
"""

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from skip_policy import require_shared, shared_path

from ansible_collections.gpucluster.ops.plugins.filter.gpu_operator_schema_problems import (
    FilterModule as SchemaFilters, gpu_operator_schema_problems)
from ansible_collections.gpucluster.ops.plugins.filter.gpu_operator_values import (
    FilterModule as ValuesFilters, gpu_operator_values)
from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_operator as gpuop

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = shared_path("GPUCLUSTER_SHARED_DATA", "data")
CHARTS = ["chart-v26.7.0", "chart-v26.3.3"]
ROLE = os.path.join(ROOT, "roles", "gpu_operator")


def node(**extra):
    """A Kubernetes GPU node as site.yml leaves it: our driver, DCGM and dcgm-exporter, an L40S."""
    base = {"driver_managed": True, "driver_version": "570.172.08", "dcgm_managed": True,
            "dcgm_exporter_managed": True, "dcgm_exporter_port": 9400, "slurm": False, "gpu_model": "l40s"}
    base.update(extra)
    return base


NODES = {"l40s05": node(), "l40s06": node()}


def derive(settings=None, nodes=None, chart_values=None):
    return gpuop.derive_values(settings or {}, NODES if nodes is None else nodes, chart_values)


def chart_dir(name):
    return require_shared(os.path.join(DATA, "gpu-operator", name), "the released GPU Operator charts")


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def chart_values(name):
    return load(os.path.join(chart_dir(name), "values.yaml"))


def chart_crd(name):
    return load(os.path.join(chart_dir(name), "crds", "nvidia.com_clusterpolicies.yaml"))


# Derivations -------------------------------------------------------------------------------------------------------

def test_driver_is_off_where_nvidia_driver_installs_it_and_its_version_goes_to_the_validator():
    values = derive()["values"]
    assert values["driver"] == {"enabled": False}
    assert values["validator"]["driver"]["env"] == [{"name": "DRIVER_VERSION", "value": "570.172.08"}]
    assert "upgradePolicy" not in values["driver"]


def test_the_operator_installs_drivers_with_the_upgrade_policy_where_nvidia_driver_is_skipped():
    nodes = {h: node(driver_managed=False) for h in NODES}
    values = derive({"driver_upgrade_policy": {"max_unavailable": "25%", "drain": True, "drain_timeout_seconds": 600,
                                               "pod_deletion_timeout_seconds": 300}}, nodes)["values"]
    assert values["driver"]["enabled"] is True
    assert values["driver"]["upgradePolicy"] == {"maxUnavailable": "25%", "drain": {"enable": True, "timeoutSeconds": 600},
                                                 "gpuPodDeletion": {"timeoutSeconds": 300}}
    assert "validator" not in values


def test_a_mix_of_driver_owners_and_two_drivers_on_one_node_fail():
    with pytest.raises(gpuop.GpuOperatorError, match="host l40s06: gpucluster_site_skip_roles leaves nvidia_driver out"):
        derive(nodes={"l40s05": node(), "l40s06": node(driver_managed=False)})
    with pytest.raises(gpuop.GpuOperatorError, match="host l40s05: gpu_operator_driver_enabled is true but the "
                                                     "nvidia_driver role installs the driver here"):
        derive({"driver_enabled": True})


def test_dcgm_exporter_is_off_where_ours_serves_9400_and_forcing_it_on_is_a_conflict_naming_the_port():
    assert derive()["values"]["dcgmExporter"] == {"enabled": False}
    assert derive()["values"]["dcgm"] == {"enabled": False}
    with pytest.raises(gpuop.GpuOperatorError, match="host l40s05: gpu_operator_dcgm_exporter_enabled is true but the "
                                                     "dcgm_exporter role serves port 9400 here: two exporters"):
        derive({"dcgm_exporter_enabled": True})
    with pytest.raises(gpuop.GpuOperatorError, match="host l40s05: gpu_operator_dcgm_enabled is true"):
        derive({"dcgm_enabled": True})
    bare = {h: node(dcgm_exporter_managed=False) for h in NODES}
    assert derive(nodes=bare)["values"]["dcgmExporter"] == {"enabled": True}


def test_toolkit_and_crd_upgrade():
    values = derive()["values"]
    assert values["toolkit"] == {"enabled": True}
    assert derive({"toolkit_enabled": False})["values"]["toolkit"] == {"enabled": False}
    # the role applies the chart's CRDs itself: the chart's hook (a Job of the operator's image) is off
    assert values["operator"]["upgradeCRD"] is False


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mig_strategy_reaches_the_values_and_every_device_plugin_config(strategy):
    values = derive({"mig_strategy": strategy, "time_slicing": {"l40s": 2}})["values"]
    assert values["mig"] == {"strategy": strategy}
    for text in values["devicePlugin"]["config"]["data"].values():
        assert yaml.safe_load(text)["flags"] == {"migStrategy": strategy}


def test_time_slicing_per_gpu_model_selected_by_the_node_label():
    result = derive({"time_slicing": {"l40s": 4, "a100": 2}},
                    nodes={"l40s05": node(), "a100n1": node(gpu_model="a100"), "h100n1": node(gpu_model="h100")})
    config = result["values"]["devicePlugin"]["config"]
    assert config["create"] is True and config["default"] == "default"
    assert yaml.safe_load(config["data"]["l40s"])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]
    assert "sharing" not in yaml.safe_load(config["data"]["default"])
    assert result["labels"]["l40s05"] == {"nvidia.com/gpu.deploy.operands": "true",
                                          "nvidia.com/device-plugin.config": "l40s",
                                          "nvidia.com/gpu.deploy.driver": "false"}
    assert result["labels"]["h100n1"]["nvidia.com/device-plugin.config"] == "default"


def test_the_host_driver_switches_the_operators_driver_off_per_node_and_no_nfd_or_gfd_label():
    result = derive({"driver_enabled": False}, nodes={"own": node(), "bare": node(driver_managed=False)})
    assert result["labels"]["own"]["nvidia.com/gpu.deploy.driver"] == "false"
    # always sent: a node the inventory moves to the operator's driver loses its "false" (a patch keeps what it omits)
    assert result["labels"]["bare"]["nvidia.com/gpu.deploy.driver"] == "true"
    for labels in result["labels"].values():
        # the operator's container toolkit is what configures containerd (container_toolkit configures no runtime)
        assert "nvidia.com/gpu.deploy.container-toolkit" not in labels
        # NFD's feature.node.kubernetes.io/* and GFD's nvidia.com/gpu.product, .count, .memory, ... are theirs
        assert not [k for k in labels if k.startswith("feature.node.kubernetes.io/")
                    or (k.startswith("nvidia.com/gpu.") and not k.startswith("nvidia.com/gpu.deploy."))], labels


def test_a_node_in_slurm_too_is_refused():
    with pytest.raises(gpuop.GpuOperatorError, match="host l40s06: in both kubernetes_gpu_nodes and slurm_compute"):
        derive(nodes={"l40s05": node(), "l40s06": node(slurm=True)})


def test_every_repository_of_the_chart_moves_to_the_site_registry():
    values = {"a": {"repository": "nvcr.io/nvidia", "x": {"repository": "nvcr.io/nvidia/cloud-native"}},
              "b": {"repository": ""}, "c": {"repository": "registry.k8s.io/nfd"}}
    derived = derive({"registry": "registry.example:5000/mirror"}, chart_values=values)["values"]
    assert derived["a"] == {"repository": "registry.example:5000/mirror/nvidia",
                            "x": {"repository": "registry.example:5000/mirror/nvidia/cloud-native"}}
    assert derived["c"] == {"repository": "registry.example:5000/mirror/nfd"}
    assert "b" not in derived
    with pytest.raises(gpuop.GpuOperatorError, match="chart's values were not read"):
        derive({"registry": "registry.example"})


def test_tolerations_and_the_operators_node_selector():
    chart = {"daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    extra = {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
    values = derive({"tolerations": [extra], "node_selector": {"node-role.kubernetes.io/control-plane": ""}},
                    chart_values=chart)["values"]
    assert values["daemonsets"]["tolerations"] == chart["daemonsets"]["tolerations"] + [extra]
    assert values["operator"]["tolerations"] == [extra]
    assert values["operator"]["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}


# Bad input: the variable and the value --------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"mig_strategy": "dual"}, "gpu_operator_mig_strategy is 'dual': one of none, single, mixed"),
    ({"time_slicing": {"l40s": 0}}, "gpu_operator_time_slicing.l40s is 0: an integer of at least 1"),
    ({"time_slicing": {"l40s": "4"}}, "gpu_operator_time_slicing.l40s is '4': an integer of at least 1"),
    ({"time_slicing": {"default": 2}}, "gpu_operator_time_slicing has the GPU model 'default'"),
    ({"driver_enabled": "yes"}, "gpu_operator_driver_enabled is 'yes': auto, true or false"),
    ({"toolkit_enabled": "true"}, "gpu_operator_toolkit_enabled is 'true': true or false"),
    ({"values": {"mig": {"strategy": "single"}}}, r"gpu_operator_values sets mig.strategy \('single'\), which the role derives"),
    ({"node_selector": {"a": 1}}, "gpu_operator_node_selector is {'a': 1}"),
    ({"registry": "https://registry"}, "gpu_operator_registry is 'https://registry'"),
])
def test_bad_settings_fail_naming_the_variable_and_the_value(settings, message):
    with pytest.raises(gpuop.GpuOperatorError, match=message):
        derive(settings)


def test_bad_upgrade_policy_fails_with_the_nearest_key():
    nodes = {h: node(driver_managed=False) for h in NODES}
    with pytest.raises(gpuop.GpuOperatorError, match="has no key 'max_unavailble' \\(did you mean 'max_unavailable'\\?\\)"):
        derive({"driver_upgrade_policy": {"max_unavailble": 1}}, nodes)
    with pytest.raises(gpuop.GpuOperatorError, match="max_unavailable is '150%'"):
        derive({"driver_upgrade_policy": {"max_unavailable": "150%"}}, nodes)


def test_the_filters_raise_ansible_errors_and_are_registered():
    with pytest.raises(AnsibleFilterError, match="^gpu_operator_values: gpu_operator_mig_strategy is 'dual'"):
        gpu_operator_values({"mig_strategy": "dual"}, NODES)
    assert set(ValuesFilters().filters()) == {"gpu_operator_values"}
    assert set(SchemaFilters().filters()) == {"gpu_operator_schema_problems"}
    assert gpu_operator_values({}, NODES, deployed={"driver": {"enabled": True}})["diff"][0] == "dcgm: (unset) -> {'enabled': False}"


def test_values_diff_names_each_changed_path():
    assert gpuop.values_diff({"driver": {"enabled": True}, "x": 1}, {"driver": {"enabled": False}}) == [
        "driver.enabled: True -> False", "x: 1 -> (unset)"]


# Keys against the chart and the CRD (the real ones) --------------------------------------------------------------------

@pytest.mark.parametrize("chart", CHARTS)
def test_keys_of_either_source_pass_and_a_typo_names_the_nearest_valid_key(chart):
    values, spec = chart_values(chart), gpuop.crd_schema(chart_crd(chart))["properties"]["spec"]
    # driver.upgradePolicy.podDeletion: the CRD's name (values.yaml says gpuPodDeletion); validator.driver: only a
    # comment in values.yaml; devicePlugin.config.data: values only; node-feature-discovery: the subchart's.
    good = {"driver": {"upgradePolicy": {"podDeletion": {"force": True}, "gpuPodDeletion": {"force": True}}},
            "validator": {"driver": {"env": []}}, "devicePlugin": {"config": {"data": {"x": "y"}}},
            "daemonsets": {"labels": {"any": "thing"}}, "node-feature-discovery": {"worker": {"tolerations": []}},
            # a map of the site's own keys, below the example key values.yaml gives it (openshift.io/scc)
            "operator": {"annotations": {"example.org/owner": "hpc-team"}}}
    assert gpuop.key_problems(good, values, spec) == []
    assert gpuop.key_problems(derive(chart_values=values)["values"], values, spec) == []
    assert gpuop.key_problems({"devicePlugn": {"enabled": True}, "driver": {"upgradePolicy": {"maxUnavailble": 1}}},
                              values, spec) == [
        "gpu_operator_values: devicePlugn is a key of neither the chart's values.yaml nor the ClusterPolicy CRD "
        "(nearest valid key: devicePlugin)",
        "gpu_operator_values: driver.upgradePolicy.maxUnavailble is a key of neither the chart's values.yaml nor the "
        "ClusterPolicy CRD (nearest valid key: driver.upgradePolicy.maxUnavailable)"]


def test_the_filter_fails_on_an_unknown_values_key():
    chart = CHARTS[0]
    with pytest.raises(AnsibleFilterError, match="dcgmExportr is a key of neither .*nearest valid key: dcgmExporter"):
        gpu_operator_values({"values": {"dcgmExportr": {"enabled": True}}}, NODES, chart_values(chart), chart_crd(chart))


# Render with the real charts ------------------------------------------------------------------------------------------

SETTINGS = {"mig_strategy": "single", "time_slicing": {"l40s": 4}, "registry": "registry.example.internal:5000/nvidia-mirror",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}]}


@pytest.fixture(scope="module", params=CHARTS)
def rendered(request):
    """(chart name, derived values, rendered objects, CRD) for each real chart, rendered once for the module."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (requirements.txt) renders the real chart")
    path = chart_dir(request.param)
    values = derive(SETTINGS, chart_values=chart_values(request.param))["values"]
    manifests = helm.Chart.load(path).render(values, name="gpu-operator", namespace="gpu-operator", is_install=True)
    objects = [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]
    return request.param, values, objects, chart_crd(request.param)


def test_the_rendered_clusterpolicy_fits_the_crd_schema(rendered):  # pylint: disable=redefined-outer-name
    jsonschema = pytest.importorskip("jsonschema")
    _chart, _values, objects, crd = rendered
    policies = [o for o in objects if o["kind"] == "ClusterPolicy"]
    assert len(policies) == 1
    jsonschema.validate(policies[0], gpuop.crd_schema(crd))
    assert gpu_operator_schema_problems(objects, crd) == []
    spec = policies[0]["spec"]
    assert spec["driver"]["enabled"] is False and spec["dcgmExporter"]["enabled"] is False
    assert spec["dcgm"]["enabled"] is False and spec["toolkit"]["enabled"] is True
    assert spec["mig"] == {"strategy": "single"}
    assert spec["devicePlugin"]["config"] == {"name": gpuop.DEVICE_PLUGIN_CONFIG_NAME, "default": "default"}
    assert spec["validator"]["driver"]["env"] == [{"name": "DRIVER_VERSION", "value": "570.172.08"}]
    assert {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"} in \
        spec["daemonsets"]["tolerations"]


def test_the_device_plugin_configmap_carries_the_time_slicing(rendered):  # pylint: disable=redefined-outer-name
    _chart, _values, objects, _crd = rendered
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == gpuop.DEVICE_PLUGIN_CONFIG_NAME]
    assert len(maps) == 1
    config = yaml.safe_load(maps[0]["data"]["l40s"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert config["flags"]["migStrategy"] == "single"


def test_every_image_comes_from_the_site_registry(rendered):  # pylint: disable=redefined-outer-name
    _chart, _values, objects, _crd = rendered
    images = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("image", "repository") and isinstance(value, str) and "/" in value:
                    images.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(objects)
    assert images and all(i.startswith("registry.example.internal:5000/nvidia-mirror/") for i in images), images
    assert any("/nfd/node-feature-discovery:" in i for i in images)
    assert gpuop.foreign_images(objects, "registry.example.internal:5000/nvidia-mirror") == []
    assert gpuop.foreign_images(objects, "elsewhere.example")
    assert any(p.endswith("is not on the site registry elsewhere.example (gpu_operator_registry)")
               for p in gpu_operator_schema_problems(objects, _crd, registry="elsewhere.example"))


def _chart_crd_files(path):
    """{file name: [CRD names]} of the chart's crds/ and its subcharts' (what helm show crds prints)."""
    files = {}
    subcharts = sorted(os.listdir(os.path.join(path, "charts")))
    for folder in [os.path.join(path, "crds")] + [os.path.join(path, "charts", sub, "crds") for sub in subcharts]:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name)) as handle:
                files[name] = [d["metadata"]["name"] for d in yaml.safe_load_all(handle)
                               if d and d.get("kind") == "CustomResourceDefinition"]
    return files


def test_the_role_renders_no_crd_upgrade_hook(rendered):  # pylint: disable=redefined-outer-name
    _chart, values, objects, _crd = rendered
    assert values["operator"]["upgradeCRD"] is False
    assert not [o for o in objects if o["kind"] == "Job" and "upgrade-crd" in o["metadata"]["name"]]


@pytest.mark.parametrize("chart", CHARTS)
def test_the_charts_crd_hook_would_apply_no_crd_the_role_does_not(chart):
    """The chart's own CRD upgrade (operator.upgradeCRD=true, its default) is a pre-upgrade Job running the operator's
    image, which no kwok node runs: rendered here, its arguments name CRD files of the chart, each of which the role
    applies itself (helm show crds: every CRD of crds/ and of the subcharts')."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (requirements.txt) renders the real chart")
    path = chart_dir(chart)
    values = gpuop.merge(derive(chart_values=chart_values(chart))["values"], {"operator": {"upgradeCRD": True}})
    manifests = helm.Chart.load(path).render(values, name="gpu-operator", namespace="gpu-operator", is_install=False)
    objects = [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]
    jobs = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "gpu-operator-upgrade-crd"]
    assert len(jobs) == 1
    assert jobs[0]["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    container = jobs[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/usr/bin/manage-crds"] and container["args"][0] == "apply", container
    assert container["image"].startswith("nvcr.io/nvidia/gpu-operator:"), container["image"]
    files = _chart_crd_files(path)
    hooked = [arg.split("=", 1)[1] for arg in container["args"][1:]]
    assert hooked and all(arg.startswith("/opt/gpu-operator/") for arg in hooked), hooked
    # every file the hook applies is one of the chart's, so the role's apply (every CRD of the chart) covers it
    assert {os.path.basename(f) for f in hooked} <= set(files), (hooked, sorted(files))
    assert "nfd-api-crds.yaml" in {os.path.basename(f) for f in hooked}  # nfd.enabled: its CRDs too


def test_the_core_objects_pass_kubernetes_validate(rendered):  # pylint: disable=redefined-outer-name
    validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (requirements.txt)")
    _chart, _values, objects, _crd = rendered
    core = [o for o in objects if "." not in o["apiVersion"].split("/")[0] or o["apiVersion"].split("/")[0].endswith(".k8s.io")]
    assert core
    version = validate.latest_version()
    for obj in core:
        validate.validate(obj, version, strict=True)


def test_the_structural_check_finds_what_the_api_server_would_drop_or_refuse(rendered):  # pylint: disable=redefined-outer-name
    _chart, _values, objects, crd = rendered
    policy = [o for o in objects if o["kind"] == "ClusterPolicy"][0]
    broken = yaml.safe_load(yaml.safe_dump(policy))
    broken["spec"]["devicePlugin"]["timeSlicing"] = {"replicas": 4}
    broken["spec"]["mig"]["strategy"] = "dual"
    broken["spec"]["driver"]["enabled"] = "no"
    del broken["spec"]["toolkit"]
    problems = gpu_operator_schema_problems([broken], crd)
    assert "ClusterPolicy cluster-policy: spec.devicePlugin.timeSlicing is not in the schema: the API server would " \
           "drop it" in [p.split(" (nearest")[0] for p in problems]
    assert any("spec.mig.strategy is 'dual': one of 'none', 'single', 'mixed'" in p for p in problems)
    assert any("spec.driver.enabled is 'no': the schema wants boolean" in p for p in problems)
    assert any("spec.toolkit is required" in p for p in problems)
    assert gpu_operator_schema_problems([], crd) == ["the chart rendered no ClusterPolicy"]


def test_the_crd_read_back_names_the_fields_an_old_crd_lacks():
    new, old = chart_crd("chart-v26.7.0"), chart_crd("chart-v26.3.3")
    assert gpu_operator_schema_problems([], new, live_crd=new) == []
    missing = gpuop.missing_fields(new, old)
    assert missing, "the two charts' CRDs are expected to differ"
    assert gpu_operator_schema_problems([], new, live_crd=old)[0].startswith(
        "the cluster's clusterpolicies.nvidia.com lacks %d field(s) of the chart's: %s" % (len(missing), missing[0]))
    moved = yaml.safe_load(yaml.safe_dump(new))
    moved["spec"]["versions"][0]["served"] = False
    assert gpu_operator_schema_problems([], new, live_crd=moved) == [
        "the cluster's clusterpolicies.nvidia.com serves nothing, the chart's v1 (storage)"]


def test_the_role_defaults_are_the_argument_spec_defaults():
    defaults = load(os.path.join(ROLE, "defaults", "main.yml"))
    options = load(os.path.join(ROLE, "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], name


def test_the_crd_read_back_takes_every_crd_of_the_chart_by_name():
    new, old = chart_crd("chart-v26.7.0"), chart_crd("chart-v26.3.3")
    other = {"metadata": {"name": "nvidiadrivers.nvidia.com"}, "spec": {"versions": [
        {"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    assert gpu_operator_schema_problems([], [new, other], live_crd=[other, new]) == []
    assert gpu_operator_schema_problems([], [new, other], live_crd=[new]) == ["the cluster has no nvidiadrivers.nvidia.com"]
    problems = gpu_operator_schema_problems([], [new, other], live_crd=[old, other])
    assert len(problems) == 1 and problems[0].startswith("the cluster's clusterpolicies.nvidia.com lacks"), problems
