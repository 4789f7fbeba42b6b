"""The sacctmgr runner and what the QOS and account halves share (their plans: tests/unit/plugins/modules)."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _sacctmgr
from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr_qos import QOS_FORMAT, read_qos


def test_unreadable_qos_output_is_a_sacctmgr_error_naming_the_qos():
    row = {"Name": "research", "Priority": "10", "Flags": "", "GrpTRES": "gres/gpu=lots", "GrpTRESMins": "",
           "Preempt": "", "PreemptMode": "", "PreemptExemptTime": "", "Description": ""}
    sacct = _sacctmgr.Sacctmgr(lambda argv: (0, "|".join(row[f] for f in QOS_FORMAT) + "\n", ""))
    with pytest.raises(_sacctmgr.SacctmgrError) as caught:
        read_qos(sacct)
    assert "qos research: cannot read TRES count 'gres/gpu=lots'" in str(caught.value)


def test_short_line_and_commands():
    sacct = _sacctmgr.Sacctmgr(lambda argv: (0, "a|1\n", ""))
    with pytest.raises(_sacctmgr.SacctmgrError, match="printed a line with 2 of 3 fields"):
        sacct.show("qos", ["Name", "Priority", "Description"])
    action = {"args": ["modify", "qos", "where", "name=a", "set", "Description=two words"]}
    assert _sacctmgr.command_lines([action]) == ["sacctmgr -i modify qos where name=a set 'Description=two words'"]
    assert _sacctmgr.jsonable({"priority": (1, 2)}) == {"priority": [1, 2]}
