package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// BenchmarkAttention times the attention op of one TinyLlama-1.1B layer
// (32 query heads of 64 dims over 4 KV heads, f32 or f16 cache) for n new
// tokens in a chain
// (decode at n = 1, verification of n drafted tokens) after a cached
// prefix. The figure that matters for ReDrafter is how n tokens compare to
// one at the same prefix.
func BenchmarkAttention(b *testing.B) {
	be := New(0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, past := range []int{64, 1024, 2000} {
		for _, n := range []int{1, 5, 9} {
			b.Run(fmt.Sprintf("past=%d/n=%d", past, n), func(b *testing.B) { benchAttention(b, be, r, graph.F32, past, n) })
			b.Run(fmt.Sprintf("f16/past=%d/n=%d", past, n), func(b *testing.B) { benchAttention(b, be, r, graph.F16, past, n) })
		}
	}
}

// BenchmarkAttentionCachePitch times the same work per KV head, eight query
// heads of 64 over the cache, with 4 KV heads (TinyLlama's) or 1; µs/kvhead
// divides by the heads. With the caches head-major, a head's rows are
// contiguous either way and the two should cost the same per head; with
// the earlier position-major layout 4 heads put a head's rows 1 KiB apart,
// in a quarter of L2's sets, and past ~1000 positions every reread went to
// L3 (docs/BENCHMARKS.md). With one KV head, decoding (n = 1) is one task,
// on one thread.
func BenchmarkAttentionCachePitch(b *testing.B) {
	be := New(0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, past := range []int{1024, 2000, 4000} {
		for _, n := range []int{1, 9} {
			for _, kvh := range []int{1, 4} {
				b.Run(fmt.Sprintf("past=%d/n=%d/kvh=%d", past, n, kvh), func(b *testing.B) {
					benchAttentionShape(b, be, r, graph.F32, past, n, 8*kvh, kvh, 64)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(kvh)/1e3, "µs/kvhead")
				})
			}
		}
	}
}

// benchAttention times one attention op of TinyLlama's shape over a cache
// of type cache.
func benchAttention(b *testing.B, be *Backend, r *rand.Rand, cache graph.DType, past, n int) {
	benchAttentionShape(b, be, r, cache, past, n, 32, 4, 64)
}

// benchAttentionShape times one attention op: n queries of heads × d over
// a cache of kvh heads and past+n positions.
func benchAttentionShape(b *testing.B, be *Backend, r *rand.Rand, cache graph.DType, past, n, heads, kvh, d int) {
	c := past + n
	g := graph.New()
	q := g.Input("q", graph.F32, n, heads, d)
	k, v := g.Input("k", cache, kvh, c, d), g.Input("v", cache, kvh, c, d)
	kl, end := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, n)
	ends := make([]int32, n)
	for i := range ends {
		ends[i] = int32(n - 1)
	}
	out := graph.Attention(q, k, v, kl, end, 0.125)
	p, err := graph.Compile(be, out)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Free()
	var kd, vd any = randF32(r, c*kvh*d), randF32(r, c*kvh*d)
	if cache == graph.F16 {
		kd, vd = quant.F32sToF16(kd.([]float32)), quant.F32sToF16(vd.([]float32))
	}
	for a, x := range map[*graph.Array]any{q: randF32(r, n*heads*d), k: kd, v: vd, kl: []int32{int32(past)}, end: ends} {
		if err := p.Write(a, x); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := p.Run(); err != nil {
			b.Fatal(err)
		}
	}
}
