# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake scontrol and squeue for unit tests: nodes with a state and reason, jobs that end at a time, a clock.

Call it with an argv list as ``module.run_command`` would be; it returns (rc, stdout, stderr). It answers
``scontrol show node -o`` (one line per node in the shape of Slurm 22.05/24.11, the reason followed by the
``[user@time]`` stamp scontrol appends), ``scontrol update nodename=N state=drain|resume [reason=R]`` (a drain adds
the DRAIN flag, a resume drops it and the reason, as slurmctld does) and ``squeue -h -w HOSTLIST -t
RUNNING,COMPLETING -o %N`` (the node list of every job still running on one of the nodes). ``sleep`` advances the
clock, so a test patches ``_slurm_nodes._sleep``/``_now`` with ``sleep``/``now``. ``fail`` maps an argv prefix
(tuple) to (rc, stdout, stderr) to answer instead; ``ignore_updates`` makes updates exit 0 and change nothing.
"""

from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist


class FakeSlurm(object):

    def __init__(self, nodes, jobs=None):
        """``nodes``: [(name, state, reason)]; ``jobs``: {hostlist: end time}, running until the clock reaches it."""
        self.nodes = dict((name, {"state": state, "reason": reason}) for name, state, reason in nodes)
        self.order = [name for name, _state, _reason in nodes]
        self.jobs = dict(jobs or {})
        self.clock = 0.0
        self.calls = []
        self.fail = {}
        self.ignore_updates = False

    # -- the clock -----------------------------------------------------------------------------------------------
    def now(self):
        return self.clock

    def sleep(self, seconds):
        assert seconds >= 0
        self.clock += seconds

    # -- commands ------------------------------------------------------------------------------------------------
    def updates(self):
        """The scontrol update commands run, as argv lists without the program."""
        return [argv[1:] for argv in self.calls if argv[1:2] == ["update"]]

    def __call__(self, argv, **kwargs):
        argv = list(argv)
        self.calls.append(argv)
        assert kwargs.get("environ_update", {}).get("LC_ALL") == "C", "run without LC_ALL=C: %r" % (argv,)
        for prefix, answer in self.fail.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        program = argv[0].rsplit("/", 1)[-1]
        if program == "scontrol" and argv[1:] == ["show", "node", "-o"]:
            return 0, self._show(), ""
        if program == "scontrol" and argv[1] == "update":
            return self._update(dict(a.split("=", 1) for a in argv[2:]))
        if program == "squeue":
            return self._squeue(argv)
        raise AssertionError("the fake Slurm does not know %r" % (argv,))

    def _show(self):
        lines = []
        for name in self.order:
            node = self.nodes[name]
            reason = node["reason"] + " [root@2026-12-01T10:00:00]" if node["reason"] else ""
            lines.append("NodeName=%s Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=128 State=%s ThreadsPerCore=2 "
                         "CfgTRES=cpu=128,mem=1000G,billing=128,gres/gpu=8 Partitions=gpu Reason=%s"
                         % (name, node["state"], reason))
        return "\n".join(lines) + "\n"

    def _update(self, args):
        names = _hostlist.expand(args["nodename"])
        unknown = [n for n in names if n not in self.nodes]
        if unknown:
            return 1, "", "scontrol: error: Invalid node name specified\n"
        if self.ignore_updates:
            return 0, "", ""
        for name in names:
            node = self.nodes[name]
            parts = node["state"].split("+")
            if args["state"] == "drain":
                if "reason" not in args:
                    return 1, "", "You must specify a reason when DRAINING a node\n"
                if "DRAIN" not in parts:
                    parts.append("DRAIN")
                node["reason"] = args["reason"]
            elif args["state"] == "resume":
                parts = [p for p in parts if p != "DRAIN"]
                node["reason"] = ""
            node["state"] = "+".join(parts)
        return 0, "", ""

    def _squeue(self, argv):
        assert argv[1:3] == ["-h", "-w"] and argv[4:] == ["-t", "RUNNING,COMPLETING", "-o", "%N"], argv
        wanted = set(_hostlist.expand(argv[3]))
        lines = [hostlist for hostlist, end in self.jobs.items()
                 if end > self.clock and wanted & set(_hostlist.expand(hostlist))]
        return 0, "".join(line + "\n" for line in lines), ""
