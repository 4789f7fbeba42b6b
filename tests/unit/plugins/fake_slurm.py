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

Reservations (``FakeSlurm.add_reservation``, ``reservations``): ``scontrol show reservation -o`` in the shape of
``version`` (``"22.05"`` prints ``Watts=n/a``; ``"24.11"`` does not, and drops IGNORE_JOBS on any update, as the
real 24.11 does), ``No reservations in the system`` when there is none; ``scontrol create reservation``, ``scontrol
update reservationname=...`` (``flags+=``/``flags-=``, ``starttime=now``; a started reservation refuses a new start)
and ``scontrol delete reservationname=...`` with Slurm's messages. ``resv_now`` is the controller's clock (a naive
datetime); ``ignore_updates`` makes create/update/delete exit 0 and change nothing too.
"""

import datetime

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
        self.reservations = {}
        self.resv_order = []
        self.version = "22.05"
        self.resv_now = datetime.datetime(2026, 12, 1, 10, 0, 0)

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
        if program == "scontrol" and argv[1:] == ["show", "reservation", "-o"]:
            return 0, self._show_reservations(), ""
        if program == "scontrol" and argv[1:3] == ["create", "reservation"]:
            return self._create_reservation(argv[3:])
        if program == "scontrol" and argv[1] == "update" and argv[2].startswith("reservationname="):
            return self._update_reservation(argv[2:])
        if program == "scontrol" and argv[1] == "delete":
            return self._delete_reservation(argv[2:])
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

    # -- reservations --------------------------------------------------------------------------------------------
    def add_reservation(self, name, start, end, nodes="", node_count=None, flags="", users="", accounts="",
                        partition=""):
        """A reservation as Slurm holds it: times ``YYYY-MM-DDTHH:MM:SS``, lists as comma strings."""
        self.reservations[name] = dict(start=start, end=end, nodes=nodes, flags=flags, users=users,
                                       accounts=accounts, partition=partition,
                                       count=node_count if node_count is not None else len(_hostlist.expand(nodes)))
        if name not in self.resv_order:
            self.resv_order.append(name)

    def resv_changes(self):
        """The reservation commands that change something, as argv lists without the program."""
        return [argv[1:] for argv in self.calls if argv[1:2] in (["create"], ["delete"])
                or argv[1:2] == ["update"] and argv[2].startswith("reservationname=")]

    @staticmethod
    def _time(text):
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")

    def _show_reservations(self):
        if not self.resv_order:
            return "No reservations in the system\n"
        lines = []
        for name in self.resv_order:
            r = self.reservations[name]
            start, end = self._time(r["start"]), self._time(r["end"])
            seconds = int((end - start).total_seconds())
            days, rest = divmod(seconds, 86400)
            duration = "%02d:%02d:%02d" % (rest // 3600, rest % 3600 // 60, rest % 60)
            state = "ACTIVE" if start <= self.resv_now < end else "INACTIVE"
            lines.append(
                "ReservationName=%s StartTime=%s EndTime=%s Duration=%s Nodes=%s NodeCnt=%d CoreCnt=%d "
                "Features=(null) PartitionName=%s Flags=%s TRES=cpu=%d Users=%s Groups=(null) Accounts=%s "
                "Licenses=(null) State=%s BurstBuffer=(null) %sMaxStartDelay=(null)"
                % (name, r["start"], r["end"], ("%d-" % days if days else "") + duration, r["nodes"] or "(null)",
                   r["count"], 128 * r["count"], r["partition"] or "(null)", r["flags"], 128 * r["count"],
                   r["users"] or "(null)", r["accounts"] or "(null)", state,
                   "Watts=n/a " if self.version == "22.05" else ""))
        return "\n".join(lines) + "\n"

    def _args(self, tail):
        args = []
        for item in tail:
            key, value = item.split("=", 1)
            args.append((key.lower(), value))
        return args

    def _apply(self, r, args, creating):
        """Apply ``key=value`` arguments to reservation ``r``; return an error message or None."""
        duration = None
        for key, value in args:
            if key == "starttime":
                if not creating and self._time(r["start"]) <= self.resv_now:
                    return "Error updating the reservation: Reservation already started"
                r["start"] = self.resv_now.strftime("%Y-%m-%dT%H:%M:%S") if value == "now" else value
            elif key == "endtime":
                r["end"] = value
            elif key == "duration":
                parts = value.split("-")
                hours, minutes, seconds = (int(p) for p in parts[-1].split(":"))
                duration = (int(parts[0]) * 24 if len(parts) > 1 else 0) * 3600 + hours * 3600 + minutes * 60 + seconds
            elif key == "nodes":
                r["nodes"] = _hostlist.fold(_hostlist.expand(value))
                r["count"] = len(_hostlist.expand(value))
                if "SPEC_NODES" not in r["flags"].split(","):
                    r["flags"] = ",".join([f for f in r["flags"].split(",") if f] + ["SPEC_NODES"])
            elif key == "nodecnt":
                r["count"] = int(value)
                r["nodes"] = _hostlist.fold(self.order[:int(value)])
            elif key.startswith("flags"):
                given = [f.upper() for f in value.split(",")]
                bad = [f for f in given if f not in _FLAGS]
                if bad:
                    return "scontrol: error: Error parsing flags %s.  No reservation created." % value
                have = [f for f in r["flags"].split(",") if f]
                if key == "flags-":
                    have = [f for f in have if f not in given]
                else:
                    have = [f for f in have if f != "SPEC_NODES"] + [f for f in given if f not in have]
                    have += ["SPEC_NODES"] if "SPEC_NODES" in r["flags"].split(",") else []
                r["flags"] = ",".join(have)
            elif key in ("users", "accounts"):
                r[key] = value
            elif key == "partitionname":
                r["partition"] = value
            elif key != "reservationname":
                raise AssertionError("the fake Slurm does not know the reservation argument %r" % key)
        if duration is not None:
            r["end"] = (self._time(r["start"]) + datetime.timedelta(seconds=duration)).strftime("%Y-%m-%dT%H:%M:%S")
        if not r["users"] and not r["accounts"]:
            return "Error creating the reservation: Invalid user id"
        return None

    def _create_reservation(self, tail):
        args = self._args(tail)
        name = dict(args)["reservationname"]
        if name in self.reservations:
            return 1, "", "Error creating the reservation: Duplicate reservation name\n"
        r = dict(start="", end="", nodes="", flags="", users="", accounts="", partition="", count=0)
        problem = self._apply(r, args, True)
        if problem:
            return 1, "", problem + "\n"
        if r["nodes"] and "SPEC_NODES" not in r["flags"].split(",") and "nodecnt" not in dict(args):
            r["flags"] = ",".join([f for f in r["flags"].split(",") if f] + ["SPEC_NODES"])
        if not self.ignore_updates:
            self.reservations[name] = r
            self.resv_order.append(name)
        return 0, "Reservation created: %s\n" % name, ""

    def _update_reservation(self, tail):
        args = self._args(tail)
        name = dict(args)["reservationname"]
        if name not in self.reservations:
            return 1, "", "Error updating the reservation: Requested reservation is invalid\n"
        r = dict(self.reservations[name])
        problem = self._apply(r, args, False)
        if problem:
            return 1, "", problem + "\n" + "slurm_update error: " + problem.split(": ", 1)[1] + "\n"
        if self.version != "22.05":
            r["flags"] = ",".join(f for f in r["flags"].split(",") if f and f != "IGNORE_JOBS")
        if not self.ignore_updates:
            self.reservations[name] = r
        return 0, "Reservation updated.\n", ""

    def _delete_reservation(self, tail):
        name = dict(self._args(tail))["reservationname"]
        if name not in self.reservations:
            return 1, "", "delete_reservation reservationname=%s: Requested reservation is invalid\n" % name
        if not self.ignore_updates:
            del self.reservations[name]
            self.resv_order.remove(name)
        return 0, "", ""


_FLAGS = ("ANY_NODES", "DAILY", "FIRST_CORES", "FLEX", "HOURLY", "IGNORE_JOBS", "LICENSE_ONLY", "MAGNETIC", "MAINT",
          "NO_HOLD_JOBS_AFTER_END", "OVERLAP", "PART_NODES", "PURGE_COMP", "REPLACE", "REPLACE_DOWN", "STATIC_ALLOC",
          "TIME_FLOAT", "USER_DELETE", "WEEKDAY", "WEEKEND", "WEEKLY", "SPEC_NODES")
