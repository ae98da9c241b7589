package redrafter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// poisonedModel writes a copy of stories260K whose f32 tensor name has v at
// the given element indices (every element when elems is nil).
func poisonedModel(t testing.TB, name string, elems []int, v float32) string {
	t.Helper()
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ts, ok := g.Tensor(name)
	if !ok || ts.DType != formats.F32 {
		t.Fatalf("no f32 tensor %s in %s", name, stories)
	}
	data := append([]byte(nil), g.Bytes()...)
	if elems == nil {
		for i := range ts.NumElements() {
			elems = append(elems, i)
		}
	}
	for _, i := range elems {
		binary.LittleEndian.PutUint32(data[int(ts.Offset)+4*i:], math.Float32bits(v))
	}
	path := filepath.Join(t.TempDir(), "poisoned.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadPath(t testing.TB, path string) *Engine {
	t.Helper()
	e, err := Load(path, Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// A model whose weights hold NaN or Inf makes Generate fail with an error
// that names the value and the position, whatever the decoding: greedy,
// sampled, and ReDrafter with either acceptance rule. It used to panic in
// sample.Probs when sampling and emit <unk> (or the +Inf token) until
// MaxTokens when greedy.
func TestNonFiniteLogitsAreAnError(t *testing.T) {
	const prompt = "Once upon a time"
	models := []struct {
		name string
		path string
		want string
	}{
		{"nan-norm", poisonedModel(t, "output_norm.weight", nil, float32(math.NaN())), "NaN"},
		// Output row 7 (a byte token) gets +Inf in one column: its logit
		// is ±Inf, the others stay finite.
		{"inf-row", poisonedModel(t, "output.weight", []int{7 * 64}, float32(math.Inf(1))), "Inf"},
	}
	sampled := Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95}
	modes := []struct {
		name    string
		drafter bool
		opt     GenerateOptions
	}{
		{"greedy", false, GenerateOptions{}},
		{"sampled", false, GenerateOptions{Sampling: sampled, Seed: 1}},
		{"redrafter-greedy", true, GenerateOptions{}},
		{"redrafter-exact", true, GenerateOptions{Sampling: sampled, Seed: 1}},
		{"redrafter-apple", true, GenerateOptions{Sampling: sampled, Seed: 1, Draft: DraftOptions{Accept: AcceptApple}}},
	}
	for _, m := range models {
		for _, mode := range modes {
			t.Run(m.name+"/"+mode.name, func(t *testing.T) {
				e := loadPath(t, m.path)
				if mode.drafter {
					if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
						t.Fatal(err)
					}
				}
				ids := e.tok.Encode(prompt, true)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				opt := mode.opt
				opt.MaxTokens = 64
				res, err := e.Generate(ctx, prompt, opt, nil)
				if err == nil {
					t.Fatalf("no error; generated %d tokens %q", len(res.Tokens), res.Text)
				}
				var nf *NonFiniteError
				if !errors.As(err, &nf) {
					t.Fatalf("error %v is not a *NonFiniteError", err)
				}
				// The prefill's first chunk (4 of the 5 prompt tokens) reads
				// the logits of its last token.
				pos := fmt.Sprintf("position %d", 3)
				if msg := err.Error(); len(ids) != 5 || !strings.Contains(msg, m.want) || !strings.Contains(msg, pos) {
					t.Errorf("error %q does not name %s and %s (prompt of %d tokens)", msg, m.want, pos, len(ids))
				}
			})
		}
	}
}

// NaN that appears only once a certain token is decoded is reported at
// that token's position in the sequence, in decoding and in ReDrafter's
// verification pass.
func TestNonFiniteLogitsPosition(t *testing.T) {
	const prompt = "Once upon a time"
	ref, err := load(t, Options{}).Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e0 := load(t, Options{})
	ids := e0.tok.Encode(prompt, true)
	// The first generated token that is new to the sequence: embedding it
	// gives NaN, so the logits after it are NaN.
	seen := map[int32]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	k := -1
	for i, id := range ref.Tokens {
		if !seen[id] && i >= 2 {
			k = i
			break
		}
		seen[id] = true
	}
	if k < 0 {
		t.Fatalf("no new token in %v", ref.Tokens)
	}
	x := int(ref.Tokens[k])
	elems := make([]int, 64)
	for i := range elems {
		elems[i] = x*64 + i
	}
	path := poisonedModel(t, "token_embd.weight", elems, float32(math.NaN()))
	want := len(ids) + k

	e := loadPath(t, path)
	_, err = e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 20}, nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("NaN logits at position %d", want)) {
		t.Fatalf("got error %v, want NaN at position %d", err, want)
	}

	// Verification: an oracle drafts the true continuation, so the tree
	// holds the poisoned token at depth 1 once the init token is the one
	// before it; the forward pass over the tree sees its NaN row.
	src := &oracleSource{truth: ref.Tokens, r: rand.New(rand.NewPCG(1, 2)), vocab: e.cfg.Vocab}
	e.draftSource = &trackingSource{o: src}
	defer func() { e.draftSource = nil }()
	_, err = e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 20, Draft: DraftOptions{BeamWidth: 2, BeamLength: 4}}, nil)
	var nf *NonFiniteError
	if !errors.As(err, &nf) || !math.IsNaN(float64(nf.Value)) || nf.Pos < len(ids) || nf.Pos > want {
		t.Fatalf("ReDrafter: got error %v, want NaN at a position in [%d, %d]", err, len(ids), want)
	}
}

// A draft head whose weights hold NaN is refused with an error, not left to
// draft garbage silently.
func TestNonFiniteDraftHead(t *testing.T) {
	e := load(t, Options{})
	h := drafter.NewRandom(drafter.Config{VocabSize: e.cfg.Vocab, HiddenSize: e.cfg.Dim, NumDraftLayers: 1, RNN: true}, 3)
	for i := 0; i < len(h.Vocab.Data); i += 4 {
		binary.LittleEndian.PutUint32(h.Vocab.Data[i:], math.Float32bits(float32(math.NaN())))
	}
	dir := filepath.Join(t.TempDir(), "head")
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := e.LoadDrafter(dir); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []GenerateOptions{{}, {Sampling: Sampling{Temperature: 1}}} {
		_, err := e.Generate(context.Background(), "Once upon a time", opt, nil)
		if err == nil || !strings.Contains(err.Error(), "draft head produced NaN") {
			t.Errorf("%v: got error %v, want one about the draft head's NaN", opt.Sampling, err)
		}
	}
}
