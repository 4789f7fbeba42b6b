"""_slurm_metrics: the collector's parsers on scontrol's and sshare's own formats (as Slurm 24.11 prints them on
Debian 13's cluster), GPUs per partition and account however jobs asked for them, owners of out-of-service nodes,
sources that failed left out (never zeros), and the text format node_exporter reads."""

import re

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_metrics as metrics

NODES = (
    "NodeName=gpu01 Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=3.14 "
    "AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres=gpu:a100:8 GresDrain=N/A GresUsed=gpu:a100:0(IDX:N/A) "
    "NodeAddr=gpu01 NodeHostName=gpu01 Version=24.11.5 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2048 "
    "AllocMem=0 FreeMem=3267 Sockets=1 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=dev  BootTime=2026-12-06T20:43:49 SlurmdStartTime=2026-12-07T12:14:35 "
    "LastBusyTime=2026-12-07T12:19:44 ResumeAfterTime=None CfgTRES=cpu=4,mem=2G,billing=4,gres/gpu=8 AllocTRES= "
    "CurrentWatts=0 AveWatts=0 Reason=swap a fan State=IDLE [root@2026-12-07T12:40:00]\n"
    "NodeName=gpu02 Arch=x86_64 CoresPerSocket=4  CPUAlloc=3 CPUEfctv=8 CPUTot=8 CPULoad=3.14 "
    "Gres=gpu:h100:8(S:0-1) GresDrain=N/A GresUsed=gpu:h100:5(IDX:0-4) State=MIXED ThreadsPerCore=1 "
    "Partitions=dev,research  BootTime=2026-12-06T20:43:49 CfgTRES=cpu=8,gres/gpu=8 AllocTRES=cpu=3,gres/gpu=5\n"
    "NodeName=gpu03 Gres=gpu:a100:4,gpu:v100:2 GresUsed=gpu:a100:0(IDX:N/A),gpu:v100:0(IDX:N/A) State=DOWN* "
    "Partitions=dev Reason=gpucluster-health: GPU-XID-79 gpu1 [slurm@2026-12-07T12:00:00]\n"
    "NodeName=cpu01 Gres=(null) GresUsed=(null) State=IDLE Partitions=cpu\n")
JOBS = (
    "JobId=7 JobName=a b c UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=1 Nice=0 Account=research "
    "QOS=research JobState=RUNNING Reason=None Dependency=(null) Partition=research AllocNode:Sid=head:1 "
    "ReqTRES=cpu=1,mem=1G,node=1,billing=1,gres/gpu=2 AllocTRES=cpu=1,mem=1G,node=1,billing=1,gres/gpu=2,gres/gpu:h100=2 "
    "TresPerNode=gres/gpu:2\n"
    "JobId=8 JobName=wrap Account=development JobState=RUNNING Reason=None Partition=dev "
    "ReqTRES=cpu=1,node=1,gres/gpu=3 AllocTRES=cpu=1,node=1,gres/gpu:h100=3 TresPerJob=gres/gpu:3\n"
    "JobId=9 JobName=wrap Account=development JobState=PENDING Reason=Resources Partition=dev "
    "ReqTRES=cpu=2,mem=2G,node=1,billing=2,gres/gpu=6 AllocTRES=(null) TresPerTask=gres/gpu=3\n"
    "JobId=10 JobName=wrap Account=development JobState=PENDING Reason=QOSGrpGRES Partition=dev,research "
    "ReqTRES=cpu=2,node=2,gres/gpu=16 AllocTRES=(null) TresPerNode=gres/gpu:8\n"
    "JobId=11 JobName=wrap Account=research JobState=COMPLETED Reason=None Partition=research "
    "ReqTRES=cpu=1,gres/gpu=8 AllocTRES=cpu=1,gres/gpu=8\n")
SSHARE = ("root||0.000000|1.000000|\n root|root|0.333333|1.000000|0.200000\n development||0.333333|0.250000|\n"
          "  development|bob|0.500000|0.250000|1.000000\n research||0.333333|0.750000|\n"
          "  research|alice|0.500000|0.750000|0.333333\n")


def test_gres_counts_every_type_and_ignores_sockets_and_indices():
    assert metrics.gres_gpus("gpu:a100:8(S:0-1)") == 8
    assert metrics.gres_gpus("gpu:a100:4,gpu:v100:2") == 6
    assert metrics.gres_gpus("gpu:a100:5(IDX:0-2,4-5)") == 5
    assert metrics.gres_gpus("gpu:2") == 2
    assert metrics.gres_gpus("(null)") == 0 and metrics.gres_gpus("nic:1,gpu:1") == 1


