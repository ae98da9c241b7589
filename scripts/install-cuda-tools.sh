#!/usr/bin/env bash
# install-cuda-tools.sh makes the CUDA kernel checks runnable on a Linux
# machine with no NVIDIA GPU and no CUDA toolkit (see docs/CUDA.md):
#
#   clang-16        compiles internal/backend/cuda/shaders/*.cu to PTX (and as host
#                   C++ for the emulator); installed with apt-get if missing.
#   ptxas           NVIDIA's PTX assembler, which tells what the GPU would
#                   refuse and reports registers, shared memory and spills.
#   libcuda.so.1    NVIDIA's driver library, so that the binding's ABI and
#                   its "no device" error path run for real.
#
# ptxas and libcuda are non-free: they are unpacked (never installed) from
# Debian's nvidia-cuda-toolkit and libcuda1 packages into .cache/cuda-tools,
# which git ignores, using a private apt configuration (its own sources list,
# lists and archive cache under .cache/cuda-tools/apt), so the system's apt
# sources are left as they are. `apt-get install nvidia-cuda-toolkit` would
# pull 1.6 GB; this downloads about 90 MB once.
#
# Idempotent: when the tools are already unpacked it only checks them.
# The Go tests find the tools there (internal/backend/cuda/internal/tools).
set -euo pipefail
cd "$(dirname "$0")/.."

root=$PWD/.cache/cuda-tools
ptxas=$root/bin/ptxas
libcuda=$root/lib/libcuda.so.1

if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
	echo "install-cuda-tools: NVIDIA's tools are unpacked on linux/x86_64 only; skipped on $(uname -s)/$(uname -m)" >&2
	exit 0
fi

# clang-16 exactly: the checked-in PTX is its output, and the test that
# regenerates it must get the same bytes (a newer clang writes other PTX).
if ! command -v clang-16 >/dev/null 2>&1; then
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	apt-cache show clang-16 >/dev/null 2>&1 || $SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-16 >/dev/null
fi

if [ -x "$ptxas" ] && [ -f "$libcuda" ]; then
	echo "install-cuda-tools: ptxas and libcuda.so.1 already in $root"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-cuda-tools: needs apt-get (Debian or Ubuntu) to fetch ptxas and libcuda1" >&2
	exit 1
fi

apt=$root/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/parts" "$apt/prefs"
# bookworm's non-free section holds nvidia-cuda-toolkit (ptxas 11.8) and
# libcuda1; contrib and main are listed for their dependencies' metadata.
cat >"$apt/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main contrib non-free
EOF
aptopts=(
	-o "Dir::Etc::SourceList=$apt/sources.list"
	-o "Dir::Etc::SourceParts=$apt/parts"
	-o "Dir::Etc::Preferences=$apt/prefs/none"
	-o "Dir::Etc::PreferencesParts=$apt/prefs"
	-o "Dir::State=$apt"
	-o "Dir::State::Lists=$apt/lists"
	-o "Dir::State::status=/var/lib/dpkg/status"
	-o "Dir::Cache=$apt"
	-o "Dir::Cache::archives=$apt/archives"
	-o "Dir::Cache::pkgcache="
	-o "Dir::Cache::srcpkgcache="
	-o "APT::Sandbox::User=$(id -un)"
	-o "Debug::NoLocking=1"
	-qq
)
if ! compgen -G "$apt/lists/*_Packages*" >/dev/null; then
	apt-get "${aptopts[@]}" update
fi

# take PACKAGE FILE DEST: download PACKAGE's .deb into the private cache,
# extract it, keep the one FILE we need (following symlinks) as DEST, and
# drop the rest (the toolkit unpacks to 300 MB).
take() {
	local pkg=$1 file=$2 dest=$3 deb tmp
	(cd "$apt/archives" && apt-get "${aptopts[@]}" download "$pkg")
	deb=$(compgen -G "$apt/archives/${pkg}_*.deb" | head -n1)
	tmp=$root/unpack-$pkg
	rm -rf "$tmp"
	dpkg-deb -x "$deb" "$tmp"
	mkdir -p "$(dirname "$dest")"
	cp -L "$tmp/$file" "$dest.tmp"
	mv "$dest.tmp" "$dest"
	rm -rf "$tmp" "$deb"
}

[ -x "$ptxas" ] || take nvidia-cuda-toolkit usr/bin/ptxas "$ptxas"
[ -f "$libcuda" ] || take libcuda1 usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1 "$libcuda"

"$ptxas" --version | tail -n1 >&2
test -f "$libcuda"
echo "install-cuda-tools: ptxas and libcuda.so.1 unpacked in $root"
