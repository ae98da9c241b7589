// Package cuda is the beginning of the CUDA backend for Linux servers with
// NVIDIA GPUs (docs/CUDA.md has the status). What exists: the kernels
// (shaders/*.cu, shipped as checked-in PTX), the launch of each op
// (ops.go: grid, block and the parameter bytes for
// CU_LAUNCH_PARAM_BUFFER_POINTER), their emulated tests against the CPU
// reference (emu/), and the driver binding (internal/cu, build tag cuda).
// The graph.Backend that encodes a plan as launches is not written yet, so
// nothing registers "cuda" and graph.Open("cuda") says why.
package cuda
