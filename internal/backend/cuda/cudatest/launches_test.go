package cudatest

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// tinyLlama22 returns a Llama model with TinyLlama's 22 layers and grouped
// KV heads, tiny dimensions and random f16 weights: what counts here is the
// shape of a decode step's plan, not its values.
func tinyLlama22(r *rand.Rand) *llama.Model {
	c := llama.Config{Arch: "llama", Vocab: 96, Dim: 64, FFN: 160, Layers: 22, Heads: 4, KVHeads: 2, HeadDim: 16,
		NormEps: 1e-5, RopeTheta: 10000, RopeDims: 16, RopeNeoX: true, Context: 128}
	f16 := func(shape ...int) llama.Weight {
		s := graph.Shape(shape)
		h := make([]uint16, s.Numel())
		for i := range h {
			h[i] = quant.F32ToF16(r.Float32()*0.2 - 0.1)
		}
		b := make([]byte, 2*len(h))
		for i, v := range h {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
		return llama.Weight{DType: graph.F16, Shape: s, Data: b}
	}
	f32 := func(n int) llama.Weight {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], 0x3f800000) // 1.0: a norm's gain
		}
		return llama.Weight{DType: graph.F32, Shape: graph.Shape{n}, Data: b}
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m := &llama.Model{Config: c, Embed: f16(c.Vocab, c.Dim), Norm: f32(c.Dim), Output: f16(c.Vocab, c.Dim)}
	for range c.Layers {
		m.Layers = append(m.Layers, llama.Layer{AttnNorm: f32(c.Dim), Q: f16(q, c.Dim), K: f16(kv, c.Dim), V: f16(kv, c.Dim),
			O: f16(c.Dim, q), FFNNorm: f32(c.Dim), Gate: f16(c.FFN, c.Dim), Up: f16(c.FFN, c.Dim), Down: f16(c.Dim, c.FFN)})
	}
	return m
}

// decodeLaunches binds m to a CUDA backend over the fake driver (launches
// counted, not executed), prefills a short prompt, and returns the
// launches of one greedy decode step's plan, fused layers or not.
func decodeLaunches(t *testing.T, m *llama.Model, fused bool) int {
	t.Helper()
	be := cudafake.NewBackend(nil)
	defer be.Close()
	r, err := llama.BindFused(m, be, fused)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Fused() != fused {
		t.Fatalf("BindFused(%v) built fused=%v", fused, r.Fused())
	}
	r.KVCache = graph.F16 // the backend's default
	s, err := r.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := m.Config
	prompt := []int32{1, 7, 33, 12, 5}
	if err := s.Forward(llama.Chain(prompt, false), make([]float32, c.Vocab), make([]float32, c.Dim)); err != nil {
		t.Fatal(err)
	}
	s.Advance(len(prompt))
	before := be.Stats()
	if err := s.Forward(llama.Chain([]int32{42}, false), make([]float32, c.Vocab), make([]float32, c.Dim)); err != nil {
		t.Fatal(err)
	}
	after := be.Stats()
	if runs := after.Runs - before.Runs; runs != 1 {
		t.Fatalf("a decode step ran %d plans, want 1", runs)
	}
	return after.Launches - before.Launches
}

// TestLaunchesPerDecodeStep: with fused layers (LinearOp, RoPEKVWriteOp),
// a greedy decode step of a TinyLlama-shaped model (22 layers, f16) is at
// most 140 kernel launches: six a layer, and the embedding, final norm and
// output product. Unfused, each layer is seventeen ops.
func TestLaunchesPerDecodeStep(t *testing.T) {
	m := tinyLlama22(rand.New(rand.NewPCG(22, 1)))
	fused, unfused := decodeLaunches(t, m, true), decodeLaunches(t, m, false)
	t.Logf("launches per decode step: %d (unfused: %d)", fused, unfused)
	if fused > 140 {
		t.Errorf("launches per decode step: %d, want at most 140", fused)
	}
	if fused >= unfused {
		t.Errorf("fused layers launch %d kernels per decode step, unfused %d", fused, unfused)
	}
}
