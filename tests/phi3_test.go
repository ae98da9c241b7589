package tests

import (
	"context"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// phi3Model writes a random-weight Phi-3 in Phi-4-mini's layout (fused
// qkv and gate_up tensors, GQA, untied output, RoPE over 3/4 of each head
// with longrope from an original context of 64, so that the model's 256
// runs with the long factors and the attention factor) with
// stories260K's tokenizer, and returns its GGUF file.
func phi3Model(t *testing.T) string {
	t.Helper()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "phi3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 10000, Context: 256,
		RopeDims: 12, LongRope: llamatest.FixedLongRope(12, 64)}, storiesTokenizer(t), 3)
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
	t.Parallel()
	model := phi3Model(t)
	trained := trainedHead(t, model)
	random := randomHead(t)
	checkReDrafterEqualsGreedy(t, model, trained, []backendRun{
		{"cpu", 48, []draftRun{{trained, 3, 4}, {trained, 1, 5}, {random, 3, 4}}, false},
		{"metal-emu", 16, testenv.Subset([]draftRun{{trained, 3, 4}, {trained, 1, 5}}, 0), true},
	})
}

// Longrope's factor set follows the context the engine runs with, as
// llama.cpp picks it: the short factors up to the original context (64)
// and the long ones beyond, whatever the prompt's length. Greedy tokens
// at contexts 32 and 64 are equal, at 65 and 256 equal, and the two
// differ. (Each set against the reference: internal/model/llama's
// TestPhi3RopeMatchesReference.)
func TestPhi3LongropeFollowsContext(t *testing.T) {
	model := phi3Model(t)
	run := func(n int) []int32 {
		e, err := redrafter.Load(model, redrafter.Options{Backend: "cpu", Context: n})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(context.Background(), "Once upon a time", redrafter.GenerateOptions{MaxTokens: 16, Draft: redrafter.DraftOptions{Off: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	short, long := run(32), run(256)
	if got := run(64); !slices.Equal(got, short) {
		t.Errorf("context 64: %v, want context 32's (short factors) %v", got, short)
	}
	if got := run(65); !slices.Equal(got, long) {
		t.Errorf("context 65: %v, want context 256's (long factors) %v", got, long)
	}
	if slices.Equal(short, long) {
		t.Errorf("the short and long factors give the same tokens %v: the check is blind", short)
	}
}
