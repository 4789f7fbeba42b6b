# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu-job: the config (from the inventory), fitting a GPU request to the node types, and the sbatch script.

Standard library only: bin/gpu-job runs it on the login nodes under python3 -I -S, and the filter
``gpucluster.ops.gpu_job_config`` builds the config with it on the controller. ``JobError`` is a refusal: one line a
person understands, naming what and the value. Durations are ``_slurm_values.parse_duration``'s (a bare number is
refused); the teams come from ``_team_quota_model.build`` (through the team_quotas filter), the nodes and partitions
from ``_slurm_render.cluster_gpus`` (through the slurm_cluster_gpus filter).
"""

from __future__ import absolute_import, division, print_function

import re
import shlex

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import (
    SpecError, UNLIMITED, did_you_mean, format_time, parse_duration, record_fields)
from ansible_collections.gpucluster.ops.plugins.module_utils._team_usage import next_period_start

__metaclass__ = type

CONFIG_VERSION = 1
RUNTIMES = ("podman",)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
DATASET_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
# An image reference: [registry[:port]/]path[:tag][@digest]; no shell metacharacters, no spaces.
IMAGE_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}(?::[0-9]{1,5})?/)?[A-Za-z0-9][A-Za-z0-9._/-]{0,254}"
                      r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?\Z")
JOB_ID_RE = re.compile(r"^[0-9]{1,10}(?:_[0-9]{1,10})?\Z")
PATH_RE = re.compile(r"^/[A-Za-z0-9._/+-]*\Z")
MAX_GPUS = 100000
MAX_NODES = 100000

# Slurm's pending reasons (squeue %r, man squeue "JOB REASON CODES") in plain words.
REASONS = {
    "Priority": "other jobs come first (higher priority); it starts when its turn comes",
    "Resources": "it waits for enough free GPUs or nodes; it is next in line for them",
    "QOSGrpGRES": "your team's GPU limit is in use: it starts when the team's other jobs free GPUs",
    "QOSGrpGRESMinutes": "your team's GPU-hour budget is used up for this period: it waits for the reset",
    "QOSGrpGRESRunMinutes": "your team's running jobs have booked the GPU-hours left in the budget",
    "QOSGrpTRES": "your team's limit is in use: it starts when the team's other jobs end",
    "QOSGrpTRESMinutes": "your team's budget is used up for this period: it waits for the reset",
    "QOSGrpTRESRunMinutes": "your team's running jobs have booked what is left of the budget",
    "AssocGrpGRES": "your account's GPU limit is in use",
    "AssocGrpGRESMinutes": "your account's GPU-hour budget is used up",
    "QOSMaxGRESPerUser": "you use as many GPUs as one person may at once in your team",
    "QOSMaxGRESPerJob": "the job asks for more GPUs than one job may have: cancel it and ask for fewer",
    "QOSMaxWallDurationPerJobLimit": "the job's time limit is above the team's maximum: cancel it and ask for less",
    "PartitionTimeLimit": "the job's time limit is above the partition's maximum: cancel it and ask for less",
    "PartitionNodeLimit": "the job asks for more nodes than the partition allows",
    "PartitionDown": "the partition is down; an admin has to bring it back",
    "PartitionInactive": "the partition is inactive; an admin has to bring it back",
    "ReqNodeNotAvail": "nodes it needs are down, drained or reserved (maintenance?)",
    "NodeDown": "a node it needs is down",
    "Reservation": "it waits for its reservation to start",
    "Dependency": "it waits for the jobs it depends on",
    "DependencyNeverSatisfied": "the jobs it depends on failed: it will never start; cancel it",
    "BeginTime": "it was asked to start later",
    "JobHeldUser": "you held it (scontrol release ID lets it run)",
    "JobHeldAdmin": "an admin held it",
    "InvalidAccount": "its account (team) is not valid in Slurm: ask the admins",
    "InvalidQOS": "its QOS (team) is not valid in Slurm: ask the admins",
    "QOSNotAllowed": "your team may not use this QOS here",
    "AccountNotAllowed": "your team may not use this partition",
    "BadConstraints": "no node has what it asks for",
    "Licenses": "it waits for licenses",
    "launch failed requeued held": "its start failed and it was held; cancel it or ask the admins",
    "Cleaning": "it is being cleaned up after a requeue",
    "None": "it is being scheduled",
}


class JobError(ValueError):
    """A refused request or an unusable config; the message is the one line a person reads."""


def _known(choices):
    return ", ".join(sorted(choices)) if choices else "none"


def quote(value):
    """Shell-quote one value (every value the script carries goes through here)."""
    return shlex.quote(str(value))


# ---------------------------------------------------------------------------------------------------------------------
# The config, built on the controller from the inventory


def _seconds(value, where, allow_unlimited):
    if value is None:
        return None
    if allow_unlimited and isinstance(value, str) and value.strip().upper() in UNLIMITED:
        return None
    try:
        seconds = parse_duration(value, where)
    except SpecError as error:
        raise JobError(str(error))
    if not seconds:
        raise JobError("%s is %r: a time limit must be longer than 0" % (where, value))
    return seconds


def build_config(cluster, partitions, teams, users, datasets=None, runtime="podman", runtime_args=None,
                 default_time="1h", switches_wait="30m", topology=False, log_dir="~/gpu-job-logs",
                 state_dir="/var/lib/gpucluster/team-quota", reset_on_calendar=None, variable="user_tools_datasets",
                 prices=None, currency="EUR", gpu_types=None, helper="/usr/local/lib/gpu-job/bin/gpu-job-container",
                 cdi_spec="/etc/cdi/nvidia.yaml", nccl_conf="/etc/nccl.conf", storage_opts=None,
                 user_store="/var/lib/gpucluster/containers/users"):
    """The config file's content (a dict to write as JSON).

    ``cluster`` is the slurm_cluster_gpus filter's result (with partitions), ``partitions`` the slurm_partitions
    list (for default, max_time and default_time), ``teams`` and ``users`` the team_quotas filter's lists,
    ``datasets`` user_tools_datasets (name -> absolute path), ``reset_on_calendar`` the team_quota role's
    team_quota_reset_on_calendar where the inventory sets it. Raises ``JobError`` naming the variable and the value.
    """
    if runtime not in RUNTIMES:
        raise JobError("user_tools_container_runtime is %r: use %s" % (runtime, " or ".join(RUNTIMES)))
    runtime_args = list(runtime_args or [])
    for index, arg in enumerate(runtime_args):
        if not isinstance(arg, str) or not arg or "\n" in arg:
            raise JobError("user_tools_container_args[%d] is %r: give one non-empty argument per item" % (index, arg))
    storage_opts = list(storage_opts or [])
    for index, opt in enumerate(storage_opts):
        if not isinstance(opt, str) or not re.match(r"^[a-z]+\.[a-z_]+=/[A-Za-z0-9._/+-]*\Z", opt):
            raise JobError("the job's storage option %d is %r: DRIVER.OPTION=/path" % (index, opt))
    for name, path in (("helper", helper), ("cdi_spec", cdi_spec), ("nccl_conf", nccl_conf),
                       ("image_store_dir", user_store)):
        if not isinstance(path, str) or not PATH_RE.match(path) or "/../" in path + "/":
            raise JobError("user_tools_%s is %r: an absolute path of letters, digits, '.', '_', '+', '-' and '/'"
                           % ("container_helper" if name == "helper" else name, path))
    calendar = reset_on_calendar or {}
    if not isinstance(calendar, dict) or [k for k in calendar if k not in ("month", "week", "day")] or [
            v for v in calendar.values() if not isinstance(v, str) or not v.strip() or "\n" in v]:
        raise JobError("user_tools_reset_on_calendar is %r: a mapping of month, week or day to an OnCalendar "
                       "expression (the team_quota role's team_quota_reset_on_calendar)" % (reset_on_calendar,))
    catalogue = {}
    if datasets is None:
        datasets = {}
    if not isinstance(datasets, dict):
        raise JobError("%s is %r: a mapping of dataset name to its absolute path" % (variable, datasets))
    for name in sorted(datasets, key=str):
        path = datasets[name]
        if not isinstance(name, str) or not DATASET_RE.match(name):
            raise JobError("%s: dataset name %r must be lower-case letters, digits, '.', '_' or '-'" % (variable, name))
        if not isinstance(path, str) or not PATH_RE.match(path) or "/../" in path + "/" or path.rstrip("/") == "":
            raise JobError("%s.%s is %r: an absolute path of letters, digits, '.', '_', '+', '-' and '/' (no '..')"
                           % (variable, name, path))
        catalogue[name] = path.rstrip("/")
    if not isinstance(cluster, dict) or not isinstance(cluster.get("nodes"), dict):
        raise JobError("the cluster is %r: give the slurm_cluster_gpus filter's result" % (cluster,))
    declared = dict((p.get("name"), p) for p in partitions or [] if isinstance(p, dict))
    parts = []
    for name in sorted((cluster.get("partitions") or {})):
        spec = declared.get(name, {})
        where = "slurm_partitions[name=%s]" % name
        types = {}
        for node in cluster["partitions"][name]:
            for gpu_type, count in sorted((cluster["nodes"].get(node) or {}).items()):
                if count:
                    types[(gpu_type, count)] = types.get((gpu_type, count), 0) + 1
        parts.append({
            "name": name,
            "default": bool(spec.get("default", False)),
            "max_time_s": _seconds(spec.get("max_time"), where + ".max_time", True),
            "default_time_s": _seconds(spec.get("default_time"), where + ".default_time", True),
            "node_types": [{"gpu_type": t, "gpus_per_node": c, "nodes": n} for (t, c), n in sorted(types.items())],
        })
    team_list = []
    for team in teams or []:
        team_list.append({
            "name": team["name"], "max_concurrent": team.get("max_concurrent"),
            "gpu_hours": team.get("gpu_hours"), "period": team.get("period"),
            "gpu_types": list(team.get("gpu_types") or []), "partitions": list(team.get("partitions") or []),
            "budget_tres": team.get("budget_tres") or "gres/gpu",
            "budget_units_per_gpu_minute": team.get("budget_units_per_gpu_minute") or 1,
        })
    user_map = {}
    for user in users or []:
        user_map[user["name"]] = {"default_team": user["default_account"], "teams": list(user["accounts"])}
    return {
        "_managed": "Managed by Ansible (gpucluster.ops.user_tools); local changes are overwritten",
        "version": CONFIG_VERSION,
        "runtime": {"name": runtime, "args": runtime_args, "helper": helper, "cdi_spec": cdi_spec,
                    "nccl_conf": nccl_conf, "storage_opts": storage_opts, "user_store": user_store},
        "default_time_s": _seconds(default_time, "user_tools_default_time", False),
        "switches_wait_s": _seconds(switches_wait, "user_tools_switches_wait", False),
        "topology": bool(topology),
        "log_dir": log_dir,
        "state_dir": state_dir,
        "reset_on_calendar": dict(calendar),
        "partitions": parts,
        "teams": team_list,
        "users": user_map,
        "datasets": catalogue,
        # For the cost in gpu-job quota: the team model's checked prices per GPU-hour per GPU type.
        "prices": dict(prices or {}),
        "currency": currency,
        "gpu_types": list(gpu_types or []),
    }


def check_config(config, where):
    """Refuse a config file that is not one this program writes (``where`` names the file)."""
    if not isinstance(config, dict) or config.get("version") != CONFIG_VERSION:
        raise JobError("%s is not a gpu-job config of version %d (rerun the user_tools role)" % (where, CONFIG_VERSION))
    for key in ("runtime", "partitions", "teams", "users", "datasets", "default_time_s", "log_dir"):
        if key not in config:
            raise JobError("%s has no %r (rerun the user_tools role)" % (where, key))
    runtime = config["runtime"]
    if not isinstance(runtime, dict) or runtime.get("name") not in RUNTIMES:
        raise JobError("%s: the container runtime is %r, not one of %s: gpu-job never runs a job outside a container"
                       % (where, runtime, ", ".join(RUNTIMES)))
    if not isinstance(runtime.get("helper"), str) or not runtime.get("cdi_spec"):
        raise JobError("%s names no job helper or CDI spec (rerun the user_tools role)" % where)
    return config


# ---------------------------------------------------------------------------------------------------------------------
# The request


def _count(value, option, what, maximum):
    number = int(value) if re.match(r"^\s*[0-9]{1,9}\s*\Z", str(value)) else 0
    if number < 1 or number > maximum:
        raise JobError("%s is %r: give a whole number of %s, from 1 to %d" % (option, value, what, maximum))
    return number


def parse_gpus(value):
    return _count(value, "--gpus", "GPUs", MAX_GPUS)


def parse_nodes(value):
    return None if value is None else _count(value, "--nodes", "nodes", MAX_NODES)


def parse_job_time(value):
    """Seconds from --time (4h, 90m, 1-00:00:00); ``forever``, bare numbers and 0 are refused."""
    if isinstance(value, str) and value.strip().upper() in UNLIMITED + ("FOREVER",):
        raise JobError("--time is %r: a job needs a time limit, such as 4h, 90m or 1-00:00:00" % value)
    try:
        seconds = parse_duration(value, "--time")
    except SpecError as error:
        raise JobError(str(error))
    if not seconds:
        raise JobError("--time is %r: a job needs a time limit longer than 0, such as 4h" % (value,))
    return seconds


def check_image(image):
    if not isinstance(image, str) or not IMAGE_RE.match(image) or ".." in image or "//" in image:
        raise JobError("--image is %r: an image name such as pytorch:2.4 or registry.example.com/team/img:tag "
                       "(letters, digits, '.', '_', '-', '/', one ':tag', no spaces or shell characters)" % (image,))
    return image


def check_name(name):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise JobError("--name is %r: up to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
                       % (name,))
    return name


def check_job_id(job_id):
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise JobError("job ID %r is not a Slurm job ID (digits, as gpu-job status prints them)" % (job_id,))
    return job_id


def check_command(command):
    if not isinstance(command, str) or not command.strip():
        raise JobError("--command is %r: give the command to run in the container, such as \"python train.py\""
                       % (command,))
    if "\0" in command:
        raise JobError("--command contains a NUL character")
    return command


def check_workdir(path):
    """The current directory, mounted as the job's working directory: podman's --volume cannot take ':' or ','."""
    if ":" in path or "," in path or "\n" in path:
        raise JobError("the current directory %r has ':', ',' or a line break in its path, which podman cannot mount: "
                       "run gpu-job from another directory" % (path,))
    return path


def pick_team(config, user, team=None):
    """The team (config entry) the job is charged to: --team, else the user's default team."""
    teams = dict((t["name"], t) for t in config["teams"])
    membership = config["users"].get(user)
    if team is not None:
        if team not in teams:
            raise JobError("--team is %r: no such team%s (teams: %s)" % (team, did_you_mean(team, teams), _known(teams)))
        if membership is None or team not in membership["teams"]:
            raise JobError("--team is %r: user %s is not a member of team %s (your teams: %s)"
                           % (team, user, team, _known(membership["teams"] if membership else [])))
        return teams[team]
    if membership is None:
        raise JobError("user %s is in no team of this cluster: ask the admins to add you to one (team_quota_teams)"
                       % user)
    return teams[membership["default_team"]]


