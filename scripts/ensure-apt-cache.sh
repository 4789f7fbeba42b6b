#!/usr/bin/env bash
# Make sure this machine's apt package cache answers: an apt-cacher-ng proxy of the package archives that every
# container of the lab and of the molecule scenarios downloads through, so that a package is fetched once per machine.
# Installs apt-cacher-ng when absent (without letting the package start its own instance on its default config) and
# starts it in the background with a config of our own: cache in GPUCLUSTER_APT_CACHE, port GPUCLUSTER_APT_PROXY_PORT,
# listening only on the Docker bridge's gateway (the address containers reach the host on, from the default bridge
# and from user-defined networks alike). Writes GPUCLUSTER_APT_PROXY_CONF, the apt configuration file that the
# containers bind-mount into /etc/apt/apt.conf.d/. Needs root to install, start or write; as any other user it only
# checks. Run after scripts/ensure-docker.sh (make platform). See docs/apt-cache.md.
set -euo pipefail

cache=${GPUCLUSTER_APT_CACHE:-/var/cache/gpucluster-ops/apt}
port=${GPUCLUSTER_APT_PROXY_PORT:-3142}
conf=${GPUCLUSTER_APT_PROXY_CONF:-/var/cache/gpucluster-ops/apt-proxy.conf}
# One instance per port: its generated config, pid file and control socket, and its logs.
run=/run/gpucluster-apt-cacher-ng-$port
logdir=/var/log/gpucluster-apt-cacher-ng-$port
user=apt-cacher-ng

die() { echo "ensure-apt-cache: $*" >&2; exit 1; }

gateway=$(docker network inspect bridge --format '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null || true)
if [ -z "$gateway" ]; then   # no access to the engine, or it did not record one: the bridge's own address is it
    gateway=$(ip -4 -o addr show docker0 2>/dev/null | awk '{sub("/.*", "", $4); print $4; exit}')
fi
[ -n "$gateway" ] || die "found no address of Docker's default bridge (docker0): run scripts/ensure-docker.sh first"
url="http://$gateway:$port"
want_conf="// Written by gpucluster.ops scripts/ensure-apt-cache.sh: download packages through this machine's cache.
Acquire::http::Proxy \"$url\";"

# HTTP status line of the proxy's report page, or nothing (bash's /dev/tcp: no curl or wget needed), within 5 s.
answer() {
    # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
    timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 0
        printf "GET /acng-report.html HTTP/1.0\r\n\r\n" >&3
        IFS= read -r line <&3 || true
        printf "%s" "${line%$'"'"'\r'"'"'}"' _ "$gateway" "$port" 2>/dev/null || true
}
answers() { [[ "$(answer)" == HTTP/1.?\ 200* ]]; }
# Whether a process runs (a zombie, one that exited and is not yet reaped, does not).
alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# The pid of this port's instance when it is alive and is apt-cacher-ng, or nothing.
our_pid() {
    local pid
    pid=$(cat "$run/pid" 2>/dev/null) || return 0
    alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = apt-cacher-ng ] && echo "$pid"
    return 0
}
conf_current() { [ -f "$conf" ] && [ "$(cat "$conf")" = "$want_conf" ]; }
last_log() {
    local f
    for f in "$logdir/daemon.log" "$logdir/apt-cacher.err"; do
        [ -s "$f" ] && { echo "--- last lines of $f:"; tail -n 20 "$f"; }
    done
    return 0
}

# As root, one run at a time per port (two make platform at once): the second waits, then finds it running.
if [ "$(id -u)" = 0 ]; then
    exec 9>"$run.lock"
    flock -w 120 9 || die "another ensure-apt-cache.sh has held $run.lock for 2 minutes"
fi

pid=$(our_pid)
if [ -n "$pid" ] && answers; then
    serving=$(sed -n 's/^CacheDir: //p' "$run/acng.conf" 2>/dev/null)
    [ "$serving" = "$cache" ] || die "the proxy on port $port (pid $pid) serves the cache $serving, not $cache:" \
        "set GPUCLUSTER_APT_PROXY_PORT (and GPUCLUSTER_APT_PROXY_CONF) for a second one, or stop it (kill $pid)"
    conf_current && exit 0
fi

