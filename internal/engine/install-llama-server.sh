#!/usr/bin/env bash
# install-llama-server.sh puts llama.cpp's own llama-server on this machine
# without installing anything into the system: Debian unstable's build
# (package llama.cpp-tools), with the C library and C++ runtime it was built
# against, unpacked into a cache folder and started through that C library's
# own loader. A stable Debian's older glibc cannot run sid's binaries
# directly, and a system-wide install of sid's libc would replace the
# machine's own.
#
# It takes whatever build sid serves today (sid moves, and old builds vanish
# from the mirror) and records which one it got in BUILD beside the engine.
# A second run finds the engine ready and returns at once, with no download.
#
# Progress goes to stderr; stdout is one line, the absolute path of the
# engine to pass as --llama-server:
#   <cache>/llama.cpp/llama-server
# where <cache> is $MODELSERVE_CACHE, else $XDG_CACHE_HOME/modelserve, else
# ~/.cache/modelserve (modelserve looks there itself when no llama-server is
# configured and none is on PATH).
#
# On a machine with NVIDIA cards (nvidia-smi lists them) it also fetches
# Debian's GPU backend for that build into the same folder: the CUDA backend
# (libggml0-backend-cuda, from contrib) with the CUDA libraries it links,
# else the Vulkan backend (libggml0-backend-vulkan, from main) with the
# Vulkan loader. The card's driver (libcuda.so.1, the Vulkan driver) stays
# the machine's own. Which one it got is recorded in BACKEND; a machine
# without cards fetches neither, as before. A copy installed before the
# cards were there is installed again, with its backend.
#
# Environment: MODELSERVE_DEBIAN_MIRROR overrides the Debian mirror, which is
# otherwise read from this machine's own apt sources.
# MODELSERVE_INSTALL_DRY_RUN=1 prints what a run would fetch, one package set
# a line ("engine: ...", then "cuda: ..." and "vulkan: ..." in the order
# they would be tried), or "ready: <engine>", and fetches nothing.
set -euo pipefail

cache=${MODELSERVE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/modelserve}
dir=$cache/llama.cpp
engine=$dir/llama-server
packages=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 libzstd1 zlib1g)

# The GPU backends, in the order they are tried, and the packages of each
# beyond the engine's own. Each list is checked against what its packages
# depend on in the archive before anything is fetched (covered, below).
cuda=(libggml0-backend-cuda libcublas12 libcublaslt12 libcudart12)
vulkan=(libggml0-backend-vulkan libvulkan1)
# What the machine's driver provides: never fetched, so that the driver the
# kernel runs is the one the engine talks to.
host_driver='^(libcuda1|libcuda\.so\.1|libnvidia-.*|nvidia-.*)$'

say() { printf 'install-llama-server: %s\n' "$*" >&2; }

# cards is whether this machine has NVIDIA cards its driver answers for.
# The list is read whole before it is looked at: grep -q leaving early
# would fail the pipe under pipefail.
cards() {
	local list
	command -v nvidia-smi >/dev/null && list=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU [0-9]' <<<"$list"
}

backends=()
if cards; then
	backends=(cuda vulkan)
fi

