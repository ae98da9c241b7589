package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

const stories = "../../models/stories260K/stories260K.gguf"

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestGenerateJSON(t *testing.T) {
	out, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--max-tokens", "8", "--json",
		"--prompt", "Once upon a time")
	if err != nil {
		t.Fatal(err)
	}
	var r resultJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if len(r.Tokens) != 8 || r.Text == "" || r.Stats.GeneratedTokens != 8 || r.Stats.Backend != "cpu" || r.Stats.Draft != nil {
		t.Errorf("unexpected result %+v", r)
	}
}

// --top-p 0 keeps only the most probable token (OpenAI's top_p 0): at
// temperature 1, 8 seeds print the greedy text (it was refused).
func TestTopPZero(t *testing.T) {
	args := []string{"generate", "--backend", "cpu", "--model", stories, "--max-tokens", "24", "--prompt", "Once upon a time"}
	greedy, _, err := run(t, "", append(args, "--temperature", "0")...)
	if err != nil {
		t.Fatal(err)
	}
	for seed := range 8 {
		out, stderr, err := run(t, "", append(args, "--temperature", "1", "--top-p", "0", "--seed", fmt.Sprint(seed))...)
		if err != nil || out != greedy {
			t.Errorf("seed %d: --top-p 0 printed %q (%v %s), greedy %q", seed, out, err, stderr, greedy)
		}
	}
}

// Every user mistake gets an error that says what is wrong, and nothing
// on stdout.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	trunc := filepath.Join(dir, "trunc.gguf")
	data, _ := os.ReadFile(stories)
	os.WriteFile(trunc, data[:1000], 0o644)
	wrongHead := filepath.Join(dir, "head")
	drafter.NewRandom(drafter.Config{VocabSize: 32000, HiddenSize: 64, NumDraftLayers: 1, RNN: true}, 1).Save(wrongHead)
	long := strings.Repeat("Once upon a time there was a cat. ", 40)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--model", filepath.Join(dir, "none.gguf")}, "no such file"},
		{[]string{"generate", "--model", trunc}, "gguf"},
		{[]string{"generate"}, `required flag(s) "model" not set`},
		{[]string{"generate", "--model", stories, "--top-p", "1.5"}, "--top-p"},
		{[]string{"generate", "--model", stories, "--temperature", "-1"}, "--temperature"},
		{[]string{"generate", "--model", stories, "--context", "64", "--prompt", long}, "context of 64"},
		{[]string{"generate", "--model", stories, "--drafter", wrongHead}, "vocabulary has 32000 tokens"},
		{[]string{"generate", "--model", stories, "--drafter", dir}, "not a draft head"},
		{[]string{"generate", "--model", stories, "--backend", "tpu"}, `unknown backend "tpu"`},
		{[]string{"generate", "--model", stories, "--kv-cache", "f8"}, `KV cache type "f8"`},
		{[]string{"chat", "--model", stories, "--template", "alpaca"}, "--template"},
		{[]string{"inspect"}, "accepts 1 arg"},
		{[]string{"selftest", "--backend", "metal"}, "go run ./internal/cmd/gpucheck --backend metal"},
	} {
		out, _, err := run(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
		if out != "" {
			t.Errorf("%v: wrote %q to stdout on error", c.args, out)
		}
	}
}

func TestChatReadsLinesAndKeepsContext(t *testing.T) {
	out, _, err := run(t, "Tell me a story\nAnother one\n", "chat", "--backend", "cpu", "--model", stories,
		"--max-tokens", "12", "--template", "vicuna")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out, "\n"); lines < 2 {
		t.Errorf("expected two replies, got %q", out)
	}
}

