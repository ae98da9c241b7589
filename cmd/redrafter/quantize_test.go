package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// quantize writes a 4-bit model and head that generate reads; a second run
// into the same directory needs --force; bad flags are errors.
func TestQuantizeCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "q4")
	_, errOut, err := run(t, "", "quantize", "--in", stories, "--out", out, "--bits", "4", "--group-size", "32")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "32 quantized") || !strings.Contains(errOut, "down_proj") {
		t.Errorf("stderr = %q", errOut)
	}
	head := filepath.Join(dir, "head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(head); err != nil {
		t.Fatal(err)
	}
	qhead := filepath.Join(dir, "head-q4")
	if _, errOut, err = run(t, "", "quantize", "--in", head, "--out", qhead, "--bits", "4", "--group-size", "64"); err != nil ||
		!strings.Contains(errOut, "draft head") {
		t.Fatalf("head: %v %q", err, errOut)
	}
	gen, _, err := run(t, "", "generate", "--backend", "cpu", "--model", out, "--drafter", qhead, "--max-tokens", "12",
		"--beam-width", "2", "--beam-length", "3")
	if err != nil || !strings.HasPrefix(gen, "Once upon a time") {
		t.Fatalf("generate from the 4-bit model: %q %v", gen, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--in", stories, "--out", out}, out + ": output already exists: pass --force to replace it"},
		{[]string{"--in", stories, "--out", filepath.Join(dir, "x"), "--bits", "3"}, "3 bits"},
		{[]string{"--in", stories, "--out", filepath.Join(dir, "x"), "--group-size", "48"}, "group size 48"},
		{[]string{"--in", filepath.Join(dir, "absent"), "--out", filepath.Join(dir, "x")}, "no such file"},
		{[]string{"--in", out, "--out", out, "--bits", "8", "--force"}, "the output is the input: --out would replace --in"},
	} {
		if _, _, err := run(t, "", append([]string{"quantize"}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("quantize %v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if _, _, err := run(t, "", "quantize", "--in", stories, "--out", out, "--bits", "8", "--force"); err != nil {
		t.Errorf("--force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a failed run left its output")
	}
}

// perplexity samples held-out texts, writes them, and scores them; a
// 4-bit model scores worse than the original.
func TestPerplexityCommand(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "heldout.txt")
	out, _, err := run(t, "", "perplexity", "--backend", "cpu", "--model", stories, "--text", text, "--sample", "3", "--max-tokens", "40")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(text)
	if strings.Count(string(raw), storySeparator) != 3 || !strings.HasPrefix(out, "perplexity ") {
		t.Fatalf("stdout %q, text %q", out, raw)
	}
	q := filepath.Join(dir, "q4")
	if _, _, err := run(t, "", "quantize", "--in", stories, "--out", q, "--bits", "4", "--group-size", "64"); err != nil {
		t.Fatal(err)
	}
	js, _, err := run(t, "", "perplexity", "--backend", "cpu", "--model", q, "--text", text, "--json")
	if err != nil || !strings.Contains(js, `"perplexity":`) {
		t.Fatalf("%q %v", js, err)
	}
	if _, _, err := run(t, "", "perplexity", "--backend", "cpu", "--model", stories, "--text", filepath.Join(dir, "none.txt")); err == nil {
		t.Error("missing text file accepted")
	}
}
