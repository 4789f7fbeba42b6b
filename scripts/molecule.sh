#!/usr/bin/env bash
# Run molecule scenarios (all of molecule/* when none are named), MOLECULE_JOBS at a time (default 2), and up to
# MOLECULE_JOBS_IN_VERIFY (default 3) while every running scenario is in its verify stage: the shared clusters'
# test modules mostly wait on Slurm, jobs and timeouts, their converges do not, so a third scenario only starts
# once both clusters are testing. The first scenario (the longest, whose end is the run's end) runs at the normal CPU
# priority and each next one MOLECULE_NICE_STEP (default 2) nice levels lower, at most 10: on this 2-core machine the
# others then fill the CPU the longest one leaves idle instead of stretching it (0: all at the same priority); their
# containers get the same lower weight as CPU shares. Print each one's time and result, and fail when any failed.
# Each scenario's full log is kept in .cache/molecule-logs/<scenario>.log, every line prefixed with the seconds since
# the scenario started (so that scripts/time-report.py can time molecule's stages); a failed one's tail is printed.
# The verifier writes .cache/molecule-logs/<scenario>.junit.xml (.config/molecule/config.yml).
# At the end scripts/time-report.py prints every time against molecule/budget.yml; it never fails the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    # Longest first (by their budgets in molecule/budget.yml), so that the short ones fill the gaps at the end.
    mapfile -t scenarios < <(python3 - <<'PY'
import glob, os, yaml
with open("molecule/budget.yml") as handle:
    budget = (yaml.safe_load(handle) or {}).get("scenarios") or {}
names = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob("molecule/*/molecule.yml"))
for name in sorted(names, key=lambda n: -(budget.get(n) or 0)):
    print(name)
PY
)
fi
jobs=${MOLECULE_JOBS:-2}
jobs_in_verify=${MOLECULE_JOBS_IN_VERIFY:-3}
nice_step=${MOLECULE_NICE_STEP:-2}
# Every scenario's containers download through this machine's apt package cache: make sure it answers (as root this
# starts it, as anyone else it only checks) before a scenario's containers come up without it.
scripts/ensure-apt-cache.sh || exit 1
# docker exec without dockerd's round trip, as root (scripts/docker-exec-path.sh).
. scripts/docker-exec-path.sh
# Lines reach the log as they are written, so that their timestamps are right.
export PYTHONUNBUFFERED=1
# Plain lines, as the Makefile asks, also when this script runs alone: the time report reads molecule's plain
# "[scenario > stage] Executing" markers, which colour turns into another format.
export PY_COLORS=${PY_COLORS:-0} ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-false}
logs=.cache/molecule-logs
mkdir -p "$logs"
results=$logs/results
: >"$results"
# Where the machine's CPU went (for the time report): busy and idle CPU seconds of the whole machine (/proc/stat,
# every core), and the CPU seconds of Docker's containers (the nodes' own work: dpkg, daemons, the simulator, the
# commands the tests run in them; cgroup v1 or v2). "-" where it cannot be read.
cpu_record() {
    local prefix=$1 busy=- idle=- nodes=- ns u n s i io irq sirq st
    if read -r _ u n s i io irq sirq st _ </proc/stat 2>/dev/null; then
        busy=$(( (u + n + s + irq + sirq + st) / $(getconf CLK_TCK) ))
        idle=$(( (i + io) / $(getconf CLK_TCK) ))
    fi
    if ns=$(cat /sys/fs/cgroup/cpuacct/docker/cpuacct.usage 2>/dev/null); then
        nodes=$(( ns / 1000000000 ))
    elif [ -d /sys/fs/cgroup/system.slice ]; then
        nodes=$(cat /sys/fs/cgroup/system.slice/docker-*.scope/cpu.stat 2>/dev/null \
                | awk '$1 == "usage_usec" {t += $2} END {print int(t / 1000000)}')
    fi
    echo "${prefix}_cpu_busy_s=$busy"
    echo "${prefix}_cpu_idle_s=$idle"
    echo "${prefix}_containers_cpu_s=$nodes"
}

