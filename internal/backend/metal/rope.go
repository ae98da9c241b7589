package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// RoPE: one thread per element; the inverse frequencies travel as bytes.
func (e *encoder) rope(op graph.RoPEOp) error {
	x, pos, out := e.step.In[0], e.step.In[1], e.step.Out
	m, h, d := x.Shape[0], x.Shape[1], x.Shape[2]
	if 2*len(op.InvFreq) > d {
		return fmt.Errorf("%d frequencies for head dim %d", len(op.InvFreq), d)
	}
	variant := "adjacent"
	if op.NeoX {
		variant = "neox"
	}
	freq := graph.AsBytes(append([]float32(nil), op.InvFreq...))
	return e.launch(kernelName("rope", variant, x.DType), RoPEArgs{M: i32(m), H: i32(h), D: i32(d), P: i32(len(op.InvFreq))},
		groups1D(m*h*d, 256), threads1D(256), nil, rd(x), rd(pos), raw(freq), wr(out))
}