def fit(config, gpus, team, gpu_type=None, nodes=None):
    """Nodes and GPUs per node for ``gpus`` GPUs: one node where one node type holds them all, else whole nodes.

    Returns ``{partition, gpu_type, nodes, gpus_per_node, node_gpus}``. Raises ``JobError`` with the reason when no
    node type the team may use can hold the request.
    """
    if team.get("max_concurrent") is not None and gpus > team["max_concurrent"]:
        raise JobError("--gpus is %d: team %s may use at most %d GPUs at once"
                       % (gpus, team["name"], team["max_concurrent"]))
    all_types = sorted(set(t["gpu_type"] for p in config["partitions"] for t in p["node_types"]))
    if gpu_type is not None:
        if gpu_type not in all_types:
            raise JobError("--gpu-type is %r: no such GPU type on this cluster (GPU types: %s)"
                           % (gpu_type, _known([t for t in all_types if t])))
        if team["gpu_types"] and gpu_type not in team["gpu_types"]:
            raise JobError("--gpu-type is %r: team %s may use only %s"
                           % (gpu_type, team["name"], _known(team["gpu_types"])))
    candidates = []
    for part in config["partitions"]:
        if team["partitions"] and part["name"] not in team["partitions"]:
            continue
        for kind in part["node_types"]:
            if gpu_type is not None and kind["gpu_type"] != gpu_type:
                continue
            if team["gpu_types"] and kind["gpu_type"] not in team["gpu_types"]:
                continue
            candidates.append((part, kind))
    if not candidates:
        raise JobError("team %s has no GPU nodes to run on%s" % (
            team["name"], " with GPU type %s" % gpu_type if gpu_type else ""))
    reasons = []
    fits = []
    for part, kind in candidates:
        per, count = kind["gpus_per_node"], kind["nodes"]
        label = "%s nodes of partition %s (%d GPUs each, %d nodes)" % (
            kind["gpu_type"] or "GPU", part["name"], per, count)
        want_nodes = nodes
        if want_nodes is None:
            want_nodes = 1 if gpus <= per else (gpus + per - 1) // per
        if gpus % want_nodes:
            reasons.append("%d GPUs do not split evenly over %d nodes" % (gpus, want_nodes))
            continue
        each = gpus // want_nodes
        if each > per:
            reasons.append("%s: %d GPUs per node is more than they have" % (label, each))
            continue
        if want_nodes > 1 and each != per:
            reasons.append("%s: a multi-node job takes whole nodes, so ask for a multiple of %d GPUs" % (label, per))
            continue
        if want_nodes > count:
            reasons.append("%s: %d nodes are needed" % (label, want_nodes))
            continue
        # One node first (NVLink between its GPUs), then the fewest nodes, then the least idle GPUs on them,
        # then the default partition.
        fits.append(((want_nodes, want_nodes * per - gpus, not part["default"], part["name"], kind["gpu_type"]),
                     {"partition": part["name"], "gpu_type": kind["gpu_type"], "nodes": want_nodes,
                      "gpus_per_node": each, "node_gpus": per, "max_time_s": part["max_time_s"],
                      "default_time_s": part["default_time_s"]}))
    if not fits:
        raise JobError("no node type can run %d GPUs%s for team %s: %s" % (
            gpus, " on %d nodes" % nodes if nodes else "", team["name"], "; ".join(sorted(set(reasons)))))
    return sorted(fits, key=lambda item: item[0])[0][1]