func TestInspect(t *testing.T) {
	out, _, err := run(t, "", "inspect", stories)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture: llama", "layers 5, dim 64", "heads 8 (kv 4", "vocab 512",
		"tokenizer:    llama, 512 tokens", "blk.4.ffn_down.weight", "F32",
		"F32       48 tensors   cpu: as stored; metal: as stored; cuda: as stored",
		"layers run as cpu: unfused ops; metal: fused QKV with RoPE and cache write, O, gate-up, down; cuda: fused QKV"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
}

// inspect describes a Qwen3 model, from GGUF and from an HF checkpoint:
// its explicit head dimension, tied output, and how its layers run.
func TestInspectQwen3(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "qwen3", Vocab: 32, Dim: 32, FFN: 48, Layers: 1, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{ck.GGUF, ck.HF} {
		out, _, err := run(t, "", "inspect", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"architecture: qwen3", "heads 4 (kv 2, head dim 16)", "pairs neox",
			"tied output true; qkv bias false", "blk.0.attn_q_norm.weight",
			"layers run as cpu: unfused ops; metal: fused O, gate-up, down; q, k, v unfused around the head norms; cuda: fused O"} {
			if path == ck.HF && strings.HasPrefix(want, "blk.") {
				want = "model.layers.0.self_attn.q_norm.weight"
			}
			if !strings.Contains(out, want) {
				t.Errorf("inspect %s lacks %q:\n%s", filepath.Base(path), want, out)
			}
		}
	}
}

// inspect says when a model has a sliding window (Mistral's).
func TestInspectMistralWindow(t *testing.T) {
	path, err := llamatest.WriteMistralGGUF(t.TempDir(), llamatest.Spec{Vocab: 32, Dim: 32, FFN: 48, Layers: 1, Heads: 4,
		KVHeads: 2, HeadDim: 8, NormEps: 1e-6, RopeTheta: 1e4, Context: 64}, 4096, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "inspect", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture: mistral", "sliding window 4096 positions"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
}

// inspect describes a Gemma 3 model from GGUF and from an HF checkpoint:
// its window, global layers and their RoPE bases, its Gemma parts, and how
// its layers run.
func TestInspectGemma3(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma3", Vocab: 32, Dim: 32, FFN: 48, Layers: 6, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true, SlidingWindow: 16}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{ck.GGUF, ck.HF} {
		out, _, err := run(t, "", "inspect", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"architecture: gemma3", "rope base 1e+06", "sliding window 16 positions",
			"a global layer (no window) every 6 layers; the sliding layers' rope base 10000, unscaled",
			"gemma: embeddings × 5.656854, norms after attention and MLP too, q/k head norms true, GeGLU true, attention scale 0.25",
			"metal: fused gate-up with GeGLU; q, k, v unfused around the head norms; O and down unfused before their post-norms"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect %s lacks %q:\n%s", filepath.Base(path), want, out)
			}
		}
	}
}

// inspect describes a Gemma 2 model from GGUF and HF: every other layer
// global, its soft-caps, and how its layers run.
func TestInspectGemma2(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma2", Vocab: 32, Dim: 32, FFN: 48, Layers: 2, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e4, Context: 64, Tied: true, SlidingWindow: 16, AttnSoftCap: 50, FinalSoftCap: 30}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{ck.GGUF, ck.HF} {
		out, _, err := run(t, "", "inspect", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"architecture: gemma2", "sliding window 16 positions", "a global layer (no window) every 2 layers\n",
			"q/k head norms false, GeGLU true", "soft-caps: attention scores 50, logits 30",
			"metal: fused QKV with RoPE and cache write, gate-up with GeGLU; O and down unfused before their post-norms"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect %s lacks %q:\n%s", filepath.Base(path), want, out)
			}
		}
	}
}

