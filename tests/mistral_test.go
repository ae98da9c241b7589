package tests

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
)

// Greedy ReDrafter equals greedy decoding on a random Mistral whose sliding
// window (8 positions) is far shorter than the 48 tokens decoded: on the
// CPU with a head trained by train-drafter's trainer at two beam shapes,
// and with Metal's kernels emulated (16 tokens, past the window too)
// against the CPU's autoregressive tokens.
func TestMistralWindowGreedyReDrafterEqualsGreedy(t *testing.T) {
	t.Parallel()
	model, err := llamatest.WriteMistralGGUF(t.TempDir(), llamatest.Spec{Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 1e4, Context: 256}, 8, storiesTokenizer(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	trained := trainedHead(t, model)
	checkReDrafterEqualsGreedy(t, model, trained, []backendRun{
		{"cpu", 48, []draftRun{{trained, 3, 4}, {trained, 1, 5}}, false},
		{"metal-emu", 16, []draftRun{{trained, 3, 4}}, true},
	})
}
