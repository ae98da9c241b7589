package redrafter

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// The greedy step as one plan (speculativeOnDevice, what Metal runs),
// forced on the CPU, gives what the host loop gives: the same tokens, text
// and stop reason, and the same cached tokens after the generation, for
// every prompt, at W ∈ {1, 2, 4} and L ∈ {3, 5}, with the bundled head and
// a random one, under token limits and a stop string that cut a step's
// tokens short, and in a context too small for many steps (the loop
// finishes one token at a time). The host loop equals autoregressive
// decoding (TestReDrafterGreedyEqualsAutoregressive), and so is this.
func TestDeviceStepEqualsHostLoop(t *testing.T) {
	heads := []struct {
		name string
		load func(e *Engine)
	}{
		{"bundled", func(e *Engine) {
			if err := e.LoadDrafter("models/stories260K/drafter"); err != nil {
				t.Fatal(err)
			}
		}},
		{"random", func(e *Engine) { randomHead(t, e, true, 1, 0, 5) }},
	}
	type outcome struct {
		tokens, cached []int32
		text           string
		reason         StopReason
		steps          int
	}
	run := func(e *Engine, device bool, prompt string, opt GenerateOptions) outcome {
		forceDeviceStep = device
		defer func() { forceDeviceStep = false }()
		s, err := e.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.Generate(context.Background(), prompt, opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		if res.Stats.Draft != nil {
			steps = res.Stats.Draft.Steps
		}
		return outcome{res.Tokens, slices.Clone(s.Tokens()), res.Text, res.Reason, steps}
	}
	for _, context := range []int{0, 40} {
		for _, h := range heads {
			e := load(t, Options{Context: context})
			h.load(e)
			deviceSteps := 0
			for _, shape := range [][2]int{{1, 3}, {1, 5}, {2, 3}, {2, 5}, {4, 3}, {4, 5}} {
				for _, p := range specPrompts {
					for _, cut := range []GenerateOptions{{MaxTokens: 48}, {MaxTokens: 1}, {MaxTokens: 6}, {MaxTokens: 11}, {Stop: []string{"the"}}} {
						if context > 0 && cut.MaxTokens != 48 {
							continue
						}
						opt := cut
						opt.Draft = DraftOptions{BeamWidth: shape[0], BeamLength: shape[1]}
						name := fmt.Sprintf("context %d, %s head, W=%d L=%d, prompt %q, max %d, stop %q", context, h.name, shape[0], shape[1], p, opt.MaxTokens, opt.Stop)
						want, got := run(e, false, p, opt), run(e, true, p, opt)
						if !slices.Equal(got.tokens, want.tokens) || got.text != want.text || got.reason != want.reason || !slices.Equal(got.cached, want.cached) {
							t.Fatalf("%s:\n device: %v %q %s, cached %v\n host:   %v %q %s, cached %v", name,
								got.tokens, got.text, got.reason, got.cached, want.tokens, want.text, want.reason, want.cached)
						}
						deviceSteps += got.steps
					}
				}
			}
			if deviceSteps == 0 {
				t.Errorf("context %d, %s head: the device loop ran no step", context, h.name)
			}
		}
	}
}
