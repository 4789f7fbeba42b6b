"""Bad-input cases without a node: the real ansible-playbook runs a role's argument-spec validation and preflight
against inventory hosts that are never connected to, and holds the run to the rule of bad_input.py.

How nothing can change, on this machine or any other:

- Only the preflight runs. The play applies the role the way site.yml does (its main entry point, so the argument
  spec validation is the role's own task, with the role's defaults and vars), under ``--tags <role>_preflight``: the
  tag is on the preflight import, the first task of each role's tasks/main.yml (and on two read-only checks of
  monitoring's node_exporter.yml, reached only once the preflight passed), and the validation task is tagged
  ``always``. ``assert_refused_offline`` holds every task the output shows to the role's preflight tasks (or an
  arg-spec validation), so a task beyond the preflight that a tag lets through fails the test.
- No host can run anything. Every host of the run, localhost and delegation targets included, gets the offline_node
  connection (connection_plugins/offline_node.py) from the extra vars, which no inventory or play variable overrides.
  It starts no process, copies no file and opens no socket: a module call is answered from the host's canned data
  (``offline_node_facts`` answers setup, ``offline_node_answers`` the few read-only probes a preflight makes, such as
  slurp /proc/sys/fs/nr_open), and anything else is refused, which makes the task unreachable and the test fail.
- A case passes only when the run failed (rc 2) in validation or preflight on every host of the run: a preflight that
  let the bad input through ends the tagged run with rc 0 (or reaches a task the node cannot answer), and the test
  fails. A case whose verdict depends on the node itself (what its package repositories offer, what its systemd can
  parse) stays in the molecule scenario, end to end.
"""

import copy
import glob
import json
import os
import subprocess
import sys

import yaml

from bad_input import ARG_SPEC_TASK, PLAIN_OUTPUT, assert_refused_in_preflight, preflight_task_names, started_tasks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "connection_plugins")
# Forced on every host through the extra vars (the highest precedence): no host, not even localhost, runs anything.
OFFLINE = {"ansible_connection": "offline_node", "ansible_python_interpreter": "/usr/bin/python3"}

# The facts of the molecule scenarios' containers that the preflights read (part of what setup reports there).
DEBIAN12_CONTAINER = {
    "distribution": "Debian", "distribution_version": "12.11", "distribution_major_version": "12",
    "distribution_release": "bookworm", "distribution_file_variety": "Debian", "os_family": "Debian",
    "system": "Linux", "kernel": "6.8.0-31-generic", "architecture": "x86_64", "machine": "x86_64",
    "userspace_architecture": "x86_64", "service_mgr": "systemd", "pkg_mgr": "apt",
    "virtualization_type": "docker", "virtualization_role": "guest",
    "virtualization_tech_guest": ["container", "docker"], "virtualization_tech_host": [],
    "python": {"version": {"major": 3, "minor": 11}},
    "processor_vcpus": 4, "processor_count": 1, "processor_cores": 4, "processor_threads_per_core": 1,
    "memtotal_mb": 7936,
}
DEBIAN13_CONTAINER = dict(DEBIAN12_CONTAINER, distribution_version="13.1", distribution_major_version="13",
                          distribution_release="trixie", python={"version": {"major": 3, "minor": 13}})
IMAGE_FACTS = {"gpucluster/debian-systemd:bookworm": DEBIAN12_CONTAINER,
               "gpucluster/debian-systemd:trixie": DEBIAN13_CONTAINER}


def container_facts(base, name, address):
    """`base` for the container `name` with the address `address` on eth0."""
    return dict(copy.deepcopy(base), hostname=name, nodename=name, fqdn=name,
                default_ipv4={"address": address, "interface": "eth0", "netmask": "255.255.0.0",
                              "network": "172.30.0.0", "gateway": "172.30.0.1"},
                all_ipv4_addresses=[address], interfaces=["lo", "eth0"])


def offline_host(facts, answers=None, **hostvars):
    """An inventory host that is never connected to: its facts and its answers to the preflight's probes."""
    return dict(hostvars, offline_node_facts=facts, offline_node_answers=list(answers or []))


