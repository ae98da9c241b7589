package metal

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// decodeShaped compiles a decode step's shape on be: layers blocks of seven
// matvecs (q, k, v, o, gate, up, down) over 1024×1024 f32 weights of 4 MiB
// each, with a residual add per block, for one token.
func decodeShaped(t *testing.T, be *Backend, layers int) *graph.Plan {
	t.Helper()
	g := graph.New()
	x := g.Input("x", graph.F32, 1, 1024)
	h := x
	for l := range layers {
		y := h
		for j := range 7 {
			buf, err := be.Alloc(4 << 20)
			if err != nil {
				t.Fatal(err)
			}
			y = graph.MatMul(y, g.Const("w", buf, 0, graph.F32, 1024, 1024))
			_ = j
		}
		h = graph.Add(h, y)
		_ = l
	}
	p, err := graph.Compile(be, h)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A replayed plan is cut into command buffers by dispatch count only: the
// byte rule counted the whole size of every bound buffer at every use, so
// each few large weights (or a KV cache) closed a command buffer.
func TestCommandBuffersPerToken(t *testing.T) {
	const layers = 16 // 16 × 8 = 128 dispatches per token
	be := newReferenceFake(DefaultPolicy(DeviceInfo{Name: "Apple M2", Architecture: "applegpu_g14g"}))
	p := decodeShaped(t, be, layers)
	const tokens = 3
	for range tokens {
		if err := p.Run(); err != nil {
			t.Fatal(err)
		}
	}
	st := be.Stats()
	perToken := st.CommandBuffers / tokens
	pol := be.Policy()
	// The first buffer holds FirstCommit dispatches, the rest OpsPerBuffer.
	want := 1 + (st.Dispatches/tokens-pol.FirstCommit+pol.OpsPerBuffer-1)/pol.OpsPerBuffer
	t.Logf("%d dispatches and %d command buffers per token (policy %+v)", st.Dispatches/tokens, perToken, pol)
	if perToken != want {
		t.Errorf("%d command buffers per token, want %d (by dispatch count only)", perToken, want)
	}
}
