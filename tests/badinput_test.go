package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// caseBound is how long one bad input may take to be refused: every case
// here is refused before any real work, in well under a second.
const caseBound = 10 * time.Second

// badCase is one hostile or mistaken command line.
type badCase struct {
	name  string
	args  []string // FIX stands for the fixture directory
	stdin string
	// want is a piece of the error line ("" for any one-line error).
	want string
	// ok marks a documented success (exit 0); warns are the warning lines
	// ("redrafter: warning: ...") it must print on stderr.
	ok    bool
	warns []string
}

// The bad-input suite: each case runs the real binary and must exit
// non-zero with exactly one line on stderr, "redrafter: <what>: <why>",
// nothing on stdout, no panic or stack trace, within caseBound, and leave
// no file behind (in the fixtures, the working directory or TMPDIR). The
// few documented successes exit 0 with their warning lines.
//
// Cases marked "library" are refused by the library's own validation
// (module root and internal/model/*), not by the CLI.
func TestBadInput(t *testing.T) {
	fix := badInputFixtures(t)
	// Each case runs in an empty directory of its own, so paths are absolute.
	stories, storiesHead := absPath(t, stories), absPath(t, storiesHead)
	stop := func(args ...string) []string {
		return append([]string{"generate", "--backend", "cpu", "-n", "4"}, args...)
	}
	cases := []badCase{
		// Flags of generate (and chat, which shares them).
		{name: "temperature NaN", args: stop("-m", stories, "--temperature", "NaN"), want: "--temperature NaN"},
		{name: "temperature +Inf", args: stop("-m", stories, "--temp", "+Inf"), want: "--temperature +Inf"},
		{name: "temperature negative", args: stop("-m", stories, "--temp", "-1"), want: "--temperature -1"},
		{name: "temperature not a number", args: stop("-m", stories, "--temperature", "warm"), want: "--temperature"},
		{name: "context negative", args: stop("-m", stories, "--context", "-1"), want: "--context -1"},
		{name: "context above the model's", args: stop("-m", stories, "--context", "1000000000000"), want: "the model holds at most 2048 tokens"},
		{name: "context not an integer", args: stop("-m", stories, "--context", "1e12"), want: "--context"},
		{name: "accept unknown", args: stop("-m", stories, "--accept", "foo"), want: `--accept "foo": want exact or apple`},
		{name: "top-p above 1", args: stop("-m", stories, "--top-p", "1.01"), want: "--top-p"},
		{name: "top-p NaN", args: stop("-m", stories, "--top-p", "NaN"), want: "--top-p"},
		{name: "top-k negative", args: stop("-m", stories, "--top-k", "-1"), want: "--top-k"},
		{name: "max-tokens negative", args: stop("-m", stories, "--max-tokens", "-3"), want: "--max-tokens"},
		{name: "kv-cache unknown", args: stop("-m", stories, "--kv-cache", "f8"), want: `"f8"`},
		{name: "backend unknown", args: stop("-m", stories, "--backend", "tpu"), want: `unknown backend "tpu"`},
		{name: "threads 100000", args: append([]string{"--threads", "100000"}, stop("-m", stories)...), want: "--threads 100000: want 1 to"},
		{name: "threads negative", args: append([]string{"--threads", "-2"}, stop("-m", stories)...), want: "--threads -2"},
		{name: "log level unknown", args: append([]string{"--log-level", "loud"}, stop("-m", stories)...), want: "--log-level"},
		{name: "unknown flag", args: stop("-m", stories, "--temprature", "1"), want: "unknown flag: --temprature"},
		{name: "stray argument", args: stop("-m", stories, "hello"), want: `unknown command "hello"`},
		{name: "no model", args: []string{"generate"}, want: `required flag(s) "model" not set`},
		{name: "prompt and prompt file", args: stop("-m", stories, "-p", "x", "--prompt-file", "FIX/none.txt"), want: "not both"},
		{name: "prompt file missing", args: stop("-m", stories, "--prompt-file", "FIX/none.txt"), want: "--prompt-file FIX/none.txt: no such file or directory"},
		{name: "prompt longer than the context", args: stop("-m", stories, "--context", "16", "-p", strings.Repeat("Once upon a time. ", 20)), want: "context of 16"},
		{name: "beam flags without a drafter", args: stop("-m", stories, "--beam-width", "3", "--beam-length", "4"), ok: true,
			warns: []string{"--beam-width has no effect without --drafter", "--beam-length has no effect without --drafter"}},
		{name: "beam width 0 with a drafter", args: stop("-m", stories, "--drafter", storiesHead, "--beam-width", "51"), want: "beam width 51"},
		{name: "beam length 1", args: stop("-m", stories, "--drafter", storiesHead, "--beam-length", "1"), want: "beam length 1"},

		// What --model points at.
		{name: "model missing", args: stop("-m", "FIX/none.gguf"), want: "--model FIX/none.gguf: no such file or directory"},
		{name: "model is a FIFO", args: stop("-m", "FIX/fifo"), want: "named pipe"},
		{name: "model is a device", args: stop("-m", "/dev/zero"), want: "device"},
		{name: "model is an empty directory", args: stop("-m", "FIX/empty"), want: "has no config.json"},
		{name: "model is a draft head", args: stop("-m", storiesHead), want: "pass it as --drafter"},
		{name: "model without a tokenizer", args: stop("-m", "FIX/hf-notok"), want: "looked for tokenizer.json and tokenizer.model"},
		{name: "model empty file", args: stop("-m", "FIX/trunc-0.gguf"), want: "trunc-0.gguf"},
		{name: "model truncated in the magic", args: stop("-m", "FIX/trunc-3.gguf"), want: "trunc-3.gguf"},
		{name: "model truncated in the header", args: stop("-m", "FIX/trunc-13.gguf"), want: "trunc-13.gguf"},
		{name: "model truncated in the metadata", args: stop("-m", "FIX/trunc-1000.gguf"), want: "trunc-1000.gguf"},
		{name: "model truncated in the tensors", args: stop("-m", "FIX/trunc-half.gguf"), want: "trunc-half.gguf"},
		{name: "model garbage", args: stop("-m", "FIX/garbage.gguf"), want: "garbage.gguf"},
		{name: "model garbage after the magic", args: stop("-m", "FIX/magic.gguf"), want: "magic.gguf"},
		{name: "safetensors truncated", args: stop("-m", "FIX/hf-trunc"), want: "model.safetensors"},
		{name: "config.json not JSON", args: stop("-m", "FIX/hf-badjson"), want: "config.json"},
		{name: "config context 1e12 (library)", args: stop("-m", "FIX/hf-ctx")},
		{name: "config 1e9 layers (library)", args: stop("-m", "FIX/hf-layers")},
		{name: "config bos 99999 (library)", args: stop("-m", "FIX/hf-bos"), want: "99999"},
		{name: "config rope_theta 0 (library)", args: stop("-m", "FIX/hf-rope"), want: "rope"},
		{name: "tokenizer smaller than the embedding (library)", args: stop("-m", "FIX/smalltok.gguf"), want: "100"},

		// What --drafter points at.
		{name: "drafter missing", args: stop("-m", stories, "--drafter", "FIX/none"), want: "--drafter FIX/none: no such file or directory"},
		{name: "drafter is a file", args: stop("-m", stories, "--drafter", stories), want: "--drafter"},
		{name: "drafter is a model", args: stop("-m", stories, "--drafter", "FIX/hf"), want: "is a model, not a ReDrafter draft head"},
		{name: "drafter for another vocabulary", args: stop("-m", stories, "--drafter", "FIX/head-32k"), want: "32000"},
		{name: "drafter rnn false (library)", args: stop("-m", stories, "--drafter", "FIX/head-nornn"), want: "rnn"},

		// Other commands.
		{name: "quantize keep-fp16 unknown", args: []string{"quantize", "--in", stories, "--out", "FIX/q", "--keep-fp16", "foo"}, want: `keep "foo" names no matrix`},
		{name: "quantize force over a thesis", args: []string{"quantize", "--in", stories, "--out", "FIX/thesis", "--force"}, want: "it holds thesis.txt"},
		{name: "quantize over an output", args: []string{"quantize", "--in", stories, "--out", "FIX/hf"}, want: "pass --force"},
		{name: "quantize bits 3", args: []string{"quantize", "--in", stories, "--out", "FIX/q", "--bits", "3"}, want: "3 bits"},
		{name: "quantize input missing", args: []string{"quantize", "--in", "FIX/none", "--out", "FIX/q"}, want: "--in FIX/none: no such file or directory"},
		{name: "quantize input garbage", args: []string{"quantize", "--in", "FIX/garbage.gguf", "--out", "FIX/q"}, want: "garbage.gguf"},
		{name: "chat template unknown", args: []string{"chat", "-m", stories, "--template", "alpaca"}, want: "--template"},
		{name: "chat temperature NaN", args: []string{"chat", "-m", stories, "--temp", "NaN"}, want: "--temperature NaN"},
		{name: "inspect garbage", args: []string{"inspect", "FIX/garbage.gguf"}, want: "garbage.gguf"},
		{name: "inspect FIFO", args: []string{"inspect", "FIX/fifo"}, want: "FIX/fifo: not a model file or directory (it is a named pipe)"},
		{name: "perplexity text missing", args: []string{"perplexity", "--model", stories, "--text", "FIX/none.txt"}, want: "--text FIX/none.txt: no such file or directory"},
		{name: "bench prompts missing", args: []string{"bench", "--model", stories, "--drafter", storiesHead, "--prompts", "FIX/none.jsonl"}, want: "--prompts FIX/none.jsonl: no such file or directory"},
		{name: "distill no prompts", args: []string{"distill", "--model", stories, "--prompts", "FIX/none.txt", "--out", "FIX/set"}, want: "--prompts FIX/none.txt: no such file or directory"},
		{name: "train-drafter no data", args: []string{"train-drafter", "--model", stories, "--data", "FIX/none", "--out", "FIX/h"}, want: "none"},
		{name: "train-drafter bad beams", args: []string{"train-drafter", "--model", stories, "--data", "FIX/none", "--out", "FIX/h", "--eval-beams", "4x1"}, want: "--eval-beams"},
		{name: "inflate into its input", args: []string{"dev", "inflate", "--model", stories, "--out", stories}, want: "--out must differ"},
		{name: "inflate a directory", args: []string{"dev", "inflate", "--model", "FIX/hf", "--out", "FIX/big.gguf"}, want: ".gguf"},
		{name: "unknown command", args: []string{"launch"}, want: `unknown command "launch"`},
	}
	// The cases run in parallel: each is a process of its own in
	// directories of its own, and the fixtures are only read (each case
	// checks that they are unchanged).
	start := time.Now()
	t.Run("cases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				runBadCase(t, fix, c)
			})
		}
	})
	t.Logf("%d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
}

