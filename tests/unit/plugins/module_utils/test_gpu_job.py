"""gpu-job's logic (plugins/module_utils/_gpu_job.py): the config, fitting a request to the node types, the script."""

import datetime

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_job, _team_usage
from ansible_collections.gpucluster.ops.plugins.module_utils._gpu_job import JobError
from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import build

# 8 DGX A100 (8 NVLink GPUs each) and 4 L40S servers (4 PCIe GPUs each), as in inventories/examples/mixed-a100-l40s.
CLUSTER = {"nodes": dict([("dgx%02d" % i, {"a100": 8}) for i in range(1, 9)]
                         + [("l40s%02d" % i, {"l40s": 4}) for i in range(1, 5)]),
           "partitions": {"a100": ["dgx%02d" % i for i in range(1, 9)], "l40s": ["l40s%02d" % i for i in range(1, 5)]}}
PARTITIONS = [{"name": "a100", "default": True, "max_time": "3-00:00:00", "default_time": "120m"},
              {"name": "l40s", "max_time": "1-00:00:00"}]
TEAMS = {"training": {"gpu_hours": "60000/month", "max_concurrent": 64, "gpu_types": ["a100"], "partitions": ["a100"],
                      "members": ["amara", {"name": "chen", "default": True}]},
         "research": {"gpu_hours": "10/day", "max_concurrent": 16, "members": ["chen", "farah"]},
         "open": {"members": ["goran"]}}


def _config(**kwargs):
    model = build(TEAMS, gpu_types=["a100", "l40s"])
    kwargs.setdefault("datasets", {"imagenet": "/data/imagenet/", "coco": "/data/coco"})
    kwargs.setdefault("topology", True)
    return _gpu_job.build_config(CLUSTER, PARTITIONS, model["teams"], model["users"], **kwargs)


CONFIG = _config()


def _team(name):
    return [t for t in CONFIG["teams"] if t["name"] == name][0]


def test_the_config_has_each_partitions_node_types_and_times():
    assert CONFIG["partitions"] == [
        {"name": "a100", "default": True, "max_time_s": 3 * 86400, "default_time_s": 7200,
         "node_types": [{"gpu_type": "a100", "gpus_per_node": 8, "nodes": 8}]},
        {"name": "l40s", "default": False, "max_time_s": 86400, "default_time_s": None,
         "node_types": [{"gpu_type": "l40s", "gpus_per_node": 4, "nodes": 4}]}]
    assert CONFIG["users"]["chen"] == {"default_team": "training", "teams": ["research", "training"]}
    assert CONFIG["users"]["goran"] == {"default_team": "open", "teams": ["open"]}
    assert CONFIG["datasets"] == {"coco": "/data/coco", "imagenet": "/data/imagenet"}
    assert CONFIG["runtime"] == {"name": "podman", "args": [], "helper": "/usr/local/lib/gpu-job/bin/gpu-job-container",
                                 "cdi_spec": "/etc/cdi/nvidia.yaml", "nccl_conf": "/etc/nccl.conf", "storage_opts": [],
                                 "user_store": "/var/lib/gpucluster/containers/users"}
    assert (CONFIG["default_time_s"], CONFIG["switches_wait_s"], CONFIG["topology"]) == (3600, 1800, True)
    assert _gpu_job.check_config(CONFIG, "x") is CONFIG


@pytest.mark.parametrize("kwargs,message", [
    ({"datasets": {"Bad Name": "/data"}}, "user_tools_datasets: dataset name 'Bad Name' must be"),
    ({"datasets": {"imagenet": "data/imagenet"}}, "user_tools_datasets.imagenet is 'data/imagenet': an absolute path"),
    ({"datasets": {"imagenet": "/data/../etc"}}, "user_tools_datasets.imagenet is '/data/../etc'"),
    ({"datasets": {"imagenet": "/data/$(x)"}}, "user_tools_datasets.imagenet is '/data/$(x)'"),
    ({"datasets": ["/data"]}, "user_tools_datasets is ['/data']: a mapping"),
    ({"runtime": "docker"}, "user_tools_container_runtime is 'docker': use podman"),
    ({"runtime_args": ["--device", ""]}, "user_tools_container_args[1] is ''"),
    ({"default_time": "60"}, "user_tools_default_time is '60': a number in a string is a bare number"),
    ({"default_time": "0"}, "user_tools_default_time is '0': a time limit must be longer than 0"),
    ({"switches_wait": "soon"}, "user_tools_switches_wait is 'soon', which is not a Slurm time or a duration"),
])
def test_bad_config_input_names_the_variable_and_the_value(kwargs, message):
    with pytest.raises(JobError) as error:
        _config(**kwargs)
    assert message in str(error.value)


