package redrafter

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/sample"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// randomModel writes a GGUF with stories260K's tokenizer and random weights
// of the given shape, so the ReDrafter exactness tests run on models other
// than the one the code was developed on.
func randomModel(t testing.TB, dim, layers, heads, kvHeads, ffn int, seed uint64) string {
	t.Helper()
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	return writeRandomModel(t, g.KVs(), 512, dim, layers, heads, kvHeads, ffn, seed)
}

// tinyVocabModel is a random model over a 16-token vocabulary: <unk>, <s>,
// </s> and the pieces ▁a … ▁m.
func tinyVocabModel(t testing.TB, seed uint64) string {
	const vocab = 16
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	scores := []float32{0, 0, 0}
	for i := range vocab - 3 {
		tokens = append(tokens, "▁"+string(rune('a'+i)))
		types = append(types, 1)
		scores = append(scores, float32(-i))
	}
	kv := []formats.KV{
		{Key: "general.architecture", Value: "llama"}, {Key: "llama.context_length", Value: uint32(256)},
		{Key: "llama.embedding_length", Value: uint32(16)}, {Key: "llama.block_count", Value: uint32(2)},
		{Key: "llama.feed_forward_length", Value: uint32(32)}, {Key: "llama.attention.head_count", Value: uint32(2)},
		{Key: "llama.attention.head_count_kv", Value: uint32(1)}, {Key: "llama.rope.dimension_count", Value: uint32(8)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "tokenizer.ggml.model", Value: "llama"}, {Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores}, {Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)}, {Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
	}
	return writeRandomModel(t, kv, vocab, 16, 2, 2, 1, 32, seed)
}

func writeRandomModel(t testing.TB, kv []formats.KV, vocab, dim, layers, heads, kvHeads, ffn int, seed uint64) string {
	t.Helper()
	kv = slices.Clone(kv)
	set := map[string]any{
		"llama.embedding_length": uint32(dim), "llama.block_count": uint32(layers),
		"llama.attention.head_count": uint32(heads), "llama.attention.head_count_kv": uint32(kvHeads),
		"llama.feed_forward_length": uint32(ffn), "llama.rope.dimension_count": uint32(dim / heads),
	}
	for i := range kv {
		if v, ok := set[kv[i].Key]; ok {
			kv[i].Value = v
		}
	}
	r := rand.New(rand.NewPCG(seed, 7))
	tensor := func(name string, scale float64, shape ...int) formats.Tensor {
		v := make([]float32, graph.Shape(shape).Numel())
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		if len(shape) == 1 {
			for i := range v {
				v[i] = 1 + v[i]
			}
		}
		return formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: append([]byte(nil), graph.AsBytes(v)...)}
	}
	hd := dim / heads
	ts := []formats.Tensor{tensor("token_embd.weight", 1, vocab, dim), tensor("output_norm.weight", 0.1, dim),
		tensor("output.weight", 0.5, vocab, dim)}
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, tensor(p+"attn_norm.weight", 0.1, dim), tensor(p+"attn_q.weight", 0.3, heads*hd, dim),
			tensor(p+"attn_k.weight", 0.3, kvHeads*hd, dim), tensor(p+"attn_v.weight", 0.3, kvHeads*hd, dim),
			tensor(p+"attn_output.weight", 0.3, dim, heads*hd), tensor(p+"ffn_norm.weight", 0.1, dim),
			tensor(p+"ffn_gate.weight", 0.3, ffn, dim), tensor(p+"ffn_up.weight", 0.3, ffn, dim),
			tensor(p+"ffn_down.weight", 0.3, dim, ffn))
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kv, ts, 32); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("random-%d.gguf", seed))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// randomHead writes a random draft head for e's model and loads it.
func randomHead(t testing.TB, e *Engine, rnn bool, layers int, exit int, seed uint64) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("head-%d", seed))
	h := drafter.NewRandom(drafter.Config{VocabSize: e.cfg.Vocab, HiddenSize: e.cfg.Dim, ExitDim: exit,
		NumDraftLayers: layers, RNN: rnn}, seed)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := e.LoadDrafter(dir); err != nil {
		t.Fatal(err)
	}
}

var specPrompts = []string{"", "Once upon a time", "Lily and Tom went to the park. They saw", "The cat"}

