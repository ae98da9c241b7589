package llama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// naiveForward is an independent float64 implementation of the HF Llama /
// Qwen2 / Qwen3 forward pass (NeoX RoPE, GQA, optional q/k/v biases,
// optional per-head q/k norms), written straight from the PyTorch modeling
// code, for checking the graph path.
func naiveForward(c Config, w map[string][]float64, tokens []int) [][]float64 {
	d, hd := c.Dim, c.HeadDim
	linear := func(x []float64, name string, out int) []float64 {
		wt := w[name]
		in := len(x)
		y := make([]float64, out)
		for o := range out {
			for i := range in {
				y[o] += wt[o*in+i] * x[i]
			}
		}
		if b, ok := w[name[:len(name)-len("weight")]+"bias"]; ok {
			for o := range y {
				y[o] += b[o]
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
			y[i] = v * r * w[name][i]
		}
		return y
	}
	rope := func(v []float64, pos int) {
		half := hd / 2
		for j := range half {
			theta := float64(pos) / math.Pow(c.RopeTheta, float64(2*j)/float64(hd))
			a, b := v[j], v[j+half]
			v[j] = a*math.Cos(theta) - b*math.Sin(theta)
			v[j+half] = a*math.Sin(theta) + b*math.Cos(theta)
		}
	}
	n := len(tokens)
	x := make([][]float64, n)
	for t, tok := range tokens {
		x[t] = append([]float64(nil), w["model.embed_tokens.weight"][tok*d:(tok+1)*d]...)
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ks, vs := make([][]float64, n), make([][]float64, n)
		qs := make([][]float64, n)
		for t := range n {
			h := norm(x[t], p+"input_layernorm.weight")
			qs[t] = linear(h, p+"self_attn.q_proj.weight", c.Heads*hd)
			ks[t] = linear(h, p+"self_attn.k_proj.weight", c.KVHeads*hd)
			vs[t] = linear(h, p+"self_attn.v_proj.weight", c.KVHeads*hd)
			// Qwen3 (transformers' models/qwen3/modeling_qwen3.py,
			// Qwen3Attention.forward): q_norm and k_norm, RMSNorms of
			// head_dim with the model's eps, over each head of the
			// projections, before apply_rotary_pos_emb.
			if _, ok := w[p+"self_attn.q_norm.weight"]; ok {
				for hh := range c.Heads {
					copy(qs[t][hh*hd:(hh+1)*hd], norm(qs[t][hh*hd:(hh+1)*hd], p+"self_attn.q_norm.weight"))
				}
				for hh := range c.KVHeads {
					copy(ks[t][hh*hd:(hh+1)*hd], norm(ks[t][hh*hd:(hh+1)*hd], p+"self_attn.k_norm.weight"))
				}
			}
			for hh := range c.Heads {
				rope(qs[t][hh*hd:(hh+1)*hd], t)
			}
			for hh := range c.KVHeads {
				rope(ks[t][hh*hd:(hh+1)*hd], t)
			}
		}
		for t := range n {
			att := make([]float64, c.Heads*hd)
			for hh := range c.Heads {
				g := hh / (c.Heads / c.KVHeads)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					// MistralAttention (transformers' models/mistral/
					// modeling_mistral.py, v4.46): the sliding-window causal
					// mask hides keys sliding_window or more positions back.
					if c.SlidingWindow > 0 && t-s >= c.SlidingWindow {
						sc[s] = math.Inf(-1)
						continue
					}
					for j := range hd {
						sc[s] += qs[t][hh*hd+j] * ks[s][g*hd+j]
					}
					sc[s] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[s])
				}
				var sum float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
				}
				for s := range sc {
					if sc[s] == 0 {
						continue
					}
					for j := range hd {
						att[hh*hd+j] += sc[s] / sum * vs[s][g*hd+j]
					}
				}
			}
			o := linear(att, p+"self_attn.o_proj.weight", d)
			for i := range x[t] {
				x[t][i] += o[i]
			}
			h := norm(x[t], p+"post_attention_layernorm.weight")
			gate := linear(h, p+"mlp.gate_proj.weight", c.FFN)
			up := linear(h, p+"mlp.up_proj.weight", c.FFN)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			dn := linear(gate, p+"mlp.down_proj.weight", d)
			for i := range x[t] {
				x[t][i] += dn[i]
			}
		}
	}
	out := make([][]float64, n)
	head := "lm_head.weight"
	if _, ok := w[head]; !ok {
		head = "model.embed_tokens.weight"
	}
	for t := range n {
		out[t] = linear(norm(x[t], "model.norm.weight"), head, c.Vocab)
	}
	return out
}

