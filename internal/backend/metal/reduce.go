package metal

import "github.com/seed9b8f47b1/redrafter/internal/graph"

// LogSoftmax, Argmax, TopK, WarpLogSoftmax: one threadgroup per row.
// BeamTop: one threadgroup.
func (e *encoder) reduce() error {
	x, out := e.step.In[0], e.step.Out
	v := x.Shape[len(x.Shape)-1]
	m := x.Shape.Numel() / v
	shared := []int{sharedBytes(80)}
	args := RowArgs{M: i32(m), V: i32(v), K: 1}
	variant := "logsoftmax"
	switch op := e.step.Op.(type) {
	case graph.ArgmaxOp:
		variant = "argmax"
	case graph.TopKOp:
		variant, args.K = "topk", i32(op.K)
	case graph.WarpLogSoftmaxOp:
		return e.launch(kernelName("reduce", "warp", x.DType), DraftArgs{Rows: i32(m), V: i32(v), K: i32(op.K), Masked: op.Masked},
			[3]int{m, 1, 1}, threads1D(rowThreads), shared, rd(x), wr(out))
	case graph.BeamTopOp:
		lp := e.step.In[1]
		v, rows := lp.Shape[1], lp.Shape[0]
		return e.launch(kernelName("reduce", "beamtop", lp.DType),
			DraftArgs{Rows: i32(rows), Beams: i32(x.Shape[1]), V: i32(v), K: i32(op.Width)},
			[3]int{1, 1, 1}, threads1D(rowThreads), shared, rd(x), rd(lp), wr(out))
	}
	return e.launch(kernelName("reduce", variant, x.DType), args, [3]int{m, 1, 1}, threads1D(rowThreads),
		shared, rd(x), wr(out))
}
