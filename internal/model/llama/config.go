// Package llama is the Llama-family architecture (Llama 2/3, Vicuna,
// TinyLlama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and 3): its configuration, weights bound by checkpoint
// name, and the graph builder for prefill, decode and tree verification,
// which are one forward pass over N new tokens with different attention
// trees.
package llama

import (
	"fmt"
	"math"
)

// Config is the architecture of a loaded model, normalised from a GGUF
// file's metadata or an HF config.json.
type Config struct {
	Arch       string  // "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2" or "gemma3"
	Vocab      int     // vocabulary size
	Dim        int     // hidden size
	FFN        int     // intermediate size of the SwiGLU MLP
	Layers     int     // transformer blocks
	Heads      int     // query heads
	KVHeads    int     // key/value heads (GQA when < Heads)
	HeadDim    int     // per-head dimension
	NormEps    float32 // RMSNorm epsilon
	RopeTheta  float64 // RoPE base
	RopeDims   int     // rotated dimensions per head (= HeadDim unless partial)
	RopeNeoX   bool    // pair x[j] with x[j+d/2] (HF); else adjacent pairs (llama.cpp's permuted GGUF)
	RopeScale  RopeScaling
	Context    int  // trained context length
	QKVBias    bool // q/k/v projections carry biases (Qwen2)
	QKNorm     bool // each head of q and of k is RMS-normalised before RoPE (Qwen3)
	TiedOutput bool // the output projection is the embedding table
	// SlidingWindow, when positive, limits each query to the keys of the
	// last SlidingWindow positions, itself included (Mistral's
	// sliding_window), in the layers Window says. The KV cache stays
	// full-length: the window is a mask.
	SlidingWindow int

	// Gemma (gemma.go); zero values for every other architecture.
	//
	// SlidingPattern, when positive, makes every SlidingPattern-th layer
	// global (no window): layer i slides unless (i+1)%SlidingPattern == 0
	// (Gemma 3's sliding_window_pattern 6). 0: every layer slides.
	SlidingPattern int
	// RopeLocalTheta, when positive, is the RoPE base of the sliding
	// layers, unscaled (Gemma 3's rope_local_base_freq); RopeTheta and
	// RopeScale are the global layers'. 0: one table for every layer.
	RopeLocalTheta float64
	// EmbedScale, when positive, multiplies the embeddings (Gemma's
	// normalizer, √Dim; see gemmaEmbedScale for its rounding).
	EmbedScale float32
	// AttnScale, when positive, is attention's scale (Gemma's
	// query_pre_attn_scalar^-½); 0 is 1/√HeadDim.
	AttnScale float64
	PostNorms bool // RMSNorm on the attention's and the MLP's outputs before each residual add
	GeGLU     bool // the MLP is GELU(gate)·up (tanh approximation), not SiLU(gate)·up
	// AttnSoftCap and FinalSoftCap, when positive, cap the attention
	// scores and the logits as cap·tanh(x/cap) (Gemma 2's
	// attn_logit_softcapping and final_logit_softcapping).
	AttnSoftCap, FinalSoftCap float32
}

// Window is layer i's attention window, 0 for none.
func (c *Config) Window(i int) int {
	if c.SlidingPattern > 0 && (i+1)%c.SlidingPattern == 0 {
		return 0
	}
	return c.SlidingWindow
}

// localRoPE reports whether layer i rotates with the sliding layers' own
// table (LocalInvFreq) rather than InvFreq's.
func (c *Config) localRoPE(i int) bool { return c.RopeLocalTheta > 0 && c.Window(i) > 0 }

// LocalInvFreq is the RoPE inverse frequencies of the sliding layers when
// they have a base of their own (RopeLocalTheta): unscaled, as Gemma 3's
// rotary_emb_local. Without one it is InvFreq.
func (c *Config) LocalInvFreq() []float32 {
	if c.RopeLocalTheta <= 0 {
		return c.InvFreq()
	}
	l := *c
	l.RopeTheta, l.RopeScale = c.RopeLocalTheta, RopeScaling{}
	return l.InvFreq()
}

