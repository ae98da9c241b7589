package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/quant"
	"github.com/seed9b8f47b1/redrafter/runtime/graph"
)

// Greedy speculative decoding must reproduce greedy decoding token for
// token, so a row's matmul result may not depend on how many rows share the
// call: every row of a multi-row product equals the one-row product, bit for bit.
func TestMatMulRowsIndependentOfBatch(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 4))
	be := New(2)
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, sz := range [][3]int{{2, 64, 64}, {5, 257, 33}, {9, 512, 100}, {17, 1024, 64}, {6, 4096, 12}} {
			m, k, n := sz[0], sz[1], sz[2]
			x := randF32(r, m*k)
			w := randF32(r, n*k)
			var wb []byte
			switch dt {
			case graph.F32:
				wb = graph.AsBytes(w)
			default:
				h := make([]uint16, len(w))
				for i, v := range w {
					if dt == graph.F16 {
						h[i] = quant.F32ToF16(v)
					} else {
						h[i] = quant.F32ToBF16(v)
					}
				}
				wb = graph.AsBytes(h)
			}
			run := func(rows int, xs []float32) []float32 {
				return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
					xa := g.Input("x", graph.F32, rows, k)
					wbuf, _ := be.WrapHost(wb)
					return map[*graph.Array]any{xa: xs}, graph.Linear(xa, g.Const("w", wbuf, 0, dt, n, k))
				})
			}
			all := run(m, x)
			for i := range m {
				one := run(1, x[i*k:(i+1)*k])
				for j := range n {
					if one[j] != all[i*n+j] {
						t.Fatalf("%v m=%d k=%d n=%d (seed %d): row %d col %d: batched %v != alone %v",
							dt, m, k, n, seed, i, j, all[i*n+j], one[j])
					}
				}
			}
		}
	}
}