// TestMistralSlidingWindowMatchesNaive writes a random Mistral HF
// checkpoint with a sliding window of 3 and checks prefill logits against
// the naive forward pass, then greedy decoding one token at a time well past
// the window against the naive pass's greedy tokens.
func TestMistralSlidingWindowMatchesNaive(t *testing.T) {
	c := Config{Vocab: 40, Dim: 32, FFN: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, NormEps: 1e-6, RopeTheta: 1e4, SlidingWindow: 3}
	dir, w := writeRandomHF(t, c, "mistral", map[string]any{"sliding_window": c.SlidingWindow})
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Model.Config.SlidingWindow != 3 {
		t.Fatalf("sliding window %d, want 3", ck.Model.Config.SlidingWindow)
	}
	run, err := Bind(ck.Model, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	st, _ := run.NewState(32)
	defer st.Close()
	tokens := []int32{3, 17, 5, 39, 0, 22, 8}
	got := make([]float32, len(tokens)*c.Vocab)
	if err := st.Forward(Chain(tokens, true), got, nil); err != nil {
		t.Fatal(err)
	}
	st.Advance(len(tokens))
	ints := make([]int, len(tokens))
	for i, v := range tokens {
		ints[i] = int(v)
	}
	want := naiveForward(c, w, ints)
	var worst, scale float64
	for tt := range want {
		for v := range want[tt] {
			scale = math.Max(scale, math.Abs(want[tt][v]))
			worst = math.Max(worst, math.Abs(float64(got[tt*c.Vocab+v])-want[tt][v]))
		}
	}
	if worst/scale > 1e-5 {
		t.Errorf("logits differ from the naive forward by %g (relative to %g)", worst/scale, scale)
	}
	// The window must matter: the same model without it differs.
	full := c
	full.SlidingWindow = 0
	if nw := naiveForward(full, w, ints); math.Abs(nw[6][0]-want[6][0]) < 1e-6 {
		t.Fatalf("the window changes nothing at position 6")
	}
	argmax := func(x []float64) int {
		best := 0
		for i, v := range x {
			if v > x[best] {
				best = i
			}
		}
		return best
	}
	last := make([]float32, c.Vocab)
	copy(last, got[(len(tokens)-1)*c.Vocab:])
	var gotToks, wantToks []int
	for range 12 {
		next := 0
		for i, v := range last {
			if v > last[next] {
				next = i
			}
		}
		gotToks = append(gotToks, next)
		if err := st.Forward(Chain([]int32{int32(next)}, true), last, nil); err != nil {
			t.Fatal(err)
		}
		st.Advance(1)
		ref := naiveForward(c, w, ints)
		wantToks = append(wantToks, argmax(ref[len(ints)-1]))
		ints = append(ints, next)
	}
	if fmt.Sprint(gotToks) != fmt.Sprint(wantToks) {
		t.Errorf("greedy tokens past the window %v, naive %v", gotToks, wantToks)
	}
	// A verification tree deeper than the window after the prompt: two
	// branches [5 9 2 30] and [5 11 7], in DFS order. Each node's logits
	// are the naive pass's over the prompt and its path.
	s2, _ := run.NewState(32)
	defer s2.Close()
	if err := s2.Forward(Chain(tokens, false), last, nil); err != nil {
		t.Fatal(err)
	}
	s2.Advance(len(tokens))
	tree := Batch{Tokens: []int32{5, 9, 2, 30, 11, 7}, Depth: []int32{0, 1, 2, 3, 1, 2}, End: []int32{5, 3, 3, 3, 5, 5},
		Rows: []int32{0, 1, 2, 3, 4, 5}}
	paths := [][]int{{5}, {5, 9}, {5, 9, 2}, {5, 9, 2, 30}, {5, 11}, {5, 11, 7}}
	tl := make([]float32, len(paths)*c.Vocab)
	if err := s2.Forward(tree, tl, nil); err != nil {
		t.Fatal(err)
	}
	for i, path := range paths {
		seq := append(append([]int(nil), ints[:len(tokens)]...), path...)
		ref := naiveForward(c, w, seq)[len(seq)-1]
		var worst, scale float64
		for v := range ref {
			scale = math.Max(scale, math.Abs(ref[v]))
			worst = math.Max(worst, math.Abs(float64(tl[i*c.Vocab+v])-ref[v]))
		}
		if worst/scale > 1e-5 {
			t.Errorf("tree node %d (path %v): logits differ from the naive forward by %g", i, path, worst/scale)
		}
	}
}

// writeRandomHF writes a random Llama-shaped HF checkpoint of model_type
// modelType (untied, no biases) with extra config.json keys, and returns
// its directory and weights.
func writeRandomHF(t *testing.T, c Config, modelType string, extra map[string]any) (string, map[string][]float64) {
	r := rand.New(rand.NewPCG(5, 6))
	w := map[string][]float64{}
	var ts []formats.Tensor
	add := func(name string, scale float64, shape ...int) {
		v := make([]float32, graph.Shape(shape).Numel())
		f := make([]float64, len(v))
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
			if len(shape) == 1 {
				v[i] += 1
			}
			f[i] = float64(v[i])
		}
		w[name] = f
		ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: append([]byte(nil), graph.AsBytes(v)...)})
	}
	add("model.embed_tokens.weight", 1, c.Vocab, c.Dim)
	add("model.norm.weight", 0.1, c.Dim)
	add("lm_head.weight", 0.3, c.Vocab, c.Dim)
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", 0.1, c.Dim)
		add(p+"post_attention_layernorm.weight", 0.1, c.Dim)
		add(p+"self_attn.q_proj.weight", 0.5, c.Heads*c.HeadDim, c.Dim)
		add(p+"self_attn.k_proj.weight", 0.5, c.KVHeads*c.HeadDim, c.Dim)
		add(p+"self_attn.v_proj.weight", 0.3, c.KVHeads*c.HeadDim, c.Dim)
		add(p+"self_attn.o_proj.weight", 0.3, c.Dim, c.Heads*c.HeadDim)
		add(p+"mlp.gate_proj.weight", 0.3, c.FFN, c.Dim)
		add(p+"mlp.up_proj.weight", 0.3, c.FFN, c.Dim)
		add(p+"mlp.down_proj.weight", 0.3, c.Dim, c.FFN)
	}
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"model_type": modelType, "hidden_size": c.Dim,
		"intermediate_size": c.FFN, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta,
		"vocab_size": c.Vocab, "tie_word_embeddings": false, "max_position_embeddings": 64}
	for k, v := range extra {
		cfg[k] = v
	}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, w
}

