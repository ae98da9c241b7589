// Package cuda registers redrafter's CUDA backend, for Linux machines with
// an NVIDIA GPU. Import it for its side effect and build with the tag cuda:
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/cuda"
//
//	go build -tags cuda ./...
//
// Then Options{Backend: "auto"} (the default) picks the GPU when
// libcuda.so.1 and a device are there, and falls back to the CPU otherwise;
// Options{Backend: "cuda"} asks for it by name, and its error says what is
// missing. Without the tag the import registers nothing. The backend itself
// is internal (internal/backend/cuda); docs/CUDA.md describes it.
package cuda

import _ "github.com/seed9b8f47b1/redrafter/internal/backend/cuda" // registers "cuda" under the build tag cuda
