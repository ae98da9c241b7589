package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/tools/train"
)

func TestDevInflate(t *testing.T) {
	dir := t.TempDir()
	head := filepath.Join(dir, "head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(head); err != nil {
		t.Fatal(err)
	}
	want, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "60")
	if err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.gguf")
	// The head as it is (exit width 2·128) and narrowed behind an input
	// projection (192): the same text either way.
	for _, exit := range []string{"0", "192"} {
		out, _, err := run(t, "", "dev", "inflate", "--model", stories, "--drafter", head, "--out", big, "--drafter-exit-dim", exit,
			"--dim", "128", "--heads", "8", "--kv-heads", "4", "--layers", "8", "--ffn", "256", "--dtype", "f32")
		if err != nil {
			t.Fatal(err)
		}
		wantExit := map[string]string{"0": "256", "192": "192"}[exit]
		if !strings.Contains(out, "dim 128, 8 heads of 16, 4 KV heads, 8 layers, FFN 256") ||
			!strings.Contains(out, "big-drafter: draft head padded to hidden size 128, exit width "+wantExit) {
			t.Errorf("stdout %q", out)
		}
		for _, args := range [][]string{nil, {"--drafter", filepath.Join(dir, "big-drafter"), "--beam-width", "2", "--beam-length", "4"}} {
			got, _, err := run(t, "", append([]string{"generate", "--backend", "cpu", "--model", big, "--max-tokens", "60"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("inflated model (exit %s) %v writes %q, the original %q", exit, args, got, want)
			}
		}
	}
	inspect, _, err := run(t, "", "inspect", big)
	if err != nil || !strings.Contains(inspect, "dim 128") {
		t.Errorf("inspect: %v\n%s", err, inspect)
	}
}

func TestDevInflateErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.gguf")
	head := filepath.Join(dir, "head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(head); err != nil {
		t.Fatal(err)
	}
	base := []string{"dev", "inflate", "--model", stories}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "f16"}, `required flag(s) "out" not set`},
		{[]string{"--out", out, "--dtype", "bf16"}, `--dtype "bf16": want f16 or f32`},
		{[]string{"--out", out, "--dim", "32"}, "dim 32 is smaller than the model's 64"},
		{[]string{"--out", out, "--heads", "24"}, "dim 2048 is not a multiple of 24 heads"},
		{[]string{"--out", out, "--dim", "96", "--heads", "8"}, "head size 12"},
		{[]string{"--out", out, "--layers", "3"}, "3 layers are fewer than the model's 5"},
		{[]string{"--out", out, "--drafter-out", dir}, "--drafter-out needs --drafter"},
		{[]string{"--out", out, "--drafter", head, "--drafter-exit-dim", "64"}, "--drafter-exit-dim: inflate: exit width 64 is narrower than the head's 128"},
		{[]string{"--out", stories}, "--out must differ from --model"},
		{[]string{"--out", out, "--dim", "128", "--heads", "8", "--layers", "5", "--ffn", "172", "--drafter", dir}, "not a draft head checkpoint"},
		{[]string{"--out", filepath.Join(dir, "no", "such", "dir.gguf"), "--dim", "128", "--heads", "8", "--layers", "5", "--ffn", "172"}, "no such file"},
	} {
		if _, _, err := run(t, "", append(base, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dev inflate %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	if _, _, err := run(t, "", "dev", "inflate", "--model", "missing.gguf", "--out", out); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing model: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("a failed inflation left its output behind")
	}
}

// dev openings cuts a sampled set's continuations into prompts that start
// with their openings, which distill then reads.
func TestDevOpenings(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.txt")
	os.WriteFile(prompts, []byte("Once upon a time\nThe cat\nLily and Tom\n"), 0o644)
	sampled := filepath.Join(dir, "sampled")
	if _, _, err := run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", prompts, "--out", sampled,
		"--max-tokens", "24", "--temperature", "0.8", "--samples-per-prompt", "2"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "openings.jsonl")
	stdout, _, err := run(t, "", "dev", "openings", "--backend", "cpu", "--model", stories, "--data", sampled, "--out", out, "--min-new", "3", "--max-new", "6")
	if err != nil {
		t.Fatal(err)
	}
	got, err := train.ReadPrompts(out)
	if err != nil || len(got) < 4 || !strings.Contains(stdout, "openings from 6 continuations") {
		t.Fatalf("%d openings (%v); stdout %q", len(got), err, stdout)
	}
	for _, p := range got {
		longer := false
		for _, prompt := range []string{"Once upon a time", "The cat", "Lily and Tom"} {
			longer = longer || strings.HasPrefix(p, prompt) && len(p) > len(prompt)
		}
		if !longer {
			t.Errorf("opening %q is not a prompt and more", p)
		}
	}
	if _, _, err := run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", out, "--out", filepath.Join(dir, "greedy"), "--max-tokens", "8"); err != nil {
		t.Fatal(err)
	}
	// As text: the same prompts, newlines and all.
	txt := filepath.Join(dir, "openings.txt")
	if _, _, err := run(t, "", "dev", "openings", "--backend", "cpu", "--model", stories, "--data", sampled, "--out", txt, "--min-new", "3", "--max-new", "6"); err != nil {
		t.Fatal(err)
	}
	if again, err := train.ReadPrompts(txt); err != nil || !slices.Equal(again, got) {
		t.Errorf("text file: %q (%v), JSONL %q", again, err, got)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--out", filepath.Join(dir, "x.json")}},
		{[]string{"--out", out, "--min-new", "5", "--max-new", "2"}},
	} {
		if _, _, err := run(t, "", append([]string{"dev", "openings", "--model", stories, "--data", sampled}, tc.args...)...); err == nil {
			t.Errorf("%v: no error", tc.args)
		}
	}
	// A set made by a model with another vocabulary (its meta.json says
	// 600 tokens; stories260K has 512) is refused, and nothing is written.
	raw, err := os.ReadFile(filepath.Join(sampled, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	meta["vocab_size"] = 600
	if raw, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sampled, "meta.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.jsonl")
	_, _, err = run(t, "", "dev", "openings", "--backend", "cpu", "--model", stories, "--data", sampled, "--out", other)
	if err == nil || !strings.Contains(err.Error(), "600 tokens") {
		t.Errorf("a set of another vocabulary: %v", err)
	}
	if _, err := os.Stat(other); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused set left %s behind (%v)", other, err)
	}
}
