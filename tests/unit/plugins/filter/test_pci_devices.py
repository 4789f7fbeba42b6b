import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.pci_devices import FilterModule, pci_devices

LSPCI = """\
0000:18:00.0 0302: 10de:2330 (rev a1)
0000:2a:00.0 0302: 10de:2330 (rev a1)
0000:05:00.0 0680: 10de:22a3 (rev a1)
3b:00.0 0200: 15b3:1021
garbage line
"""


def test_registered():
    assert FilterModule().filters()["pci_devices"] is pci_devices


def test_parses_device_lines_and_skips_others():
    devices = pci_devices(LSPCI)
    assert devices[0] == {"slot": "0000:18:00.0", "class": "0302", "vendor": "10de", "device": "2330"}
    assert [d["class"] for d in devices] == ["0302", "0302", "0680", "0200"]
    assert devices[3]["slot"] == "3b:00.0"


def test_accepts_lines_and_empty_input():
    assert pci_devices(LSPCI.splitlines()) == pci_devices(LSPCI)
    assert pci_devices("") == []


def test_rejects_other_types():
    with pytest.raises(AnsibleFilterError, match="lspci -n output"):
        pci_devices(42)
