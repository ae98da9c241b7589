package llama

import (
	"fmt"
	"strings"
)

// Phi-3 and Phi-4 (model_type / general.architecture "phi3") are Llama
// blocks with NeoX-style RoPE, no biases and untied embeddings whose
// checkpoints store two projections fused: q, k and v as one matrix
// (HF self_attn.qkv_proj, GGUF attn_qkv; rows q, then k, then v) and gate
// and up as one (HF mlp.gate_up_proj, GGUF ffn_up; rows gate, then up).
// See transformers' models/phi3/modeling_phi3.py (Phi3Attention splits
// qkv by rows, Phi3MLP chunks gate_up in two) and llama.cpp's phi3 graph
// (split views of attn_qkv, a SwiGLU over the fused ffn_up).
//
// We split them at load into the unfused weights every backend already
// takes: the parts are row ranges of the fused tensor, so no bytes are
// copied on the CPU, and the GPUs join q·k·v and gate·up again as they do
// for every model (joinRows), so memory and bytes per token equal those of
// the same model stored unfused.

// Phi-3's sliding_window (Phi-3-mini-4k: 2047 of 4096; the 128k models
// and Phi-3.5: 262144, beyond their context) is used as transformers uses
// it: Phi3Model masks with create_sliding_window_causal_mask whenever the
// config has one, and masking_utils' sliding_window_overlay keeps key
// kv_idx for query q_idx iff kv_idx > q_idx - sliding_window, the last
// sliding_window positions with the query's own: the same mask as
// Mistral's, and as Config.SlidingWindow's. llama.cpp c392e50 masks with
// it as we do (checked with a binding window, docs/FORMATS.md); later
// llama.cpp ignores it for phi3 ("Phi SWA is currently disabled",
// llama-model.cpp), so past the window those versions' logits differ
// from transformers' and ours. Longrope
// (the 128k models, Phi-3.5, Phi-4-mini) and partial rotary (Phi-4-mini):
// see rope.go.

// phi3Window is a Phi-3 sliding window as the Config holds it: 0 for none,
// or for one that never binds (at least the context).
func phi3Window(w, context int) int {
	if w >= context {
		return 0
	}
	return w
}

// fusedParts maps an unfused tensor name of a phi3 checkpoint to the fused
// tensor holding it and which of its equal or q/kv-sized row ranges it is.
func (c *Config) fusedPart(tag, name string) (fused string, start, rows int, ok bool) {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	type part struct {
		suffix, fused string
		start, rows   int
	}
	var parts []part
	if tag == "gguf" {
		parts = []part{
			{"attn_q.weight", "attn_qkv.weight", 0, q},
			{"attn_k.weight", "attn_qkv.weight", q, kv},
			{"attn_v.weight", "attn_qkv.weight", q + kv, kv},
			{"ffn_gate.weight", "ffn_up.weight", 0, c.FFN},
			{"ffn_up.weight", "ffn_up.weight", c.FFN, c.FFN},
		}
	} else {
		parts = []part{
			{"self_attn.q_proj.weight", "self_attn.qkv_proj.weight", 0, q},
			{"self_attn.k_proj.weight", "self_attn.qkv_proj.weight", q, kv},
			{"self_attn.v_proj.weight", "self_attn.qkv_proj.weight", q + kv, kv},
			{"mlp.gate_proj.weight", "mlp.gate_up_proj.weight", 0, c.FFN},
			{"mlp.up_proj.weight", "mlp.gate_up_proj.weight", c.FFN, c.FFN},
		}
	}
	for _, p := range parts {
		if prefix, found := strings.CutSuffix(name, p.suffix); found {
			return prefix + p.fused, p.start, p.rows, true
		}
	}
	return "", 0, 0, false
}

// fusedLookup wraps a phi3 checkpoint's lookup so that the unfused names
// bindWeights asks for resolve to row ranges of the fused tensors.
func (c *Config) fusedLookup(tag string, find lookup) (lookup, *error) {
	var bad error
	return func(name string) (Weight, bool) {
		fused, start, rows, ok := c.fusedPart(tag, name)
		if !ok {
			return find(name)
		}
		w, ok := find(fused)
		if !ok {
			return Weight{}, false
		}
		part, err := rowRange(w, start, rows)
		if err != nil && bad == nil {
			bad = err
		}
		part.Name = name
		return part, true
	}, &bad
}

// rowRange returns rows [start, start+n) of a matrix weight as a view of
// its bytes (and of its scales and biases when quantized): every stored
// layout keeps a row's bytes together, the same count for every row.
func rowRange(w Weight, start, n int) (Weight, error) {
	if len(w.Shape) != 2 {
		return Weight{}, fmt.Errorf("llama: fused tensor %q has shape %v, want a matrix", w.Name, w.Shape)
	}
	rows := w.Shape[0]
	if start+n > rows {
		return Weight{}, fmt.Errorf("llama: fused tensor %q has %d rows, the config implies at least %d", w.Name, rows, start+n)
	}
	slice := func(v Weight) (Weight, error) {
		if len(v.Data)%rows != 0 {
			return Weight{}, fmt.Errorf("llama: fused tensor %q: %d bytes do not split into %d rows", w.Name, len(v.Data), rows)
		}
		per := len(v.Data) / rows
		v.Data = v.Data[start*per : (start+n)*per : (start+n)*per]
		v.Shape = append(v.Shape[:0:0], v.Shape...)
		v.Shape[0] = n
		// The parts share one buffer: none may be handed to a backend to keep.
		v.Owned = false
		return v, nil
	}
	out, err := slice(w)
	if err != nil {
		return Weight{}, err
	}
	if q := w.Quant; q != nil {
		qq := *q
		if qq.Scales, err = slice(q.Scales); err != nil {
			return Weight{}, err
		}
		if q.Biases.Present() {
			if qq.Biases, err = slice(q.Biases); err != nil {
				return Weight{}, err
			}
		}
		out.Quant = &qq
	}
	return out, nil
}