def test_a_partition_time_that_is_not_a_duration_is_named():
    model = build(TEAMS, gpu_types=["a100", "l40s"])
    with pytest.raises(JobError, match=r"slurm_partitions\[name=l40s\]\.max_time is '24'"):
        _gpu_job.build_config(CLUSTER, [PARTITIONS[0], {"name": "l40s", "max_time": "24"}], model["teams"],
                              model["users"])


@pytest.mark.parametrize("config,where,message", [
    ({"version": 2}, "/etc/x.json", "/etc/x.json is not a gpu-job config of version 1"),
    (dict(CONFIG, runtime={"name": "none"}), "c", "gpu-job never runs a job outside a container"),
    (dict((k, v) for k, v in CONFIG.items() if k != "runtime"), "c", "c has no 'runtime'"),
])
def test_a_config_file_this_program_did_not_write_is_refused(config, where, message):
    with pytest.raises(JobError, match=message.replace(".", r"\.")):
        _gpu_job.check_config(config, where)


@pytest.mark.parametrize("gpus,team,gpu_type,nodes,expect", [
    # 8 GPUs: one NVLink node, not 2 x 4 across nodes
    (8, "research", None, None, ("a100", "a100", 1, 8)),
    (4, "research", None, None, ("l40s", "l40s", 1, 4)),        # fills an L40S server rather than half a DGX
    (2, "research", None, None, ("l40s", "l40s", 1, 2)),
    (2, "research", "a100", None, ("a100", "a100", 1, 2)),
    (16, "research", None, None, ("a100", "a100", 2, 8)),       # whole nodes, the fewest
    (12, "research", None, None, ("l40s", "l40s", 3, 4)),       # 12 is no multiple of 8 but of 4
    (8, "research", "l40s", None, ("l40s", "l40s", 2, 4)),
    (4, "training", None, None, ("a100", "a100", 1, 4)),        # training may use the A100s only
    (64, "training", None, None, ("a100", "a100", 8, 8)),
    (4, "research", None, 1, ("l40s", "l40s", 1, 4)),
    (16, "research", None, 4, ("l40s", "l40s", 4, 4)),
])
def test_fit(gpus, team, gpu_type, nodes, expect):
    placement = _gpu_job.fit(CONFIG, gpus, _team(team), gpu_type, nodes)
    assert (placement["partition"], placement["gpu_type"], placement["nodes"], placement["gpus_per_node"]) == expect


@pytest.mark.parametrize("gpus,team,gpu_type,nodes,message", [
    (17, "research", None, None, "--gpus is 17: team research may use at most 16 GPUs at once"),
    (12, "training", None, None, "no node type can run 12 GPUs for team training: a100 nodes of partition a100 "
                                 "(8 GPUs each, 8 nodes): a multi-node job takes whole nodes, so ask for a multiple "
                                 "of 8 GPUs"),
    (72, "open", None, None, "a100 nodes of partition a100 (8 GPUs each, 8 nodes): 9 nodes are needed"),
    (9, "open", "a100", 1, "a100 nodes of partition a100 (8 GPUs each, 8 nodes): 9 GPUs per node is more than they "
                           "have"),
    (8, "open", None, 3, "8 GPUs do not split evenly over 3 nodes"),
    (8, "open", "h100", None, "--gpu-type is 'h100': no such GPU type on this cluster (GPU types: a100, l40s)"),
    (4, "training", "l40s", None, "--gpu-type is 'l40s': team training may use only a100"),
])
def test_a_request_no_node_type_can_hold_is_refused_with_the_reason(gpus, team, gpu_type, nodes, message):
    with pytest.raises(JobError) as error:
        _gpu_job.fit(CONFIG, gpus, _team(team), gpu_type, nodes)
    assert message in str(error.value)


@pytest.mark.parametrize("text,seconds", [("4h", 14400), ("90m", 5400), ("1-00:00:00", 86400), ("1h30m", 5400),
                                          ("02:00:00", 7200)])
def test_job_time(text, seconds):
    assert _gpu_job.parse_job_time(text) == seconds


@pytest.mark.parametrize("text,message", [
    ("forever", "--time is 'forever': a job needs a time limit"), ("UNLIMITED", "a job needs a time limit"),
    ("0", "longer than 0"), ("30", "bare number"), ("-1h", "cannot be negative"), ("4 hours", "not a Slurm time")])
def test_bad_job_times(text, message):
    with pytest.raises(JobError, match=message):
        _gpu_job.parse_job_time(text)


