package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/graph"
	"github.com/seed9b8f47b1/redrafter/quant"
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
		b.pool.parallel(n, rowAlign, minRows, func(_, lo, hi int) {
			matmulF32(y[lo:], n, xs, m, ws[lo*k:hi*k])
		})
	case graph.F16, graph.BF16:
		ws := u16(w)
		bf := w.DType == graph.BF16
		b.pool.parallel(n, rowAlign, minRows, func(_, lo, hi int) {
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

// rnnStep computes SiLU(e·wᵀ + s·uᵀ + b) with the matmul and SiLU kernels,
// in the unfused graph's order, so it equals that graph exactly on either
// backend.
func (b *Backend) rnnStep(out graph.Operand, in []graph.Operand) error {
	e, s, w, u, bias := in[0], in[1], in[2], in[3], f32(in[4])
	m, n := e.Shape[0], w.Shape[0]
	if err := b.matmul(out, e, w); err != nil {
		return err
	}
	// s·uᵀ goes to scratch memory that no worker of the pool is using.
	su := b.scratch(0, m*n)
	tmp := out
	tmp.Buf, tmp.Off = &buffer{b: graph.AsBytes(su)}, 0
	if err := b.matmul(tmp, s, u); err != nil {
		return err
	}
	y := f32(out)
	for i := range m {
		row, sr := y[i*n:(i+1)*n], su[i*n:(i+1)*n]
		for j := range row {
			row[j] = (row[j] + sr[j]) + bias[j]
		}
	}
	b.silu(y, y)
	return nil
}
