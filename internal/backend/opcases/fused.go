package opcases

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// linearVariant is the fusions of a LinearOp case.
type linearVariant struct {
	name                 string
	norm, bias, residual bool
	glu                  graph.GLU
}

// linearVariants are the fusions a layer uses (norm before Q·K·V, with or
// without Qwen's bias; norm and SwiGLU over gate·up; the residual after
// the O and down products) and one more (bias and residual), each checked
// on every weight type. Gemma's GeGLU over gate·up has cases of its own
// (gegluLinearCases).
var linearVariants = []linearVariant{
	{"norm", true, false, false, graph.NoGLU},
	{"norm+bias", true, true, false, graph.NoGLU},
	{"norm+swiglu", true, false, false, graph.GLUSiLU},
	{"norm+bias+swiglu", true, true, false, graph.GLUSiLU},
	{"residual", false, false, true, graph.NoGLU},
	{"bias+residual", false, true, true, graph.NoGLU},
}

// fusedCases returns the cases of the fused layer ops: LinearOp on float
// and quantized weights at matvec row counts (1, a verification pass, on
// rows of whole 16-byte words and not) and past them (a prefill chunk,
// which takes the matrix kernels), and RoPEKVWrite into f32 and f16
// caches, NeoX and adjacent pairs, partial rotary, grouped heads.
func fusedCases(r *rand.Rand) []Case {
	var cs []Case
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, v := range linearVariants {
			for _, s := range [][3]int{{1, 136, 24}, {5, 70, 9}, {300, 40, 12}} {
				m, k, n := s[0], s[1], s[2]
				w := Weights(r, dt, wantRows(n, v.glu)*k)
				cs = append(cs, linearCase(r, fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", v.name, dt, m, k, n), TolFor(dt), v, m, k, n,
					func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
						wa := g.Input("w", dt, wantRows(n, v.glu), k)
						in[wa] = w
						return wa
					}))
			}
		}
	}
	for _, bits := range []int{4, 8} {
		for vi, v := range linearVariants {
			for si, s := range [][4]int{{1, 256, 17, 64}, {5, 128, 10, 32}, {40, 384, 7, 128}} {
				m, k, n, gs := s[0], s[1], s[2], s[3]
				dt := []graph.DType{graph.F16, graph.BF16, graph.F32}[(vi+si)%3]
				q := RandQuant(r, wantRows(n, v.glu), k, bits, gs, dt)
				cs = append(cs, linearCase(r, fmt.Sprintf("Linear/%s/%d-bit/g%d/%v/M%d_K%d_N%d", v.name, bits, gs, dt, m, k, n), TolF32, v, m, k, n,
					func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
						return q.Inputs(g, in, wantRows(n, v.glu), k, bits, gs, dt)
					}))
			}
		}
		// One row (decoding's kernels) with f16 scales and no norm, which
		// the rotation above gives the norm variants only.
		m, k, n, gs := 1, 256, 17, 64
		q := RandQuant(r, n, k, bits, gs, graph.F16)
		cs = append(cs, linearCase(r, fmt.Sprintf("Linear/residual/%d-bit/g%d/f16/M%d_K%d_N%d", bits, gs, m, k, n), TolF32, linearVariants[4], m, k, n,
			func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
				return q.Inputs(g, in, n, k, bits, gs, graph.F16)
			}))
	}
	cs = append(cs, ropeKVWriteCases(r)...)
	// A verification pass over f16/bf16 rows of whole 16-byte words (k a
	// multiple of 8), which the 5-row cases above (k = 70) are not: CUDA's
	// 8-row kernels (linear8x8_*), with a column tail. Last, so that the
	// cases above keep their random inputs.
	for _, dt := range []graph.DType{graph.F16, graph.BF16} {
		for _, v := range linearVariants {
			m, k, n := 5, 136, 9
			w := Weights(r, dt, wantRows(n, v.glu)*k)
			cs = append(cs, linearCase(r, fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", v.name, dt, m, k, n), TolFor(dt), v, m, k, n,
				func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
					wa := g.Input("w", dt, wantRows(n, v.glu), k)
					in[wa] = w
					return wa
				}))
		}
	}
	return cs
}

// wantRows is the rows of w for n outputs: gate and up rows with a GLU.
func wantRows(n int, glu graph.GLU) int {
	if glu != graph.NoGLU {
		return 2 * n
	}
	return n
}

