//go:build !amd64 || noasm

package kernels

// archSets reports no assembly implementations: on this architecture, or
// with the noasm build tag, only Generic exists.
func archSets() []Set { return nil }

// matVecF32Hot: no hot tiles without assembly (see kernels_amd64.go).
func matVecF32Hot(y []float32, x []float32, w []float32) bool { return false }