if [ "$(id -u)" != 0 ]; then
    if [ -n "$pid" ] && answers; then
        die "the proxy answers on $url but $conf is missing or out of date: run this script as root"
    fi
    die "no package cache answers on $url and this is not root: run scripts/ensure-apt-cache.sh (make platform) as root"
fi

if [ -z "$pid" ] || ! answers; then
    if [ -n "$pid" ]; then   # ours but not answering on the current gateway (Docker's bridge changed, or it hangs)
        echo "ensure-apt-cache: pid $pid does not answer on $url; restarting it"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 10); do alive "$pid" || break; sleep 1; done
        if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; sleep 1; fi
    elif [ -n "$(answer)" ]; then
        die "something else answers on $url (another apt-cacher-ng, e.g. the package's own service?): stop it or" \
            "set GPUCLUSTER_APT_PROXY_PORT"
    fi

    if ! command -v apt-cacher-ng >/dev/null 2>&1; then
        echo "ensure-apt-cache: installing apt-cacher-ng"
        # The package's postinst starts an instance on its default config (every address, port 3142) that would take
        # our port: forbid service starts while it installs (policy-rc.d, which invoke-rc.d and deb-systemd-invoke
        # honour), then disable that service so that it does not come up at the next boot either.
        policy=/usr/sbin/policy-rc.d
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod 0755 "$policy"
            trap 'rm -f "$policy"' EXIT
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends apt-cacher-ng >/dev/null
        update-rc.d apt-cacher-ng disable >/dev/null 2>&1 || true
        deb-systemd-helper disable apt-cacher-ng.service >/dev/null 2>&1 || true
    fi
    id "$user" >/dev/null 2>&1 || die "the package did not create the user $user"

    mkdir -p "$cache" "$run" "$logdir"
    # Not recursive: what is already in the cache keeps its owner (apt-cacher-ng only creates and renames in it).
    chown "$user:$user" "$cache" "$run" "$logdir"
    # Debian's remappings (every Debian mirror's URLs are one repository in the cache; downloads go to the mirror a
    # client named), no admin password (the port is reachable only from this machine and its containers).
    cat >"$run/acng.conf" <<EOF
# Written by gpucluster.ops scripts/ensure-apt-cache.sh; rewritten at every start.
CacheDir: $cache
LogDir: $logdir
SupportDir: /usr/lib/apt-cacher-ng
Port: $port
BindAddress: $gateway
SocketPath: $run/socket
PidFile: $run/pid
ReportPage: acng-report.html
ExThreshold: 4
FollowIndexFileRemoval: 1
UnbufferLogs: 1
VerboseLog: 1
Remap-debrep: file:deb_mirror*.gz /debian
Remap-secdeb: security.debian.org security.debian.org/debian-security deb.debian.org/debian-security /debian-security cdn-fastly.deb.debian.org/debian-security
EOF
    rm -f "$run/pid"
    echo "ensure-apt-cache: starting apt-cacher-ng on $url, cache $cache (logs: $logdir)"
    setsid setpriv --reuid="$user" --regid="$user" --init-groups \
        apt-cacher-ng -c "$run" ForeGround=1 >"$logdir/daemon.log" 2>&1 </dev/null 9>&- &
    started=$!
    up=0
    for _ in $(seq 1 30); do
        if answers; then up=1; break; fi
        alive "$started" || break
        # It stays up when it cannot listen: the log says so at once.
        grep -q "Couldn't bind" "$logdir/daemon.log" 2>/dev/null && break
        sleep 1
    done
    if [ "$up" = 0 ]; then
        echo "ensure-apt-cache: apt-cacher-ng did not answer on $url within 30 s" >&2
        last_log >&2
        kill "$started" 2>/dev/null || true
        exit 1
    fi
    [ -s "$run/pid" ] || echo "$started" >"$run/pid"
fi

# A directory here is what Docker makes of a bind mount whose source is missing (a container started before this
# script ran): replace it with the file.
[ -d "$conf" ] && rmdir "$conf"
if ! conf_current; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want_conf" >"$conf.tmp"
    chmod 0644 "$conf.tmp"
    mv -f "$conf.tmp" "$conf"
    echo "ensure-apt-cache: wrote $conf"
fi
echo "ensure-apt-cache: proxy ready on $url (cache $cache)"