def job_time(config, placement, seconds):
    """The job's time limit: --time, else the partition's default, else the config's; above MaxTime is refused."""
    if seconds is None:
        seconds = placement["default_time_s"] or config["default_time_s"]
    if placement["max_time_s"] is not None and seconds > placement["max_time_s"]:
        raise JobError("--time is %s: partition %s allows at most %s" % (
            format_time(seconds), placement["partition"], format_time(placement["max_time_s"])))
    return seconds


def dataset_path(config, name):
    if name is None:
        return None
    if name not in config["datasets"]:
        raise JobError("--dataset is %r: no such dataset%s (datasets: %s)" % (
            name, did_you_mean(name, config["datasets"]), _known(config["datasets"])))
    return config["datasets"][name]


def script(config, request):
    """The exact sbatch script for a checked request (``request``: name, team, placement, time_s, image, command,
    dataset, log_dir, workdir). Every value is shell-quoted."""
    place = request["placement"]
    gres = "%s:%d" % (place["gpu_type"], place["gpus_per_node"]) if place["gpu_type"] else str(place["gpus_per_node"])
    lines = ["#!/bin/bash",
             "# Written by gpu-job (gpucluster.ops); what sbatch receives.",
             "#SBATCH --job-name=%s" % quote(request["name"]),
             "#SBATCH --account=%s" % quote(request["team"]),
             "#SBATCH --qos=%s" % quote(request["team"]),
             "#SBATCH --partition=%s" % quote(place["partition"]),
             "#SBATCH --nodes=%d" % place["nodes"],
             "#SBATCH --ntasks-per-node=1",
             "#SBATCH --gpus-per-node=%s" % quote(gres),
             "#SBATCH --time=%s" % quote(format_time(request["time_s"])),
             "#SBATCH --output=%s" % quote(request["log_dir"] + "/%j.out"),
             # requeueable whatever the cluster's JobRequeue says: a job on a GPU that fails is run again elsewhere
             # (the health check's Xid watcher requeues it, docs/xid-watch.md)
             "#SBATCH --requeue"]
    if place["nodes"] > 1:
        lines.append("#SBATCH --exclusive")
        if config.get("topology"):
            lines.append("#SBATCH --switches=%s" % quote("1@%s" % format_time(config["switches_wait_s"])))
    runtime = config["runtime"]["name"]
    helper = config["runtime"]["helper"]
    lines += ["set -euo pipefail",
              "if ! command -v %s >/dev/null 2>&1; then" % quote(runtime),
              "  echo \"gpu-job: the container runtime %s is not installed on $(hostname); the job does not run "
              "outside a container\" >&2" % runtime,
              "  exit 127",
              "fi",
              "if [ ! -x %s ]; then" % quote(helper),
              "  echo \"gpu-job: the job helper %s is not installed on $(hostname) (the user_tools role installs it)\" "
              ">&2" % helper,
              "  exit 127",
              "fi"]
    # Without XDG_RUNTIME_DIR: the login session's (/run/user/<uid>, passed on by sbatch) does not exist on a compute
    # node, and rootless podman then uses the node's own or one under /tmp. The helper adds, on each node, the devices
    # of the GPUs Slurm allocated there (CDI, by UUID), /dev/infiniband and the NCCL config. --cgroups=disabled keeps
    # every process of the container in the step's cgroup, where Slurm's device and memory limits and scancel reach
    # it (a rootless container would otherwise get a cgroup of its own under the user's systemd); --init gives the
    # container an init that passes the step's signals on to the command (a shell as PID 1 ignores SIGTERM).
    # --mpi=none: the step starts one container per node and no MPI ranks (the cluster's MpiDefault may be pmix).
    argv = ["srun", "--ntasks-per-node=1", "--mpi=none", "env", "-u", "XDG_RUNTIME_DIR", helper,
            "--cdi-spec", config["runtime"]["cdi_spec"], "--nccl-conf", config["runtime"].get("nccl_conf") or ""]
    if config["runtime"].get("user_store"):
        argv += ["--user-store", config["runtime"]["user_store"]]
    argv += [runtime]
    for opt in config["runtime"].get("storage_opts") or []:
        argv += ["--storage-opt", opt]
    argv += ["run", "--rm", "--network=host", "--cgroups=disabled", "--init",
             "--env", "SLURM_JOB_ID", "--env", "SLURM_PROCID", "--env", "SLURM_NNODES", "--env", "SLURM_NODELIST",
             "--env", "SLURM_JOB_NODELIST"]
    argv += config["runtime"].get("args") or []
    if request.get("dataset"):
        path = request["dataset"]
        argv += ["--volume", "%s:%s:ro" % (path, path)]
    argv += ["--volume", "%s:%s" % (request["workdir"], request["workdir"]), "--workdir", request["workdir"],
             request["image"], "sh", "-c", request["command"]]
    lines.append(" ".join(quote(a) for a in argv))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# Slurm's output


