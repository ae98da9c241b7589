package llama

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// longropeFactors draws n factors in [lo, hi), as float32.
func longropeFactors(r *rand.Rand, n int, lo, hi float64) []float32 {
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return f
}

// ropeCases are tiny Phi-3s with the rope variants of the real ones:
// Phi-3-mini-128k / Phi-3.5-mini (longrope over the whole head),
// Phi-4-mini (longrope over 3/4 of each head: head 16, 12 rotated), the
// partial rotary alone, and Phi-3-mini-4k's sliding window. Contexts are
// 48 extended from an original 16 (longrope's short factors for a run of
// at most 16 tokens, the long ones beyond).
func ropeCases() []struct {
	name string
	spec llamatest.Spec
} {
	r := rand.New(rand.NewPCG(33, 2))
	base := llamatest.Spec{Arch: "phi3", Vocab: 64, Dim: 48, FFN: 80, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 12,
		NormEps: 1e-5, RopeTheta: 10000, Context: 48}
	partial := base
	partial.Dim, partial.HeadDim, partial.RopeDims = 64, 16, 12
	long := func(s llamatest.Spec) llamatest.Spec {
		n := s.HeadDim / 2
		if s.RopeDims > 0 {
			n = s.RopeDims / 2
		}
		s.LongRope = &llamatest.LongRope{OriginalContext: 16,
			Short: longropeFactors(r, n, 1, 2), Long: longropeFactors(r, n, 1, 12)}
		return s
	}
	window := base
	window.SlidingWindow = 5
	return []struct {
		name string
		spec llamatest.Spec
	}{{"longrope", long(base)}, {"longrope-partial", long(partial)}, {"partial", partial}, {"window", window}}
}

// ropeConfig is the Config a ropeCases spec must load as.
func ropeConfig(s llamatest.Spec) Config {
	c := Config{Arch: "phi3", Vocab: s.Vocab, Dim: s.Dim, FFN: s.FFN, Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, NormEps: s.NormEps, RopeTheta: s.RopeTheta, RopeDims: s.HeadDim, RopeNeoX: true, Context: s.Context,
		SlidingWindow: s.SlidingWindow}
	if s.RopeDims > 0 {
		c.RopeDims = s.RopeDims
	}
	if l := s.LongRope; l != nil {
		c.RopeScale = RopeScaling{Type: "longrope", OriginalContext: l.OriginalContext, ShortFactors: l.Short, LongFactors: l.Long,
			AttnFactor: float64(float32(l.AttnFactor(s.Context)))}
	}
	return c
}

// Longrope, partial rotary and Phi-3's sliding window, from GGUF and from
// HF alike (the same Config, the same logits to the bit), give the float64
// reference's logits within 1e-5 of the largest and its greedy tokens, on
// both CPU backends, for a run within the original context (longrope's
// short factors) and one beyond it (the long factors), 20 tokens past the
// window. The reference takes the factors and the attention factor
// (√(1 + ln 3/ln 16) ≈ 1.18 here) from the spec, not from the loader.
func TestPhi3RopeMatchesReference(t *testing.T) {
	for _, tc := range ropeCases() {
		t.Run(tc.name, func(t *testing.T) {
			ck, err := llamatest.Write(t.TempDir(), tc.spec, nil, 11)
			if err != nil {
				t.Fatal(err)
			}
			c := ropeConfig(tc.spec)
			for _, path := range []string{ck.GGUF, ck.HF} {
				m, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				got := m.Model.Config
				m.Close()
				if !reflect.DeepEqual(got, c) {
					t.Fatalf("%s: config\n %+v, want\n %+v", filepath.Base(path), got, c)
				}
			}
			// The short run: 12 tokens in a context of 16, the original.
			// The long run: 20 tokens in the model's 48.
			for _, run := range []struct {
				context int
				tokens  []int32
			}{{16, []int32{3, 17, 5, 63, 0, 22, 8, 41, 9, 9, 30, 1}}, {48, []int32{3, 17, 5, 63, 0, 22, 8, 41, 9, 9, 30, 1, 44, 2, 7, 7, 13, 60, 28, 4}}} {
				var ext []float64
				attn := 1.0
				if l := tc.spec.LongRope; l != nil {
					f := l.Short
					if run.context > l.OriginalContext {
						f = l.Long
					}
					for _, v := range f {
						ext = append(ext, float64(v))
					}
					attn = float64(float32(l.AttnFactor(tc.spec.Context)))
				}
				ints := make([]int, len(run.tokens))
				for i, v := range run.tokens {
					ints[i] = int(v)
				}
				want := phi3ForwardRope(c, ck.Weights, ints, ext, attn)
				prompt := run.tokens[:3]
				seq := ints[:3:3]
				var wantTokens []int32
				for len(seq) < len(run.tokens) {
					rows := phi3ForwardRope(c, ck.Weights, seq, ext, attn)
					last := rows[len(rows)-1]
					best := 0
					for i, v := range last {
						if v > last[best] {
							best = i
						}
					}
					wantTokens = append(wantTokens, int32(best))
					seq = append(seq, best)
				}
				for _, be := range []graph.Backend{cpu.NewReference(), cpu.New(2)} {
					var logits [][]float32
					for _, path := range []string{ck.GGUF, ck.HF} {
						l, toks := ropeRun(t, path, be, run.context, run.tokens, prompt, len(wantTokens))
						var worst, scale float64
						for tt := range want {
							for v := range want[tt] {
								scale = math.Max(scale, math.Abs(want[tt][v]))
								worst = math.Max(worst, math.Abs(float64(l[tt*c.Vocab+v])-want[tt][v]))
							}
						}
						if worst/scale > 1e-5 {
							t.Errorf("%s on %s, context %d: logits differ from the reference by %g of %g",
								filepath.Base(path), be.Name(), run.context, worst/scale, scale)
						}
						if !slices.Equal(toks, wantTokens) {
							t.Errorf("%s on %s, context %d: greedy tokens\n %v, reference\n %v", filepath.Base(path), be.Name(), run.context, toks, wantTokens)
						}
						logits = append(logits, l)
					}
					if !bitsEqual(logits[0], logits[1]) {
						t.Errorf("on %s, context %d: GGUF and HF logits differ by %g", be.Name(), run.context, maxRel(logits[0], logits[1]))
					}
				}
			}
		})
	}
}