def test_tres_gpus_prefers_the_untyped_count():
    assert metrics.tres_gpus("cpu=1,gres/gpu=2,gres/gpu:h100=2") == 2
    assert metrics.tres_gpus("cpu=1,gres/gpu:h100=3,gres/gpu:a100=1") == 4
    assert metrics.tres_gpus("(null)") == 0


def test_nodes_and_jobs_are_read_from_scontrols_one_line_records():
    nodes = metrics.parse_nodes(NODES)
    assert [(n["name"], n["state"], n["partitions"], n["gpus"], n["used"]) for n in nodes] == [
        ("gpu01", "IDLE+DRAIN", ["dev"], 8, 0), ("gpu02", "MIXED", ["dev", "research"], 8, 5),
        ("gpu03", "DOWN*", ["dev"], 6, 0), ("cpu01", "IDLE", ["cpu"], 0, 0)]
    assert nodes[0]["reason"] == "swap a fan State=IDLE"    # free text, never fields
    jobs = metrics.parse_jobs(JOBS)
    assert [(j["id"], j["account"], j["state"], j["reason"], j["gpus"]) for j in jobs] == [
        ("7", "research", "RUNNING", "None", 2), ("8", "development", "RUNNING", "None", 3),
        ("9", "development", "PENDING", "Resources", 6), ("10", "development", "PENDING", "QOSGrpGRES", 16),
        ("11", "research", "COMPLETED", "None", 8)]
    assert metrics.parse_jobs("No jobs in the system\n") == []


def test_collect_counts_gpus_per_partition_account_and_reason():
    rows = {(name, tuple(sorted(labels.items()))): value for name, labels, value in metrics.collect(
        metrics.parse_nodes(NODES), metrics.parse_jobs(JOBS), metrics.parse_fairshare(SSHARE), breaker_share=0.1)}
    part = {(dict(l)["partition"], dict(l)["state"]): v for (n, l), v in rows.items() if n == "slurm_partition_gpus"}
    # gpu02's 5 in use count in both its partitions; drained gpu01 and down gpu03 are out
    assert part == {("dev", "allocated"): 5, ("dev", "idle"): 3, ("dev", "out"): 14, ("research", "allocated"): 5,
                    ("research", "idle"): 3, ("research", "out"): 0, ("cpu", "allocated"): 0, ("cpu", "idle"): 0,
                    ("cpu", "out"): 0}
    accounts = {(dict(l)["account"], dict(l)["partition"], dict(l)["state"]): v
                for (n, l), v in rows.items() if n == "slurm_account_gpus"}
    assert accounts == {("research", "research", "allocated"): 2, ("development", "dev", "allocated"): 3,
                        ("development", "dev", "pending"): 6, ("development", "dev,research", "pending"): 16}
    assert rows[("slurm_pending_jobs", (("partition", "dev"), ("reason", "Resources")))] == 1
    out = {dict(l)["node"]: dict(l)["owner"] for (n, l), v in rows.items() if n == "slurm_node_out_of_service"}
    assert out == {"gpu01": "admin", "gpu03": "health"}
    assert rows[("slurm_nodes", (("state", "total"),))] == 4 and rows[("slurm_nodes", (("state", "out_of_service"),))] == 2
    assert rows[("slurm_breaker_limit_nodes", ())] == 1
    assert rows[("slurm_account_usage_share", (("account", "research"),))] == 0.75
    assert rows[("slurm_user_fairshare", (("account", "research"), ("user", "alice")))] == 0.333333
    assert not [key for key in rows if "root" in str(key)]


def test_a_node_down_without_a_drain_has_no_owner():
    assert metrics.node_owner({"state": "DOWN*", "reason": "Not responding"}) == ""
    assert metrics.node_owner({"state": "DOWN+DRAIN", "reason": "bad PSU"}) == "admin"


def test_a_source_that_failed_is_down_and_its_metrics_are_left_out():
    rows = metrics.collect(nodes=metrics.parse_nodes(NODES), jobs=None, fairshare=None)
    text = metrics.render(rows, {"nodes": True, "jobs": False, "fairshare": False}, 1796646886.5)
    assert 'slurm_collector_source_up{source="jobs"} 0' in text and 'slurm_collector_source_up{source="nodes"} 1' in text
    assert "slurm_account_gpus" not in text and "slurm_pending_jobs" not in text
    assert "slurm_collector_last_run_timestamp_seconds 1796646886\n" in text


