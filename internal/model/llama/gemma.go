package llama

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Gemma 3's text model (GGUF general.architecture "gemma3", HF model_type
// "gemma3_text") is a Llama block with, per transformers'
// models/gemma3/modeling_gemma3.py (Gemma3TextModel, Gemma3DecoderLayer,
// Gemma3Attention, Gemma3MLP, Gemma3RMSNorm):
//
//   - the embeddings multiplied by √hidden_size (Gemma3TextScaledWordEmbedding);
//   - RMSNorm computing x/rms·(1+w), so a checkpoint stores w: we add the 1
//     when loading an HF checkpoint, in float32 as Gemma3RMSNorm does, and
//     not for a GGUF file, whose norms llama.cpp's converter (Gemma3Model in
//     convert_hf_to_gguf.py) stored as w+1 already;
//   - four norms a layer: input_layernorm before attention,
//     post_attention_layernorm on its output before the residual add,
//     pre_feedforward_layernorm before the MLP, post_feedforward_layernorm
//     on its output (GGUF attn_norm, post_attention_norm, ffn_norm,
//     post_ffw_norm);
//   - q_norm and k_norm over each head before RoPE, as Qwen3's (with 1+w);
//   - the MLP gelu_pytorch_tanh(gate)·up (graph.GeGLU);
//   - attention scaled by query_pre_attn_scalar^-½, not head_dim^-½;
//   - sliding-window attention in five layers of six (layer i is global
//     when (i+1) % sliding_window_pattern == 0), the sliding layers
//     rotating with base rope_local_base_freq (10000) unscaled, the global
//     ones with rope_theta (1e6) and rope_scaling (linear ×8 in 4B and up);
//   - the output projection tied to the embeddings; the logits soft-capped
//     only where final_logit_softcapping is set (no released model does).
//
// Gemma 2 (GGUF "gemma2", HF model_type "gemma2"), per transformers'
// models/gemma2/modeling_gemma2.py, is the same block without the q/k head
// norms, with every other layer sliding (layer_idx % 2 == 0: the pattern
// 2), one RoPE base for all layers, and two soft-caps: the attention
// scores, scaled, become cap·tanh(s/cap) before the mask and softmax
// (attn_logit_softcapping, 50), and the logits likewise
// (final_logit_softcapping, 30).
//
// Nothing here needs a backend op beyond GeGLU and SoftCap: the scale is a
// Mul by a constant vector, the extra norms are RMSNorms, the windows, the
// two RoPE tables and the scores' cap are per-op parameters.

// isGemma reports whether arch is a Gemma architecture handled here.
func isGemma(arch string) bool { return arch == "gemma2" || arch == "gemma3" }

// gemmaFromGGUF completes c, read by modelFromGGUF's common keys, with
// Gemma 3's: the window every layer but each sixth has, the sliding
// layers' RoPE base, the attention scale. llama.cpp reads the same
// (llama-model.cpp, LLM_ARCH_GEMMA3): sliding_window from the file, the
// pattern 6 and the local base 10000 fixed, and the scale
// 1/√(embedding_length/head_count) for the 62-layer 27B model, else
// 1/√key_length (GGUF has no query_pre_attn_scalar; those are the models'
// values of it).
//
// Gemma 2's (LLM_ARCH_GEMMA2): sliding_window from the file, every other
// layer sliding (pattern 2), one RoPE base, the soft-caps
// attn_logit_softcapping and final_logit_softcapping from the file (50 and
// 30 when absent, llama.cpp's defaults), and the scale 1/√key_length, or
// 1/√(embedding_length/head_count) for the 46-layer 27B model.
func gemmaFromGGUF(g *formats.GGUF, c *Config) error {
	a := c.Arch + "."
	w, ok := g.Uint(a + "attention.sliding_window")
	if !ok && c.Arch == "gemma2" {
		return fmt.Errorf("gguf metadata has no %sattention.sliding_window", a)
	}
	// llama.cpp's converter leaves a Gemma 3's window out when
	// sliding_window_pattern is 1 (no sliding layer), and llama.cpp then
	// runs every layer global: so do we (Window is 0 for every layer).
	if w > maxConfigSize {
		return fmt.Errorf("gguf metadata %sattention.sliding_window = %d is out of range", a, w)
	}
	c.SlidingWindow = int(w)
	c.RopeNeoX = true // llama.cpp: LLAMA_ROPE_TYPE_NEOX; the converter leaves q and k unpermuted
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.PostNorms, c.GeGLU = true, true
	bigLayers := 62
	caps := []struct {
		dst *float32
		key string
	}{{&c.FinalSoftCap, "final_logit_softcapping"}}
	if c.Arch == "gemma2" {
		c.SlidingPattern, bigLayers = 2, 46
		c.AttnSoftCap, c.FinalSoftCap = 50, 30
		caps = append(caps, struct {
			dst *float32
			key string
		}{&c.AttnSoftCap, "attn_logit_softcapping"})
	}
	// Gemma 3's converter writes final_logit_softcapping when the config
	// sets one (none of Google's does), never an attention cap.
	for _, f := range caps {
		if v, ok := g.Float(a + f.key); ok {
			if !(v >= 0) {
				return fmt.Errorf("gguf metadata %s%s = %g", a, f.key, v)
			}
			*f.dst = float32(v)
		}
	}
	if c.Arch == "gemma3" {
		c.SlidingPattern, c.QKNorm = 6, true
		c.RopeLocalTheta = 10000
		if v, ok := g.Float(a + "rope.freq_base_swa"); ok && v > 0 {
			c.RopeLocalTheta = v
		}
	}
	scalar := float64(c.HeadDim)
	if c.Layers == bigLayers && c.Heads > 0 {
		scalar = float64(c.Dim / c.Heads)
	}
	c.AttnScale = 1 / math.Sqrt(scalar)
	return nil
}

