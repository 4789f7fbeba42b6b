# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm accounting state through sacctmgr: the runner the QOS and account modules share.

Standard library only. sacctmgr's exit code and messages say nothing reliable about what changed ("Nothing new
added." exits 1, an identical "modify" exits 0, ``GrpTRESMins=gres/gpu=abc`` stores 0 and exits 0, an unknown flag
is dropped without a word), so every decision comes from ``sacctmgr -n -P show ... format=...`` before and after:
``plan_*`` compares the wanted objects with what Slurm shows and returns the commands that make them equal,
``verify_*`` compares again after the commands ran and lists whatever Slurm stored differently. The QOS are in
``_sacctmgr_qos``, accounts and users in ``_sacctmgr_account``, the values (TRES, times, names) in ``_slurm_values``.

``run`` is any callable taking an argv list and returning ``(rc, stdout, stderr)`` (``module.run_command`` with
``LC_ALL=C`` in the modules, a fake sacctmgr in the unit tests).
"""

from __future__ import absolute_import, division, print_function

import shlex

__metaclass__ = type


class SacctmgrError(Exception):
    """sacctmgr could not be read, refused a command, or stored something other than what was asked."""


class Sacctmgr(object):
    """Runs sacctmgr; every read is ``-n -P show``, every change ``-i``."""

    def __init__(self, run, path="sacctmgr"):
        self._run = run
        self.path = path
        self.commands = []

    def show(self, entity, fields, where=()):
        argv = [self.path, "-n", "-P", "show", entity] + list(where) + ["format=" + ",".join(fields)]
        rc, out, err = self._run(argv)
        if rc != 0:
            raise SacctmgrError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()))
        rows = []
        for line in out.splitlines():
            if not line.strip():
                continue
            cells = line.split("|")
            if len(cells) > len(fields):      # only the last field (a description) may hold '|'
                cells = cells[:len(fields) - 1] + ["|".join(cells[len(fields) - 1:])]
            if len(cells) < len(fields):
                raise SacctmgrError("%s printed a line with %d of %d fields: %r"
                                    % (" ".join(argv), len(cells), len(fields), line))
            rows.append(dict(zip(fields, [c.strip() for c in cells])))
        return rows

    def change(self, args):
        """Run ``sacctmgr -i ARGS``; return (rc, output). The caller reads the result back, not the exit code."""
        argv = [self.path, "-i"] + list(args)
        self.commands.append(argv)
        rc, out, err = self._run(argv)
        return rc, "\n".join(t.strip() for t in (out, err) if t and t.strip())

    def clusters(self):
        return [row["Cluster"] for row in self.show("cluster", ["Cluster"]) if row["Cluster"]]

    def tres_names(self):
        names = set()
        for row in self.show("tres", ["Type", "Name"]):
            names.add("%s/%s" % (row["Type"], row["Name"]) if row["Name"] else row["Type"])
        return names

    def qos_names(self):
        return set(row["Name"] for row in self.show("qos", ["Name"]))


def resolve_cluster(sacct, cluster):
    """The cluster to work on: the given one (it must exist) or the only one slurmdbd knows."""
    known = sacct.clusters()
    if cluster:
        if cluster not in known:
            raise SacctmgrError("cluster %r is not registered in slurmdbd (known: %s)"
                                % (cluster, ", ".join(known) or "none"))
        return cluster
    if len(known) != 1:
        raise SacctmgrError("slurmdbd knows %d clusters (%s): name one with the cluster option"
                            % (len(known), ", ".join(known) or "none"))
    return known[0]


def differences(have, want, fields):
    """``{field: (have's value, wanted value)}`` for the ``fields`` that ``want`` manages (not None) and that differ;
    ``have`` None is an object that does not exist yet."""
    diff = {}
    for field in fields:
        value = want.get(field)
        if value is None:
            continue
        current = have.get(field) if have else None
        if current != value:
            diff[field] = (current, value)
    return diff


def jsonable(diff):
    """``{field: (have, want)}`` as the JSON the modules return: ``{field: [have, want]}``."""
    return dict((k, [v[0], v[1]]) for k, v in diff.items())


def apply(sacct, actions):
    """Run the planned commands in order; return their outputs (for error messages, never for decisions)."""
    outputs = []
    for action in actions:
        rc, output = sacct.change(action["args"])
        outputs.append({"command": command_line(action), "rc": rc, "output": output})
    return outputs


def command_line(action):
    """The command of one action as a shell would show it."""
    return " ".join(shlex.quote(arg) for arg in ["sacctmgr", "-i"] + action["args"])


def command_lines(actions):
    return [command_line(action) for action in actions]
