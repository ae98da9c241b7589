// Package llamatest writes random-weight checkpoints of the architectures
// package llama loads, for tests: the same weights as a GGUF file and as a
// Hugging Face checkpoint directory, each under the names the real
// converters write (spelled out here, not read from package llama's tags,
// so that a wrong tag fails to load). Besides tests, only the developer
// command `redrafter dev random-model` uses it (random models in real
// widths, for comparisons with llama.cpp); no engine path does.
package llamatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// Spec is the shape of a random model.
type Spec struct {
	Arch                    string // Write: "qwen3", "phi3", "gemma2", "gemma3"; WriteLlamaLikeGGUF: "llama", "mistral", "qwen2", "gemma2", "phi3"
	Vocab, Dim, FFN, Layers int
	Heads, KVHeads, HeadDim int // HeadDim need not be Dim/Heads
	NormEps                 float32
	RopeTheta               float64
	Context                 int
	Tied                    bool // no output projection: the embedding table is it
	RopeFreqs               bool // Llama 3's rope_freqs.weight (WriteLlamaLikeGGUF only)
	// RopeDims is the rotated dimensions of each head (0: HeadDim); phi3
	// only, written as Phi-4-mini's partial_rotary_factor.
	RopeDims int
	// SlidingWindow is a phi3's sliding_window (0: the context, which
	// never binds), or Gemma's (gemma2, gemma3).
	SlidingWindow int
	// Gemma 2's attn_logit_softcapping and final_logit_softcapping.
	AttnSoftCap, FinalSoftCap float64
	// LongRope, when set, is a phi3's longrope scaling: Context is the
	// extended context (max_position_embeddings).
	LongRope *LongRope
}

// LongRope is Phi-3's longrope scaling as a checkpoint states it.
type LongRope struct {
	OriginalContext int       // the pretrained context
	Short, Long     []float32 // one factor per rotated pair
}

// AttnFactor is the attention factor llama.cpp's converter writes and
// transformers derives: √(1 + ln(s)/ln(original)), s = context/original.
func (l *LongRope) AttnFactor(context int) float64 {
	s := float64(context) / float64(l.OriginalContext)
	if s <= 1 {
		return 1
	}
	return math.Sqrt(1 + math.Log(s)/math.Log(float64(l.OriginalContext)))
}

// Checkpoint is a random model written in both formats.
type Checkpoint struct {
	GGUF string // the .gguf file
	HF   string // a directory with config.json and model.safetensors
	// Weights holds every tensor's values by its HF name, as both files
	// store them (float32, widened), row-major.
	Weights map[string][]float64
}

// Write draws a model of shape s from seed and writes it under dir, in
// float32. meta is added to the GGUF file's metadata after the
// architecture's keys (a tokenizer's tokenizer.* keys, say).
func Write(dir string, s Spec, meta []formats.KV, seed uint64) (*Checkpoint, error) {
	switch s.Arch {
	case "phi3":
		return writePhi3(dir, s, meta, seed)
	case "gemma2", "gemma3":
		return writeGemma(dir, s, meta, seed)
	case "qwen3":
	default:
		return nil, fmt.Errorf("llamatest: architecture %q is not one this package writes (qwen3, phi3, gemma2, gemma3)", s.Arch)
	}
	t := newTensors(seed, 0x71e3)
	add := t.add
	ck := &Checkpoint{GGUF: filepath.Join(dir, "model.gguf"), HF: filepath.Join(dir, "hf")}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	add("token_embd.weight", "model.embed_tokens.weight", 1, s.Vocab, s.Dim)
	add("output_norm.weight", "model.norm.weight", 0.1, s.Dim)
	if !s.Tied {
		add("output.weight", "lm_head.weight", 0.5, s.Vocab, s.Dim)
	}
	for l := range s.Layers {
		g, h := fmt.Sprintf("blk.%d.", l), fmt.Sprintf("model.layers.%d.", l)
		add(g+"attn_norm.weight", h+"input_layernorm.weight", 0.1, s.Dim)
		add(g+"attn_q.weight", h+"self_attn.q_proj.weight", 0.3, q, s.Dim)
		add(g+"attn_k.weight", h+"self_attn.k_proj.weight", 0.3, kv, s.Dim)
		add(g+"attn_v.weight", h+"self_attn.v_proj.weight", 0.3, kv, s.Dim)
		// Gains far from 1, with heads of RMS 1 after the norm: the
		// attention logits depend on them.
		add(g+"attn_q_norm.weight", h+"self_attn.q_norm.weight", 0.5, s.HeadDim)
		add(g+"attn_k_norm.weight", h+"self_attn.k_norm.weight", 0.5, s.HeadDim)
		add(g+"attn_output.weight", h+"self_attn.o_proj.weight", 0.3, s.Dim, q)
		add(g+"ffn_norm.weight", h+"post_attention_layernorm.weight", 0.1, s.Dim)
		add(g+"ffn_gate.weight", h+"mlp.gate_proj.weight", 0.3, s.FFN, s.Dim)
		add(g+"ffn_up.weight", h+"mlp.up_proj.weight", 0.3, s.FFN, s.Dim)
		add(g+"ffn_down.weight", h+"mlp.down_proj.weight", 0.3, s.Dim, s.FFN)
	}

	// GGUF: the keys llama.cpp's converter writes for Qwen3 (Qwen3's q and
	// k rows are not permuted: llama.cpp rotates them as NeoX pairs).
	kvs := commonKVs(s.Arch, s)
	kvs = append(kvs, meta...)
	// config.json as Qwen3's model cards have it, less what no
	// loader here reads.
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": s.Arch,
		"hidden_size": s.Dim, "intermediate_size": s.FFN, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"rms_norm_eps": s.NormEps, "rope_theta": s.RopeTheta, "rope_scaling": nil,
		"max_position_embeddings": s.Context, "vocab_size": s.Vocab, "tie_word_embeddings": s.Tied,
		"attention_bias": false, "hidden_act": "silu", "torch_dtype": "float32",
		"use_sliding_window": false, "sliding_window": nil,
	}
	if err := writeCheckpoint(ck, kvs, cfg, t); err != nil {
		return nil, err
	}
	return ck, nil
}

