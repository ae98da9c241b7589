package llama

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// gemma3Spec is a tiny Gemma 3: six layers (five sliding, the sixth
// global), a window of 5 so that 8-token sequences slide, GQA, head_dim 16
// where Dim/Heads is 12, hidden size 48 whose √ is not a float32 of few
// bits.
var gemma3Spec = llamatest.Spec{Arch: "gemma3", Vocab: 64, Dim: 48, FFN: 80, Layers: 6, Heads: 4, KVHeads: 2, HeadDim: 16,
	NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true, SlidingWindow: 5}

func writeGemma3(t *testing.T) *llamatest.Checkpoint {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), gemma3Spec, nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// gemma3Config is the Config both files of gemma3Spec must load as.
func gemma3Config() Config {
	s := gemma3Spec
	return Config{Arch: "gemma3", Vocab: s.Vocab, Dim: s.Dim, FFN: s.FFN, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, NormEps: s.NormEps, RopeTheta: s.RopeTheta, RopeDims: s.HeadDim, RopeNeoX: true,
		Context: s.Context, QKNorm: true, TiedOutput: true, SlidingWindow: s.SlidingWindow, SlidingPattern: 6, RopeLocalTheta: 10000,
		EmbedScale: float32(math.Sqrt(float64(s.Dim))), AttnScale: 1 / math.Sqrt(float64(s.HeadDim)), PostNorms: true, GeGLU: true}
}

// gemmaReference is the hyper-parameters naiveGemmaForward takes from a
// Gemma config.json, by their transformers names.
type gemmaReference struct {
	Config
	gemma2                                      bool // modeling_gemma2.py: no q/k norms, layer_idx % 2 == 0 slides, one RoPE base
	queryPreAttnScalar                          float64
	slidingWindowPattern                        int
	ropeLocalBaseFreq                           float64
	attnLogitSoftcapping, finalLogitSoftcapping float64 // 0: None
}

func gemma3Reference() gemmaReference {
	return gemmaReference{Config: gemma3Config(), queryPreAttnScalar: float64(gemma3Spec.HeadDim), slidingWindowPattern: 6,
		ropeLocalBaseFreq: 10000}
}

