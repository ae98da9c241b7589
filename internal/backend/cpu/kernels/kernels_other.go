//go:build !amd64 || noasm

package kernels

// archSets reports no assembly implementations: on this architecture, or
// with the noasm build tag, only Generic exists.
func archSets() []Set { return nil }