// Greedy ReDrafter output equals greedy autoregressive output token for
// token, for every beam shape, on stories260K and on random models with
// random draft heads (RNN and not, with and without an input projection).
func TestReDrafterGreedyEqualsAutoregressive(t *testing.T) {
	type model struct {
		name    string
		path    string
		kvCache string
		head    func(e *Engine)
	}
	models := []model{
		{"stories260K", stories, "", func(e *Engine) { randomHead(t, e, true, 2, 0, 1) }},
		{"random-d32", randomModel(t, 32, 2, 4, 2, 48, 11), "", func(e *Engine) { randomHead(t, e, true, 1, 48, 2) }},
		{"random-d48", randomModel(t, 48, 3, 6, 6, 64, 12), "", func(e *Engine) { randomHead(t, e, false, 0, 0, 3) }},
		// An f16 KV cache, with 32-dimensional heads.
		{"random-d128-f16kv", randomModel(t, 128, 2, 4, 2, 96, 13), "f16", func(e *Engine) { randomHead(t, e, true, 1, 0, 4) }},
	}
	// make test-all: every width and length; make test: 15 of the 30
	// shapes (one beam and many, short and long drafts), a third of a
	// minute of a quiet 2-core machine instead of two thirds.
	widths := testenv.Subset([]int{1, 2, 4, 8, 16, 50}, 0, 1, 2, 4, 5)
	lengths := testenv.Subset([]int{2, 3, 4, 5, 6}, 0, 1, 3)
	if testing.Short() {
		widths, lengths = []int{1, 4, 50}, []int{2, 5}
	}
	for _, m := range models {
		e, err := Load(m.path, Options{Backend: "cpu", KVCache: m.kvCache})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		m.head(e)
		_, steps, tokens := checkGreedyEqual(t, e, m.name, 48, widths, lengths)
		t.Logf("%s: %d steps, %d drafts accepted", m.name, steps, tokens-steps)
	}
}

// checkGreedyEqual runs every prompt of specPrompts autoregressively and then
// with ReDrafter at every (W, L), failing on the first token that differs.
// It returns the autoregressive tokens per prompt and the ReDrafter steps and
// tokens it saw.
func checkGreedyEqual(t *testing.T, e *Engine, name string, maxTokens int, widths, lengths []int) (want map[string][]int32, steps, tokens int) {
	t.Helper()
	want = map[string][]int32{}
	for _, p := range specPrompts {
		res, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens, Draft: DraftOptions{Off: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = res.Tokens
	}
	for _, w := range widths {
		for _, l := range lengths {
			for _, p := range specPrompts {
				res, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens,
					Draft: DraftOptions{BeamWidth: w, BeamLength: l}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Tokens, want[p]) {
					t.Fatalf("%s W=%d L=%d prompt %q:\n redrafter %v\n autoregr. %v", name, w, l, p, res.Tokens, want[p])
				}
				steps += res.Stats.Draft.Steps
				tokens += res.Stats.Draft.Tokens
			}
		}
	}
	return want, steps, tokens
}

// oracleSource proposes beams that follow the model's true greedy
// continuation for a random number of tokens and then go astray, so that
// every accepted length and every branch point is exercised.
type oracleSource struct {
	truth []int32 // the greedy continuation, starting with the first generated token
	pos   map[int32][]int
	r     *rand.Rand
	vocab int
	next  int // index in truth of the current init token
}

func (o *oracleSource) BeamSearch(h []float32, init int32, w, l int, keep bool) (*drafter.Beams, error) {
	b := &drafter.Beams{Tokens: make([][]int32, w)}
	for i := range w {
		beam := []int32{init}
		good := o.r.IntN(l)
		for d := 1; d < l; d++ {
			if d <= good && o.next+d < len(o.truth) {
				beam = append(beam, o.truth[o.next+d])
			} else {
				beam = append(beam, int32(3+o.r.IntN(o.vocab-3)))
			}
		}
		b.Tokens[i] = beam
	}
	return b, nil
}

func TestReDrafterDeepAcceptanceEqualsAutoregressive(t *testing.T) {
	for _, kv := range []string{"f32", "f16"} {
		t.Run("kv="+kv, func(t *testing.T) { deepAcceptance(t, load(t, Options{KVCache: kv})) })
	}
}

// deepAcceptance checks greedy ReDrafter with an oracle drafter against
// autoregressive decoding on e.
func deepAcceptance(t *testing.T, e *Engine) {
	for _, p := range specPrompts {
		ref, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: 120}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, shape := range [][2]int{{1, 6}, {3, 4}, {8, 5}, {16, 3}} {
			src := &oracleSource{truth: ref.Tokens, r: rand.New(rand.NewPCG(uint64(shape[0]), 9)), vocab: e.cfg.Vocab}
			// Track where the decoder is in the truth through the init tokens it passes.
			tracking := &trackingSource{o: src}
			e.draftSource = tracking
			res, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: 120,
				Draft: DraftOptions{BeamWidth: shape[0], BeamLength: shape[1]}}, nil)
			e.draftSource = nil
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, ref.Tokens) {
				t.Fatalf("W=%d L=%d prompt %q:\n redrafter %v\n autoregr. %v", shape[0], shape[1], p, res.Tokens, ref.Tokens)
			}
			if tps := res.Stats.Draft.TokensPerStep(); tps < 1.5 {
				t.Errorf("W=%d L=%d: %.2f tokens per step: the oracle's drafts were not accepted", shape[0], shape[1], tps)
			}
		}
	}
}

// trackingSource advances the oracle to the init token's place in the truth.
type trackingSource struct {
	o       *oracleSource
	emitted int
}

func (s *trackingSource) BeamSearch(h []float32, init int32, w, l int, keep bool) (*drafter.Beams, error) {
	for s.o.next < len(s.o.truth) && s.o.truth[s.o.next] != init {
		s.o.next++
	}
	b, err := s.o.BeamSearch(h, init, w, l, keep)
	return b, err
}

