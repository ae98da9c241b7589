package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
)

// The CLI's greedy output of the demo model is llama2.c's, byte for byte, and
// the bundled draft head changes its speed, not its text: what `make demo`
// shows.
func TestCLIDemoEqualsLlama2c(t *testing.T) {
	want := goldenGreedy(t)
	plain, _, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--prompt", "", "--max-tokens", "256")
	if err != nil {
		t.Fatal(err)
	}
	// generate ends its output with a newline.
	if plain != want+"\n" {
		t.Errorf("generate: stdout differs from llama2.c's greedy output:\n got: %q\nwant: %q", plain, want+"\n")
	}
	drafted, stderr, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--prompt", "", "--max-tokens", "256",
		"--drafter", storiesHead, "--beam-width", "1", "--beam-length", "5", "--stats")
	if err != nil {
		t.Fatal(err)
	}
	if drafted != plain {
		t.Errorf("generate --drafter: stdout differs from greedy decoding:\n got: %q\nwant: %q", drafted, plain)
	}
	if !strings.Contains(stderr, "redrafter W=1 L=5") {
		t.Errorf("--stats did not report the ReDrafter ledger:\n%s", stderr)
	}
}

func TestCLIGenerateGreedy(t *testing.T) {
	out, stderr, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "20")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if want := "Once upon a time, there was a little girl named Lily. She loved to play\n"; out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
}

// A random draft head is mostly rejected: every step verifies a tree and
// compacts the cache, and the text must still equal greedy decoding.
func TestCLIGenerateWithRandomDrafter(t *testing.T) {
	dir := t.TempDir()
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	plain, _, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "40")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "40",
		"--drafter", dir, "--beam-width", "4", "--beam-length", "3", "--stats")
	if err != nil {
		t.Fatal(err)
	}
	if out != plain {
		t.Errorf("greedy text with the drafter differs:\n%q\n%q", out, plain)
	}
	if !strings.Contains(stderr, "redrafter W=4 L=3") || !strings.Contains(stderr, "per step") {
		t.Errorf("--stats did not report the ReDrafter ledger:\n%s", stderr)
	}
	js, _, err := runCLI(t, "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "10",
		"--drafter", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Tokens []int32 `json:"tokens"`
		Stats  struct {
			Draft *struct {
				Steps int `json:"steps"`
			} `json:"redrafter"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(js), &r); err != nil || len(r.Tokens) != 10 || r.Stats.Draft == nil || r.Stats.Draft.Steps == 0 {
		t.Errorf("--json: %v, %+v\n%s", err, r, js)
	}
	info, _, err := runCLI(t, "inspect", dir)
	if err != nil || !strings.Contains(info, "ReDrafter head for an LLM with hidden size 64 and vocabulary 512") {
		t.Errorf("inspect drafter: %v\n%s", err, info)
	}
}

// A failing command exits non-zero with its error on stderr, nothing on
// stdout, and no stack trace.
func TestCLIErrorsExitNonZero(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.gguf")
	out, stderr, err := runCLI(t, "generate", "--model", missing)
	if err == nil {
		t.Fatal("generate with a missing model exited 0")
	}
	if out != "" || !strings.Contains(stderr, "no such file") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("stdout %q, stderr %q", out, stderr)
	}
}

// A command whose output cannot be written (a full disk: /dev/full) says so
// and exits 1: inspect and devices exited 0 with their output lost.
func TestCLIStdoutWriteErrors(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here (%v): Linux has one", err)
	}
	defer full.Close()
	for _, args := range [][]string{
		{"inspect", stories},
		{"devices"},
		{"generate", "--backend", "cpu", "-m", stories, "-p", "Once", "-n", "4"},
		{"--help"},
	} {
		cmd := exec.Command(bin, args...)
		var errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = full, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut.String(), "no space left on device") {
			t.Errorf("%v > /dev/full: %v, stderr %q; want exit 1 naming the write error", args, err, errOut.String())
		}
	}
}
