package llama

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudatest"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// qwen3Spec is a tiny Qwen3: heads of 16 where Dim/Heads is 12 (so a
// head_dim taken from the hidden size would not load), GQA, tied
// embeddings as in the small Qwen3 models, rope base 1e6.
var qwen3Spec = llamatest.Spec{Arch: "qwen3", Vocab: 64, Dim: 48, FFN: 80, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
	NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true}

func writeQwen3(t *testing.T) *llamatest.Checkpoint {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), qwen3Spec, nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// qwen3Config is the Config both files of qwen3Spec must load as.
func qwen3Config() Config {
	s := qwen3Spec
	return Config{Arch: "qwen3", Vocab: s.Vocab, Dim: s.Dim, FFN: s.FFN, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, NormEps: s.NormEps, RopeTheta: s.RopeTheta, RopeDims: s.HeadDim, RopeNeoX: true,
		Context: s.Context, QKNorm: true, TiedOutput: true}
}

// naiveGreedy decodes n tokens after prompt with naiveForward, recomputing
// the whole sequence at each step.
func naiveGreedy(c Config, w map[string][]float64, prompt []int32, n int) []int32 {
	var seq []int
	for _, v := range prompt {
		seq = append(seq, int(v))
	}
	var out []int32
	for range n {
		rows := naiveForward(c, w, seq)
		last := rows[len(rows)-1]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		out = append(out, int32(best))
		seq = append(seq, best)
	}
	return out
}

// A random Qwen3 loads from GGUF and from an HF checkpoint with the same
// config, and both give the logits of an independent float64 forward
// pass (naiveForward, from transformers' modeling_qwen3.py) within 1e-5
// of the largest logit, on both CPU backends; the two files' logits are
// the same bits; greedy decoding gives the reference's tokens.
func TestQwen3MatchesReference(t *testing.T) {
	ck := writeQwen3(t)
	c := qwen3Config()
	tokens := []int32{3, 17, 5, 63, 0, 22, 8, 41}
	ints := make([]int, len(tokens))
	for i, v := range tokens {
		ints[i] = int(v)
	}
	want := naiveForward(c, ck.Weights, ints)
	prompt, n := []int32{7, 30, 2}, 24
	wantTokens := naiveGreedy(c, ck.Weights, prompt, n)
	checkMatchesReference(t, ck, c, tokens, want, prompt, wantTokens)
}

// The head norms are not decoration: without them (the same weights read
// as a Qwen2-style model with no biases), the logits move far from the
// reference's. This guards the test above against a norm that does
// nothing.
func TestQwen3WithoutHeadNormsDiffers(t *testing.T) {
	ck := writeQwen3(t)
	m, err := Open(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	plain := *m.Model
	plain.Config.QKNorm = false
	run := func(md *Model) []float32 {
		r, err := Bind(md, cpu.NewReference())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s, err := r.NewState(16)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out := make([]float32, 4*md.Config.Vocab)
		if err := s.Forward(Chain([]int32{3, 17, 5, 40}, true), out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if e := maxRel(run(&plain), run(m.Model)); e < 0.05 {
		t.Errorf("without q/k norms the logits moved by only %g", e)
	}
}

// A Qwen3 checkpoint without a layer's k_norm fails to load, naming it.
func TestQwen3MissingHeadNorm(t *testing.T) {
	ck := writeQwen3(t)
	st, err := formats.OpenSafetensorsDir(ck.HF)
	if err != nil {
		t.Fatal(err)
	}
	var kept []formats.Tensor
	for name, tn := range st.Tensors {
		if name != "model.layers.1.self_attn.k_norm.weight" {
			c := *tn
			c.Data = bytes.Clone(tn.Data)
			kept = append(kept, c)
		}
	}
	st.Close()
	writeST(t, filepath.Join(ck.HF, "model.safetensors"), kept)
	_, err = Open(ck.HF)
	if err == nil || !strings.Contains(err.Error(), `"model.layers.1.self_attn.k_norm.weight" is missing`) {
		t.Errorf("Open without k_norm: %v", err)
	}
	// A GGUF whose q_norm has the hidden size's shape is refused too.
	g, err := formats.OpenGGUF(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	var ts []formats.Tensor
	for _, tn := range g.Tensors {
		tn.Data = bytes.Clone(tn.Data)
		if tn.Name == "blk.0.attn_q_norm.weight" {
			tn.Shape = []int{12}
			tn.Data = tn.Data[:4*12]
		}
		ts = append(ts, tn)
	}
	kvs := g.KVs()
	g.Close()
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kvs, ts, 32); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ck.GGUF, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ck.GGUF)
	if err == nil || !strings.Contains(err.Error(), `"blk.0.attn_q_norm.weight" has shape [12], the config implies [16]`) {
		t.Errorf("Open with a q_norm of 12: %v", err)
	}
}

// On the fused layers' path (a GPU backend's graph, composed on the CPU)
// a Qwen3 layer keeps q, k and v unfused around the head norms and fuses
// the rest: the same bits as the unfused graph over prefill, decode, a
// tree and a kept branch. Metal's fake device (the CPU reference's steps
// in Metal's plan) gives the CPU reference's bits; Metal's and CUDA's
// emulated kernels give its logits within 1e-4.
func TestQwen3FusedAndGPUGraphs(t *testing.T) {
	ck := writeQwen3(t)
	want, unfused := passesOf(t, ck.GGUF, cpu.NewReference(), false)
	for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
		ref, _ := passesOf(t, ck.GGUF, be, false)
		got, steps := passesOf(t, ck.GGUF, be, true)
		for i := range ref {
			if !bitsEqual(got[i], ref[i]) {
				t.Errorf("%s: pass %d's %s differ fused", be.Name(), i/2, [2]string{"logits", "hidden states"}[i%2])
			}
		}
		// A layer: norm, three products, two head norms, two RoPEs, two
		// KV writes, attention, then O, gate-up and down fused: 14 steps.
		if w := 1 + 14*qwen3Spec.Layers + 3; steps != w {
			t.Errorf("%s: a fused decode step has %d steps, want %d (unfused %d)", be.Name(), steps, w, unfused)
		}
	}
	checkGPUPasses(t, ck.GGUF, want)
}

// A joint pass over sequences of every shape (the server's batching) gives
// each Qwen3 sequence the bits of its own forward pass, where the head
// norms run over the rows of all of them at once.
func TestQwen3JointForwardEqualsAlone(t *testing.T) {
	spec := qwen3Spec
	spec.Vocab = 512 // jointCases' token ids
	ck, err := llamatest.Write(t.TempDir(), spec, nil, 43)
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
		if st := checkJointOf(t, ck.GGUF, be, graph.F32); st.Passes != 2 {
			t.Errorf("%s: %d passes, want 2", be.Name(), st.Passes)
		}
	}
}