// gemmaFromHF completes c, read by configFromHF's common keys, with Gemma
// 2's or 3's from config.json (Gemma2Config's and Gemma3TextConfig's
// defaults for absent keys, but for Gemma 2's soft-caps: JSON cannot tell
// an absent key from a null one here, so either is no cap; Gemma 2's
// released configs state both).
func gemmaFromHF(h *formats.HFConfig, c *Config) error {
	gemma2 := h.ModelType == "gemma2"
	c.Arch = "gemma3"
	if gemma2 {
		c.Arch = "gemma2"
	}
	if act := h.HiddenActivation; act != "" && act != "gelu_pytorch_tanh" {
		return fmt.Errorf("%s with hidden_activation %q is not supported (only gelu_pytorch_tanh)", c.Arch, act)
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"final_logit_softcapping", h.FinalLogitSoftcapping, &c.FinalSoftCap}, {"attn_logit_softcapping", h.AttnLogitSoftcapping, &c.AttnSoftCap}} {
		switch {
		case f.v == nil:
		case !gemma2 && f.dst == &c.AttnSoftCap && *f.v != 0:
			// transformers' Gemma 3 has no attention cap (llama.cpp's
			// converter asserts it is None).
			return fmt.Errorf("gemma3 with %s %g is not supported", f.name, *f.v)
		case !(*f.v >= 0):
			return fmt.Errorf("%s %g", f.name, *f.v)
		default:
			*f.dst = float32(*f.v)
		}
	}
	c.SlidingWindow = 4096
	if w := h.SlidingWindow; w != nil {
		if *w <= 0 {
			return fmt.Errorf("sliding_window %d", *w)
		}
		c.SlidingWindow = *w
	}
	c.SlidingPattern = 6
	if gemma2 {
		c.SlidingPattern = 2 // modeling_gemma2.py: layer_idx % 2 == 0 slides
	}
	if p := h.SlidingWindowPattern; p != nil && !gemma2 {
		if *p <= 0 {
			return fmt.Errorf("sliding_window_pattern %d", *p)
		}
		c.SlidingPattern = *p
	}
	if lt := h.LayerTypes; lt != nil {
		// Newer configs list each layer's kind; we run the periodic
		// pattern, so the list must be one (it is in every Gemma 3).
		if i := slices.Index(lt, "full_attention"); i >= 0 && h.SlidingWindowPattern == nil && !gemma2 {
			c.SlidingPattern = i + 1
		}
		if len(lt) != c.Layers {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(lt), c.Layers)
		}
		for i, k := range lt {
			if want := map[bool]string{true: "sliding_attention", false: "full_attention"}[c.Window(i) > 0]; k != want {
				return fmt.Errorf("layer_types[%d] is %q; only a global layer every %d (sliding_window_pattern) is supported", i, k, c.SlidingPattern)
			}
		}
	}
	if !gemma2 {
		c.RopeLocalTheta = 10000
		if v := h.RopeLocalBaseFreq; v != nil {
			if !(*v > 0) {
				return fmt.Errorf("rope_local_base_freq %g", *v)
			}
			c.RopeLocalTheta = *v
		}
	}
	scalar := 256.0
	if v := h.QueryPreAttnScalar; v != nil {
		if !(*v > 0) {
			return fmt.Errorf("query_pre_attn_scalar %g", *v)
		}
		scalar = *v
	}
	c.AttnScale = 1 / math.Sqrt(scalar)
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim))) // rounded to the table's type once it is bound (gemmaBound)
	c.PostNorms, c.GeGLU, c.QKNorm, c.QKVBias = true, true, !gemma2, false
	return nil
}

