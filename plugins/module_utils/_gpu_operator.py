# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA GPU Operator's Helm values, derived from what this collection already manages on the same nodes, and
the checks of those values against the chart (its values.yaml) and the ClusterPolicy CRD's OpenAPI schema.

Plain Python (no Ansible, no third-party packages), so the role's filter and the unit tests run the same code:

- ``derive_values`` turns the role's settings and, per Kubernetes GPU node, what the collection does there (our
  nvidia_driver, dcgm and dcgm_exporter roles) into the chart's values; conflicts and bad input raise
  GpuOperatorError naming the host, the variable and the value.
- ``key_problems`` checks every key path of the values against the chart's values.yaml and the CRD's spec schema
  (the two differ: a key either has is accepted); an unknown key is named with the nearest valid one (difflib).
- ``schema_problems`` validates an object (the rendered ClusterPolicy) against a CRD's structural schema as the API
  server would prune and reject it: unknown fields (which the API server drops without a word), types, enums,
  required fields.
- ``schema_paths`` lists a CRD schema's field paths, for the read-back of the cluster's CRD after the release.
"""

from __future__ import annotations

import copy
import difflib
import re

MIG_STRATEGIES = ("none", "single", "mixed")
# The device plugin's config of a node is chosen by this label (the chart's devicePlugin.config, one entry per model).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# Operands (driver, toolkit, device plugin, ...) run on nodes without this label set to "false".
DEPLOY_OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
# The operator's per-node switch of its driver: "false" where the nvidia_driver role installs the host driver, so
# the operator never deploys a second one there, "true" elsewhere (always set, so that a node the inventory moves to
# the operator's driver loses the "false"). The container toolkit has no such label here: the container_toolkit role
# installs the toolkit but configures no container runtime, so the operator's toolkit is what configures containerd.
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
DEVICE_PLUGIN_CONFIG_NAME = "gpucluster-device-plugin-config"
DEFAULT_CONFIG = "default"
GPU_RESOURCE = "nvidia.com/gpu"
# A Kubernetes label value: at most 63 characters, alphanumeric at both ends, '-', '_' and '.' between.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# The driver upgrade policy's keys (role names) and the chart's.
UPGRADE_POLICY_KEYS = {
    "auto_upgrade": ("autoUpgrade",), "max_parallel_upgrades": ("maxParallelUpgrades",),
    "max_unavailable": ("maxUnavailable",), "drain": ("drain", "enable"), "drain_force": ("drain", "force"),
    "drain_timeout_seconds": ("drain", "timeoutSeconds"), "drain_delete_empty_dir": ("drain", "deleteEmptyDir"),
    "pod_deletion_force": ("gpuPodDeletion", "force"), "pod_deletion_timeout_seconds": ("gpuPodDeletion", "timeoutSeconds"),
    "pod_deletion_delete_empty_dir": ("gpuPodDeletion", "deleteEmptyDir"),
}
# Chart values the role derives itself: setting them through gpu_operator_values as well would say a fact twice.
DERIVED_PATHS = (
    ("driver", "enabled"), ("toolkit", "enabled"), ("dcgm", "enabled"), ("dcgmExporter", "enabled"),
    ("mig", "strategy"), ("devicePlugin", "config"), ("operator", "upgradeCRD"),
)


# Subcharts the chart vendors: their values are theirs (``helm show values`` shows only the parent's), so their keys
# are left to helm template here; their images are moved to the site registry by these paths.
SUBCHARTS = ("node-feature-discovery",)
SUBCHART_REPOSITORIES = {("node-feature-discovery", "image", "repository"): "registry.k8s.io/nfd/node-feature-discovery"}


# Chart values that are Kubernetes maps of the site's own keys (a pod's annotations and labels, a node selector),
# open below whatever example keys values.yaml gives them.
FREE_MAPS = frozenset(("annotations", "labels", "nodeSelector", "podAnnotations", "podLabels"))


class GpuOperatorError(Exception):
    """Bad input or a conflict: the message names the host (where there is one), the variable and the value."""


def _is_bool(value):
    return isinstance(value, bool)


def _tristate(name, value):
    if value == "auto" or _is_bool(value):
        return value
    raise GpuOperatorError("%s is %r: auto, true or false" % (name, value))


def _int_at_least(name, value, low):
    if _is_bool(value) or not isinstance(value, int) or value < low:
        raise GpuOperatorError("%s is %r: an integer of at least %d" % (name, value, low))
    return value


def _set(tree, path, value):
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _get(tree, path, default=None):
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def merge(base, extra):
    """``base`` with ``extra`` merged in, as Helm merges values (mappings deeply, anything else replaced)."""
    result = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _repositories(tree, path=()):
    """Every (path, value) of a ``repository`` key in the chart's values."""
    found = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "repository" and isinstance(value, str):
                found.append((path + (key,), value))
            else:
                found.extend(_repositories(value, path + (key,)))
    return found


