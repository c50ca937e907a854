#!/usr/bin/env bash
# install.sh builds Jaeger, the trace backend modelserve's tracing is tested
# against: the all-in-one v2 binary (OTLP on 4317/4318, query API on 16686,
# in-memory storage), from the Go module proxy, in a scratch module outside
# the tree so the project's go.mod never depends on Jaeger.
#
# A second run finds the binary ready and returns at once. The build goes into
# a temporary folder swapped in whole: a run cut short leaves the old binary
# or none. Progress goes to stderr; stdout is one line, the folder holding
# bin/jaeger, at <cache>/jaeger-<version>, where <cache> is $MODELSERVE_CACHE,
# else $XDG_CACHE_HOME/modelserve, else ~/.cache/modelserve.
set -euo pipefail

version=1.76.0
cache=${MODELSERVE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/modelserve}
dir=$cache/jaeger-$version

say() { printf 'jaegertest/install: %s\n' "$*" >&2; }

if [[ -x $dir/bin/jaeger ]]; then
	say "jaeger v$version at $dir"
	printf '%s\n' "$dir"
	exit 0
fi

go=${GO:-go}
if ! command -v "$go" >/dev/null; then
	say "go is missing: jaeger is built from Go modules and needs the Go toolchain on PATH"
	exit 1
fi

start=$SECONDS
mkdir -p "$cache"
work=$(mktemp -d "$cache/.jaeger-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
export GOFLAGS=-mod=mod GOWORK=off
# go install refuses a module whose go.mod has replace directives, and
# Jaeger's has one: a scratch module requires it and copies its replaces,
# read from that go.mod so the list cannot drift.
src=$work/src
mkdir -p "$src"
(
	cd "$src"
	"$go" mod init modelserve.test/jaeger >/dev/null 2>&1
	gomod=$("$go" mod download -json "github.com/jaegertracing/jaeger@v$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
	sed -n 's#^replace[[:space:]]\{1,\}\([^ ]*\) => \([^ ]*\) \(v[^ ]*\)$#\1=\2@\3#p' "$gomod" | while read -r r; do
		"$go" mod edit -replace "$r"
	done
	"$go" mod edit -require "github.com/jaegertracing/jaeger@v$version" -tool github.com/jaegertracing/jaeger/cmd/jaeger
	say "downloading jaeger v$version's modules"
	"$go" mod tidy >&2
	say "building jaeger v$version (minutes on a small machine)"
	"$go" build -trimpath -ldflags='-s -w' -o "$work/bin/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
)
rm -rf "$src"
printf 'jaeger v%s; built in %ds\n' "$version" $((SECONDS - start)) >"$work/BUILD"
chmod -R u+w "$work"
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
say "$(head -n 1 "$dir/BUILD") at $dir"
printf '%s\n' "$dir"
