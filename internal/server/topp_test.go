package server

import (
	"testing"
)

// top_p 0 keeps only the most probable token, as OpenAI clients mean it:
// at temperature 1, 8 seeds give one text, the greedy one (it was "off",
// and gave 7 texts).
func TestTopPZero(t *testing.T) {
	ts := start(t, Config{})
	want := greedy(t, plain, "Once upon a time", 32, false).Text
	texts := map[string]bool{}
	for seed := range 8 {
		status, _, b := ts.post(t, "/v1/completions", map[string]any{
			"prompt": "Once upon a time", "max_tokens": 32, "temperature": 1, "top_p": 0, "seed": seed})
		c := decode[chatResult](t, b)
		if status != 200 || len(c.Choices) != 1 {
			t.Fatalf("seed %d: %d %s", seed, status, b)
		}
		texts[c.Choices[0].Text] = true
	}
	if len(texts) != 1 || !texts[want] {
		t.Errorf("top_p 0 over 8 seeds gave %d texts %v; want only the greedy %q", len(texts), texts, want)
	}
}
