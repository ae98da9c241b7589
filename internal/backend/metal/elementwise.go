package metal

import "github.com/seed9b8f47b1/redrafter/internal/graph"

// SiLU, SwiGLU, GeGLU, SoftCap, Add, Mul: one thread per element.
func (e *encoder) elementwise() error {
	in, out := e.step.In, e.step.Out
	n := out.Shape.Numel()
	grid, group := groups1D(n, 256), threads1D(256)
	switch op := e.step.Op.(type) {
	case graph.SoftCapOp:
		return e.launch(kernelName("elementwise", "softcap", in[0].DType), SoftCapArgs{N: i32(n), Cap: op.Cap}, grid, group, nil,
			rd(in[0]), wr(out))
	case graph.SiLUOp:
		return e.launch(kernelName("elementwise", "silu", in[0].DType), ElementwiseArgs{N: i32(n)}, grid, group, nil,
			rd(in[0]), wr(out))
	case graph.SwiGLUOp:
		return e.launch(kernelName("elementwise", "swiglu", in[0].DType), ElementwiseArgs{N: i32(n), NB: i32(n)}, grid, group, nil,
			rd(in[0]), rd(in[1]), wr(out))
	case graph.GeGLUOp:
		return e.launch(kernelName("elementwise", "geglu", in[0].DType), ElementwiseArgs{N: i32(n), NB: i32(n)}, grid, group, nil,
			rd(in[0]), rd(in[1]), wr(out))
	}
	variant := "add"
	if _, ok := e.step.Op.(graph.MulOp); ok {
		variant = "mul"
	}
	return e.launch(kernelName("elementwise", variant, in[0].DType), ElementwiseArgs{N: i32(n), NB: i32(in[1].Shape.Numel())},
		grid, group, nil, rd(in[0]), rd(in[1]), wr(out))
}

// Concat along the last dim: one thread per output element.
func (e *encoder) concat() error {
	a, b, out := e.step.In[0], e.step.In[1], e.step.Out
	m := a.Shape[0]
	return e.launch(kernelName("elementwise", "concat", a.DType), ConcatArgs{M: i32(m), Da: i32(a.Shape[1]), Db: i32(b.Shape[1])},
		groups1D(out.Shape.Numel(), 256), threads1D(256), nil, rd(a), rd(b), wr(out))
}
