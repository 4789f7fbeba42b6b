# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake scontrol over a JSON file of nodes, for the tests that run the drain and health playbooks on this machine
(tests/unit/test_health_sweep_playbook.py, tests/kubernetes/test_k8s_node_health.py): ``show node -o`` and ``update``
as the collection calls them, each call logged beside the file ($FAKE_SLURM_STATE.log)."""

# The script (%(python)s: the Python that runs it): `show node -o` and `update` over a JSON file of nodes, each call logged.
FAKE_SCONTROL = r'''#!%(python)s
import json, os, sys
state = os.environ["FAKE_SLURM_STATE"]
with open(state) as f:
    nodes = json.load(f)
with open(state + ".log", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:] == ["show", "node", "-o"] or sys.argv[1:] == ["show", "node", "--oneliner"]:
    for name, node in sorted(nodes.items()):
        line = "NodeName=%%s Arch=x86_64 CPUAlloc=0 State=%%s ThreadsPerCore=1" %% (name, node["state"])
        if node["reason"]:
            line += " Reason=%%s [root@2026-12-01T05:00:00]" %% node["reason"]
        print(line)
    sys.exit(0)
if sys.argv[1] == "update":
    args = dict(a.split("=", 1) for a in sys.argv[2:])
    node = nodes[args["nodename"]]
    if args["state"].lower() == "drain":
        node["state"], node["reason"] = "IDLE+DRAIN", args["reason"]
    else:
        node["state"], node["reason"] = "IDLE", ""
    with open(state, "w") as f:
        json.dump(nodes, f)
    sys.exit(0)
sys.exit("fake scontrol: unknown call %%r" %% sys.argv[1:])
'''
