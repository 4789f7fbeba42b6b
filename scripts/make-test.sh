#!/usr/bin/env bash
# make test: the molecule scenarios (scripts/molecule.sh, the long part) start first, and the checks named as
# arguments (make targets: lint, sanity, unit, integration, build-check, docs) run beside them at a lower CPU
# priority (nice MAKE_TEST_CHECKS_NICE, default 5, and as root a CPU cgroup of their own with a low weight, below),
# in the CPU the scenarios leave idle while they wait on apt, containers, Slurm and the jobs of their tests. Every
# check runs to its end even when one fails (make -k); make test fails when any check or any scenario failed. The
# molecule lines are prefixed "[molecule] ".
#
# .cache/molecule-logs/make-test gets start_epoch (MAKE_TEST_START_EPOCH when set), checks_s (the checks' own wall
# time) and end_epoch, for scripts/time-report.py, which prints the budget summary at the end.
#   scripts/make-test.sh MAKE CHECK...
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 2 ] || { echo "usage: $0 MAKE CHECK..." >&2; exit 64; }
make=$1; shift
logs=.cache/molecule-logs
mkdir -p "$logs"
# make test passes when it started (MAKE_TEST_START_EPOCH, before its setup and platform); run alone: now.
started=${MAKE_TEST_START_EPOCH:-$(date +%s)}
echo "start_epoch=$started" >"$logs/make-test"

# ensure-apt-cache.sh and build-images.sh ran before (make test depends on platform); molecule.sh checks the cache.
# SCENARIOS (make test SCENARIOS="a b") narrows the scenarios as in make molecule; empty: all of them.
# shellcheck disable=SC2086
{ scripts/molecule.sh ${SCENARIOS:-} 2>&1 | sed -u 's/^/[molecule] /'; } &
molecule_pid=$!

# nice orders the processes of one CPU cgroup only: the nodes' work (dpkg, the daemons, the modules Ansible runs in
# them) is in Docker's cgroup, which weighs as much as one nice-0 process against everything outside it, so the
# checks' processes took about 60% of the machine during the clusters' converge. As root, the checks run in a CPU
# cgroup of their own with MAKE_TEST_CHECKS_CPU_SHARES (default 128, of Docker's 1024; cgroup v1 cpu.shares, or the
# same ratio of cgroup v2's cpu.weight), so that they take what the scenarios leave. Elsewhere: nice alone.
in_checks_cgroup() {
    local shares=${MAKE_TEST_CHECKS_CPU_SHARES:-128} dir
    [ "$(id -u)" = 0 ] || return 0
    if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
        dir=/sys/fs/cgroup/cpu/gpucluster-checks
        mkdir -p "$dir" && echo "$shares" >"$dir/cpu.shares" && echo "$BASHPID" >"$dir/cgroup.procs" || return 0
    elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
        dir=/sys/fs/cgroup/gpucluster-checks
        mkdir -p "$dir" && echo $(( shares * 100 / 1024 > 0 ? shares * 100 / 1024 : 1 )) >"$dir/cpu.weight" \
            && echo "$BASHPID" >"$dir/cgroup.procs" || return 0
    else
        return 0
    fi
    echo "=== checks in the CPU cgroup $dir (weight $shares of Docker's 1024)"
}

checks_start=$SECONDS
(
    in_checks_cgroup
    exec nice -n "${MAKE_TEST_CHECKS_NICE:-5}" "$make" -k --no-print-directory "$@"
)
checks_rc=$?
checks_s=$((SECONDS - checks_start))
echo "checks_s=$checks_s" >>"$logs/make-test"
if [ $checks_rc -eq 0 ]; then
    echo "=== checks ($*) passed in $checks_s s; waiting for the molecule scenarios"
else
    echo "=== checks ($*) FAILED after $checks_s s (make exit $checks_rc, output above); waiting for the molecule scenarios"
fi

wait "$molecule_pid"
molecule_rc=$?
for dir in /sys/fs/cgroup/cpu/gpucluster-checks /sys/fs/cgroup/gpucluster-checks; do
    [ -d "$dir" ] && rmdir "$dir" 2>/dev/null
done
echo "end_epoch=$(date +%s)" >>"$logs/make-test"
scripts/time-report.py --summary
if [ $checks_rc -ne 0 ] || [ $molecule_rc -ne 0 ]; then
    echo "make test FAILED:$([ $checks_rc -ne 0 ] && echo " checks (make exit $checks_rc)")$([ $molecule_rc -ne 0 ] && echo " molecule (exit $molecule_rc)")"
    exit 1
fi
echo "make test passed in $(( $(date +%s) - started )) s"
