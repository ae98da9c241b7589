package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// Greedy ReDrafter equals greedy decoding on a random Mistral whose sliding
// window (8 positions) is far shorter than the 48 tokens decoded: on the
// CPU with a head trained by train-drafter's trainer at two beam shapes,
// and with Metal's kernels emulated (16 tokens, past the window too)
// against the CPU's autoregressive tokens.
func TestMistralWindowGreedyReDrafterEqualsGreedy(t *testing.T) {
	const n, emuTokens = 48, 16
	prompt := "Once upon a time"
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	var tok []formats.KV
	for _, kv := range g.KVs() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			tok = append(tok, kv)
		}
	}
	g.Close()
	model, err := llamatest.WriteMistralGGUF(t.TempDir(), llamatest.Spec{Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 1e4, Context: 256}, 8, tok, 2)
	if err != nil {
		t.Fatal(err)
	}
	trained := qwen3Head(t, model) // the trainer is the architecture's own: any model
	want := generateWith(t, model, "cpu", "", 0, 0, prompt, n).Tokens
	if len(want) != n {
		t.Fatalf("cpu: %d tokens, want %d (an EOS this early makes the test weak: choose another seed)", len(want), n)
	}
	for _, be := range []struct {
		name   string
		n      int
		shapes [][2]int
	}{{"cpu", n, [][2]int{{3, 4}, {1, 5}}}, {"metal-emu", emuTokens, [][2]int{{3, 4}}}} {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "metal-emu" {
				if testing.Short() {
					t.Skip("emulated dispatches")
				}
				emulated(t)
			}
			want := want[:be.n]
			if got := generateWith(t, model, be.name, "", 0, 0, prompt, be.n).Tokens; !slices.Equal(got, want) {
				t.Errorf("autoregressive: %v\ncpu: %v", got, want)
			}
			for _, s := range be.shapes {
				t.Run(fmt.Sprintf("%s/W%dL%d", filepath.Base(trained), s[0], s[1]), func(t *testing.T) {
					res := generateWith(t, model, be.name, trained, s[0], s[1], prompt, be.n)
					if !slices.Equal(res.Tokens, want) {
						t.Errorf("ReDrafter: %v\nautoregressive on the cpu: %v", res.Tokens, want)
					}
					if res.Stats.Draft == nil || res.Stats.Draft.Steps == 0 {
						t.Fatalf("no ReDrafter steps in the stats: %+v", res.Stats)
					}
					tps := res.Stats.Draft.TokensPerStep()
					t.Logf("%.2f tokens per step", tps)
					if be.name == "cpu" && tps < 1.5 {
						t.Errorf("the trained head accepted %.2f tokens per step, want >= 1.5 (trees past the window)", tps)
					}
				})
			}
		})
	}
}
