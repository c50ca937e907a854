#!/usr/bin/env bash
# install.sh builds the Kubernetes control plane that modelserve's kubernetes
# fleet is tested against: kube-apiserver, kube-controller-manager and
# kube-scheduler from k8s.io/kubernetes, etcd, and kwok (which plays the nodes
# and moves pods through their lifecycle without running containers). There
# is no network here but the Go module proxy, so everything is built from Go
# modules, in scratch modules outside the tree: the project's own go.mod never
# depends on Kubernetes' server code.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod points each
# staging module (k8s.io/api, client-go, ...) at ./staging/src. The scratch
# module replaces each of them with its published release (v0.X.Y for
# v1.X.Y), read from that same go.mod so the list cannot drift.
#
# A second run finds the folder ready and returns at once. A build goes into a
# temporary folder that is swapped in whole: a run cut short leaves the old
# control plane or none, never half of one.
#
# Progress goes to stderr; stdout is one line, the folder holding
#   bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kwok}
#   stages/{node,pod}/*.yaml   kwok's "fast" Stage rules
#   BUILD                      the versions, and how long the build took
# at <cache>/kube-<version>, where <cache> is $MODELSERVE_CACHE, else
# $XDG_CACHE_HOME/modelserve, else ~/.cache/modelserve.
set -euo pipefail

k8s=1.36.3
staging=0.${k8s#1.}
etcd=3.6.16
kwok=0.8.0

cache=${MODELSERVE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/modelserve}
dir=$cache/kube-$k8s
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

say() { printf 'kubetest/install: %s\n' "$*" >&2; }

ready() {
	local b
	for b in "${bins[@]}"; do [[ -x $dir/bin/$b ]] || return 1; done
	[[ -f $dir/stages/node/node-heartbeat-with-lease.yaml ]] && compgen -G "$dir/stages/pod/*.yaml" >/dev/null
}

if ready; then
	say "$(head -n 1 "$dir/BUILD") at $dir"
	printf '%s\n' "$dir"
	exit 0
fi

go=${GO:-go}
if ! command -v "$go" >/dev/null; then
	say "go is missing: the control plane is built from Go modules and needs the Go toolchain on PATH"
	exit 1
fi

start=$SECONDS
mkdir -p "$cache"
work=$(mktemp -d "$cache/.kube-$k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/stages/node" "$work/stages/pod"
# Symbols and DWARF are of no use to a test fixture, and leaving them out
# makes linking these large binaries much faster; -trimpath keeps the build
# folder's name out of them.
build=(-trimpath -ldflags=-s\ -w)
export GOFLAGS=-mod=mod GOWORK=off

# 1. kube-apiserver, kube-controller-manager, kube-scheduler, in one go build
#    so the packages they share are compiled once.
src=$work/src/kubernetes
mkdir -p "$src"
(
	cd "$src"
	"$go" mod init modelserve.test/kube >/dev/null 2>&1
	say "reading k8s.io/kubernetes v$k8s's module"
	gomod=$("$go" mod download -json "k8s.io/kubernetes@v$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
	staged=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$gomod")
	if [[ -z $staged ]]; then
		say "found no staging modules in $gomod"
		exit 1
	fi
	for m in $staged; do "$go" mod edit -replace "$m=$m@v$staging"; done
	"$go" mod edit -require "k8s.io/kubernetes@v$k8s"
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		"$go" mod edit -tool "k8s.io/kubernetes/cmd/$c"
	done
	say "downloading k8s.io/kubernetes v$k8s and its $(wc -w <<<"$staged") staging modules at v$staging"
	"$go" mod tidy >&2
	say "building kube-apiserver, kube-controller-manager, kube-scheduler (several minutes on a small machine)"
	"$go" build "${build[@]}" -o "$work/bin/" k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
)

# 2. etcd: its server's own main, in a module of its own (its dependencies'
#    versions differ from Kubernetes').
src=$work/src/etcd
mkdir -p "$src"
(
	cd "$src"
	"$go" mod init modelserve.test/etcd >/dev/null 2>&1
	cat >main.go <<'GO'
// etcd for modelserve's test control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	"$go" mod edit -require "go.etcd.io/etcd/server/v3@v$etcd"
	say "building etcd v$etcd"
	"$go" mod tidy >&2
	"$go" build "${build[@]}" -o "$work/bin/etcd" .
)

# 3. kwok, and the Stage rules it ships that move nodes to Ready and pods to
#    Running/Ready at once ("fast"), and keep the nodes' leases renewed so
#    the node controller never finds them gone.
say "building kwok v$kwok"
GOBIN=$work/bin "$go" install "${build[@]}" "sigs.k8s.io/kwok/cmd/kwok@v$kwok"
kwoksrc=$("$go" env GOMODCACHE)/sigs.k8s.io/kwok@v$kwok
for stage in node/fast node/heartbeat-with-lease pod/fast; do
	kind=${stage%/*}
	for f in "$kwoksrc/kustomize/stage/$stage"/*.yaml; do
		[[ $(basename "$f") == kustomization.yaml ]] && continue
		cp "$f" "$work/stages/$kind/"
	done
done

printf 'kubernetes v%s (staging v%s), etcd v%s, kwok v%s; built in %ds\n' \
	"$k8s" "$staging" "$etcd" "$kwok" $((SECONDS - start)) >"$work/BUILD"
rm -rf "$work/src"
chmod -R u+w "$work"

rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
if ! ready; then
	say "the control plane is incomplete in $dir"
	exit 1
fi
say "$(head -n 1 "$dir/BUILD") at $dir"
printf '%s\n' "$dir"
