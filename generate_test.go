package redrafter

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
)

const stories = "models/stories260K/stories260K.gguf"

func load(t *testing.T, opt Options) *Engine {
	t.Helper()
	if opt.Backend == "" {
		opt.Backend = "cpu"
	}
	e, err := Load(stories, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	e := load(t, Options{})
	opt := GenerateOptions{MaxTokens: 40, Sampling: Sampling{Temperature: 0.9, TopP: 0.95}, Seed: 42}
	a, err := e.Generate(context.Background(), "Once upon a time", opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e.Generate(context.Background(), "Once upon a time", opt, nil)
	opt.Seed = 43
	c, _ := e.Generate(context.Background(), "Once upon a time", opt, nil)
	if a.Text != b.Text {
		t.Errorf("same seed, different text:\n%q\n%q", a.Text, b.Text)
	}
	if a.Text == c.Text {
		t.Errorf("different seeds gave the same 40 tokens: %q", a.Text)
	}
}

// A continuation keeps the space that separates it from the prompt.
func TestContinuationKeepsLeadingSpace(t *testing.T) {
	e := load(t, Options{})
	res, err := e.Generate(context.Background(), "Once upon a time there was", GenerateOptions{MaxTokens: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != " a little girl" {
		t.Errorf("continuation %q", res.Text)
	}
}

func TestStopString(t *testing.T) {
	e := load(t, Options{})
	res, err := e.Generate(context.Background(), "", GenerateOptions{MaxTokens: 256, Stop: []string{"Lily"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopString || res.Text != "Once upon a time, there was a little girl named " {
		t.Errorf("stop at \"Lily\": reason %s, text %q", res.Reason, res.Text)
	}
}

// A session reuses the cached prefix and gives the same text as a fresh run.
func TestSessionReusesPrefix(t *testing.T) {
	e := load(t, Options{})
	s, err := e.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opt := GenerateOptions{MaxTokens: 20}
	first, _ := s.Generate(context.Background(), "Once upon a time", opt, nil)
	second, err := s.Generate(context.Background(), "Once upon a time"+first.Text+" The end.", opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := e.Generate(context.Background(), "Once upon a time"+first.Text+" The end.", opt, nil)
	if second.Text != fresh.Text {
		t.Errorf("session continuation %q != fresh %q", second.Text, fresh.Text)
	}
	if second.Stats.PromptTokens >= fresh.Stats.PromptTokens {
		t.Errorf("session ran %d prompt tokens, a fresh run %d: the cache was not reused",
			second.Stats.PromptTokens, fresh.Stats.PromptTokens)
	}
}

func TestContextGuard(t *testing.T) {
	e := load(t, Options{Context: 16})
	_, err := e.Generate(context.Background(), strings.Repeat("Once upon a time ", 10), GenerateOptions{}, nil)
	if err == nil || !strings.Contains(err.Error(), "context of 16") {
		t.Errorf("long prompt: err = %v", err)
	}
	res, err := e.Generate(context.Background(), "Once", GenerateOptions{MaxTokens: 100}, nil)
	if err != nil || res.Reason != StopLength || len(res.Tokens) > 16 {
		t.Errorf("generation in a 16-token context: %v, %d tokens, reason %v", err, len(res.Tokens), res)
	}
}

// A cancelled generation returns what it produced: the tokens and text
// delivered so far, with their stats, both autoregressive and with a draft
// head.
func TestCancelReturnsPartialResult(t *testing.T) {
	for _, draft := range []bool{false, true} {
		e := load(t, Options{})
		if draft {
			if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
				t.Fatal(err)
			}
		}
		whole, err := e.Generate(context.Background(), "", GenerateOptions{MaxTokens: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var shown strings.Builder
		res, err := e.Generate(ctx, "", GenerateOptions{MaxTokens: 100}, func(s string) error {
			shown.WriteString(s)
			if shown.Len() > 20 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("draft %v: err = %v, want context.Canceled", draft, err)
		}
		if res == nil {
			t.Fatalf("draft %v: no Result on cancellation", draft)
		}
		n := len(res.Tokens)
		if n == 0 || n >= len(whole.Tokens) || !slices.Equal(res.Tokens, whole.Tokens[:n]) {
			t.Errorf("draft %v: partial tokens %v, want a strict prefix of %v", draft, res.Tokens, whole.Tokens)
		}
		if res.Text != shown.String() || !strings.HasPrefix(whole.Text, res.Text) {
			t.Errorf("draft %v: partial text %q, delivered %q, whole %q", draft, res.Text, shown.String(), whole.Text)
		}
		if res.Reason != StopCanceled || res.Stats.GeneratedTokens != n || res.Stats.PromptTokens != 1 || res.Stats.Decode <= 0 {
			t.Errorf("draft %v: reason %q, stats %+v", draft, res.Reason, res.Stats)
		}
		if draft && (res.Stats.Draft == nil || res.Stats.Draft.Steps == 0) {
			t.Errorf("draft %v: no ReDrafter stats in the partial result: %+v", draft, res.Stats.Draft)
		}
	}
}

// Cancelled before decoding: the prefill's stats, no tokens.
func TestCancelBeforeDecoding(t *testing.T) {
	e := load(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 10}, nil)
	if !errors.Is(err, context.Canceled) || res == nil || res.Reason != StopCanceled || len(res.Tokens) != 0 {
		t.Errorf("got %+v, %v; want an empty partial Result and context.Canceled", res, err)
	}
}

// Options without meaning are refused before any work.
func TestGenerateOptionsValidated(t *testing.T) {
	e := load(t, Options{})
	nan := float32(math.NaN())
	for _, o := range []GenerateOptions{
		{MaxTokens: -3},
		{Sampling: Sampling{Temperature: -1}},
		{Sampling: Sampling{Temperature: nan}},
		{Sampling: Sampling{Temperature: float32(math.Inf(1))}},
		{Sampling: Sampling{Temperature: 1, TopK: -1}},
		{Sampling: Sampling{Temperature: 1, TopP: -0.5}},
		{Sampling: Sampling{Temperature: 1, TopP: 1.5}},
		{Sampling: Sampling{Temperature: 1, TopP: nan}},
	} {
		called := false
		res, err := e.Generate(context.Background(), "", o, func(string) error { called = true; return nil })
		if err == nil || res != nil || called {
			t.Errorf("%+v: got %v, %v (text delivered: %v); want an error before any work", o, res, err, called)
		}
	}
	if _, err := Load(stories, Options{Backend: "cpu", Context: -1}); err == nil {
		t.Error("Load with Context -1 succeeded")
	}
}

// Using an engine or a session after Close is an error, not a panic.
func TestUseAfterClose(t *testing.T) {
	e := load(t, Options{})
	s, err := e.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Generate(context.Background(), "", GenerateOptions{MaxTokens: 3}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Session.Generate after Close: %v, want ErrClosed", err)
	}
	s.Close() // twice is harmless

	s2, err := e.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	p, err := e.newProbe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := e.Generate(context.Background(), "", GenerateOptions{MaxTokens: 3}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Engine.Generate after Close: %v, want ErrClosed", err)
	}
	if _, err := s2.Generate(context.Background(), "", GenerateOptions{MaxTokens: 3}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Session.Generate after its Engine's Close: %v, want ErrClosed", err)
	}
	if _, err := e.NewSession(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewSession after Close: %v, want ErrClosed", err)
	}
	if _, err := e.newProbe(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewProbe after Close: %v, want ErrClosed", err)
	}
	if err := p.Forward([]int32{1}, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Probe.Forward after its Engine's Close: %v, want ErrClosed", err)
	}
	if err := e.LoadDrafter("models/stories260K/drafter"); !errors.Is(err, ErrClosed) {
		t.Errorf("LoadDrafter after Close: %v, want ErrClosed", err)
	}
	if _, _, err := e.embeddings(); !errors.Is(err, ErrClosed) {
		t.Errorf("Embeddings after Close: %v, want ErrClosed", err)
	}
}
