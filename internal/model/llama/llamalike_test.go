package llama

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// The random models of llamatest.WriteLlamaLikeGGUF load as the
// architecture they name, with what differs: Llama 3's frequency factors
// (1 for short wavelengths, 32 for long ones, between in between), an
// explicit head size, Qwen2's biases, NeoX pairs and tied output, Gemma
// 2's window, soft-caps, embedding and attention scales, post-norms and
// GeGLU, Phi-3's fused tensors and window, partial rotary and longrope; and
// their logits spread as the scales promise (a standard deviation near 4)
// and do not favour repeating the input token.
func TestLlamaLikeGGUF(t *testing.T) {
	for _, s := range []llamatest.Spec{
		{Arch: "llama", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, NormEps: 1e-5,
			RopeTheta: 500000, Context: 128, RopeFreqs: true},
		{Arch: "mistral", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 16, NormEps: 1e-5,
			RopeTheta: 1e6, Context: 128},
		{Arch: "qwen2", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-6,
			RopeTheta: 1e6, Context: 128, Tied: true},
		{Arch: "gemma2", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, NormEps: 1e-6,
			RopeTheta: 10000, Context: 128, Tied: true, SlidingWindow: 6, AttnSoftCap: 50, FinalSoftCap: 30},
		{Arch: "phi3", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5,
			RopeTheta: 10000, Context: 128, SlidingWindow: 6},
		{Arch: "phi3", Vocab: 96, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5,
			RopeTheta: 10000, Context: 128, RopeDims: 12, LongRope: llamatest.FixedLongRope(12, 32)},
	} {
		path := filepath.Join(t.TempDir(), s.Arch+".gguf")
		if err := llamatest.WriteLlamaLikeGGUF(path, s, nil, 5); err != nil {
			t.Fatal(err)
		}
		ck, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		c := ck.Model.Config
		if c.Arch != s.Arch || c.Dim != s.Dim || c.FFN != s.FFN || c.Layers != s.Layers || c.Heads != s.Heads ||
			c.KVHeads != s.KVHeads || c.HeadDim != s.HeadDim || c.Vocab != s.Vocab || c.QKVBias != (s.Arch == "qwen2") ||
			c.RopeNeoX != (s.Arch != "llama" && s.Arch != "mistral") || c.TiedOutput != s.Tied || c.RopeTheta != s.RopeTheta ||
			c.SlidingWindow != s.SlidingWindow {
			t.Errorf("%s: config %+v", s.Arch, c)
		}
		rot := s.HeadDim
		if s.RopeDims > 0 {
			rot = s.RopeDims
		}
		if l := s.LongRope; c.RopeDims != rot || (l != nil) != (c.RopeScale.Type == "longrope") || l != nil &&
			(!slices.Equal(c.RopeScale.ShortFactors, l.Short) || !slices.Equal(c.RopeScale.LongFactors, l.Long) ||
				c.RopeScale.OriginalContext != l.OriginalContext || c.RopeScale.AttnFactor != float64(float32(l.AttnFactor(s.Context)))) {
			t.Errorf("%s: rotary %d, scaling %+v", s.Arch, c.RopeDims, c.RopeScale)
		}
		gemma := s.Arch == "gemma2"
		if gemma != (c.PostNorms && c.GeGLU && c.SlidingPattern == 2 && c.AttnSoftCap == float32(s.AttnSoftCap) &&
			c.FinalSoftCap == float32(s.FinalSoftCap) && c.EmbedScale == 8 && c.AttnScale == 1/math.Sqrt(32)) {
			t.Errorf("%s: gemma's config %+v", s.Arch, c)
		}
		ff := c.RopeScale.FreqFactors
		if s.RopeFreqs {
			between := 0
			for i, f := range ff {
				if f < 1 || f > 32 || (i > 0 && f < ff[i-1]) {
					t.Errorf("%s: frequency factors %v: want 1 to 32, rising", s.Arch, ff)
					break
				}
				if f > 1 && f < 32 {
					between++
				}
			}
			if len(ff) != s.HeadDim/2 || ff[0] != 1 || ff[len(ff)-1] != 32 || between == 0 {
				t.Errorf("%s: frequency factors %v", s.Arch, ff)
			}
		} else if ff != nil {
			t.Errorf("%s: frequency factors %v in a file without them", s.Arch, ff)
		}
		r, err := Bind(ck.Model, cpu.NewReference())
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.NewState(16)
		if err != nil {
			t.Fatal(err)
		}
		tokens := []int32{3, 17, 5, 40, 9, 71, 22, 8}
		out := make([]float32, len(tokens)*s.Vocab)
		if err := st.Forward(Chain(tokens, true), out, nil); err != nil {
			t.Fatal(err)
		}
		// A greedy model must not just repeat its input (a tied
		// embedding of N(0,1) rows made every token its own argmax).
		repeats := 0
		for i, tok := range tokens {
			row := out[i*s.Vocab : (i+1)*s.Vocab]
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			if int32(best) == tok {
				repeats++
			}
		}
		if repeats > 2 {
			t.Errorf("%s: %d of %d positions predict their own token", s.Arch, repeats, len(tokens))
		}
		var sum, sq float64
		for _, v := range out {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		n := float64(len(out))
		if sd := math.Sqrt(sq/n - (sum/n)*(sum/n)); sd < 2.5 || sd > 6 {
			t.Errorf("%s: logits have a standard deviation of %.2f, want about 4", s.Arch, sd)
		}
		st.Close()
		r.Close()
		ck.Close()
	}
}