// naiveGemmaForward is an independent float64 forward pass of a Gemma 3
// text model over HF weights (norm gains w, applied as 1+w), written from
// transformers' models/gemma3/modeling_gemma3.py (v4.50–4.53):
// Gemma3TextScaledWordEmbedding (× hidden_size**0.5), Gemma3RMSNorm
// (x·rsqrt(mean(x²)+eps)·(1+w)), Gemma3DecoderLayer (input_layernorm,
// attention, post_attention_layernorm, residual; pre_feedforward_layernorm,
// MLP, post_feedforward_layernorm, residual), Gemma3Attention (q_norm and
// k_norm per head before RoPE; scaling query_pre_attn_scalar**-0.5;
// is_sliding = bool((layer_idx + 1) % sliding_window_pattern), sliding
// layers masking keys sliding_window or more positions back and rotating
// with rope_local_base_freq, the others with rope_theta), Gemma3MLP
// (down(gelu_pytorch_tanh(gate(x)) · up(x))), and the tied lm_head. With
// gemma2, transformers' models/gemma2/modeling_gemma2.py (v4.44–4.53)
// instead: no q_norm/k_norm; is_sliding = not bool(layer_idx % 2); one
// rotary embedding (rope_theta) for every layer; in eager_attention_forward
// the scaled scores become tanh(s / attn_logit_softcapping) ·
// attn_logit_softcapping before the mask; and Gemma2ForCausalLM's logits
// tanh(l / final_logit_softcapping) · final_logit_softcapping.
func naiveGemmaForward(c gemmaReference, w map[string][]float64, tokens []int) [][]float64 {
	d, hd := c.Dim, c.HeadDim
	linear := func(x []float64, name string, out int) []float64 {
		wt := w[name]
		y := make([]float64, out)
		for o := range out {
			for i := range x {
				y[o] += wt[o*len(x)+i] * x[i]
			}
		}
		return y
	}
	norm := func(x []float64, name string) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+float64(c.NormEps))
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * (1 + w[name][i])
		}
		return y
	}
	rope := func(v []float64, pos int, base float64) {
		half := hd / 2
		for j := range half {
			theta := float64(pos) / math.Pow(base, float64(2*j)/float64(hd))
			a, b := v[j], v[j+half]
			v[j] = a*math.Cos(theta) - b*math.Sin(theta)
			v[j+half] = a*math.Sin(theta) + b*math.Cos(theta)
		}
	}
	gelu := func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) }
	n := len(tokens)
	x := make([][]float64, n)
	emb := w["model.embed_tokens.weight"]
	for t, tok := range tokens {
		x[t] = make([]float64, d)
		for i := range d {
			x[t][i] = emb[tok*d+i] * math.Sqrt(float64(d))
		}
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		sliding := (l+1)%c.slidingWindowPattern != 0
		base := c.RopeTheta
		if sliding && !c.gemma2 {
			base = c.ropeLocalBaseFreq
		}
		if c.gemma2 {
			sliding = l%2 == 0
		}
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for t := range n {
			h := norm(x[t], p+"input_layernorm.weight")
			qs[t] = linear(h, p+"self_attn.q_proj.weight", c.Heads*hd)
			ks[t] = linear(h, p+"self_attn.k_proj.weight", c.KVHeads*hd)
			vs[t] = linear(h, p+"self_attn.v_proj.weight", c.KVHeads*hd)
			for hh := range c.Heads {
				if !c.gemma2 {
					copy(qs[t][hh*hd:(hh+1)*hd], norm(qs[t][hh*hd:(hh+1)*hd], p+"self_attn.q_norm.weight"))
				}
				rope(qs[t][hh*hd:(hh+1)*hd], t, base)
			}
			for hh := range c.KVHeads {
				if !c.gemma2 {
					copy(ks[t][hh*hd:(hh+1)*hd], norm(ks[t][hh*hd:(hh+1)*hd], p+"self_attn.k_norm.weight"))
				}
				rope(ks[t][hh*hd:(hh+1)*hd], t, base)
			}
		}
		for t := range n {
			att := make([]float64, c.Heads*hd)
			for hh := range c.Heads {
				g := hh / (c.Heads / c.KVHeads)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					if sliding && t-s >= c.SlidingWindow {
						sc[s] = math.Inf(-1)
						continue
					}
					for j := range hd {
						sc[s] += qs[t][hh*hd+j] * ks[s][g*hd+j]
					}
					sc[s] *= math.Pow(c.queryPreAttnScalar, -0.5)
					if cp := c.attnLogitSoftcapping; cp != 0 {
						sc[s] = math.Tanh(sc[s]/cp) * cp
					}
					mx = math.Max(mx, sc[s])
				}
				var sum float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
				}
				for s := range sc {
					for j := range hd {
						att[hh*hd+j] += sc[s] / sum * vs[s][g*hd+j]
					}
				}
			}
			o := norm(linear(att, p+"self_attn.o_proj.weight", d), p+"post_attention_layernorm.weight")
			for i := range x[t] {
				x[t][i] += o[i]
			}
			h := norm(x[t], p+"pre_feedforward_layernorm.weight")
			gate := linear(h, p+"mlp.gate_proj.weight", c.FFN)
			up := linear(h, p+"mlp.up_proj.weight", c.FFN)
			for i := range gate {
				gate[i] = gelu(gate[i]) * up[i]
			}
			dn := norm(linear(gate, p+"mlp.down_proj.weight", d), p+"post_feedforward_layernorm.weight")
			for i := range x[t] {
				x[t][i] += dn[i]
			}
		}
	}
	out := make([][]float64, n)
	for t := range n {
		out[t] = linear(norm(x[t], "model.norm.weight"), "model.embed_tokens.weight", c.Vocab)
		if cp := c.finalLogitSoftcapping; cp != 0 {
			for v := range out[t] {
				out[t][v] = math.Tanh(out[t][v]/cp) * cp
			}
		}
	}
	return out
}

