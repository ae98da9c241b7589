package metal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// treeVsDecode runs attention_tree over a random tree of new tokens, then
// each token alone after a cache holding the prefix and its ancestors (as
// after acceptance and compaction), and returns the first token whose two
// results differ in any bit, or -1.
func treeVsDecode(t *testing.T, be graph.Backend, r *rand.Rand, cache graph.DType, past int) (int, string) {
	t.Helper()
	const n, heads, kvh, d = 11, 4, 2, 40
	row := kvh * d
	end := opcases.RandomTree(r, n)
	q := opcases.RandF32(r, n*heads*d, 1)
	kc, vc := opcases.RandF32(r, (past+n)*row, 1), opcases.RandF32(r, (past+n)*row, 1)
	attend := func(q, k, v []float32, n, past int, end []int32) []float32 {
		c := len(k) / row
		g := graph.New()
		qa := g.Input("q", graph.F32, n, heads, d)
		ka, va := g.Input("k", cache, kvh, c, d), g.Input("v", cache, kvh, c, d)
		la, ea := g.Input("kvLen", graph.I32, 1), g.Input("end", graph.I32, n)
		out := graph.Attention(qa, ka, va, la, ea, 0.2)
		res := make([]float32, n*heads*d)
		k, v = opcases.HeadMajor(k, c, kvh, d), opcases.HeadMajor(v, c, kvh, d)
		var kd, vd any = k, v
		if cache == graph.F16 {
			kd, vd = quant.F32sToF16(k), quant.F32sToF16(v)
		}
		err := graph.Eval(be, map[*graph.Array]any{qa: q, ka: kd, va: vd, la: []int32{int32(past)}, ea: end},
			func(p *graph.Plan) error { return p.Read(out, res) }, out)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	tree := attend(q, kc, vc, n, past, end)
	per := heads * d
	for qi := range n {
		var path []int // ancestors of qi in DFS order, qi last
		for j := 0; j <= qi; j++ {
			if int(end[j]) >= qi {
				path = append(path, j)
			}
		}
		k := append([]float32(nil), kc[:past*row]...)
		v := append([]float32(nil), vc[:past*row]...)
		for _, j := range path {
			k = append(k, kc[(past+j)*row:(past+j+1)*row]...)
			v = append(v, vc[(past+j)*row:(past+j+1)*row]...)
		}
		alone := attend(q[qi*per:(qi+1)*per], k, v, 1, len(k)/row-1, []int32{0})
		for i := range alone {
			if math.Float32bits(alone[i]) != math.Float32bits(tree[qi*per+i]) {
				return qi, fmt.Sprintf("[%d]: in the tree %v, alone %v", i, tree[qi*per+i], alone[i])
			}
		}
	}
	return -1, ""
}

// TestAttentionTreeEqualsDecode: through the emulated kernels, a verified
// tree token gets the bits it gets decoded alone after its ancestors, which
// greedy ReDrafter needs to reproduce greedy decoding exactly: over a short
// cache (one chunk, attention_tree for both), and over a cache of three
// chunks where decode takes the split kernels and the tree walks the chunks
// in one threadgroup. Dealing key blocks to simdgroups by where the keys lie
// in the cache instead of by their visible index breaks it, and the test
// sees that.
func TestAttentionTreeEqualsDecode(t *testing.T) {
	be, _ := newEmuBackend(t, nil)
	r := rand.New(rand.NewPCG(seed(t), 11))
	for trial, cache := range []graph.DType{graph.F32, graph.F32, graph.F16} {
		if qi, why := treeVsDecode(t, be, r, cache, 13); qi >= 0 {
			t.Fatalf("trial %d (%v cache): token %d differs: %s", trial, cache, qi, why)
		}
	}
	defer func(old int) { attnSplitBelow = old }(attnSplitBelow)
	attnSplitBelow = 5 // decode (4 heads) splits, the tree (44 pairs) does not
	for _, cache := range []graph.DType{graph.F32, graph.F16} {
		if qi, why := treeVsDecode(t, be, r, cache, 2*attnChunk+50); qi >= 0 {
			t.Fatalf("%v cache of three chunks: token %d differs: %s", cache, qi, why)
		}
	}
	attnSplitBelow = 512
	raw, err := msl.Raw("attention.metal")
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "for (int b = int(sgitg); b < blocks; b += ATTN_SIMDGROUPS)", "for (int b = (int(sgitg) + past) % ATTN_SIMDGROUPS; b < blocks; b += ATTN_SIMDGROUPS)"
	if !strings.Contains(raw, from) {
		t.Fatalf("attention.metal no longer contains %q; update the planted change", from)
	}
	byRow, _ := newEmuBackend(t, map[string]string{"attention.metal": strings.Replace(raw, from, to, 1)})
	caught := false
	r = rand.New(rand.NewPCG(seed(t), 12))
	for range 3 {
		if qi, _ := treeVsDecode(t, byRow, r, graph.F32, 13); qi >= 0 {
			caught = true
			break
		}
	}
	if !caught {
		t.Error("dealing keys by cache row went unnoticed")
	}
}

// TestMatvecRowsIndependentOfBatch: through the emulated kernels, each row
// of a verification-sized product (up to MatvecMaxRows rows, matvec) has
// the bits of the same row alone (a decode step), for float and 4-bit
// weights, plain (MatMul) and with every fusion of a LinearOp (the norm's
// Σx² and the epilogue must not depend on the rows batched either).
func TestMatvecRowsIndependentOfBatch(t *testing.T) {
	t.Parallel()
	be, _ := newEmuBackend(t, nil)
	r := rand.New(rand.NewPCG(seed(t), 13))
	const k, n = 128, 37
	// 2n rows: the fused product's SwiGLU takes n gate rows and n up rows.
	q := opcases.RandQuant(r, 2*n, k, 4, 64, graph.F16)
	w := opcases.Weights(r, graph.F16, 2*n*k)
	gain, bias := opcases.RandF32(r, k, 1), opcases.RandF32(r, 2*n, 1)
	for _, fused := range []bool{false, true} {
		for _, quantized := range []bool{false, true} {
			ms := []int{5, 13}
			if fused {
				ms = ms[1:] // one batch size keeps the emulated runs few
			}
			for _, m := range ms {
				x, res := opcases.RandF32(r, m*k, 1), opcases.RandF32(r, m*n, 1)
				product := func(x, res []float32, rows int) []float32 {
					g := graph.New()
					xa := g.Input("x", graph.F32, rows, k)
					in := map[*graph.Array]any{xa: x}
					var wa *graph.Array
					if quantized {
						wa = q.Inputs(g, in, 2*n, k, 4, 64, graph.F16)
					} else {
						wa = g.Input("w", graph.F16, 2*n, k)
						in[wa] = w
					}
					var out *graph.Array
					if fused {
						f := graph.Fusion{Eps: 1e-5, GLU: graph.GLUSiLU, Norm: g.Input("gain", graph.F32, k),
							Bias: g.Input("bias", graph.F32, 2*n), Residual: g.Input("res", graph.F32, rows, n)}
						in[f.Norm], in[f.Bias], in[f.Residual] = gain, bias, res
						out = graph.Linear(xa, wa, f)
					} else {
						out = graph.MatMul(xa, wa)
					}
					got := make([]float32, out.Shape().Numel())
					if err := graph.Eval(be, in, func(p *graph.Plan) error { return p.Read(out, got) }, out); err != nil {
						t.Fatal(err)
					}
					return got
				}
				all := product(x, res, m)
				cols := len(all) / m // n fused, 2n plain
				for i := range m {
					one := product(x[i*k:(i+1)*k], res[i*n:(i+1)*n], 1)
					for j := range one {
						if math.Float32bits(one[j]) != math.Float32bits(all[i*cols+j]) {
							t.Fatalf("fused %v, 4-bit %v, m=%d: row %d col %d: batched %v, alone %v", fused, quantized, m, i, j, all[i*cols+j], one[j])
						}
					}
				}
			}
		}
	}
}

// TestMatvecLoadWidthKeepsBits: matvec reads rows 4 elements at a time only
// when the operands are aligned for it, and a misaligned weight (a tensor
// at an odd offset of a mapped file) takes the scalar path; both must give
// the same bits, or a decode step and a verification tree whose buffers
// happen to differ in alignment would disagree.
func TestMatvecLoadWidthKeepsBits(t *testing.T) {
	be, _ := newEmuBackend(t, nil)
	r := rand.New(rand.NewPCG(seed(t), 14))
	const k, n = 260, 13
	for _, dt := range []graph.DType{graph.F32, graph.F16, graph.BF16} {
		for _, m := range []int{1, 3, 7} {
			x := opcases.RandF32(r, m*k, 1)
			wb := graph.AsBytes(opcases.Weights(r, dt, n*k))
			product := func(off int) []float32 {
				buf, err := be.Alloc(off + len(wb))
				if err != nil {
					t.Fatal(err)
				}
				defer be.Free(buf)
				if err := be.Write(buf, off, wb); err != nil {
					t.Fatal(err)
				}
				g := graph.New()
				xa, wa := g.Input("x", graph.F32, m, k), g.Var("w", buf, off, dt, n, k)
				out := graph.MatMul(xa, wa)
				res := make([]float32, m*n)
				if err := graph.Eval(be, map[*graph.Array]any{xa: x}, func(p *graph.Plan) error { return p.Read(out, res) }, out); err != nil {
					t.Fatal(err)
				}
				return res
			}
			aligned, odd := product(0), product(dt.Size())
			for i := range aligned {
				if math.Float32bits(aligned[i]) != math.Float32bits(odd[i]) {
					t.Fatalf("%v, m=%d: [%d]: aligned weights %v, misaligned %v", dt, m, i, aligned[i], odd[i])
				}
			}
		}
	}
}
