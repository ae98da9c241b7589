// Package opcases holds the op cases of the GPU backends: one-op graphs on
// fresh random inputs, with odd sizes and tails, that each backend's
// emulator tests (on Linux) and its self-test (SelfTest, on the GPU) run
// and compare with the CPU reference backend, which the caller passes in. They are written to reach every kernel
// of Metal's library (matvec and matmul shapes, attention's split path,
// every quantized variant) and of CUDA's; the backends check that they do.
package opcases

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Tolerances, as error relative to the largest magnitude of the reference
// output: max|got-want| / max|want|, or / Case.Floor when that is larger.
// Integer outputs must match exactly.
const (
	TolF32 = 1e-4
	TolF16 = 1e-2
)

// Case is a one-op graph with its inputs.
type Case struct {
	Name string
	Tol  float64
	// Floor, when set, bounds the error's denominator from below: a dot
	// product's rounding error scales with Σ|x·w|, not with the result, which
	// cancellation can make arbitrarily small (one output of a few terms).
	Floor float64
	// Build adds the case's op to g (once per backend, the same graph each
	// time) and returns its outputs and the inputs' values.
	Build func(be graph.Backend, g *graph.Graph) (outs []*graph.Array, inputs map[*graph.Array]any)
}

// HeadMajor returns cache rows [c, kvh, d] (position by position, as a
// forward pass makes them) in the KV caches' layout [kvh, c, d].
func HeadMajor(x []float32, c, kvh, d int) []float32 {
	y := make([]float32, len(x))
	for p := range c {
		for h := range kvh {
			copy(y[(h*c+p)*d:(h*c+p+1)*d], x[(p*kvh+h)*d:(p*kvh+h+1)*d])
		}
	}
	return y
}

// RandF32 returns n uniform values in [-scale, scale).
func RandF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// RandInts returns n uniform integers in [lo, hi).
func RandInts(r *rand.Rand, n, lo, hi int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(lo + r.IntN(hi-lo))
	}
	return v
}

// Weights returns n values in [-1, 1) of dtype dt (as []float32 or
// []uint16 bits).
func Weights(r *rand.Rand, dt graph.DType, n int) any { return ScaledWeights(r, dt, n, 1) }

// ScaledWeights is Weights in [-scale, scale).
func ScaledWeights(r *rand.Rand, dt graph.DType, n int, scale float32) any {
	f := RandF32(r, n, scale)
	switch dt {
	case graph.F16:
		return quant.F32sToF16(f)
	case graph.BF16:
		return quant.F32sToBF16(f)
	}
	return f
}

// TolFor is the tolerance of a result computed from weights of dtype dt.
func TolFor(dt graph.DType) float64 {
	if dt == graph.F32 {
		return TolF32
	}
	return TolF16
}

// varOf makes a Var array (a KV cache) holding data on be, stored as dt
// (f32, or f16 rounded to nearest).
func varOf(be graph.Backend, g *graph.Graph, name string, data []float32, dt graph.DType, shape ...int) *graph.Array {
	b := graph.AsBytes(data)
	if dt == graph.F16 {
		b = graph.AsBytes(quant.F32sToF16(data))
	}
	buf, err := be.Alloc(len(b))
	if err != nil {
		panic(err)
	}
	if err := be.Write(buf, 0, b); err != nil {
		panic(err)
	}
	return g.Var(name, buf, 0, dt, shape...)
}

// RandomTree returns the interval ends of a random tree of n tokens in DFS
// pre-order: end[k] is the last descendant of k.
func RandomTree(r *rand.Rand, n int) []int32 {
	depth := make([]int, n)
	for i := 1; i < n; i++ {
		depth[i] = 1 + r.IntN(depth[i-1]+1)
	}
	end := make([]int32, n)
	for k := range n {
		j := k
		for j+1 < n && depth[j+1] > depth[k] {
			j++
		}
		end[k] = int32(j)
	}
	return end
}

