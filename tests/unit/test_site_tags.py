"""playbooks/site.yml runs one part alone by its tag (baseline, fabric, gpu_stack, health, kubernetes, slurm, quota,
image_registry, user_tools, monitoring, checks), with the facts, the inventory check and the summary in every run.

Each tag is checked on what Ansible itself would run: ``ansible-playbook --list-tasks --tags <tag> -i inventories/lab
playbooks/site.yml`` (no connection to any host), started for every tag at once. A play counts as listed when a task
of it is listed; a role counts as listed in a play when a task of its own other than its argument-spec validation is
(Ansible tags that validation ``always``, so every role's shows up in every tagged run, and validates only). The
table of the tags in docs/playbooks.md is held to the same expectations.
"""

import os
import re
import subprocess

import pytest
import yaml

from render_step import ansible_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(ROOT, "playbooks", "site.yml")
INVENTORY = os.path.join(ROOT, "inventories", "lab")
DOCS = os.path.join(ROOT, "docs", "playbooks.md")

FACTS = "Gather the facts every play needs from all nodes"
INVENTORY_CHECK = "Check the inventory against the cluster it describes"
HEAD = "Head services"
GPU = "GPU nodes"
KUBERNETES = "Kubernetes"
SLURM = "Slurm"
QUOTA = "Team quotas"
RESERVATIONS = "Slurm reservations"
IMAGE_REGISTRY = "Image registry"
USER_TOOLS = "User tools"
MONITORING = "Monitoring"
CHECKS = "Checks"
HEALTH_RUN = "Check the GPU nodes' health"
SLURM_STATE = "Read the Slurm nodes' state from the controller"
# The health checks' verdicts into Slurm in the same run (the operations role's health_sync, included).
HEALTH_SYNC = "Bring the GPU nodes' Slurm state in line with the health checks of this run"
SUMMARY = "Summary"
# The play's own tasks (not a role's) are listed.
OWN = "(own tasks)"

# Every run, whatever the tags.
ALWAYS = {FACTS: {OWN}, INVENTORY_CHECK: {OWN}, SUMMARY: {OWN}}
# Per tag: the plays besides ALWAYS that list something, and what each lists.
PARTS = {
    "baseline": {HEAD: {"node_baseline"}, GPU: {"node_baseline", "node_tuning"}},
    "fabric": {HEAD: {"infiniband"}, GPU: {"infiniband"}},
    "gpu_stack": {GPU: {"nvidia_driver", "cuda_toolkit", "nccl", "container_toolkit", "dcgm"}},
    "health": {GPU: {"health_check"}, HEALTH_RUN: {OWN}, HEALTH_SYNC: {OWN}},
    # The team quotas' Kubernetes entry point is included (include_role), so it is listed as the play's own task.
    "kubernetes": {KUBERNETES: {"gpu_operator", OWN}},
    "slurm": {SLURM: {"slurm"}, HEALTH_SYNC: {OWN}, SLURM_STATE: {OWN}},
    "quota": {QUOTA: {"team_quota"}},
    # The inventory's reservations: the slurm role's entry point reservations (import_role).
    "reservations": {RESERVATIONS: {"slurm"}},
    "image_registry": {IMAGE_REGISTRY: {"image_registry"}},
    "user_tools": {USER_TOOLS: {"user_tools"}},
    "monitoring": {GPU: {"dcgm_exporter", "monitoring"}, MONITORING: {"monitoring"}},
    "checks": {CHECKS: {OWN}, HEALTH_RUN: {OWN}, HEALTH_SYNC: {OWN}, SLURM_STATE: {OWN}},
}

PLAY_LINE = re.compile(r"^  play #\d+ \((?P<hosts>[^)]*)\): (?P<name>.*?)\tTAGS: \[(?P<tags>.*)\]$")
TASK_LINE = re.compile(r"^      (?P<name>.*?)\tTAGS: \[(?P<tags>.*)\]$")
ROLE_TASK = re.compile(r"^gpucluster\.ops\.(?P<role>\w+) : ")
VALIDATION = "Validating arguments against arg spec"


def _site():
    with open(SITE) as handle:
        return yaml.safe_load(handle)


def _own_task_names():
    """{play name: names of its own tasks}, the imported inventory check's included."""
    names = {}
    for play in _site():
        imported_file = play.get("ansible.builtin.import_playbook")
        if imported_file:
            with open(os.path.join(ROOT, "playbooks", imported_file)) as handle:
                for imported in yaml.safe_load(handle):
                    names[imported["name"]] = {t["name"] for t in imported.get("tasks") or []}
        else:
            names[play["name"]] = {t["name"] for t in play.get("tasks") or [] if "ansible.builtin.import_role" not in t}
    return names