// tensors is a random model's tensors as drawn: add draws matrices
// N(0, scale²) and norm gains 1 + N(0, scale²) (so that a gain left out or
// applied twice shows), under a GGUF name and, when hf is not empty, the
// HF name, whose values are also kept in values.
type tensors struct {
	r        *rand.Rand
	gguf, hf []formats.Tensor
	values   map[string][]float64
}

func newTensors(seed, stream uint64) *tensors {
	return &tensors{r: rand.New(rand.NewPCG(seed, stream)), values: map[string][]float64{}}
}

func (t *tensors) add(gguf, hf string, scale float64, shape ...int) {
	v := make([]float32, graph.Shape(shape).Numel())
	for i := range v {
		x := t.r.NormFloat64() * scale
		if len(shape) == 1 {
			x += 1
		}
		v[i] = float32(x)
	}
	data := graph.AsBytes(v)
	t.gguf = append(t.gguf, formats.Tensor{Name: gguf, DType: formats.F32, Shape: shape, Data: data})
	if hf == "" {
		return
	}
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	t.values[hf] = f
	t.hf = append(t.hf, formats.Tensor{Name: hf, DType: formats.F32, Shape: shape, Data: data})
}

// addShifted draws a Gemma norm gain w ~ N(0, scale²) (the gain applied is
// 1+w): the HF tensor holds w, the GGUF tensor float32(1+w), as llama.cpp's
// converter adds the 1 (data_torch + 1, in float32 for these files).
func (t *tensors) addShifted(gguf, hf string, scale float64, n int) {
	v, shifted, f := make([]float32, n), make([]float32, n), make([]float64, n)
	for i := range v {
		v[i] = float32(t.r.NormFloat64() * scale)
		shifted[i] = 1 + v[i]
		f[i] = float64(v[i])
	}
	t.gguf = append(t.gguf, formats.Tensor{Name: gguf, DType: formats.F32, Shape: []int{n}, Data: graph.AsBytes(shifted)})
	t.hf = append(t.hf, formats.Tensor{Name: hf, DType: formats.F32, Shape: []int{n}, Data: graph.AsBytes(v)})
	t.values[hf] = f
}

// writeGGUF writes t's GGUF tensors with the metadata kvs to path.
func writeGGUF(path string, kvs []formats.KV, t *tensors) error {
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kvs, t.gguf, 32); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	return nil
}

// writeCheckpoint writes ck.GGUF (kvs, t's GGUF tensors) and the HF
// directory ck.HF (config.json from cfg, model.safetensors from t's HF
// tensors), and keeps t's values in ck.Weights.
func writeCheckpoint(ck *Checkpoint, kvs []formats.KV, cfg map[string]any, t *tensors) error {
	ck.Weights = t.values
	if err := writeGGUF(ck.GGUF, kvs, t); err != nil {
		return err
	}
	if err := os.MkdirAll(ck.HF, 0o755); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ck.HF, "config.json"), js, 0o644); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, t.hf, nil); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ck.HF, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	return nil
}

// FixedLongRope is a longrope scaling from original tokens for rot rotated
// dimensions with fixed factors, short ones near 1 and long ones up to
// ~rot, as Phi-3's grow: for checks that need a longrope model but not
// particular factors.
func FixedLongRope(rot, original int) *LongRope {
	l := &LongRope{OriginalContext: original}
	for j := range rot / 2 {
		l.Short = append(l.Short, 1+0.05*float32(j))
		l.Long = append(l.Long, 1+2*float32(j))
	}
	return l
}

// commonKVs are the GGUF keys of s's widths that llama.cpp's converters
// write for every architecture here, under arch's prefix.
func commonKVs(arch string, s Spec) []formats.KV {
	a := arch + "."
	return []formats.KV{
		{Key: "general.architecture", Value: arch},
		{Key: a + "context_length", Value: uint32(s.Context)},
		{Key: a + "embedding_length", Value: uint32(s.Dim)},
		{Key: a + "feed_forward_length", Value: uint32(s.FFN)},
		{Key: a + "block_count", Value: uint32(s.Layers)},
		{Key: a + "attention.head_count", Value: uint32(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + "attention.key_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.value_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: s.NormEps},
		{Key: a + "rope.freq_base", Value: float32(s.RopeTheta)},
	}
}
