"""gpucluster.ops.scontrol_nodes: scontrol show node -o read by structure, as the module and the wrapper read it."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.scontrol_nodes import scontrol_nodes

TEXT = ("NodeName=gpu01 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu Reason=rack 3 State=IDLE "
        "[alice@2026-12-01T10:00:00] Comment=(null)\n"
        "NodeName=gpu02 State=MIXED Reason=\n\nNo nodes in the system\n")


def test_an_administrators_reason_holding_state_stays_a_reason():
    assert scontrol_nodes(TEXT) == [{"name": "gpu01", "state": "IDLE+DRAIN", "reason": "rack 3 State=IDLE"},
                                    {"name": "gpu02", "state": "MIXED", "reason": ""}]


def test_lines_as_a_list_give_the_same():
    assert scontrol_nodes(TEXT.splitlines()) == scontrol_nodes(TEXT)


def test_anything_else_is_refused():
    with pytest.raises(AnsibleFilterError, match="scontrol_nodes"):
        scontrol_nodes(42)
