package cudatest

import (
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Quantized codes that do not start on a 16-byte boundary (a weight viewed
// at an odd offset) are an error of the run that names the cause, for the
// quantized product and the fused quantized Linear alike: the kernels load
// codes 16 bytes at a time.
func TestUnalignedQuantizedCodesAreAnError(t *testing.T) {
	const n, k, bits, gs = 8, 64, 4, 32
	for _, fused := range []bool{false, true} {
		be := NewEmulated(t)
		buf, err := be.Alloc(4 + n*k*bits/8)
		if err != nil {
			t.Fatal(err)
		}
		g := graph.New()
		x := g.Input("x", graph.F32, 1, k)
		codes := g.Const("w", buf, 4, graph.U32, n, k*bits/32) // 4 bytes in: not 16-byte aligned
		s, b := g.Input("scales", graph.F16, n, k/gs), g.Input("biases", graph.F16, n, k/gs)
		w := graph.Quantized(codes, s, b, bits, gs)
		out := graph.MatMul(x, w)
		if fused {
			out = graph.Linear(x, w, graph.Fusion{Residual: g.Input("r", graph.F32, 1, n)})
		}
		p, err := graph.Compile(be, out)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run()
		p.Free()
		be.Free(buf)
		if err == nil || !strings.Contains(err.Error(), "not 16-byte aligned") {
			t.Errorf("fused=%v: run over unaligned codes: %v, want an alignment error", fused, err)
		}
		be.Close()
	}
}
