package tests

import (
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// phi3Model writes a random-weight Phi-3 (fused qkv and gate_up tensors,
// GQA as in Phi-4, untied output) with stories260K's tokenizer, and
// returns its GGUF file.
func phi3Model(t *testing.T) string {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "phi3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 10000, Context: 256}, storiesTokenizer(t), 7)
	if err != nil {
		t.Fatal(err)
	}
	return ck.GGUF
}

// Greedy ReDrafter equals greedy decoding on a random Phi-3, token for
// token: on the CPU (48 tokens, a head trained by train-drafter's trainer
// at two beam shapes and a random head at one), and with Metal's kernels
// emulated (16 tokens, the trained head at W3L4; make test-all: also
// W1L5). CUDA's emulated kernels run the same check in
// internal/backend/cuda/cudatest (TestPhi3GreedyGenerationEqualsCPU).
func TestPhi3GreedyReDrafterEqualsGreedy(t *testing.T) {
	model := phi3Model(t)
	trained := trainedHead(t, model)
	random := randomHead(t)
	checkReDrafterEqualsGreedy(t, model, trained, []backendRun{
		{"cpu", 48, []draftRun{{trained, 3, 4}, {trained, 1, 5}, {random, 3, 4}}},
		{"metal-emu", 16, testenv.Subset([]draftRun{{trained, 3, 4}, {trained, 1, 5}}, 0)},
	})
}