// TestQwen2TiedMatchesNaive writes a random Qwen2-style HF checkpoint (q/k/v
// biases, tied embeddings, GQA, rope base 1e6) and checks the graph's logits
// against the naive forward pass.
func TestQwen2TiedMatchesNaive(t *testing.T) {
	for _, tc := range []struct {
		modelType string
		tied      bool
	}{{"qwen2", true}, {"llama", false}, {"mistral", false}} {
		t.Run(tc.modelType, func(t *testing.T) {
			c := Config{Vocab: 40, Dim: 32, FFN: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, NormEps: 1e-6, RopeTheta: 1e6}
			r := rand.New(rand.NewPCG(5, 6))
			w := map[string][]float64{}
			var ts []formats.Tensor
			add := func(name string, scale float64, shape ...int) {
				v := make([]float32, graph.Shape(shape).Numel())
				f := make([]float64, len(v))
				for i := range v {
					v[i] = float32(r.NormFloat64() * scale)
					if len(shape) == 1 && name[len(name)-4:] != "bias" {
						v[i] += 1
					}
					f[i] = float64(v[i])
				}
				w[name] = f
				ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: append([]byte(nil), graph.AsBytes(v)...)})
			}
			add("model.embed_tokens.weight", 1, c.Vocab, c.Dim)
			add("model.norm.weight", 0.1, c.Dim)
			if !tc.tied {
				add("lm_head.weight", 0.3, c.Vocab, c.Dim)
			}
			for l := range c.Layers {
				p := fmt.Sprintf("model.layers.%d.", l)
				add(p+"input_layernorm.weight", 0.1, c.Dim)
				add(p+"post_attention_layernorm.weight", 0.1, c.Dim)
				add(p+"self_attn.q_proj.weight", 0.3, c.Heads*c.HeadDim, c.Dim)
				add(p+"self_attn.k_proj.weight", 0.3, c.KVHeads*c.HeadDim, c.Dim)
				add(p+"self_attn.v_proj.weight", 0.3, c.KVHeads*c.HeadDim, c.Dim)
				if tc.modelType == "qwen2" {
					add(p+"self_attn.q_proj.bias", 0.5, c.Heads*c.HeadDim)
					add(p+"self_attn.k_proj.bias", 0.5, c.KVHeads*c.HeadDim)
					add(p+"self_attn.v_proj.bias", 0.5, c.KVHeads*c.HeadDim)
				}
				add(p+"self_attn.o_proj.weight", 0.3, c.Dim, c.Heads*c.HeadDim)
				add(p+"mlp.gate_proj.weight", 0.3, c.FFN, c.Dim)
				add(p+"mlp.up_proj.weight", 0.3, c.FFN, c.Dim)
				add(p+"mlp.down_proj.weight", 0.3, c.Dim, c.FFN)
			}
			dir := t.TempDir()
			var buf bytes.Buffer
			if err := formats.WriteSafetensors(&buf, ts, nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644)
			cfg, _ := json.Marshal(map[string]any{"model_type": tc.modelType, "hidden_size": c.Dim,
				"intermediate_size": c.FFN, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
				"num_key_value_heads": c.KVHeads, "rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta,
				"vocab_size": c.Vocab, "tie_word_embeddings": tc.tied, "max_position_embeddings": 64})
			os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)

			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Model.Config.TiedOutput != tc.tied || ck.Model.Config.QKVBias != (tc.modelType == "qwen2") {
				t.Errorf("config %+v", ck.Model.Config)
			}
			run, err := Bind(ck.Model, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			s, _ := run.NewState(32)
			defer s.Close()
			tokens := []int32{3, 17, 5, 39, 0, 22, 8}
			got := make([]float32, len(tokens)*c.Vocab)
			if err := s.Forward(Chain(tokens, true), got, nil); err != nil {
				t.Fatal(err)
			}
			ints := make([]int, len(tokens))
			for i, v := range tokens {
				ints[i] = int(v)
			}
			want := naiveForward(c, w, ints)
			var worst, scale float64
			for tt := range want {
				for v := range want[tt] {
					scale = math.Max(scale, math.Abs(want[tt][v]))
					worst = math.Max(worst, math.Abs(float64(got[tt*c.Vocab+v])-want[tt][v]))
				}
			}
			if worst/scale > 1e-5 {
				t.Errorf("logits differ from the naive forward by %g (relative to %g)", worst/scale, scale)
			}
		})
	}
}

