#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_account
short_description: Manage Slurm accounts, users and their associations with sacctmgr, idempotently
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads accounts, associations and users of one cluster with C(sacctmgr -n -P show account/assoc/user format=...),
    compares them with the listed ones and runs C(sacctmgr -i add/modify/delete) only for what differs.
  - An account's options left out (or null) are not managed; given ones are authoritative (C(qos) is the whole
    list).
  - A listed user's associations under the managed accounts are exactly the listed ones (an association is an
    account, optionally limited to a partition). Its associations under other accounts are left alone. The managed
    accounts are the listed ones and, with O(prune), those whose Organization is O(managed_organization).
  - Order of changes - accounts added (parents first) and modified, users' associations added, default accounts
    set, associations deleted, accounts deleted - so that no user loses its default account on the way (sacctmgr
    empties a user's default account when that association is deleted).
  - It never trusts sacctmgr's exit code or messages; after a change it reads everything again and fails, naming
    the account or user and both values, when Slurm stored something else.
  - Checks names, QOS (against C(sacctmgr show qos)), parents and the accounts that users name before any change.
options:
  cluster:
    description: Cluster whose associations are managed; default the only cluster slurmdbd knows.
    type: str
  accounts:
    description: Accounts to manage.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Account name (lower case; not C(root)).
        type: str
        required: true
      state:
        description: C(absent) deletes the account's association on the cluster, and its users' associations under it.
        type: str
        choices: [present, absent]
        default: present
      description:
        description: C(Description). Slurm stores it in lower case; so does the module.
        type: str
      organization:
        description: C(Organization); O(prune) uses it to tell managed accounts. Stored in lower case.
        type: str
      parent:
        description: Parent account.
        type: str
        default: root
      qos:
        description: QOS the account's jobs may use (the whole list).
        type: list
        elements: str
      default_qos:
        description: QOS used when a job names none; one of O(accounts[].qos).
        type: str
      fairshare:
        description:
          - The account association's fair-share shares (C(Fairshare=), a whole number from 1); only their ratio
            between sibling accounts counts. Read back after a change. Left out, not managed.
        type: int
  users:
    description: Users to manage.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: User name.
        type: str
        required: true
      state:
        description: C(absent) deletes the user's associations under the managed accounts.
        type: str
        choices: [present, absent]
        default: present
      default_account:
        description: The account jobs use when they name none; default the first association's account.
        type: str
      associations:
        description: The user's associations under the managed accounts, each C({account, partition}) (partition
          empty or left out for all partitions) or just an account name.
        type: list
        elements: raw
  prune:
    description:
      - Also delete accounts that are not listed and whose Organization is O(managed_organization), and the
        associations of unlisted users under managed accounts.
    type: bool
    default: false
  managed_organization:
    description: Organization that marks the accounts O(prune) may delete. Required with O(prune).
    type: str
attributes:
  check_mode:
    description:
      - Reads the state and reports the changes and commands it would make; runs no change.
      - A QOS that does not exist yet is assumed to be created by an earlier task of the run (with a warning).
  diff_mode:
    description: Returns each changed account and user, before and after, one line each.
extends_documentation_fragment:
  - gpucluster.ops.sacctmgr
"""

EXAMPLES = r"""
- name: Create the team accounts and their members
  gpucluster.ops.slurm_account:
    cluster: lab
    accounts:
      - name: research
        description: Research group
        organization: gpucluster.ops
        qos: [research]
        default_qos: research
    users:
      - name: alice
        default_account: research
        associations: [research]
      - name: carol
        associations:
          - {account: research, partition: gpu}

- name: Remove the accounts and memberships that inventory no longer lists
  gpucluster.ops.slurm_account:
    accounts: "{{ my_accounts }}"
    users: "{{ my_users }}"
    prune: true
    managed_organization: gpucluster.ops
"""

RETURN = r"""
cluster:
  description: The cluster worked on.
  returned: always
  type: str
  sample: lab
commands:
  description: The sacctmgr commands run (in check mode, the ones that would run).
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add user alice account=research cluster=lab defaultaccount=research"]
changes:
  description: One entry per change, with C(before, after) values of changed options where there are any.
  returned: always
  type: list
  elements: dict
accounts:
  description: Accounts with an association on the cluster after the run (before it, in check mode), by name.
  returned: always
  type: dict
