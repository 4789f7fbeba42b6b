#!/usr/bin/env bash
# The edit loop on the shared test cluster (molecule/cluster-deb12, cluster-deb13; docs/testing.md): build it once,
# keep it, and rerun its test modules against it; make molecule builds, tests and removes it in one go.
#   cluster.sh up    [deb13|deb12]           create the containers, prepare and converge them with site.yml (again)
#   cluster.sh test  [deb13|deb12] [MODULE...]  run the test modules (all, or those named: test_3_health_drain)
#   cluster.sh down  [deb13|deb12]           remove the cluster's containers and network
# Every module starts from the cluster's known state (the reset in molecule/cluster-shared/tests/conftest.py), so a
# module can be rerun as often as needed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
[ $# -ge 1 ] || usage
action=$1; shift
release=${1:-deb13}
case $release in
    deb12|deb13) [ $# -eq 0 ] || shift ;;
    test_*) release=deb13 ;;
    *) echo "cluster: unknown release '$release' (deb12 or deb13)" >&2; exit 64 ;;
esac
scenario=cluster-$release
# Every container downloads through the machine's package cache (docs/apt-cache.md).
scripts/ensure-apt-cache.sh
# docker exec without dockerd's round trip, as root (scripts/docker-exec-path.sh).
. scripts/docker-exec-path.sh

case $action in
    up) molecule converge -s "$scenario" ;;
    test) GPUCLUSTER_CLUSTER_TESTS="$*" molecule verify -s "$scenario" ;;
    down) molecule destroy -s "$scenario" ;;
    *) usage ;;
esac
