package metal

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	_ "github.com/seed9b8f47b1/redrafter/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/graph"
	"github.com/seed9b8f47b1/redrafter/model/drafter"
)

const stories = "../../models/stories260K/stories260K.gguf"

// generate loads the demo model on a backend and decodes greedily, with
// ReDrafter when draft names a draft head directory.
func generate(t *testing.T, backend, prompt string, n int, draft ...string) []int32 {
	t.Helper()
	return generateKV(t, backend, "f32", prompt, n, draft...)
}

// generateKV is generate with a KV cache of type kv.
func generateKV(t *testing.T, backend, kv, prompt string, n int, draft ...string) []int32 {
	t.Helper()
	e, err := redrafter.Load(stories, redrafter.Options{Backend: backend, KVCache: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	opt := redrafter.GenerateOptions{MaxTokens: n}
	if len(draft) > 0 {
		if err := e.LoadDrafter(draft[0]); err != nil {
			t.Fatal(err)
		}
		opt.Draft = redrafter.DraftOptions{BeamWidth: 3, BeamLength: 4}
	}
	res, err := e.Generate(context.Background(), prompt, opt, func(string) error { return nil })
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	t.Logf("%s: %q", backend, res.Text)
	if res.Stats.Draft != nil {
		t.Logf("%s: draft stats %+v", backend, *res.Stats.Draft)
	}
	return res.Tokens
}

// randomDrafter saves a random draft head for stories260K (hidden 64,
// vocabulary 512): its drafts are mostly rejected, which exercises tree
// verification and KV compaction on every step.
func randomDrafter(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "drafter")
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 7)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGenerationMatchesCPU runs the engine on the Metal backend's encoder
// over the fake device (each dispatch group executed in reverse order by the
// CPU reference) and checks greedy decoding token for token against the CPU
// backend.
func TestGenerationMatchesCPU(t *testing.T) {
	var be *Backend
	graph.Register("metal-fake", func() (graph.Backend, error) {
		be = NewFake(Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4})
		return be, nil
	})
	const n = 48
	for _, kv := range []string{"f32", "f16"} {
		want := generateKV(t, "cpu", kv, "Once upon a time", n)
		got := generateKV(t, "metal-fake", kv, "Once upon a time", n)
		if !slices.Equal(got, want) {
			t.Errorf("%s KV cache: metal (fake device) generated %v\ncpu generated %v", kv, got, want)
		}
	}
	st := be.Stats()
	t.Logf("fake device: %+v", st)
	if st.Encodes >= st.Runs || st.Barriers == 0 || st.CommandBuffers <= st.Runs {
		t.Errorf("stats %+v: want plans reused, barriers, several command buffers per run", st)
	}
}

// TestGenerationThroughEmulatedKernels is the same check with every dispatch
// run by the emulated Metal kernel: host arguments, grids and kernels
// together, through prefill (matmul) and decode (matvec).
func TestGenerationThroughEmulatedKernels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few thousand emulated dispatches")
	}
	var x *emuExec
	graph.Register("metal-emu", func() (graph.Backend, error) {
		var be *Backend
		be, x = newEmuBackend(t, nil)
		return be, nil
	})
	const n = 6
	prompt := "Once upon a time, there was a little"
	want := generate(t, "cpu", prompt, n)
	got := generate(t, "metal-emu", prompt, n)
	if !slices.Equal(got, want) {
		t.Errorf("metal (emulated kernels) generated %v\ncpu generated %v", got, want)
	}
	got = generate(t, "metal-emu", prompt, 4, randomDrafter(t))
	if !slices.Equal(got, want[:4]) {
		t.Errorf("metal (emulated kernels, ReDrafter) generated %v\ncpu generated %v", got, want[:4])
	}
	t.Logf("kernels run: %v", x)
}
