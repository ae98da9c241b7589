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

func randF32(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func maxRelErr(got, want []float32) float64 {
	var worst, scale float64
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
	}
	scale = max(scale, 1e-6)
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i]))/scale)
	}
	return worst
}

// evalOn builds a graph with build, runs it on be and returns output 0.
func evalOn(t *testing.T, be graph.Backend, build func(g *graph.Graph) (map[*graph.Array]any, *graph.Array)) []float32 {
	t.Helper()
	g := graph.New()
	in, out := build(g)
	var res []float32
	err := graph.Eval(be, in, func(p *graph.Plan) error {
		if out.DType() == graph.I32 {
			v := make([]int32, out.Shape().Numel())
			if err := p.Read(out, v); err != nil {
				return err
			}
			for _, x := range v {
				res = append(res, float32(x))
			}
			return nil
		}
		res = make([]float32, out.Shape().Numel())
		return p.Read(out, res)
	}, out)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func constF32(t *testing.T, be graph.Backend, g *graph.Graph, name string, x []float32, shape ...int) *graph.Array {
	b, err := be.WrapHost(graph.AsBytes(x))
	if err != nil {
		t.Fatal(err)
	}
	return g.Const(name, b, 0, graph.F32, shape...)
}

// The fast matmul must agree with the reference for every weight dtype,
// at odd sizes, with one and several rows.
func TestMatMulFastVsReference(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	fast, ref := New(2), NewReference()
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, sz := range [][3]int{{1, 1, 1}, {1, 33, 17}, {3, 64, 31}, {5, 257, 129}, {9, 100, 1000}, {1, 4097, 8}} {
			m, k, n := sz[0], sz[1], sz[2]
			x := randF32(r, m*k)
			wb := halfBytes(randF32(r, n*k), dt)
			build := func(be graph.Backend) func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				return func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
					xa := g.Input("x", graph.F32, m, k)
					wbuf, _ := be.WrapHost(wb)
					wa := g.Const("w", wbuf, 0, dt, n, k)
					return map[*graph.Array]any{xa: x}, graph.MatMul(xa, wa)
				}
			}
			got, want := evalOn(t, fast, build(fast)), evalOn(t, ref, build(ref))
			if e := maxRelErr(got, want); e > 1e-5 {
				t.Errorf("MatMul(%v, m=%d k=%d n=%d, seed %d): max rel err %g > 1e-5", dt, m, k, n, seed, e)
			}
		}
	}
}

// naiveAttention computes tree attention from an explicit ancestor mask,
// independently of the interval encoding.
// headMajor returns cache rows [c, kvh, d] in the caches' layout [kvh, c, d]
// (opcases.HeadMajor's twin: opcases imports this package).
func headMajor(x []float32, c, kvh, d int) []float32 {
	y := make([]float32, len(x))
	for p := range c {
		for h := range kvh {
			copy(y[(h*c+p)*d:(h*c+p+1)*d], x[(p*kvh+h)*d:(p*kvh+h+1)*d])
		}
	}
	return y
}

// visible(qi, r) says whether query qi sees cache row r (r >= past: new
// token r-past); softcap > 0 caps each scaled score s as
// softcap·tanh(s/softcap) (Gemma 2's attn_logit_softcapping).
func naiveAttention(q, k, v []float32, n, heads, kvh, d, past int, visible func(qi, r int) bool, scale, softcap float32) []float32 {
	out := make([]float32, n*heads*d)
	for qi := range n {
		for h := range heads {
			g := h / (heads / kvh)
			var keys []int
			for r := range past + n {
				if visible(qi, r) {
					keys = append(keys, r)
				}
			}
			s := make([]float64, len(keys))
			mx := math.Inf(-1)
			for i, r := range keys {
				var dot float64
				for j := range d {
					dot += float64(q[(qi*heads+h)*d+j]) * float64(k[(r*kvh+g)*d+j])
				}
				s[i] = dot * float64(scale)
				if softcap > 0 {
					s[i] = float64(softcap) * math.Tanh(s[i]/float64(softcap))
				}
				mx = max(mx, s[i])
			}
			var sum float64
			for i := range s {
				s[i] = math.Exp(s[i] - mx)
				sum += s[i]
			}
			for i, r := range keys {
				for j := range d {
					out[(qi*heads+h)*d+j] += float32(s[i] / sum * float64(v[(r*kvh+g)*d+j]))
				}
			}
		}
	}
	return out
}

// A tree in DFS pre-order: parent[i] < i. end[k] is the last descendant.
func randomTree(r *rand.Rand, n int) (parent, end []int32) {
	parent = make([]int32, n)
	parent[0] = -1
	// Build by DFS: each new node is a child of some node on the current
	// root path, which keeps pre-order.
	path := []int32{0}
	for i := 1; i < n; i++ {
		path = path[:1+r.IntN(len(path))]
		parent[i] = path[len(path)-1]
		path = append(path, int32(i))
	}
	end = make([]int32, n)
	for i := n - 1; i >= 0; i-- {
		if end[i] < int32(i) {
			end[i] = int32(i)
		}
		if p := parent[i]; p >= 0 && end[i] > end[p] {
			end[p] = end[i]
		}
	}
	return parent, end
}