def test_the_text_is_node_exporters_format_with_help_and_type_once():
    rows = metrics.collect(metrics.parse_nodes(NODES), metrics.parse_jobs(JOBS), metrics.parse_fairshare(SSHARE))
    text = metrics.render(rows, dict.fromkeys(metrics.SOURCES, True), 0)
    names = re.findall(r"^# TYPE (\S+) gauge$", text, re.M)
    assert len(names) == len(set(names)) and set(names) <= set(metrics.HELP)
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r'^[a-z_]+(\{([a-z_]+="[^"]*",?)+\})? -?[0-9.e+-]+$', line), line
    assert 'slurm_node_out_of_service{node="gpu01",owner="admin",state="IDLE+DRAIN"} 1' in text


# scontrol -o -d show job: the detail fields give each node's GRES indexes (a 2-node job of --gpus-per-node=2, one
# job on one GPU, one pending job: no detail, nothing held).
JOBS_DETAIL = (
    "JobId=21 JobName=train UserId=alice(2001) Account=research JobState=RUNNING Reason=None Partition=research "
    "NodeList=gpu[01-02] ReqTRES=cpu=2,node=2,gres/gpu=4 AllocTRES=cpu=2,node=2,gres/gpu=4 TresPerNode=gres/gpu:2 "
    "Nodes=gpu[01-02] CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:1-2) MinCPUsNode=1\n"
    "JobId=22 JobName=x y UserId=bob(2002) Account=development JobState=RUNNING Reason=None Partition=dev "
    "AllocTRES=cpu=1,gres/gpu=1 Nodes=gpu01 CPU_IDs=1 Mem=0 GRES=gpu:h100:1(IDX:0),nic:1(IDX:0)\n"
    "JobId=23 JobName=wrap UserId=bob(2002) Account=development JobState=RUNNING Reason=None Partition=dev "
    "AllocTRES=cpu=1,gres/gpu=1 Nodes=gpu03 CPU_IDs=1 Mem=0 GRES=gpu:1(IDX:0)\n"
    "JobId=24 JobName=wrap UserId=bob(2002) Account=development JobState=PENDING Reason=Resources Partition=dev "
    "ReqTRES=cpu=1,gres/gpu=8\n")
GRES = ("NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[0-1]\nNodeName=gpu[01-02] Name=gpu Type=h100 "
        "File=/dev/nvidia[4-5]\nNodeName=gpu03 AutoDetect=nvml\n")


def test_each_gpu_a_job_holds_is_one_info_series_named_by_its_minor_number():
    rows = metrics.collect(jobs=metrics.parse_jobs(JOBS_DETAIL), gres_text=GRES)
    info = sorted((l["node"], l["gpu"], l["jobid"], l["account"], l["user"], l["partition"])
                  for n, l, v in rows if n == "slurm_job_gpu_info" and v == 1)
    # GRES index 2 of gpu01 is gres.conf's third file, /dev/nvidia4; the 2-node job is on both nodes
    assert info == [("gpu01", "0", "22", "development", "bob", "dev"), ("gpu01", "1", "21", "research", "alice", "research"),
                    ("gpu01", "4", "21", "research", "alice", "research"),
                    ("gpu02", "1", "21", "research", "alice", "research"),
                    ("gpu02", "4", "21", "research", "alice", "research")]
    # gpu03 detects its GPUs (AutoDetect): its index cannot be named, it is counted instead
    assert [(l, v) for n, l, v in rows if n == "slurm_job_gpus_unmapped"] == [({"node": "gpu03"}, 1)]
    # no gres.conf at all: every held GPU unmapped, none invented
    rows = metrics.collect(jobs=metrics.parse_jobs(JOBS_DETAIL), gres_text="")
    assert not [r for r in rows if r[0] == "slurm_job_gpu_info"]
    assert sum(v for n, l, v in rows if n == "slurm_job_gpus_unmapped") == 6
    text = metrics.render(metrics.collect(jobs=metrics.parse_jobs(JOBS_DETAIL), gres_text=GRES), {"jobs": True}, 0)
    assert ('slurm_job_gpu_info{account="research",gpu="4",jobid="21",node="gpu02",partition="research",user="alice"} 1'
            in text)