// TestSlidingWindowConfig: Mistral's window from GGUF metadata
// (mistral.attention.sliding_window) and from config.json (sliding_window,
// null meaning none); Qwen2's use_sliding_window, which we do not run, is
// refused.
func TestSlidingWindowConfig(t *testing.T) {
	kvs := func(arch string, window any) []formats.KV {
		a := arch + "."
		kv := []formats.KV{{Key: "general.architecture", Value: arch},
			{Key: a + "embedding_length", Value: uint32(8)}, {Key: a + "feed_forward_length", Value: uint32(16)},
			{Key: a + "block_count", Value: uint32(1)}, {Key: a + "attention.head_count", Value: uint32(2)},
			{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(1e-5)}}
		if window != nil {
			kv = append(kv, formats.KV{Key: a + "attention.sliding_window", Value: window})
		}
		return kv
	}
	var tensors []formats.Tensor
	for _, tn := range []struct {
		name  string
		shape []int
	}{{"token_embd.weight", []int{10, 8}}, {"output_norm.weight", []int{8}}, {"output.weight", []int{10, 8}},
		{"blk.0.attn_norm.weight", []int{8}}, {"blk.0.attn_q.weight", []int{8, 8}}, {"blk.0.attn_k.weight", []int{8, 8}},
		{"blk.0.attn_v.weight", []int{8, 8}}, {"blk.0.attn_output.weight", []int{8, 8}}, {"blk.0.ffn_norm.weight", []int{8}},
		{"blk.0.ffn_gate.weight", []int{16, 8}}, {"blk.0.ffn_up.weight", []int{16, 8}}, {"blk.0.ffn_down.weight", []int{8, 16}}} {
		tensors = append(tensors, formats.Tensor{Name: tn.name, DType: formats.F32, Shape: tn.shape,
			Data: make([]byte, 4*graph.Shape(tn.shape).Numel())})
	}
	for _, tc := range []struct {
		arch   string
		window any
		want   int
	}{{"mistral", uint32(4096), 4096}, {"mistral", nil, 0}, {"llama", uint32(4096), 0}} {
		var buf bytes.Buffer
		if err := formats.WriteGGUF(&buf, kvs(tc.arch, tc.window), tensors, 32); err != nil {
			t.Fatal(err)
		}
		g, err := formats.ParseGGUF("test.gguf", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		m, err := modelFromGGUF(g)
		if err != nil {
			t.Fatalf("%s: %v", tc.arch, err)
		}
		if m.Config.SlidingWindow != tc.want {
			t.Errorf("%s with %v: window %d, want %d", tc.arch, tc.window, m.Config.SlidingWindow, tc.want)
		}
	}
	for _, tc := range []struct {
		js      string
		want    int
		wantErr bool
	}{
		{`{"model_type":"mistral","sliding_window":4096}`, 4096, false},
		{`{"model_type":"mistral","sliding_window":null}`, 0, false},
		{`{"model_type":"qwen2","sliding_window":32768,"use_sliding_window":false}`, 0, false},
		{`{"model_type":"qwen2","sliding_window":32768,"use_sliding_window":true}`, 0, true},
	} {
		var h formats.HFConfig
		if err := json.Unmarshal([]byte(tc.js), &h); err != nil {
			t.Fatal(err)
		}
		h.VocabSize, h.HiddenSize, h.IntermediateSize, h.NumHiddenLayers = 10, 8, 16, 1
		h.NumAttentionHeads, h.NumKeyValueHeads, h.HeadDim, h.RMSNormEps, h.RopeTheta = 2, 2, 4, 1e-5, 1e4
		c, err := configFromHF(&h)
		if (err != nil) != tc.wantErr || err == nil && c.SlidingWindow != tc.want {
			t.Errorf("%s: window %d, error %v; want %d, error %v", tc.js, c.SlidingWindow, err, tc.want, tc.wantErr)
		}
	}
}
