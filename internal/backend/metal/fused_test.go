package metal

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// fusedCases are LinearOp cases beyond opcases': every fusion at once
// (norm, bias on both halves of SwiGLU, residual), which no opcases variant
// combines, with the error relative to the result's own magnitude (Floor
// k, one product's Σ|h·w| at most) rather than opcases' square of a bound
// for SwiGLU, so that a SwiGLU that reads the wrong half, or the wrong bias
// half, shows. f32 and quantized weights only: their reference rounds as
// the kernel does up to summation order. make test-all (testenv.Full) runs
// each with GeGLU too, after the SwiGLU ones (which keep their inputs).
func fusedCases(r *rand.Rand) []opcases.Case {
	cs := fusedCasesWith(r, graph.GLUSiLU, "all")
	if testenv.Full() {
		cs = append(cs, fusedCasesWith(r, graph.GLUGELU, "all-geglu")...)
	}
	return cs
}

// fusedCasesWith are fusedCases with glu, named Linear/<tag>/....
func fusedCasesWith(r *rand.Rand, glu graph.GLU, tag string) []opcases.Case {
	var cs []opcases.Case
	for _, s := range [][3]int{{1, 136, 24}, {5, 64, 9}, {40, 128, 12}} {
		m, k, n := s[0], s[1], s[2]
		w := opcases.Weights(r, graph.F32, 2*n*k)
		cs = append(cs, fullLinearCase(r, fmt.Sprintf("Linear/%s/f32/M%d_K%d_N%d", tag, m, k, n), glu, m, k, n,
			func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
				wa := g.Input("w", graph.F32, 2*n, k)
				in[wa] = w
				return wa
			}))
	}
	for _, s := range [][5]int{{1, 256, 17, 64, 4}, {5, 128, 10, 32, 8}, {40, 128, 7, 128, 4}} {
		m, k, n, gs, bits := s[0], s[1], s[2], s[3], s[4]
		q := opcases.RandQuant(r, 2*n, k, bits, gs, graph.F16)
		cs = append(cs, fullLinearCase(r, fmt.Sprintf("Linear/%s/%d-bit/g%d/f16/M%d_K%d_N%d", tag, bits, gs, m, k, n), glu, m, k, n,
			func(g *graph.Graph, in map[*graph.Array]any) *graph.Array {
				return q.Inputs(g, in, 2*n, k, bits, gs, graph.F16)
			}))
	}
	return cs
}

// fullLinearCase is a LinearOp with every fusion (glu for the GLU) over x
// [m,k], n outputs.
func fullLinearCase(r *rand.Rand, name string, glu graph.GLU, m, k, n int, weight func(g *graph.Graph, in map[*graph.Array]any) *graph.Array) opcases.Case {
	x, gain := opcases.RandF32(r, m*k, 2), opcases.RandF32(r, k, 1)
	bias, res := opcases.RandF32(r, 2*n, 1), opcases.RandF32(r, m*n, 4)
	return opcases.Case{Name: name, Tol: opcases.TolF32, Floor: float64(k), Build: func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
		xa := g.Input("x", graph.F32, m, k)
		in := map[*graph.Array]any{xa: x}
		f := graph.Fusion{GLU: glu, Eps: 1e-5}
		f.Norm = g.Input("gain", graph.F32, k)
		in[f.Norm] = gain
		w := weight(g, in)
		f.Bias = g.Input("bias", graph.F32, 2*n)
		in[f.Bias] = bias
		f.Residual = g.Input("residual", graph.F32, m, n)
		in[f.Residual] = res
		return []*graph.Array{graph.Linear(xa, w, f)}, in
	}}
}

// allCases are the cases the kernel tests run: opcases' and fusedCases.
func allCases(r *rand.Rand) []opcases.Case { return append(opcases.All(r), fusedCases(r)...) }

