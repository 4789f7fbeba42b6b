"""The converged cluster, seen from the controller as a user sees it: nodes, GRES, partitions, topology, jobs,
accounting, the health check slurmd runs; and the files and daemons behind it."""

import json
import re
import shlex
import time

from conftest import _wait, expected_partitions, health_report, node_records


def _compute(scenario):
    return scenario.groups["slurm_compute"]


def _sinfo_nodes(ctl):
    """sinfo --json as {node: {gres, cpus, real_memory, features, partitions}} for Slurm 22.05 and 24.11."""
    data = json.loads(ctl.check_output("sinfo --json"))
    nodes = {}
    if "nodes" in data:  # 22.05: one record per node
        for node in data["nodes"]:
            nodes[node["name"]] = {"gres": node["gres"], "cpus": node["cpus"], "real_memory": node["real_memory"],
                                   "features": node["features"], "partitions": sorted(node["partitions"])}
        return nodes
    for entry in data["sinfo"]:  # 24.11: one record per (partition, node state and configuration)
        for name in entry["nodes"]["nodes"]:
            node = nodes.setdefault(name, {"gres": entry["gres"]["total"], "cpus": entry["cpus"]["maximum"],
                                           "real_memory": entry["memory"]["maximum"],
                                           "features": entry["features"]["total"], "partitions": []})
            node["partitions"] = sorted(node["partitions"] + [entry["partition"]["name"]])
    return nodes


def test_sinfo_json_matches_inventory(scenario, ctl):
    nodes = _sinfo_nodes(ctl)
    assert sorted(nodes) == _compute(scenario)
    for host in _compute(scenario):
        declared = scenario.node_vars(host)
        gres = declared["slurm_node_gres"][0]
        assert nodes[host]["gres"] == "gpu:%s:%d" % (gres["type"], gres["count"]), nodes[host]
        assert nodes[host]["cpus"] == declared["slurm_node_cpus"]
        assert nodes[host]["real_memory"] == declared["slurm_node_real_memory"]
        assert nodes[host]["features"] == ",".join(declared["slurm_node_features"])
        assert nodes[host]["partitions"] == expected_partitions(scenario, host)


def test_scontrol_nodes_match_inventory_and_are_idle(scenario, ctl):
    records = node_records(ctl, _compute(scenario))
    for host in _compute(scenario):
        declared, node = scenario.node_vars(host), records[host]
        gres = declared["slurm_node_gres"][0]
        assert node["State"] == "IDLE", node
        assert node["Gres"] == "gpu:%s:%d" % (gres["type"], gres["count"])
        assert int(node["CPUTot"]) == declared["slurm_node_cpus"]
        assert int(node["Sockets"]) == declared["slurm_node_sockets"]
        assert int(node["CoresPerSocket"]) == declared["slurm_node_cores_per_socket"]
        assert int(node["RealMemory"]) == declared["slurm_node_real_memory"]
        assert node["AvailableFeatures"] == ",".join(declared["slurm_node_features"])
        assert int(node["Weight"]) == declared.get("slurm_node_weight", 1)
        assert sorted(node["Partitions"].split(",")) == expected_partitions(scenario, host)
        # the typed GPU TRES is configured per node (needed for typed GPU quotas)
        assert "gres/gpu:%s=%d" % (gres["type"], gres["count"]) in node["CfgTRES"]


def test_partitions(scenario, ctl):
    lines = {re.search(r"PartitionName=(\S+)", line).group(1): line
             for line in ctl.check_output("scontrol show partition -o").splitlines()}
    dev, research = lines["dev"], lines["research"]
    assert "Default=YES" in dev and "MaxTime=01:00:00" in dev and "DefaultTime=00:10:00" in dev
    assert "MaxTime=2-00:00:00" in research and "PriorityTier=10" in research
    assert "Nodes=%s" % scenario.only("gpu_h100") in research