// gemmaNormShift wraps an HF Gemma checkpoint's lookup so that every norm
// gain (a name ending in norm.weight) reads as 1+w, in float32, the gain
// Gemma3RMSNorm applies (x·(1.0 + weight.float())) and the one llama.cpp's
// converter stores: the two files of one model then load the same bits.
func gemmaNormShift(find lookup) lookup {
	return func(name string) (Weight, bool) {
		w, ok := find(name)
		if !ok || !strings.HasSuffix(name, "norm.weight") || len(w.Shape) != 1 {
			return w, ok
		}
		v := F32Values(w)
		for i := range v {
			v[i] += 1
		}
		w.DType, w.Data, w.Quant, w.Blocks = graph.F32, graph.AsBytes(v), nil, 0
		return w, true
	}
}

// gemmaBound finishes an HF Gemma model once its weights are bound: the
// embeddings' normalizer is √hidden_size rounded to the embedding table's
// type, as Gemma3TextScaledWordEmbedding does (embed_scale.to(weight.dtype):
// 33.94 becomes 34 for a bf16 table of 1152 columns); the product is then
// taken in float32 (transformers takes it in the table's type). A GGUF
// file's normalizer is float32's √embedding_length, llama.cpp's.
func gemmaBound(m *Model) {
	s := m.Config.EmbedScale
	switch m.Embed.DType {
	case graph.BF16:
		m.Config.EmbedScale = quant.BF16ToF32(quant.F32ToBF16(s))
	case graph.F16:
		m.Config.EmbedScale = quant.F16ToF32(quant.F32ToF16(s))
	}
}

// gemmaTextLayouts are the names an image-text Gemma 3 checkpoint
// (Gemma3ForConditionalGeneration) gives its text model: transformers
// before 4.52 saved it as language_model.model.* with the head at
// language_model.lm_head, later ones as model.language_model.* with the
// head at lm_head (modeling_gemma3.py's _checkpoint_conversion_mapping maps
// the first onto the second). The head is tied to the embeddings in every
// released model and then absent.
var gemmaTextLayouts = []struct{ model, head string }{
	{"language_model.model.", "language_model.lm_head.weight"},
	{"model.language_model.", "lm_head.weight"},
}

// gemmaTextNames finds which of gemmaTextLayouts an image-text Gemma 3
// checkpoint has and returns the map from the text model's names, as a
// Gemma3ForCausalLM has them (Model's st tags), to the checkpoint's, and
// a summary of the tensors left unread (the vision tower's and the
// projector's) for the caller to log.
func gemmaTextNames(ck *formats.Checkpoint) (rename func(string) string, ignored string, err error) {
	for _, l := range gemmaTextLayouts {
		if _, ok := ck.Tensor(l.model + "embed_tokens.weight"); !ok {
			continue
		}
		rename = func(name string) string {
			if name == "lm_head.weight" {
				return l.head
			}
			if rest, ok := strings.CutPrefix(name, "model."); ok {
				return l.model + rest
			}
			return name
		}
		// The rest, by module: the name up to its first component
		// other than "model" (vision_tower, model.multi_modal_projector).
		groups := map[string]int{}
		for name := range ck.Tensors {
			if strings.HasPrefix(name, l.model) || name == l.head {
				continue
			}
			rest, module := name, ""
			for strings.HasPrefix(rest, "model.") {
				rest, module = rest[len("model."):], module+"model."
			}
			first, _, _ := strings.Cut(rest, ".")
			groups[module+first+".*"]++
		}
		var names []string
		for g, n := range groups {
			names = append(names, fmt.Sprintf("%s (%d)", g, n))
		}
		slices.Sort(names)
		if len(names) > 0 {
			ignored = fmt.Sprintf("image-text Gemma 3: the text model (%s*) is loaded for chat of text; its other tensors are not read: %s",
				l.model, strings.Join(names, ", "))
		}
		return rename, ignored, nil
	}
	return nil, "", fmt.Errorf(`model_type "gemma3" (image-text): the checkpoint has neither %sembed_tokens.weight nor %sembed_tokens.weight`,
		gemmaTextLayouts[0].model, gemmaTextLayouts[1].model)
}
