package llamatest

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// writeGemma writes a random Gemma 2 or Gemma 3 text model: tied
// embeddings, four norms a layer (and Gemma 3's q/k head norms), all gains
// stored as HF stores them (w, applied as 1+w) and as llama.cpp's converter
// writes them (1+w), under the names of transformers' Gemma2ForCausalLM /
// Gemma3ForCausalLM checkpoints and of llama.cpp's converter (Gemma2Model,
// Gemma3Model: post_attention_norm, ffn_norm for pre_feedforward_layernorm,
// post_ffw_norm). Gemma 3: every sixth layer is global
// (sliding_window_pattern 6), the sliding layers' RoPE base 10000, the
// global ones' s.RopeTheta. Gemma 2: every other layer global, one base,
// the soft-caps s.AttnSoftCap and s.FinalSoftCap. query_pre_attn_scalar is
// s.HeadDim, which is what llama.cpp assumes for a GGUF of other than the
// 27B models' layer counts.
func writeGemma(dir string, s Spec, meta []formats.KV, seed uint64) (*Checkpoint, error) {
	gemma3 := s.Arch == "gemma3"
	if !s.Tied {
		return nil, fmt.Errorf("llamatest: gemma's output projection is always the embedding table")
	}
	if gemma3 && (s.AttnSoftCap != 0 || s.FinalSoftCap != 0) {
		return nil, fmt.Errorf("llamatest: gemma3 has no soft-caps")
	}
	if s.SlidingWindow <= 0 {
		return nil, fmt.Errorf("llamatest: gemma3 needs a sliding window")
	}
	t := newTensors(seed, map[bool]uint64{true: 0x63e3, false: 0x62e2}[gemma3])
	ck := &Checkpoint{GGUF: filepath.Join(dir, "model.gguf"), HF: filepath.Join(dir, "hf")}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	// Embeddings of RMS 1/√Dim, so that the scaled ones have RMS 1 (as
	// trained Gemma tables roughly do): of RMS 1, the last token's √Dim-fold
	// embedding would swamp every layer's output and the model would
	// repeat one token.
	t.add("token_embd.weight", "model.embed_tokens.weight", 1/math.Sqrt(float64(s.Dim)), s.Vocab, s.Dim)
	t.addShifted("output_norm.weight", "model.norm.weight", 0.2, s.Dim)
	for l := range s.Layers {
		g, h := fmt.Sprintf("blk.%d.", l), fmt.Sprintf("model.layers.%d.", l)
		t.addShifted(g+"attn_norm.weight", h+"input_layernorm.weight", 0.2, s.Dim)
		t.add(g+"attn_q.weight", h+"self_attn.q_proj.weight", 0.3, q, s.Dim)
		t.add(g+"attn_k.weight", h+"self_attn.k_proj.weight", 0.3, kv, s.Dim)
		t.add(g+"attn_v.weight", h+"self_attn.v_proj.weight", 0.3, kv, s.Dim)
		if gemma3 {
			t.addShifted(g+"attn_q_norm.weight", h+"self_attn.q_norm.weight", 0.5, s.HeadDim)
			t.addShifted(g+"attn_k_norm.weight", h+"self_attn.k_norm.weight", 0.5, s.HeadDim)
		}
		t.add(g+"attn_output.weight", h+"self_attn.o_proj.weight", 0.3, s.Dim, q)
		t.addShifted(g+"post_attention_norm.weight", h+"post_attention_layernorm.weight", 0.2, s.Dim)
		t.addShifted(g+"ffn_norm.weight", h+"pre_feedforward_layernorm.weight", 0.2, s.Dim)
		t.add(g+"ffn_gate.weight", h+"mlp.gate_proj.weight", 0.3, s.FFN, s.Dim)
		t.add(g+"ffn_up.weight", h+"mlp.up_proj.weight", 0.3, s.FFN, s.Dim)
		t.add(g+"ffn_down.weight", h+"mlp.down_proj.weight", 0.3, s.Dim, s.FFN)
		t.addShifted(g+"post_ffw_norm.weight", h+"post_feedforward_layernorm.weight", 0.2, s.Dim)
	}
	// GGUF: the keys llama.cpp's converter writes for Gemma 2 and 3 (q
	// and k rows unpermuted: llama.cpp rotates them as NeoX pairs).
	a := s.Arch + "."
	kvs := append(commonKVs(s.Arch, s), formats.KV{Key: a + "attention.sliding_window", Value: uint32(s.SlidingWindow)})
	if !gemma3 {
		kvs = append(kvs, formats.KV{Key: a + "attn_logit_softcapping", Value: float32(s.AttnSoftCap)},
			formats.KV{Key: a + "final_logit_softcapping", Value: float32(s.FinalSoftCap)})
	}
	kvs = append(kvs, meta...)
	// config.json as Gemma 3 1B's (google/gemma-3-1b-it), less what no
	// loader here reads.
	cfg := map[string]any{
		"architectures": []string{"Gemma3ForCausalLM"}, "model_type": "gemma3_text",
		"hidden_size": s.Dim, "intermediate_size": s.FFN, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"rms_norm_eps": s.NormEps, "rope_theta": s.RopeTheta, "rope_scaling": nil, "rope_local_base_freq": 10000.0,
		"max_position_embeddings": s.Context, "vocab_size": s.Vocab, "tie_word_embeddings": true,
		"attention_bias": false, "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "float32",
		"query_pre_attn_scalar": s.HeadDim, "sliding_window": s.SlidingWindow, "sliding_window_pattern": 6,
		"attn_logit_softcapping": nil, "final_logit_softcapping": nil,
	}
	if !gemma3 {
		// As Gemma 2 2B's config.json (google/gemma-2-2b-it).
		cfg["architectures"], cfg["model_type"] = []string{"Gemma2ForCausalLM"}, "gemma2"
		cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = s.AttnSoftCap, s.FinalSoftCap
		delete(cfg, "rope_local_base_freq")
		delete(cfg, "sliding_window_pattern")
	}
	if err := writeCheckpoint(ck, kvs, cfg, t); err != nil {
		return nil, err
	}
	return ck, nil
}