// All returns every case, on inputs drawn from r. The families draw from r
// in this order, so each case's inputs depend on every family before it.
func All(r *rand.Rand) []Case {
	var cs []Case
	for _, family := range []func(*rand.Rand) []Case{
		matMulCases, rnnStepCases, rmsNormCases, ropeCases, attentionCases, kvWriteCases, kvCompactCases,
		activationCases, addMulCases, concatCases, vocabCases, gatherRowsCases,
		quantCases, drafterCases, chainsCases, fusedCases, attentionWindowCases, attentionSoftCapCases, softCapCases,
		gegluLinearCases,
	} {
		cs = append(cs, family(r)...)
	}
	return cs
}

// cases collects the cases of one family.
type cases []Case

func (cs *cases) add(name string, tol float64, build func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any)) {
	*cs = append(*cs, Case{Name: name, Tol: tol, Build: build})
}

// matMulCases returns the cases of MatMul and Embed, in f32, f16 and bf16.
func matMulCases(r *rand.Rand) []Case {
	var cs cases
	// MatMul: matvec (M <= 16 by default: the 1-, 4- and 8-row variants,
	// 4-wide loads when K is a multiple of 4, with K past the last full
	// 128-element step and not) and matmul shapes with tails in every dim;
	// 300 rows reach CUDA's tensor cores (more rows than a prefill chunk);
	// one row of whole 16-byte words, CUDA's one-row matvec8x1.
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, s := range [][3]int{{1, 1, 1}, {1, 33, 7}, {1, 132, 9}, {1, 264, 9}, {2, 4, 5}, {3, 100, 37}, {4, 257, 65}, {4, 260, 11}, {5, 31, 9}, {6, 128, 3}, {8, 40, 17}, {9, 15, 33}, {13, 388, 10}, {33, 70, 41}, {64, 64, 64}, {7, 129, 130}, {70, 132, 130}, {128, 96, 64}, {300, 40, 24}} {
			m, k, n := s[0], s[1], s[2]
			x, w := RandF32(r, m*k, 1), Weights(r, dt, n*k)
			cs.add(fmt.Sprintf("MatMul/%v/M%d_K%d_N%d", dt, m, k, n), TolFor(dt), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, wa := g.Input("x", graph.F32, m, k), g.Input("w", dt, n, k)
				return []*graph.Array{graph.MatMul(xa, wa)}, map[*graph.Array]any{xa: x, wa: w}
			})
		}
		for _, s := range [][3]int{{50, 1, 1}, {50, 33, 7}, {300, 257, 3}} {
			v, d, n := s[0], s[1], s[2]
			table, ids := Weights(r, dt, v*d), RandInts(r, n, 0, v)
			cs.add(fmt.Sprintf("Embed/%v/V%d_D%d_N%d", dt, v, d, n), TolFor(dt), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ta, ia := g.Input("table", dt, v, d), g.Input("ids", graph.I32, n)
				return []*graph.Array{graph.Embed(ta, ia)}, map[*graph.Array]any{ta: table, ia: ids}
			})
		}
	}
	return cs
}

// rnnStepCases returns the cases of the draft head's fused recurrent step.
func rnnStepCases(r *rand.Rand) []Case {
	var cs cases
	// RNNStep: one beam, a few, more than MATVEC_MAX_M; tails in K and N.
	// K of whole 16-byte words (64, 136) takes CUDA's 16-byte kernels
	// (rnn_step8x1_* at one beam, rnn_step8_* at more) for 16-bit weights.
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, s := range [][3]int{{1, 1, 1}, {1, 33, 7}, {1, 136, 37}, {4, 64, 64}, {9, 100, 37}, {50, 65, 130}} {
			m, k, n := s[0], s[1], s[2]
			e, st, bias := RandF32(r, m*k, 1), RandF32(r, m*k, 1), RandF32(r, n, 1)
			w, u := Weights(r, dt, n*k), Weights(r, dt, n*k)
			cs.add(fmt.Sprintf("RNNStep/%v/M%d_K%d_N%d", dt, m, k, n), TolFor(dt), func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ea, sa, ba := g.Input("e", graph.F32, m, k), g.Input("s", graph.F32, m, k), g.Input("b", graph.F32, n)
				wa, ua := g.Input("w", dt, n, k), g.Input("u", dt, n, k)
				return []*graph.Array{graph.RNNStep(ea, sa, wa, ua, ba)}, map[*graph.Array]any{ea: e, sa: st, ba: bias, wa: w, ua: u}
			})
		}
	}
	return cs
}

