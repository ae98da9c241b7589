package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// rmsnorm encodes RMSNormOp over the last dimension.
func (e *encoder) rmsnorm(op graph.RMSNormOp) error {
	m, d := lastDim(e.shape(0))
	e.add(rmsNormLaunch(e.out, e.in[0], e.in[1], m, d, op.Eps))
	return nil
}

// rmsNormLaunch: a block of 1024 threads per row. With 256, each thread's
// 8 dependent loads of a 2048-wide row made the kernel take 9 µs on an H200
// (ncu, docs/BENCHMARKS.md), twice per layer; with 1024, 2 loads.
func rmsNormLaunch(out, x, w devptr, m, d int, eps float32) *launch {
	return newLaunch("rms_norm_f32", grid1(m), 1024).ptr(out).ptr(x).ptr(w).i32(m).i32(d).f32(eps)
}