# Ready is an engine that starts, laid out as this script lays it (exe/
# and exec: a copy from before them is laid out again), with its backend
# tried when there are cards.
ready() {
	[[ -x $engine && -d $dir/root/exe && -f $dir/exec ]] && "$engine" --version 2>&1 | grep -q '^version: ' &&
		{ [[ ${#backends[@]} -eq 0 ]] || [[ -f $dir/BACKEND ]]; }
}

if [[ ${MODELSERVE_INSTALL_DRY_RUN:-} == 1 ]]; then
	if ready; then
		printf 'ready: %s\n' "$engine"
		exit 0
	fi
	printf 'engine: %s\n' "${packages[*]}"
	for b in "${backends[@]}"; do
		declare -n list=$b
		printf '%s: %s\n' "$b" "${list[*]}"
		unset -n list
	done
	exit 0
fi

if ready; then
	say "$(head -n 1 "$dir/BUILD" 2>/dev/null || echo "llama-server ready") at $engine"
	printf '%s\n' "$engine"
	exit 0
fi

for tool in apt-get dpkg-deb dpkg; do
	if ! command -v "$tool" >/dev/null; then
		say "$tool is missing: this installer takes llama.cpp from Debian's packages and needs a Debian-based machine; elsewhere install llama-server yourself and pass --llama-server"
		exit 1
	fi
done

case $(dpkg --print-architecture) in
amd64) triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 baseline=libggml-cpu-x64.so ;;
arm64) triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 baseline= ;;
*)
	say "no llama-server build is set up for $(dpkg --print-architecture) machines: install llama-server yourself and pass --llama-server"
	exit 1
	;;
esac

# The mirror this machine already uses for Debian (the first that is not
# the security archive): from deb822 .sources files, else sources.list.
mirror=${MODELSERVE_DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }')
fi
if [[ -z $mirror ]]; then
	mirror=$(cat /etc/apt/sources.list 2>/dev/null |
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) { print $i; exit } break } }')
fi
if [[ -z $mirror ]]; then
	say "found no Debian mirror in /etc/apt: set MODELSERVE_DEBIAN_MIRROR to one"
	exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [[ ! -f $keyring ]]; then
	say "$keyring is missing: install the package debian-archive-keyring"
	exit 1
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.llama.cpp.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A private apt: its own sources list, package lists, cache and status, so
# the machine's apt state is neither read nor changed.
apt=$work/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/none"
touch "$apt/status"
components=main
if [[ ${#backends[@]} -gt 0 ]]; then
	# The CUDA backend is in contrib, and the CUDA libraries in non-free.
	components="main contrib non-free"
fi
printf 'deb [signed-by=%s] %s sid %s\n' "$keyring" "$mirror" "$components" >"$apt/sources.list"
cat >"$apt/apt.conf" <<CONF
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/none";
Dir::Etc::Preferences "$apt/none/preferences";
Dir::Etc::PreferencesParts "$apt/none";
Dir::State::Lists "$apt/lists";
Dir::State::status "$apt/status";
Dir::Cache "$apt";
Dir::Cache::archives "$apt/archives";
APT::Sandbox::User "root";
CONF
export APT_CONFIG=$apt/apt.conf

say "reading Debian sid's package lists"
apt-get update -qq >&2
say "downloading ${packages[*]}"
(cd "$apt/archives" && apt-get download -qq "${packages[@]}" >&2)

# covered says whether a backend's packages are in the archive and bring
# everything they depend on, with the engine's packages and the driver's.
covered() {
	local pkg dep
	for pkg in "$@"; do
		if [[ $(apt-cache show --no-all-versions "$pkg" 2>/dev/null) != *$'\nVersion: '* ]]; then
			say "$pkg is not in Debian sid for this machine"
			return 1
		fi
	done
	while read -r dep; do
		if [[ ! " ${packages[*]} $* " == *" $dep "* && ! $dep =~ $host_driver ]]; then
			say "$1 now needs $dep, which this installer does not fetch"
			return 1
		fi
	done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$@" |
		awk '$1 ~ /Depends:$/ { gsub(/[<>]/, "", $2); print $2 }' | sort -u)
}

backend=none
for b in "${backends[@]}"; do
	declare -n list=$b
	if covered "${list[@]}"; then
		say "downloading the $b backend: ${list[*]}"
		(cd "$apt/archives" && apt-get download -qq "${list[@]}" >&2)
		backend=$b
		unset -n list
		break
	fi
	unset -n list
done
if [[ ${#backends[@]} -gt 0 && $backend == none ]]; then
	say "no GPU backend could be fetched: the engine runs on the CPU; install a GPU build of llama-server and pass --llama-server"
fi

root=$work/root
for deb in "$apt/archives"/*.deb; do
	dpkg-deb -x "$deb" "$root"
done
lib=$root/usr/lib/$triplet
if [[ ! -x $root/usr/bin/llama-server || ! -e $lib/$loader ]]; then
	say "the packages did not hold usr/bin/llama-server and $loader"
	exit 1
fi

# ggml loads its backends at run time from the folder of the running
# executable (and from /usr/lib/$triplet/ggml/backends0, compiled in: the
# system's, not ours). Started through the loader, the running executable
# is the loader itself, so the loader's folder is the one ggml reads: exe/,
# the loader (a hard link, or a copy: the running executable is named by
# where a symbolic link leads) beside links to the backends, apart from
# $lib.
# ggml opens every libggml-cpu-*.so it finds there to score it against this
# CPU before it keeps the best, and Debian ships fourteen: opening them all
# took about a fifth of a tiny model's start (15 to 20 ms of 80 on two
# cores), at every start and so every swap. Once the best for
# this machine is known, exe/ keeps it and the baseline variant, which runs
# on any CPU of the architecture: on another CPU than this one (a cache
# copied to another machine) the best scores nothing there and the
# baseline runs. A GPU backend (libggml-cuda.so or libggml-vulkan.so) is
# linked as it is.
exe=$root/exe
mkdir "$exe"
ln -L "$lib/$loader" "$exe/$loader" 2>/dev/null || cp -L "$lib/$loader" "$exe/$loader"
for so in "$lib"/ggml/backends0/libggml-*.so; do
	ln -s "../usr/lib/$triplet/ggml/backends0/$(basename "$so")" "$exe/"
done
run_engine() { "$exe/$loader" --library-path "$lib/llama:$lib:$root/lib/$triplet" "$root/usr/bin/llama-server" "$@"; }
# The variant ggml chose, from its own line at a start that stops at once
# (no such model), said at verbosity 4:
#   load_backend: loaded CPU backend from .../libggml-cpu-zen4.so
best=$(run_engine -m "$work/none.gguf" --port 0 -lv 4 2>&1 | sed -n 's|.*loaded CPU backend from .*/\(libggml-cpu-[A-Za-z0-9_.-]*\.so\)$|\1|p' | head -n 1 || true)
if [[ -n $best && -n $baseline && -e $exe/$best && -e $exe/$baseline ]]; then
	for so in "$exe"/libggml-cpu-*.so; do
		case $(basename "$so") in "$best" | "$baseline") ;; *) rm "$so" ;; esac
	done
	printf '%s\n' "$best" >"$work/CPU"
	say "ggml runs $best on this CPU; the engine starts with it and the baseline $baseline"
else
	say "could not tell which CPU variant ggml runs here: the engine starts with all $(ls "$exe"/libggml-cpu-*.so | wc -l) of them"
fi

# The wrapper names the folder it will live in, rather than finding itself
# at run time: it must work through a symlink and with any PATH, even an
# empty one, so it runs no command but the engine.
cat >"$work/llama-server" <<WRAPPER
#!/bin/sh
# llama.cpp's llama-server from Debian sid, run through the C library it was
# built against (see install-llama-server.sh in modelserve's source).
lib='$dir/root/usr/lib/$triplet'
exec '$dir/root/exe/$loader' --library-path "\$lib/llama:\$lib:$dir/root/lib/$triplet" '$dir/root/usr/bin/llama-server' "\$@"
WRAPPER
chmod +x "$work/llama-server"
# The same command, an argument a line, for modelserve to start without
# the shell between (engine.Command in engine.go): the shell's own start
# was about 5 ms of every engine start, and so of every cold start and
# swap. A folder whose name holds a line break gets the wrapper alone.
if [[ $dir != *$'\n'* ]]; then
	printf '%s\n' "$dir/root/exe/$loader" --library-path "$dir/root/usr/lib/$triplet/llama:$dir/root/usr/lib/$triplet:$dir/root/lib/$triplet" \
		"$dir/root/usr/bin/llama-server" >"$work/exec"
fi

# The same command from where the files are now, before they move.
version=$(run_engine --version 2>&1 | grep -m 1 '^version: ' || true)
if [[ -z $version ]]; then
	say "the unpacked llama-server does not start:"
	run_engine --version >&2 || true
	exit 1
fi
package=$(dpkg-deb -f "$apt/archives"/llama.cpp-tools_*.deb Version)
printf 'llama-server %s, Debian sid llama.cpp-tools %s\n' "${version#version: }" "$package" >"$work/BUILD"
if [[ ${#backends[@]} -gt 0 ]]; then
	printf '%s\n' "$backend" >"$work/BACKEND"
fi
rm -rf "$apt"

# Swap the finished folder in whole: a run cut short leaves the old engine
# or none, never half of one.
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
if ! ready; then
	say "llama-server does not start from $dir"
	exit 1
fi
say "$(cat "$dir/BUILD") at $engine"
printf '%s\n' "$engine"
