"""The Kubernetes tests: the collection's Kubernetes roles against a real API server (tests/support/k8s_control_plane.py),
started once for the whole run with nodes that kwok stands in for (docs/kubernetes.md). A component that is missing or
does not start fails the run, naming it: never a skip."""

import pytest

from k8s_control_plane import ControlPlane, ensure_binaries

# The GPU nodes of the tests, as the inventory names them and as they join the cluster (kwok stands in for their
# kubelets: they are Ready, their pods Running, and no container runs).
NODES = ["dgx01", "dgx02"]


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
