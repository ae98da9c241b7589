package llamatest

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// writePhi3 writes a random Phi-3 (also Phi-4's layout): q, k and v fused
// into one matrix (GGUF blk.N.attn_qkv, HF self_attn.qkv_proj; rows q, k,
// v) and gate and up into one (GGUF blk.N.ffn_up, HF mlp.gate_up_proj;
// rows gate, then up), as llama.cpp's converter (Phi3MiniModel, which
// keeps them fused) and transformers' Phi-3 checkpoints store them. No
// biases, untied output; partial rotary and longrope where s says so.
// Weights holds the fused HF names.
func writePhi3(dir string, s Spec, meta []formats.KV, seed uint64) (*Checkpoint, error) {
	if s.Tied {
		return nil, fmt.Errorf("llamatest: phi3 has no tied embeddings")
	}
	t := newTensors(seed, 0x9813)
	add := t.add
	ck := &Checkpoint{GGUF: filepath.Join(dir, "model.gguf"), HF: filepath.Join(dir, "hf")}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	add("token_embd.weight", "model.embed_tokens.weight", 1, s.Vocab, s.Dim)
	add("output_norm.weight", "model.norm.weight", 0.1, s.Dim)
	add("output.weight", "lm_head.weight", 0.5, s.Vocab, s.Dim)
	for l := range s.Layers {
		g, h := fmt.Sprintf("blk.%d.", l), fmt.Sprintf("model.layers.%d.", l)
		add(g+"attn_norm.weight", h+"input_layernorm.weight", 0.1, s.Dim)
		add(g+"attn_qkv.weight", h+"self_attn.qkv_proj.weight", 0.3, q+2*kv, s.Dim)
		add(g+"attn_output.weight", h+"self_attn.o_proj.weight", 0.3, s.Dim, q)
		add(g+"ffn_norm.weight", h+"post_attention_layernorm.weight", 0.1, s.Dim)
		add(g+"ffn_up.weight", h+"mlp.gate_up_proj.weight", 0.3, 2*s.FFN, s.Dim)
		add(g+"ffn_down.weight", h+"mlp.down_proj.weight", 0.3, s.Dim, s.FFN)
	}

	// GGUF: the keys llama.cpp's converter writes for phi3 (no
	// key_length: head_dim is embedding_length / head_count).
	if s.HeadDim*s.Heads != s.Dim {
		return nil, fmt.Errorf("llamatest: phi3's head_dim is hidden_size / num_attention_heads")
	}
	a := "phi3."
	rot, orig := s.HeadDim, s.Context
	if s.RopeDims > 0 {
		rot = s.RopeDims
	}
	if s.LongRope != nil {
		orig = s.LongRope.OriginalContext
	}
	window := s.Context
	if s.SlidingWindow > 0 {
		window = s.SlidingWindow
	}
	kvs := []formats.KV{
		{Key: "general.architecture", Value: "phi3"},
		{Key: a + "context_length", Value: uint32(s.Context)},
		{Key: a + "rope.scaling.original_context_length", Value: uint32(orig)},
		{Key: a + "embedding_length", Value: uint32(s.Dim)},
		{Key: a + "feed_forward_length", Value: uint32(s.FFN)},
		{Key: a + "block_count", Value: uint32(s.Layers)},
		{Key: a + "attention.head_count", Value: uint32(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: s.NormEps},
		{Key: a + "rope.dimension_count", Value: uint32(rot)},
		{Key: a + "rope.freq_base", Value: float32(s.RopeTheta)},
		{Key: a + "attention.sliding_window", Value: uint32(window)},
	}
	// Longrope as llama.cpp's converter writes it (Phi3MiniModel): the
	// attention factor and the two factor tensors, no scaling type.
	var ropeScaling map[string]any
	if l := s.LongRope; l != nil {
		if len(l.Short) != rot/2 || len(l.Long) != rot/2 {
			return nil, fmt.Errorf("llamatest: longrope has %d and %d factors for %d rotated dimensions", len(l.Short), len(l.Long), rot)
		}
		kvs = append(kvs, formats.KV{Key: a + "rope.scaling.attn_factor", Value: float32(l.AttnFactor(s.Context))})
		t.gguf = append(t.gguf,
			formats.Tensor{Name: "rope_factors_long.weight", DType: formats.F32, Shape: []int{rot / 2}, Data: graph.AsBytes(slices.Clone(l.Long))},
			formats.Tensor{Name: "rope_factors_short.weight", DType: formats.F32, Shape: []int{rot / 2}, Data: graph.AsBytes(slices.Clone(l.Short))})
		ropeScaling = map[string]any{"type": "longrope", "short_factor": l.Short, "long_factor": l.Long}
	}
	kvs = append(kvs, meta...)
	// config.json as Phi-3's model cards have it, less what no loader
	// here reads.
	cfg := map[string]any{
		"architectures": []string{"Phi3ForCausalLM"}, "model_type": "phi3",
		"hidden_size": s.Dim, "intermediate_size": s.FFN, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads,
		"rms_norm_eps": s.NormEps, "rope_theta": s.RopeTheta, "rope_scaling": ropeScaling,
		"max_position_embeddings": s.Context, "original_max_position_embeddings": orig,
		"vocab_size": s.Vocab, "tie_word_embeddings": false, "hidden_act": "silu",
		"torch_dtype": "float32", "sliding_window": window, "partial_rotary_factor": float64(rot) / float64(s.HeadDim),
	}
	if err := writeCheckpoint(ck, kvs, cfg, t); err != nil {
		return nil, err
	}
	return ck, nil
}