// attentionScale is AttnScale, or 1/√HeadDim.
func (c *Config) attentionScale() float32 {
	if c.AttnScale > 0 {
		return float32(c.AttnScale)
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// RopeScaling adjusts RoPE frequencies for long contexts.
type RopeScaling struct {
	Type   string  // "", "linear", "llama3" or "longrope"
	Factor float64 // linear and llama3
	// llama3 only.
	LowFreqFactor, HighFreqFactor float64
	// OriginalContext is the pretrained context (llama3, longrope).
	OriginalContext int
	// FreqFactors divide the frequencies one by one (GGUF rope_freqs.weight).
	FreqFactors []float32
	// longrope only (see rope.go): ShortFactors divide the frequencies one
	// by one when the context run with is at most OriginalContext,
	// LongFactors when it is longer; AttnFactor multiplies the rotated
	// dimensions of queries and keys (transformers' cos and sin).
	ShortFactors, LongFactors []float32
	AttnFactor                float64
}

// maxConfigSize bounds every count in a config, as GGUF's readers do.
const maxConfigSize = 1 << 31

// validate checks that the numbers describe a buildable model.
func (c *Config) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"vocabulary", c.Vocab}, {"hidden size", c.Dim}, {"intermediate size", c.FFN}, {"layer count", c.Layers},
		{"head count", c.Heads}, {"KV head count", c.KVHeads}, {"head dimension", c.HeadDim}, {"context length", c.Context}} {
		// GGUF stores these as 32-bit counts; a JSON config can say
		// anything, so it is held to the same range.
		if f.v > maxConfigSize {
			return fmt.Errorf("llama: %s %d is out of range (at most %d)", f.name, f.v, maxConfigSize)
		}
	}
	switch {
	case c.Vocab <= 0 || c.Dim <= 0 || c.FFN <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0:
		return fmt.Errorf("llama: config has non-positive sizes: %+v", *c)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("llama: %d query heads are not a multiple of %d KV heads", c.Heads, c.KVHeads)
	case c.RopeDims <= 0 || c.RopeDims%2 != 0 || c.RopeDims > c.HeadDim:
		return fmt.Errorf("llama: rope dimension %d is invalid for head dimension %d", c.RopeDims, c.HeadDim)
	case c.Context <= 0:
		return fmt.Errorf("llama: context length %d", c.Context)
	case !(c.NormEps > 0) || !(c.RopeTheta > 0):
		return fmt.Errorf("llama: rms epsilon %g and rope base %g must be positive", c.NormEps, c.RopeTheta)
	}
	return nil
}

// InvFreq returns the RoPE inverse frequencies with scaling applied, for
// the model's whole context (InvFreqFor).
func (c *Config) InvFreq() []float32 { return c.InvFreqFor(c.Context) }

// InvFreqFor returns the RoPE inverse frequencies with scaling applied
// for a run of at most context tokens: only longrope depends on it
// (longropeFactors).
func (c *Config) InvFreqFor(context int) []float32 {
	half := c.RopeDims / 2
	inv := make([]float32, half)
	s := c.RopeScale
	ext := c.longropeFactors(context)
	for j := range half {
		f := 1 / math.Pow(c.RopeTheta, float64(2*j)/float64(c.RopeDims))
		switch s.Type {
		case "linear":
			f /= s.Factor
		case "llama3":
			// Llama 3.1: long wavelengths are slowed by Factor, short ones
			// kept, and the band between interpolated.
			lowWave := float64(s.OriginalContext) / s.LowFreqFactor
			highWave := float64(s.OriginalContext) / s.HighFreqFactor
			wave := 2 * math.Pi / f
			switch {
			case wave > lowWave:
				f /= s.Factor
			case wave >= highWave:
				smooth := (float64(s.OriginalContext)/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f = (1-smooth)*f/s.Factor + smooth*f
			}
		}
		if j < len(s.FreqFactors) {
			f /= float64(s.FreqFactors[j])
		}
		if j < len(ext) {
			f /= float64(ext[j])
		}
		inv[j] = float32(f)
	}
	return inv
}
