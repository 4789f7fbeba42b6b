"""playbooks/health_sweep.yml over real ssh: its fast path (gpucluster.ops.health_fanout, one task on the controller
probing every node), its per-host tasks (-e health_sweep_fanout=false) and its module path, against simulated GPU
nodes that are real sshd servers in network namespaces of their own (bench/fleet_sweep.py, at a test's size).

The fleet report must be the same from the three (the fields that say when and by which path a record was made
aside), with the simulated faults found, and the fast path must have checked every node itself: the per-host probe
task ran on none. Needs root, iproute2, util-linux, overlayfs, the ssh client and an sshd (the machine's, or Debian's
openssh-server unpacked by the bench); skips otherwise. Everything the bench makes lives in its own namespaces and a
tmpfs and goes when it exits. Times are printed by the bench, never judged here.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "bench", "fleet_sweep.py")
# 38 nodes: node 37 is the first with a simulated fault (GPU 2 fallen off the bus, bench/fleet_sweep.py node_faults).
NODES = 38

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen")),
                       reason="needs iproute2, util-linux and the OpenSSH client"),
]


def test_the_fast_path_checks_every_node_itself_and_reports_what_the_other_paths_report():
    proc = subprocess.run([sys.executable, BENCH, "--sizes", str(NODES), "--paths", "floor,fast,tasks,module"],
                          capture_output=True, text=True, check=False, cwd=ROOT, timeout=1200,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections")))
    out = proc.stdout + proc.stderr
    print(out)
    assert proc.returncode == 0, out[-4000:]
    assert "exited" not in out.split("health sweep over real ssh", 1)[-1], out[-4000:]
    assert re.search(r"nodes the fast path left to their own tasks \(the per-host probe ran on them\): 0$", out, re.M), out
    for path in ("fast", "tasks"):
        line = re.search(r"fleet\.json, %s path against module path .*$" % path, out, re.M)
        assert line, (path, out[-3000:])
        assert ": the same; summary " in line.group(0), line.group(0)
        # one node in 37 has a GPU off the bus: an error, never OK; nothing unknown or unreachable
        assert '"error": 1, "nodes": %d, "ok": %d, "unknown": 0, "unreachable": 0' % (NODES, NODES - 1) in line.group(0), \
            line.group(0)