def registry_repository(registry, repository):
    """The chart's ``repository`` (nvcr.io/nvidia/k8s) on the site registry (registry.example/mirror): the first
    path component, the chart's registry host, is replaced; the rest is kept (registry.example/mirror/nvidia/k8s)."""
    if not repository:
        return repository
    parts = repository.split("/", 1)
    rest = parts[1] if len(parts) == 2 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost") else repository
    return registry.rstrip("/") + "/" + rest


def time_slicing_config(model, replicas, mig_strategy):
    """The device plugin's config (its own YAML, a string in the ConfigMap) for one GPU model."""
    lines = ["version: v1", "flags:", "  migStrategy: %s" % mig_strategy]
    if replicas > 1:
        lines += ["sharing:", "  timeSlicing:", "    resources:", "      - name: %s" % GPU_RESOURCE,
                  "        replicas: %d" % replicas]
    return "\n".join(lines) + "\n"


def derive_values(settings, nodes, chart_values=None):
    """The chart's values for ``settings`` (the role's variables, without their gpu_operator_ prefix) on ``nodes``
    ({inventory host: {driver_managed, driver_version, dcgm_managed, dcgm_exporter_managed, dcgm_exporter_port,
    slurm, gpu_model}}), with every ``repository`` of ``chart_values`` on the site registry when one is set.

    Returns {values, labels: {host: {label: value}}, notes: [..]}."""
    if not nodes:
        raise GpuOperatorError("kubernetes_gpu_nodes is empty: no node for the GPU Operator")
    values = {}
    notes = []
    hosts = sorted(nodes)

    overlap = [h for h in hosts if nodes[h].get("slurm")]
    if overlap:
        raise GpuOperatorError(
            "host %s: in both kubernetes_gpu_nodes and slurm_compute: Slurm and the Kubernetes device plugin would "
            "hand out the same GPUs; put each GPU node in one of the two groups" % overlap[0])

    # The host driver: ours (nvidia_driver on every node) or the operator's (on none); a mix has no one values set.
    driver = _tristate("gpu_operator_driver_enabled", settings.get("driver_enabled", "auto"))
    ours = [h for h in hosts if nodes[h].get("driver_managed")]
    if driver == "auto":
        if ours and len(ours) != len(hosts):
            other = [h for h in hosts if h not in ours][0]
            raise GpuOperatorError(
                "host %s: gpucluster_site_skip_roles leaves nvidia_driver out here but not on %s: the operator either "
                "installs the driver on every Kubernetes GPU node or on none (set gpu_operator_driver_enabled, or "
                "skip nvidia_driver on all of them)" % (other, ours[0]))
        driver = not ours
    elif driver and ours:
        raise GpuOperatorError(
            "host %s: gpu_operator_driver_enabled is true but the nvidia_driver role installs the driver here: two "
            "drivers on one node; skip nvidia_driver (gpucluster_site_skip_roles) or leave the setting auto" % ours[0])
    _set(values, ("driver", "enabled"), driver)
    if not driver:
        versions = sorted({nodes[h].get("driver_version") or "" for h in hosts})
        if len(versions) > 1:
            raise GpuOperatorError("nvidia_driver_version differs between the Kubernetes GPU nodes (%s): the "
                                   "operator's validator expects one" % ", ".join(repr(v) for v in versions))
        if versions[0]:
            # The validator checks the host driver it finds; the version it is told is the one nvidia_driver installs.
            _set(values, ("validator", "driver", "env"), [{"name": "DRIVER_VERSION", "value": versions[0]}])
        else:
            notes.append("gpu_operator: nvidia_driver_version is empty (the repository's current driver): the "
                         "validator is not told a version")
    else:
        policy = settings.get("driver_upgrade_policy") or {}
        if not isinstance(policy, dict):
            raise GpuOperatorError("gpu_operator_driver_upgrade_policy is %r: a mapping" % (policy,))
        for key, value in sorted(policy.items()):
            if key not in UPGRADE_POLICY_KEYS:
                near = difflib.get_close_matches(key, list(UPGRADE_POLICY_KEYS), n=1)
                raise GpuOperatorError("gpu_operator_driver_upgrade_policy has no key %r%s" % (
                    key, " (did you mean %r?)" % near[0] if near else ""))
            if key.endswith("_seconds") or key == "max_parallel_upgrades":
                _int_at_least("gpu_operator_driver_upgrade_policy.%s" % key, value, 0)
            elif key == "max_unavailable":
                if not (isinstance(value, int) and not _is_bool(value) and value >= 0) and not (
                        isinstance(value, str) and re.match(r"^(100|[1-9]?[0-9])%$", value)):
                    raise GpuOperatorError("gpu_operator_driver_upgrade_policy.max_unavailable is %r: a number of "
                                           "nodes or a percentage such as '25%%'" % (value,))
            elif not _is_bool(value):
                raise GpuOperatorError("gpu_operator_driver_upgrade_policy.%s is %r: true or false" % (key, value))
            _set(values, ("driver", "upgradePolicy") + UPGRADE_POLICY_KEYS[key], value)

    toolkit = settings.get("toolkit_enabled", True)
    if not _is_bool(toolkit):
        raise GpuOperatorError("gpu_operator_toolkit_enabled is %r: true or false" % (toolkit,))
    _set(values, ("toolkit", "enabled"), toolkit)

    # DCGM: our dcgm role runs nv-hostengine on the host (port 5555); the operator's standalone one would be a second.
    dcgm = _tristate("gpu_operator_dcgm_enabled", settings.get("dcgm_enabled", "auto"))
    dcgm_ours = [h for h in hosts if nodes[h].get("dcgm_managed")]
    if dcgm is True and dcgm_ours:
        raise GpuOperatorError("host %s: gpu_operator_dcgm_enabled is true but the dcgm role runs nv-hostengine "
                               "here: two host engines on one node" % dcgm_ours[0])
    _set(values, ("dcgm", "enabled"), False if dcgm == "auto" else dcgm)

    # dcgm-exporter: ours serves the port on the host; the operator's listens on the same port (9400) of the node.
    exporter = _tristate("gpu_operator_dcgm_exporter_enabled", settings.get("dcgm_exporter_enabled", "auto"))
    exporter_ours = [h for h in hosts if nodes[h].get("dcgm_exporter_managed")]
    if exporter is True and exporter_ours:
        host = exporter_ours[0]
        raise GpuOperatorError(
            "host %s: gpu_operator_dcgm_exporter_enabled is true but the dcgm_exporter role serves port %s here: two "
            "exporters on one port; leave it auto (the operator's is then off) or skip dcgm_exporter "
            "(gpucluster_site_skip_roles)" % (host, nodes[host].get("dcgm_exporter_port", 9400)))
    if exporter == "auto":
        if exporter_ours and len(exporter_ours) != len(hosts):
            other = [h for h in hosts if h not in exporter_ours][0]
            notes.append("gpu_operator: dcgm_exporter runs on %s but not on %s: the operator's exporter stays off, "
                         "so %s has none" % (exporter_ours[0], other, other))
        exporter = not exporter_ours
    _set(values, ("dcgmExporter", "enabled"), exporter)

    mig = settings.get("mig_strategy", "none")
    if mig not in MIG_STRATEGIES:
        raise GpuOperatorError("gpu_operator_mig_strategy is %r: one of %s" % (mig, ", ".join(MIG_STRATEGIES)))
    _set(values, ("mig", "strategy"), mig)

    # The device plugin: one config per GPU model (time-slicing replicas), chosen per node by its label.
    slicing = settings.get("time_slicing") or {}
    if not isinstance(slicing, dict):
        raise GpuOperatorError("gpu_operator_time_slicing is %r: a mapping of GPU model to replicas" % (slicing,))
    data = {DEFAULT_CONFIG: time_slicing_config(DEFAULT_CONFIG, 1, mig)}
    for model, replicas in sorted(slicing.items()):
        if not isinstance(model, str) or not LABEL_VALUE.match(model) or model == DEFAULT_CONFIG:
            raise GpuOperatorError("gpu_operator_time_slicing has the GPU model %r: a label value (letters, digits, "
                                   "'-', '_', '.'), not %r" % (model, DEFAULT_CONFIG))
        _int_at_least("gpu_operator_time_slicing.%s" % model, replicas, 1)
        data[model] = time_slicing_config(model, replicas, mig)
    _set(values, ("devicePlugin", "config"),
         {"create": True, "name": DEVICE_PLUGIN_CONFIG_NAME, "default": DEFAULT_CONFIG, "data": data})
    labels = {}
    for host in hosts:
        model = nodes[host].get("gpu_model") or ""
        if not isinstance(model, str) or not LABEL_VALUE.match(model):
            raise GpuOperatorError("host %s: gpu_operator_gpu_model is %r: a label value (letters, digits, '-', '_', "
                                   "'.')" % (host, model))
        labels[host] = {DEPLOY_OPERANDS_LABEL: "true",
                        DEVICE_PLUGIN_CONFIG_LABEL: model if model in slicing else DEFAULT_CONFIG}
        labels[host][DEPLOY_DRIVER_LABEL] = "false" if nodes[host].get("driver_managed") else "true"
    unused = sorted(set(slicing) - {nodes[h].get("gpu_model") for h in hosts})
    if unused:
        notes.append("gpu_operator: gpu_operator_time_slicing names %s, the model of no Kubernetes GPU node"
                     % ", ".join(unused))

    selector = settings.get("node_selector") or {}
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise GpuOperatorError("gpu_operator_node_selector is %r: a mapping of label to value" % (selector,))
    if selector:
        _set(values, ("operator", "nodeSelector"), dict(selector))
    tolerations = settings.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise GpuOperatorError("gpu_operator_tolerations is %r: a list of tolerations" % (tolerations,))
    if tolerations:
        base = _get(chart_values or {}, ("daemonsets", "tolerations"), []) or []
        _set(values, ("daemonsets", "tolerations"), base + [t for t in tolerations if t not in base])
        _set(values, ("operator", "tolerations"),
             (_get(chart_values or {}, ("operator", "tolerations"), []) or []) + tolerations)

    # The role applies the chart's CRDs itself before the release (helm never upgrades CRDs): the chart's own
    # pre-upgrade hook, a Job running the operator's image, is off.
    _set(values, ("operator", "upgradeCRD"), False)

    registry = settings.get("registry") or ""
    if registry:
        if not isinstance(registry, str) or "://" in registry or not re.match(r"^[A-Za-z0-9][A-Za-z0-9.:_/-]*$", registry):
            raise GpuOperatorError("gpu_operator_registry is %r: a registry host with an optional path, no scheme" % (registry,))
        if not chart_values:
            raise GpuOperatorError("gpu_operator_registry is set but the chart's values were not read: the "
                                   "repositories to move are the chart's")
        for path, repository in _repositories(chart_values) + sorted(SUBCHART_REPOSITORIES.items()):
            if repository and _get(values, path) is None:
                _set(values, path, registry_repository(registry, repository))

    extra = settings.get("values") or {}
    if not isinstance(extra, dict):
        raise GpuOperatorError("gpu_operator_values is %r: a mapping of chart values" % (extra,))
    for path in DERIVED_PATHS:
        if _get(extra, path) is not None:
            raise GpuOperatorError("gpu_operator_values sets %s (%r), which the role derives: use its own variable "
                                   "(see the role's README)" % (".".join(path), _get(extra, path)))
    return {"values": merge(values, extra), "labels": labels, "notes": notes}


