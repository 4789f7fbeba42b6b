#!/usr/bin/env bash
# Run molecule scenarios (all of molecule/* when none are named), MOLECULE_JOBS at a time (default 2: scenarios
# spend most of their time waiting on apt and containers), print each one's time and result, and fail when any
# failed. Each scenario's full log is kept in .cache/molecule-logs/<scenario>.log; a failed one's tail is printed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
fi
jobs=${MOLECULE_JOBS:-2}
# Every scenario's containers download through this machine's apt package cache: make sure it answers (as root this
# starts it, as anyone else it only checks) before a scenario's containers come up without it.
scripts/ensure-apt-cache.sh || exit 1
mkdir -p .cache/molecule-logs
results=.cache/molecule-logs/results
: >"$results"

run_one() {
    local s=$1 start=$SECONDS log=.cache/molecule-logs/$1.log
    echo "=== molecule test -s $s (log: $log)"
    if molecule test -s "$s" >"$log" 2>&1; then
        printf '%-24s passed  %4d s\n' "$s" $((SECONDS - start)) >>"$results"
    else
        printf '%-24s FAILED  %4d s  (log: %s)\n' "$s" $((SECONDS - start)) "$log" >>"$results"
        echo "=== $s FAILED; last lines of $log:"
        tail -n 60 "$log"
    fi
    echo "=== $s done in $((SECONDS - start)) s"
}

for s in "${scenarios[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n
    done
    run_one "$s" &
done
wait
echo "=== molecule summary ($jobs at a time, $SECONDS s in all)"
sort "$results"
! grep -q FAILED "$results"
