#!/usr/bin/env bash
# Installs what `make test` needs beyond Go itself, only when it is missing.
# Safe to run repeatedly; CI runs it on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Go modules (the module proxy is the only source).
go mod download
(cd tests/openai-go && go mod download)
(cd tests/deploy && go mod download)

# The official OpenAI Node client for tests/node, at the version its lock
# file pins (npm ci), when that version is not already installed.
command -v node >/dev/null || { echo "deps: node (20 or newer) is needed for tests/node" >&2; exit 1; }
want=$(node -p 'require("./tests/node/package-lock.json").packages["node_modules/openai"].version')
have=$(node -p 'try { require("./tests/node/node_modules/openai/package.json").version } catch { "" }')
if [ "$want" != "$have" ]; then
	(cd tests/node && npm ci --no-audit --no-fund)
fi

# The GPU kernel toolchains: clang++ compiles the .metal and .cu kernels as
# C++ for the emulation tests, and clang-16, NVIDIA's ptxas and libcuda.so.1
# (unpacked, not installed, into .cache/cuda-tools) check the CUDA kernels
# and binding without a GPU. A CPU-only user can do without them:
# GPU_TOOLS=off skips them, and when they cannot be had (no apt-get, not
# root, no network) this says so and goes on, and the tests that need them
# skip saying "SKIPPED, NOT PASSED". Under CI (CI set) they must install.
gpu_tool() {
	if [ "${GPU_TOOLS:-}" = off ]; then
		echo "deps: GPU_TOOLS=off: $1 skipped; the GPU kernel tests will skip" >&2
		return 0
	fi
	if bash "$@"; then
		return 0
	fi
	if [ -n "${CI:-}" ]; then
		echo "deps: $1 failed, and CI must run the GPU kernel tests" >&2
		exit 1
	fi
	echo "deps: SKIPPED $1 (it failed above); the GPU kernel tests will skip (set CI=1 to make that an error)" >&2
}
gpu_tool scripts/install-clang.sh
gpu_tool scripts/install-cuda-tools.sh

# buildah builds and runs the container image of deploy/docker in
# tests/deploy (from scratch, no base image pulled). Like the GPU tools: a
# user without apt or root does without (the test skips saying so); under CI
# it must install.
if ! command -v buildah >/dev/null; then
	if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] &&
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; }; then
		:
	elif [ -n "${CI:-}" ]; then
		echo "deps: buildah could not be installed, and CI must build the container image" >&2
		exit 1
	else
		echo "deps: SKIPPED buildah; the container image test will skip (set CI=1 to make that an error)" >&2
	fi
fi
