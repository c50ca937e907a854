#!/usr/bin/env bash
# prepare.sh readies a machine for the browser tests in e2e/: Debian's
# Chromium, and the Playwright driver playwright-go v0.5200.1 runs, built from
# the npm package playwright-core@1.52.0 and the machine's own node.
#
# It never runs Playwright's installer, which downloads a browser and a node
# build of its own (neither can be fetched here). playwright-go's Run() takes a
# driver folder as ready when <dir>/node <dir>/package/cli.js --version prints
# 1.52.0, and then downloads nothing; this script makes such a folder, outside
# the source tree so that no copy of it is ever committed.
#
# Progress goes to stderr; stdout is one line for the caller to eval:
#   export PLAYWRIGHT_DRIVER_PATH=/absolute/path
# A second run checks what is there and returns in well under a second.
#
# Environment: MODELSERVE_E2E_DRIVER overrides the driver folder (absolute).
set -euo pipefail

readonly version=1.52.0
cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}
driver=${MODELSERVE_E2E_DRIVER:-$cache/modelserve/playwright-driver-$version}

say() { printf 'e2e/prepare.sh: %s\n' "$*" >&2; }

case $driver in
/*) ;;
*)
	say "MODELSERVE_E2E_DRIVER must be an absolute path, not $driver"
	exit 1
	;;
esac

# 1. The browser: Debian's Chromium.
if [[ ! -x /usr/bin/chromium ]]; then
	say "installing Debian's chromium"
	if [[ $(id -u) -ne 0 ]]; then
		say "run as root (or install chromium yourself: apt-get install -y chromium)"
		exit 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

# 2. Node, which runs the driver, and npm, which fetches it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	say "installing Debian's nodejs and npm for the Playwright driver"
	if [[ $(id -u) -ne 0 ]]; then
		say "run as root (or install them yourself: apt-get install -y nodejs npm)"
		exit 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
fi
node=$(command -v node)
node=$(readlink -f "$node")

# 3. The driver folder: package/ is playwright-core, node is the system's.
ready() {
	[[ -f $driver/package/cli.js && -x $driver/node ]] &&
		[[ $(readlink -f "$driver/node") == "$node" ]] &&
		"$driver/node" "$driver/package/cli.js" --version 2>/dev/null | grep -qF "$version"
}

if ready; then
	say "driver ready at $driver"
else
	say "building the driver at $driver from playwright-core@$version"
	mkdir -p "$(dirname "$driver")"
	work=$(mktemp -d "$(dirname "$driver")/.prepare.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	# npm pack fetches the package's tarball through npm's own registry
	# settings and cache; its top folder is package/, as the driver wants.
	tarball=$(cd "$work" && npm pack --silent "playwright-core@$version" | tail -n 1)
	mkdir "$work/driver"
	tar -xzf "$work/$tarball" -C "$work/driver"
	ln -s "$node" "$work/driver/node"
	# Swap the finished folder in whole: a run cut short leaves the old one
	# or none, never half a driver.
	rm -rf "$driver"
	mv "$work/driver" "$driver"
	if ! ready; then
		say "the driver at $driver does not report version $version"
		exit 1
	fi
	say "driver ready at $driver"
fi

printf 'export PLAYWRIGHT_DRIVER_PATH=%q\n' "$driver"
