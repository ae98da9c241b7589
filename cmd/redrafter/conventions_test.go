package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// -m, -p, -n and --temp are what llama.cpp and mlx-lm users type; they
// mean --model, --prompt, --max-tokens and --temperature.
func TestShorthandsAndAliases(t *testing.T) {
	long, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--prompt", "Once upon", "--max-tokens", "12",
		"--temperature", "0.9", "--seed", "7")
	if err != nil {
		t.Fatal(err)
	}
	short, _, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-p", "Once upon", "-n", "12", "--temp", "0.9", "--seed", "7")
	if err != nil {
		t.Fatal(err)
	}
	if short != long {
		t.Errorf("shorthands wrote %q, the long flags %q", short, long)
	}
	greedy, _, _ := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-p", "Once upon", "-n", "12")
	if greedy == long {
		t.Error("--temperature 0.9 wrote the greedy text: the sampled run is not sampled")
	}
}

// The prompt comes from stdin with --prompt-file - or when stdin is piped
// and no --prompt is given (one trailing newline dropped); --prompt wins.
func TestPromptFromStdin(t *testing.T) {
	want, _, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-p", "Lily and Ben", "-n", "10")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--prompt-file", "-"}, nil} {
		got, _, err := run(t, "Lily and Ben\n", append([]string{"generate", "--backend", "cpu", "-m", stories, "-n", "10"}, args...)...)
		if err != nil || got != want {
			t.Errorf("stdin prompt %v: %q %v, want %q", args, got, err, want)
		}
	}
	got, _, err := run(t, "Something else entirely\n", "generate", "--backend", "cpu", "-m", stories, "-p", "Lily and Ben", "-n", "10")
	if err != nil || got != want {
		t.Errorf("--prompt with piped stdin: %q %v, want %q", got, err, want)
	}
	if _, _, err := run(t, "", "generate", "-m", stories, "-p", "x", "--prompt-file", "-"); err == nil {
		t.Error("--prompt and --prompt-file together accepted")
	}
}

// A sampled run with no --seed reports the seed it drew (--json and
// --stats), and --seed with it repeats the run.
func TestSeedReported(t *testing.T) {
	js, _, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-n", "16", "--temp", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r resultJSON
	if err := json.Unmarshal([]byte(js), &r); err != nil || r.Stats.Seed == 0 {
		t.Fatalf("--json without a seed field: %v\n%s", err, js)
	}
	seed := r.Stats.Seed
	again, _, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-n", "16", "--temp", "1", "--json",
		"--seed", jsonNumber(seed))
	var r2 resultJSON
	if err != nil || json.Unmarshal([]byte(again), &r2) != nil || r2.Text != r.Text || r2.Stats.Seed != seed {
		t.Errorf("--seed %d repeats %q as %q (%v)", seed, r.Text, r2.Text, err)
	}
	_, stderr, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-n", "4", "--temp", "1", "--stats")
	if err != nil || !strings.Contains(stderr, "seed ") || !strings.Contains(stderr, "--seed ") {
		t.Errorf("--stats does not report the seed: %v\n%s", err, stderr)
	}
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Flags that change nothing without --drafter are named on stderr.
func TestDraftFlagsWithoutDrafterWarn(t *testing.T) {
	_, stderr, err := run(t, "", "generate", "--backend", "cpu", "-m", stories, "-n", "2", "--beam-width", "2", "--accept", "apple")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--beam-width has no effect without --drafter", "--accept has no effect without --drafter"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "--beam-length") {
		t.Errorf("warned about a flag that was not given:\n%s", stderr)
	}
}

// Errors say what to do: a draft head given as --model points to
// --drafter, a directory without a tokenizer names the files looked for,
// a missing path has no "llama: stat" in front.
func TestErrorsSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	head := filepath.Join(dir, "head")
	if err := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(head); err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(dir, "q")
	if _, _, err := run(t, "", "quantize", "--in", stories, "--out", q, "--bits", "8", "--group-size", "32"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(q, "tokenizer.model")); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "none.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", head}, "--model " + head + " is a ReDrafter draft head, not a model: pass it as --drafter"},
		{[]string{"-m", q}, "--model " + q + ": no tokenizer: looked for tokenizer.json and tokenizer.model"},
		{[]string{"-m", missing}, "--model " + missing + ": no such file or directory"},
		{[]string{"-m", dir}, "--model " + dir + ": not a model directory: it has no config.json"},
	} {
		_, _, err := run(t, "", append([]string{"generate", "--backend", "cpu"}, c.args...)...)
		if err == nil || err.Error() != c.want && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "stat ") {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}

// devices lists the CPU on every OS and succeeds without a GPU.
func TestDevicesListsCPU(t *testing.T) {
	out, _, err := run(t, "", "devices")
	if err != nil || !strings.HasPrefix(out, "cpu: ") || !strings.Contains(out, " cores, ") {
		t.Errorf("devices: %v\n%s", err, out)
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "", "--version")
	if err != nil || !strings.HasPrefix(out, "redrafter ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: %v %q", err, out)
	}
}

// Long commands log their progress when stderr is not a terminal, at the
// default log level: the first update, the last, and every few seconds.
func TestProgressLogsWithoutTerminal(t *testing.T) {
	_, stderr, err := run(t, "", "quantize", "--in", stories, "--out", filepath.Join(t.TempDir(), "q"), "--bits", "4", "--group-size", "32")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stderr, "level=INFO msg=quantize"); n != 2 || !strings.Contains(stderr, "done=1 ") {
		t.Errorf("quantize logged %d progress lines, want the first and the last:\n%s", n, stderr)
	}
	var buf bytes.Buffer
	old := slog.Default()
	defer slog.SetDefault(old)
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	clock := time.Unix(0, 0)
	p := newProgressLine(&bytes.Buffer{}, "distill")
	p.now = func() time.Time { return clock }
	for i := range 20 { // 20 updates a second apart
		p.update(false, "", "done", i)
		clock = clock.Add(time.Second)
	}
	p.update(true, "", "done", 20)
	if got := strings.Count(buf.String(), "msg=distill"); got != 5 { // 0, 5, 10, 15 s and the last
		t.Errorf("%d log lines in 20 s of updates, want 5:\n%s", got, buf.String())
	}
}

// --force replaces an earlier output of quantize and nothing else.
func TestQuantizeForceKeepsOtherDirectories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "thesis")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "thesis.txt"), []byte("chapter 1"), 0o644)
	_, _, err := run(t, "", "quantize", "--in", stories, "--out", dir, "--force")
	if err == nil || !strings.Contains(err.Error(), "it holds thesis.txt") || !strings.Contains(err.Error(), "choose another --out") {
		t.Errorf("quantize --force over a thesis: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "thesis.txt")); err != nil || string(b) != "chapter 1" {
		t.Errorf("the thesis is gone: %q %v", b, err)
	}
}
