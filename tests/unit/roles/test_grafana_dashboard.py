"""The fleet dashboard the monitoring role installs: its structure, and that every query reads metrics that exist."""

import json
import os

import pytest
import yaml

from .promql import PROMETHEUS_METRICS, counter_fields, health_metrics, known_metrics, metric_names
from .rolerender import DEBIAN13, RoleRender

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "monitoring")
PANEL_TYPES = {"row", "stat", "timeseries", "heatmap", "table"}


def load(name="gpucluster-fleet.json"):
    with open(os.path.join(ROLE, "files", "dashboards", name)) as handle:
        return json.load(handle)


def all_panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_every_installed_dashboard_exists_and_parses():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        names = yaml.safe_load(handle)["__monitoring_grafana_dashboards"]
    assert names == sorted(os.listdir(os.path.join(ROLE, "files", "dashboards")))
    for name in names:
        assert load(name)["uid"]


def test_top_level_structure():
    dashboard = load()
    assert dashboard["uid"] == "gpucluster-fleet" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["editable"] is False  # provisioned: changes in the UI would be lost
    assert dashboard["time"]["from"].startswith("now-")


def test_panel_ids_are_unique_and_panels_fit_the_grid():
    panels = list(all_panels(load()))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0 and grid["y"] >= 0
        assert panel["title"]
        if panel["type"] != "row":
            assert panel["description"], panel["title"]


def test_panels_do_not_overlap():
    cells = {}
    for panel in load()["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, "%s overlaps %s" % (panel["title"], cells[(x, y)])
                cells[(x, y)] = panel["title"]


def test_every_query_names_the_provisioned_datasource_and_reads_metrics_that_exist():
    uid = RoleRender("monitoring", None, DEBIAN13).var("__monitoring_grafana_datasource_uid")
    known = known_metrics()
    used = set()
    for panel in all_panels(load()):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= known, (panel["title"], names - known)
            used |= names
    # the fleet view reads GPU and health metrics both
    assert used & counter_fields() and used & health_metrics()
    assert used - PROMETHEUS_METRICS


def test_the_fleet_heatmap_the_health_table_and_the_per_node_rows():
    dashboard = load()
    panels = list(all_panels(dashboard))
    heatmaps = [p for p in panels if p["type"] == "heatmap"]
    assert any("DCGM_FI_DEV_GPU_UTIL" in t["expr"] for p in heatmaps for t in p["targets"])
    tables = [p for p in panels if p["type"] == "table"]
    assert any(t["expr"].startswith("max by (node) (gpucluster_health_status)") for p in tables for t in p["targets"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    repeated = [p for p in panels if p.get("repeat")]
    assert repeated and all(p["repeat"] in variables for p in repeated)
    node = variables["node"]
    assert metric_names(node["query"]["query"].replace("label_values(", "(").split(",")[0] + ")") <= known_metrics()
    per_node = [p for p in panels if p["type"] == "timeseries"]
    assert per_node and all('instance=~"$node"' in t["expr"] for p in per_node for t in p["targets"])


@pytest.mark.parametrize("template", ["grafana-datasource.yml.j2", "grafana-dashboards.yml.j2"])
def test_provisioning_files(template):
    r = RoleRender("monitoring", None, DEBIAN13)
    text = r.template(template)
    assert text.startswith("#")
    document = yaml.safe_load(text)
    assert document["apiVersion"] == 1
    if template == "grafana-datasource.yml.j2":
        source = document["datasources"][0]
        assert (source["uid"], source["type"], source["url"]) == ("gpucluster-prometheus", "prometheus", "http://localhost:9090")
    else:
        assert document["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/gpucluster"
