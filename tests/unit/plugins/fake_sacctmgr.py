# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake sacctmgr for unit tests: an in-memory accounting database that answers the commands the modules send.

It copies what real sacctmgr 22.05/24.11 did in the team-quota experiments (see ../shared/docs/slurm-facts.md):
``add`` of an existing QOS prints "Nothing new added." and exits 1, an identical ``modify`` exits 0, a non-numeric
TRES count is stored as 0 with rc 0, unknown flags are dropped, a bare number as a time means minutes, deleting a
user's default association empties its default account, deleting a user's last association deletes the user,
descriptions and organizations are stored in lower case. ``coerce`` lets a test make it store something else than
asked (a silent coercion), ``fail_on`` makes a command fail without changing anything.
"""

import re

FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
         "PartitionMinNodes", "PartitionTimeLimit", "Relative", "RequiresReservation", "UsageFactorSafe")


def _time(text):
    if text in ("", "-1"):
        return ""
    match = re.match(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$", text)
    days, a, b, c = match.groups()
    if days is not None:
        h, m, s = int(a), int(b or 0), int(c or 0)
    elif c is not None:
        h, m, s = int(a), int(b), int(c)
    elif b is not None:
        h, m, s = 0, int(a), int(b)
    else:
        h, m, s = 0, int(a), 0          # a bare number is minutes
    total = ((int(days or 0) * 24 + h) * 60 + m) * 60 + s
    d, rest = divmod(total, 86400)
    out = "%02d:%02d:%02d" % (rest // 3600, rest % 3600 // 60, rest % 60)
    return "%d-%s" % (d, out) if d else out


def _tres_update(current, text):
    for item in text.split(","):
        name, _sep, value = item.rpartition("=")
        if value == "-1":
            current.pop(name, None)
        else:
            current[name] = value if value.isdigit() else "0"
    return current


class FakeSacctmgr(object):
    """Call it with an argv list; it returns (rc, stdout, stderr) like module.run_command."""

    def __init__(self, clusters=("lab",), tres=("gres/gpu", "gres/gpu:a100", "gres/gpu:h100")):
        self.clusters = list(clusters)
        self.tres = ["cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"] + list(tres)
        self.qos = {"normal": self._new_qos("normal", "Normal QOS default")}
        self.accounts = {"root": {"Description": "default root account", "Organization": "root"}}
        self.assocs = []
        for cluster in self.clusters:
            self.assocs.append({"Cluster": cluster, "Account": "root", "ParentName": "", "User": "", "Partition": "",
                                "QOS": "normal", "DefaultQOS": ""})
            self.assocs.append({"Cluster": cluster, "Account": "root", "ParentName": "", "User": "root",
                                "Partition": "", "QOS": "normal", "DefaultQOS": ""})
        self.users = {"root": "root"}
        self.calls = []
        self.changes = []
        self.coerce = {}
        self.fail_on = None

    @staticmethod
    def _new_qos(name, description=None):
        return {"Name": name, "Priority": "0", "Flags": "", "GrpTRES": {}, "GrpTRESMins": {}, "Preempt": "",
                "PreemptMode": "cluster", "PreemptExemptTime": "", "Description": description or name}

    # -- dispatch ------------------------------------------------------------------------------------------------
    def __call__(self, argv, **_kwargs):
        argv = list(argv)
        self.calls.append(argv)
        words = [a for a in argv[1:] if a not in ("-n", "-P", "-i")]
        verb, entity, rest = words[0].lower(), words[1].lower(), words[2:]
        if verb == "show":
            return self._show(entity, rest)
        self.changes.append(argv)
        if self.fail_on and self.fail_on in " ".join(argv):
            return 1, "", "sacctmgr: error: simulated failure"
        return getattr(self, "_%s_%s" % (verb, entity))(rest)

    @staticmethod
    def _split(rest):
        """(positional, where, set) of key=value pairs, keys lower-cased."""
        positional, where, assign, mode = [], {}, {}, "plain"
        for word in rest:
            low = word.lower()
            if low == "where":
                mode = "where"
                continue
            if low == "set":
                mode = "set"
                continue
            if "=" in word:
                key, _sep, value = word.partition("=")
                (assign if mode in ("set", "plain") else where)[key.lower()] = value
            else:
                positional.append(word)
        return positional, where, assign

    # -- show ----------------------------------------------------------------------------------------------------
    def _show(self, entity, rest):
        _pos, where, assign = self._split(rest)
        fields = (assign.pop("format", None) or where.pop("format")).split(",")
        rows = []
        if entity == "qos":
            for qos in self.qos.values():
                row = dict(qos)
                row["GrpTRES"] = ",".join("%s=%s" % kv for kv in qos["GrpTRES"].items())
                row["GrpTRESMins"] = ",".join("%s=%s" % kv for kv in qos["GrpTRESMins"].items())
                rows.append(row)
        elif entity == "cluster":
            rows = [{"Cluster": c} for c in self.clusters]
        elif entity == "tres":
            rows = [{"Type": t.partition("/")[0], "Name": t.partition("/")[2]} for t in self.tres]
        elif entity == "account":
            rows = [dict(a, Account=name) for name, a in sorted(self.accounts.items())]
        elif entity == "assoc":
            rows = [dict(a, Fairshare=a.get("Fairshare", "1")) for a in self.assocs
                    if "cluster" not in where or a["Cluster"] == where["cluster"]]
        elif entity == "user":
            rows = [{"User": u, "DefaultAccount": d} for u, d in sorted(self.users.items())]
        out = "".join("|".join(str(row.get(f, "")) for f in fields) + "\n" for row in rows)
        return 0, out, ""

    # -- qos -----------------------------------------------------------------------------------------------------
    def _set_qos(self, qos, assign):
        for key, value in assign.items():
            value = self.coerce.get(("qos", qos["Name"], key), value)
            if key == "priority":
                qos["Priority"] = "0" if value.startswith("-") else str(int(value))
            elif key == "flags":
                qos["Flags"] = "" if value == "-1" else ",".join(
                    f for f in FLAGS if any(v.lower().startswith(f.lower()) for v in value.split(",")))
            elif key in ("grptres", "grptresmins"):
                target = "GrpTRES" if key == "grptres" else "GrpTRESMins"
                qos[target] = _tres_update(qos[target], value)
            elif key == "preempt":
                qos["Preempt"] = value
            elif key == "preemptmode":
                qos["PreemptMode"] = value.lower()
            elif key == "preemptexempttime":
                qos["PreemptExemptTime"] = _time(value)
            elif key == "description":
                qos["Description"] = value.lower()
            else:
                raise AssertionError("fake sacctmgr does not know qos key %s" % key)

    def _add_qos(self, rest):
        positional, _where, assign = self._split(rest)
        name = positional[0]
        if name in self.qos:
            return 1, " Nothing new added.\n", ""
        self.qos[name] = self._new_qos(name, (assign.get("description") or "").lower() or None)
        self._set_qos(self.qos[name], assign)
        return 0, " Adding QOS(s)\n  %s\n" % name, ""

    def _modify_qos(self, rest):
        _pos, where, assign = self._split(rest)
        qos = self.qos.get(where["name"])
        if qos is None:
            return 1, " Nothing modified\n", ""
        self._set_qos(qos, assign)
        return 0, " Modified qos...\n  %s\n" % qos["Name"], ""

    def _delete_qos(self, rest):
        _pos, where, _assign = self._split(rest)
        if self.qos.pop(where["name"], None) is None:
            return 1, " Nothing deleted\n", ""
        return 0, " Deleting QOS(s)...\n", ""

    # -- accounts ------------------------------------------------------------------------------------------------
    def _account_assoc(self, cluster, name):
        for assoc in self.assocs:
            if assoc["Cluster"] == cluster and assoc["Account"] == name and not assoc["User"]:
                return assoc
        return None

    def _check_qos(self, value):
        for qos in value.split(","):
            if qos and qos not in self.qos:
                return False
        return True

    def _add_account(self, rest):
        positional, _where, assign = self._split(rest)
        name, cluster = positional[0], assign["cluster"]
        if self._account_assoc(cluster, name):
            return 1, " Nothing new added.\n", ""
        if not self._check_qos(assign.get("qos", "")):
            return 1, "", "sacctmgr: error: You gave a bad qos"
        record = self.accounts.setdefault(name, {"Description": name, "Organization": name})
        if "description" in assign:
            record["Description"] = assign["description"].lower()
        if "organization" in assign:
            record["Organization"] = assign["organization"].lower()
        self.assocs.append({"Cluster": cluster, "Account": name, "ParentName": assign.get("parent", "root"),
                            "User": "", "Partition": "", "QOS": assign.get("qos", "normal"),
                            "DefaultQOS": assign.get("defaultqos", ""), "Fairshare": assign.get("fairshare", "1")})
        return 0, " Adding Account(s)\n", ""

    def _modify_account(self, rest):
        _pos, where, assign = self._split(rest)
        name, cluster = where["name"], where["cluster"]
        assoc = self._account_assoc(cluster, name)
        if assoc is None:
            return 1, " Nothing modified\n", ""
        for key, value in assign.items():
            value = self.coerce.get(("account", name, key), value)
            if key in ("description", "organization"):
                self.accounts[name][key.capitalize()] = value.lower()
            elif key == "parent":
                assoc["ParentName"] = value
            elif key == "fairshare":
                assoc["Fairshare"] = value
            elif key in ("qos", "defaultqos"):
                if not self._check_qos(value):
                    return 1, "", "sacctmgr: error: You gave a bad qos"
                for other in self.assocs:
                    if other["Cluster"] == cluster and other["Account"] == name:
                        other["QOS" if key == "qos" else "DefaultQOS"] = value
            else:
                raise AssertionError("fake sacctmgr does not know account key %s" % key)
        return 0, " Modified accounts...\n", ""

    def _delete_account(self, rest):
        _pos, where, _assign = self._split(rest)
        name, cluster = where["name"], where.get("cluster")
        gone = [a for a in self.assocs if a["Account"] == name and (cluster is None or a["Cluster"] == cluster)]
        if not gone:
            return 1, " Nothing deleted\n", ""
        self.assocs = [a for a in self.assocs if a not in gone]
        for user, default in list(self.users.items()):
            if default == name:
                self.users[user] = ""
        return 0, " Deleting account associations...\n", ""

    # -- users ---------------------------------------------------------------------------------------------------
    def _add_user(self, rest):
        positional, _where, assign = self._split(rest)
        name, account, cluster = positional[0], assign["account"], assign["cluster"]
        partition = assign.get("partition", "")
        parent = self._account_assoc(cluster, account)
        if parent is None:
            return 1, " This account '%s' doesn't exist.\n Nothing new added.\n" % account, ""
        if any(a for a in self.assocs if (a["Cluster"], a["Account"], a["User"], a["Partition"])
               == (cluster, account, name, partition)):
            return 1, " Nothing new added.\n", ""
        if name not in self.users or not self.users[name]:
            if "defaultaccount" not in assign and name not in self.users:
                return 1, "", "sacctmgr: error: Need a default account for these users"
            self.users[name] = assign.get("defaultaccount", self.users.get(name) or account)
        self.assocs.append({"Cluster": cluster, "Account": account, "ParentName": "", "User": name,
                            "Partition": partition, "QOS": parent["QOS"], "DefaultQOS": parent["DefaultQOS"]})
        return 0, " Adding User(s)\n", ""

    def _modify_user(self, rest):
        _pos, where, assign = self._split(rest)
        name = where["name"]
        if name not in self.users:
            return 1, " Nothing modified\n", ""
        value = self.coerce.get(("user", name, "defaultaccount"), assign["defaultaccount"])
        if not any(a for a in self.assocs if a["User"] == name and a["Account"] == value):
            return 1, "", "sacctmgr: error: User %s does not have an association with account %s" % (name, value)
        self.users[name] = value
        return 0, " Modified users...\n", ""

    def _delete_user(self, rest):
        _pos, where, _assign = self._split(rest)
        name = where["name"]
        gone = [a for a in self.assocs if a["User"] == name
                and ("account" not in where or a["Account"] == where["account"])
                and ("cluster" not in where or a["Cluster"] == where["cluster"])
                and ("partition" not in where or a["Partition"] == where["partition"])]
        if not gone:
            return 1, " Nothing deleted\n", ""
        self.assocs = [a for a in self.assocs if a not in gone]
        if self.users.get(name) in set(a["Account"] for a in gone):
            self.users[name] = ""
        if not any(a for a in self.assocs if a["User"] == name):
            self.users.pop(name, None)
        return 0, " Deleting user associations...\n", ""
