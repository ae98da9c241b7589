package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// readDump reads what dev logits wrote for prompt i: its tokens and its
// rows of logits.
func readDump(t *testing.T, dir, i string) ([]string, []float32) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(dir, i+".tokens"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, i+".logits"))
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for j := range v {
		v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
	}
	return strings.Fields(string(tok)), v
}

// dev random-model writes Qwen2.5-0.5B's widths (one layer) as a qwen2
// GGUF with stories260K's vocabulary, and dev logits decodes token-id
// prompts from it: each token is the argmax of the row written for it,
// feeding back its own tokens (--follow) gives the same bits, feeding
// others changes every row after the first and not the first, and the
// reference kernels agree with the fast ones to float32 rounding.
func TestRandomModelAndLogits(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "q.gguf")
	if _, stderr, err := run(t, "", "dev", "random-model", "--shape", "qwen2.5-0.5b", "--layers", "1",
		"--tokenizer-from", stories, "--out", model); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	ck, err := llama.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Model.Config
	ck.Close()
	if c.Arch != "qwen2" || c.Dim != 896 || c.FFN != 4864 || c.Heads != 14 || c.KVHeads != 2 || c.HeadDim != 64 ||
		c.Layers != 1 || c.Vocab != 512 || !c.QKVBias || !c.TiedOutput || !c.RopeNeoX {
		t.Fatalf("config %+v", c)
	}
	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte("1 88 326 122\n\n1 249 230 147 486 347\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logits := func(out string, extra ...string) {
		t.Helper()
		args := append([]string{"--backend", "cpu", "dev", "logits", "--model", model, "--prompts", prompts,
			"--tokens", "4", "--out", out}, extra...)
		if _, stderr, err := run(t, "", args...); err != nil {
			t.Fatalf("dev logits %v: %v\n%s", extra, err, stderr)
		}
	}
	free, self, other, ref := filepath.Join(dir, "free"), filepath.Join(dir, "self"), filepath.Join(dir, "other"), filepath.Join(dir, "ref")
	logits(free)
	var follow, others []byte
	for _, i := range []string{"0", "1"} {
		toks, rows := readDump(t, free, i)
		if len(toks) != 4 || len(rows) != 4*512 {
			t.Fatalf("prompt %s: %d tokens, %d logits", i, len(toks), len(rows))
		}
		for k, tok := range toks {
			row := rows[k*512 : (k+1)*512]
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			if tok != strconv.Itoa(best) {
				t.Errorf("prompt %s step %d: token %s, the row's argmax is %d", i, k, tok, best)
			}
		}
		follow = append(follow, strings.Join(toks, " ")+"\n"...)
		others = append(others, "5 6 7 8\n"...)
	}
	fself, fother := filepath.Join(dir, "self.txt"), filepath.Join(dir, "other.txt")
	if err := os.WriteFile(fself, follow, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fother, others, 0o644); err != nil {
		t.Fatal(err)
	}
	logits(self, "--follow", fself)
	logits(other, "--follow", fother)
	logits(ref, "--follow", fself, "--reference")
	for _, i := range []string{"0", "1"} {
		ft, fr := readDump(t, free, i)
		st, sr := readDump(t, self, i)
		_, or := readDump(t, other, i)
		rt, rr := readDump(t, ref, i)
		if !slices.Equal(ft, st) || !slices.Equal(fr, sr) {
			t.Errorf("prompt %s: following its own tokens changed the output", i)
		}
		if !slices.Equal(fr[:512], or[:512]) {
			t.Errorf("prompt %s: the first row depends on the followed tokens", i)
		}
		for k := 1; k < 4; k++ {
			if slices.Equal(fr[k*512:(k+1)*512], or[k*512:(k+1)*512]) {
				t.Errorf("prompt %s: row %d did not change with other tokens fed", i, k)
			}
		}
		var worst, scale float64
		for j := range fr {
			scale = math.Max(scale, math.Abs(float64(fr[j])))
			worst = math.Max(worst, math.Abs(float64(fr[j]-rr[j])))
		}
		if worst > 1e-5*scale || !slices.Equal(ft, rt) {
			t.Errorf("prompt %s: reference kernels differ by %g of %g (tokens %v, %v)", i, worst, scale, ft, rt)
		}
	}
	// A token outside the vocabulary is an error, not a crash.
	if err := os.WriteFile(prompts, []byte("1 512\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "", "dev", "logits", "--model", model, "--prompts", prompts, "--out", free)
	if err == nil || !strings.Contains(err.Error(), "token id 512 is outside the vocabulary of 512") {
		t.Errorf("token 512: %v", err)
	}
}

// dev random-model writes Gemma-2-2B's and Phi-3-mini's widths (one layer)
// under llama.cpp's keys and tensor names (src/llama-arch.cpp's
// LLM_ARCH_GEMMA2 and LLM_ARCH_PHI3 tables, shapes as llama-model.cpp
// creates them, outermost first) and a general.name llama.cpp accepts,
// redrafter reads them as the real models' configurations, and their
// logits spread as the scales promise; under REDRAFTER_TEST_FULL also
// Phi-3-mini-128k's and Mistral-7B's (as llama.cpp writes it, "llama").
// Phi-4-mini's and Phi-3-mini-128k's carry longrope as llama.cpp's
// converter writes it: the two factor tensors of one factor per rotated
// pair, the attention factor √(1 + ln 32/ln 4096) and the original
// context; Phi-4-mini's rotary covers 96 of each head's 128 dimensions.
func TestRandomModelGemma2Phi3(t *testing.T) {
	longrope := func(c llama.Config) bool {
		l := llamatest.FixedLongRope(96, 4096)
		return c.RopeScale.Type == "longrope" && c.RopeScale.OriginalContext == 4096 && c.Context == 131072 &&
			slices.Equal(c.RopeScale.ShortFactors, l.Short) && slices.Equal(c.RopeScale.LongFactors, l.Long) &&
			c.RopeScale.AttnFactor == float64(float32(math.Sqrt(1+math.Log(32)/math.Log(4096)))) &&
			c.SlidingWindow == 0 && !c.TiedOutput && c.RopeNeoX && c.NormEps == 1e-5 && c.RopeTheta == 10000
	}
	type shapeCase struct {
		shape   string
		tensors map[string][]int // blk.0's and the model's
		check   func(c llama.Config) bool
	}
	phi3mini128k := shapeCase{"phi3-mini-128k", map[string][]int{
		"token_embd.weight": {512, 3072}, "output_norm.weight": {3072}, "output.weight": {512, 3072},
		"rope_factors_long.weight": {48}, "rope_factors_short.weight": {48},
		"blk.0.attn_norm.weight": {3072}, "blk.0.attn_qkv.weight": {9216, 3072}, "blk.0.attn_output.weight": {3072, 3072},
		"blk.0.ffn_norm.weight": {3072}, "blk.0.ffn_up.weight": {16384, 3072}, "blk.0.ffn_down.weight": {3072, 8192},
	}, func(c llama.Config) bool {
		return c.Arch == "phi3" && c.Dim == 3072 && c.FFN == 8192 && c.Heads == 32 && c.KVHeads == 32 && c.HeadDim == 96 &&
			c.RopeDims == 96 && longrope(c)
	}}
	cases := []shapeCase{
		{"gemma2-2b", map[string][]int{
			"token_embd.weight": {512, 2304}, "output_norm.weight": {2304},
			"blk.0.attn_norm.weight": {2304}, "blk.0.attn_q.weight": {2048, 2304}, "blk.0.attn_k.weight": {1024, 2304},
			"blk.0.attn_v.weight": {1024, 2304}, "blk.0.attn_output.weight": {2304, 2048},
			"blk.0.post_attention_norm.weight": {2304}, "blk.0.ffn_norm.weight": {2304},
			"blk.0.ffn_gate.weight": {9216, 2304}, "blk.0.ffn_up.weight": {9216, 2304}, "blk.0.ffn_down.weight": {2304, 9216},
			"blk.0.post_ffw_norm.weight": {2304},
		}, func(c llama.Config) bool {
			return c.Arch == "gemma2" && c.Dim == 2304 && c.FFN == 9216 && c.Heads == 8 && c.KVHeads == 4 && c.HeadDim == 256 &&
				c.SlidingWindow == 4096 && c.SlidingPattern == 2 && c.AttnSoftCap == 50 && c.FinalSoftCap == 30 &&
				c.AttnScale == 1.0/16 && c.EmbedScale == 48 && c.TiedOutput && c.PostNorms && c.GeGLU && c.RopeNeoX &&
				c.NormEps == 1e-6 && c.RopeTheta == 10000
		}},
		{"phi3-mini", map[string][]int{
			"token_embd.weight": {512, 3072}, "output_norm.weight": {3072}, "output.weight": {512, 3072},
			"blk.0.attn_norm.weight": {3072}, "blk.0.attn_qkv.weight": {9216, 3072}, "blk.0.attn_output.weight": {3072, 3072},
			"blk.0.ffn_norm.weight": {3072}, "blk.0.ffn_up.weight": {16384, 3072}, "blk.0.ffn_down.weight": {3072, 8192},
		}, func(c llama.Config) bool {
			return c.Arch == "phi3" && c.Dim == 3072 && c.FFN == 8192 && c.Heads == 32 && c.KVHeads == 32 && c.HeadDim == 96 &&
				c.RopeDims == 96 && c.SlidingWindow == 2047 && !c.TiedOutput && c.RopeNeoX && c.NormEps == 1e-5 &&
				c.RopeTheta == 10000 && c.Context == 4096 && c.RopeScale.Type == ""
		}},
		{"phi4-mini", map[string][]int{
			"token_embd.weight": {512, 3072}, "output_norm.weight": {3072}, "output.weight": {512, 3072},
			"rope_factors_long.weight": {48}, "rope_factors_short.weight": {48},
			"blk.0.attn_norm.weight": {3072}, "blk.0.attn_qkv.weight": {5120, 3072}, "blk.0.attn_output.weight": {3072, 3072},
			"blk.0.ffn_norm.weight": {3072}, "blk.0.ffn_up.weight": {16384, 3072}, "blk.0.ffn_down.weight": {3072, 8192},
		}, func(c llama.Config) bool {
			return c.Arch == "phi3" && c.Dim == 3072 && c.FFN == 8192 && c.Heads == 24 && c.KVHeads == 8 && c.HeadDim == 128 &&
				c.RopeDims == 96 && longrope(c)
		}},
	}
	if testenv.Full() {
		cases = append(cases, phi3mini128k, shapeCase{"mistral-7b", map[string][]int{
			"token_embd.weight": {512, 4096}, "output_norm.weight": {4096}, "output.weight": {512, 4096},
			"blk.0.attn_norm.weight": {4096}, "blk.0.attn_q.weight": {4096, 4096}, "blk.0.attn_k.weight": {1024, 4096},
			"blk.0.attn_v.weight": {1024, 4096}, "blk.0.attn_output.weight": {4096, 4096}, "blk.0.ffn_norm.weight": {4096},
			"blk.0.ffn_gate.weight": {14336, 4096}, "blk.0.ffn_up.weight": {14336, 4096}, "blk.0.ffn_down.weight": {4096, 14336},
		}, func(c llama.Config) bool {
			return c.Arch == "llama" && c.Dim == 4096 && c.FFN == 14336 && c.Heads == 32 && c.KVHeads == 8 && c.HeadDim == 128 &&
				c.RopeDims == 128 && !c.RopeNeoX && !c.TiedOutput && c.RopeTheta == 1e6 && c.Context == 32768 &&
				c.SlidingWindow == 0 && c.RopeScale.Type == "" && c.NormEps == 1e-5
		}})
	}
	for _, tc := range cases {
		t.Run(tc.shape, func(t *testing.T) {
			dir := t.TempDir()
			model := filepath.Join(dir, "m.gguf")
			if _, stderr, err := run(t, "", "dev", "random-model", "--shape", tc.shape, "--layers", "1",
				"--tokenizer-from", stories, "--out", model); err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			g, err := formats.OpenGGUF(model)
			if err != nil {
				t.Fatal(err)
			}
			// llama.cpp looks up Phi-3's own special tokens when the name
			// holds "phi3", and fails to load the borrowed vocabulary.
			if name, _ := g.String("general.name"); strings.Contains(strings.ToLower(name), "phi") {
				t.Errorf("general.name %q", name)
			}
			got := map[string][]int{}
			for _, ts := range g.Tensors {
				got[ts.Name] = ts.Shape
			}
			g.Close()
			if len(got) != len(tc.tensors) {
				t.Errorf("%d tensors, want %d: %v", len(got), len(tc.tensors), got)
			}
			for name, shape := range tc.tensors {
				if !slices.Equal(got[name], shape) {
					t.Errorf("%s: shape %v, want %v", name, got[name], shape)
				}
			}
			ck, err := llama.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			c := ck.Model.Config
			ck.Close()
			if c.Layers != 1 || c.Vocab != 512 || !tc.check(c) {
				t.Fatalf("config %+v", c)
			}
			prompts := filepath.Join(dir, "prompts.txt")
			if err := os.WriteFile(prompts, []byte("1 88 326 122 421 433\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			if _, stderr, err := run(t, "", "--backend", "cpu", "dev", "logits", "--model", model, "--prompts", prompts,
				"--tokens", "1", "--out", out); err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			_, row := readDump(t, out, "0")
			var sum, sq float64
			for _, v := range row {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			n := float64(len(row))
			if sd := math.Sqrt(sq/n - (sum/n)*(sum/n)); len(row) != 512 || sd < 2.5 || sd > 6 {
				t.Errorf("%d logits, standard deviation %.2f: want 512 of about 4", len(row), sd)
			}
		})
	}
}

// dev logits --context N picks longrope's factors by N, as the engine and
// llama.cpp pick them by the context run with: the short ones up to the
// original context, the long ones beyond (without --context, the model's
// whole context: the long ones here). Its rows equal, bit for bit, those
// of a Runner told the same context; contexts that cannot hold a prompt
// and its tokens, or exceed the model's, are errors.
func TestLogitsContextPicksLongrope(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	s := llamatest.Spec{Arch: "phi3", Vocab: 64, Dim: 64, FFN: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		RopeDims: 12, NormEps: 1e-5, RopeTheta: 10000, Context: 256, LongRope: llamatest.FixedLongRope(12, 16)}
	if err := llamatest.WriteLlamaLikeGGUF(model, s, nil, 7); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(dir, "prompts.txt")
	prompt := []int32{1, 9, 33, 12, 50, 7}
	if err := os.WriteFile(prompts, []byte("1 9 33 12 50 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logits := func(name string, extra ...string) []float32 {
		t.Helper()
		out := filepath.Join(dir, name)
		args := append([]string{"dev", "logits", "--reference", "--model", model, "--prompts", prompts,
			"--tokens", "4", "--out", out}, extra...)
		if _, stderr, err := run(t, "", args...); err != nil {
			t.Fatalf("dev logits %v: %v\n%s", extra, err, stderr)
		}
		_, rows := readDump(t, out, "0")
		return rows
	}
	whole, short, long := logits("whole"), logits("short", "--context", "16"), logits("long", "--context", "17")
	if !slices.Equal(whole, long) {
		t.Error("--context 17 (beyond the original 16) differs from the model's whole context: both take the long factors")
	}
	if slices.Equal(short, long) {
		t.Error("--context 16 and 17 give the same logits: the short factors were not taken")
	}
	ck, err := llama.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := llama.Bind(ck.Model, cpu.NewReference())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.UseContext(16)
	_, want, err := greedyLogits(t.Context(), r, prompt, nil, 4, s.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(short, want) {
		t.Error("--context 16 differs from a Runner told a context of 16")
	}
	for _, c := range []struct{ ctx, want string }{
		{"9", "--context 9 cannot hold prompt 1's 6 tokens and 4 more"},
		{"257", "--context 257: the model's context is 256"},
		{"-1", "--context -1"},
	} {
		_, _, err := run(t, "", "dev", "logits", "--reference", "--model", model, "--prompts", prompts,
			"--tokens", "4", "--out", filepath.Join(dir, "x"), "--context", c.ctx)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--context %s: %v, want an error saying %q", c.ctx, err, c.want)
		}
	}
}
