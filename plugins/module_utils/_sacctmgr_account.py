# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm accounts and users through sacctmgr: check the wanted ones, read them, plan the commands, verify.

Standard library only; the runner and its rules are in ``_sacctmgr``, the values in ``_slurm_values``.
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr import differences, jsonable
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import (
    PARTITION_RE, USER_RE, SpecError, check_name, check_name_list, check_text)

__metaclass__ = type

ACCOUNT_FIELDS = ("description", "organization", "parent", "qos", "default_qos", "fairshare")
FAIRSHARE_MAX = 2 ** 31 - 1


def check_account_spec(spec, index=0):
    if not isinstance(spec, dict):
        raise SpecError("accounts[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = check_name(spec.get("name"), "accounts[%d].name" % index)
    where = "account %s" % name
    if name == "root":
        raise SpecError("%s: the root account is Slurm's own and is not managed here" % where)
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state}
    for field in ("description", "organization"):
        # sacctmgr stores both in lower case, whatever the quoting (seen on 22.05 and 24.11).
        out[field] = None if spec.get(field) is None else check_text(spec[field], "%s: %s" % (where, field)).lower()
    out["parent"] = check_name(spec.get("parent") or "root", where + ": parent")
    out["qos"] = check_name_list(spec.get("qos"), where + ": qos")
    default_qos = spec.get("default_qos")
    out["default_qos"] = None if default_qos is None else check_name(default_qos, where + ": default_qos")
    if out["default_qos"] and out["qos"] is not None and out["default_qos"] not in out["qos"]:
        raise SpecError("%s: default_qos %s is not in its qos list %s" % (where, out["default_qos"], out["qos"]))
    if out["parent"] == name:
        raise SpecError("%s: parent is the account itself" % where)
    fairshare = spec.get("fairshare")
    if fairshare is not None:
        if isinstance(fairshare, str) and fairshare.strip().isdigit():
            fairshare = int(fairshare)
        if isinstance(fairshare, bool) or not isinstance(fairshare, int) or not 1 <= fairshare <= FAIRSHARE_MAX:
            raise SpecError("%s: fairshare is %r: give the shares as a whole number from 1 to %d"
                            % (where, spec.get("fairshare"), FAIRSHARE_MAX))
    out["fairshare"] = fairshare
    return out


def check_user_spec(spec, index=0):
    if not isinstance(spec, dict):
        raise SpecError("users[%d] is %r: give a mapping with at least a name" % (index, spec))
    name = check_name(spec.get("name"), "users[%d].name" % index, USER_RE)
    where = "user %s" % name
    state = spec.get("state") or "present"
    if state not in ("present", "absent"):
        raise SpecError("%s: state is %r: use present or absent" % (where, state))
    out = {"name": name, "state": state, "default_account": None, "associations": []}
    if state == "absent":
        return out
    associations = spec.get("associations")
    if not isinstance(associations, (list, tuple)) or not associations:
        raise SpecError("%s: associations is %r: give a list of {account, partition}" % (where, associations))
    seen = set()
    for position, assoc in enumerate(associations):
        if isinstance(assoc, str):
            assoc = {"account": assoc}
        if not isinstance(assoc, dict):
            raise SpecError("%s: associations[%d] is %r: give {account, partition}" % (where, position, assoc))
        account = check_name(assoc.get("account"), "%s: associations[%d].account" % (where, position))
        partition = assoc.get("partition") or ""
        if not isinstance(partition, str) or not PARTITION_RE.match(partition):
            raise SpecError("%s: associations[%d].partition is %r, which is not a partition name"
                            % (where, position, partition))
        key = (account, partition)
        if key in seen:
            raise SpecError("%s: associations lists %s%s twice" % (where, account, "/" + partition if partition else ""))
        seen.add(key)
        out["associations"].append({"account": account, "partition": partition})
    out["associations"].sort(key=lambda a: (a["account"], a["partition"]))
    default = spec.get("default_account") or out["associations"][0]["account"]
    out["default_account"] = check_name(default, where + ": default_account")
    if default not in set(a["account"] for a in out["associations"]):
        raise SpecError("%s: default_account %s is not one of its associations' accounts" % (where, default))
    return out


