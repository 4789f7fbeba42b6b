#!/usr/bin/env bash
# make test: the molecule scenarios (scripts/molecule.sh, the long part) start first, and the checks named as
# arguments (make targets: lint, sanity, unit, integration, build-check, docs) run beside them at a lower CPU
# priority (nice MAKE_TEST_CHECKS_NICE, default 5), in the CPU the scenarios leave idle while they wait on apt,
# containers, Slurm and the jobs of their tests. Every check runs to its end even when one fails (make -k); make
# test fails when any check or any scenario failed. The molecule lines are prefixed "[molecule] ".
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

checks_start=$SECONDS
nice -n "${MAKE_TEST_CHECKS_NICE:-5}" "$make" -k --no-print-directory "$@"
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
echo "end_epoch=$(date +%s)" >>"$logs/make-test"
scripts/time-report.py --summary
if [ $checks_rc -ne 0 ] || [ $molecule_rc -ne 0 ]; then
    echo "make test FAILED:$([ $checks_rc -ne 0 ] && echo " checks (make exit $checks_rc)")$([ $molecule_rc -ne 0 ] && echo " molecule (exit $molecule_rc)")"
    exit 1
fi
echo "make test passed in $(( $(date +%s) - started )) s"