def _schema_child(schema, key):
    """(the schema of ``key`` in an object schema, whether anything goes below it); None when the key is unknown."""
    if not isinstance(schema, dict):
        return None
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return ({}, True)
    props = schema.get("properties") or {}
    if key in props:
        child = props[key]
        return (child, _free_schema(child))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return (extra, _free_schema(extra))
    if extra is True:
        return ({}, True)
    return None


def _free_schema(schema):
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or (
        schema.get("type") == "object" and not schema.get("properties") and not schema.get("additionalProperties"))


def key_problems(values, chart_values, spec_schema, name="gpu_operator_values"):
    """Every key path of ``values`` that neither the chart's values (``chart_values``) nor the ClusterPolicy CRD's
    ``spec`` schema has, each as a message with the nearest valid key. Below a mapping that either leaves open (an
    empty mapping or a list in values.yaml; additionalProperties or preserve-unknown-fields in the CRD) anything
    goes, as below a Kubernetes map of the site's own keys (FREE_MAPS); list items are checked by the render and the
    schema validation, a subchart's keys (SUBCHARTS) by helm."""
    problems = []

    def walk(node, chart, schema, path):
        for key in sorted(node, key=str):
            value = node[key]
            here = path + (key,)
            in_chart = isinstance(chart, dict) and key in chart
            child_chart = chart.get(key) if in_chart else None
            found = _schema_child(schema, key) if schema is not None else None
            if not path and key in SUBCHARTS:
                continue
            if not in_chart and found is None:
                siblings = set(chart or {}) | set((schema or {}).get("properties") or {})
                near = difflib.get_close_matches(str(key), sorted(siblings), n=1, cutoff=0.6)
                problems.append("%s: %s is a key of neither the chart's values.yaml nor the ClusterPolicy CRD%s" % (
                    name, ".".join(str(p) for p in here), " (nearest valid key: %s)" % ".".join(
                        str(p) for p in path + (near[0],)) if near else ""))
                continue
            chart_free = in_chart and (child_chart == {} or isinstance(child_chart, list) or key in FREE_MAPS)
            schema_free = found is not None and found[1]
            if not isinstance(value, dict) or chart_free or schema_free:
                continue
            walk(value, child_chart if isinstance(child_chart, dict) else None,
                 found[0] if found is not None else None, here)

    walk(values or {}, chart_values or {}, spec_schema, ())
    return problems


