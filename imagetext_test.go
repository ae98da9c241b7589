package redrafter

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
)

// An image-text Gemma 3 checkpoint loads for chat of text, and Load says
// at Info that its vision tensors are not read.
func TestLoadGemma3ImageTextLogsVision(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma3", Vocab: 512, Dim: 32, FFN: 48, Layers: 2,
		Heads: 2, KVHeads: 1, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true, SlidingWindow: 8}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "gemma-3-it")
	if err := llamatest.WriteGemma3ImageText(ck, dir, true); err != nil {
		t.Fatal(err)
	}
	// stories260K's tokenizer (512 tokens), as tokenizer.model.
	hf := filepath.Join(t.TempDir(), "hf")
	if _, err := convert.ModelContext(context.Background(), stories, hf, convert.Options{Bits: 32}); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(hf, "tokenizer.model"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.model"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	e, err := Load(dir, Options{Backend: "cpu", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 4}, nil); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "image-text Gemma 3") {
			line = l
		}
	}
	for _, want := range []string{"level=INFO", "model.vision_tower.* (2)", "model.multi_modal_projector.* (2)"} {
		if !strings.Contains(line, want) {
			t.Errorf("Load's log line on the image-text checkpoint %q lacks %q (log:\n%s)", line, want, logs.String())
		}
	}
}
