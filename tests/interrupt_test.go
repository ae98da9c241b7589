package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopBound is how long a command may take to exit after Ctrl-C: it must
// stop within a second; the rest is slack for a loaded machine.
const stopBound = 3 * time.Second

// watched collects one output stream of a command and calls hit (once,
// shared by stdout and stderr) when the stream first holds trigger.
type watched struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	hit     func()
}

func (w *watched) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	found := w.trigger != "" && strings.Contains(w.buf.String(), w.trigger)
	w.mu.Unlock()
	if found {
		w.hit()
	}
	return len(p), nil
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// interrupted is what a command did after Ctrl-C.
type interrupted struct {
	stdout, stderr string
	code           int
	stopped        time.Duration // from the signal to the exit
}

// interrupt runs the binary with args, sends sig when trigger appears on
// stdout or stderr (or after wait, if trigger is ""), and returns what it
// did. The test fails if the command ends before the signal.
func interrupt(t *testing.T, sig syscall.Signal, trigger string, wait time.Duration, args ...string) interrupted {
	t.Helper()
	cmd := exec.Command(bin, args...)
	seen := make(chan struct{})
	var once sync.Once
	hit := func() { once.Do(func() { close(seen) }) }
	out := &watched{trigger: trigger, hit: hit}
	errOut := &watched{trigger: trigger, hit: hit}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var timeout <-chan time.Time
	if trigger == "" {
		timeout = time.After(wait)
	} else {
		timeout = time.After(60 * time.Second)
	}
	select {
	case err := <-exited:
		t.Fatalf("%v ended before Ctrl-C (%v):\nstdout %q\nstderr %q", args, err, out.String(), errOut.String())
	case <-seen:
	case <-timeout:
		if trigger != "" {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("%v never printed %q:\nstderr %q", args, trigger, errOut.String())
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	var err error
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("%v still running 30 s after Ctrl-C:\nstderr %q", args, errOut.String())
	}
	r := interrupted{stdout: out.String(), stderr: errOut.String(), stopped: time.Since(sent)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	}
	return r
}

// files lists every path under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// Every long command stops on Ctrl-C within a second, says
// "redrafter: interrupted" on one line, exits 130 and leaves no
// temporaries: the model here is stories260K inflated to a shape that
// makes each command take many seconds. SIGTERM (what timeout, systemd and
// container runtimes send) and SIGHUP stop them the same way, exiting 143
// and 129: they left quantize's and inflate's hidden temporaries behind,
// and generate without its last newline and stats.
func TestInterruptLongCommands(t *testing.T) {
	base := t.TempDir()
	mid := filepath.Join(base, "mid.gguf")
	midHead := filepath.Join(base, "mid-drafter")
	if _, stderr, err := runCLI(t, "dev", "inflate", "--model", stories, "--drafter", storiesHead, "--out", mid,
		"--dim", "1024", "--heads", "16", "--kv-heads", "4", "--layers", "8", "--ffn", "2816"); err != nil {
		t.Fatalf("inflating: %v\n%s", err, stderr)
	}
	// A small distillation set of the inflated model, for train-drafter.
	set := filepath.Join(base, "set")
	few := filepath.Join(base, "few.txt")
	if err := os.WriteFile(few, []byte("Once upon a time\nLily and Ben\nThe cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runCLI(t, "distill", "--backend", "cpu", "--model", mid, "--prompts", few, "--out", set,
		"--max-tokens", "6", "--log-level", "warn"); err != nil {
		t.Fatalf("distilling: %v\n%s", err, stderr)
	}
	heldout := "../models/stories260K/distill/prompts-heldout.txt"
	// stdout of generate is the text; the others print a result at the
	// end, which an interrupted run must not.
	for _, c := range []struct {
		name    string
		trigger string // sent Ctrl-C when this appears (else after a second)
		args    []string
		allowed []string // files the command may leave in its output directory
		sig     syscall.Signal
	}{
		{"dev inflate", "msg=inflate", []string{"dev", "inflate", "--model", stories, "--out", "OUT/big.gguf"}, nil, syscall.SIGINT},
		{"quantize", "msg=quantize", []string{"quantize", "--in", mid, "--out", "OUT/q4"}, nil, syscall.SIGINT},
		{"generate", "Once", []string{"generate", "--backend", "cpu", "-m", mid, "-n", "0", "--stats"}, nil, syscall.SIGINT},
		{"dev inflate SIGTERM", "msg=inflate", []string{"dev", "inflate", "--model", stories, "--out", "OUT/big.gguf"}, nil, syscall.SIGTERM},
		{"quantize SIGTERM", "msg=quantize", []string{"quantize", "--in", mid, "--out", "OUT/q4"}, nil, syscall.SIGTERM},
		{"quantize SIGHUP", "msg=quantize", []string{"quantize", "--in", mid, "--out", "OUT/q4"}, nil, syscall.SIGHUP},
		{"generate SIGTERM", "Once", []string{"generate", "--backend", "cpu", "-m", mid, "-n", "0", "--stats"}, nil, syscall.SIGTERM},
		{"perplexity", "", []string{"perplexity", "--backend", "cpu", "--model", mid, "--text", "OUT/held.txt", "--sample", "3", "--max-tokens", "0"}, nil, syscall.SIGINT},
		{"bench", "", []string{"bench", "--backend", "cpu", "--model", mid, "--drafter", midHead, "--prompts", heldout,
			"--limit", "2", "--max-tokens", "200", "--json", "OUT/bench.json"}, nil, syscall.SIGINT},
		// distill keeps finished continuations (a rerun resumes), never a
		// half-written shard.
		{"distill", "", []string{"distill", "--backend", "cpu", "--model", mid, "--prompts", heldout, "--out", "OUT/set",
			"--max-tokens", "300"}, []string{"set", "set/meta.json"}, syscall.SIGINT},
		{"train-drafter", "", []string{"train-drafter", "--backend", "cpu", "--model", mid, "--data", set, "--out", "OUT/head",
			"--steps", "100000", "--holdout", "0.4"}, nil, syscall.SIGINT},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = strings.ReplaceAll(a, "OUT", out)
			}
			r := interrupt(t, c.sig, c.trigger, time.Second, args...)
			if want := 128 + int(c.sig); r.code != want {
				t.Errorf("exit code %d, want %d\nstderr %q", r.code, want, r.stderr)
			}
			t.Logf("stopped %v after %v", r.stopped.Round(time.Millisecond), c.sig)
			if r.stopped > stopBound {
				t.Errorf("took %v to stop after %v", r.stopped.Round(time.Millisecond), c.sig)
			}
			last := map[syscall.Signal]string{syscall.SIGINT: "redrafter: interrupted\n",
				syscall.SIGTERM: "redrafter: stopped by SIGTERM\n", syscall.SIGHUP: "redrafter: stopped by SIGHUP\n"}[c.sig]
			if !strings.HasSuffix(r.stderr, last) || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("stderr does not end with one line %q:\n%s", last, r.stderr)
			}
			left := files(t, out)
			if c.name == "distill" {
				// Shards finished before Ctrl-C stay (a rerun resumes from
				// them); each must be whole lines of JSON.
				left = slices.DeleteFunc(left, func(f string) bool {
					return strings.HasPrefix(f, "set/shard-") && wholeJSONL(t, filepath.Join(out, f))
				})
			}
			if !equalSets(left, c.allowed) {
				t.Errorf("left in the output directory: %v (allowed %v)", left, c.allowed)
			}
			if strings.HasPrefix(c.name, "generate") {
				if !strings.HasSuffix(r.stdout, "\n") {
					t.Errorf("stdout does not end its line: %q", r.stdout[max(0, len(r.stdout)-40):])
				}
				// The stats of what was generated before Ctrl-C (needs the
				// API to return the partial result on cancellation).
				if !strings.Contains(r.stderr, "decode: ") || !strings.Contains(r.stderr, "stop: ") {
					t.Errorf("--stats printed no stats after Ctrl-C:\n%s", r.stderr)
				}
			} else if c.name != "bench" && r.stdout != "" {
				t.Errorf("an interrupted %s printed a result: %q", c.name, r.stdout)
			}
		})
	}
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			return false
		}
	}
	return true
}