def parse_squeue(text):
    """``squeue -h -o '%i|%j|%T|%M|%l|%D|%b|%P|%a|%r'`` lines as dicts."""
    keys = ("id", "name", "state", "elapsed", "time_limit", "nodes", "gres", "partition", "account", "reason")
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(keys):
            raise JobError("cannot read the squeue line %r" % line)
        jobs.append(dict(zip(keys, [c.strip() for c in cells])))
    return jobs


def explain(reason):
    """A pending reason code in plain words."""
    if reason in REASONS:
        return REASONS[reason]
    base = reason.split(",")[0].strip()
    if base in REASONS:
        return REASONS[base]
    return "Slurm says %r (see 'man squeue', JOB REASON CODES)" % reason


# The QOS counter behind each of the team limits' reason codes (the team_quota role sets GrpTRES and GrpTRESMins on
# each team's QOS): _team_usage.parse_assoc_mgr_qos's key, the TRES (None: every TRES of the counter) and its words.
REASON_COUNTERS = {
    "QOSGrpGRES": ("grp_tres", "gres/gpu", "the team's GPUs at once"),
    "QOSGrpTRES": ("grp_tres", None, "the team's resources at once"),
    "QOSGrpGRESMinutes": ("grp_tres_mins", "gres/gpu", "the team's GPU-minutes since the last reset"),
    "QOSGrpTRESMinutes": ("grp_tres_mins", None, "the team's budget since the last reset"),
    "QOSGrpGRESRunMinutes": ("grp_tres_run_mins", "gres/gpu", "GPU-minutes the team's running jobs have booked"),
    "QOSGrpTRESRunMinutes": ("grp_tres_run_mins", None, "what the team's running jobs have booked"),
}
# Slurm's names of the counters, for the words.
COUNTER_NAMES = {"grp_tres": "GrpTRES", "grp_tres_mins": "GrpTRESMins", "grp_tres_run_mins": "GrpTRESRunMins"}
COUNTER_USE = {"grp_tres": "in use", "grp_tres_mins": "used", "grp_tres_run_mins": "booked"}


