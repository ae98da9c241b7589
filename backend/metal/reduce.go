package metal

import "github.com/seed9b8f47b1/redrafter/graph"

// LogSoftmax, Argmax, TopK: one threadgroup per row.
func (e *encoder) reduce() error {
	x, out := e.step.In[0], e.step.Out
	v := x.Shape[len(x.Shape)-1]
	m := x.Shape.Numel() / v
	args := RowArgs{M: i32(m), V: i32(v), K: 1}
	variant := "logsoftmax"
	switch op := e.step.Op.(type) {
	case graph.ArgmaxOp:
		variant = "argmax"
	case graph.TopKOp:
		variant, args.K = "topk", i32(op.K)
	}
	return e.launch(kernelName("reduce", variant, x.DType), args, [3]int{m, 1, 1}, threads1D(rowThreads),
		[]int{sharedBytes(80)}, rd(x), wr(out))
}
