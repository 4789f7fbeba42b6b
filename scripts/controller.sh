#!/usr/bin/env bash
# An Ansible controller with another ansible-core than the host's .venv (issue 43). ansible-core 2.20 and later need
# Python 3.12+, and this machine's Python is 3.11: the controller is a Debian 13 (trixie) root file system with its
# python3 (3.13) and a virtualenv pinned by controllers/ansible-<VERSION>.txt, entered as a chroot in a mount
# namespace of its own. It shares every other namespace with the host (processes, network, users), and the checkout,
# the shared data beside it, /proc, /sys, /dev, /run, /tmp, /var/lib/docker (the containers' records the shim reads)
# and /var/cache/gpucluster-ops are bind-mounted at the same paths: the Docker socket, the tests' docker exec shim (nsenter into a container's processes) and the paths molecule
# hands the Docker engine work as they do on the host. A plain container would break all three.
#
#   scripts/controller.sh build VERSION            build it once per machine (make platform): debootstrap and pip
#   scripts/controller.sh run VERSION COMMAND...   run COMMAND in the checkout with that controller's ansible first on
#                                                  PATH (its own python3, ansible-playbook, molecule, pytest, ...)
#   scripts/controller.sh path VERSION             print its root file system's directory
#
# The root file system lives in GPUCLUSTER_CONTROLLER_CACHE (default /var/cache/gpucluster-ops/controller), one
# directory per recipe (the packages, the build steps and the requirements file hashed), built aside and renamed into place, so an
# interrupted build leaves nothing half made. Needs root (debootstrap, mounts, chroot).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${GPUCLUSTER_CONTROLLER_CACHE:-/var/cache/gpucluster-ops/controller}
mirror=${GPUCLUSTER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
# What the controller's commands need beside Python: git (ansible-test, the build), make, shellcheck (sanity), the
# Docker client (Ansible's docker connection, molecule's driver and the tests' shim call it), procps and iproute2.
packages=python3,python3-venv,ca-certificates,git,make,shellcheck,docker-cli,procps,iproute2

die() { echo "controller: $*" >&2; exit 1; }

requirements() {
    local file=$here/controllers/ansible-$1.txt
    local have
    have=$(find "$here/controllers" -name 'ansible-*.txt' -printf '%f\n' | sed 's/^ansible-//; s/\.txt$//' | sort | tr '\n' ' ')
    [ -f "$file" ] || die "no controller for ansible-core $1: $file is missing (have: $have)"
    echo "$file"
}

root_of() {
    local file key
    file=$(requirements "$1")
    # the recipe: what debootstrap and pip are given, and the steps of build (not the rest of this script)
    key=$( (echo "$suite $mirror $packages"; declare -f build; cat "$file") | sha256sum | cut -c1-16)
    echo "$cache/ansible-$1-$key"
}

# Run "$@" in a private mount namespace with the host's paths bound into root $1 (the mounts vanish with it).
enter() {
    local root=$1
    shift
    local top shared real
    top=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || echo "$here")
    shared=$(dirname "$top")/shared
    # ../shared may be a link (a clone beside a link to the data): the link resolves in the chroot when its target
    # is bound too.
    real=$(readlink -f "$shared" 2>/dev/null || echo "$shared")
    # shellcheck disable=SC2016  # the script expands its own arguments
    unshare --mount --propagation private -- /bin/bash -euo pipefail -c '
        root=$1 top=$2 shared=$3 real=$4; shift 4
        [ "$real" != "$shared" ] || real=
        bind() { [ -e "$1" ] || return 0; mkdir -p "$root$1"; mount --rbind "$1" "$root$1"; }
        for path in /proc /sys /dev /run /tmp /var/lib/docker /var/cache/gpucluster-ops "$top" "$real" "$shared"; do
            bind "$path"
        done
        cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" "$@"' _ "$root" "$top" "$shared" "$real" "$@"
}

