package cpu

import "github.com/seed9b8f47b1/redrafter/backend/cpu/kernels"

// The backend's inner loops, from package kernels (SIMD where the CPU has it).

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