// checkMatchesReference checks a random checkpoint against a float64
// reference on both CPU backends, from its GGUF file and its HF directory:
// each reads as config c; the logits of tokens are within 1e-5 (of the
// largest) of want; greedy decoding from prompt gives wantTokens; and the
// GGUF and HF logits are equal bit for bit.
func checkMatchesReference(t *testing.T, ck *llamatest.Checkpoint, c Config, tokens []int32, want [][]float64, prompt, wantTokens []int32) {
	t.Helper()
	for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
		var logits [][]float32
		for _, path := range []string{ck.GGUF, ck.HF} {
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			got := m.Model.Config
			m.Close()
			if !reflect.DeepEqual(got, c) {
				t.Errorf("%s: config\n %+v, want\n %+v", filepath.Base(path), got, c)
			}
			l := logitsOfTokens(t, path, be, tokens)
			var worst, scale float64
			for tt := range want {
				for v := range want[tt] {
					scale = math.Max(scale, math.Abs(want[tt][v]))
					worst = math.Max(worst, math.Abs(float64(l[tt*c.Vocab+v])-want[tt][v]))
				}
			}
			if worst/scale > 1e-5 {
				t.Errorf("%s on %s: logits differ from the reference by %g of %g", filepath.Base(path), be.Name(), worst/scale, scale)
			}
			logits = append(logits, l)
			if got := greedy(t, path, be, prompt, len(wantTokens)); !slices.Equal(got, wantTokens) {
				t.Errorf("%s on %s: greedy tokens\n %v, reference\n %v", filepath.Base(path), be.Name(), got, wantTokens)
			}
		}
		if !bitsEqual(logits[0], logits[1]) {
			t.Errorf("on %s: GGUF and HF logits differ by %g", be.Name(), maxRel(logits[0], logits[1]))
		}
	}
}

// checkGPUPasses checks model's passes (passesOf) on Metal's fake device
// (its fused layers bit for bit the CPU reference's want) and, unless
// -short, with Metal's and CUDA's kernels emulated (logits within 1e-4).
func checkGPUPasses(t *testing.T, model string, want [][]float32) {
	t.Helper()
	fake := metal.NewFake(metal.Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4}, metal.Fake{Reference: cpu.NewReference()})
	got, _ := passesOf(t, model, fake, fake.FusesLayers())
	for i := range want {
		if !bitsEqual(got[i], want[i]) {
			t.Errorf("metal-fake: pass %d's %s differ from the CPU reference's", i/2, [2]string{"logits", "hidden states"}[i%2])
		}
	}
	if testing.Short() {
		return
	}
	for _, tc := range []struct {
		name string
		be   func(t *testing.T) graph.Backend
	}{
		{"metal-emulated", func(t *testing.T) graph.Backend { return metaltest.NewEmulated(t) }},
		{"cuda-emulated", func(t *testing.T) graph.Backend { return cudatest.NewEmulated(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := passesOf(t, model, tc.be(t), true)
			for i := 0; i < len(want); i += 2 { // the logits of each pass
				if e := maxRel(got[i], want[i]); e > 1e-4 {
					t.Errorf("pass %d: logits differ from the CPU reference's by %g", i/2, e)
				}
			}
		})
	}
}