func TestAttentionTreeMatchesAncestorMask(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 2))
	// window 0 is full attention; the others cut the cache, the tree, or
	// both, counted by position (a new token's is past + its depth).
	// softcap > 0 caps the scores (Gemma 2), low enough to bend most of them.
	for _, tc := range []struct {
		n, heads, kvh, d, past, capacity, window int
		softcap                                  float32
	}{
		{1, 2, 1, 4, 0, 4, 0, 0}, {1, 8, 4, 8, 7, 16, 0, 0}, {6, 4, 2, 16, 3, 16, 0, 0}, {17, 8, 8, 5, 20, 64, 0, 0}, {9, 6, 3, 64, 0, 9, 0, 0},
		{1, 8, 4, 8, 7, 16, 3, 0}, {1, 2, 1, 4, 10, 16, 11, 0}, {6, 4, 2, 16, 3, 16, 2, 0}, {17, 8, 8, 5, 20, 64, 6, 0},
		{17, 8, 8, 5, 20, 64, 22, 0}, {9, 6, 3, 64, 0, 9, 1, 0}, {40, 2, 1, 8, 30, 80, 25, 0},
		{1, 8, 4, 8, 7, 16, 0, 0.5}, {6, 4, 2, 16, 3, 16, 2, 0.7}, {17, 8, 8, 5, 20, 64, 0, 1}, {40, 2, 1, 8, 30, 80, 25, 0.5},
	} {
		parent, end := randomTree(r, tc.n)
		if tc.n == 40 {
			for i := range end { // a chain: causal prefill past the window
				parent[i], end[i] = int32(i-1), int32(tc.n-1)
			}
		}
		depth := func(j int) int {
			dep := 0
			for a := parent[j]; a >= 0; a = parent[a] {
				dep++
			}
			return dep
		}
		visible := func(qi, row int) bool {
			pos := row // a cache row's position is its index
			if row >= tc.past {
				kj := row - tc.past
				anc := false
				for a := int32(qi); a >= 0; a = parent[a] {
					anc = anc || int(a) == kj
				}
				if !anc {
					return false
				}
				pos = tc.past + depth(kj)
			}
			return tc.window == 0 || tc.past+depth(qi)-pos < tc.window
		}
		q := randF32(r, tc.n*tc.heads*tc.d)
		kc := randF32(r, tc.capacity*tc.kvh*tc.d)
		vc := randF32(r, tc.capacity*tc.kvh*tc.d)
		scale := float32(1 / math.Sqrt(float64(tc.d)))
		want := naiveAttention(q, kc, vc, tc.n, tc.heads, tc.kvh, tc.d, tc.past, visible, scale, tc.softcap)
		for _, be := range []*Backend{New(2), NewReference()} {
			got := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
				qa := g.Input("q", graph.F32, tc.n, tc.heads, tc.d)
				ka := constF32(t, be, g, "k", headMajor(kc, tc.capacity, tc.kvh, tc.d), tc.kvh, tc.capacity, tc.d)
				va := constF32(t, be, g, "v", headMajor(vc, tc.capacity, tc.kvh, tc.d), tc.kvh, tc.capacity, tc.d)
				kl := g.Input("kvLen", graph.I32, 1)
				ea := g.Input("end", graph.I32, tc.n)
				return map[*graph.Array]any{qa: q, kl: []int32{int32(tc.past)}, ea: end},
					graph.AttentionWith(graph.AttentionOp{Scale: scale, Window: tc.window, SoftCap: tc.softcap}, qa, ka, va, kl, ea)
			})
			if e := maxRelErr(got, want); e > 1e-5 {
				t.Errorf("%s attention %+v (seed %d): max rel err %g", be.Name(), tc, seed, e)
			}
		}
	}
}