// wholeJSONL reports whether a file is complete lines of JSON.
func wholeJSONL(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
		return false
	}
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if !json.Valid(line) {
			return false
		}
	}
	return true
}

// chat waiting for input stops on SIGTERM and SIGHUP as the other commands
// do (Ctrl-C at its prompt only warns): exit 128 + the signal, one line on
// stderr. The default action killed it.
func TestChatStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		cmd := exec.Command(bin, "chat", "--backend", "cpu", "--model", stories)
		stdin, err := cmd.StdinPipe() // open and silent: the chat waits for a line
		if err != nil {
			t.Fatal(err)
		}
		loaded := make(chan struct{})
		var once sync.Once
		// The model has no template: the chat warns once it has loaded it.
		errOut := &watched{trigger: "no chat template", hit: func() { once.Do(func() { close(loaded) }) }}
		cmd.Stderr = errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-loaded:
		case err := <-exited:
			t.Fatalf("chat ended before %v: %v\n%s", sig, err, errOut.String())
		}
		cmd.Process.Signal(sig)
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Fatalf("chat still running 30 s after %v", sig)
		}
		stdin.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if want := 128 + int(sig); code != want || !strings.HasSuffix(errOut.String(), "redrafter: stopped by SIG"+map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP"}[sig]+"\n") {
			t.Errorf("%v: exit code %d (want %d), stderr %q", sig, code, want, errOut.String())
		}
	}
}