func TestReDrafterRefusesBadShapes(t *testing.T) {
	e := load(t, Options{Context: 64})
	randomHead(t, e, true, 1, 0, 5)
	for _, c := range []struct {
		o    DraftOptions
		want string
	}{
		{DraftOptions{BeamWidth: 51, BeamLength: 4}, "beam width 51"},
		{DraftOptions{BeamWidth: 2, BeamLength: 1}, "beam length 1"},
		{DraftOptions{BeamWidth: 50, BeamLength: 3}, "more than the context of 64"},
		{DraftOptions{BeamWidth: 2, BeamLength: 3, Accept: "maybe"}, "unknown acceptance rule"},
	} {
		_, err := e.Generate(context.Background(), "", GenerateOptions{MaxTokens: 4, Draft: c.o}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
	}
}

func TestDrafterForAnotherModelIsRefused(t *testing.T) {
	e := load(t, Options{})
	for _, c := range []struct {
		cfg  drafter.Config
		want string
	}{
		{drafter.Config{VocabSize: 32000, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, "vocabulary has 32000 tokens but the model's has 512"},
		{drafter.Config{VocabSize: 512, HiddenSize: 128, NumDraftLayers: 1, RNN: true}, "hidden size 128 but the model's is 64"},
	} {
		dir := t.TempDir()
		if err := drafter.NewRandom(c.cfg, 1).Save(dir); err != nil {
			t.Fatal(err)
		}
		if err := e.LoadDrafter(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadDrafter(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := e.LoadDrafter(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a draft head") {
		t.Errorf("empty dir: %v", err)
	}
}

// Sampling with ReDrafter keeps the model's distribution: on a model with a
// 16-token vocabulary, the first two tokens drawn with exact acceptance fit
// the model's own joint probabilities (χ² test), and the same test rejects
// the reference ("apple") rule, which shows it has the power to see a bias.
func TestReDrafterSamplingDistribution(t *testing.T) {
	e, err := Load(tinyVocabModel(t, 31), Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	randomHead(t, e, true, 1, 0, 32)
	params := Sampling{Temperature: 1, TopK: 5}
	const stop = -1 // a draw of EOS or BOS, which ends the text and is not returned
	// Exact joint law of the first two tokens under plain sampling.
	s, err := e.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Generate(context.Background(), "", GenerateOptions{MaxTokens: 1, Draft: DraftOptions{Off: true}}, nil); err != nil {
		t.Fatal(err)
	}
	base := len(s.Tokens())
	v := e.cfg.Vocab
	p1 := make([]float64, v)
	sample.Probs(p1, s.logits, params.params())
	joint := map[[2]int32]float64{}
	for a, pa := range p1 {
		switch {
		case pa == 0:
			continue
		case int32(a) == e.tok.EOS() || int32(a) == e.tok.BOS():
			joint[[2]int32{stop, stop}] += pa
			continue
		}
		s.state.Trim(base)
		s.tokens = s.tokens[:base]
		if err := s.forward([]int32{int32(a)}); err != nil {
			t.Fatal(err)
		}
		p2 := make([]float64, v)
		sample.Probs(p2, s.logits, params.params())
		for b, pb := range p2 {
			switch {
			case pb == 0:
			case int32(b) == e.tok.EOS() || int32(b) == e.tok.BOS():
				joint[[2]int32{int32(a), stop}] += pa * pb
			default:
				joint[[2]int32{int32(a), int32(b)}] = pa * pb
			}
		}
	}
	limit := func(df int) float64 { return float64(df) + 6*sqrt(2*float64(df)) } // ~1e-6 false alarms
	chi := func(accept AcceptanceRule, n int) (float64, int) {
		counts := map[[2]int32]int{}
		for i := range n {
			res, err := s.Generate(context.Background(), "", GenerateOptions{MaxTokens: 2, Sampling: params,
				Seed: uint64(i) + 1, Draft: DraftOptions{BeamWidth: 3, BeamLength: 3, Accept: accept}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			k := [2]int32{stop, stop}
			copy(k[:], res.Tokens)
			counts[k]++
		}
		var x2 float64
		for k, p := range joint {
			d := float64(counts[k]) - p*float64(n)
			x2 += d * d / (p * float64(n))
		}
		for k, c := range counts {
			if joint[k] == 0 {
				t.Fatalf("%s drew %v %d times, which the model gives probability 0", accept, k, c)
			}
		}
		return x2, len(joint) - 1
	}
	const n = 4000
	x2, df := chi(AcceptExact, n)
	if x2 > limit(df) {
		t.Errorf("exact acceptance: χ² = %.1f with %d degrees of freedom (limit %.1f): not the model's distribution", x2, df, limit(df))
	}
	xa, _ := chi(AcceptApple, n)
	if xa < limit(df) {
		t.Errorf("apple acceptance: χ² = %.1f (limit %.1f): the test cannot see the reference rule's bias", xa, limit(df))
	}
	t.Logf("χ² exact %.1f, apple %.1f, %d degrees of freedom", x2, xa, df)
}

func sqrt(x float64) float64 {
	z := x
	for range 30 {
		z = (z + x/z) / 2
	}
	return z
}
