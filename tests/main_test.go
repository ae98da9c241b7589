package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/metaltest"
)

// The bundled demo model and its draft head (models/stories260K/README.md).
const (
	stories     = "../models/stories260K/stories260K.gguf"
	storiesHead = "../models/stories260K/drafter"
)

// bin is the redrafter binary built for this test run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redrafter-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "redrafter")
	build := exec.Command("go", "build", "-o", bin, "../cmd/redrafter")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the redrafter binary:", err)
		os.Exit(1)
	}
	code := metaltest.Main(m) // m.Run, then removes the emulated kernels' builds
	os.RemoveAll(dir)
	os.Exit(code)
}

// runCLI runs the binary with args and returns its stdout and stderr; err
// is the exit error, if any.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// goldenGreedy is llama2.c's documented greedy output of stories260K from
// an empty prompt (models/stories260K/golden-greedy.md).
func goldenGreedy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../models/stories260K/golden-greedy.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const cmd = "-t 0.0\n"
	i := strings.Index(s, cmd)
	if i < 0 {
		t.Fatal("golden-greedy.md: no greedy run found")
	}
	s = s[i+len(cmd):]
	return s[:strings.Index(s, "\n```")]
}