def test_the_time_limit_defaults_and_the_partition_maximum():
    a100 = _gpu_job.fit(CONFIG, 8, _team("research"))
    l40s = _gpu_job.fit(CONFIG, 4, _team("research"))
    assert _gpu_job.job_time(CONFIG, a100, None) == 7200            # the partition's default_time
    assert _gpu_job.job_time(CONFIG, l40s, None) == 3600            # the config's default
    with pytest.raises(JobError, match="--time is 2-00:00:00: partition l40s allows at most 1-00:00:00"):
        _gpu_job.job_time(CONFIG, l40s, 2 * 86400)


@pytest.mark.parametrize("image", ["pytorch:2.4", "nvcr.io/nvidia/pytorch:24.05-py3", "localhost/train",
                                   "registry.example.com:5000/team/img:v1",
                                   "img@sha256:" + "a" * 64])
def test_good_images(image):
    assert _gpu_job.check_image(image) == image


@pytest.mark.parametrize("image", ["pytorch:2.4;rm -rf /", "$(id)", "img`x`", "a b", "", "-v", "img:t:t", "../x",
                                   "a|b", "img\n", "x" * 300, "host:port/img", "ok\nrm"])
def test_images_with_shell_characters_are_refused(image):
    with pytest.raises(JobError, match="--image is"):
        _gpu_job.check_image(image)


def test_team_choice():
    assert _gpu_job.pick_team(CONFIG, "chen")["name"] == "training"
    assert _gpu_job.pick_team(CONFIG, "chen", "research")["name"] == "research"
    with pytest.raises(JobError, match=r"--team is 'reserch': no such team \(did you mean 'research'\?\)"):
        _gpu_job.pick_team(CONFIG, "chen", "reserch")
    with pytest.raises(JobError, match="user amara is not a member of team research"):
        _gpu_job.pick_team(CONFIG, "amara", "research")
    with pytest.raises(JobError, match="user nobody is in no team of this cluster"):
        _gpu_job.pick_team(CONFIG, "nobody")
    with pytest.raises(JobError, match=r"--dataset is 'imagnet': no such dataset \(did you mean 'imagenet'\?\)"):
        _gpu_job.dataset_path(CONFIG, "imagnet")


def _script(config, placement, **request):
    base = {"name": "my-training", "team": "research", "placement": placement, "time_s": 14400,
            "image": "pytorch:2.4", "command": "python train.py --lr '0.1'", "dataset": "/data/imagenet",
            "log_dir": "/home/chen/gpu-job-logs", "workdir": "/home/chen/my project"}
    base.update(request)
    return _gpu_job.script(config, base).splitlines()


def test_the_script_one_node():
    lines = _script(CONFIG, _gpu_job.fit(CONFIG, 8, _team("research")))
    assert lines[:12] == [
        "#!/bin/bash", "# Written by gpu-job (gpucluster.ops); what sbatch receives.",
        "#SBATCH --job-name=my-training", "#SBATCH --account=research", "#SBATCH --qos=research",
        "#SBATCH --partition=a100", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=a100:8", "#SBATCH --time=04:00:00",
        "#SBATCH --output=/home/chen/gpu-job-logs/%j.out", "#SBATCH --requeue"]
    assert not [line for line in lines if "--switches" in line or "--exclusive" in line]
    assert lines[12:21] == [
        "set -euo pipefail", "if ! command -v podman >/dev/null 2>&1; then",
        "  echo \"gpu-job: the container runtime podman is not installed on $(hostname); the job does not run outside"
        " a container\" >&2", "  exit 127", "fi",
        "if [ ! -x /usr/local/lib/gpu-job/bin/gpu-job-container ]; then",
        "  echo \"gpu-job: the job helper /usr/local/lib/gpu-job/bin/gpu-job-container is not installed on $(hostname)"
        " (the user_tools role installs it)\" >&2", "  exit 127", "fi"]
    # the helper adds the allocated GPUs' devices on each node; the container stays in the step's cgroup, with an init
    # that passes scancel's signals on; Slurm's CUDA_VISIBLE_DEVICES is not passed (the container sees only its GPUs)
    assert lines[21].startswith(
        "srun --ntasks-per-node=1 --mpi=none env -u XDG_RUNTIME_DIR /usr/local/lib/gpu-job/bin/gpu-job-container --cdi-spec "
        "/etc/cdi/nvidia.yaml --nccl-conf /etc/nccl.conf --user-store /var/lib/gpucluster/containers/users podman run "
        "--rm --network=host --cgroups=disabled --init --env SLURM_JOB_ID ")
    assert "CUDA_VISIBLE_DEVICES" not in lines[21]
    assert lines[21].endswith(" --volume /data/imagenet:/data/imagenet:ro --volume '/home/chen/my project:/home/chen/"
                              "my project' --workdir '/home/chen/my project' pytorch:2.4 sh -c 'python train.py --lr "
                              "'\"'\"'0.1'\"'\"''")
    assert len(lines) == 22


