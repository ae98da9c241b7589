package metal

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
)

// quantized4 converts stories260K to 4-bit weights in groups of 32, with a
// random draft head quantized the same way.
func quantized4(t *testing.T) (model, head string) {
	t.Helper()
	dir := t.TempDir()
	model, head = filepath.Join(dir, "q4"), filepath.Join(dir, "head-q4")
	if _, err := convert.Model(stories, model, convert.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 7)
	if err := h.Save(filepath.Join(dir, "head")); err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Head(filepath.Join(dir, "head"), head, convert.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	return model, head
}

func generateFrom(t *testing.T, model, backend, prompt string, n int, draft string) []int32 {
	t.Helper()
	e, err := redrafter.Load(model, redrafter.Options{Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	opt := redrafter.GenerateOptions{MaxTokens: n}
	if draft != "" {
		if err := e.LoadDrafter(draft); err != nil {
			t.Fatal(err)
		}
		opt.Draft = redrafter.DraftOptions{BeamWidth: 3, BeamLength: 4}
	}
	res, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	return res.Tokens
}

// A 4-bit model with a 4-bit draft head decodes on the Metal backend's
// encoder over the fake device (every dispatch run by the CPU reference)
// exactly as the CPU reference backend does autoregressively, with and
// without ReDrafter; and through the emulated quant kernels (qmv for
// decode, qmm for the prefill, quant_embed) to the same greedy tokens.
func TestQuantizedGeneration(t *testing.T) {
	model, head := quantized4(t)
	graph.RegisterForTest(t, "cpu-ref-quant", func() (graph.Backend, error) { return cpu.NewReference(), nil })
	graph.RegisterForTest(t, "metal-fake-quant", func() (graph.Backend, error) {
		return newReferenceFake(Policy{FirstCommit: 4, OpsPerBuffer: 16, MatvecMaxRows: 4}), nil
	})
	const n = 40
	prompt := "Once upon a time, there was a little"
	want := generateFrom(t, model, "cpu-ref-quant", prompt, n, "")
	if got := generateFrom(t, model, "metal-fake-quant", prompt, n, head); !slices.Equal(got, want) {
		t.Errorf("metal (fake device, 4-bit, ReDrafter) generated %v\ncpu reference generated %v", got, want)
	}
	if testing.Short() {
		return
	}
	graph.RegisterForTest(t, "metal-emu-quant", func() (graph.Backend, error) {
		be, _ := newEmuBackend(t, nil)
		return be, nil
	})
	if got := generateFrom(t, model, "metal-emu-quant", prompt, 6, ""); !slices.Equal(got, want[:6]) {
		t.Errorf("metal (emulated kernels, 4-bit) generated %v\ncpu reference generated %v", got, want[:6])
	}
}
