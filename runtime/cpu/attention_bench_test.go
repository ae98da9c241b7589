package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/runtime/graph"
)

// BenchmarkAttention times the attention op of one TinyLlama-1.1B layer
// (32 query heads of 64 dims over 4 KV heads) for n new tokens in a chain
// (decode at n = 1, verification of n drafted tokens) after a cached
// prefix. The figure that matters for ReDrafter is how n tokens compare to
// one at the same prefix.
func BenchmarkAttention(b *testing.B) {
	const heads, kvh, d = 32, 4, 64
	be := New(0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, past := range []int{64, 1024, 2000} {
		for _, n := range []int{1, 5, 9} {
			b.Run(fmt.Sprintf("past=%d/n=%d", past, n), func(b *testing.B) {
				c := past + n
				g := graph.New()
				q := g.Input("q", graph.F32, n, heads, d)
				k, v := g.Input("k", graph.F32, c, kvh, d), g.Input("v", graph.F32, c, kvh, d)
				kl, end := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, n)
				ends := make([]int32, n)
				for i := range ends {
					ends[i] = int32(n - 1)
				}
				out := graph.Attend(q, k, v, kl, end, 0.125)
				p, err := graph.Compile(be, out)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Free()
				for a, x := range map[*graph.Array]any{q: randF32(r, n*heads*d), k: randF32(r, c*kvh*d),
					v: randF32(r, c*kvh*d), kl: []int32{int32(past)}, end: ends} {
					if err := p.Write(a, x); err != nil {
						b.Fatal(err)
					}
				}
				for b.Loop() {
					if err := p.Run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