def offline_hosts(bases, answers=None, **hostvars):
    """{name: base facts} as offline hosts with addresses of their own, the same answers and host variables."""
    return {name: offline_host(container_facts(base, name, "172.30.0.%d" % (10 + n)), answers, **hostvars)
            for n, (name, base) in enumerate(sorted(bases.items()))}


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def molecule_inventory(scenario, answers=None):
    """The inventory molecule writes for `scenario` (its platforms and their groups, its provisioner's group_vars
    and linked group_vars and host_vars folders), each container an offline host with the facts of its image."""
    folder = os.path.join(ROOT, "molecule", scenario)
    config = _load(os.path.join(folder, "molecule.yml"))
    platforms = config.get("platforms") or _load(os.path.join(ROOT, ".config", "molecule", "config.yml"))["platforms"]
    provisioner = (config.get("provisioner") or {}).get("inventory") or {}
    group_vars = copy.deepcopy(provisioner.get("group_vars") or {})
    link = (provisioner.get("links") or {}).get("group_vars")
    if link:
        for path in sorted(glob.glob(os.path.join(folder, link, "*.yml"))):
            group_vars.setdefault(os.path.basename(path)[:-4], {}).update(_load(path))
    host_link = (provisioner.get("links") or {}).get("host_vars")
    inventory = {"all": {"vars": group_vars.pop("all", {}), "hosts": {}}}
    for number, platform in enumerate(platforms):
        name = platform["name"].replace("${MOLECULE_SCENARIO_NAME}", scenario)
        facts = container_facts(IMAGE_FACTS[platform["image"]], name, "172.30.0.%d" % (10 + number))
        host_vars = os.path.join(folder, host_link, name + ".yml") if host_link else ""
        inventory["all"]["hosts"][name] = offline_host(facts, (answers or {}).get(name),
                                                       **(_load(host_vars) if os.path.isfile(host_vars) else {}))
        for group in platform.get("groups") or []:
            inventory.setdefault(group, {"hosts": {}, "vars": group_vars.get(group, {})})["hosts"][name] = {}
    children = {group: data for group, data in inventory.items() if group != "all"}
    return {"all": dict(inventory["all"], children=children)}


def run_offline(tmp_path, inventory, playbook, extra_vars=None, tags=None, limit=None):
    """Run `playbook` (a list of plays) on `inventory` with every host offline; returns (exit code, output, the
    module calls the hosts were asked, answered or refused)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
    (tmp_path / "vars.json").write_text(json.dumps(dict(extra_vars or {}, **OFFLINE)))
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_CONNECTION_PLUGINS=PLUGINS,
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_LOCALHOST_WARNING="False", OFFLINE_NODE_LOG=str(log),
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", **PLAIN_OUTPUT)
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
               "-e", "@%s" % (tmp_path / "vars.json"), str(tmp_path / "play.yml")]
    if tags:
        command += ["--tags", ",".join(tags)]
    if limit:
        command += ["--limit", limit]
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300,
                          check=False)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, proc.stdout, calls


def run_roles(tmp_path, inventory, plays, extra_vars=None, limit=None):
    """One play per (hosts, roles) of `plays`, the roles applied as site.yml applies them, with only their
    preflights (``--tags <role>_preflight``) and every host offline; returns what run_offline does."""
    playbook = [{"name": "Bad input for %s" % ", ".join(roles), "hosts": hosts, "gather_facts": False,
                 "roles": [{"role": "gpucluster.ops." + role} for role in roles]} for hosts, roles in plays]
    tags = sorted({role + "_preflight" for _hosts, roles in plays for role in roles})
    return run_offline(tmp_path, inventory, playbook, extra_vars, tags, limit)


def assert_refused_offline(case, rc, out, calls, roles, expect, run_hosts):
    """bad_input's rule for a run of run_roles: refused in validation or preflight on every host of `run_hosts`,
    naming every text of `expect`; besides, no task beyond the roles' preflights started and no host was asked
    anything it has no canned answer for."""
    refused = [call for call in calls if call.get("refused")]
    assert not refused, "case %s: the offline hosts were asked what they cannot answer: %s\n%s" % (case, refused, out)
    allowed = set().union(*(preflight_task_names(role) for role in roles))
    beyond = [t for t in started_tasks(out) if t not in allowed and not t.startswith(ARG_SPEC_TASK)]
    assert not beyond, "case %s: tasks beyond the preflight started: %s\n%s" % (case, beyond, out)
    assert_refused_in_preflight(case, rc, out, roles, expect, run_hosts)