def parse_scontrol_record(text):
    """The first record of ``scontrol -o show job ID`` as a dict of its fields (a value may hold spaces: a field
    starts where a space is followed by ``Name=``)."""
    return record_fields(next((line for line in text.splitlines() if line.strip()), ""))


def parse_tres(text):
    """``'cpu=1,mem=2G,gres/gpu=8'`` -> ``{'cpu': '1', 'mem': '2G', 'gres/gpu': '8'}``."""
    return dict(item.split("=", 1) for item in (text or "").split(",") if "=" in item)


def binding_limits(reason, qos_record, request):
    """The limits of the job's QOS that hold it, in words: ``[(counter, tres, limit, used, asked)]`` for ``reason``
    (a team-limit code of REASON_COUNTERS) from _team_usage.parse_assoc_mgr_qos's ``qos_record`` and the job's
    requested TRES (``request``: parse_tres of ReqTRES). Where the code names no single TRES, every TRES whose use
    plus the request passes its limit. [] where the code is not a team limit or the counters show none binding."""
    if reason not in REASON_COUNTERS or not qos_record:
        return []
    counter, tres, _words = REASON_COUNTERS[reason]
    found = []
    for name, (limit, used) in sorted((qos_record.get(counter) or {}).items()):
        # a GPU code covers the typed GPU TRES (gres/gpu:a100) too
        if limit is None or (tres is not None and name != tres and not name.startswith(tres + ":")):
            continue
        asked = request.get(name)
        try:
            asked_n = float(asked) if asked is not None and counter == "grp_tres" else 0
        except ValueError:
            asked_n = 0
        if (tres is not None and name == tres) or used + asked_n > limit:
            found.append((counter, name, limit, used, asked if counter == "grp_tres" else None))
    return found