// rmsNormCases returns the cases of RMSNorm over rows of several widths.
func rmsNormCases(r *rand.Rand) []Case {
	var cs cases
	for _, s := range [][2]int{{1, 1}, {3, 33}, {2, 257}, {1, 1000}} {
		m, d := s[0], s[1]
		x, w := RandF32(r, m*d, 3), RandF32(r, d, 1)
		cs.add(fmt.Sprintf("RMSNorm/M%d_D%d", m, d), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa, wa := g.Input("x", graph.F32, m, d), g.Input("w", graph.F32, d)
			return []*graph.Array{graph.RMSNorm(xa, wa, 1e-5)}, map[*graph.Array]any{xa: x, wa: w}
		})
	}
	return cs
}

// ropeCases returns the cases of RoPE, NeoX halves and adjacent pairs.
func ropeCases(r *rand.Rand) []Case {
	var cs cases
	for _, neox := range []bool{true, false} {
		for _, s := range [][4]int{{1, 1, 2, 1}, {3, 2, 8, 4}, {5, 3, 18, 6}, {2, 4, 64, 32}} {
			m, h, d, p := s[0], s[1], s[2], s[3]
			x, pos := RandF32(r, m*h*d, 1), RandInts(r, m, 0, 300)
			inv := make([]float32, p)
			for j := range inv {
				inv[j] = float32(math.Pow(10000, -float64(2*j)/float64(2*p)))
			}
			cs.add(fmt.Sprintf("RoPE/neox=%v/M%d_H%d_D%d_P%d", neox, m, h, d, p), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, pa := g.Input("x", graph.F32, m, h, d), g.Input("pos", graph.I32, m)
				return []*graph.Array{graph.RoPE(xa, pa, inv, neox)}, map[*graph.Array]any{xa: x, pa: pos}
			})
		}
	}
	return cs
}

// attentionSpec is the shape of an Attention case.
type attentionSpec struct {
	n, h, kvh, d, past int
	kind               string // "decode", "chain" or "tree"
	cache              graph.DType
	window             int     // sliding window; 0: none
	softcap            float32 // the scores' soft-cap; 0: none
}

// attentionCases returns the cases of Attention over f32 and f16 caches.
func attentionCases(r *rand.Rand) []Case {
	// Attention: decode, causal prefill, trees; GQA; head dims around 32
	// and the largest.
	return attentionSpecCases(r, []attentionSpec{
		{1, 2, 2, 8, 0, "decode", graph.F32, 0, 0}, {1, 4, 2, 64, 40, "decode", graph.F32, 0, 0}, {5, 3, 1, 33, 0, "chain", graph.F32, 0, 0},
		{6, 4, 2, 100, 9, "chain", graph.F32, 0, 0}, {7, 2, 1, 16, 5, "tree", graph.F32, 0, 0}, {9, 4, 4, 64, 30, "tree", graph.F32, 0, 0},
		{13, 6, 2, 32, 3, "tree", graph.F32, 0, 0},
		{1, 4, 2, 64, 40, "decode", graph.F16, 0, 0}, {9, 4, 2, 40, 30, "tree", graph.F16, 0, 0}, {5, 3, 1, 33, 0, "chain", graph.F16, 0, 0},
		{1, 2, 1, 256, 20, "decode", graph.F32, 0, 0},
		// Caches of more than one ATTN_CHUNK: few (head, query) pairs take
		// the split kernels (D a multiple of 4 or not, f32 and f16)...
		{1, 4, 2, 64, 300, "decode", graph.F32, 0, 0}, {1, 2, 1, 128, 600, "decode", graph.F16, 0, 0},
		{9, 4, 2, 40, 270, "tree", graph.F32, 0, 0}, {5, 3, 1, 33, 260, "chain", graph.F16, 0, 0},
		// ... and many walk the chunks in one threadgroup each.
		{128, 4, 1, 8, 200, "chain", graph.F32, 0, 0},
	})
}

