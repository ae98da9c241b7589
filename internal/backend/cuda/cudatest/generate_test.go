package cudatest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/tools"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
	"github.com/seed9b8f47b1/redrafter/internal/tools/train"
)

// generate decodes n tokens greedily from prompt on a backend, with
// ReDrafter at w×l when head is not empty.
func generate(t *testing.T, model, backend, kv, head string, w, l int, prompt string, n int) *redrafter.Result {
	t.Helper()
	e, err := redrafter.Load(model, redrafter.Options{Backend: backend, KVCache: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	opt := redrafter.GenerateOptions{MaxTokens: n}
	if head != "" {
		if err := e.LoadDrafter(head); err != nil {
			t.Fatal(err)
		}
		opt.Draft = redrafter.DraftOptions{BeamWidth: w, BeamLength: l}
	} else {
		opt.Draft.Off = true
	}
	res, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	return res
}

// Greedy decoding and greedy ReDrafter on the CUDA backend, over the fake
// driver with every launch run by its emulated kernel, equal greedy
// decoding on the CPU token for token: the demo model and its bundled head
// converted to f16 (with an f16 KV cache) and quantized to 4 bits in groups
// of 32 (with an f32 KV cache; against the CPU reference backend), at beams
// W ∈ {1, 2, 4} × L ∈ {3, 5} (make test: W1L5 and W4L3 in f16, W2L5 in
// 4 bits; make test-all: all six in both), and after a prompt of more than 64 tokens
// (a prefill pass of 64 rows, then shorter ones). The CUDA backend counts its waits (graph.Counter), so each greedy ReDrafter
// step runs as one plan on the device: beam search, verification and
// acceptance included.
func TestGreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("minutes of emulated launches")
	}
	t.Parallel()
	Builder(t) // skips or fails here, on t's goroutine
	checkGreedyEqualsCPU(t, registerEmulated(t), false)
}

// registerEmulated registers an emulated CUDA backend under a name of t's
// own and returns the name. The generation tests run in parallel (make
// test's last minutes are often this package's alone, on one of two
// cores), so none may register a name another uses: a test's cleanup
// would remove the other's backend.
func registerEmulated(t *testing.T) string {
	name := "cuda-emu-" + t.Name()
	graph.RegisterForTest(t, name, func() (graph.Backend, error) { return NewEmulated(t), nil })
	return name
}