def test_the_script_multi_node_takes_whole_nodes_under_one_switch():
    lines = _script(CONFIG, _gpu_job.fit(CONFIG, 16, _team("research")), dataset=None)
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --gpus-per-node=a100:8" in lines
    assert lines[12:14] == ["#SBATCH --exclusive", "#SBATCH --switches=1@00:30:00"]
    assert ":ro" not in lines[-1]
    flat = _config(topology=False, runtime_args=["--device", "nvidia.com/gpu=all"])
    lines = _script(flat, _gpu_job.fit(flat, 16, _team("research")))
    assert "#SBATCH --exclusive" in lines and not [line for line in lines if "--switches" in line]
    assert "--device nvidia.com/gpu=all --volume /data/imagenet:/data/imagenet:ro" in lines[-1]


def test_the_script_gives_podman_the_nodes_site_image_store():
    stored = _config(storage_opts=["vfs.imagestore=/var/lib/gpucluster/containers/site"])
    lines = _script(stored, _gpu_job.fit(stored, 8, _team("research")))
    assert " /var/lib/gpucluster/containers/users podman --storage-opt vfs.imagestore=/var/lib/gpucluster/containers/site " \
        "run --rm " in lines[-1]
    with pytest.raises(JobError, match="the job's storage option 0 is 'vfs.imagestore=site; rm -rf /'"):
        _config(storage_opts=["vfs.imagestore=site; rm -rf /"])
    with pytest.raises(JobError, match="user_tools_cdi_spec is 'nvidia.yaml': an absolute path"):
        _config(cdi_spec="nvidia.yaml")


def test_untyped_gpus_ask_for_a_count():
    cluster = {"nodes": {"n1": {"": 2}}, "partitions": {"gpu": ["n1"]}}
    model = build({"t": {"members": ["u"]}})
    config = _gpu_job.build_config(cluster, [{"name": "gpu", "default": True, "max_time": "UNLIMITED"}],
                                   model["teams"], model["users"])
    placement = _gpu_job.fit(config, 2, config["teams"][0])
    assert "#SBATCH --gpus-per-node=2" in _script(config, placement)


def test_reasons_in_plain_words():
    assert _gpu_job.explain("QOSGrpGRES") == (
        "your team's GPU limit is in use: it starts when the team's other jobs free GPUs")
    assert "budget is used up" in _gpu_job.explain("QOSGrpGRESMinutes")
    assert "nodes it needs are down" in _gpu_job.explain("ReqNodeNotAvail, UnavailableNodes:gpu[01-02]")
    assert _gpu_job.explain("NewCode") == "Slurm says 'NewCode' (see 'man squeue', JOB REASON CODES)"
    with pytest.raises(JobError, match="cannot read the squeue line 'a|b'"):
        _gpu_job.parse_squeue("a|b\n")


def test_budget_refusal_says_when_it_resets():
    team = _team("research")
    now = datetime.datetime(2026, 12, 2, 10, 0)
    entry = {"remaining_gpu_hours": 0.0, "used_gpu_hours": 10.0, "budget_gpu_hours": 10}
    assert _gpu_job.budget_refusal(team, entry, _gpu_job.next_reset(CONFIG, team, now)) == (
        "team research has used its GPU-hour budget (10.0 of 10 GPU-hours this day); it resets 2026-12-03 00:00")
    timed = _config(reset_on_calendar={"day": "*-*-* 06:00:00"})
    assert _gpu_job.next_reset(timed, team, now) == (
        "at the reset timer's next '*-*-* 06:00:00' (the controller's local time)")
    assert _gpu_job.next_reset(timed, _team("open"), now) is None
    with pytest.raises(JobError, match="user_tools_reset_on_calendar is {'year': 'x'}: a mapping of month, week"):
        _config(reset_on_calendar={"year": "x"})
    assert _gpu_job.budget_refusal(team, dict(entry, remaining_gpu_hours=0.5), None) is None
    assert _gpu_job.budget_refusal(team, dict(entry, remaining_gpu_hours=None), None) is None