def test_a_gpu_job_gets_memory_by_its_gpus_and_two_share_a_node(scenario, ctl):
    """Issue 45: each partition's DefMemPerGPU is the least RealMemory per GPU of its nodes, so a 1-GPU job without
    --mem gets its GPU's share of the node, not all of its memory; a second 1-GPU job runs beside it on the same
    node (with Slurm's default the first took the node's memory and the second waited with the GPUs free)."""
    records = node_records(ctl, _compute(scenario))
    lines = {re.search(r"PartitionName=(\S+)", line).group(1): line
             for line in ctl.check_output("scontrol show partition -o").splitlines()}
    share = {}
    for partition, line in lines.items():
        names = ctl.check_output("scontrol show hostnames %s" % re.search(r" Nodes=(\S+)", line).group(1)).split()
        share[partition] = min(int(records[n]["RealMemory"]) // int(records[n]["Gres"].rsplit(":", 1)[1])
                               for n in names)
        assert "JobDefaults=DefMemPerGPU=%d" % share[partition] in line, line
    host = sorted(h for h in _compute(scenario) if "dev" in expected_partitions(scenario, h))[0]
    jobs = [ctl.check_output("sbatch --parsable -p dev --nodelist=%s --gpus-per-node=1 --time=2 -o /dev/null "
                             "--wrap 'sleep 60'" % host).split(";")[0] for _job in range(2)]
    try:
        def both_running():
            states = [ctl.check_output("squeue -h -j %s -o %%T" % job).strip() for job in jobs]
            return states == ["RUNNING", "RUNNING"], states
        _wait("two 1-GPU jobs running side by side on %s" % host, both_running, timeout=60)
        for job in jobs:
            out = ctl.check_output("scontrol show job %s" % job)
            # what the job was given: TRES= (22.05), AllocTRES= (24.11; its ReqTRES says the node's memory)
            amount, unit = re.search(r"(?:^|\s)(?:Alloc)?TRES=\S*?\bmem=([0-9.]+)([MGT])", out, re.M).groups()
            assert float(amount) * {"M": 1, "G": 1024, "T": 1024 * 1024}[unit] == share["dev"], out
    finally:
        ctl.run("scancel %s" % " ".join(jobs))


# An all-reduce over MPI (Debian's OpenMPI through mpi4py, installed by user_tools): each rank adds rank + 1, so every
# rank of n must print n(n+1)/2. TCP between all ranks, also on one node (pml ob1, btl self and tcp).
ALLREDUCE = (
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "print('RANK %d OF %d ON %s SUM %d' % (comm.Get_rank(), comm.Get_size(), MPI.Get_processor_name(),"
    " comm.allreduce(comm.Get_rank() + 1)), flush=True)\n")


def _allreduce_ranks(ctl, srun_options):
    """Run the all-reduce as a team member with srun; return {rank: (size, node, sum)}."""
    command = ("OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp timeout 120 srun %s -N2 --ntasks-per-node=2 -p dev --time=2 python3 -c %s"
               % (srun_options, shlex.quote(ALLREDUCE)))
    result = ctl.run("su - alice -c %s" % shlex.quote(command))
    ranks = {}
    for rank, size, node, total in re.findall(r"^RANK (\d+) OF (\d+) ON (\S+) SUM (\d+)$", result.stdout, re.M):
        ranks[int(rank)] = (int(size), node, int(total))
    return result.rc, ranks, result.stdout + result.stderr


def test_mpi_job_across_two_nodes(scenario, ctl):
    """Issue 52: srun starts an MPI program's ranks on two nodes through Slurm's PMIx plugin (MpiDefault=pmix, the
    PMIx library installed by the slurm role), and their all-reduce over TCP gives every rank the same sum."""
    assert re.search(r"^MpiDefault\s*=\s*pmix$", ctl.check_output("scontrol show config"), re.M)
    rc, ranks, out = _allreduce_ranks(ctl, "")
    assert rc == 0 and sorted(ranks) == [0, 1, 2, 3], out
    assert {size for size, _node, _total in ranks.values()} == {4}, out
    assert {total for _size, _node, total in ranks.values()} == {1 + 2 + 3 + 4}, out
    assert sorted({node for _size, node, _total in ranks.values()}) == _compute(scenario), out
    # The same program without the PMIx plugin: OpenMPI 5 runs four programs of one rank each, OpenMPI 4.1 refuses
    # to start ("direct launched using srun" without PMI support): never one job of four ranks.
    rc, alone, out = _allreduce_ranks(ctl, "--mpi=none")
    assert (rc != 0 and not alone) or (rc == 0 and {size for size, _node, _total in alone.values()} == {1}), out