def limit_words(qos, reason, limits):
    """binding_limits' entries as lines: ``QOS development GrpTRES gres/gpu=8 (the team's GPUs at once): 8 in use,
    this job asks for 8``."""
    words = REASON_COUNTERS.get(reason, ("", None, ""))[2]
    lines = []
    for counter, name, limit, used, asked in limits:
        line = "QOS %s %s %s=%s (%s): %s %s" % (
            qos, COUNTER_NAMES[counter], name, limit, words, used, COUNTER_USE[counter])
        if asked is not None:
            line += ", this job asks for %s" % asked
        lines.append(line)
    return lines


def parse_sprio(text):
    """``sprio -h -j ID -o '%Y|%A|%F|%J|%P|%Q|%N'`` -> ``{priority, age, fairshare, jobsize, partition, qos, nice}``
    as numbers (the first line; None where sprio printed none: the job is not pending or the cluster does not weigh
    priorities)."""
    keys = ("priority", "age", "fairshare", "jobsize", "partition", "qos", "nice")
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != len(keys):
            continue
        try:
            return dict(zip(keys, [int(float(c)) for c in cells]))
        except ValueError:
            raise JobError("cannot read sprio's line %r" % line)
    return None


def priority_words(factors):
    """parse_sprio's factors as ``15000 (fair-share 10000, QOS 5000, age 0, job size 0, partition 0)``, the largest
    first."""
    parts = [("fair-share", factors["fairshare"]), ("QOS", factors["qos"]), ("age", factors["age"]),
             ("job size", factors["jobsize"]), ("partition", factors["partition"])]
    parts.sort(key=lambda part: -part[1])
    text = "%d (%s)" % (factors["priority"], ", ".join("%s %d" % part for part in parts))
    if factors.get("nice"):
        text += ", nice %d" % factors["nice"]
    return text