// attentionWindowCases returns the cases of sliding-window Attention:
// inside one chunk, cutting the tree, and over long caches where whole
// chunks fall before the window (split and walked) and the window starts
// inside a chunk. (A family of its own, last in All, so that the other
// families' inputs stay what they were.)
func attentionWindowCases(r *rand.Rand) []Case {
	return attentionSpecCases(r, []attentionSpec{
		{1, 2, 2, 8, 20, "decode", graph.F32, 7, 0}, {9, 4, 2, 40, 5, "tree", graph.F32, 8, 0},
		{13, 6, 2, 32, 3, "tree", graph.F16, 2, 0}, {6, 4, 2, 64, 9, "chain", graph.F32, 4, 0},
		{1, 4, 2, 64, 600, "decode", graph.F16, 300, 0}, {9, 4, 2, 40, 700, "tree", graph.F32, 260, 0},
		{5, 3, 1, 33, 560, "chain", graph.F32, 100, 0}, {128, 4, 1, 8, 300, "chain", graph.F16, 200, 0},
	})
}

// attentionSoftCapCases returns the cases of soft-capped Attention (Gemma
// 2), with caps low enough to bend most scores: decode, chain and tree, f32
// and f16, one chunk, split and walked, with and without a window. (Last
// in All, as the window's.)
func attentionSoftCapCases(r *rand.Rand) []Case {
	return attentionSpecCases(r, []attentionSpec{
		{1, 4, 2, 64, 40, "decode", graph.F32, 0, 0.5}, {9, 4, 2, 40, 30, "tree", graph.F16, 0, 0.7},
		{6, 4, 2, 100, 9, "chain", graph.F32, 4, 0.6}, {1, 2, 1, 128, 600, "decode", graph.F16, 0, 0.5},
		{9, 4, 2, 40, 270, "tree", graph.F32, 0, 0.8}, {128, 4, 1, 8, 300, "chain", graph.F16, 200, 0.4},
	})
}

func attentionSpecCases(r *rand.Rand, specs []attentionSpec) []Case {
	var cs cases
	for _, s := range specs {
		c := s.past + s.n + 3
		q, k, v := RandF32(r, s.n*s.h*s.d, 1), RandF32(r, c*s.kvh*s.d, 1), RandF32(r, c*s.kvh*s.d, 1)
		var kd, vd any = k, v
		if s.cache == graph.F16 {
			kd, vd = quant.F32sToF16(k), quant.F32sToF16(v)
		}
		end := make([]int32, s.n)
		switch s.kind {
		case "decode", "chain":
			for i := range end {
				end[i] = int32(s.n - 1)
			}
		default:
			end = RandomTree(r, s.n)
		}
		scale := float32(1 / math.Sqrt(float64(s.d)))
		name := fmt.Sprintf("Attention/%v/%s/N%d_H%d_KVH%d_D%d_past%d", s.cache, s.kind, s.n, s.h, s.kvh, s.d, s.past)
		if s.window > 0 {
			name += fmt.Sprintf("_window%d", s.window)
		}
		if s.softcap > 0 {
			name += fmt.Sprintf("_softcap%g", s.softcap)
		}
		cs.add(name, TolF32,
			func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				qa := g.Input("q", graph.F32, s.n, s.h, s.d)
				ka, va := g.Input("k", s.cache, s.kvh, c, s.d), g.Input("v", s.cache, s.kvh, c, s.d)
				la, ea := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, s.n)
				op := graph.AttentionOp{Scale: scale, Window: s.window, SoftCap: s.softcap}
				return []*graph.Array{graph.AttentionWith(op, qa, ka, va, la, ea)},
					map[*graph.Array]any{qa: q, ka: kd, va: vd, la: []int32{int32(s.past)}, ea: end}
			})
	}
	return cs
}

