#!/usr/bin/env bash
# Run molecule scenarios one after another (all of molecule/* when none are named), print each one's time and
# result, and fail when any failed. Each scenario's full log is kept in .cache/molecule-logs/<scenario>.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
fi
export GPUCLUSTER_APT_CACHE=${GPUCLUSTER_APT_CACHE:-/var/cache/gpucluster-ops/apt}
mkdir -p "$GPUCLUSTER_APT_CACHE" .cache/molecule-logs
failed=()
summary=()
for s in "${scenarios[@]}"; do
    start=$SECONDS
    echo "=== molecule test -s $s"
    if molecule test -s "$s" 2>&1 | tee ".cache/molecule-logs/$s.log"; then
        summary+=("$(printf '%-24s passed  %4d s' "$s" $((SECONDS - start)))")
    else
        summary+=("$(printf '%-24s FAILED  %4d s  (log: .cache/molecule-logs/%s.log)' "$s" $((SECONDS - start)) "$s")")
        failed+=("$s")
    fi
done
echo "=== molecule summary"
printf '%s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ]
