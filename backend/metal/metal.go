// Package metal registers redrafter's Metal backend, for Apple Silicon GPUs
// (Apple7 family and later). Import it for its side effect:
//
//	import _ "github.com/seed9b8f47b1/redrafter/backend/metal"
//
// Then Options{Backend: "auto"} (the default) picks the GPU on a Mac, and
// Options{Backend: "metal"} asks for it by name. On other systems the import
// registers nothing that opens: "auto" falls back to the CPU, and "metal"
// is an error that says why. The backend itself is internal
// (internal/backend/metal); docs/METAL.md describes it.
package metal

import _ "github.com/seed9b8f47b1/redrafter/internal/backend/metal" // registers "metal" on darwin
