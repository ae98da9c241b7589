package llamatest

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// Shapes of small real models, full layer widths, for random models in
// their shapes (WriteLlamaLikeGGUF). Layers and Vocab are left to the
// caller: a few layers and a tokenizer's vocabulary are enough to compare
// implementations, and cost far less than the real 16–32 layers and
// 32k–152k tokens.
var Shapes = map[string]Spec{
	// TinyLlama-1.1B: Llama 2's architecture, GQA 32/4.
	"tinyllama": {Arch: "llama", Dim: 2048, FFN: 5632, Heads: 32, KVHeads: 4, HeadDim: 64,
		NormEps: 1e-5, RopeTheta: 10000, Context: 2048},
	// Llama-3.2-1B: GQA 32/8, rope base 500000 with its llama3 frequency
	// factors (GGUF rope_freqs.weight).
	"llama3.2-1b": {Arch: "llama", Dim: 2048, FFN: 8192, Heads: 32, KVHeads: 8, HeadDim: 64,
		NormEps: 1e-5, RopeTheta: 500000, Context: 131072, RopeFreqs: true},
	// Qwen2.5-0.5B: q/k/v biases, GQA 14/2, tied embeddings.
	"qwen2.5-0.5b": {Arch: "qwen2", Dim: 896, FFN: 4864, Heads: 14, KVHeads: 2, HeadDim: 64,
		NormEps: 1e-6, RopeTheta: 1e6, Context: 32768, Tied: true},
	// Mistral-7B-v0.3's attention (GQA 32/8, heads of 128, rope base 1e6)
	// at half its width, so that a layer costs a quarter of the real one.
	// Written as "llama", as llama.cpp's converter writes Mistral.
	"mistral-half": {Arch: "llama", Dim: 2048, FFN: 7168, Heads: 16, KVHeads: 4, HeadDim: 128,
		NormEps: 1e-5, RopeTheta: 1e6, Context: 32768},
	// Mistral-7B-v0.3 (mistralai/Mistral-7B-v0.3's config.json) in full:
	// GQA 32/8, heads of 128, rope base 1e6, no sliding window. Written
	// as "llama", as llama.cpp's converter writes Mistral.
	"mistral-7b": {Arch: "llama", Dim: 4096, FFN: 14336, Heads: 32, KVHeads: 8, HeadDim: 128,
		NormEps: 1e-5, RopeTheta: 1e6, Context: 32768},
	// Gemma-2-2B (google/gemma-2-2b's config.json): heads of 256 (8 × 256
	// is not the hidden 2304), GQA 8/4, every other layer sliding over
	// 4096, soft-caps 50 and 30, query_pre_attn_scalar 256 (llama.cpp's
	// 1/√key_length), tied embeddings.
	"gemma2-2b": {Arch: "gemma2", Dim: 2304, FFN: 9216, Heads: 8, KVHeads: 4, HeadDim: 256,
		NormEps: 1e-6, RopeTheta: 10000, Context: 8192, Tied: true, SlidingWindow: 4096,
		AttnSoftCap: 50, FinalSoftCap: 30},
	// Phi-3-mini-4k (microsoft/Phi-3-mini-4k-instruct): 32 heads of 96,
	// no GQA, fused qkv and gate·up, sliding window 2047, NeoX RoPE.
	"phi3-mini": {Arch: "phi3", Dim: 3072, FFN: 8192, Heads: 32, KVHeads: 32, HeadDim: 96,
		NormEps: 1e-5, RopeTheta: 10000, Context: 4096, SlidingWindow: 2047},
	// Phi-3-mini-128k and Phi-3.5-mini (microsoft/Phi-3-mini-128k-instruct,
	// Phi-3.5-mini-instruct; the same widths): Phi-3-mini-4k's with
	// longrope from 4096 to 131072 tokens (attention factor
	// √(1 + ln 32/ln 4096) ≈ 1.19) and a window of 262144, which never
	// binds. The factors are FixedLongRope's, not the released ones:
	// the long set departs from the short one from the second pair on,
	// so a run that picks the wrong set shows within a few positions.
	"phi3-mini-128k": {Arch: "phi3", Dim: 3072, FFN: 8192, Heads: 32, KVHeads: 32, HeadDim: 96,
		NormEps: 1e-5, RopeTheta: 10000, Context: 131072, SlidingWindow: 262144,
		LongRope: FixedLongRope(96, 4096)},
	// Phi-4-mini (microsoft/Phi-4-mini-instruct): 24 heads of 128, GQA
	// 24/8, partial rotary over 96 of each head's 128 dimensions, longrope
	// from 4096 to 131072 tokens over those 96 (FixedLongRope's factors).
	// Untied, unlike the real model: llama.cpp c392e50's phi3 requires
	// output.weight (tied output is checked on qwen2.5-0.5b and gemma2-2b).
	"phi4-mini": {Arch: "phi3", Dim: 3072, FFN: 8192, Heads: 24, KVHeads: 8, HeadDim: 128, RopeDims: 96,
		NormEps: 1e-5, RopeTheta: 10000, Context: 131072, SlidingWindow: 262144,
		LongRope: FixedLongRope(96, 4096)},
}