// naiveGemmaGreedy decodes n tokens after prompt with naiveGemmaForward.
func naiveGemmaGreedy(c gemmaReference, w map[string][]float64, prompt []int32, n int) []int32 {
	var seq []int
	for _, v := range prompt {
		seq = append(seq, int(v))
	}
	var out []int32
	for range n {
		rows := naiveGemmaForward(c, w, seq)
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

// A random Gemma 3 loads from GGUF (norms stored as 1+w) and from an HF
// checkpoint (norms stored as w) with the same config, and both give the
// logits of naiveGemmaForward within 1e-5 of the largest logit, on both
// CPU backends; the two files' logits are the same bits; greedy decoding
// (past the window of 5 and past a global layer's reach of it) gives the
// reference's tokens.
func TestGemma3MatchesReference(t *testing.T) {
	ck := writeGemma3(t)
	tokens := []int32{3, 17, 5, 63, 0, 22, 8, 41, 9, 30, 2, 12}
	ints := make([]int, len(tokens))
	for i, v := range tokens {
		ints[i] = int(v)
	}
	ref := gemma3Reference()
	want := naiveGemmaForward(ref, ck.Weights, ints)
	prompt, n := []int32{7, 30, 2}, 24
	checkMatchesReference(t, ck, gemma3Config(), tokens, want, prompt, naiveGemmaGreedy(ref, ck.Weights, prompt, n))
}

// Each of Gemma's departures from Llama moves the logits: without it (the
// same weights, one Config field changed) the logits move by more than
// 1e-3 of the largest, a thousand times the reference test's tolerance. This guards the reference test against a feature that the
// random model happens not to exercise.
func TestGemma3FeaturesMatter(t *testing.T) {
	ck := writeGemma3(t)
	m, err := Open(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
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
		toks := []int32{3, 17, 5, 40, 9, 1, 33, 12, 6, 50}
		out := make([]float32, len(toks)*md.Config.Vocab)
		if err := s.Forward(Chain(toks, true), out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	base := run(m.Model)
	for name, change := range map[string]func(c *Config){
		"no embedding scale":           func(c *Config) { c.EmbedScale = 0 },
		"1/√head_dim":                  func(c *Config) { c.AttnScale = 0.3 },
		"every layer sliding":          func(c *Config) { c.SlidingPattern = 0 },
		"no window":                    func(c *Config) { c.SlidingWindow = 0 },
		"one RoPE base":                func(c *Config) { c.RopeLocalTheta = 0 },
		"SwiGLU":                       func(c *Config) { c.GeGLU = false },
		"the global layer at base 1e4": func(c *Config) { c.RopeTheta = 10000 },
	} {
		md := *m.Model
		change(&md.Config)
		if e := maxRel(run(&md), base); e < 1e-3 {
			t.Errorf("%s: the logits moved by only %g", name, e)
		}
	}
}

// The two Gemma 3 files name their norms as their converters do; an HF
// checkpoint missing post_feedforward_layernorm fails to load naming it,
// and a config.json of the image-text model_type without a text_config, or with a soft-cap, or
// with layer_types not of the pattern, is refused by name.
func TestGemma3Refusals(t *testing.T) {
	ck := writeGemma3(t)
	cfgPath := filepath.Join(ck.HF, "config.json")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"model_type": "gemma3_text"`, `"model_type": "gemma3"`, `model_type "gemma3" (image-text) has no text_config`},
		{`"attn_logit_softcapping": null`, `"attn_logit_softcapping": 50`, "attn_logit_softcapping 50 is not supported"},
		{`"hidden_activation": "gelu_pytorch_tanh"`, `"hidden_activation": "silu"`, `hidden_activation "silu" is not supported`},
		{`"sliding_window_pattern": 6`, `"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]`,
			`layer_types[3] is "sliding_attention"`},
	} {
		s := string(orig)
		if !strings.Contains(s, tc.from) {
			t.Fatalf("config.json has no %s", tc.from)
		}
		if err := os.WriteFile(cfgPath, []byte(strings.Replace(s, tc.from, tc.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ck.HF)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want an error with %q", tc.to, err, tc.want)
		}
	}
	if err := os.WriteFile(cfgPath, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := formats.OpenSafetensorsDir(ck.HF)
	if err != nil {
		t.Fatal(err)
	}
	var kept []formats.Tensor
	for name, tn := range st.Tensors {
		if name != "model.layers.2.post_feedforward_layernorm.weight" {
			c := *tn
			c.Data = append([]byte(nil), tn.Data...)
			kept = append(kept, c)
		}
	}
	st.Close()
	writeST(t, filepath.Join(ck.HF, "model.safetensors"), kept)
	if _, err := Open(ck.HF); err == nil || !strings.Contains(err.Error(), `"model.layers.2.post_feedforward_layernorm.weight" is missing`) {
		t.Errorf("Open without a post-FFN norm: %v", err)
	}
}

// On the fused layers' path (a GPU backend's graph, composed on the CPU)
// a Gemma 3 layer gives the unfused graph's bits over prefill, decode, a
// tree and a kept branch; Metal's fake device gives the CPU reference's
// bits; Metal's and CUDA's emulated kernels give its logits within 1e-4.
func TestGemma3FusedAndGPUGraphs(t *testing.T) {
	ck := writeGemma3(t)
	checkGPUPasses(t, ck.GGUF, fusedEqualsUnfusedOnCPU(t, ck.GGUF))
}

// fusedEqualsUnfusedOnCPU checks that model's passes (passesOf) have the
// same bits fused and unfused on both CPU backends, and returns the CPU
// reference's unfused passes.
func fusedEqualsUnfusedOnCPU(t *testing.T, model string) [][]float32 {
	t.Helper()
	want, _ := passesOf(t, model, cpu.NewReference(), false)
	for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
		ref, _ := passesOf(t, model, be, false)
		got, _ := passesOf(t, model, be, true)
		for i := range ref {
			if !bitsEqual(got[i], ref[i]) {
				t.Errorf("%s: pass %d's %s differ fused", be.Name(), i/2, [2]string{"logits", "hidden states"}[i%2])
			}
		}
	}
	return want
}

// A joint pass over sequences of every shape (the server's batching) gives
// each Gemma 3 sequence the bits of its own forward pass.
func TestGemma3JointForwardEqualsAlone(t *testing.T) {
	spec := gemma3Spec
	spec.Vocab = 512 // jointCases' token ids
	ck, err := llamatest.Write(t.TempDir(), spec, nil, 43)
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
		checkJointOf(t, ck.GGUF, be, graph.F32)
	}
}

// gemma2Spec is a tiny Gemma 2: four layers (0 and 2 sliding with a window
// of 5, 1 and 3 global), soft-caps low enough to bend most attention
// scores (0.8) and the larger logits (3), GQA, head_dim 16 where Dim/Heads
// is 12.
var gemma2Spec = llamatest.Spec{Arch: "gemma2", Vocab: 64, Dim: 48, FFN: 80, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 16,
	NormEps: 1e-6, RopeTheta: 10000, Context: 64, Tied: true, SlidingWindow: 5, AttnSoftCap: 0.8, FinalSoftCap: 3}

// gemma2Config is the Config both files of gemma2Spec must load as.
func gemma2Config() Config {
	s := gemma2Spec
	return Config{Arch: "gemma2", Vocab: s.Vocab, Dim: s.Dim, FFN: s.FFN, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, NormEps: s.NormEps, RopeTheta: s.RopeTheta, RopeDims: s.HeadDim, RopeNeoX: true,
		Context: s.Context, TiedOutput: true, SlidingWindow: s.SlidingWindow, SlidingPattern: 2,
		EmbedScale: float32(math.Sqrt(float64(s.Dim))), AttnScale: 1 / math.Sqrt(float64(s.HeadDim)), PostNorms: true, GeGLU: true,
		AttnSoftCap: float32(s.AttnSoftCap), FinalSoftCap: float32(s.FinalSoftCap)}
}

// A random Gemma 2 loads from GGUF and from HF with the same config, and
// both give the logits of naiveGemmaForward (modeling_gemma2.py's
// soft-caps, alternating windows) within 1e-5 of the largest on both CPU
// backends, the same bits from both files, and the reference's greedy
// tokens; without either soft-cap the logits move by more than 1e-3.
func TestGemma2MatchesReference(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), gemma2Spec, nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int32{3, 17, 5, 63, 0, 22, 8, 41, 9, 30, 2, 12}
	ints := make([]int, len(tokens))
	for i, v := range tokens {
		ints[i] = int(v)
	}
	ref := gemmaReference{Config: gemma2Config(), gemma2: true, queryPreAttnScalar: float64(gemma2Spec.HeadDim),
		slidingWindowPattern: 2, attnLogitSoftcapping: gemma2Spec.AttnSoftCap, finalLogitSoftcapping: gemma2Spec.FinalSoftCap}
	want := naiveGemmaForward(ref, ck.Weights, ints)
	prompt, n := []int32{7, 30, 2}, 24
	checkMatchesReference(t, ck, gemma2Config(), tokens, want, prompt, naiveGemmaGreedy(ref, ck.Weights, prompt, n))

	m, err := Open(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	logits := func(md *Model) []float32 {
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
		out := make([]float32, len(tokens)*md.Config.Vocab)
		if err := s.Forward(Chain(tokens, true), out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	base := logits(m.Model)
	for name, change := range map[string]func(c *Config){
		"no attention soft-cap": func(c *Config) { c.AttnSoftCap = 0 },
		"no final soft-cap":     func(c *Config) { c.FinalSoftCap = 0 },
		"every layer sliding":   func(c *Config) { c.SlidingPattern = 0 },
	} {
		md := *m.Model
		change(&md.Config)
		if e := maxRel(logits(&md), base); e < 1e-3 {
			t.Errorf("%s: the logits moved by only %g", name, e)
		}
	}
}

// On the fused layers' path a Gemma 2 layer (fused Q·K·V with RoPE, gate·up
// with GeGLU, O and down unfused before their post-norms) gives the
// unfused graph's bits; Metal's fake device gives the CPU reference's
// bits; Metal's and CUDA's emulated kernels give its logits within 1e-4.
func TestGemma2FusedAndGPUGraphs(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), gemma2Spec, nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	checkGPUPasses(t, ck.GGUF, fusedEqualsUnfusedOnCPU(t, ck.GGUF))
}

// A Gemma 3 GGUF without attention.sliding_window (llama.cpp's converter
// leaves it out for sliding_window_pattern 1) loads with no window in any
// layer; one with final_logit_softcapping caps the logits.
func TestGemma3GGUFOptionalKeys(t *testing.T) {
	ck := writeGemma3(t)
	rewrite := func(edit func([]formats.KV) []formats.KV) Config {
		g, err := formats.OpenGGUF(ck.GGUF)
		if err != nil {
			t.Fatal(err)
		}
		var ts []formats.Tensor
		for _, tn := range g.Tensors {
			tn.Data = append([]byte(nil), tn.Data...)
			ts = append(ts, tn)
		}
		kvs := edit(g.KVs())
		g.Close()
		var buf bytes.Buffer
		if err := formats.WriteGGUF(&buf, kvs, ts, 32); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "edited.gguf")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return m.Model.Config
	}
	c := rewrite(func(kvs []formats.KV) []formats.KV {
		return slices.DeleteFunc(kvs, func(kv formats.KV) bool { return kv.Key == "gemma3.attention.sliding_window" })
	})
	for i := range c.Layers {
		if c.Window(i) != 0 || c.localRoPE(i) {
			t.Errorf("without a window, layer %d has window %d (local RoPE %v)", i, c.Window(i), c.localRoPE(i))
		}
	}
	c = rewrite(func(kvs []formats.KV) []formats.KV {
		return append(kvs, formats.KV{Key: "gemma3.final_logit_softcapping", Value: float32(5)})
	})
	if c.FinalSoftCap != 5 || c.AttnSoftCap != 0 {
		t.Errorf("final_logit_softcapping 5: caps %g (final) %g (attention)", c.FinalSoftCap, c.AttnSoftCap)
	}
}

// Gemma 3's rope_scaling (linear ×8 in the 4B and larger models) applies to
// the global layers only: the sliding layers rotate with the unscaled
// local base (checked from config.json; a GGUF's rope.scaling.type linear
// fills the same RopeScale in modelFromGGUF).
func TestGemma3RopeScalingGlobalOnly(t *testing.T) {
	ck := writeGemma3(t)
	cfgPath := filepath.Join(ck.HF, "config.json")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(orig), `"rope_scaling": null`, `"rope_scaling": {"factor": 8.0, "rope_type": "linear"}`, 1)
	if err := os.WriteFile(cfgPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(ck.HF)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Model.Config
	m.Close()
	global, local := c.InvFreq(), c.LocalInvFreq()
	for j := range global {
		g := 1 / math.Pow(c.RopeTheta, float64(2*j)/float64(c.RopeDims)) / 8
		l := 1 / math.Pow(10000, float64(2*j)/float64(c.RopeDims))
		if global[j] != float32(g) || local[j] != float32(l) {
			t.Fatalf("inverse frequency %d: global %g local %g, want %g (1e6, ÷8) and %g (1e4, unscaled)", j, global[j], local[j], g, l)
		}
	}
}

// decodeStepDispatches binds the model at path to be (a graph.Counter),
// prefills a short prompt and returns the kernels (launches, dispatches)
// of one decode step after it, fused layers or not.
func decodeStepDispatches(t *testing.T, path string, be graph.Backend, fused bool) int {
	t.Helper()
	r, c := bindFusedForTest(t, path, be, fused)
	s, err := r.NewState(32)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := []int32{1, 9, 33, 7, 2}
	if err := s.Forward(Chain(prompt, false), make([]float32, c.Vocab), nil); err != nil {
		t.Fatal(err)
	}
	s.Advance(len(prompt))
	counter := be.(graph.Counter)
	before := counter.Counts()
	if err := s.Forward(Chain([]int32{17}, false), make([]float32, c.Vocab), nil); err != nil {
		t.Fatal(err)
	}
	return counter.Counts().Sub(before).Dispatches
}

// closingBackend is a backend the test closes.
type closingBackend interface {
	graph.Backend
	Close() error
}

// TestGemmaKernelsPerDecodeStep: on a GPU backend a Gemma layer's MLP
// runs its norm, gate and up products and GeGLU as one fused product
// (LinearOp with GLUGELU): a decode step is 3 kernels a layer fewer than
// with those four, on CUDA (launches, the fake driver) and on Metal
// (dispatches, the fake device). Against the unfused graph a Gemma 2
// layer saves those 3 and 6 more (Q·K·V with RoPE and the cache write:
// eight ops, two kernels); a Gemma 3 layer, whose q, k and v stay apart
// around the head norms, the 3 only.
func TestGemmaKernelsPerDecodeStep(t *testing.T) {
	ck2, err := llamatest.Write(t.TempDir(), gemma2Spec, nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	ck3 := writeGemma3(t)
	for _, tc := range []struct {
		name  string
		path  string
		layer int // kernels a layer fewer fused than unfused
	}{{"gemma2", ck2.GGUF, 9}, {"gemma3", ck3.GGUF, 3}} {
		for _, gpu := range []struct {
			name, unit string
			be         func() closingBackend
		}{
			{"cuda-fake", "launches", func() closingBackend { return cudafake.NewBackend(nil) }},
			{"metal-fake", "dispatches", func() closingBackend {
				return metal.NewFake(metal.DefaultPolicy(metal.DeviceInfo{}), metal.Fake{Reference: cpu.NewReference()})
			}},
		} {
			t.Run(tc.name+"/"+gpu.name, func(t *testing.T) {
				be := gpu.be()
				defer be.Close()
				fused, unfused := decodeStepDispatches(t, tc.path, be, true), decodeStepDispatches(t, tc.path, be, false)
				layers := gemma2Spec.Layers
				if tc.name == "gemma3" {
					layers = gemma3Spec.Layers
				}
				t.Logf("%s per decode step: %d (unfused: %d), %d layers", gpu.unit, fused, unfused, layers)
				if got := unfused - fused; got != tc.layer*layers {
					t.Errorf("fused layers take %d %s per decode step, unfused %d: %d a layer fewer, want %d", fused, gpu.unit, unfused,
						got/layers, tc.layer)
				}
			})
		}
	}
}