def queue_position(job_id, pending):
    """The job's place among ``pending`` (``[(id, priority)]`` of the pending jobs one sees in its partition): 1 +
    the number of others with a higher priority; ties go to the older (lower) id, as Slurm orders them."""
    mine = dict(pending).get(job_id)
    if mine is None:
        return None

    def key(item):
        # an array task 123_4 or a het component 123+0 ranks by its job's number
        number = re.match(r"[0-9]*", item[0]).group(0)
        return (-item[1], int(number or 0), item[0])
    return 1 + sum(1 for item in pending if item[0] != job_id and key(item) < key((job_id, mine)))


def next_reset(config, team, now):
    """When the team's budget resets, in words: the next period start (the team_quota role's default timer), or the
    timer's own OnCalendar expression where the inventory sets one (no date is guessed from it); None: no period."""
    period = team.get("period")
    if not period:
        return None
    calendar = (config.get("reset_on_calendar") or {}).get(period)
    if calendar:
        return "at the reset timer's next %r (the controller's local time)" % calendar
    return next_period_start(period, now).strftime("%Y-%m-%d %H:%M")


def budget_refusal(team, entry, reset):
    """The refusal line when the team's GPU-hour budget is used up (``entry`` is _team_usage.team_report's,
    ``reset`` next_reset's words)."""
    if entry.get("remaining_gpu_hours") is None or entry["remaining_gpu_hours"] > 0:
        return None
    return ("team %s has used its GPU-hour budget (%s of %s GPU-hours this %s); it resets %s"
            % (team["name"], entry["used_gpu_hours"], entry["budget_gpu_hours"], team.get("period") or "period",
               reset or "when the admins reset it"))