def test_switches_one_waits_for_one_leaf(scenario, ctl):
    """Issue 52: a 2-node job that asks for one leaf switch (--switches=1@<wait>, as gpu-job's multi-node jobs do)
    waits, since each leaf of the test fabric has one compute node, and runs across the two leaves once its wait is
    over (slurm.conf's TopologyPlugin=topology/tree, max_switch_wait above the wait)."""
    leaves = {leaf: sorted(set(scenario.groups.get("ib_" + leaf, [])) & set(_compute(scenario)))
              for leaf in ("leaf1", "leaf2")}
    assert all(len(nodes) == 1 for nodes in leaves.values()), leaves
    # both nodes idle, so that only the switch request can hold the job (not Resources or Priority)
    idle = ctl.check_output("sinfo -h -N -p dev -t idle -o %N").split()
    assert sorted(set(idle)) == _compute(scenario), idle
    wait_s = 20
    job = ctl.check_output("sbatch --parsable -N2 --switches=1@0:%d -p dev --time=1 -o /dev/null --wrap true"
                           % wait_s).split(";")[0]
    try:
        time.sleep(wait_s / 2)
        assert ctl.check_output("squeue -h -j %s -o %%T" % job).strip() == "PENDING"

        def started():
            state = ctl.check_output("sacct -n -P -X -j %s -o State" % job).strip()
            return state in ("RUNNING", "COMPLETED"), state
        _wait("the job's switch wait over and the job started", started, timeout=120)
        out = ctl.check_output("sacct -n -P -X -j %s -o Submit,Start,NodeList" % job).strip()
        submit, start, nodes = out.split("|")
        waited = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S")) - time.mktime(
            time.strptime(submit, "%Y-%m-%dT%H:%M:%S"))
        assert waited >= wait_s, out
        assert sorted(ctl.check_output("scontrol show hostnames %s" % nodes).split()) == _compute(scenario), out
    finally:
        ctl.run("scancel %s" % job)


def test_topology_matches_fabric(scenario, ctl):
    switches = {}
    for line in ctl.check_output("scontrol show topology").splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        switches[fields["SwitchName"]] = fields
    compute = set(_compute(scenario))
    for leaf in ("leaf1", "leaf2"):
        wanted = sorted(set(scenario.groups.get("ib_" + leaf, [])) & compute)
        names = ctl.check_output("scontrol show hostnames %s" % switches[leaf]["Nodes"]).split()
        assert sorted(names) == wanted and switches[leaf]["Level"] == "0"
    assert switches["spine1"]["Level"] == "1" and switches["spine1"]["Switches"] == "leaf[1-2]"


def test_gpu_job_sees_two_gpus(scenario, ctl):
    for host in _compute(scenario):
        out = ctl.check_output("srun --nodelist=%s --gres=gpu:2 --time=1 env" % host)
        visible = re.search(r"^CUDA_VISIBLE_DEVICES=(.*)$", out, re.M).group(1)
        assert len(visible.split(",")) == 2, out


def test_job_asking_for_more_gpus_than_a_node_has_is_refused(scenario, ctl):
    most = max(scenario.node_vars(h)["slurm_node_gres"][0]["count"] for h in _compute(scenario))
    result = ctl.run("srun --gres=gpu:%d --time=1 true" % (most + 1))
    assert result.rc != 0
    assert "Requested node configuration is not available" in result.stderr


def test_accounting_tracks_gpus_and_the_cluster(scenario, ctl):
    tres = ctl.check_output("scontrol show config | sed -n 's/^AccountingStorageTRES *= *//p'").split(",")
    types = {scenario.node_vars(h)["slurm_node_gres"][0]["type"] for h in _compute(scenario)}
    assert "gres/gpu" in tres and {"gres/gpu:%s" % t for t in types} <= set(tres)
    clusters = ctl.check_output("sacctmgr --noheader --parsable2 show cluster format=cluster").split()
    assert scenario.cluster_name in clusters