// linearCase is one LinearOp case of variant v over x [m,k] with n
// outputs; weight declares w. Its floor bounds the error's denominator by
// what the product can round to, Σ|h| over a row of the product's input h
// (x, or x normalised), since |w| <= 1; a GLU's output, a product of two
// such sums, is compared to the largest output instead (no floor), which
// its magnitudes keep well away from rounding. The norm's epsilon is large
// enough (0.25 against mean squares near 1.3) that a kernel leaving it out
// fails.
func linearCase(r *rand.Rand, name string, tol float64, v linearVariant, m, k, n int, weight func(g *graph.Graph, in map[*graph.Array]any) *graph.Array) Case {
	const eps = 0.25
	x, gain := RandF32(r, m*k, 2), RandF32(r, k, 1)
	bias, res := RandF32(r, wantRows(n, v.glu), 1), RandF32(r, m*n, 4)
	h := x
	if v.norm {
		h = make([]float32, len(x))
		for row := range m {
			ss := 0.0
			for _, xv := range x[row*k : (row+1)*k] {
				ss += float64(xv) * float64(xv)
			}
			inv := 1 / math.Sqrt(ss/float64(k)+eps)
			for j := range k {
				h[row*k+j] = float32(float64(x[row*k+j]) * inv * float64(gain[j]))
			}
		}
	}
	bound := maxRowAbsSum(h, k)
	if v.glu != graph.NoGLU {
		bound = 0
	}
	return Case{Name: name, Tol: tol, Floor: bound, Build: func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
		xa := g.Input("x", graph.F32, m, k)
		in := map[*graph.Array]any{xa: x}
		f := graph.Fusion{GLU: v.glu, Eps: eps}
		if v.norm {
			f.Norm = g.Input("gain", graph.F32, k)
			in[f.Norm] = gain
		}
		w := weight(g, in)
		if v.bias {
			f.Bias = g.Input("bias", graph.F32, wantRows(n, v.glu))
			in[f.Bias] = bias
		}
		if v.residual {
			f.Residual = g.Input("residual", graph.F32, m, n)
			in[f.Residual] = res
		}
		return []*graph.Array{graph.Linear(xa, w, f)}, in
	}}
}

// gegluLinearCases are the LinearOp cases of Gemma's gate·up, norm and
// GeGLU (with a bias on both halves too, which no Gemma has but the
// epilogue supports): one decoding row over f16 weights, a verification
// pass over quantized ones, and a prefill chunk (past the matvec rows:
// Metal's composition of unfused kernels). A family of its own, last in
// All, so that the cases before it keep their random inputs.
func gegluLinearCases(r *rand.Rand) []Case {
	norm := linearVariant{"norm+geglu", true, false, false, graph.GLUGELU}
	normBias := linearVariant{"norm+bias+geglu", true, true, false, graph.GLUGELU}
	var cs []Case
	for _, s := range []struct {
		v       linearVariant
		dt      graph.DType
		m, k, n int
	}{{norm, graph.F16, 1, 136, 24}, {normBias, graph.F32, 300, 40, 12}} {
		w := Weights(r, s.dt, 2*s.n*s.k)
		cs = append(cs, linearCase(r, fmt.Sprintf("Linear/%s/%v/M%d_K%d_N%d", s.v.name, s.dt, s.m, s.k, s.n), TolFor(s.dt), s.v, s.m, s.k, s.n,
			func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
				wa := g.Input("w", s.dt, 2*s.n, s.k)
				in[wa] = w
				return wa
			}))
	}
	m, k, n, bits, gs, sdt := 5, 128, 10, 4, 32, graph.BF16
	q := RandQuant(r, 2*n, k, bits, gs, sdt)
	cs = append(cs, linearCase(r, fmt.Sprintf("Linear/%s/%d-bit/g%d/%v/M%d_K%d_N%d", normBias.name, bits, gs, sdt, m, k, n), TolF32, normBias, m, k, n,
		func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
			return q.Inputs(g, in, 2*n, k, bits, gs, sdt)
		}))
	return cs
}

// ropeKVWriteCases returns the cases of RoPEKVWrite: the rotated queries
// and both caches after the write are compared.
func ropeKVWriteCases(r *rand.Rand) []Case {
	var cs []Case
	for _, dt := range []graph.DType{graph.F32, graph.F16} {
		for _, neox := range []bool{true, false} {
			for _, s := range [][6]int{{1, 4, 2, 16, 8, 9}, {6, 2, 1, 18, 6, 0}, {5, 6, 2, 64, 32, 40}} {
				m, h, kvh, d, p, past := s[0], s[1], s[2], s[3], s[4], s[5]
				c := past + m + 2
				qkv, pos := RandF32(r, m*(h+2*kvh)*d, 1), RandInts(r, m, 0, 300)
				kc, vc := RandF32(r, kvh*c*d, 1), RandF32(r, kvh*c*d, 1)
				inv := make([]float32, p)
				for j := range inv {
					inv[j] = float32(math.Pow(10000, -float64(2*j)/float64(d)))
				}
				name := fmt.Sprintf("RoPEKVWrite/%v/neox=%v/M%d_H%d_KVH%d_D%d_P%d_at%d", dt, neox, m, h, kvh, d, p, past)
				tol := TolF32
				if dt == graph.F16 {
					// A rotated key an f32 rounding away from a halfway
					// point rounds to the neighbouring f16: one f16 step,
					// 2^-10 of the value at most (a seed hit 3.6e-4).
					tol = 1e-3
				}
				cs = append(cs, Case{Name: name, Tol: tol, Build: func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
					ka := varOf(be, g, "k", slices.Clone(kc), dt, kvh, c, d)
					va := varOf(be, g, "v", slices.Clone(vc), dt, kvh, c, d)
					xa, pa, la := g.Input("qkv", graph.F32, m, (h+2*kvh)*d), g.Input("pos", graph.I32, m), g.Input("kvLen", graph.I32, 1)
					q := graph.RoPEKVWrite(xa, pa, ka, va, la, h, kvh, inv, neox)
					return []*graph.Array{q, ka, va}, map[*graph.Array]any{xa: qkv, pa: pos, la: []int32{int32(past)}}
				}})
			}
		}
	}
	return cs
}