// checkGreedyEqualsCPU is TestGreedyGenerationEqualsCPU's check on the
// registered backend named gpu: the emulated device here, a real GPU in
// TestGreedyGenerationEqualsCPUOnGPU. allShapes runs every beam shape even
// under make test (a real GPU runs them in seconds).
func checkGreedyEqualsCPU(t *testing.T, gpu string, allShapes bool) {
	root, err := tools.Root()
	if err != nil {
		t.Fatal(err)
	}
	stories := filepath.Join(root, "models", "stories260K", "stories260K.gguf")
	bundled := filepath.Join(root, "models", "stories260K", "drafter")
	reference := "cpu-reference-" + t.Name()
	graph.RegisterForTest(t, reference, func() (graph.Backend, error) { return cpu.NewReference(), nil })
	const n = 16
	prompt := "Once upon a time"
	// The CPU's fast 4-bit kernels multiply 8-bit-quantized activations (as
	// llama.cpp's do), which moves logits by about 1%; the GPU computes in
	// f32, so its 4-bit tokens are compared with the CPU reference backend's.
	//
	// The beam shapes W × L run whole under make test-all
	// (REDRAFTER_TEST_FULL); make test runs each dtype's subset: the widest
	// and the longest beams between them, every width once.
	shapes := [][2]int{{1, 3}, {1, 5}, {2, 3}, {2, 5}, {4, 3}, {4, 5}}
	for _, c := range []struct {
		name, cpu string
		opt       convert.Options
		kv        string
		shapes    []int // indexes into shapes: make test's subset
	}{{"f16", "cpu", convert.Options{Bits: 16}, "f16", []int{1, 4}}, {"4-bit", reference, convert.Options{Bits: 4, GroupSize: 32}, "f32", []int{3}}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			model, head := filepath.Join(dir, "model"), filepath.Join(dir, "head")
			if _, err := convert.Model(stories, model, c.opt); err != nil {
				t.Fatal(err)
			}
			if _, err := convert.Head(bundled, head, c.opt); err != nil {
				t.Fatal(err)
			}
			want := generate(t, model, c.cpu, c.kv, "", 0, 0, prompt, n).Tokens
			if len(want) != n {
				t.Fatalf("cpu: %d tokens, want %d", len(want), n)
			}
			if got := generate(t, model, gpu, c.kv, "", 0, 0, prompt, n).Tokens; !slices.Equal(got, want) {
				t.Errorf("autoregressive on %s: %v\ncpu: %v", gpu, got, want)
			}
			// A prompt of more than 64 tokens: its prefill runs in a pass
			// of 64 rows, then shorter ones, and the decoding after it
			// still agrees.
			long := strings.Repeat("Lily and Tom went to the park to play with a big red ball. ", 6)
			wantLong := generate(t, model, c.cpu, c.kv, "", 0, 0, long, 8).Tokens
			if got := generate(t, model, gpu, c.kv, "", 0, 0, long, 8); !slices.Equal(got.Tokens, wantLong) {
				t.Errorf("after a %d-token prompt, on cuda: %v\ncpu: %v", got.Stats.PromptTokens, got.Tokens, wantLong)
			} else if got.Stats.PromptTokens <= 64 {
				t.Errorf("the long prompt has %d tokens, want more than 64", got.Stats.PromptTokens)
			}
			run := shapes
			if !allShapes {
				run = testenv.Subset(shapes, c.shapes...)
			}
			for _, wl := range run {
				w, l := wl[0], wl[1]
				t.Run(fmt.Sprintf("W%dL%d", w, l), func(t *testing.T) {
					res := generate(t, model, gpu, c.kv, head, w, l, prompt, n)
					if !slices.Equal(res.Tokens, want) {
						t.Errorf("ReDrafter on cuda: %v\nautoregressive on the cpu: %v", res.Tokens, want)
					}
					d := res.Stats.Draft
					if d == nil || d.Steps == 0 || d.TokensPerStep() < 1.5 {
						t.Fatalf("the head drafted too little to check anything: %+v", d)
					}
					// One wait for the device per step: the step ran as one plan.
					if waits, _, _ := d.PerStep(); waits != 1 {
						t.Errorf("%.2f waits per ReDrafter step, want 1 (device: %+v over %d steps)", waits, d.Device, d.Steps)
					}
				})
			}
		})
	}
}

// Greedy ReDrafter on the CUDA backend, every launch emulated, equals
// greedy decoding on the CPU on a random Qwen3 (per-head q/k norms, heads
// of 24 where the hidden size over the heads is 16, tied embeddings): the
// GPU's own autoregressive tokens, and ReDrafter's with a head trained on
// the model by the trainer (W3L4; make test-all: also W1L5), over 16
// tokens. tests/ checks the same on the CPU at more shapes and on Metal.
func TestQwen3GreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of emulated launches")
	}
	metalInMakeTest(t)
	t.Parallel()
	Builder(t) // skips or fails here, on t's goroutine
	emu := registerEmulated(t)
	checkArchGreedyEqualsCPU(t, emu, qwen3Spec, testenv.Subset([][2]int{{3, 4}, {1, 5}}, 0))
}

// metalInMakeTest skips t outside make test-all (REDRAFTER_TEST_FULL):
// make test checks each architecture on one emulated GPU, to keep its
// time (Qwen3 and Gemma 3 on emulated Metal, in tests/; Phi-3, Mistral and
// Gemma 2 on emulated CUDA, here), and make test-all on both.
func metalInMakeTest(t *testing.T) {
	if !testenv.Full() {
		t.Skip("SKIPPED, NOT PASSED: make test-all runs it; make test runs this architecture's check on emulated Metal (tests/)")
	}
}