// kvWriteCases returns the cases of KVWrite into f32 and f16 caches.
func kvWriteCases(r *rand.Rand) []Case {
	var cs cases
	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		for _, s := range [][4]int{{1, 1, 1, 0}, {3, 2, 5, 4}, {9, 3, 33, 20}} {
			n, kvh, d, past := s[0], s[1], s[2], s[3]
			c := past + n + 2
			cache, rows := RandF32(r, c*kvh*d, 1), RandF32(r, n*kvh*d, 1)
			cs.add(fmt.Sprintf("KVWrite/%v/N%d_KVH%d_D%d_at%d", dt, n, kvh, d, past), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ca := varOf(be, g, "cache", slices.Clone(cache), dt, kvh, c, d)
				ra, la := g.Input("rows", graph.F32, n, kvh, d), g.Input("kvLen", graph.I32, 1)
				return []*graph.Array{graph.KVWrite(ca, ra, la)}, map[*graph.Array]any{ra: rows, la: []int32{int32(past)}}
			})
		}
	}
	return cs
}

// kvCompactCases returns the cases of KVCompact of f32 and f16 caches.
func kvCompactCases(r *rand.Rand) []Case {
	var cs cases
	for _, s := range [][4]int{{1, 1, 1, 0}, {3, 2, 5, 4}, {5, 3, 33, 20}} {
		keep, kvh, d, past := s[0], s[1], s[2], s[3]
		c := past + 2*keep + 3
		cache := RandF32(r, c*kvh*d, 1)
		// Strictly increasing, idx[i] >= i, within the cache.
		idx := make([]int32, keep)
		next := 0
		for i := range idx {
			next += r.IntN(2)
			idx[i] = int32(next)
			next++
		}
		for _, dt := range []graph.DType{graph.F32, graph.F16} {
			cs.add(fmt.Sprintf("KVCompact/%v/keep%d_KVH%d_D%d_at%d_idx%v", dt, keep, kvh, d, past, idx), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				ca := varOf(be, g, "cache", slices.Clone(cache), dt, kvh, c, d)
				la, ia := g.Input("kvLen", graph.I32, 1), g.Input("idx", graph.I32, keep)
				return []*graph.Array{graph.KVCompact(ca, la, ia)}, map[*graph.Array]any{la: []int32{int32(past)}, ia: idx}
			})
		}
	}
	return cs
}

// activationCases returns the cases of SiLU, SwiGLU and GeGLU.
func activationCases(r *rand.Rand) []Case {
	var cs cases
	for _, n := range []int{1, 255, 257, 1000} {
		x, y := RandF32(r, n, 8), RandF32(r, n, 8)
		cs.add(fmt.Sprintf("SiLU/n%d", n), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa := g.Input("x", graph.F32, n)
			return []*graph.Array{graph.SiLU(xa)}, map[*graph.Array]any{xa: x}
		})
		cs.add(fmt.Sprintf("SwiGLU/n%d", n), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			ga, ua := g.Input("gate", graph.F32, n), g.Input("up", graph.F32, n)
			return []*graph.Array{graph.SwiGLU(ga, ua)}, map[*graph.Array]any{ga: x, ua: y}
		})
		// Same draws as SwiGLU's: the cases after these keep their inputs.
		cs.add(fmt.Sprintf("GeGLU/n%d", n), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			ga, ua := g.Input("gate", graph.F32, n), g.Input("up", graph.F32, n)
			return []*graph.Array{graph.GeGLU(ga, ua)}, map[*graph.Array]any{ga: x, ua: y}
		})
	}
	return cs
}

// softCapCases returns the cases of SoftCap (Gemma 2's final logits), the
// values well past the cap both ways. (Last in All.)
func softCapCases(r *rand.Rand) []Case {
	var cs cases
	for _, n := range []int{1, 257, 1000} {
		x := RandF32(r, n, 40)
		cs.add(fmt.Sprintf("SoftCap/n%d", n), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa := g.Input("x", graph.F32, n)
			return []*graph.Array{graph.SoftCap(xa, 15)}, map[*graph.Array]any{xa: x}
		})
	}
	return cs
}

