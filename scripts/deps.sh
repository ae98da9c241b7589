#!/usr/bin/env bash
# Installs what `make test` needs beyond Go itself, only when it is missing.
# Safe to run repeatedly; CI runs it on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Go modules (the module proxy is the only source).
go mod download
(cd tests/openai-go && go mod download)

# The official OpenAI Node client for tests/node, at the version its lock
# file pins (npm ci), when that version is not already installed.
command -v node >/dev/null || { echo "deps: node (20 or newer) is needed for tests/node" >&2; exit 1; }
want=$(node -p 'require("./tests/node/package-lock.json").packages["node_modules/openai"].version')
have=$(node -p 'try { require("./tests/node/node_modules/openai/package.json").version } catch { "" }')
if [ "$want" != "$have" ]; then
	(cd tests/node && npm ci --no-audit --no-fund)
fi

# clang compiles the .metal kernels as C++ for the emulation tests.
if [ -x scripts/install-clang.sh ] || [ -f scripts/install-clang.sh ]; then
	bash scripts/install-clang.sh
fi

# clang → PTX, NVIDIA's ptxas and libcuda.so.1 (unpacked, not installed, into
# .cache/cuda-tools) for the CUDA kernel and binding tests without a GPU.
bash scripts/install-cuda-tools.sh