def test_health_check_program_is_run_by_slurmd(scenario, ctl):
    """slurmd runs the health_check role's wrapper, which leaves the checker's report of each run."""
    config = ctl.check_output("scontrol show config")
    assert re.search(r"^HealthCheckProgram\s*=\s*/usr/local/sbin/gpucluster-health-slurm$", config, re.M)
    interval = scenario.group_vars["all"]["slurm_health_check_interval"]
    assert re.search(r"^HealthCheckInterval\s*=\s*%d sec$" % interval, config, re.M), config
    for host in _compute(scenario):
        node = scenario.host(host)
        report = health_report(scenario, host)
        assert report["status"] == "ok", (host, report)
        age = int(node.check_output("echo $(( $(date +%s) - $(stat -c %Y /var/lib/gpucluster-health/slurm-last.json) ))"))
        assert age <= 3 * interval, (host, age)


def test_configuration_files(scenario, ctl):
    # each file a symlink through the current generation (slurm_config_files): its target's mode and owner count
    live = {name: ctl.file(ctl.file("/etc/slurm/%s" % name).linked_to)
            for name in ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf")}
    for name, conf in live.items():
        assert ctl.file("/etc/slurm/%s" % name).is_symlink, name
        assert conf.mode == 0o644 and conf.user == "root", name
        assert conf.content_string.startswith("#\n# Ansible managed"), name
        # what was checked is what is live
        assert ctl.file("/etc/slurm/.staging/%s" % name).content_string == conf.content_string
    # homogeneous nodes share a NodeName line: the file grows with node types, not nodes
    node_lines = [line for line in live["slurm.conf"].content_string.splitlines() if line.startswith("NodeName=")]
    assert len(node_lines) == len({json.dumps(scenario.node_vars(h), sort_keys=True) for h in _compute(scenario)})
    assert "ProctrackType=proctrack/linuxproc" in live["slurm.conf"].content_string  # the scenario's override
    for host in _compute(scenario):
        node = scenario.host(host)
        local = node.file("/etc/slurm/slurm.conf")
        if scenario.configless:
            assert not local.exists
            assert "--conf-server %s:6817" % scenario.controller in node.file("/etc/default/slurmd").content_string
            assert "enable_configless" in live["slurm.conf"].content_string
        else:
            assert local.content_string == live["slurm.conf"].content_string
            assert node.file("/etc/slurm/gres.conf").content_string == live["gres.conf"].content_string


def test_slurmdbd_conf_and_munge_key(scenario):
    conf = scenario.host(scenario.database).file("/etc/slurm/slurmdbd.conf")
    assert conf.mode == 0o600 and conf.user == "slurm" and conf.group == "slurm"
    sums = set()
    for name in scenario.groups["slurm_controller"] + scenario.groups["slurm_database"] + _compute(scenario):
        key = scenario.host(name).file("/etc/munge/munge.key")
        assert key.mode == 0o400 and key.user == "munge" and key.group == "munge", name
        sums.add(key.sha256sum)
    assert len(sums) == 1


def _limit(limits, name):
    return re.search(r"^%s\s+(\S+)\s+(\S+)" % re.escape(name), limits, re.M).groups()


def test_slurmd_limits_for_jobs(scenario):
    """systemd runs slurmd with the role's limits; a container caps them at its own hard limits (the role says so)."""
    for host in _compute(scenario):
        node = scenario.host(host)
        assert node.check_output("systemctl show -p LimitMEMLOCK --value slurmd") == "infinity"
        assert node.check_output("systemctl show -p LimitNOFILE --value slurmd") == "131072"
        pid = node.check_output("systemctl show -p MainPID --value slurmd")
        limits = node.file("/proc/%s/limits" % pid).content_string
        ceiling = node.file("/proc/1/limits").content_string
        for name in ("Max locked memory", "Max open files", "Max stack size"):
            soft, _hard = _limit(limits, name)
            assert soft == "unlimited" or soft == _limit(ceiling, name)[1] or int(soft) >= 131072, (host, name, soft)
        assert _limit(limits, "Max stack size")[0] == "unlimited"