// qwen3Spec and phi3Spec are the random models of the architecture checks:
// stories260K's vocabulary, two layers, GQA.
var (
	qwen3Spec = llamatest.Spec{Arch: "qwen3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 24, NormEps: 1e-6, RopeTheta: 1e6, Context: 256, Tied: true}
	// Phi-4-mini's layout: fused qkv and gate_up tensors, untied output,
	// RoPE over 3/4 of each head with longrope (the long factors and the
	// attention factor: the context of 256 is past the original 64).
	phi3Spec = llamatest.Spec{Arch: "phi3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 10000, Context: 256,
		RopeDims: 12, LongRope: llamatest.FixedLongRope(12, 64)}
)

// TestPhi3GreedyGenerationEqualsCPU is TestQwen3GreedyGenerationEqualsCPU
// on a random Phi-3 (make test: W3L4; make test-all: also W1L5).
func TestPhi3GreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of emulated launches")
	}
	t.Parallel()
	Builder(t)
	emu := registerEmulated(t)
	checkArchGreedyEqualsCPU(t, emu, phi3Spec, testenv.Subset([][2]int{{3, 4}, {1, 5}}, 0))
}

// TestGemma3GreedyGenerationEqualsCPU is TestQwen3GreedyGenerationEqualsCPU
// on a random Gemma 3 (make test: W3L4; make test-all: also W1L5), whose
// 16 tokens pass its sliding layers' window of 8.
func TestGemma3GreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of emulated launches")
	}
	metalInMakeTest(t)
	t.Parallel()
	Builder(t)
	emu := registerEmulated(t)
	checkGemma3GreedyEqualsCPU(t, emu, testenv.Subset([][2]int{{3, 4}, {1, 5}}, 0))
}

// checkGemma3GreedyEqualsCPU is checkArchGreedyEqualsCPU on gemma3Spec
// drawn from seed 5, whose 16 tokens change twice (seed 7's once, then
// repeat one token to the end).
func checkGemma3GreedyEqualsCPU(t *testing.T, gpu string, shapes [][2]int) {
	ck, err := llamatest.Write(t.TempDir(), gemma3Spec, storiesTokenizer(t), 5)
	if err != nil {
		t.Fatal(err)
	}
	checkRandomModelGreedyEqualsCPU(t, gpu, ck.GGUF, shapes)
}

// TestGemma2GreedyGenerationEqualsCPU is TestQwen3GreedyGenerationEqualsCPU
// on a random Gemma 2 (soft-capped scores and logits, every other layer
// sliding; make test: W3L4; make test-all: also W1L5).
func TestGemma2GreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of emulated launches")
	}
	t.Parallel()
	Builder(t)
	emu := registerEmulated(t)
	checkGemma2GreedyEqualsCPU(t, emu, testenv.Subset([][2]int{{3, 4}, {1, 5}}, 0))
}

