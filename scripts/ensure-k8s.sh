#!/usr/bin/env bash
# Make sure this machine has the test-only Kubernetes control plane of the Kubernetes tests (docs/kubernetes.md):
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of k8s.io/kubernetes, kwok's controller, helm and
# Kueue's manager (with its CRDs and webhook manifests),
# built with Go from the released modules that tests/k8s/versions.env names (through the Go module proxy, checked
# against Go's checksum database), and etcd, taken from Debian 13's etcd-server package (through this machine's apt
# cache, in the Debian 13 image). k8s.io/kubernetes cannot be installed with `go install` (its go.mod replaces its
# staging modules with its own tree): it is built in a module of its own that requires it and replaces each staging
# module its go.mod names with the published release of the same version. Built once per machine, versions.env and Go
# version, under GPUCLUSTER_K8S_CACHE (/var/cache/gpucluster-ops/k8s/<key>/bin), with the Go module and build caches
# beside it (a fresh clone's .cache/ is empty in CI; the machine's cache is not). Prints the bin directory. Nothing of
# this is part of the collection. Run after scripts/build-images.sh (make platform); needs root for /var/cache.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${GPUCLUSTER_K8S_CACHE:-/var/cache/gpucluster-ops/k8s}
proxy_conf=${GPUCLUSTER_APT_PROXY_CONF:-/var/cache/gpucluster-ops/apt-proxy.conf}
image=gpucluster/debian-systemd:trixie
# The commands built from k8s.io/kubernetes.
kubernetes_commands=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
tools=("${kubernetes_commands[@]}" kwok helm kueue)

die() { echo "ensure-k8s: $*" >&2; exit 1; }