def read_accounts(sacct, cluster):
    """Accounts, user associations and users of ``cluster`` as ``(accounts, users)``.

    ``accounts``: ``{name: {description, organization, parent, qos, default_qos, on_cluster}}`` (records without an
    association on this cluster have ``on_cluster`` False). ``users``: ``{name: {default_account, associations}}``,
    associations being ``{(account, partition)}``.
    """
    accounts = {}
    for row in sacct.show("account", ["Account", "Description", "Organization"]):
        accounts[row["Account"]] = {"name": row["Account"], "description": row["Description"],
                                    "organization": row["Organization"], "parent": None, "qos": None,
                                    "default_qos": None, "fairshare": None, "on_cluster": False}
    users = {}
    rows = sacct.show("assoc", ["Account", "ParentName", "User", "Partition", "QOS", "DefaultQOS", "Fairshare"],
                      ["where", "cluster=" + cluster])
    for row in rows:
        if not row["User"]:
            account = accounts.setdefault(row["Account"], {"name": row["Account"], "description": "",
                                                           "organization": ""})
            account.update({"parent": row["ParentName"] or "root", "on_cluster": True,
                            "qos": sorted(q for q in row["QOS"].split(",") if q),
                            "default_qos": row["DefaultQOS"] or "",
                            "fairshare": _shares(row["Fairshare"])})
        else:
            user = users.setdefault(row["User"], {"name": row["User"], "default_account": "", "associations": set()})
            user["associations"].add((row["Account"], row["Partition"]))
    for row in sacct.show("user", ["User", "DefaultAccount"]):
        if row["User"] in users:
            users[row["User"]]["default_account"] = row["DefaultAccount"]
        else:
            users[row["User"]] = {"name": row["User"], "default_account": row["DefaultAccount"], "associations": set()}
    return accounts, users


def _shares(text):
    """The account association's Fairshare as sacctmgr prints it: a number, or the text (``parent``) otherwise."""
    return int(text) if text.isdigit() else text


def _account_differences(have, want):
    return differences(have, want, ACCOUNT_FIELDS)


def _account_assignments(diff):
    labels = {"description": "Description", "organization": "Organization", "parent": "Parent", "qos": "QOS",
              "default_qos": "DefaultQOS", "fairshare": "Fairshare"}
    args = []
    for field in ACCOUNT_FIELDS:
        if field in diff:
            value = diff[field][1]
            args.append("%s=%s" % (labels[field], ",".join(value) if isinstance(value, list) else value))
    return args


def account_line(account):
    if account is None:
        return None
    parts = []
    for field, label in (("parent", "Parent"), ("qos", "QOS"), ("default_qos", "DefaultQOS"),
                         ("fairshare", "Fairshare"), ("organization", "Organization"), ("description", "Description")):
        value = account.get(field)
        if value is not None:
            parts.append("%s=%s" % (label, ",".join(value) if isinstance(value, list) else value))
    return "account %s: %s" % (account["name"], " ".join(parts))


def _assoc_text(associations):
    return ",".join("%s/%s" % (a, p) if p else a for a, p in sorted(associations))


def user_line(name, default_account, associations):
    return "user %s: DefaultAccount=%s Associations=%s" % (name, default_account or "", _assoc_text(associations))


def _user_delete(name, account, partition, cluster):
    return ["delete", "user", "where", "name=" + name, "account=" + account, "cluster=" + cluster,
            "partition=" + partition]


