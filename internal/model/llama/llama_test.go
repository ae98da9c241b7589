package llama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

const storiesGGUF = "../../../models/stories260K/stories260K.gguf"

// ggufToHF maps GGUF tensor names to HF names.
func ggufToHF(name string) string {
	var l int
	var rest string
	if n, _ := fmt.Sscanf(name, "blk.%d.%s", &l, &rest); n == 2 {
		for _, f := range []struct{ g, h string }{
			{"attn_norm.weight", "input_layernorm.weight"}, {"attn_q.weight", "self_attn.q_proj.weight"},
			{"attn_k.weight", "self_attn.k_proj.weight"}, {"attn_v.weight", "self_attn.v_proj.weight"},
			{"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
			{"ffn_gate.weight", "mlp.gate_proj.weight"}, {"ffn_up.weight", "mlp.up_proj.weight"},
			{"ffn_down.weight", "mlp.down_proj.weight"},
		} {
			if rest == f.g {
				return fmt.Sprintf("model.layers.%d.%s", l, f.h)
			}
		}
	}
	return map[string]string{"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
		"output.weight": "lm_head.weight"}[name]
}

// unpermute undoes llama.cpp's Q/K row permutation: GGUF row h*hd+2j+half
// is HF row h*hd+half*hd/2+j.
func unpermute(data []float32, rows, cols, heads int) []float32 {
	hd := rows / heads
	out := make([]float32, len(data))
	for h := range heads {
		for j := range hd / 2 {
			for half := range 2 {
				src := (h*hd + 2*j + half) * cols
				dst := (h*hd + half*hd/2 + j) * cols
				copy(out[dst:dst+cols], data[src:src+cols])
			}
		}
	}
	return out
}

func encode(v []float32, dt formats.DType) []byte {
	switch dt {
	case formats.F16:
		return graph.AsBytes(quant.F32sToF16(v))
	case formats.BF16:
		return graph.AsBytes(quant.F32sToBF16(v))
	}
	return append([]byte(nil), graph.AsBytes(v)...)
}

// convert writes the stories260K weights as a GGUF and as an HF checkpoint
// (shards > 1 splits the safetensors) in dtype dt.
func convert(t *testing.T, dt formats.DType, shards int) (ggufPath, hfDir string) {
	t.Helper()
	g, err := formats.OpenGGUF(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c, _ := modelFromGGUF(g)
	dir := t.TempDir()
	var gt, ht []formats.Tensor
	for _, tn := range g.Tensors {
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		v = append([]float32(nil), v...)
		gt = append(gt, formats.Tensor{Name: tn.Name, DType: dt, Shape: tn.Shape, Data: encode(v, dt)})
		switch {
		case strings.HasSuffix(tn.Name, "attn_q.weight"):
			v = unpermute(v, tn.Shape[0], tn.Shape[1], c.Config.Heads)
		case strings.HasSuffix(tn.Name, "attn_k.weight"):
			v = unpermute(v, tn.Shape[0], tn.Shape[1], c.Config.KVHeads)
		}
		ht = append(ht, formats.Tensor{Name: ggufToHF(tn.Name), DType: dt, Shape: tn.Shape, Data: encode(v, dt)})
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, g.KVs(), gt, 32); err != nil {
		t.Fatal(err)
	}
	ggufPath = filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(ggufPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	hfDir = filepath.Join(dir, "hf")
	os.Mkdir(hfDir, 0o755)
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": c.Config.Dim,
		"intermediate_size": c.Config.FFN, "num_hidden_layers": c.Config.Layers,
		"num_attention_heads": c.Config.Heads, "num_key_value_heads": c.Config.KVHeads,
		"rms_norm_eps": c.Config.NormEps, "rope_theta": c.Config.RopeTheta, "vocab_size": c.Config.Vocab,
		"max_position_embeddings": c.Config.Context, "torch_dtype": "float32", "hidden_act": "silu",
		"tie_word_embeddings": false,
	}
	cj, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(hfDir, "config.json"), cj, 0o644)
	if shards == 1 {
		writeST(t, filepath.Join(hfDir, "model.safetensors"), ht)
		return
	}
	index := map[string]any{"metadata": map[string]any{}}
	wm := map[string]string{}
	per := (len(ht) + shards - 1) / shards
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		part := ht[s*per : min((s+1)*per, len(ht))]
		for _, tn := range part {
			wm[tn.Name] = name
		}
		writeST(t, filepath.Join(hfDir, name), part)
	}
	index["weight_map"] = wm
	ij, _ := json.Marshal(index)
	os.WriteFile(filepath.Join(hfDir, "model.safetensors.index.json"), ij, 0o644)
	return
}

