#!/bin/sh
# install-clang.sh installs the C++ compiler that the Metal kernel emulation
# tests (internal/backend/metal/emu) use to compile internal/backend/metal/shaders/*.metal as C++ on Linux.
# It does nothing when a suitable clang++ is already on PATH. Debian/Ubuntu
# only (apt-get); run as root or with sudo available.
set -eu

for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16; do
	if command -v "$c" >/dev/null 2>&1; then
		# _Float16 on x86-64 and std::barrier need clang >= 16.
		v=$("$c" -dumpversion 2>/dev/null | cut -d. -f1)
		if [ "${v:-0}" -ge 16 ]; then
			echo "install-clang: using $c (clang $v)"
			exit 0
		fi
	fi
done

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# clang-16 is the oldest release with _Float16 on x86-64; Debian 12 ships it.
pkg=clang-16
if ! apt-cache show "$pkg" >/dev/null 2>&1; then
	$SUDO apt-get update -qq
fi
if ! apt-cache show "$pkg" >/dev/null 2>&1; then
	pkg=clang
fi
$SUDO apt-get install -y -qq --no-install-recommends "$pkg" libstdc++-12-dev >/dev/null
echo "install-clang: installed $pkg"
