package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// Greedy speculative decoding must reproduce greedy decoding token for
// token, so a row's matmul result may not depend on how many rows share the
// call: every row of a multi-row product equals the one-row product, bit for bit.
func TestMatMulRowsIndependentOfBatch(t *testing.T) {
	seed := testenv.Seed(t)
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
					return map[*graph.Array]any{xa: xs}, graph.MatMul(xa, g.Const("w", wbuf, 0, dt, n, k))
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

// A token verified in a tree must get the attention output it gets when
// decoded alone after its accepted ancestors, bit for bit: the cache then
// holds the prefix and the ancestors contiguously, and the query sees all of
// it. Both attention paths (small heads, and the grouped path from 16
// dimensions) are checked, with grouped-query heads (1 to 8 query heads a
// KV head, so 2 to 16 queries a task), over f32 and f16 caches, on 2
// workers and on 13 (where tasks take fewer queries so that every worker
// has one).
func TestAttentionTreeEqualsDecode(t *testing.T) {
	for _, threads := range []int{2, 13} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) { attentionTreeEqualsDecode(t, New(threads)) })
	}
}

func attentionTreeEqualsDecode(t *testing.T, be *Backend) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 5))
	for _, tc := range []struct {
		n, heads, kvh, d, past int
		cache                  graph.DType
	}{
		{7, 8, 4, 8, 30, graph.F32}, {9, 8, 2, 64, 100, graph.F32}, {12, 4, 4, 16, 0, graph.F32},
		{6, 12, 4, 80, 257, graph.F32}, {5, 6, 1, 128, 33, graph.F32}, {9, 16, 2, 64, 300, graph.F32},
		{9, 8, 2, 64, 100, graph.F16}, {7, 4, 4, 17, 5, graph.F16},
	} {
		parent, end := randomTree(r, tc.n)
		row := tc.kvh * tc.d
		q := randF32(r, tc.n*tc.heads*tc.d)
		kc, vc := randF32(r, (tc.past+tc.n)*row), randF32(r, (tc.past+tc.n)*row)
		attend := func(q, k, v []float32, n, past int, end []int32) []float32 {
			c := len(k) / row
			k, v = headMajor(k, c, tc.kvh, tc.d), headMajor(v, c, tc.kvh, tc.d)
			var kd, vd any = k, v
			if tc.cache == graph.F16 {
				kd, vd = quant.F32sToF16(k), quant.F32sToF16(v)
			}
			return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				qa := g.Input("q", graph.F32, n, tc.heads, tc.d)
				ka, va := g.Input("k", tc.cache, tc.kvh, c, tc.d), g.Input("v", tc.cache, tc.kvh, c, tc.d)
				la, ea := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, n)
				return map[*graph.Array]any{qa: q, ka: kd, va: vd, la: []int32{int32(past)}, ea: end},
					graph.Attention(qa, ka, va, la, ea, 0.3)
			})
		}
		tree := attend(q, kc, vc, tc.n, tc.past, end)
		per := tc.heads * tc.d
		for qi := range tc.n {
			var path []int // qi's ancestors, root first, then qi
			for a := int32(qi); a >= 0; a = parent[a] {
				path = append([]int{int(a)}, path...)
			}
			k := append([]float32(nil), kc[:tc.past*row]...)
			v := append([]float32(nil), vc[:tc.past*row]...)
			for _, a := range path {
				k = append(k, kc[(tc.past+a)*row:(tc.past+a+1)*row]...)
				v = append(v, vc[(tc.past+a)*row:(tc.past+a+1)*row]...)
			}
			alone := attend(q[qi*per:(qi+1)*per], k, v, 1, len(k)/row-1, []int32{0})
			for j := range alone {
				if math.Float32bits(alone[j]) != math.Float32bits(tree[qi*per+j]) {
					t.Fatalf("%+v (seed %d): query %d at depth %d, [%d]: in the tree %v, decoded alone %v",
						tc, seed, qi, len(path)-1, j, tree[qi*per+j], alone[j])
				}
			}
		}
	}
}

// An f16 cache: KVWrite rounds rows to halves, KVCompact moves whole rows,
// and attention over it agrees with the reference backend's (which reads
// the same halves) and stays close to attention over the f32 values.
func TestF16Cache(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 6))
	const n, heads, kvh, d, past = 5, 8, 2, 64, 40
	c := past + n
	q, k, v := randF32(r, n*heads*d), randF32(r, c*kvh*d), randF32(r, c*kvh*d)
	_, end := randomTree(r, n)
	run := func(be *Backend, dt graph.DType) []float32 {
		var kd, vd any = k, v // random: read as [KVH, C, D]
		if dt == graph.F16 {
			kd, vd = quant.F32sToF16(k), quant.F32sToF16(v)
		}
		return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
			qa := g.Input("q", graph.F32, n, heads, d)
			ka, va := g.Input("k", dt, kvh, c, d), g.Input("v", dt, kvh, c, d)
			la, ea := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, n)
			return map[*graph.Array]any{qa: q, ka: kd, va: vd, la: []int32{past}, ea: end}, graph.Attention(qa, ka, va, la, ea, 0.125)
		})
	}
	fast, ref, full := run(New(2), graph.F16), run(NewReference(), graph.F16), run(NewReference(), graph.F32)
	if e := maxRelErr(fast, ref); e > 1e-5 {
		t.Errorf("f16 cache, fast against reference (seed %d): max rel err %g > 1e-5", seed, e)
	}
	if e := maxRelErr(fast, full); e > 2e-3 {
		t.Errorf("f16 cache against f32 values (seed %d): max rel err %g > 2e-3", seed, e)
	}
	// Write then compact an f16 cache through the graph.
	for _, be := range []*Backend{New(2), NewReference()} {
		buf, _ := be.Alloc(2 * c * kvh * d)
		g := graph.New()
		cache := g.Var("cache", buf, 0, graph.F16, kvh, c, d)
		rows, kl := g.Input("rows", graph.F32, n, kvh, d), g.Input("kvLen", graph.I32, 1)
		written := graph.KVWrite(cache, rows, kl)
		noRead := func(*graph.Plan) error { return nil }
		if err := graph.Eval(be, map[*graph.Array]any{rows: q[:n*kvh*d], kl: []int32{past}}, noRead, written); err != nil {
			t.Fatal(err)
		}
		g = graph.New()
		cache = g.Var("cache", buf, 0, graph.F16, kvh, c, d)
		kl, idx := g.Input("kvLen", graph.I32, 1), g.Input("idx", graph.I32, 2)
		compacted := graph.KVCompact(cache, kl, idx)
		got := make([]uint16, c*kvh*d)
		err := graph.Eval(be, map[*graph.Array]any{kl: []int32{past}, idx: []int32{1, 3}},
			func(p *graph.Plan) error { return p.Read(compacted, got) }, compacted)
		if err != nil {
			t.Fatal(err)
		}
		want := quant.F32sToF16(q[:n*kvh*d]) // rows [n, kvh, d]
		for h := range kvh {
			for i, j := range []int{1, 3, 2, 3, 4} { // rows 1 and 3 moved to 0 and 1; the rest untouched
				for e := range d {
					if g, w := got[(h*c+past+i)*d+e], want[(j*kvh+h)*d+e]; g != w {
						t.Fatalf("%s: head %d position %d element %d = %#x, want %#x (written row %d)", be.Name(), h, past+i, e, g, w, j)
					}
				}
			}
		}
	}
}
