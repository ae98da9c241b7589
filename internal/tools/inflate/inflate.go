// Package inflate pads a Llama-family model and its ReDrafter draft head to
// a larger shape that computes the same function, so that a tiny trained
// model can be benchmarked at the memory traffic and arithmetic of a real
// one (DESIGN.md §6).
//
// The construction, for a model of hidden size D, H heads of size d sharing
// KV key/value heads, padded to D′, H′ heads of size d′ = r·d, KV′ KV heads:
//
//   - Hidden vectors keep their D values in the first D coordinates; the
//     other D′−D stay exactly zero through every layer, because every matrix
//     that writes the residual stream (attn_output, ffn_down, the embedding)
//     has zero rows there.
//   - RMSNorm averages over D′ coordinates instead of D, so rms′ =
//     sqrt(D/D′)·rms when ε′ = ε·D/D′. Every norm weight is multiplied by
//     sqrt(D/D′) and the epsilon by D/D′: the normalised outputs are equal.
//   - Query head h = g·G + i (G = H/KV heads per KV head g) becomes head
//     g·G′ + i of KV head g, so grouped-query attention still pairs it with
//     its own keys and values. Unused heads have zero weights.
//   - Inside a head, rotary pair j (rotated at θ^(−2j/d)) becomes pair j·r
//     of the wider head, which RoPE rotates at θ^(−2jr/d′) = θ^(−2j/d): the
//     same angle, bit for bit, since 2jr/(dr) and 2j/d are the same rational.
//     Adjacent pairs (llama.cpp's GGUF layout) map 2j+b → 2jr+b; NeoX halves
//     map j → jr and d/2+j → d′/2+jr. Any rope_freqs factors move with their
//     pairs.
//   - Attention scales scores by 1/sqrt(d′) instead of 1/sqrt(d); the query
//     weights (and bias) are multiplied by sqrt(d′/d) to compensate.
//   - The FFN gains zero rows in gate and up (silu(0)·0 = 0) and zero
//     columns in down.
//   - Extra layers are placed between the original ones. Their q, k, v, gate
//     and up weights are random, so they cost real work, and their
//     attn_output and ffn_down are zero, so they add exactly nothing.
//
// The vocabulary cannot be padded without changing the softmax, so the
// embedding and output matrices keep their rows (a 32k-vocabulary model
// of the target shape moves more bytes per token than the inflated one).
//
// In float32 the inflated model's logits equal the original's up to
// rounding (relative 1e-6); the only inexact steps are the rescaled norm
// and query weights. In float16 the weights are rounded once more.
package inflate