// addMulCases returns the cases of Add and Mul, with broadcasting.
func addMulCases(r *rand.Rand) []Case {
	var cs cases
	for _, s := range []struct{ a, b []int }{{[]int{1}, []int{1}}, {[]int{5, 7, 3}, []int{3}}, {[]int{5, 7, 3}, []int{7, 3}}, {[]int{33, 9}, []int{33, 9}}} {
		na, nb := graph.Shape(s.a).Numel(), graph.Shape(s.b).Numel()
		a, b := RandF32(r, na, 2), RandF32(r, nb, 2)
		for _, mul := range []bool{false, true} {
			op := "Add"
			if mul {
				op = "Mul"
			}
			cs.add(fmt.Sprintf("%s/%v_%v", op, graph.Shape(s.a), graph.Shape(s.b)), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				aa, ba := g.Input("a", graph.F32, s.a...), g.Input("b", graph.F32, s.b...)
				out := graph.Add(aa, ba)
				if mul {
					out = graph.Mul(aa, ba)
				}
				return []*graph.Array{out}, map[*graph.Array]any{aa: a, ba: b}
			})
		}
	}
	return cs
}

// concatCases returns the cases of Concat of rows.
func concatCases(r *rand.Rand) []Case {
	var cs cases
	for _, s := range [][3]int{{1, 1, 1}, {3, 5, 9}, {4, 100, 33}} {
		m, da, db := s[0], s[1], s[2]
		a, b := RandF32(r, m*da, 1), RandF32(r, m*db, 1)
		cs.add(fmt.Sprintf("Concat/M%d_%d+%d", m, da, db), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			aa, ba := g.Input("a", graph.F32, m, da), g.Input("b", graph.F32, m, db)
			return []*graph.Array{graph.Concat(aa, ba)}, map[*graph.Array]any{aa: a, ba: b}
		})
	}
	return cs
}

// vocabCases returns the cases of LogSoftmax, Argmax, TopK and TakeAlong over vocabulary-wide rows, ties included.
func vocabCases(r *rand.Rand) []Case {
	var cs cases
	for _, s := range [][3]int{{1, 1, 1}, {2, 33, 3}, {3, 1000, 8}, {1, 5000, 1}, {2, 40, 40}} {
		m, v, k := s[0], s[1], s[2]
		x := RandF32(r, m*v, 10)
		ties := make([]float32, m*v)
		for i := range ties {
			ties[i] = float32(r.IntN(4)) // many equal values: ties go to the lowest index
		}
		cs.add(fmt.Sprintf("LogSoftmax/M%d_V%d", m, v), TolF32, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa := g.Input("x", graph.F32, m, v)
			return []*graph.Array{graph.LogSoftmax(xa)}, map[*graph.Array]any{xa: x}
		})
		for name, data := range map[string][]float32{"random": x, "ties": ties} {
			cs.add(fmt.Sprintf("Argmax/%s/M%d_V%d", name, m, v), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.Argmax(xa)}, map[*graph.Array]any{xa: data}
			})
			cs.add(fmt.Sprintf("TopK/%s/M%d_V%d_K%d", name, m, v, k), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa := g.Input("x", graph.F32, m, v)
				return []*graph.Array{graph.TopK(xa, k)}, map[*graph.Array]any{xa: data}
			})
		}
		idx := RandInts(r, m*k, 0, v)
		cs.add(fmt.Sprintf("TakeAlong/M%d_V%d_K%d", m, v, k), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
			xa, ia := g.Input("x", graph.F32, m, v), g.Input("idx", graph.I32, m, k)
			return []*graph.Array{graph.TakeAlong(xa, ia)}, map[*graph.Array]any{xa: x, ia: idx}
		})
	}
	return cs
}

