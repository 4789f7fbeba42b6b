"""A site run leaves Slurm's view consistent with its own health verdicts in that run (issue 45): a node the health
checks drained on a verdict that no longer holds (the lab's expected driver version corrected in the inventory) is
resumed by the run, a node with errors still in service is drained by it with the checker's codes, and a node an
operator drained is left as it is. slurmd's HealthCheckProgram is silenced here, so only the site run can have done
it. Debian 12 only: the operations role's drain is the same on both releases.
"""

import pytest

from conftest import node_records, set_faults

pytestmark = pytest.mark.release("debian12")

# Rows pending remap on one GPU: an error at the site run's (and the wrapper's) level.
FAULTS = [{"name": "row_remap_pending", "gpu": 3}]
STALE = "gpucluster-health: GPU-DRIVER-VERSION"
OPERATOR_REASON = "operator: cable swap"


@pytest.fixture(scope="module", autouse=True)
def silenced(wrapper_silenced):
    return wrapper_silenced


def test_the_site_run_resumes_a_healed_node_and_drains_an_erring_one_in_that_run(scenario, ctl, tmp_path):
    compute = scenario.compute
    faulty, healed = scenario.groups["gpu_a100"][0], [h for h in compute if h not in scenario.groups["gpu_a100"]][0]
    for host in compute:
        set_faults(scenario, host, [])
        ctl.check_output("scontrol update nodename=%s state=resume || true" % host)
    # The picture before the run: the healthy node drained by the health checks on a stale verdict, the faulty node
    # in service.
    ctl.check_output("scontrol update nodename=%s state=drain reason='%s'" % (healed, STALE))
    set_faults(scenario, faulty, FAULTS)
    try:
        # The checks part of the site run: the health checks, their verdicts into Slurm, the summary.
        rc, out = scenario.playbook(tmp_path, args=["--tags", "checks"])
        assert rc == 0, out[-4000:]
        records = node_records(ctl, [faulty, healed])
        assert records[healed]["State"] == "IDLE" and records[healed]["Reason"] in ("", "none"), records
        assert "DRAIN" in records[faulty]["State"], records
        reason = records[faulty]["Reason"]
        assert reason.startswith("gpucluster-health: ") and "GPU-ROW-REMAP-PENDING gpu3" in reason, records
        # A second run changes nothing in Slurm; an operator's drain is never touched.
        ctl.check_output("scontrol update nodename=%s state=resume" % faulty)
        ctl.check_output("scontrol update nodename=%s state=drain reason='%s'" % (faulty, OPERATOR_REASON))
        rc, out = scenario.playbook(tmp_path, args=["--tags", "checks"])
        assert rc == 0, out[-4000:]
        # Slurm may append who and when ("[root@...]")
        assert node_records(ctl, [faulty])[faulty]["Reason"].startswith(OPERATOR_REASON), node_records(ctl, [faulty])
    finally:
        set_faults(scenario, faulty, [])
        for host in compute:
            ctl.check_output("scontrol update nodename=%s state=resume || true" % host)
