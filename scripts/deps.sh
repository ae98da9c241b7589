#!/usr/bin/env bash
# Installs what `make test` needs beyond Go itself, only when it is missing.
# Safe to run repeatedly; CI runs it on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Go modules (the module proxy is the only source).
go mod download

# clang compiles the .metal kernels as C++ for the emulation tests.
if [ -x scripts/install-clang.sh ] || [ -f scripts/install-clang.sh ]; then
	bash scripts/install-clang.sh
fi

# clang → PTX, NVIDIA's ptxas and libcuda.so.1 (unpacked, not installed, into
# .cache/cuda-tools) for the CUDA kernel and binding tests without a GPU.
bash scripts/install-cuda-tools.sh
