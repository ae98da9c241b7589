package cpu

import "github.com/seed9b8f47b1/redrafter/runtime/cpu/kernels"

// The backend's inner loops, from package kernels (SIMD where the CPU has it).

func dotF32(a, b []float32) float32 { return kernels.DotF32(a, b) }

func axpy(y []float32, a float32, x []float32) { kernels.Axpy(y, a, x) }

func matmulF32(y []float32, ldy int, x []float32, m int, w []float32) {
	kernels.MatMulF32(y, ldy, x, m, w)
}

func matmulHalf(y []float32, ldy int, x []float32, m int, w []uint16, bf bool) {
	switch {
	case bf:
		kernels.MatMulBF16(y, ldy, x, m, w)
	default:
		kernels.MatMulF16(y, ldy, x, m, w)
	}
}
