package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// phi3Model writes a random-weight Phi-3 (fused qkv and gate_up tensors,
// GQA as in Phi-4, untied output) with stories260K's tokenizer, and
// returns its GGUF file.
func phi3Model(t *testing.T) string {
	t.Helper()
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
	defer g.Close()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "phi3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 10000, Context: 256}, tok, 7)
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
	const n, emuTokens = 48, 16
	prompt := "Once upon a time"
	model := phi3Model(t)
	trained := qwen3Head(t, model)
	random := filepath.Join(t.TempDir(), "random-head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 7).Save(random); err != nil {
		t.Fatal(err)
	}
	want := generateWith(t, model, "cpu", "", 0, 0, prompt, n).Tokens
	if len(want) != n {
		t.Fatalf("cpu: %d tokens, want %d (an EOS this early makes the test weak: choose another seed)", len(want), n)
	}
	type draft struct {
		head string
		w, l int
	}
	for _, be := range []struct {
		name   string
		n      int
		drafts []draft
	}{
		{"cpu", n, []draft{{trained, 3, 4}, {trained, 1, 5}, {random, 3, 4}}},
		{"metal-emu", emuTokens, testenv.Subset([]draft{{trained, 3, 4}, {trained, 1, 5}}, 0)},
	} {
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
			for _, d := range be.drafts {
				t.Run(fmt.Sprintf("%s/W%dL%d", filepath.Base(d.head), d.w, d.l), func(t *testing.T) {
					res := generateWith(t, model, be.name, d.head, d.w, d.l, prompt, be.n)
					if !slices.Equal(res.Tokens, want) {
						t.Errorf("ReDrafter: %v\nautoregressive on the cpu: %v", res.Tokens, want)
					}
					if res.Stats.Draft == nil || res.Stats.Draft.Steps == 0 {
						t.Fatalf("no ReDrafter steps in the stats: %+v", res.Stats)
					}
					tps := res.Stats.Draft.TokensPerStep()
					t.Logf("%.2f tokens per step", tps)
					if be.name == "cpu" && d.head == trained && tps < 1.5 {
						t.Errorf("the trained head accepted %.2f tokens per step, want >= 1.5", tps)
					}
				})
			}
		})
	}
}
