package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// generate and chat on a model whose weights hold NaN end with a one-line
// error naming NaN and the position, with or without a draft head, greedy
// or sampled; they used to panic (sampling) or print <unk> forever (greedy).
func TestNaNModel(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := g.Tensor("output_norm.weight")
	data := append([]byte(nil), g.Bytes()...)
	for i := range norm.NumElements() {
		binary.LittleEndian.PutUint32(data[int(norm.Offset)+4*i:], math.Float32bits(float32(math.NaN())))
	}
	g.Close()
	model := filepath.Join(t.TempDir(), "nan.gguf")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	head := "../../models/stories260K/drafter"
	for _, args := range [][]string{
		{"generate", "--prompt", "Once upon a time"},
		{"generate", "--prompt", "Once upon a time", "--temperature", "0.8"},
		{"generate", "--prompt", "Once upon a time", "--drafter", head},
		{"generate", "--prompt", "Once upon a time", "--drafter", head, "--temperature", "0.8"},
		{"chat"},
		{"chat", "--temperature", "0.8", "--drafter", head},
	} {
		args = append(args, "--backend", "cpu", "--model", model, "--max-tokens", "32")
		out, _, err := run(t, "Hello\n", args...)
		if err == nil {
			t.Errorf("%v: no error; stdout %q", args, out)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "NaN") || !strings.Contains(msg, "position") || strings.Contains(msg, "\n") {
			t.Errorf("%v: error %q is not one line naming NaN and the position", args, msg)
		}
	}
}
