package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// RoPE scaling as checkpoints state it, and longrope.
//
// Longrope (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini; transformers'
// rope_scaling type "longrope", formerly "su"; GGUF rope_factors_short and
// rope_factors_long) divides each frequency by its own factor,
// inv_freq[j] = 1 / (factor[j] · base^(2j/d)) with d the rotated
// dimensions, from one of two sets: the short factors for contexts up to
// the pretrained one (original_max_position_embeddings, GGUF
// rope.scaling.original_context_length), the long ones beyond. And it
// multiplies cos and sin, so the rotated dimensions of queries and keys,
// by an attention factor, √(1 + ln(s)/ln(original)) with
// s = max_position_embeddings / original (transformers'
// _compute_longrope_parameters in modeling_rope_utils.py; GGUF
// rope.scaling.attn_factor, which llama.cpp's converter computes the
// same way).
//
// Which set: transformers switches by the current sequence length
// (longrope_frequency_update), which would rotate the keys already in the
// cache by other angles than new ones; llama.cpp picks once, by the
// context a sequence is run with (get_rope_factors: n_ctx_per_seq >
// n_ctx_orig_yarn → long). We take llama.cpp's rule: the Runner picks by
// the context the engine runs with (Runner.UseContext; the model's whole
// context until told), so the KV cache stays valid, and a run that fits
// the pretrained context computes exactly what transformers does for it.
//
// The attention factor is applied as transformers and llama.cpp apply it:
// to the rotated dimensions only (they are all of them unless the rotary
// is partial, as Phi-4-mini's 3/4 of each head). Rotation is linear, so
// multiplying q and k by the factor before RoPE equals multiplying cos and
// sin by it: the Runner multiplies q and k (the fused q·k·v rows on a GPU)
// by a constant gain vector, factor on rotated dimensions and 1 elsewhere,
// one elementwise op per layer and only for such models; the RoPE ops and
// their kernels are unchanged on every backend.

// longropeFactors is the longrope factor set for a run of context tokens,
// nil without longrope.
func (c *Config) longropeFactors(context int) []float32 {
	s := &c.RopeScale
	if s.Type != "longrope" {
		return nil
	}
	if context > s.OriginalContext {
		return s.LongFactors
	}
	return s.ShortFactors
}

// RopeAttnFactor is the factor queries' and keys' rotated dimensions are
// multiplied by: longrope's, else 1.
func (c *Config) RopeAttnFactor() float64 {
	if c.RopeScale.Type == "longrope" {
		return c.RopeScale.AttnFactor
	}
	return 1
}

// longropeAttnFactor is transformers' default attention factor for a
// model trained at original tokens and extended scale times, rounded to
// float32 as GGUF's key holds it (the gain is float32 anyway), so that
// both files of one model have one Config.
func longropeAttnFactor(scale float64, original int) float64 {
	if scale <= 1 {
		return 1
	}
	return float64(float32(math.Sqrt(1 + math.Log(scale)/math.Log(float64(original)))))
}

// checkLongrope checks the factor sets against the rotated dimensions.
func (c *Config) checkLongrope() error {
	s := &c.RopeScale
	if s.Type != "longrope" {
		return nil
	}
	if len(s.ShortFactors) != c.RopeDims/2 || len(s.LongFactors) != c.RopeDims/2 {
		return fmt.Errorf("longrope: %d short and %d long factors for %d rotated dimensions (want %d each)",
			len(s.ShortFactors), len(s.LongFactors), c.RopeDims, c.RopeDims/2)
	}
	for _, f := range append(append([]float32(nil), s.ShortFactors...), s.LongFactors...) {
		if !(f > 0) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("longrope: factor %g is not a positive number", f)
		}
	}
	if s.OriginalContext <= 0 {
		return fmt.Errorf("longrope: original context %d", s.OriginalContext)
	}
	if !(s.AttnFactor > 0) || math.IsInf(s.AttnFactor, 0) {
		return fmt.Errorf("longrope: attention factor %g", s.AttnFactor)
	}
	return nil
}

// ggufRopeScaling reads a GGUF file's RoPE scaling into c (whose Context
// and RopeDims are set): rope.scaling.type none or linear, or longrope's
// factor tensors. Other types (yarn, ...) are refused: running without
// them would compute another model.
func ggufRopeScaling(g *formats.GGUF, arch string, c *Config) error {
	_, long := g.Tensor("rope_factors_long.weight")
	_, short := g.Tensor("rope_factors_short.weight")
	t, _ := g.String(arch + ".rope.scaling.type")
	switch {
	case t == "linear":
		// As llama.cpp: an absent or zero factor scales nothing.
		if f, ok := g.Float(arch + ".rope.scaling.factor"); ok && f != 0 && f != 1 {
			if !(f > 0) || math.IsInf(f, 0) {
				return fmt.Errorf("rope.scaling.factor %g", f)
			}
			c.RopeScale = RopeScaling{Type: "linear", Factor: f}
		}
	case t != "" && t != "none" && t != "longrope":
		return fmt.Errorf("rope.scaling.type %q is not supported (supported: none, linear, and longrope's rope_factors_long/short tensors)", t)
	}
	if !long && !short {
		if t == "longrope" {
			return errors.New("rope.scaling.type longrope without rope_factors_long.weight and rope_factors_short.weight")
		}
		return nil
	}
	if !long || !short || t == "linear" {
		return errors.New("longrope needs both rope_factors_long.weight and rope_factors_short.weight, and no other scaling")
	}
	if _, ok := g.Tensor("rope_freqs.weight"); ok {
		return errors.New("both rope_freqs.weight and longrope factors (rope_factors_long/short.weight)")
	}
	factors := func(name string) ([]float32, error) {
		tn, _ := g.Tensor(name)
		w, err := WeightOf(tn)
		if err != nil {
			return nil, err
		}
		if len(w.Shape) != 1 || w.Blocks != 0 || w.Quant != nil {
			return nil, fmt.Errorf("tensor %s has shape %v (want a vector of floats)", name, w.Shape)
		}
		return append([]float32(nil), f32View(ToF32(w).Data)...), nil
	}
	s := RopeScaling{Type: "longrope", OriginalContext: c.Context}
	var err error
	if s.LongFactors, err = factors("rope_factors_long.weight"); err != nil {
		return err
	}
	if s.ShortFactors, err = factors("rope_factors_short.weight"); err != nil {
		return err
	}
	if v, ok := g.Uint(arch + ".rope.scaling.original_context_length"); ok {
		if v == 0 || v > maxConfigSize {
			return fmt.Errorf("rope.scaling.original_context_length %d", v)
		}
		s.OriginalContext = int(v)
	}
	// llama.cpp's converter always writes the factor; a file without one
	// gets transformers' default rather than none.
	s.AttnFactor = longropeAttnFactor(float64(c.Context)/float64(s.OriginalContext), s.OriginalContext)
	if f, ok := g.Float(arch + ".rope.scaling.attn_factor"); ok {
		s.AttnFactor = f
	}
	c.RopeScale = s
	return c.checkLongrope()
}