# This run, for the report: when, where, how many at a time and which scenarios ("all" when none were named).
{
    echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "start_epoch=$(date +%s)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "jobs=$jobs"
    echo "jobs_in_verify=$jobs_in_verify"
    echo "nice_step=$nice_step"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    cpu_record start
    if [ $# -eq 0 ]; then echo "selection=all"; else echo "selection=named"; fi
    echo "scenarios=${scenarios[*]}"
} >"$logs/run"

# Prefix each line of stdin with the seconds since $1 (microseconds since the epoch), to a tenth of a second.
stamp() {
    local t0=$1 line t
    while IFS= read -r line || [ -n "$line" ]; do
        t=$(( ${EPOCHREALTIME/[.,]/} - t0 ))
        printf '%6d.%d %s\n' $((t / 1000000)) $((t / 100000 % 10)) "$line"
    done
}

# The nice level's CPU weight for the scenario's containers as docker's CPU shares (the kernel's weights: 1024 at nice
# 0, about 1.25 times less per level). The nodes' own work (dpkg, the daemons, the modules Ansible runs in them) is in
# their containers' cgroups, and each container has the same 1024 shares there, whatever the nice level of the process
# that started the work: without this, nice would order the controllers' work only.
cpu_shares() {
    awk -v n="$1" 'BEGIN {w = 1024 / 1.25 ^ n; printf "%d\n", (w < 2 ? 2 : w + 0.5)}'
}

# Once molecule created the scenario's containers (its log shows the prepare stage), give them their CPU shares; a
# container keeps them when a fault test stops and starts it. Nothing for the normal weight.
share_containers() {
    local s=$1 shares=$2 log=$3 names
    [ "$shares" -ge 1024 ] && return 0
    # The scenario's platforms, else the base config's (molecule's own rule), their names expanded as molecule does.
    names=$(MOLECULE_SCENARIO_NAME=$s python3 - "$s" <<'PY'
import os, sys, yaml
platforms = None
for path in ("molecule/%s/molecule.yml" % sys.argv[1], ".config/molecule/config.yml"):
    with open(path) as handle:
        platforms = platforms or (yaml.safe_load(handle) or {}).get("platforms")
print(" ".join(os.path.expandvars(p["name"]) for p in platforms or []))
PY
) || names=""
    if [ -z "$names" ]; then
        echo "=== $s: no platform names found, its containers keep Docker's CPU shares"
        return 0
    fi
    until grep -q "\[$s > prepare\] Executing" "$log" 2>/dev/null; do sleep 5; done
    # shellcheck disable=SC2086
    docker update --cpu-shares "$shares" $names >/dev/null || echo "=== $s: could not set the CPU shares of $names"
}

# The controller a scenario runs on: MOLECULE_CONTROLLERS lists scenario=version pairs (the Makefile's); a scenario
# not listed runs on this shell's ansible (the host's .venv).
controller_of() {
    local pair
    for pair in ${MOLECULE_CONTROLLERS:-}; do
        [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return 0; }
    done
    return 1
}

run_one() {
    local s=$1 niceness=$2 start=$SECONDS log=$logs/$1.log t0=${EPOCHREALTIME/[.,]/} sharer
    rm -f "$logs/$s.junit.xml" "$logs/$s.cpu" "$logs/$s.cpu.jsonl" "$log"
    echo "=== molecule test -s $s (nice $niceness, containers' CPU shares $(cpu_shares "$niceness"), log: $log)"
    share_containers "$s" "$(cpu_shares "$niceness")" "$log" &
    sharer=$!
    local controller=() version
    if version=$(controller_of "$s"); then
        controller=(scripts/controller.sh run "$version")
        echo "=== $s: on the ansible-core $version controller (scripts/controller.sh)"
    fi
    if nice -n "$niceness" "${controller[@]}" molecule test -s "$s" 2>&1 | stamp "$t0" >"$log"; then
        printf '%-24s passed  %4d s\n' "$s" $((SECONDS - start)) >>"$results"
    else
        printf '%-24s FAILED  %4d s  (log: %s)\n' "$s" $((SECONDS - start)) "$log" >>"$results"
        echo "=== $s FAILED; last lines of $log:"
        tail -n 60 "$log"
    fi
    kill "$sharer" 2>/dev/null
    wait "$sharer" 2>/dev/null
    echo "=== $s done in $((SECONDS - start)) s"
    # The scenario's controller-side CPU (molecule, Ansible and its docker clients, pytest): this subshell's children,
    # from bash's own `times` (run here, not in a command substitution, which would be a new process).
    times >"$logs/$s.times"
    awk 'NR == 2 {t = 0; for (i = 1; i <= 2; i++) {split($i, p, "m"); t += p[1] * 60 + p[2]}
                  printf "controller_cpu_s=%.0f\n", t}' "$logs/$s.times" >"$logs/$s.cpu" && rm -f "$logs/$s.times"
}

# The scenarios running now (pid -> name), and whether every one of them is in its verify stage (its log says so).
declare -A running_names=()
all_in_verify() {
    local pid
    for pid in "${!running_names[@]}"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            unset "running_names[$pid]"
        else
            local name=${running_names[$pid]}
            grep -q "\[$name > verify\] Executing" "$logs/$name.log" 2>/dev/null || return 1
        fi
    done
}

index=0
for s in "${scenarios[@]}"; do
    niceness=$(( index * nice_step > 10 ? 10 : index * nice_step ))
    index=$((index + 1))
    while true; do
        n=$(jobs -rp | wc -l)
        [ "$n" -lt "$jobs" ] && break
        [ "$n" -lt "$jobs_in_verify" ] && all_in_verify && break
        sleep 5
    done
    run_one "$s" "$niceness" &
    running_names[$!]=$s
done
wait
{
    echo "wall_s=$SECONDS"
    echo "end_epoch=$(date +%s)"
    echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    cpu_record end
} >>"$logs/run"
echo "=== molecule summary ($jobs at a time, $SECONDS s in all)"
if ! scripts/time-report.py --logs "$logs"; then
    echo "=== (the time report failed; the results:)"
    sort "$results"
fi
! grep -q FAILED "$results"