def plan_accounts(current_accounts, current_users, accounts, users, cluster, prune=False, managed_organization=None,
                  existing_qos=None):
    """Return (actions, diff) to bring accounts and users of ``cluster`` to the wanted ones.

    Users' associations are managed within the managed accounts: those listed, and with ``prune`` the accounts whose
    Organization is ``managed_organization``. Associations of a listed user under other accounts are left alone.
    Order: add accounts, modify accounts, add user associations, set default accounts, delete associations, set
    default accounts that a delete emptied, delete accounts (so that no user is left without its default account).
    """
    if prune and not managed_organization:
        raise SpecError("prune needs managed_organization: only accounts with that organization are removed")
    listed_accounts = dict((a["name"], a) for a in accounts)
    present_accounts = set(n for n, a in listed_accounts.items() if a["state"] == "present")
    absent_accounts = set(n for n, a in listed_accounts.items() if a["state"] == "absent"
                          and current_accounts.get(n, {}).get("on_cluster"))
    pruned_accounts = set()
    if prune:
        for name, have in current_accounts.items():
            if (name not in listed_accounts and have.get("on_cluster") and name != "root"
                    and have.get("organization") == managed_organization):
                pruned_accounts.add(name)
    managed = present_accounts | absent_accounts | pruned_accounts
    errors = []
    for want in accounts:
        if want["state"] != "present":
            continue
        if want["parent"] != "root" and want["parent"] not in present_accounts and not (
                current_accounts.get(want["parent"], {}).get("on_cluster")):
            errors.append("account %s: parent %s does not exist" % (want["name"], want["parent"]))
        if existing_qos is not None:
            for qos in (want["qos"] or []) + ([want["default_qos"]] if want["default_qos"] else []):
                if qos not in existing_qos:
                    errors.append("account %s: QOS %s does not exist (known: %s)"
                                  % (want["name"], qos, ", ".join(sorted(existing_qos))))
    listed_users = dict((u["name"], u) for u in users)
    for want in users:
        for assoc in want["associations"]:
            account = assoc["account"]
            if account in absent_accounts or (account in listed_accounts
                                              and listed_accounts[account]["state"] == "absent"):
                errors.append("user %s: association with account %s, which is to be absent" % (want["name"], account))
            elif account not in present_accounts and not current_accounts.get(account, {}).get("on_cluster"):
                errors.append("user %s: account %s does not exist on cluster %s and is not listed"
                              % (want["name"], account, cluster))
    if errors:
        raise SpecError("; ".join(sorted(set(errors))))

    add_accounts, modify_accounts, add_assocs, defaults, delete_assocs, delete_accounts = [], [], [], [], [], []
    defaults_again = []
    before, after = [], []
    # Parents before children.
    for want in _parents_first([a for a in accounts if a["state"] == "present"]):
        have = current_accounts.get(want["name"])
        if have is None or not have.get("on_cluster"):
            diff = _account_differences(None, want)
            add_accounts.append({"action": "add", "name": "account " + want["name"],
                                 "args": ["add", "account", want["name"], "cluster=" + cluster]
                                 + _account_assignments(diff), "changes": jsonable(diff)})
            after.append(account_line(want))
            continue
        diff = _account_differences(have, want)
        if diff:
            modify_accounts.append({"action": "modify", "name": "account " + want["name"],
                                    "args": ["modify", "account", "where", "name=" + want["name"],
                                             "cluster=" + cluster, "set"] + _account_assignments(diff),
                                    "changes": jsonable(diff)})
            before.append(account_line(dict((f, have.get(f)) for f in ("name",) + ACCOUNT_FIELDS
                                            if f == "name" or want.get(f) is not None)))
            after.append(account_line(want))

    for name in sorted(set(current_users) | set(listed_users)):
        have = current_users.get(name, {"default_account": "", "associations": set()})
        have_managed = set(a for a in have["associations"] if a[0] in managed)
        want = listed_users.get(name)
        if want is not None and want["state"] == "present":
            wanted_assocs = set((a["account"], a["partition"]) for a in want["associations"])
            wanted_managed = wanted_assocs | (have["associations"] - have_managed - wanted_assocs)
            missing = sorted(wanted_assocs - have["associations"])
            extra = sorted(a for a in have_managed if a not in wanted_assocs)
            is_new = not have["associations"]
            if missing and is_new:
                # A user without associations needs its default account in the same command.
                first = [a for a in missing if a[0] == want["default_account"]][0]
                missing.remove(first)
                missing.insert(0, first)
            for position, (account, partition) in enumerate(missing):
                args = ["add", "user", name, "account=" + account, "cluster=" + cluster]
                if partition:
                    args.append("partition=" + partition)
                if position == 0 and is_new:
                    args.append("defaultaccount=" + want["default_account"])
                add_assocs.append({"action": "add", "name": "user %s %s" % (name, _assoc_text([(account, partition)])),
                                   "args": args, "changes": {}})
            default_changes = have["default_account"] != want["default_account"] and not (is_new and missing)
            if default_changes:
                defaults.append({"action": "modify", "name": "user " + name,
                                 "args": ["modify", "user", "where", "name=" + name, "set",
                                          "defaultaccount=" + want["default_account"]],
                                 "changes": {"default_account": [have["default_account"], want["default_account"]]}})
            for account, partition in extra:
                delete_assocs.append({"action": "delete", "name": "user %s %s" % (name, _assoc_text([(account,
                                                                                                      partition)])),
                                      "args": _user_delete(name, account, partition, cluster), "changes": {}})
            if any(account == want["default_account"] for account, _partition in extra):
                # sacctmgr empties the default account when any association under it is deleted, even when
                # another one (for another partition) stays: set it again afterwards.
                defaults_again.append({"action": "modify", "name": "user " + name,
                                       "args": ["modify", "user", "where", "name=" + name, "set",
                                                "defaultaccount=" + want["default_account"]],
                                       "changes": {"default_account": ["", want["default_account"]]}})
            if missing or extra or have["default_account"] != want["default_account"]:
                before.append(user_line(name, have["default_account"], have["associations"])
                              if have["associations"] else None)
                after.append(user_line(name, want["default_account"], wanted_managed))
            continue
        # Absent, or not listed: its associations under managed accounts go (without prune: only under accounts
        # that are to be deleted, so that no user keeps an association with a deleted account).
        if want is not None or prune:
            removable = have_managed
        else:
            removable = set(a for a in have["associations"] if a[0] in absent_accounts | pruned_accounts)
        if not removable:
            continue
        for account, partition in sorted(removable):
            delete_assocs.append({"action": "delete", "name": "user %s %s" % (name, _assoc_text([(account, partition)])),
                                  "args": _user_delete(name, account, partition, cluster), "changes": {}})
        before.append(user_line(name, have["default_account"], have["associations"]))
        remaining = have["associations"] - removable
        after.append(user_line(name, have["default_account"], remaining) if remaining else None)
    for name in sorted(absent_accounts | pruned_accounts):
        delete_accounts.append({"action": "delete", "name": "account " + name,
                                "args": ["delete", "account", "where", "name=" + name, "cluster=" + cluster],
                                "changes": {}})
        before.append(account_line(current_accounts[name]))
    actions = add_accounts + modify_accounts + add_assocs + defaults + delete_assocs + defaults_again + delete_accounts
    diff = {"before": "".join(line + "\n" for line in before if line),
            "after": "".join(line + "\n" for line in after if line),
            "before_header": "sacctmgr show account/assoc/user (cluster %s)" % cluster,
            "after_header": "sacctmgr show account/assoc/user (cluster %s, wanted)" % cluster}
    return actions, diff, managed