command -v go >/dev/null || die "go is not installed: the Kubernetes tests build their control plane with it"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache"
versions=$root/tests/k8s/versions.env
# NAME=VALUE lines, read (not run)
version_of() { sed -n "s/^$1=\([^[:space:]#]*\).*/\1/p" "$versions" | tail -1; }
KUBERNETES_VERSION=$(version_of KUBERNETES_VERSION)
KWOK_VERSION=$(version_of KWOK_VERSION)
HELM_VERSION=$(version_of HELM_VERSION)
KUEUE_VERSION=$(version_of KUEUE_VERSION)
for name in KUBERNETES_VERSION KWOK_VERSION HELM_VERSION KUEUE_VERSION; do
    [[ "${!name}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$versions: $name is '${!name}', not a release such as v1.2.3"
done
# A new version, Go or way of building (this script) is a new build.
key=$(cat "$versions" "$0" <(go env GOVERSION) | sha256sum | cut -c1-16)
bin="$cache/$key/bin"

complete() {
    local name
    for name in "${tools[@]}" etcd; do [ -x "$1/$name" ] || return 1; done
    [ -s "$1/kwok-stages.yaml" ] || return 1
    [ -s "$1/kueue-webhooks.yaml" ] && [ -s "$1/kueue-crds/kueue.x-k8s.io_workloads.yaml" ] || return 1
    [ -s "$1/VERSIONS" ]
}

if complete "$bin"; then echo "$bin"; exit 0; fi

mkdir -p "$cache/$key"
work=$(mktemp -d "$cache/$key/bin.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "ensure-k8s: building ${tools[*]} ($KUBERNETES_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION," \
     "kueue $KUEUE_VERSION) into $bin" \
     "(once per machine)" >&2
# The module that builds k8s.io/kubernetes's commands: its staging modules at their published releases.
src="$work/src"
mkdir -p "$src"
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -r "$gomod" ] || die "could not download k8s.io/kubernetes@$KUBERNETES_VERSION through the Go module proxy"
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$gomod")
[ -n "$staging" ] || die "found no staging modules in k8s.io/kubernetes@$KUBERNETES_VERSION's go.mod"
{
    echo "module gpucluster.invalid/k8s-control-plane"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//')"
    echo
    for command in "${kubernetes_commands[@]}"; do echo "tool k8s.io/kubernetes/cmd/$command"; done
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    for module in $staging; do echo "replace $module => $module v0.${KUBERNETES_VERSION#v1.}"; done
} > "$src/go.mod"
# Low CPU priority: this may run beside the molecule scenarios on a machine with few cores.
# The version the API server reports (and helm checks charts' kubeVersion against), as Kubernetes's release build
# stamps it.
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
stamp=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $package.gitVersion=$KUBERNETES_VERSION -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    stamp+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
done
(cd "$src" && nice -n 10 go mod tidy && nice -n 10 go build -trimpath -ldflags="-s$stamp" -o "$work/" \
    "${kubernetes_commands[@]/#/k8s.io/kubernetes/cmd/}") \
    || die "go build of k8s.io/kubernetes $KUBERNETES_VERSION's ${kubernetes_commands[*]} failed"
# kwok and helm have no replace lines: go install builds them at their own dependencies' versions.
GOBIN=$work nice -n 10 go install -trimpath -ldflags=-s "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || die "go install of sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed"
GOBIN=$work nice -n 10 go install -trimpath -ldflags="-s -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || die "go install of helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
# Kueue's manager, and its CRDs and admission webhooks from the same module (its kustomize bases).
GOBIN=$work nice -n 10 go install -trimpath \
    -ldflags="-s -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" \
    || die "go install of sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION failed"
kueue_config="$GOMODCACHE/sigs.k8s.io/kueue@$KUEUE_VERSION/config/components"
mkdir "$work/kueue-crds"
cp "$kueue_config"/crd/bases/kueue.x-k8s.io_*.yaml "$work/kueue-crds/" || die "kueue $KUEUE_VERSION has no CRDs in $kueue_config"
cp "$kueue_config/webhook/manifests.yaml" "$work/kueue-webhooks.yaml" || die "kueue $KUEUE_VERSION has no webhook manifests"
chmod -R u+w "$work/kueue-crds" "$work/kueue-webhooks.yaml"
rm -rf "$src"
# kwok's stages (what it does to the nodes and pods it stands in for), from its release: nodes initialised and kept
# Ready by heartbeats, pods Ready at once, completed and deleted.
stages="$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
for file in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml \
            pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -r "$stages/$file" ] || die "kwok $KWOK_VERSION has no stage $file"
    { echo "---"; cat "$stages/$file"; } >> "$work/kwok-stages.yaml"
done

# etcd 3.5, as Debian 13 packages it (Debian 12's 3.4 is too old for this Kubernetes).
[ -r "$proxy_conf" ] || die "no apt proxy configuration at $proxy_conf: run scripts/ensure-apt-cache.sh first"
docker image inspect "$image" >/dev/null 2>&1 || die "no image $image: run scripts/build-images.sh first"
docker run --rm --network bridge -v "$proxy_conf:/etc/apt/apt.conf.d/01gpucluster-proxy:ro" -v "$work:/out" "$image" \
    sh -c 'set -e; apt-get update -qq >/dev/null; cd /tmp; apt-get download -qq etcd-server >/dev/null
           dpkg-deb -x etcd-server_*.deb x; cp x/usr/bin/etcd /out/etcd
           dpkg-deb -f etcd-server_*.deb Version > /out/etcd.version; chmod 0644 /out/etcd.version' \
    || die "could not take etcd from Debian 13's etcd-server package (image $image, apt proxy $proxy_conf)"

{
    echo "built $(date -u +%FT%TZ) in $(( $(date +%s) - start )) s with $(go env GOVERSION) from tests/k8s/versions.env"
    "$work/kube-apiserver" --version
    echo "kwok $KWOK_VERSION"
    echo "helm $("$work/helm" version --short)"
    echo "kueue $KUEUE_VERSION"
    echo "etcd $(cat "$work/etcd.version") (Debian 13 etcd-server)"
} > "$work/VERSIONS"
complete "$work" || die "the build left $work incomplete"
rm -rf "$bin"
mv "$work" "$bin"
trap - EXIT
echo "ensure-k8s: built in $(( $(date +%s) - start )) s: $bin" >&2
echo "$bin"