func writeST(t *testing.T, path string, ts []formats.Tensor) {
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// logitsOf runs a fixed token chain through the checkpoint at path and
// returns every row's logits.
func logitsOf(t *testing.T, path string, be graph.Backend) []float32 {
	t.Helper()
	return logitsOfTokens(t, path, be, []int32{1, 403, 407, 261, 378, 13, 300, 289})
}

func maxRel(a, b []float32) float64 {
	var worst, scale float64
	for i := range a {
		scale = max(scale, math.Abs(float64(b[i])))
	}
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i]-b[i]))/scale)
	}
	return worst
}

// The same weights give the same logits from GGUF (permuted Q/K, adjacent
// RoPE pairs) and from HF safetensors (NeoX pairs), in f32, f16 and bf16,
// single-file and sharded.
func TestGGUFAndSafetensorsAgree(t *testing.T) {
	be := cpu.New(1)
	orig := logitsOf(t, storiesGGUF, be)
	for _, tc := range []struct {
		dt     formats.DType
		shards int
		tol    float64 // against the original f32 logits
	}{{formats.F32, 1, 1e-5}, {formats.F32, 3, 1e-5}, {formats.F16, 1, 2e-2}, {formats.BF16, 2, 1e-1}} {
		gp, hd := convert(t, tc.dt, tc.shards)
		gl, hl := logitsOf(t, gp, be), logitsOf(t, hd, be)
		if e := maxRel(gl, hl); e > 1e-5 {
			t.Errorf("%v x%d: GGUF and safetensors logits differ by %g", tc.dt, tc.shards, e)
		}
		if e := maxRel(hl, orig); e > tc.tol {
			t.Errorf("%v x%d: logits differ from the f32 model by %g > %g", tc.dt, tc.shards, e, tc.tol)
		}
	}
}

