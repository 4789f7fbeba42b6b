# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""prometheus_static_configs: scrape targets from the inventory, with errors that name host, variable and value."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.prometheus_static_configs import (
    FilterModule, prometheus_static_configs)


def test_registered():
    assert FilterModule().filters()["prometheus_static_configs"] is prometheus_static_configs


def test_inventory_name_is_the_address_and_the_instance():
    hostvars = {"gpu01": {}, "gpu02.c.example": {}}
    assert prometheus_static_configs(["gpu01", "gpu02.c.example"], hostvars, port=9100) == [
        {"targets": ["gpu01:9100"], "labels": {"instance": "gpu01", "node": "gpu01"}},
        {"targets": ["gpu02.c.example:9100"], "labels": {"instance": "gpu02.c.example", "node": "gpu02.c.example"}}]


def test_scrape_address_and_port_come_from_host_variables():
    hostvars = {"gpu01": {"monitoring_scrape_address": "10.0.0.1", "dcgm_exporter_port": "9401"},
                "gpu02": {"monitoring_scrape_address": "fd00::2"},
                "gpu03": {"dcgm_exporter_port": ""}}
    configs = prometheus_static_configs(["gpu01", "gpu02", "gpu03"], hostvars, port=9400, port_var="dcgm_exporter_port")
    assert [c["targets"][0] for c in configs] == ["10.0.0.1:9401", "[fd00::2]:9400", "gpu03:9400"]
    assert [c["labels"]["instance"] for c in configs] == ["gpu01", "gpu02", "gpu03"]


def test_expected_gpus_from_the_monitoring_variable_then_the_health_check_expectations():
    hostvars = {"a": {"monitoring_expected_gpus": 4, "health_check_expected": {"gpu_count": 8}},
                "b": {"health_check_expected": {"gpu_count": "8"}},
                "c": {"health_check_expected": {"gpu_model": "NVIDIA H100"}},
                "d": {}}
    configs = prometheus_static_configs(["a", "b", "c", "d"], hostvars, port=9400, expected_gpus=True)
    assert [c["labels"].get("expected_gpus") for c in configs] == ["4", "8", None, None]
    assert "expected_gpus" not in prometheus_static_configs(["a"], hostvars, port=9400)[0]["labels"]


@pytest.mark.parametrize("hostvars,kwargs,message", [
    ({"gpu01": {"monitoring_scrape_address": "10.0.0.300 "}}, {},
     "host gpu01: monitoring_scrape_address is '10.0.0.300 ', which is neither a host name nor an IP address"),
    ({"gpu01": {"dcgm_exporter_port": 70000}}, {"port_var": "dcgm_exporter_port"},
     "host gpu01: dcgm_exporter_port is 70000, which is not a port (1-65535)"),
    ({"gpu01": {"dcgm_exporter_port": True}}, {"port_var": "dcgm_exporter_port"},
     "host gpu01: dcgm_exporter_port is True"),
    ({"gpu01": {"health_check_expected": {"gpu_count": "eight"}}}, {"expected_gpus": True},
     "host gpu01: health_check_expected.gpu_count is 'eight', which is not a GPU count (1-256)"),
    ({"gpu01": {"monitoring_expected_gpus": 0}}, {"expected_gpus": True},
     "host gpu01: monitoring_expected_gpus is 0"),
])
def test_bad_values_name_host_variable_and_value(hostvars, kwargs, message):
    with pytest.raises(AnsibleFilterError) as error:
        prometheus_static_configs(["gpu01"], hostvars, port=9400, **kwargs)
    assert message in str(error.value)


def test_two_hosts_at_one_target_and_other_misuse():
    hostvars = {"a": {"monitoring_scrape_address": "10.0.0.1"}, "b": {"monitoring_scrape_address": "10.0.0.1"}}
    with pytest.raises(AnsibleFilterError, match="hosts a and b would both be scraped at 10.0.0.1:9100"):
        prometheus_static_configs(["a", "b"], hostvars, port=9100)
    with pytest.raises(AnsibleFilterError, match="expects a list of host names"):
        prometheus_static_configs("gpu01", {"gpu01": {}}, port=9100)
    with pytest.raises(AnsibleFilterError, match="needs the exporter's port"):
        prometheus_static_configs(["gpu01"], {"gpu01": {}})
    with pytest.raises(AnsibleFilterError, match="host ghost is not in the inventory"):
        prometheus_static_configs(["ghost"], {}, port=9100)
    with pytest.raises(AnsibleFilterError, match="its inventory name is 'bad name'"):
        prometheus_static_configs(["bad name"], {"bad name": {}}, port=9100)


def test_the_node_label_is_the_nodes_slurm_name():
    hostvars = {"gpu01": {"health_check_node_name": "dgx-a-01"}, "gpu02": {"health_check_node_name": ""}}
    configs = prometheus_static_configs(["gpu01", "gpu02"], hostvars, port=9100)
    assert [c["labels"] for c in configs] == [{"instance": "gpu01", "node": "dgx-a-01"},
                                              {"instance": "gpu02", "node": "gpu02"}]