func runBadCase(t *testing.T, fix string, c badCase) {
	work, tmp := t.TempDir(), t.TempDir()
	args := make([]string, len(c.args))
	for i, a := range c.args {
		args[i] = strings.ReplaceAll(a, "FIX", fix)
	}
	before := tree(t, fix)
	ctx, cancel := context.WithTimeout(context.Background(), caseBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdin = strings.NewReader(c.stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	stderr := strings.ReplaceAll(errOut.String(), fix, "FIX")
	if ctx.Err() != nil {
		t.Fatalf("still running after %v (killed); stderr %q", caseBound, stderr)
	}
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") || strings.Contains(stderr, "fatal error") {
		t.Fatalf("crashed (exit %d):\n%.2000s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	var warns, rest []string
	for _, l := range lines {
		if w, ok := strings.CutPrefix(l, "redrafter: warning: "); ok {
			warns = append(warns, w)
		} else if l != "" {
			rest = append(rest, l)
		}
	}
	if !slices.Equal(warns, c.warns) {
		t.Errorf("warnings %q, want %q", warns, c.warns)
	}
	t.Logf("exit %d, stderr %q", code, stderr)
	switch {
	case c.ok:
		if code != 0 || len(rest) != 0 {
			t.Errorf("exit %d, stderr %q; want success", code, stderr)
		}
	case code == 0:
		t.Errorf("exit 0 (stdout %q), want an error", out.String())
	case len(rest) != 1 || !strings.HasPrefix(rest[0], "redrafter: ") || !strings.HasSuffix(stderr, "\n"):
		t.Errorf("stderr is not one line \"redrafter: ...\":\n%s", stderr)
	case !strings.Contains(rest[0], c.want):
		t.Errorf("error %q does not say %q", rest[0], c.want)
	case out.Len() != 0:
		t.Errorf("wrote %q to stdout on error", out.String())
	}
	if took > caseBound/2 {
		t.Errorf("took %v", took)
	}
	if after := tree(t, fix); !slices.Equal(before, after) {
		t.Errorf("changed the fixtures:\n before %v\n after  %v", before, after)
	}
	for _, dir := range []string{work, tmp} {
		if left := tree(t, dir); len(left) != 0 {
			t.Errorf("left files behind in %s: %v", dir, left)
		}
	}
}

// tree lists every path under dir with its size, sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			rel = fmt.Sprintf("%s (%d bytes, %v)", rel, info.Size(), info.ModTime().UnixNano())
		}
		out = append(out, rel)
		return nil
	})
	slices.Sort(out)
	return out
}