import (
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

// Shape is the size of the model to inflate to.
type Shape struct {
	Dim     int // hidden size D′
	Heads   int // query heads H′; the head size is Dim/Heads
	KVHeads int // key/value heads
	Layers  int // transformer blocks
	FFN     int // SwiGLU intermediate size
}

// TinyLlama is TinyLlama-1.1B's shape (the llama.cpp anchor in
// reference/anchors.md uses it).
var TinyLlama = Shape{Dim: 2048, Heads: 32, KVHeads: 4, Layers: 22, FFN: 5632}

func (s Shape) String() string {
	return fmt.Sprintf("dim %d, %d heads of %d, %d KV heads, %d layers, FFN %d",
		s.Dim, s.Heads, s.Dim/max(s.Heads, 1), s.KVHeads, s.Layers, s.FFN)
}

// ShapeOf returns a model's shape.
func ShapeOf(c llama.Config) Shape {
	return Shape{Dim: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads, Layers: c.Layers, FFN: c.FFN}
}

// Plan maps every coordinate of a model onto the inflated shape.
type Plan struct {
	From, To llama.Config
	// LayerAt[i] is the inflated index of original layer i; the others are
	// the added identity layers.
	LayerAt []int

	ratio  int // To.HeadDim / From.HeadDim
	group  int // query heads per KV head, original
	group2 int // inflated
}

// NewPlan checks that c can be inflated to s and returns the mapping.
func NewPlan(c llama.Config, s Shape) (*Plan, error) {
	switch {
	case s.Dim <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Layers <= 0 || s.FFN <= 0:
		return nil, fmt.Errorf("inflate: target shape has non-positive sizes: %v", s)
	case s.Dim%s.Heads != 0:
		return nil, fmt.Errorf("inflate: dim %d is not a multiple of %d heads", s.Dim, s.Heads)
	case s.Heads%s.KVHeads != 0:
		return nil, fmt.Errorf("inflate: %d heads are not a multiple of %d KV heads", s.Heads, s.KVHeads)
	case s.Dim < c.Dim:
		return nil, fmt.Errorf("inflate: dim %d is smaller than the model's %d", s.Dim, c.Dim)
	case s.FFN < c.FFN:
		return nil, fmt.Errorf("inflate: FFN %d is smaller than the model's %d", s.FFN, c.FFN)
	case s.Layers < c.Layers:
		return nil, fmt.Errorf("inflate: %d layers are fewer than the model's %d", s.Layers, c.Layers)
	case s.KVHeads < c.KVHeads:
		return nil, fmt.Errorf("inflate: %d KV heads are fewer than the model's %d", s.KVHeads, c.KVHeads)
	case s.Heads/s.KVHeads < c.Heads/c.KVHeads:
		return nil, fmt.Errorf("inflate: %d query heads per KV head are fewer than the model's %d", s.Heads/s.KVHeads, c.Heads/c.KVHeads)
	case (s.Dim/s.Heads)%c.HeadDim != 0:
		return nil, fmt.Errorf("inflate: head size %d (dim %d / %d heads) is not a multiple of the model's %d, so RoPE frequencies cannot be kept",
			s.Dim/s.Heads, s.Dim, s.Heads, c.HeadDim)
	case c.RopeDims != c.HeadDim:
		return nil, fmt.Errorf("inflate: partial rotary embeddings (%d of %d dimensions) are not supported", c.RopeDims, c.HeadDim)
	case c.RopeScale.Type == "longrope":
		// Its factor sets and attention factor are per rotated pair of the
		// original heads; they are not remapped.
		return nil, fmt.Errorf("inflate: longrope RoPE scaling is not supported")
	case c.QKNorm:
		// A head padded with zeros has a smaller RMS: its norm would
		// change what q and k are.
		return nil, fmt.Errorf("inflate: %s's per-head q/k norms are not supported", c.Arch)
	case c.PostNorms || c.EmbedScale > 0:
		// Gemma: the embeddings' scale is √dim and the post-norms see the
		// padded width, so a wider model would compute something else.
		return nil, fmt.Errorf("inflate: %s is not supported", c.Arch)
	}
	p := &Plan{From: c, To: c, ratio: s.Dim / s.Heads / c.HeadDim, group: c.Heads / c.KVHeads, group2: s.Heads / s.KVHeads}
	t := &p.To
	t.Dim, t.Heads, t.KVHeads, t.Layers, t.FFN = s.Dim, s.Heads, s.KVHeads, s.Layers, s.FFN
	t.HeadDim = s.Dim / s.Heads
	t.RopeDims = t.HeadDim
	t.NormEps = float32(float64(c.NormEps) * float64(c.Dim) / float64(s.Dim))
	if ff := c.RopeScale.FreqFactors; len(ff) > 0 {
		nf := make([]float32, t.RopeDims/2)
		for j := range nf {
			nf[j] = 1
		}
		for j, f := range ff {
			nf[j*p.ratio] = f
		}
		t.RopeScale.FreqFactors = nf
	}
	for i := range c.Layers {
		p.LayerAt = append(p.LayerAt, i*s.Layers/c.Layers)
	}
	return p, nil
}

// NormScale multiplies every RMSNorm weight: sqrt(D/D′).
func (p *Plan) NormScale() float32 {
	return float32(math.Sqrt(float64(p.From.Dim) / float64(p.To.Dim)))
}

// QueryScale multiplies the query weights so the attention scale
// 1/sqrt(d′) acts as 1/sqrt(d): sqrt(d′/d).
func (p *Plan) QueryScale() float32 {
	return float32(math.Sqrt(float64(p.To.HeadDim) / float64(p.From.HeadDim)))
}

// headDim maps a coordinate inside an original head to the wider head.
func (p *Plan) headDim(d int) int {
	r := p.ratio
	if p.From.RopeNeoX {
		half, half2 := p.From.HeadDim/2, p.To.HeadDim/2
		if d < half {
			return d * r
		}
		return half2 + (d-half)*r
	}
	return (d/2)*2*r + d%2
}

// QRow maps row q of the original query projection ([Heads·HeadDim, Dim])
// to the inflated one; it is also the column map of attn_output.
func (p *Plan) QRow(q int) int {
	h, d := q/p.From.HeadDim, q%p.From.HeadDim
	g, i := h/p.group, h%p.group
	return (g*p.group2+i)*p.To.HeadDim + p.headDim(d)
}

// KVRow maps row k of the original key or value projection.
func (p *Plan) KVRow(k int) int {
	g, d := k/p.From.HeadDim, k%p.From.HeadDim
	return g*p.To.HeadDim + p.headDim(d)
}

func identity(i int) int { return i }
