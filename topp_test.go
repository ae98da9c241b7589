package redrafter

import (
	"context"
	"testing"
)

// A TopP of 0 that was set keeps only the most probable token (OpenAI's
// top_p 0): at temperature 1 every seed gives the greedy text, with and
// without the draft head. The zero value (TopPSet false) still means "not
// set": all tokens, so the seeds give different texts.
func TestTopPZeroIsTheTopToken(t *testing.T) {
	e := load(t, Options{})
	if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, draft := range []DraftOptions{{Off: true}, {}} {
		greedy, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 32, Draft: draft}, nil)
		if err != nil {
			t.Fatal(err)
		}
		unset := map[string]bool{}
		for seed := range uint64(8) {
			opt := GenerateOptions{MaxTokens: 32, Draft: draft, Seed: seed, Sampling: Sampling{Temperature: 1, TopP: 0, TopPSet: true}}
			res, err := e.Generate(ctx, "Once upon a time", opt, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != greedy.Text {
				t.Errorf("draft %+v seed %d: top_p 0 gave %q, greedy %q", draft, seed, res.Text, greedy.Text)
			}
			opt.Sampling.TopPSet = false
			if res, err = e.Generate(ctx, "Once upon a time", opt, nil); err != nil {
				t.Fatal(err)
			}
			unset[res.Text] = true
		}
		if len(unset) < 2 {
			t.Errorf("draft %+v: TopP unset gave %d text over 8 seeds; want it to sample", draft, len(unset))
		}
	}
}