def _parents_first(accounts):
    names = set(a["name"] for a in accounts)
    ordered, placed = [], set()
    pending = sorted(accounts, key=lambda a: a["name"])
    while pending:
        progress = False
        for account in list(pending):
            if account["parent"] not in names or account["parent"] in placed:
                ordered.append(account)
                placed.add(account["name"])
                pending.remove(account)
                progress = True
        if not progress:
            raise SpecError("accounts %s name each other as parents" % ", ".join(a["name"] for a in pending))
    return ordered


def verify_accounts(current_accounts, current_users, accounts, users, managed, prune):
    """Problems where Slurm's state after the changes differs from what was wanted."""
    problems = []
    for want in accounts:
        have = current_accounts.get(want["name"])
        if want["state"] == "absent":
            if have is not None and have.get("on_cluster"):
                problems.append("account %s: still exists after the delete" % want["name"])
            continue
        if have is None or not have.get("on_cluster"):
            problems.append("account %s: does not exist after the add" % want["name"])
            continue
        for field, (stored, wanted_value) in sorted(_account_differences(have, want).items()):
            problems.append("account %s: Slurm stored %s=%r, wanted %r" % (want["name"], field, stored, wanted_value))
    listed = set()
    for want in users:
        listed.add(want["name"])
        have = current_users.get(want["name"], {"default_account": "", "associations": set()})
        have_managed = set(a for a in have["associations"] if a[0] in managed)
        if want["state"] == "absent":
            if have_managed:
                problems.append("user %s: still has associations %s" % (want["name"], _assoc_text(have_managed)))
            continue
        wanted_assocs = set((a["account"], a["partition"]) for a in want["associations"])
        if not wanted_assocs <= have["associations"] or (have_managed - wanted_assocs):
            problems.append("user %s: Slurm has associations %s, wanted %s"
                            % (want["name"], _assoc_text(have_managed | (wanted_assocs & have["associations"])),
                               _assoc_text(wanted_assocs)))
        if have["default_account"] != want["default_account"]:
            problems.append("user %s: Slurm stored default account %r, wanted %r"
                            % (want["name"], have["default_account"], want["default_account"]))
    if prune:
        for name, have in current_users.items():
            if name not in listed and set(a for a in have["associations"] if a[0] in managed):
                problems.append("user %s: still has associations under managed accounts after the prune" % name)
    return problems
