import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.sysctl_differ import FilterModule, sysctl_differ


def res(key, stdout, rc=0):
    return {"item": key, "stdout": stdout, "rc": rc}


def test_registered():
    assert FilterModule().filters()["sysctl_differ"] is sysctl_differ


def test_equal_values_do_not_differ_whatever_the_whitespace():
    results = [res("net.ipv4.tcp_rmem", "4096\t87380\t16777216"), res("vm.swappiness", "10")]
    assert sysctl_differ(results, {"net.ipv4.tcp_rmem": "4096 87380  16777216", "vm.swappiness": 10}) == []


def test_differing_values_are_listed_sorted():
    results = [res("vm.swappiness", "60"), res("kernel.numa_balancing", "1")]
    assert sysctl_differ(results, {"vm.swappiness": 10, "kernel.numa_balancing": False}) == [
        "kernel.numa_balancing", "vm.swappiness"]


def test_booleans_compare_as_numbers():
    assert sysctl_differ([res("kernel.numa_balancing", "0")], {"kernel.numa_balancing": False}) == []


def test_results_for_other_keys_are_ignored():
    assert sysctl_differ([res("vm.other", "1")], {"vm.swappiness": 1}) == []


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="mapping"):
        sysctl_differ([], ["vm.swappiness"])
    with pytest.raises(AnsibleFilterError, match="registered loop result"):
        sysctl_differ([{"stdout": "1"}], {"vm.swappiness": 1})
