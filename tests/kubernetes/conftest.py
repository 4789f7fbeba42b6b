"""The Kubernetes tests: the collection's Kubernetes roles against a real API server (tests/support/k8s_control_plane.py),
started once for the whole run with nodes that kwok stands in for (docs/kubernetes.md). A component that is missing or
does not start fails the run, naming it: never a skip."""

import pytest

from k8s_control_plane import ControlPlane, ensure_binaries

# The GPU nodes of the tests, as the inventory names them and as they join the cluster (kwok stands in for their
# kubelets: they are Ready, their pods Running, and no container runs).
NODES = ["dgx01", "dgx02"]


def recap(out):
    """{host: {ok, changed, ...}} from an ansible-playbook output's PLAY RECAP; an output without one fails (a
    "changes nothing" check on no recap at all would pass)."""
    counters = {line.split()[0]: dict(pair.split("=") for pair in line.split(":", 1)[1].split())
                for line in out.splitlines() if " : ok=" in line}
    assert counters, "no PLAY RECAP in the output: %s" % out[-3000:]
    return counters


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    bin_dir = ensure_binaries()
    control_plane = ControlPlane(bin_dir, str(tmp_path_factory.mktemp("control-plane")))
    try:
        control_plane.start()
        for node in NODES:
            control_plane.add_node(node)
        yield control_plane
    finally:
        control_plane.stop()