// gatherRowsCases returns the cases of GatherRows of f32 and i32 rows.
func gatherRowsCases(r *rand.Rand) []Case {
	var cs cases
	for _, dt := range []graph.DType{graph.F32, graph.I32} {
		for _, s := range [][3]int{{1, 1, 1}, {7, 15, 4}, {40, 33, 9}} {
			m, row, n := s[0], s[1], s[2]
			var x any = RandF32(r, m*3*row, 1)
			if dt == graph.I32 {
				x = RandInts(r, m*3*row, -1000, 1000)
			}
			idx := RandInts(r, n, 0, m)
			cs.add(fmt.Sprintf("GatherRows/%v/M%d_row%d_n%d", dt, m, row, n), 0, func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				xa, ia := g.Input("x", dt, m, 3, row), g.Input("idx", graph.I32, n)
				return []*graph.Array{graph.GatherRows(xa, ia)}, map[*graph.Array]any{xa: x, ia: idx}
			})
		}
	}
	return cs
}

// Eval runs a case on be and returns each output as []float32 or []int32.
func Eval(be graph.Backend, c Case) ([]any, error) {
	g := graph.New()
	outs, inputs := c.Build(be, g)
	var res []any
	err := graph.Eval(be, inputs, func(p *graph.Plan) error {
		var err error
		res, err = ReadOutputs(p, outs)
		return err
	}, outs...)
	return res, err
}

// Check runs case c on be and on the reference backend ref and describes
// how be's outputs differ from the reference's beyond the case's tolerance
// (Compare), "" when they agree. A failure of be (its kernel does not
// compile, a launch fails, thread orders disagree) is a difference too, and
// comes back as its message; a failure of the reference is err. It is the
// check every GPU backend's emulated kernel tests run, shared so that they
// judge the same way.
func Check(be, ref graph.Backend, c Case) (diff string, err error) {
	want, err := Eval(ref, c)
	if err != nil {
		return "", fmt.Errorf("%s on the reference: %w", c.Name, err)
	}
	got, err := Eval(be, c)
	if err != nil {
		return err.Error(), nil
	}
	diff, _ = Compare(got, want, c.Tol, c.Floor)
	return diff, nil
}

// ReadOutputs reads each output as []float32 (an f16 KV cache as its exact
// float values) or []int32.
func ReadOutputs(p *graph.Plan, outs []*graph.Array) ([]any, error) {
	var res []any
	for _, o := range outs {
		switch o.DType() {
		case graph.I32:
			dst := make([]int32, o.Shape().Numel())
			if err := p.Read(o, dst); err != nil {
				return nil, err
			}
			res = append(res, dst)
		case graph.F16:
			h := make([]uint16, o.Shape().Numel())
			if err := p.Read(o, h); err != nil {
				return nil, err
			}
			f := make([]float32, len(h))
			for i, x := range h {
				f[i] = quant.F16ToF32(x)
			}
			res = append(res, f)
		default:
			dst := make([]float32, o.Shape().Numel())
			if err := p.Read(o, dst); err != nil {
				return nil, err
			}
			res = append(res, dst)
		}
	}
	return res, nil
}

// Compare returns a description of the first disagreement, or "": float
// errors are relative to max(max|want|, floor).
func Compare(got, want []any, tol, floor float64) (string, float64) {
	worst := 0.0
	for i := range want {
		switch w := want[i].(type) {
		case []int32:
			g := got[i].([]int32)
			if !slices.Equal(g, w) {
				return fmt.Sprintf("output %d: got %v, want %v", i, head(g), head(w)), math.Inf(1)
			}
		case []float32:
			g := got[i].([]float32)
			var big, diff float64
			at := 0
			for j := range w {
				big = math.Max(big, math.Abs(float64(w[j])))
				if d := math.Abs(float64(g[j]) - float64(w[j])); d > diff || math.IsNaN(d) {
					diff, at = d, j
					if math.IsNaN(d) {
						diff = math.Inf(1)
					}
				}
			}
			rel := diff / math.Max(big, math.Max(floor, 1e-30))
			worst = math.Max(worst, rel)
			if rel > tol || (tol == 0 && diff != 0) {
				return fmt.Sprintf("output %d: error %.3g > %.3g at [%d]: got %v, want %v", i, rel, tol, at, g[at], w[at]), rel
			}
		}
	}
	return "", worst
}

func head[T any](v []T) []T {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}
