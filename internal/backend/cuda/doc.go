// Package cuda is the CUDA backend for Linux servers with NVIDIA GPUs
// (docs/CUDA.md): the kernels (shaders/*.cu, shipped as checked-in PTX that
// the driver's JIT compiles), the launch of each op in a file per op family
// named after its .cu file (matmul.go, norm.go, ...: grid, block and the
// parameter bytes for CU_LAUNCH_PARAM_BUFFER_POINTER),
// the Backend that encodes a plan as launches on one stream with one wait
// per Run (backend.go, encode.go), and the driver under it: the real one
// over libcuda.so.1 through purego (driver_linux.go and internal/cu, build
// tag cuda, which also registers "cuda" with graph.Open), or any Driver
// given to NewWithDriver (seam.go): the tests give package cudafake's,
// whose launches package cudatest runs on the emulator (emu/), so that
// everything but the GPU itself is tested on any machine.
package cuda
