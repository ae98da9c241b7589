// Package metal is the Metal backend for Apple Silicon GPUs (Apple7 family
// and later): it implements graph.Backend by encoding each plan's ops as
// compute dispatches of the kernels in internal/backend/metal/shaders, one Go file
// per op family with the stems of those kernel files and of backend/cpu's.
//
// Importing it registers the backend as "metal" (graph.Register), so that
// Options{Backend: "auto"} picks the GPU on a Mac:
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/metal"
//
// The host code talks to Metal through purego (internal/mtl), without cgo,
// so it cross-compiles and vets from any machine. On Linux, NewFake runs the
// same encoder over a fake device that executes every step on a reference
// backend its caller passes (tests pass the CPU's; this package imports no
// other backend), and the metaltest package runs the real kernels, compiled
// as C++, through the emulator in internal/backend/metal/emu. The GPU
// self-test is package metalcheck. docs/METAL.md says what a first run on a
// Mac should check.
package metal