// checkGemma2GreedyEqualsCPU is checkArchGreedyEqualsCPU on a Gemma 2 of
// four layers (0 and 2 with a window of 8), scores capped at 1.5 and logits
// at 10, drawn from seed 3, whose 16 tokens change twice.
func checkGemma2GreedyEqualsCPU(t *testing.T, gpu string, shapes [][2]int) {
	spec := llamatest.Spec{Arch: "gemma2", Vocab: 512, Dim: 64, FFN: 96, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 16,
		NormEps: 1e-6, RopeTheta: 10000, Context: 256, Tied: true, SlidingWindow: 8, AttnSoftCap: 1.5, FinalSoftCap: 10}
	ck, err := llamatest.Write(t.TempDir(), spec, storiesTokenizer(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	checkRandomModelGreedyEqualsCPU(t, gpu, ck.GGUF, shapes)
}

// gemma3Spec: embeddings × √hidden, four norms a layer, q/k head norms,
// GeGLU, tied embeddings; six layers, five sliding (a window of 8, their
// own RoPE base) and the sixth global.
var gemma3Spec = llamatest.Spec{Arch: "gemma3", Vocab: 512, Dim: 64, FFN: 96, Layers: 6,
	Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 256, Tied: true, SlidingWindow: 8}

// checkArchGreedyEqualsCPU is TestQwen3GreedyGenerationEqualsCPU's check
// on the registered backend named gpu, for a random model of spec (with
// stories260K's tokenizer), at the beam shapes given.
func checkArchGreedyEqualsCPU(t *testing.T, gpu string, spec llamatest.Spec, shapes [][2]int) {
	ck, err := llamatest.Write(t.TempDir(), spec, storiesTokenizer(t), 7)
	if err != nil {
		t.Fatal(err)
	}
	checkRandomModelGreedyEqualsCPU(t, gpu, ck.GGUF, shapes)
}

// Greedy generation on emulated CUDA equals greedy decoding on the CPU on a
// random Mistral whose sliding window (8 positions) the 16 tokens pass:
// autoregressive, and ReDrafter with a head trained on the model (W3L4;
// make test-all: also W1L5), so that verification trees cross the window.
func TestMistralWindowGreedyGenerationEqualsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of emulated launches")
	}
	t.Parallel()
	Builder(t) // skips or fails here, on t's goroutine
	emu := registerEmulated(t)
	model, err := llamatest.WriteMistralGGUF(t.TempDir(), llamatest.Spec{Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 1e4, Context: 256}, 8, storiesTokenizer(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	checkRandomModelGreedyEqualsCPU(t, emu, model, testenv.Subset([][2]int{{3, 4}, {1, 5}}, 0))
}

// storiesTokenizer returns stories260K's tokenizer.* metadata.
func storiesTokenizer(t *testing.T) []formats.KV {
	root, err := tools.Root()
	if err != nil {
		t.Fatal(err)
	}
	g, err := formats.OpenGGUF(filepath.Join(root, "models", "stories260K", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var tok []formats.KV
	for _, kv := range g.KVs() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			tok = append(tok, kv)
		}
	}
	return tok
}

// checkRandomModelGreedyEqualsCPU checks greedy generation of 16 tokens of model on
// the registered backend gpu against the CPU's: autoregressive, and
// ReDrafter at the beam shapes given with a head trained on the model.
func checkRandomModelGreedyEqualsCPU(t *testing.T, gpu, model string, shapes [][2]int) {
	head := trainHead(t, model)
	const n = 16
	prompt := "Once upon a time"
	want := generate(t, model, "cpu", "", "", 0, 0, prompt, n).Tokens
	if len(want) != n {
		t.Fatalf("cpu: %d tokens, want %d", len(want), n)
	}
	if got := generate(t, model, gpu, "", "", 0, 0, prompt, n).Tokens; !slices.Equal(got, want) {
		t.Errorf("autoregressive on %s: %v\ncpu: %v", gpu, got, want)
	}
	for _, wl := range shapes {
		t.Run(fmt.Sprintf("W%dL%d", wl[0], wl[1]), func(t *testing.T) {
			res := generate(t, model, gpu, "", head, wl[0], wl[1], prompt, n)
			if !slices.Equal(res.Tokens, want) {
				t.Errorf("ReDrafter on %s: %v\nautoregressive on the cpu: %v", gpu, res.Tokens, want)
			}
			if d := res.Stats.Draft; d == nil || d.Steps == 0 || d.TokensPerStep() < 1.5 {
				t.Fatalf("the head drafted too little to check anything: %+v", d)
			}
		})
	}
}

// trainHead trains a draft head for model on the CPU on its own greedy
// continuations (a few seconds), as train-drafter does.
func trainHead(t *testing.T, model string) string {
	t.Helper()
	e, err := redrafter.Load(model, redrafter.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	set := func(prompts ...string) *train.Set {
		dir := t.TempDir()
		if _, err := train.Distill(context.Background(), e, dir, train.DistillOptions{Prompts: prompts, MaxTokens: 64, SamplesPerPrompt: 1}); err != nil {
			t.Fatal(err)
		}
		s, err := train.ReadSet(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	out := filepath.Join(t.TempDir(), "head")
	data := set("Once upon a time", "One day, Tom", "Lily and her mom", "The little dog", "Ben had a red ball",
		"There was a big tree", "Sue liked to sing", "The sun was hot")
	if _, err := train.Train(context.Background(), e, train.Options{Data: data, EvalData: set("A cat sat", "Tim and Sam"), Out: out,
		Steps: 200, Batch: 64, LR: 1e-3, Layers: 1, EvalEvery: 100, SaveEvery: 200, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return out
}