@pytest.mark.parametrize("period,now,expect", [
    ("month", datetime.datetime(2026, 12, 31, 23, 59), datetime.datetime(2027, 1, 1)),
    ("month", datetime.datetime(2026, 1, 31, 12, 0), datetime.datetime(2026, 2, 1)),
    ("week", datetime.datetime(2026, 12, 2, 10, 0), datetime.datetime(2026, 12, 7)),
    ("day", datetime.datetime(2026, 2, 28, 1, 0), datetime.datetime(2026, 3, 1)),
])
def test_next_period_start(period, now, expect):
    assert _team_usage.next_period_start(period, now) == expect


def test_last_reset_reads_the_stamp_else_the_period_start(tmp_path):
    now = datetime.datetime(2026, 12, 2, 10, 0)
    (tmp_path / "week.last-reset").write_text("2026-11-30T06:00:00+0100\n")
    assert _team_usage.last_reset(str(tmp_path), "week", now) == datetime.datetime(2026, 11, 30, 6, 0)
    assert _team_usage.last_reset(str(tmp_path), "month", now) == datetime.datetime(2026, 12, 1)


# gpu-job why (issue 52)

def test_scontrol_record_keeps_values_with_spaces():
    record = _gpu_job.parse_scontrol_record(
        "JobId=7 JobName=a b Reason=QOSGrpGRES Command=/bin/sh -c 'x=1 y' WorkDir=/tmp\nJobId=8 JobName=next\n")
    assert record["JobName"] == "a b" and record["Reason"] == "QOSGrpGRES" and record["WorkDir"] == "/tmp"
    assert record["JobId"] == "7"
    assert _gpu_job.parse_scontrol_record("") == {}


def test_binding_limits_of_a_code_without_a_tres_are_those_the_request_passes():
    qos = {"grp_tres": {"cpu": (64, 60), "mem": (None, 10), "gres/gpu": (16, 8)}}
    found = _gpu_job.binding_limits("QOSGrpTRES", qos, {"cpu": "8", "gres/gpu": "4"})
    assert found == [("grp_tres", "cpu", 64, 60, "8")]
    assert _gpu_job.limit_words("t", "QOSGrpTRES", found) == [
        "QOS t GrpTRES cpu=64 (the team's resources at once): 60 in use, this job asks for 8"]
    # a budget counter: minutes used, no request to add
    budget = _gpu_job.binding_limits("QOSGrpGRESMinutes", {"grp_tres_mins": {"gres/gpu": (600, 600)}}, {})
    assert budget == [("grp_tres_mins", "gres/gpu", 600, 600, None)]
    assert _gpu_job.binding_limits("Priority", qos, {}) == []
    assert _gpu_job.binding_limits("QOSGrpGRES", None, {}) == []


def test_sprio_priority_words_and_queue_position():
    factors = _gpu_job.parse_sprio("  7000|  10| 2000|0|0|5000|0\n")
    assert factors == {"priority": 7000, "age": 10, "fairshare": 2000, "jobsize": 0, "partition": 0, "qos": 5000,
                       "nice": 0}
    assert _gpu_job.priority_words(factors) == "7000 (QOS 5000, fair-share 2000, age 10, job size 0, partition 0)"
    assert _gpu_job.parse_sprio("") is None
    with pytest.raises(_gpu_job.JobError, match="cannot read sprio's line"):
        _gpu_job.parse_sprio("a|b|c|d|e|f|g\n")
    pending = [("12", 500), ("10", 500), ("11", 900), ("9", 100)]
    assert _gpu_job.queue_position("12", pending) == 3  # after 11 (higher) and 10 (older, same priority)
    assert _gpu_job.queue_position("9", pending) == 4
    assert _gpu_job.queue_position("13", pending) is None


def test_binding_limits_of_a_gpu_code_cover_typed_gpu_limits_and_het_ids_rank():
    qos = {"grp_tres": {"gres/gpu": (None, 8), "gres/gpu:a100": (8, 8), "gres/gpu:h100": (8, 0)},
           "grp_tres_run_mins": {"gres/gpu": (100, 90)}}
    found = _gpu_job.binding_limits("QOSGrpGRES", qos, {"gres/gpu": "8", "gres/gpu:a100": "8"})
    assert found == [("grp_tres", "gres/gpu:a100", 8, 8, "8")]
    booked = _gpu_job.binding_limits("QOSGrpGRESRunMinutes", qos, {})
    assert _gpu_job.limit_words("t", "QOSGrpGRESRunMinutes", booked) == [
        "QOS t GrpTRESRunMins gres/gpu=100 (GPU-minutes the team's running jobs have booked): 90 booked"]
    assert _gpu_job.queue_position("5", [("5", 1), ("123+0", 9), ("7_[1-3]", 1)]) == 2