build() {
    local version=$1 root tmp file start=$SECONDS
    root=$(root_of "$version")
    file=$(requirements "$version")
    if [ -x "$root/opt/ansible/bin/ansible-playbook" ]; then
        echo "controller: ansible-core $version is built ($root)"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "building a controller needs root (debootstrap, chroot)"
    command -v debootstrap >/dev/null || die "debootstrap is missing (run scripts/ensure-docker.sh as root)"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.build-$version.XXXXXX")
    chmod 0755 "$tmp"          # the chroot's /: every user of its commands must pass it (mktemp makes it 0700)
    # shellcheck disable=SC2064  # expand now
    trap "rm -rf '$tmp' '$tmp.log'" EXIT
    echo "controller: debootstrap $suite for ansible-core $version into $tmp"
    if ! debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1; then
        tail -n 20 "$tmp.log" >&2
        die "debootstrap $suite failed"
    fi
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    cp "$file" "$tmp/opt/requirements.txt"
    # The controller trusts what the host trusts (a site's proxy CA for PyPI, say): the host's local CAs, added.
    if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
        cp -a /usr/local/share/ca-certificates/. "$tmp/usr/local/share/ca-certificates/"
        enter "$tmp" update-ca-certificates >>"$tmp.log" 2>&1 || die "update-ca-certificates failed (log: $tmp.log)"
    fi
    echo "controller: the virtualenv /opt/ansible ($(basename "$file"))"
    if ! enter "$tmp" /bin/sh -c 'python3 -m venv /opt/ansible &&
            /opt/ansible/bin/pip install -q --disable-pip-version-check -r /opt/requirements.txt' >>"$tmp.log" 2>&1; then
        tail -n 20 "$tmp.log" >&2
        die "pip install of $(basename "$file") failed"
    fi
    rm -rf "$tmp"/root/.cache/pip
    # older builds of this version go: they are of another recipe
    rm -rf "$cache/ansible-$version-"*
    mv "$tmp" "$root"
    rm -f "$tmp.log"
    trap - EXIT
    echo "controller: built ansible-core $version ($(enter "$root" /opt/ansible/bin/python -c 'import sys; print("Python %d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo 'Python 3')) in $((SECONDS - start)) s: $root"
}

run() {
    local version=$1 root path entry
    shift
    [ $# -gt 0 ] || die "run $version: no command given"
    root=$(root_of "$version")
    [ -x "$root/opt/ansible/bin/ansible-playbook" ] || die "the ansible-core $version controller is not built: run 'scripts/controller.sh build $version' (make platform builds it)"
    # The host's PATH less its virtualenvs (their python is the host's), the controller's virtualenv first.
    path=/opt/ansible/bin
    IFS=: read -r -a entries <<<"$PATH"
    for entry in "${entries[@]}"; do
        case $entry in */.venv/bin|*/.venv/bin/|"${VIRTUAL_ENV:-/nonexistent}"/bin) ;; *) path=$path:$entry ;; esac
    done
    # The tests' docker shim (scripts/docker-exec-path.sh) names the host's client; the controller has its own.
    local real_docker=${GPUCLUSTER_REAL_DOCKER:-}
    [ -z "$real_docker" ] || [ -x "$root$real_docker" ] || real_docker=/usr/bin/docker
    # shellcheck disable=SC2016  # the inner shell expands its own arguments
    PATH=$path VIRTUAL_ENV=/opt/ansible HOME=/root GPUCLUSTER_CONTROLLER=$version GPUCLUSTER_REAL_DOCKER=$real_docker \
        enter "$root" /bin/bash -c 'cd "$1" && shift && exec "$@"' _ "$PWD" "$@"
}

case ${1:-} in
    build) [ $# -eq 2 ] || die "usage: $0 build VERSION"; build "$2" ;;
    run) [ $# -ge 3 ] || die "usage: $0 run VERSION COMMAND..."; shift; run "$@" ;;
    path) [ $# -eq 2 ] || die "usage: $0 path VERSION"; root_of "$2" ;;
    *) die "usage: $0 build VERSION | run VERSION COMMAND... | path VERSION" ;;
esac
