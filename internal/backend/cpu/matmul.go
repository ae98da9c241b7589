package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// matmul computes out[M,N] = x[M,K]·w[N,K]ᵀ, splitting the rows of w across
// workers so each worker streams its own part of the weights once.
func (b *Backend) matmul(out, x, w graph.Operand) error {
	m, k, n := x.Shape[0], x.Shape[1], w.Shape[0]
	y, xs := f32(out), f32(x)
	if b.reference {
		refMatMul(y, xs, w, m, n, k)
		return nil
	}
	const rowAlign = 8
	minRows := max(1, 1<<16/(k*max(m, 1))) // waking a worker costs ~10µs: give it ≥64K multiply-adds
	switch w.DType {
	case graph.F32:
		ws := f32(w)
		b.pool.parallel(n, rowAlign, minRows, func(lo, hi int) {
			matmulF32(y[lo:], n, xs, m, ws[lo*k:hi*k])
		})
	case graph.F16, graph.BF16:
		ws := u16(w)
		bf := w.DType == graph.BF16
		b.pool.parallel(n, rowAlign, minRows, func(lo, hi int) {
			matmulHalf(y[lo:], n, xs, m, ws[lo*k:hi*k], bf)
		})
	default:
		return fmt.Errorf("matmul on %v weights", w.DType)
	}
	return nil
}

// refMatMul is the reference: one float32 dot product per output, summed in
// index order.
func refMatMul(y, x []float32, w graph.Operand, m, n, k int) {
	wAt := weightReader(w)
	for i := range m {
		xr := x[i*k : (i+1)*k]
		for j := range n {
			var s float32
			for t, xv := range xr {
				s += xv * wAt(j*k+t)
			}
			y[i*n+j] = s
		}
	}
}

// weightReader returns element i of a float weight of any stored dtype.
func weightReader(w graph.Operand) func(i int) float32 {
	switch w.DType {
	case graph.F32:
		ws := f32(w)
		return func(i int) float32 { return ws[i] }
	case graph.F16:
		ws := u16(w)
		return func(i int) float32 { return quant.F16ToF32(ws[i]) }
	case graph.BF16:
		ws := u16(w)
		return func(i int) float32 { return quant.BF16ToF32(ws[i]) }
	}
	panic(fmt.Sprintf("cpu: weight dtype %v", w.DType))
}

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
