package redrafter

import (
	"context"
	"errors"
	"strings"
	"testing"

	_ "github.com/seed9b8f47b1/redrafter/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/sample"
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
	opt := GenerateOptions{MaxTokens: 40, Sampling: sample.Params{Temperature: 0.9, TopP: 0.95}, Seed: 42}
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

func TestCancel(t *testing.T) {
	e := load(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := e.Generate(ctx, "", GenerateOptions{MaxTokens: 200}, func(string) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