// Prefill of a chain, token-by-token decoding, and a tree whose branches
// are the same chain all give the same logits.
func TestChainDecodeAndTreeAgree(t *testing.T) {
	ck, err := Open(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	v := ck.Model.Config.Vocab
	tokens := []int32{1, 403, 407, 261, 378}
	all := make([]float32, len(tokens)*v)
	s1, _ := r.NewState(32)
	defer s1.Close()
	if err := s1.Forward(Chain(tokens, true), all, nil); err != nil {
		t.Fatal(err)
	}
	s2, _ := r.NewState(32)
	defer s2.Close()
	one := make([]float32, v)
	for i, tok := range tokens {
		if err := s2.Forward(Chain([]int32{tok}, false), one, nil); err != nil {
			t.Fatal(err)
		}
		s2.Advance(1)
		if e := maxRel(one, all[i*v:(i+1)*v]); e > 1e-5 {
			t.Errorf("decode step %d differs from prefill by %g", i, e)
		}
	}
	// Tree: prefix [1,403], then two branches: [407,261] and [300].
	// DFS order: 1, 403, 407, 261, 300; ends: 4, 4, 3, 3, 4.
	s3, _ := r.NewState(32)
	defer s3.Close()
	tree := Batch{Tokens: []int32{1, 403, 407, 261, 300}, Depth: []int32{0, 1, 2, 3, 2}, End: []int32{4, 4, 3, 3, 4},
		Rows: []int32{0, 1, 2, 3, 4}}
	tl := make([]float32, 5*v)
	if err := s3.Forward(tree, tl, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if e := maxRel(tl[i*v:(i+1)*v], all[i*v:(i+1)*v]); e > 1e-5 {
			t.Errorf("tree node %d differs from the chain by %g", i, e)
		}
	}
	// Keep the branch [1,403,300] and continue: its logits must equal a
	// chain [1,403,300,...].
	if err := s3.Keep([]int32{0, 1, 4}); err != nil {
		t.Fatal(err)
	}
	if err := s3.Forward(Chain([]int32{13}, false), one, nil); err != nil {
		t.Fatal(err)
	}
	s4, _ := r.NewState(32)
	defer s4.Close()
	want := make([]float32, v)
	if err := s4.Forward(Chain([]int32{1, 403, 300, 13}, false), want, nil); err != nil {
		t.Fatal(err)
	}
	if e := maxRel(one, want); e > 1e-5 {
		t.Errorf("after compaction the next logits differ from the chain by %g", e)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.gguf")
	os.WriteFile(trunc, data[:len(data)/2], 0o644)
	notModel := filepath.Join(dir, "text.gguf")
	os.WriteFile(notModel, []byte("hello, this is not a model file at all"), 0o644)

	g, _ := formats.OpenGGUF(storiesGGUF)
	defer g.Close()
	write := func(name string, kv []formats.KV, ts []formats.Tensor) string {
		var buf bytes.Buffer
		if err := formats.WriteGGUF(&buf, kv, ts, 32); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, buf.Bytes(), 0o644)
		return p
	}
	kvs := g.KVs()
	arch := append([]formats.KV(nil), kvs...)
	for i := range arch {
		if arch[i].Key == "general.architecture" {
			arch[i].Value = "mamba"
		}
	}
	badShape := append([]formats.Tensor(nil), g.Tensors...)
	for i, tn := range badShape {
		if tn.Name == "blk.2.ffn_up.weight" {
			badShape[i].Shape = []int{tn.Shape[0] / 2, tn.Shape[1]}
			badShape[i].Data = tn.Data[:len(tn.Data)/2]
		}
	}
	missing := append([]formats.Tensor(nil), g.Tensors[:len(g.Tensors)-1]...)
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "absent.gguf"), "no such file"},
		{trunc, "gguf"},
		{notModel, "gguf"},
		{write("arch.gguf", arch, g.Tensors), `unsupported architecture "mamba"`},
		{write("shape.gguf", kvs, badShape), `blk.2.ffn_up.weight" has shape`},
		{write("missing.gguf", kvs, missing), "is missing"},
	} {
		_, err := Open(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want an error containing %q", filepath.Base(tc.path), err, tc.want)
		}
	}
}

// The KV cache's size is computed without overflow, and a cache larger
// than the backend can hold is refused before it is allocated.
func TestKVCacheSize(t *testing.T) {
	big := &Runner{Model: &Model{Config: Config{Layers: 1 << 31, KVHeads: 1 << 31, HeadDim: 1 << 31}}}
	if n, err := big.KVBytes(1 << 31); err == nil {
		t.Errorf("KVBytes of 2^127 bytes = %d, want an error", n)
	}
	r := &Runner{Model: &Model{Config: Config{Layers: 32, KVHeads: 8, HeadDim: 128, Context: 131072}}, KVCache: graph.F16}
	if n, err := r.KVBytes(131072); err != nil || n != 16<<30 {
		t.Errorf("Llama 3.1 8B at 128k in f16: %d bytes, %v; want 16 GiB", n, err)
	}
	r.Binding = &Binding{Backend: limitedBackend{cpu.New(1), 1 << 30}}
	if _, err := r.NewState(131072); err == nil || !strings.Contains(err.Error(), "16.0 GiB") {
		t.Errorf("NewState of 16 GiB on a 1 GiB backend: %v, want an error naming the size", err)
	}
}

type limitedBackend struct {
	graph.Backend
	limit int64
}

func (b limitedBackend) MemoryLimit() int64 { return b.limit }
