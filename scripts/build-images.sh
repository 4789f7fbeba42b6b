#!/usr/bin/env bash
# Build the local Debian base images that molecule and the lab run on (no registry is reachable here).
#   gpucluster/debian-systemd:bookworm   Debian 12
#   gpucluster/debian-systemd:trixie     Debian 13
# Each is a debootstrap (minbase + python3, python3-apt, systemd, dbus) imported into Docker, then the systemd
# layer of images/debian-systemd/Dockerfile (with the test images' bytecode cache for Ansible's modules,
# images/debian-systemd/gpucluster_zipcache.py). An image is rebuilt only when its recipe (this script, the Dockerfile
# and that file) changes: the recipe's hash is stored as the label org.gpucluster.recipe.
# Usage: build-images.sh [--force] [SUITE...]     (default suites: bookworm trixie)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
repo=${GPUCLUSTER_IMAGE_REPO:-gpucluster/debian-systemd}
mirror=${GPUCLUSTER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${GPUCLUSTER_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
packages=python3,python3-apt,systemd,systemd-sysv,dbus,ca-certificates,iproute2
force=0
suites=()
for arg in "$@"; do
    case $arg in
        --force) force=1 ;;
        bookworm|trixie) suites+=("$arg") ;;
        *) echo "build-images: unknown argument '$arg' (suites: bookworm trixie)" >&2; exit 2 ;;
    esac
done
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)

# The rootfs recipe (what debootstrap makes) and the full recipe (rootfs + systemd layer) are hashed apart, so a
# change to the Dockerfile alone does not redo the debootstrap.
rootfs_recipe=$(echo "debootstrap minbase $mirror $packages" | sha256sum | cut -c1-16)
recipe=$( (echo "$rootfs_recipe"; echo "$security_mirror"; cat "$0" "$here/images/debian-systemd/Dockerfile" \
    "$here/images/debian-systemd/gpucluster_zipcache.py") | sha256sum | cut -c1-16)

build_one() {
    local suite=$1 tag="$repo:$1" have root
    have=$(docker image inspect -f '{{ index .Config.Labels "org.gpucluster.recipe" }}' "$tag" 2>/dev/null || true)
    if [ "$force" = 0 ] && [ "$have" = "$recipe" ]; then
        echo "build-images: $tag is current (recipe $recipe)"
        return 0
    fi
    local start=$SECONDS
    have=$(docker image inspect -f '{{ index .Config.Labels "org.gpucluster.rootfs" }}' "$repo-rootfs:$suite" 2>/dev/null || true)
    if [ "$force" = 1 ] || [ "$have" != "$rootfs_recipe" ]; then
        command -v debootstrap >/dev/null || { echo "build-images: debootstrap is missing (run scripts/ensure-docker.sh as root)" >&2; return 1; }
        root=$(mktemp -d "/var/tmp/gpucluster-rootfs-$suite.XXXXXX")
        # shellcheck disable=SC2064  # expand now: the trap runs after build_one's locals are gone
        trap "rm -rf '$root' '$root.log'" EXIT
        echo "build-images: debootstrap $suite into $root"
        if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1; then
            echo "build-images: debootstrap $suite failed; last lines of $root.log:" >&2
            tail -n 20 "$root.log" >&2
            rm -rf "$root"
            return 1
        fi
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -c . | docker import -c "LABEL org.gpucluster.rootfs=$rootfs_recipe" - "$repo-rootfs:$suite" >/dev/null
        rm -rf "$root" "$root.log"
    fi
    DOCKER_BUILDKIT=0 docker build -q --build-arg BASE="$repo-rootfs:$suite" --build-arg RECIPE="$recipe" --build-arg MIRROR="$mirror" --build-arg SECURITY_MIRROR="$security_mirror" \
        -t "$tag" "$here/images/debian-systemd" >/dev/null
    echo "build-images: built $tag (recipe $recipe) in $((SECONDS - start)) s"
}

pids=()
for suite in "${suites[@]}"; do
    build_one "$suite" &
    pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
    wait "$pid" || rc=1
done
exit $rc