def _list_tasks(tag=None):
    argv = ["ansible-playbook", "--list-tasks", "-i", INVENTORY, SITE] + (["--tags", tag] if tag else [])
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="False"))


@pytest.fixture(scope="module")
def outputs():
    """{tag (None: no tags): the output of --list-tasks}, every run started at once."""
    runs = {tag: _list_tasks(tag) for tag in [None] + sorted(PARTS)}
    result = {}
    for tag, proc in runs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (tag, out[-2000:], err[-2000:])
        assert "WARNING" not in err, (tag, err)
        result[tag] = out
    return result


@pytest.fixture(scope="module")
def listed(outputs):  # pylint: disable=redefined-outer-name
    """{tag (None: no tags): {play name: set of roles listed, and OWN when its own tasks are}} of every run."""
    own = _own_task_names()
    result = {}
    for tag, out in outputs.items():
        plays, play = {}, None
        for line in out.splitlines():
            match = PLAY_LINE.match(line)
            if match:
                play = match.group("name")
                assert play not in plays, "two plays named %r" % play
                plays[play] = set()
                continue
            match = TASK_LINE.match(line)
            if not match or VALIDATION in match.group("name"):
                continue
            role = ROLE_TASK.match(match.group("name"))
            if role and role.group("role") != "_common":
                plays[play].add(role.group("role"))
            elif match.group("name") in own.get(play, ()):
                plays[play].add(OWN)
        result[tag] = {name: what for name, what in plays.items() if what}
    return result


def test_the_untagged_run_lists_every_play_and_role(listed):  # pylint: disable=redefined-outer-name
    everything = listed[None]
    assert set(everything) == set(ALWAYS) | {p for part in PARTS.values() for p in part}
    for part in PARTS.values():
        for play, what in part.items():
            assert what <= everything[play], play


@pytest.mark.parametrize("tag", sorted(PARTS))
def test_a_tag_runs_its_part_and_what_every_run_needs(listed, tag):  # pylint: disable=redefined-outer-name
    expected = dict(ALWAYS, **PARTS[tag])
    assert listed[tag] == expected


@pytest.mark.parametrize("tag", sorted(PARTS))
def test_the_plays_that_run_always_are_whole_in_a_tagged_run(outputs, tag):  # pylint: disable=redefined-outer-name
    """Facts, inventory check and summary: every task of theirs runs with any tag, not only some."""
    untagged = _tasks_of(outputs[None], set(ALWAYS))
    assert sorted(untagged) == sorted(ALWAYS) and all(untagged.values())
    assert _tasks_of(outputs[tag], set(ALWAYS)) == untagged


def _tasks_of(out, plays):
    tasks, play = {}, None
    for line in out.splitlines():
        match = PLAY_LINE.match(line)
        if match:
            play = match.group("name")
            continue
        match = TASK_LINE.match(line)
        if match and play in plays:
            tasks.setdefault(play, []).append(match.group("name"))
    return tasks


def test_every_role_and_play_of_site_yml_is_in_a_part():
    """A role or play added to site.yml without a part's tag would run only in the untagged run."""
    known = set(PARTS) | {"always"}
    untagged = []
    for play in _site():
        play_tags = set(play.get("tags") or [])
        name = play.get("name")
        if play_tags & known:
            assert len(play_tags & known) == len(play_tags), (name, play_tags)
            continue
        for role in play.get("roles") or []:
            if not set(role.get("tags") or []) & known:
                untagged.append("%s: role %s" % (name, role["role"]))
        for task in play.get("tasks") or []:
            if not set(task.get("tags") or []) & known:
                untagged.append("%s: task %s" % (name, task["name"]))
    assert untagged == []


def _docs_table():
    """{tag: (roles named in the roles column, whether the own-tasks column says anything)} of docs/playbooks.md."""
    with open(DOCS) as handle:
        text = handle.read()
    table = text[text.index("| tag | roles | plays' own tasks |"):].split("\n\n", 1)[0]
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|([^|]*)\|([^|]*)\|\s*$", table, re.M)
    roles = set(os.listdir(os.path.join(ROOT, "roles")))
    return {tag: ({r for r in re.findall(r"`(\w+)`", named) if r in roles}, bool(own.strip()))
            for tag, named, own in rows}


def test_the_docs_table_lists_each_tag_with_its_roles():
    table = _docs_table()
    assert sorted(table) == sorted(list(PARTS) + ["always"])
    for tag, part in PARTS.items():
        roles = {r for what in part.values() for r in what if r != OWN}
        own = any(OWN in what for what in part.values())
        assert table[tag] == (roles, own), tag
    assert table["always"] == (set(), True)
