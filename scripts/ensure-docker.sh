#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine.
# Installs docker.io (and debootstrap, needed for the base images) when absent and starts dockerd in the
# background when it is not running. Needs root for both; as any other user it only checks.
set -euo pipefail

log=${GPUCLUSTER_DOCKERD_LOG:-/var/log/gpucluster-dockerd.log}

if docker info >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "ensure-docker: no Docker engine answers and this is not root: start dockerd, or run as root" >&2
    exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-docker: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "ensure-docker: starting dockerd (log: $log)"
    setsid dockerd >"$log" 2>&1 < /dev/null &
fi

for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "ensure-docker: engine ready ($(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; last lines of $log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