// badInputFixtures writes the hostile inputs once: truncated and garbage
// model files, HF checkpoints with lying configs, draft heads that do not
// fit, a FIFO, and a directory of someone's work.
func badInputFixtures(t *testing.T) string {
	t.Helper()
	fix := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(fix, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model, err := os.ReadFile(stories)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 3, 13, 1000} {
		write("trunc-"+itoa(n)+".gguf", model[:n])
	}
	write("trunc-half.gguf", model[:len(model)/2])
	r := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	write("garbage.gguf", junk)
	write("magic.gguf", append([]byte("GGUF\x03\x00\x00\x00"), junk...))
	if err := syscall.Mkfifo(filepath.Join(fix, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(fix, "empty"), 0o755)
	os.Mkdir(filepath.Join(fix, "thesis"), 0o755)
	write("thesis/thesis.txt", []byte("chapter 1"))

	// An HF checkpoint of the demo model (f32), and copies that lie.
	hf := filepath.Join(fix, "hf")
	if _, stderr, err := runCLI(t, "quantize", "--in", stories, "--out", hf, "--bits", "32"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	variant := func(name string, edit func(dir string, cfg map[string]any)) {
		t.Helper()
		dir := filepath.Join(fix, name)
		copyDir(t, hf, dir)
		raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		edit(dir, cfg)
		raw, _ = json.Marshal(cfg)
		os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
	}
	set := func(k string, v any) func(string, map[string]any) {
		return func(_ string, cfg map[string]any) { cfg[k] = v }
	}
	variant("hf-ctx", set("max_position_embeddings", 1e12))
	variant("hf-layers", set("num_hidden_layers", 1e9))
	variant("hf-bos", set("bos_token_id", 99999))
	variant("hf-rope", set("rope_theta", 0))
	variant("hf-notok", func(dir string, _ map[string]any) { os.Remove(filepath.Join(dir, "tokenizer.model")) })
	variant("hf-trunc", func(dir string, _ map[string]any) {
		p := filepath.Join(dir, "model.safetensors")
		st, _ := os.Stat(p)
		os.Truncate(p, st.Size()/2)
	})
	copyDir(t, hf, filepath.Join(fix, "hf-badjson"))
	write("hf-badjson/config.json", []byte(`{"hidden_size": 64,`))

	// Draft heads: one for a 32k vocabulary, one that says it is no RNN.
	copyDir(t, storiesHead, filepath.Join(fix, "head-nornn"))
	raw, _ := os.ReadFile(filepath.Join(storiesHead, "config.json"))
	write("head-nornn/config.json", bytes.Replace(raw, []byte(`"rnn": true`), []byte(`"rnn": false`), 1))
	copyDir(t, storiesHead, filepath.Join(fix, "head-32k"))
	write("head-32k/config.json", bytes.Replace(raw, []byte(`"vocab_size": 512`), []byte(`"vocab_size": 32000`), 1))

	// The demo model with a tokenizer of 100 tokens for its 512 rows.
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	kv := g.KVs()
	for i, e := range kv {
		if v := reflect.ValueOf(e.Value); strings.HasPrefix(e.Key, "tokenizer.ggml.") && v.Kind() == reflect.Slice && v.Len() == 512 {
			kv[i].Value = v.Slice(0, 100).Interface()
		}
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, kv, g.Tensors, 0); err != nil {
		t.Fatal(err)
	}
	write("smalltok.gguf", buf.Bytes())
	return fix
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