// Hand-checked values for the small ops.
func TestSmallOps(t *testing.T) {
	be := NewReference()
	x := []float32{1, 2, 3, 4, -1, 0.5}
	cases := []struct {
		name  string
		build func(g *graph.Graph, xa *graph.Array) *graph.Array
		want  []float32
	}{
		{"Argmax", func(g *graph.Graph, xa *graph.Array) *graph.Array { return graph.Argmax(xa) }, []float32{2, 0}},
		{"TopK", func(g *graph.Graph, xa *graph.Array) *graph.Array { return graph.TopK(xa, 2) }, []float32{2, 1, 0, 2}},
		{"SiLU", func(g *graph.Graph, xa *graph.Array) *graph.Array { return graph.SiLU(xa) },
			[]float32{0.7310586, 1.7615942, 2.8577223, 3.928055, -0.26894143, 0.31122968}},
		{"Add bias", func(g *graph.Graph, xa *graph.Array) *graph.Array {
			return graph.Add(xa, constF32(t, be, g, "b", []float32{10, 20, 30}, 3))
		}, []float32{11, 22, 33, 14, 19, 30.5}},
		{"LogSoftmax", func(g *graph.Graph, xa *graph.Array) *graph.Array { return graph.LogSoftmax(xa) },
			[]float32{-2.4076059, -1.4076059, -0.40760595, -0.036269665, -5.0362697, -3.5362697}},
		{"RMSNorm", func(g *graph.Graph, xa *graph.Array) *graph.Array {
			return graph.RMSNorm(xa, constF32(t, be, g, "w", []float32{1, 1, 2}, 3), 0)
		}, []float32{0.46291006, 0.9258201, 2.7774603, 1.6681153, -0.4170288, 0.4170288}},
		// 2·tanh(x/2), from Python's math.tanh.
		{"SoftCap", func(g *graph.Graph, xa *graph.Array) *graph.Array { return graph.SoftCap(xa, 2) },
			[]float32{0.92423431, 1.5231883, 1.8102965, 1.9280552, -0.92423431, 0.48983732}},
	}
	for _, c := range cases {
		got := evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
			xa := g.Input("x", graph.F32, 2, 3)
			return map[*graph.Array]any{xa: x}, c.build(g, xa)
		})
		if e := maxRelErr(got, c.want); e > 1e-6 {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
}

// RoPE in both pairings: rotating by position p and then by -p is the
// identity, and the two pairings agree after permuting each head.
func TestRoPEPairings(t *testing.T) {
	be := NewReference()
	r := rand.New(rand.NewPCG(3, 3))
	const heads, d = 3, 8
	inv := []float32{1, 0.1, 0.01, 0.001}
	x := randF32(r, 2*heads*d)
	perm := func(v []float32) []float32 { // NeoX layout -> adjacent layout
		out := make([]float32, len(v))
		for h := 0; h < len(v)/d; h++ {
			for j := range d / 2 {
				out[h*d+2*j] = v[h*d+j]
				out[h*d+2*j+1] = v[h*d+j+d/2]
			}
		}
		return out
	}
	run := func(in []float32, neox bool) []float32 {
		return evalOn(t, be, func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
			xa := g.Input("x", graph.F32, 2, heads, d)
			pa := g.Input("pos", graph.I32, 2)
			return map[*graph.Array]any{xa: in, pa: []int32{5, 123}}, graph.RoPE(xa, pa, inv, neox)
		})
	}
	neox, adj := run(x, true), run(perm(x), false)
	if e := maxRelErr(perm(neox), adj); e > 1e-6 {
		t.Fatalf("pairings disagree: %g", e)
	}
	if fmt.Sprint(neox) == fmt.Sprint(x) {
		t.Fatal("RoPE did nothing")
	}
}

// The fused RNN step must equal the unfused graph it replaces bit for bit,
// on the fast and the reference backend, so that swapping one for the other
// cannot change a drafted token.
func TestRNNStepEqualsUnfused(t *testing.T) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 2))
	for _, be := range []*Backend{New(2), NewReference()} {
		for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
			for _, sz := range [][3]int{{1, 1, 1}, {1, 33, 17}, {4, 64, 64}, {7, 129, 65}} {
				m, k, n := sz[0], sz[1], sz[2]
				e, s, bias := randF32(r, m*k), randF32(r, m*k), randF32(r, n)
				w, u := halfBytes(randF32(r, n*k), dt), halfBytes(randF32(r, n*k), dt)
				build := func(fused bool) func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
					return func(g *graph.Graph) (map[*graph.Array]any, *graph.Array) {
						ea, sa, ba := g.Input("e", graph.F32, m, k), g.Input("s", graph.F32, m, k), g.Input("b", graph.F32, n)
						wbuf, _ := be.WrapHost(w)
						ubuf, _ := be.WrapHost(u)
						wa, ua := g.Const("w", wbuf, 0, dt, n, k), g.Const("u", ubuf, 0, dt, n, k)
						in := map[*graph.Array]any{ea: e, sa: s, ba: bias}
						if fused {
							return in, graph.RNNStep(ea, sa, wa, ua, ba)
						}
						return in, graph.SiLU(graph.Add(graph.Add(graph.MatMul(ea, wa), graph.MatMul(sa, ua)), ba))
					}
				}
				got, want := evalOn(t, be, build(true)), evalOn(t, be, build(false))
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Errorf("%s %v m=%d k=%d n=%d (seed %d): [%d] fused %v, unfused %v", be.Name(), dt, m, k, n, seed, i, got[i], want[i])
						break
					}
				}
			}
		}
	}
}

// halfBytes stores x as dtype dt (f32, f16 or bf16).
func halfBytes(x []float32, dt graph.DType) []byte {
	if dt == graph.F32 {
		return graph.AsBytes(x)
	}
	if dt == graph.F16 {
		return graph.AsBytes(quant.F32sToF16(x))
	}
	return graph.AsBytes(quant.F32sToBF16(x))
}
