package llamatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

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

// gemma3TextDefaults are the values of transformers' Gemma3TextConfig
// defaults (models/gemma3/configuration_gemma3.py) that a gemma3_text
// config.json may state; an image-text checkpoint's text_config leaves
// them out.
var gemma3TextDefaults = map[string]any{
	"model_type": "gemma3_text", "rms_norm_eps": 1e-6, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
	"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true, "sliding_window_pattern": 6.0,
	"attention_bias": false,
}

// WriteGemma3ImageText writes into the directory dst the image-text form
// (Gemma3ForConditionalGeneration, model_type "gemma3") of the Gemma 3
// text checkpoint Write wrote at ck.HF, the same weights as
// google/gemma-3-4b-it lays them out: config.json with the text model's
// settings under text_config, stating only those that differ from
// Gemma3TextConfig's defaults (gemma-3-4b-it's states five keys), the dtype
// and stop ids at the top, and a vision_config; model.safetensors with the
// text model under language_model.model.* (transformers < 4.52) or, with
// newNames, model.language_model.* (later), and four zero tensors of a
// vision tower and projector beside it, under vision_tower.* and
// multi_modal_projector.* (with newNames, model.vision_tower.* and
// model.multi_modal_projector.*).
func WriteGemma3ImageText(ck *Checkpoint, dst string, newNames bool) error {
	raw, err := os.ReadFile(filepath.Join(ck.HF, "config.json"))
	if err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	var text map[string]any
	if err := json.Unmarshal(raw, &text); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if text["model_type"] != "gemma3_text" {
		return fmt.Errorf("llamatest: %s is not a gemma3_text checkpoint", ck.HF)
	}
	dtype := text["torch_dtype"]
	delete(text, "architectures")
	delete(text, "torch_dtype")
	for k, v := range text {
		if d, ok := gemma3TextDefaults[k]; v == nil || ok && v == d {
			delete(text, k)
		}
	}
	dim := int(text["hidden_size"].(float64))
	cfg := map[string]any{
		"architectures": []string{"Gemma3ForConditionalGeneration"}, "model_type": "gemma3",
		"text_config": text, "torch_dtype": dtype, "eos_token_id": []int{1, 2},
		"mm_tokens_per_image": 4, "initializer_range": 0.02,
		"vision_config": map[string]any{"hidden_size": 8, "image_size": 8, "intermediate_size": 16,
			"model_type": "siglip_vision_model", "num_attention_heads": 2, "num_hidden_layers": 1, "patch_size": 4},
	}
	st, err := formats.OpenSafetensorsDir(ck.HF)
	if err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	defer st.Close()
	textPrefix, other := "language_model.model.", ""
	if newNames {
		textPrefix, other = "model.language_model.", "model."
	}
	var ts []formats.Tensor
	for name, t := range st.Tensors {
		rest, ok := strings.CutPrefix(name, "model.")
		if !ok {
			return fmt.Errorf("llamatest: tensor %q is not under model.", name)
		}
		c := *t
		c.Name = textPrefix + rest
		ts = append(ts, c)
	}
	for _, v := range []struct {
		name  string
		shape []int
	}{
		{"vision_tower.vision_model.embeddings.patch_embedding.weight", []int{8, 3, 4, 4}},
		{"vision_tower.vision_model.post_layernorm.weight", []int{8}},
		{"multi_modal_projector.mm_input_projection_weight", []int{8, dim}},
		{"multi_modal_projector.mm_soft_emb_norm.weight", []int{8}},
	} {
		n := 1
		for _, d := range v.shape {
			n *= d
		}
		ts = append(ts, formats.Tensor{Name: other + v.name, DType: formats.F32, Shape: v.shape, Data: make([]byte, 4*n)})
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), js, 0o644); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, ts, nil); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	return nil
}
