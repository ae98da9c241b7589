package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDistillTrainDrafter(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.txt")
	os.WriteFile(prompts, []byte("Once upon a time\nOne day, Tom\nLily and her mom\nThe little dog\nBen had a red ball\n"), 0o644)
	held := filepath.Join(dir, "held.jsonl")
	os.WriteFile(held, []byte(`{"prompt": "Sue liked to sing"}`+"\n"+`{"turns": ["The sun was hot"]}`+"\n"), 0o644)
	data, head := filepath.Join(dir, "data"), filepath.Join(dir, "head")

	out, _, err := run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", prompts, "--out", data,
		"--max-tokens", "48", "--batch", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "5 continuations") {
		t.Errorf("distill stdout: %q", out)
	}
	if shards, _ := filepath.Glob(filepath.Join(data, "shard-*.jsonl")); len(shards) != 3 {
		t.Errorf("5 continuations in batches of 2 made %d shards, want 3", len(shards))
	}
	out, _, err = run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", prompts, "--out", data,
		"--max-tokens", "48")
	if err != nil || !strings.Contains(out, "0 continuations") || !strings.Contains(out, "5 were already there") {
		t.Errorf("distill rerun: %v, %q", err, out)
	}
	// With a draft head: the same files, byte for byte (greedy ReDrafter is exact).
	spec := filepath.Join(dir, "data-speculative")
	if _, stderr, err := run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", prompts, "--out", spec,
		"--max-tokens", "48", "--batch", "2", "--drafter", "../../models/stories260K/drafter", "--beam-length", "4"); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(stderr, "tokens_per_step=") {
		t.Errorf("distill --drafter progress lacks tokens/step: %q", stderr)
	}
	for _, name := range []string{"meta.json", "shard-00000.jsonl", "shard-00001.jsonl", "shard-00002.jsonl"} {
		a, errA := os.ReadFile(filepath.Join(data, name))
		b, errB := os.ReadFile(filepath.Join(spec, name))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("distill --drafter: %s differs from the autoregressive one (%v, %v)", name, errA, errB)
		}
	}

	out, _, err = run(t, "", "train-drafter", "--backend", "cpu", "--model", stories, "--data", data, "--out", head,
		"--holdout", "0.4", "--steps", "20", "--batch", "32", "--layers", "1", "--lr", "0.01", "--eval-every", "10",
		"--eval-prompts", held, "--eval-beams", "2x3,1x2", "--eval-max-tokens", "24")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"trained 20 steps", "held-out loss", "acc@1", "W=2 L=3:", "W=1 L=2:", "tokens/step", "0 outputs differ"} {
		if !strings.Contains(out, want) {
			t.Errorf("train-drafter stdout lacks %q:\n%s", want, out)
		}
	}
	// Training into a directory that holds a training state: the CLI names the flag.
	if _, _, err := run(t, "", "train-drafter", "--backend", "cpu", "--model", stories, "--data", data, "--out", head,
		"--holdout", "0.4", "--steps", "20", "--batch", "32", "--layers", "1"); err == nil || !strings.Contains(err.Error(), "pass --resume") {
		t.Errorf("train-drafter over a training state: err = %v, want a hint to pass --resume", err)
	}
	out, _, err = run(t, "", "train-drafter", "--backend", "cpu", "--model", stories, "--out", head, "--eval-only",
		"--eval-prompts", held, "--eval-beams", "4x5", "--eval-max-tokens", "24")
	if err != nil || strings.Contains(out, "trained") || !strings.Contains(out, "W=4 L=5:") {
		t.Errorf("--eval-only: %v\n%s", err, out)
	}

	// The head drafts for generate, and greedy output does not change.
	plain, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "40", "--prompt", "Tom")
	if err != nil {
		t.Fatal(err)
	}
	drafted, stderr, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "40", "--prompt", "Tom",
		"--drafter", head, "--beam-width", "4", "--beam-length", "5", "--stats")
	if err != nil {
		t.Fatal(err)
	}
	if drafted != plain || !strings.Contains(stderr, "redrafter W=4 L=5") {
		t.Errorf("generate with the trained head: %q (stderr %q), want %q", drafted, stderr, plain)
	}
}

func TestDistillTrainDrafterErrors(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.txt")
	os.WriteFile(prompts, []byte("Once upon a time\n"), 0o644)
	badJSONL := filepath.Join(dir, "p.jsonl")
	os.WriteFile(badJSONL, []byte(`{"answer": 4}`+"\n"), 0o644)
	data := filepath.Join(dir, "data")
	if _, _, err := run(t, "", "distill", "--backend", "cpu", "--model", stories, "--prompts", prompts, "--out", data, "--max-tokens", "8"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	train := func(extra ...string) []string {
		return append([]string{"train-drafter", "--backend", "cpu", "--model", stories, "--out", out}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"distill", "--model", stories, "--out", data}, `required flag(s) "prompts" not set`},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--samples-per-prompt", "2"}, "needs --temperature"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--max-tokens", "-1"}, "--max-tokens"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--batch", "0"}, "--batch"},
		{[]string{"distill", "--model", stories, "--prompts", filepath.Join(dir, "none.txt"), "--out", data}, "no such file"},
		{[]string{"distill", "--model", stories, "--prompts", badJSONL, "--out", data}, `no "turns", "question" or "prompt"`},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--max-tokens", "9"}, "max_tokens 8 (now 9)"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--template", "alpaca"}, "--template"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--drafter", "../../models/stories260K/drafter",
			"--temperature", "0.8"}, "greedy continuations only"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", data, "--beam-length", "4"}, "need --drafter"},
		{[]string{"distill", "--model", stories, "--prompts", prompts, "--out", filepath.Join(dir, "other"), "--drafter", dir}, "config.json"},
		{[]string{"train-drafter", "--model", stories, "--data", data}, `required flag(s) "out" not set`},
		{train(), "--data is required"},
		{train("--data", dir), "not a distillation set"},
		{train("--data", data, "--lr", "0"), "--lr"},
		{train("--data", data, "--warmup", "1"), "--warmup"},
		{train("--data", data, "--steps", "-1"), "--steps"},
		{train("--data", data, "--holdout", "0"), "--holdout"},
		{train("--data", data, "--kl-weight", "-1"), "--kl-weight"},
		{train("--data", data, "--eval-beams", "4by5"), `"4by5" is not WxL`},
		{train("--data", data, "--eval-beams", "4x1"), `"4x1" is not WxL`},
		{train("--eval-only"), "--eval-only needs --eval-prompts"},
		{train("--eval-only", "--eval-prompts", prompts), "not a draft head"},
		{train("--data", data), "need some of each"}, // one prompt cannot be split into training and held-out
	} {
		stdout, _, err := run(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
		if stdout != "" {
			t.Errorf("%v: wrote %q to stdout on error", c.args, stdout)
		}
	}
}
