package cpu

import (
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/hostmath"
)

// The draft-head trainer does its math on host slices through hostmath; the
// CPU backend lends it the same kernels it runs graphs with.
func init() {
	hostmath.Install(hostmath.Kernels{Name: "cpu", MatMul: kernels.MatMulF32, Axpy: kernels.Axpy, Scale: kernels.Scale})
}
