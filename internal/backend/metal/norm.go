package metal

import "github.com/seed9b8f47b1/redrafter/internal/graph"

// RMSNorm: one threadgroup of ROW_THREADS per row.
func (e *encoder) rmsnorm(op graph.RMSNormOp) error {
	x, w, out := e.step.In[0], e.step.In[1], e.step.Out
	m, d := x.Shape[0], x.Shape[1]
	return e.launch(kernelName("norm", "rms", x.DType), RMSNormArgs{M: i32(m), D: i32(d), Eps: op.Eps},
		[3]int{m, 1, 1}, threads1D(rowThreads), []int{sharedBytes(48)}, rd(x), rd(w), wr(out))
}
