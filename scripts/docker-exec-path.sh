# shellcheck shell=bash
# Sourced by scripts/molecule.sh and scripts/cluster.sh: as root, put tests/support/bin first on PATH, so that the
# tests' `docker exec` (Ansible's docker connection, testinfra's docker backend, the tests' own commands) starts the
# process in the container without the round trip through dockerd (tests/support/container_exec.py, docs/testing.md).
# GPUCLUSTER_FAST_EXEC=0 turns it off; the real docker stays in GPUCLUSTER_REAL_DOCKER.
if [ "${GPUCLUSTER_FAST_EXEC:-1}" = 1 ] && [ "$(id -u)" = 0 ] && [ -z "${GPUCLUSTER_REAL_DOCKER:-}" ]; then
    if GPUCLUSTER_REAL_DOCKER=$(command -v docker); then
        export GPUCLUSTER_REAL_DOCKER
        export PATH="$PWD/tests/support/bin:$PATH"
    else
        unset GPUCLUSTER_REAL_DOCKER
    fi
fi