def crd_schema(crd, version=None):
    """The openAPIV3Schema of a CRD's storage version (or of ``version``)."""
    for entry in crd.get("spec", {}).get("versions", []):
        if (version and entry.get("name") == version) or (not version and entry.get("storage")):
            return entry.get("schema", {}).get("openAPIV3Schema") or {}
    raise GpuOperatorError("the CRD %s has no %s version" % (
        crd.get("metadata", {}).get("name"), version or "storage"))


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float)}


def _type_ok(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(kind, object))


def schema_problems(obj, schema, path="", limit=50):
    """Where ``obj`` breaks ``schema`` (a CRD's structural OpenAPI v3 schema) as the API server sees it: fields the
    schema does not know (pruned on admission, without an error), wrong types, values outside an enum, missing
    required fields. Returns messages naming the field path and the value."""
    problems = []

    def walk(value, node, where):
        if len(problems) >= limit or not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string"):
            if not (_type_ok(value, "integer") or isinstance(value, str)):
                problems.append("%s is %r: an integer or a string" % (where or "(root)", value))
            return
        if value is None:
            if not node.get("nullable"):
                problems.append("%s is null" % (where or "(root)"))
            return
        kind = node.get("type")
        if kind and not _type_ok(value, kind):
            problems.append("%s is %r: the schema wants %s" % (where or "(root)", value, kind))
            return
        if "enum" in node and value not in node["enum"]:
            problems.append("%s is %r: one of %s" % (where, value, ", ".join(repr(v) for v in node["enum"])))
        if "anyOf" in node and not any(_type_ok(value, alt.get("type", "")) for alt in node["anyOf"] if "type" in alt):
            problems.append("%s is %r: the schema wants %s" % (where, value, " or ".join(
                alt.get("type", "?") for alt in node["anyOf"])))
        if isinstance(value, dict):
            for key in node.get("required", []):
                if key not in value:
                    problems.append("%s.%s is required" % (where, key) if where else "%s is required" % key)
            if node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
                return
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            for key in sorted(value, key=str):
                child = "%s.%s" % (where, key) if where else str(key)
                if where == "" and key == "metadata":
                    continue  # ObjectMeta: the API server's own schema, not the CRD's
                if key in props:
                    walk(value[key], props[key], child)
                elif isinstance(extra, dict):
                    walk(value[key], extra, child)
                elif extra is True or node.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                else:
                    near = difflib.get_close_matches(str(key), sorted(props), n=1)
                    problems.append("%s is not in the schema: the API server would drop it%s" % (
                        child, " (nearest: %s)" % near[0] if near else ""))
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for index, item in enumerate(value):
                walk(item, node["items"], "%s[%d]" % (where, index))

    walk(obj, schema, path)
    return problems


