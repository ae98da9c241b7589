package tests

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// gemma3Model writes a random-weight Gemma 3 (embeddings × √hidden, four
// norms a layer, q/k head norms, GeGLU, tied embeddings; six layers, five
// with a window of 8 positions and their own RoPE base, the sixth global)
// with stories260K's tokenizer, and returns its GGUF file. Seed 5 decodes
// 48 tokens from "Once upon a time" that change nine times (of seeds 1 to
// 16, the most; with two layers every seed repeats one token or two).
func gemma3Model(t *testing.T) string {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma3", Vocab: 512, Dim: 64, FFN: 96, Layers: 6,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 256, Tied: true, SlidingWindow: 8}, storiesTokenizer(t), 5)
	if err != nil {
		t.Fatal(err)
	}
	return ck.GGUF
}

// Greedy ReDrafter equals greedy decoding on a random Gemma 3, token for
// token: on the CPU (48 tokens, past the window many times over, a head
// trained by train-drafter's trainer at two beam shapes and a random head
// at one), and with Metal's kernels emulated (16 tokens, the trained head
// at W3L4; make test-all: also W1L5). CUDA's emulated kernels run the same
// check in internal/backend/cuda/cudatest (TestGemma3GreedyGenerationEqualsCPU).
func TestGemma3GreedyReDrafterEqualsGreedy(t *testing.T) {
	t.Parallel()
	model := gemma3Model(t)
	trained := trainedHead(t, model)
	random := randomHead(t)
	checkReDrafterEqualsGreedy(t, model, trained, []backendRun{
		{"cpu", 48, []draftRun{{trained, 3, 4}, {trained, 1, 5}, {random, 3, 4}}, false},
		{"metal-emu", 16, testenv.Subset([]draftRun{{trained, 3, 4}, {trained, 1, 5}}, 0), false},
	})
}

// gemma2Model writes a random-weight Gemma 2 (Gemma 3's block without head
// norms; four layers, 0 and 2 with a window of 8, 1 and 3 global; scores
// soft-capped at 1.5, low enough to bend them, logits at 10) with
// stories260K's tokenizer, and returns its GGUF file. Seed 3 decodes 48
// tokens that change four times (of seeds 1 to 12, the most).
func gemma2Model(t *testing.T) string {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma2", Vocab: 512, Dim: 64, FFN: 96, Layers: 4,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 10000, Context: 256, Tied: true, SlidingWindow: 8,
		AttnSoftCap: 1.5, FinalSoftCap: 10}, storiesTokenizer(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	return ck.GGUF
}

// TestGemma3GreedyReDrafterEqualsGreedy's check on a random Gemma 2. CUDA's
// emulated kernels run it in internal/backend/cuda/cudatest
// (TestGemma2GreedyGenerationEqualsCPU).
func TestGemma2GreedyReDrafterEqualsGreedy(t *testing.T) {
	t.Parallel()
	model := gemma2Model(t)
	trained := trainedHead(t, model)
	random := randomHead(t)
	checkReDrafterEqualsGreedy(t, model, trained, []backendRun{
		{"cpu", 48, []draftRun{{trained, 3, 4}, {trained, 1, 5}, {random, 3, 4}}, false},
		{"metal-emu", 16, testenv.Subset([]draftRun{{trained, 3, 4}, {trained, 1, 5}}, 0), true},
	})
}
