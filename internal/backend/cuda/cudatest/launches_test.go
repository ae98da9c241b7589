package cudatest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// tinyLlama22 returns a Llama model with TinyLlama's 22 layers and grouped
// KV heads, tiny dimensions and random f16 weights, or with bits > 0 layer
// matrices affine-quantized to bits (groups of 32, f16 scales): what counts
// here is the shape of a decode step's plan, not its values.
func tinyLlama22(r *rand.Rand, bits int) *llama.Model {
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
	// mat is a layer's matrix: f16, or quantized when bits > 0.
	mat := func(rows, cols int) llama.Weight {
		if bits == 0 {
			return f16(rows, cols)
		}
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = r.Float32()*0.2 - 0.1
		}
		codes, s, b, err := quant.QuantizeAffine(v, cols, bits, 32)
		if err != nil {
			panic(err) // fixed shapes, a multiple of the group
		}
		sb := graph.Shape{rows, cols / 32}
		return llama.Weight{DType: graph.U32, Shape: graph.Shape{rows, cols}, Data: graph.AsBytes(codes), Quant: &llama.Quant{Bits: bits, GroupSize: 32,
			Scales: llama.Weight{DType: graph.F16, Shape: sb, Data: graph.AsBytes(quant.F32sToF16(s))},
			Biases: llama.Weight{DType: graph.F16, Shape: sb, Data: graph.AsBytes(quant.F32sToF16(b))}}}
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m := &llama.Model{Config: c, Embed: f16(c.Vocab, c.Dim), Norm: f32(c.Dim), Output: f16(c.Vocab, c.Dim)}
	for range c.Layers {
		m.Layers = append(m.Layers, llama.Layer{AttnNorm: f32(c.Dim), Q: mat(q, c.Dim), K: mat(kv, c.Dim), V: mat(kv, c.Dim),
			O: mat(c.Dim, q), FFNNorm: f32(c.Dim), Gate: mat(c.FFN, c.Dim), Up: mat(c.FFN, c.Dim), Down: mat(c.Dim, c.FFN)})
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
// a greedy decode step of a TinyLlama-shaped model (22 layers, f16, and
// 4-bit: the quantized layers fuse as the float ones do) is at most 140
// kernel launches: six a layer, and the embedding, final norm and output
// product. Unfused, each layer is seventeen ops.
func TestLaunchesPerDecodeStep(t *testing.T) {
	for _, bits := range []int{0, 4} {
		name := "f16"
		if bits > 0 {
			name = fmt.Sprintf("%d-bit", bits)
		}
		t.Run(name, func(t *testing.T) {
			m := tinyLlama22(rand.New(rand.NewPCG(22, 1)), bits)
			fused, unfused := decodeLaunches(t, m, true), decodeLaunches(t, m, false)
			t.Logf("launches per decode step: %d (unfused: %d)", fused, unfused)
			if fused > 140 {
				t.Errorf("launches per decode step: %d, want at most 140", fused)
			}
			if fused >= unfused {
				t.Errorf("fused layers launch %d kernels per decode step, unfused %d", fused, unfused)
			}
		})
	}
}

// stepCalls returns the driver calls f made while step ran, which must
// be one Run of a plan: the Runs' counts are those of be.
func stepCalls(t *testing.T, be *cuda.Backend, f *cudafake.Driver, step func() error) (cudafake.Calls, cuda.Stats) {
	t.Helper()
	c0, s0 := f.Calls(), be.Stats()
	if err := step(); err != nil {
		t.Fatal(err)
	}
	c, s := f.Calls(), be.Stats()
	if runs := s.Runs - s0.Runs; runs != 1 {
		t.Fatalf("the step ran %d plans, want 1", runs)
	}
	return cudafake.Calls{Launches: c.Launches - c0.Launches, GraphLaunches: c.GraphLaunches - c0.GraphLaunches,
			Syncs: c.Syncs - c0.Syncs, Uploads: c.Uploads - c0.Uploads, AsyncCopies: c.AsyncCopies - c0.AsyncCopies,
			Downloads: c.Downloads - c0.Downloads, Graphs: c.Graphs - c0.Graphs},
		cuda.Stats{Staged: s.Staged - s0.Staged, Copies: s.Copies - s0.Copies}
}

// TestOneInputCopyPerStep: every step of decoding and ReDrafter on the
// TinyLlama-shaped model — a decode step, a verification pass over a tree
// of drafts, the greedy ReDrafter device step — sends its inputs (five,
// four of them written per step for the device step) in one asynchronous
// copy from the staging memory, makes no synchronous upload, waits once,
// and reads each output it asks for once. The plans replay as graphs.
func TestOneInputCopyPerStep(t *testing.T) {
	m := tinyLlama22(rand.New(rand.NewPCG(22, 1)), 0)
	t.Setenv(envvar.CUDAGraphs.Name(), "")
	f := cudafake.New(nil)
	be := cuda.NewWithDriver(f)
	defer be.Close()
	r, err := llama.Bind(m, be)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.KVCache = graph.F16
	c := m.Config
	s, err := r.NewState(c.Context)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits, hidden := make([]float32, c.Vocab), make([]float32, c.Dim)
	prompt := []int32{1, 7, 33, 12, 5}
	if err := s.Forward(llama.Chain(prompt, false), logits, hidden); err != nil {
		t.Fatal(err)
	}
	s.Advance(len(prompt))
	check := func(name string, step func() error, staged, downloads int) {
		t.Helper()
		// The first Run encodes the plan (and carries what was written
		// when it was made), the second builds its graph.
		for run := range 3 {
			calls, stats := stepCalls(t, be, f, step)
			want := cudafake.Calls{GraphLaunches: 1, Syncs: 1, AsyncCopies: 1, Downloads: downloads}
			if run == 0 {
				want.GraphLaunches, want.Launches = 0, calls.Launches
			}
			if run == 1 {
				want.Graphs = 1
			}
			if calls != want || stats.Copies != 1 || (run > 0 && stats.Staged != staged) {
				t.Errorf("%s, run %d: driver calls %+v, want %+v; %d writes staged in %d copies, want %d in 1",
					name, run, calls, want, stats.Staged, stats.Copies, staged)
			}
		}
	}
	// A decode step writes tokens, positions, the cached length, the tree
	// ends and the rows to return; it reads the logits and hidden state.
	check("decode step", func() error {
		return s.Forward(llama.Chain([]int32{42}, false), logits, hidden)
	}, 5, 2)
	// A verification pass over two beams of three drafts after the last
	// accepted token, every row's logits.
	depth, end := drafter.ChainsBatch(2, 4)
	tree := llama.Batch{Tokens: []int32{42, 3, 4, 5, 6, 7, 8}, Depth: depth, End: end, Rows: []int32{0, 1, 2, 3, 4, 5, 6}}
	vlogits := make([]float32, len(tree.Rows)*c.Vocab)
	check("verification", func() error { return s.Forward(tree, vlogits, nil) }, 5, 1)

	head := drafter.NewRandom(drafter.Config{VocabSize: c.Vocab, HiddenSize: c.Dim, ExitDim: 2 * c.Dim, NumDraftLayers: 1, RNN: true}, 3)
	d, err := drafter.NewDrafter(head, r)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ds, err := d.NewDeviceStep(s, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	// The device step writes the tree's first token, the context, the
	// positions and the cached length (its other inputs once, when it was
	// made); it reads five outputs. Nothing runs on the fake driver, so
	// nothing is accepted and each step keeps one token.
	check("ReDrafter device step", func() error { _, err := ds.Run(hidden, 42); return err }, 4, 5)
}