users:
  description: Users after the run (before it, in check mode), by name, with C(default_account) and C(associations).
  returned: always
  type: dict
  sample: {alice: {default_account: research, associations: [{account: research, partition: ""}]}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr import (
    Sacctmgr, SacctmgrError, apply, command_lines, resolve_cluster)
from ansible_collections.gpucluster.ops.plugins.module_utils._sacctmgr_account import (
    check_account_spec, check_user_spec, plan_accounts, read_accounts, verify_accounts)
from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import SpecError


def _public(accounts, users):
    shown_accounts = dict((name, dict((k, v) for k, v in a.items() if k != "on_cluster"))
                          for name, a in accounts.items() if a.get("on_cluster"))
    shown_users = dict((name, {"default_account": u["default_account"],
                               "associations": [{"account": a, "partition": p} for a, p in sorted(u["associations"])]})
                       for name, u in users.items())
    return shown_accounts, shown_users


def _duplicates(items):
    names = [i["name"] for i in items]
    return sorted(set(n for n in names if names.count(n) > 1))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster=dict(type="str"),
            accounts=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                description=dict(type="str"),
                organization=dict(type="str"),
                parent=dict(type="str", default="root"),
                qos=dict(type="list", elements="str"),
                default_qos=dict(type="str"),
                fairshare=dict(type="int"),
            )),
            users=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                state=dict(type="str", choices=["present", "absent"], default="present"),
                default_account=dict(type="str"),
                associations=dict(type="list", elements="raw"),
            )),
            prune=dict(type="bool", default=False),
            managed_organization=dict(type="str"),
        ),
        required_if=[("prune", True, ["managed_organization"])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        accounts = [check_account_spec(spec, index) for index, spec in enumerate(params["accounts"])]
        users = [check_user_spec(spec, index) for index, spec in enumerate(params["users"])]
    except SpecError as exc:
        module.fail_json(msg=str(exc))
    for what, items in (("accounts", accounts), ("users", users)):
        if _duplicates(items):
            module.fail_json(msg="%s lists %s more than once" % (what, ", ".join(_duplicates(items))))

    path = module.get_bin_path("sacctmgr", required=True)
    sacct = Sacctmgr(lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}), path)
    try:
        cluster = resolve_cluster(sacct, params["cluster"])
        current_accounts, current_users = read_accounts(sacct, cluster)
        existing_qos = sacct.qos_names()
        if module.check_mode:
            # An earlier task of the same run (slurm_qos) may create them; only a real run can tell.
            named = set()
            for account in accounts:
                if account["state"] == "present":
                    named.update(account["qos"] or [])
                    named.update([account["default_qos"]] if account["default_qos"] else [])
            for qos in sorted(named - existing_qos):
                module.warn("QOS %s does not exist yet; in check mode it is assumed that an earlier task creates it"
                            % qos)
            existing_qos = existing_qos | named
        actions, diff, managed = plan_accounts(current_accounts, current_users, accounts, users, cluster,
                                               prune=params["prune"],
                                               managed_organization=params["managed_organization"],
                                               existing_qos=existing_qos)
    except (SacctmgrError, SpecError) as exc:
        module.fail_json(msg=str(exc))
    shown_accounts, shown_users = _public(current_accounts, current_users)
    result = dict(changed=bool(actions), cluster=cluster, commands=command_lines(actions), diff=diff,
                  changes=[dict(action=a["action"], name=a["name"], changes=a["changes"]) for a in actions],
                  accounts=shown_accounts, users=shown_users)
    if not actions or module.check_mode:
        module.exit_json(**result)

    outputs = apply(sacct, actions)
    try:
        after_accounts, after_users = read_accounts(sacct, cluster)
    except SacctmgrError as exc:
        module.fail_json(msg="could not read the accounts back after the changes: %s" % exc, outputs=outputs, **result)
    problems = verify_accounts(after_accounts, after_users, accounts, users, managed, params["prune"])
    result["accounts"], result["users"] = _public(after_accounts, after_users)
    if problems:
        said = "; ".join("%s -> rc %d: %s" % (o["command"], o["rc"], o["output"].replace("\n", " ")) for o in outputs)
        module.fail_json(msg="Slurm did not store what was asked: %s (sacctmgr said: %s)" % ("; ".join(problems), said),
                         outputs=outputs, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