// hfRopeScaling reads config.json's rope_scaling into c (whose Context and
// RopeDims are set).
func hfRopeScaling(h *formats.HFConfig, c *Config) error {
	rs := h.RopeScaling
	if rs == nil {
		return nil
	}
	switch rs.Type {
	case "linear", "llama3":
		c.RopeScale = RopeScaling{Type: rs.Type, Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
			HighFreqFactor: rs.HighFreqFactor, OriginalContext: rs.OriginalMaxPositionEmbeddings}
		return nil
	case "", "default":
		return nil
	case "longrope", "su":
	default:
		return fmt.Errorf("rope_scaling (or rope_parameters) rope_type %q is not supported (supported: default, linear, llama3, longrope)", rs.Type)
	}
	// As _compute_longrope_parameters: the scale is max_position_embeddings
	// over the config's original_max_position_embeddings when it has one
	// (Phi-3's, top level; newer files in rope_scaling), else
	// rope_scaling's factor over max_position_embeddings.
	orig, scale := h.OriginalMaxPositionEmbeddings, 0.0
	if orig == 0 {
		orig = rs.OriginalMaxPositionEmbeddings
	}
	if orig > 0 {
		scale = float64(c.Context) / float64(orig)
	} else {
		orig, scale = c.Context, rs.Factor
	}
	s := RopeScaling{Type: "longrope", OriginalContext: orig, AttnFactor: longropeAttnFactor(scale, orig)}
	if rs.AttentionFactor != nil {
		s.AttnFactor = float64(float32(*rs.AttentionFactor))
	}
	for _, f := range []struct {
		dst *[]float32
		src []float64
	}{{&s.ShortFactors, rs.ShortFactor}, {&s.LongFactors, rs.LongFactor}} {
		for _, v := range f.src {
			*f.dst = append(*f.dst, float32(v))
		}
	}
	c.RopeScale = s
	return c.checkLongrope()
}

// checkSlidingRope refuses what transformers 5's rope_parameters keyed
// by layer type may say that we do not run: scaled RoPE in the sliding
// layers (Gemma 3 rotates them unscaled, with rope_local_base_freq, the
// dict's rope_theta), or, for an architecture with one RoPE for every
// layer, a sliding_attention entry other than the full_attention one.
func checkSlidingRope(h *formats.HFConfig, arch string) error {
	s := h.SlidingRope
	if s == nil {
		return nil
	}
	if s.Scaling.Type != "" && s.Scaling.Type != "default" {
		return fmt.Errorf(`rope_parameters["sliding_attention"] rope_type %q is not supported (the sliding layers rotate unscaled)`, s.Scaling.Type)
	}
	if f := s.PartialRotaryFactor; f != nil && (h.PartialRotaryFactor == nil || *f != *h.PartialRotaryFactor) {
		return fmt.Errorf(`rope_parameters["sliding_attention"] partial_rotary_factor %g differs from full_attention's`, *f)
	}
	if arch != "gemma3_text" && (s.RopeTheta != 0 && s.RopeTheta != h.RopeTheta || h.RopeScaling != nil) {
		return fmt.Errorf(`rope_parameters["sliding_attention"] differs from full_attention's: only gemma3 has a RoPE of its own for sliding layers`)
	}
	return nil
}

// ropeGain is the longrope attention factor as a gain over n heads of
// headDim (graph.Mul's broadcast vector): the factor on each head's
// rotated dimensions, 1 on the rest and on the v heads after n (the
// fused q·k·v rows: vHeads of them). Absent when the factor is 1.
func (c *Config) ropeGain(name string, n, vHeads int) Weight {
	f := float32(c.RopeAttnFactor())
	if f == 1 {
		return Weight{}
	}
	g := make([]float32, (n+vHeads)*c.HeadDim)
	for i := range g {
		g[i] = 1
		if i < n*c.HeadDim && i%c.HeadDim < c.RopeDims {
			g[i] = f
		}
	}
	return Weight{Name: name, DType: graph.F32, Shape: graph.Shape{len(g)}, Data: graph.AsBytes(g)}
}