// inspect says how each ggml type of a file runs on each backend.
func TestInspectTensorTypes(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	types := map[string]quant.GGML{"attn_q.weight": quant.Q5_0, "attn_k.weight": quant.IQ4_NL, "attn_v.weight": quant.Q4_1}
	var ts []formats.Tensor
	for _, tn := range g.Tensors {
		parts := strings.SplitN(tn.Name, ".", 3) // blk.N.attn_q.weight
		if typ, ok := types[parts[len(parts)-1]]; ok && len(parts) == 3 {
			v, err := tn.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if tn.Data, err = quant.QuantizeGGML(typ, v); err != nil {
				t.Fatal(err)
			}
			tn.DType, _ = formats.ParseDType(typ.String())
		}
		ts = append(ts, tn)
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mixed.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "inspect", "--tensors=false", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Q4_1       5 tensors   cpu: 4-bit affine (exact); metal: 4-bit affine (exact); cuda: 4-bit affine (exact)",
		"Q5_0       5 tensors   cpu: Q5_0 blocks; metal: 8-bit affine (exact); cuda: 8-bit affine (exact)",
		"IQ4_NL     5 tensors   cpu: IQ4_NL blocks; metal: f16 or f32 (exact); cuda: f16 or f32 (exact)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
}

// endless is a stream that never ends, as /dev/zero or `yes |` is.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// A prompt file that is a device is refused before it is read, and a prompt
// stream that does not end stops at the bound with an error: both read
// forever and grew to gigabytes.
func TestPromptBounds(t *testing.T) {
	_, _, err := run(t, "", "generate", "--backend", "cpu", "--model", stories, "--prompt-file", "/dev/zero")
	if err == nil || err.Error() != "--prompt-file /dev/zero: not a text file (it is a device)" {
		t.Errorf("--prompt-file /dev/zero: %v", err)
	}
	for _, args := range [][]string{{"--prompt-file", "-"}, nil} {
		cmd := newRootCmd()
		var out, errOut bytes.Buffer
		cmd.SetArgs(append([]string{"generate", "--backend", "cpu", "--model", stories}, args...))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetIn(endless{})
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), "longer than 64 MiB") || out.Len() != 0 {
			t.Errorf("%v with an endless stdin: %v, stdout %q", args, err, out.String())
		}
	}
}

// inspect describes a Phi-3 model, from GGUF and from an HF checkpoint:
// its fused qkv and gate_up tensors as the file stores them, NeoX pairs,
// and how its layers run (the GPUs fuse q·k·v again).
func TestInspectPhi3(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "phi3", Vocab: 32, Dim: 32, FFN: 48, Layers: 1, Heads: 4,
		KVHeads: 2, HeadDim: 8, NormEps: 1e-5, RopeTheta: 1e4, Context: 64, RopeDims: 6, LongRope: llamatest.FixedLongRope(6, 16)}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{ck.GGUF, ck.HF} {
		out, _, err := run(t, "", "inspect", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"architecture: phi3", "heads 4 (kv 2, head dim 8)", "dims 6, pairs neox, scaling \"longrope\"",
			"longrope: the short factors for a context (--context) up to the original 16 tokens, the long ones beyond; attention factor 1.22",
			"tied output false; qkv bias false", "blk.0.attn_qkv.weight",
			"layers run as cpu: unfused ops; metal: fused QKV with RoPE and cache write, O, gate-up, down"} {
			if path == ck.HF && strings.HasPrefix(want, "blk.") {
				want = "model.layers.0.self_attn.qkv_proj.weight"
			}
			if !strings.Contains(out, want) {
				t.Errorf("inspect %s lacks %q:\n%s", filepath.Base(path), want, out)
			}
		}
	}
}

// inspect on an image-text Gemma 3 checkpoint shows its text model and
// says which tensors it does not read.
func TestInspectGemma3ImageText(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma3", Vocab: 32, Dim: 32, FFN: 48, Layers: 2, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true, SlidingWindow: 16}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "it")
	if err := llamatest.WriteGemma3ImageText(ck, dir, false); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "inspect", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture: gemma3", "a global layer (no window) every 6 layers",
		"note:         image-text Gemma 3: the text model (language_model.model.*) is loaded", "vision_tower.* (2)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
}