// tinyLlama is a model of TinyLlama's shape (22 layers, grouped KV heads)
// at tiny dims with random weights: f16 matrices, or affine-quantized ones
// of bits (4 or 8, groups of 32) with f16 scales.
func tinyLlama(t *testing.T, bits int) *llama.Model {
	t.Helper()
	c := llama.Config{Arch: "llama", Vocab: 96, Dim: 64, FFN: 160, Layers: 22, Heads: 4, KVHeads: 2, HeadDim: 16,
		NormEps: 1e-5, RopeTheta: 10000, RopeDims: 16, RopeNeoX: true, Context: 64}
	r := rand.New(rand.NewPCG(uint64(bits), 22))
	f16 := func(name string, rows, cols int) llama.Weight {
		v := opcases.RandF32(r, rows*cols, 0.2)
		if bits == 0 || name == "embed" {
			return llama.Weight{Name: name, DType: graph.F16, Shape: graph.Shape{rows, cols}, Data: graph.AsBytes(quant.F32sToF16(v))}
		}
		codes, s, b, err := quant.QuantizeAffine(v, cols, bits, 32)
		if err != nil {
			t.Fatal(err)
		}
		sb := graph.Shape{rows, cols / 32}
		return llama.Weight{Name: name, DType: graph.U32, Shape: graph.Shape{rows, cols}, Data: graph.AsBytes(codes), Quant: &llama.Quant{
			Bits: bits, GroupSize: 32,
			Scales: llama.Weight{Name: name + ".scales", DType: graph.F16, Shape: sb, Data: graph.AsBytes(quant.F32sToF16(s))},
			Biases: llama.Weight{Name: name + ".biases", DType: graph.F16, Shape: sb, Data: graph.AsBytes(quant.F32sToF16(b))},
		}}
	}
	norm := func(name string) llama.Weight {
		v := opcases.RandF32(r, c.Dim, 0.5)
		for i := range v {
			v[i] += 1
		}
		return llama.Weight{Name: name, DType: graph.F32, Shape: graph.Shape{c.Dim}, Data: graph.AsBytes(v)}
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m := &llama.Model{Config: c, Embed: f16("embed", c.Vocab, c.Dim), Norm: norm("norm"), Output: f16("output", c.Vocab, c.Dim)}
	for i := range c.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		m.Layers = append(m.Layers, llama.Layer{
			AttnNorm: norm(p + "attn_norm"), FFNNorm: norm(p + "ffn_norm"),
			Q: f16(p+"q", q, c.Dim), K: f16(p+"k", kv, c.Dim), V: f16(p+"v", kv, c.Dim), O: f16(p+"o", c.Dim, q),
			Gate: f16(p+"gate", c.FFN, c.Dim), Up: f16(p+"up", c.FFN, c.Dim), Down: f16(p+"down", c.Dim, c.FFN),
		})
	}
	return m
}

// decodeStep binds m to a fake Metal device (each step run by the CPU
// reference), prefills a short prompt and returns the dispatches of the
// one greedy decode step after it, and that step's logits.
func decodeStep(t *testing.T, m *llama.Model, fused bool) (int, []float32) {
	t.Helper()
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	defer be.Close()
	r, err := llama.BindFused(m, be, fused)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Fused() != fused {
		t.Fatalf("bound with fused %v, runner builds fused layers: %v", fused, r.Fused())
	}
	s, err := r.NewState(m.Config.Context)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vocab := m.Config.Vocab
	logits := make([]float32, vocab)
	prompt := []int32{1, 17, 42, 5, 77}
	if err := s.Forward(llama.Chain(prompt, false), logits, nil); err != nil {
		t.Fatal(err)
	}
	s.Advance(len(prompt))
	next := int32(0)
	for i, v := range logits {
		if v > logits[next] {
			next = int32(i)
		}
	}
	before := be.Stats().Dispatches
	if err := s.Forward(llama.Chain([]int32{next}, false), logits, nil); err != nil {
		t.Fatal(err)
	}
	return be.Stats().Dispatches - before, logits
}

// TestFusedLayersDispatchesPerDecodeStep: a TinyLlama-shaped model (22
// layers) decodes a token on Metal in at most 140 dispatches with fused
// layers (six per layer and attention, plus the embedding and the head),
// against seventeen-odd per layer unfused, and to the same logits within
// rounding (the fake device runs every step on the CPU reference, whose
// fused and unfused graphs are equal bit for bit).
func TestFusedLayersDispatchesPerDecodeStep(t *testing.T) {
	for _, bits := range []int{0, 4} {
		name := "f16"
		if bits > 0 {
			name = fmt.Sprintf("%d-bit", bits)
		}
		t.Run(name, func(t *testing.T) {
			m := tinyLlama(t, bits)
			fused, got := decodeStep(t, m, true)
			unfused, want := decodeStep(t, m, false)
			t.Logf("dispatches per decode step: %d (unfused: %d), %d layers", fused, unfused, m.Config.Layers)
			if fused > 140 {
				t.Errorf("%d dispatches per decode step with fused layers, want <= 140", fused)
			}
			if fused >= unfused {
				t.Errorf("fused layers take %d dispatches per decode step, unfused %d", fused, unfused)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("logit %d: fused %v, unfused %v", i, got[i], want[i])
				}
			}
		})
	}
}