def schema_paths(schema, path=""):
    """Every field path of a structural schema (``spec.driver.enabled``, ``spec.tolerations[]``, ...)."""
    paths = []
    if not isinstance(schema, dict):
        return paths
    for key, child in sorted((schema.get("properties") or {}).items()):
        here = "%s.%s" % (path, key) if path else key
        paths.append(here)
        paths.extend(schema_paths(child, here))
    if isinstance(schema.get("items"), dict):
        paths.extend(schema_paths(schema["items"], path + "[]"))
    return paths


def served_versions(crd):
    """A CRD's versions as 'name' (served), with '(storage)' after the one stored, in the CRD's order."""
    return ["%s%s" % (v.get("name"), " (storage)" if v.get("storage") else "")
            for v in crd.get("spec", {}).get("versions", []) if v.get("served")]


def live_crd_problems(expected_crd, live_crd):
    """Where the cluster's CRD (read back after it was applied) is not the chart's: other served or stored versions,
    or fields of the chart's schema it lacks (an old CRD that nothing upgraded)."""
    name = expected_crd.get("metadata", {}).get("name", "?")
    problems = []
    want, have = served_versions(expected_crd), served_versions(live_crd)
    if want != have:
        problems.append("the cluster's %s serves %s, the chart's %s" % (
            name, ", ".join(have) or "nothing", ", ".join(want)))
    missing = missing_fields(expected_crd, live_crd) if not problems else []
    if missing:
        problems.append("the cluster's %s lacks %d field(s) of the chart's: %s" % (
            name, len(missing), ", ".join(missing[:20]) + (", ..." if len(missing) > 20 else "")))
    return problems


def missing_fields(expected_crd, live_crd):
    """The field paths of the chart's CRD that the cluster's (read back after the release) lacks."""
    have = set(schema_paths(crd_schema(live_crd)))
    return [p for p in schema_paths(crd_schema(expected_crd)) if p not in have]


def values_diff(deployed, derived, path=""):
    """Lines 'path: old -> new' where the deployed release's values (helm get values) and the derived ones differ."""
    lines = []
    deployed = deployed or {}
    for key in sorted(set(deployed) | set(derived), key=str):
        here = "%s.%s" % (path, key) if path else str(key)
        old, new = deployed.get(key, "(unset)"), derived.get(key, "(unset)")
        if isinstance(old, dict) and isinstance(new, dict):
            lines.extend(values_diff(old, new, here))
        elif old != new:
            lines.append("%s: %s -> %s" % (here, _short(old), _short(new)))
    return lines


def _short(value):
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def foreign_images(objects, registry):
    """The images of the rendered ``objects`` that are not on ``registry``."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str) and "/" in value:
                    if not value.startswith(registry.rstrip("/") + "/"):
                        found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(objects)
    return sorted(set(found))