// WriteLlamaLikeGGUF draws a model of shape s (Arch "llama", "mistral",
// "qwen2", "gemma2" or "phi3") from seed and writes it to path as an f32 GGUF file under
// llama.cpp's converter's tensor names and keys, which both redrafter
// and llama.cpp load; meta is appended to the metadata (a tokenizer's
// tokenizer.* keys: llama.cpp refuses a file without a vocabulary).
// Unlike Write it keeps nothing in memory but the file's bytes and
// writes no HF checkpoint, so that models of real widths stay cheap.
//
// The scales are those of a trained model's activations, chosen so that
// nothing saturates and every part moves the logits: embeddings N(0,1)
// (N(0, 0.1²) when tied, see below);
// matrices N(0, 1/fan_in), so a product keeps its input's RMS, with Q and
// K at 1.5× that, so attention over a few dozen positions is peaked but
// not one-hot; norm gains 1 + N(0, 0.1²); Qwen2's q and k biases N(0, 0.5²),
// its v bias N(0, 0.1²); the
// output projection at 4/√dim, so logits have a standard deviation of
// about 4 and the top two of a few hundred tokens are ≈1 apart on
// average (a real model's spread; the margins a quantized comparison
// needs are discussed in docs/FORMATS.md).
//
// Gemma 2 (as llama.cpp's converter writes it: four norms a layer,
// separate gate and up, the soft-caps and window as keys, norm gains
// stored as the 1+w they apply): embeddings N(0, (0.1/√dim)²), so that
// the √dim-scaled stream holds the token at RMS 0.1 as tied Qwen2's does;
// the output norm's gain 40·(1 + N(0, 0.1²)), so that the tied logits
// have Llama's spread before the final soft-cap; the post-norms' gains
// 1 + N(0, 0.1²) like the others. Phi-3 (llama.cpp's converter keeps
// Phi3's fused tensors): attn_qkv holds q, k and v's rows at their scales
// above, ffn_up gate's rows then up's; s.SlidingWindow is written as
// phi3.attention.sliding_window (0: the context), s.RopeDims (partial
// rotary) as phi3.rope.dimension_count and s.LongRope as llama.cpp's
// converter writes longrope (the two factor tensors and
// phi3.rope.scaling.attn_factor, no scaling type).
func WriteLlamaLikeGGUF(path string, s Spec, meta []formats.KV, seed uint64) error {
	switch s.Arch {
	case "llama", "mistral", "qwen2":
	case "gemma2":
		if !s.Tied || s.SlidingWindow <= 0 || !(s.AttnSoftCap > 0) || !(s.FinalSoftCap > 0) || s.RopeFreqs {
			return fmt.Errorf("llamatest: gemma2 has tied embeddings, a sliding window, both soft-caps and no rope_freqs")
		}
	case "phi3":
		if s.Tied || s.Heads*s.HeadDim != s.Dim || s.RopeFreqs {
			return fmt.Errorf("llamatest: phi3 has an output projection, heads of hidden/heads and no rope_freqs")
		}
		if l := s.LongRope; l != nil && (len(l.Short) != s.rotated()/2 || len(l.Long) != s.rotated()/2) {
			return fmt.Errorf("llamatest: longrope has %d and %d factors for %d rotated dimensions", len(l.Short), len(l.Long), s.rotated())
		}
	default:
		return fmt.Errorf("llamatest: WriteLlamaLikeGGUF writes llama, mistral, qwen2, gemma2 or phi3, not %q", s.Arch)
	}
	if s.Arch != "phi3" && (s.RopeDims != 0 || s.LongRope != nil) {
		return fmt.Errorf("llamatest: WriteLlamaLikeGGUF writes partial rotary and longrope for phi3 only")
	}
	gemma := s.Arch == "gemma2"
	r := rand.New(rand.NewPCG(seed, 0x11a3a))
	var ts []formats.Tensor
	add := func(name string, mean, scale float64, shape ...int) {
		v := make([]float32, graph.Shape(shape).Numel())
		for i := range v {
			v[i] = float32(mean + r.NormFloat64()*scale)
		}
		ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: graph.AsBytes(v)})
	}
	// fused draws one tensor of stacked row blocks, each of its own scale
	// (Phi-3's qkv and gate·up), in the order given.
	fused := func(name string, cols int, rows []int, scales []float64) {
		n := 0
		for _, nr := range rows {
			n += nr
		}
		v := make([]float32, 0, n*cols)
		for i, nr := range rows {
			for range nr * cols {
				v = append(v, float32(r.NormFloat64()*scales[i]))
			}
		}
		ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: []int{n, cols}, Data: graph.AsBytes(v)})
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	// Tied embeddings are small: the residual stream holds the token's
	// own row, and at N(0,1) its logit (|row|² through the final norm)
	// would outweigh every other by √dim, so a greedy model would repeat
	// its last token. At 0.1 the layers' outputs dominate the stream, as
	// in trained models.
	embScale := 1.0
	if s.Tied {
		embScale = 0.1
	}
	if gemma {
		// The table is multiplied by √dim on the way in.
		embScale *= inv(s.Dim)
	}
	add("token_embd.weight", 0, embScale, s.Vocab, s.Dim)
	add("output_norm.weight", 1, 0.1, s.Dim)
	if !s.Tied {
		add("output.weight", 0, 4*inv(s.Dim), s.Vocab, s.Dim)
	}
	if s.RopeFreqs {
		ts = append(ts, formats.Tensor{Name: "rope_freqs.weight", DType: formats.F32, Shape: []int{s.HeadDim / 2},
			Data: graph.AsBytes(llama3FreqFactors(s.HeadDim, s.RopeTheta))})
	}
	for l := range s.Layers {
		g := fmt.Sprintf("blk.%d.", l)
		add(g+"attn_norm.weight", 1, 0.1, s.Dim)
		if s.Arch == "phi3" {
			fused(g+"attn_qkv.weight", s.Dim, []int{q, kv, kv}, []float64{1.5 * inv(s.Dim), 1.5 * inv(s.Dim), inv(s.Dim)})
		} else {
			add(g+"attn_q.weight", 0, 1.5*inv(s.Dim), q, s.Dim)
			add(g+"attn_k.weight", 0, 1.5*inv(s.Dim), kv, s.Dim)
			add(g+"attn_v.weight", 0, inv(s.Dim), kv, s.Dim)
		}
		if s.Arch == "qwen2" {
			add(g+"attn_q.bias", 0, 0.5, q)
			add(g+"attn_k.bias", 0, 0.5, kv)
			// A value bias adds the same vector at every position;
			// large, it would pick the same tokens whatever the context.
			add(g+"attn_v.bias", 0, 0.1, kv)
		}
		add(g+"attn_output.weight", 0, inv(q), s.Dim, q)
		if gemma {
			add(g+"post_attention_norm.weight", 1, 0.1, s.Dim)
		}
		add(g+"ffn_norm.weight", 1, 0.1, s.Dim)
		if s.Arch == "phi3" {
			fused(g+"ffn_up.weight", s.Dim, []int{s.FFN, s.FFN}, []float64{inv(s.Dim), inv(s.Dim)})
		} else {
			add(g+"ffn_gate.weight", 0, inv(s.Dim), s.FFN, s.Dim)
			add(g+"ffn_up.weight", 0, inv(s.Dim), s.FFN, s.Dim)
		}
		add(g+"ffn_down.weight", 0, inv(s.FFN), s.Dim, s.FFN)
		if gemma {
			add(g+"post_ffw_norm.weight", 1, 0.1, s.Dim)
		}
	}
	if s.Tied {
		// The embedding table is the output projection: give it the
		// output's scale of logits through the final norm's gain.
		for i, t := range ts {
			if t.Name == "output_norm.weight" {
				v := make([]float32, s.Dim)
				for j := range v {
					v[j] = float32(4 * inv(s.Dim) / embScale * (1 + 0.1*r.NormFloat64()))
				}
				ts[i].Data = graph.AsBytes(v)
			}
		}
	}

	a := s.Arch + "."
	kvs := []formats.KV{
		{Key: "general.architecture", Value: s.Arch},
		// Not the architecture's name: llama.cpp gives Phi-3's special
		// tokens (<|end|> …) their attributes when general.name holds
		// "phi3", and fails to load a vocabulary without them.
		{Key: "general.name", Value: fmt.Sprintf("random model, %d layers of %d", s.Layers, s.Dim)},
		{Key: a + "vocab_size", Value: uint32(s.Vocab)},
		{Key: a + "context_length", Value: uint32(s.Context)},
		{Key: a + "embedding_length", Value: uint32(s.Dim)},
		{Key: a + "feed_forward_length", Value: uint32(s.FFN)},
		{Key: a + "block_count", Value: uint32(s.Layers)},
		{Key: a + "attention.head_count", Value: uint32(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + "rope.dimension_count", Value: uint32(s.rotated())},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: s.NormEps},
		{Key: a + "rope.freq_base", Value: float32(s.RopeTheta)},
	}
	if s.HeadDim != s.Dim/s.Heads {
		kvs = append(kvs, formats.KV{Key: a + "attention.key_length", Value: uint32(s.HeadDim)},
			formats.KV{Key: a + "attention.value_length", Value: uint32(s.HeadDim)})
	}
	switch s.Arch {
	case "gemma2":
		kvs = append(kvs, formats.KV{Key: a + "attention.sliding_window", Value: uint32(s.SlidingWindow)},
			formats.KV{Key: a + "attn_logit_softcapping", Value: float32(s.AttnSoftCap)},
			formats.KV{Key: a + "final_logit_softcapping", Value: float32(s.FinalSoftCap)})
	case "phi3":
		window := s.SlidingWindow
		if window <= 0 {
			window = s.Context
		}
		orig := s.Context
		if l := s.LongRope; l != nil {
			orig = l.OriginalContext
			kvs = append(kvs, formats.KV{Key: a + "rope.scaling.attn_factor", Value: float32(l.AttnFactor(s.Context))})
			ts = append(ts,
				formats.Tensor{Name: "rope_factors_long.weight", DType: formats.F32, Shape: []int{len(l.Long)}, Data: graph.AsBytes(slices.Clone(l.Long))},
				formats.Tensor{Name: "rope_factors_short.weight", DType: formats.F32, Shape: []int{len(l.Short)}, Data: graph.AsBytes(slices.Clone(l.Short))})
		}
		kvs = append(kvs, formats.KV{Key: a + "rope.scaling.original_context_length", Value: uint32(orig)},
			formats.KV{Key: a + "attention.sliding_window", Value: uint32(window)})
	}
	kvs = append(kvs, meta...)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("llamatest: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = formats.WriteGGUF(w, kvs, ts, 32)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("llamatest: %w", err)
	}
	return nil
}

// llama3FreqFactors are Llama 3.1/3.2's RoPE frequency factors (factor
// 32, low and high frequency factors 1 and 4, original context 8192), as
// transformers' _compute_llama3_parameters defines them: wavelengths
// shorter than 8192/4 are kept, longer than 8192/1 divided by 32, those
// between interpolated. GGUF stores the divisor of each frequency.
func llama3FreqFactors(headDim int, theta float64) []float32 {
	const factor, low, high, orig = 32.0, 1.0, 4.0, 8192.0
	out := make([]float32, headDim/2)
	for i := range out {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(headDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < orig/high:
			out[i] = 1
		case wavelen > orig/low:
			out[i] = factor
		default:
			smooth := (orig/wavelen - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}

// rotated is the rotated dimensions of each head: RopeDims, else all.
func (s Spec) rotated() int {
	if s.RopeDims > 0 {
		return s.RopeDims
	}
	return s.HeadDim
}