// ropeRun loads path on be for runs of context tokens (Runner.UseContext)
// and returns the logits of tokens in one pass, and n greedy tokens after
// prompt decoded one at a time.
func ropeRun(t *testing.T, path string, be graph.Backend, context int, tokens, prompt []int32, n int) ([]float32, []int32) {
	t.Helper()
	ck, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, be)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.UseContext(context)
	vocab := ck.Model.Config.Vocab
	logits := make([]float32, len(tokens)*vocab)
	s, err := r.NewState(context)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Forward(Chain(tokens, true), logits, nil); err != nil {
		t.Fatal(err)
	}
	g, err := r.NewState(context)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	last := make([]float32, vocab)
	batch, out := Chain(prompt, false), []int32(nil)
	for range n {
		if err := g.Forward(batch, last, nil); err != nil {
			t.Fatal(err)
		}
		g.Advance(len(batch.Tokens))
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		out = append(out, int32(best))
		batch = Chain([]int32{int32(best)}, false)
	}
	return logits, out
}

// editHFConfig sets key to val in the checkpoint's config.json (nil
// deletes it).
func editHFConfig(t *testing.T, dir string, edit map[string]any) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, v := range edit {
		cfg[k] = v
	}
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editGGUF rewrites a GGUF file with its metadata edited (a nil value
// deletes the key, a new key is added) and tensors dropped by name.
func editGGUF(t *testing.T, path string, edit map[string]any, drop ...string) string {
	t.Helper()
	g, err := formats.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var kvs []formats.KV
	seen := map[string]bool{}
	for _, kv := range g.KVs() {
		if v, ok := edit[kv.Key]; ok {
			seen[kv.Key] = true
			if v == nil {
				continue
			}
			kv.Value = v
		}
		kvs = append(kvs, kv)
	}
	for k, v := range edit {
		if !seen[k] && v != nil {
			kvs = append(kvs, formats.KV{Key: k, Value: v})
		}
	}
	ts := slices.DeleteFunc(slices.Clone(g.Tensors), func(tn formats.Tensor) bool { return slices.Contains(drop, tn.Name) })
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kvs, ts, 32); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "edited.gguf")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The loaders read longrope as the checkpoints state it: HF's explicit
// attention_factor, or the factor derived from rope_scaling's factor when
// there is no original_max_position_embeddings (transformers' rule);
// GGUF's factor derived when rope.scaling.attn_factor is absent. What they
// cannot run they refuse by name: a RoPE scaling type other than none,
// linear or longrope in GGUF (yarn was ignored before), one factor tensor
// without the other, factor lists of the wrong length, partial rotary
// outside phi3.
func TestRopeScalingLoadsAndRefusals(t *testing.T) {
	spec := ropeCases()[0].spec
	ck, err := llamatest.Write(t.TempDir(), spec, nil, 11)
	if err != nil {
		t.Fatal(err)
	}
	open := func(path string) (RopeScaling, error) {
		m, err := Open(path)
		if err != nil {
			return RopeScaling{}, err
		}
		defer m.Close()
		return m.Model.Config.RopeScale, nil
	}
	// GGUF without the attention factor: transformers' default.
	rs, err := open(editGGUF(t, ck.GGUF, map[string]any{"phi3.rope.scaling.attn_factor": nil}))
	if want := float64(float32(math.Sqrt(1 + math.Log(3)/math.Log(16)))); err != nil || rs.AttnFactor != want {
		t.Errorf("gguf without attn_factor: %v, factor %v, want %v", err, rs.AttnFactor, want)
	}
	for _, tc := range []struct {
		path string
		want string
	}{
		{editGGUF(t, ck.GGUF, map[string]any{"phi3.rope.scaling.type": "yarn"}), `rope.scaling.type "yarn" is not supported`},
		{editGGUF(t, ck.GGUF, nil, "rope_factors_short.weight"), "needs both rope_factors_long.weight and rope_factors_short.weight"},
		{editGGUF(t, ck.GGUF, map[string]any{"phi3.rope.scaling.type": "linear", "phi3.rope.scaling.factor": float32(2)}), "no other scaling"},
		{editGGUF(t, ck.GGUF, map[string]any{"phi3.rope.scaling.type": "longrope"}, "rope_factors_short.weight", "rope_factors_long.weight"), "without rope_factors_long.weight"},
		{editGGUF(t, ck.GGUF, map[string]any{"phi3.rope.dimension_count": uint32(8)}), "6 short and 6 long factors for 8 rotated dimensions"},
	} {
		if _, err := open(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gguf: error %v, want one containing %q", err, tc.want)
		}
	}
	// A yarn GGUF of another architecture is refused too.
	lw := filepath.Join(t.TempDir(), "llama.gguf")
	if err := llamatest.WriteLlamaLikeGGUF(lw, llamatest.Spec{Arch: "llama", Vocab: 32, Dim: 32, FFN: 48, Layers: 1, Heads: 2, KVHeads: 2,
		HeadDim: 16, NormEps: 1e-5, RopeTheta: 10000, Context: 64}, nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := open(editGGUF(t, lw, map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4)})); err == nil ||
		!strings.Contains(err.Error(), `rope.scaling.type "yarn"`) {
		t.Errorf("llama yarn gguf: %v", err)
	}

	hfCase := func(edit map[string]any) (RopeScaling, error) {
		dir := t.TempDir()
		c2, err := llamatest.Write(dir, spec, nil, 11)
		if err != nil {
			t.Fatal(err)
		}
		editHFConfig(t, c2.HF, edit)
		return open(c2.HF)
	}
	short := make([]float64, 6)
	for i := range short {
		short[i] = 1
	}
	rs, err = hfCase(map[string]any{"rope_scaling": map[string]any{"type": "su", "short_factor": short, "long_factor": short, "attention_factor": 1.5}})
	if err != nil || rs.AttnFactor != 1.5 || rs.OriginalContext != 16 {
		t.Errorf("hf with attention_factor 1.5: %v, %+v", err, rs)
	}
	rs, err = hfCase(map[string]any{"original_max_position_embeddings": nil,
		"rope_scaling": map[string]any{"type": "longrope", "short_factor": short, "long_factor": short, "factor": 8}})
	if want := float64(float32(math.Sqrt(1 + math.Log(8)/math.Log(48)))); err != nil || rs.AttnFactor != want || rs.OriginalContext != 48 {
		t.Errorf("hf with factor 8 and no original: %v, %+v, want factor %v, original 48", err, rs, want)
	}
	for _, tc := range []struct {
		edit map[string]any
		want string
	}{
		{map[string]any{"rope_scaling": map[string]any{"type": "longrope", "short_factor": short[:5], "long_factor": short}}, "5 short and 6 long factors"},
		{map[string]any{"rope_scaling": map[string]any{"type": "longrope", "short_factor": short, "long_factor": []float64{1, 1, 1, 1, 1, 0}}}, "factor 0 is not a positive number"},
		{map[string]any{"rope_scaling": map[string]any{"type": "yarn", "factor": 4}}, `rope_type "yarn" is not supported`},
		{map[string]any{"model_type": "llama", "rope_scaling": nil, "partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5 is only supported for phi3"},
	} {
		if _, err := hfCase(tc.edit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("hf %v: error %v, want one containing %q", tc.edit, err, tc.want)
		}
	}
}

// transformers v5's config.json (rope_parameters holding longrope and
// partial_rotary_factor) loads as the same model as the older layout.
func TestPhi3RopeParametersV5(t *testing.T) {
	h, err := formats.ReadHFConfig(filepath.Join("..", "formats", "testdata", "hfconfig", "synthetic-phi3-longrope-v5.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := configFromHF(h)
	if err != nil {
		t.Fatal(err)
	}
	want := RopeScaling{Type: "longrope", OriginalContext: 512, AttnFactor: 1.25,
		ShortFactors: []float32{1, 1.5, 2, 2.5, 3, 3.5}, LongFactors: []float32{1, 2, 4, 8, 16, 32}}
	if c.RopeDims != 12 || c.SlidingWindow != 0 || !reflect.DeepEqual(c.RopeScale, want) {
		t.Errorf("rope dims %d, window %d, scaling %+v; want 12, 0, %+v", c.RopeDims, c.SlidingWindow, c.RopeScale, want)
	}
}
