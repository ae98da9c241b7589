package convert

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama/llamatest"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

const stories = "../../../models/stories260K/stories260K.gguf"

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// expectedAffine is the reference dequantization of v quantized as MLX
// does with the scales and biases rounded to f16.
func expectedAffine(t *testing.T, v []float32, cols, bits, gs int) []float32 {
	codes, s, b, err := quant.QuantizeAffine(v, cols, bits, gs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range s {
		s[i] = quant.F16ToF32(quant.F32ToF16(s[i]))
		b[i] = quant.F16ToF32(quant.F32ToF16(b[i]))
	}
	out := make([]float32, len(v))
	quant.DequantizeAffine(out, codes, s, b, bits, gs)
	return out
}

// quantize → save → load → dequantize equals the reference dequantization
// bit for bit, for every matrix of stories260K (Q and K put back in HF
// order), at 4 and 8 bits; matrices whose rows are not whole groups come
// back as f16.
func TestModelRoundTrip(t *testing.T) {
	src, err := llama.Open(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	sm := src.Model
	srcByHF := map[string]named{}
	for _, n := range hfWeights(sm) {
		srcByHF[n.name] = n
	}
	for _, o := range []Options{{Bits: 4, GroupSize: 32}, {Bits: 8, GroupSize: 64}, {Bits: 4, GroupSize: 64, Keep: []string{"lm_head", "embed"}}} {
		out := filepath.Join(t.TempDir(), "q")
		var calls int
		o.Progress = func(done, total int, name, what string) {
			calls++
			if done != calls || total != len(srcByHF) {
				t.Errorf("progress %d/%d after %d calls", done, total, calls)
			}
		}
		sum, err := Model(stories, out, o)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Quantized == 0 || len(sum.Skipped) != sm.Config.Layers {
			t.Errorf("%+v: summary %+v", o, sum)
		}
		ck, err := llama.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range hfWeights(ck.Model) {
			s := srcByHF[n.name]
			v := values(*s.w)
			if n.field == "Q" || n.field == "K" {
				heads := sm.Config.Heads
				if n.field == "K" {
					heads = sm.Config.KVHeads
				}
				v = unpermuteRows(v, heads, sm.Config.HeadDim, s.w.Shape[1])
			}
			path := strings.TrimSuffix(n.name, ".weight")
			var want []float32
			switch {
			case len(n.w.Shape) == 1:
				want = v // source f32 kept
			case o.kept(path, map[bool]string{true: "embed"}[n.field == "Embed"]) || n.w.Shape[1]%o.GroupSize != 0:
				if n.w.Quantized() {
					t.Fatalf("%+v: %s is quantized", o, n.name)
				}
				want = make([]float32, len(v))
				for i, x := range v {
					want[i] = quant.F16ToF32(quant.F32ToF16(x))
				}
			default:
				if !n.w.Quantized() || n.w.Quant.Bits != o.Bits || n.w.Quant.GroupSize != o.GroupSize {
					t.Fatalf("%+v: %s: quant %+v", o, n.name, n.w.Quant)
				}
				want = expectedAffine(t, v, n.w.Shape[1], o.Bits, o.GroupSize)
			}
			got := f32s(llama.ToF32(*n.w).Data)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%+v: %s[%d] = %v, want %v", o, n.name, i, got[i], want[i])
				}
			}
		}
		ck.Close()
	}
}

// A Qwen3 GGUF converts to an HF checkpoint that loads as the same model:
// model_type qwen3 with its head_dim, the q/k head norms under HF's names,
// every weight's values kept (f32), and the rest quantized at 4 bits.
func TestConvertQwen3(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	var tok []formats.KV // the converter writes the tokenizer too
	for _, kv := range g.KVs() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			tok = append(tok, kv)
		}
	}
	defer g.Close()
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "qwen3", Vocab: 512, Dim: 64, FFN: 96, Layers: 2, Heads: 4,
		KVHeads: 2, HeadDim: 32, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true}, tok, 9)
	if err != nil {
		t.Fatal(err)
	}
	src, err := llama.Open(ck.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, o := range []Options{{Bits: 32}, {Bits: 4, GroupSize: 32}} {
		out := filepath.Join(t.TempDir(), "hf")
		if _, err := Model(ck.GGUF, out, o); err != nil {
			t.Fatal(err)
		}
		got, err := llama.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Model.Config, src.Model.Config) {
			t.Errorf("bits %d: config\n %+v, want\n %+v", o.Bits, got.Model.Config, src.Model.Config)
		}
		for l := range src.Model.Layers {
			for _, w := range [][2]*llama.Weight{{&got.Model.Layers[l].QNorm, &src.Model.Layers[l].QNorm},
				{&got.Model.Layers[l].KNorm, &src.Model.Layers[l].KNorm}} {
				if !slices.Equal(llama.F32Values(*w[0]), llama.F32Values(*w[1])) {
					t.Errorf("bits %d: %s differs from %s", o.Bits, w[0].Name, w[1].Name)
				}
			}
			if q := got.Model.Layers[l].Q; (o.Bits == 4) != q.Quantized() ||
				o.Bits == 32 && !slices.Equal(llama.F32Values(q), llama.F32Values(src.Model.Layers[l].Q)) {
				t.Errorf("bits %d: layer %d's q_proj: quantized %v, or its values differ", o.Bits, l, q.Quantized())
			}
		}
		got.Close()
	}
}

// A Mistral GGUF's sliding window (mistral.attention.sliding_window)
// survives conversion as config.json's sliding_window: the converted
// model has the source's config (but for RoPE's pairing, NeoX in HF's
// row order) and its logits over positions past the window, where the
// window masks, to float32 rounding.
func TestConvertMistralWindow(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	var tok []formats.KV
	for _, kv := range g.KVs() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			tok = append(tok, kv)
		}
	}
	g.Close()
	path, err := llamatest.WriteMistralGGUF(t.TempDir(), llamatest.Spec{Vocab: 512, Dim: 64, FFN: 96, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 1e6, Context: 64}, 5, tok, 3)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "hf")
	if _, err := Model(path, out, Options{Bits: 32}); err != nil {
		t.Fatal(err)
	}
	src, err := llama.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got, err := llama.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	want := src.Model.Config
	want.RopeNeoX = true
	if !reflect.DeepEqual(got.Model.Config, want) {
		t.Errorf("config\n %+v, want\n %+v", got.Model.Config, want)
	}
	tokens := []int32{1, 40, 300, 7, 99, 12, 250, 3, 480, 61, 17, 205}
	logits := func(m *llama.Model) []float32 {
		r, err := llama.Bind(m, cpu.NewReference())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		st, err := r.NewState(len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		out := make([]float32, len(tokens)*512)
		if err := st.Forward(llama.Chain(tokens, true), out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := logits(src.Model), logits(got.Model)
	var worst, scale float64
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
		scale = math.Max(scale, math.Abs(float64(a[i])))
	}
	if worst > 1e-5*scale {
		t.Errorf("converted logits differ by %g (largest %g)", worst, scale)
	}
}

// The f32 conversion of stories260K (GGUF → HF, Q/K reordered, RoPE pairs
// switched to NeoX) writes the same greedy story as the GGUF file.
func TestConvertedModelGenerates(t *testing.T) {
	out := filepath.Join(t.TempDir(), "f32")
	if _, err := Model(stories, out, Options{Bits: 32}); err != nil {
		t.Fatal(err)
	}
	gen := func(path string) []int32 {
		e, err := redrafter.Load(path, redrafter.Options{Backend: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(context.Background(), "Once upon a time", redrafter.GenerateOptions{MaxTokens: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	if a, b := gen(stories), gen(out); !slices.Equal(a, b) {
		t.Errorf("converted model's greedy tokens differ:\n %v\n %v", b, a)
	}
}

// A draft head round-trips the same way; its biases stay f32.
func TestHeadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "head")
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, ExitDim: 96, NumDraftLayers: 2, RNN: true}, 3)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	if !IsHead(dir) || IsHead(stories) {
		t.Fatal("IsHead")
	}
	out := filepath.Join(t.TempDir(), "q")
	sum, err := Head(dir, out, Options{Bits: 4, GroupSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Quantized != 6 { // rnn_w, rnn_u, input_proj, 2 blocks, vocab
		t.Errorf("summary %+v", sum)
	}
	q, err := drafter.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	pairs := [][2]*llama.Weight{{&h.RnnW, &q.RnnW}, {&h.RnnU, &q.RnnU}, {&h.InputProj, &q.InputProj},
		{&h.Blocks[1].W, &q.Blocks[1].W}, {&h.Vocab, &q.Vocab}, {&h.RnnUBias, &q.RnnUBias}, {&h.Blocks[0].B, &q.Blocks[0].B}}
	for _, p := range pairs {
		v := values(*p[0])
		want := v
		if len(p[0].Shape) == 2 {
			want = expectedAffine(t, v, p[0].Shape[1], 4, 32)
		}
		if got := f32s(llama.ToF32(*p[1]).Data); !slices.Equal(got, want) {
			t.Errorf("%s: round trip differs", p[0].Name)
		}
	}
	// Keeping the vocabulary projection.
	out2 := filepath.Join(t.TempDir(), "q2")
	if _, err := Head(dir, out2, Options{Bits: 8, GroupSize: 32, Keep: []string{"vocab"}}); err != nil {
		t.Fatal(err)
	}
	q2, err := drafter.Load(out2)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if q2.Vocab.Quantized() || !q2.RnnW.Quantized() || q2.RnnW.Quant.Bits != 8 {
		t.Errorf("--keep-fp16 vocab: vocab quantized %v, rnn_w %+v", q2.Vocab.Quantized(), q2.RnnW.Quant)
	}
}

// Outputs appear whole or not at all.
func TestWriteAtomic(t *testing.T) {
	base := t.TempDir()
	out := filepath.Join(base, "out")
	os.Mkdir(out, 0o755)
	// An earlier output: --force may replace it.
	for _, name := range []string{"config.json", "model.safetensors", "keep"} {
		os.WriteFile(filepath.Join(out, name), []byte("old"), 0o644)
	}
	// An existing output is ErrExists, with the path and no CLI flag.
	if _, err := Model(stories, out, Options{Bits: 4, GroupSize: 32}); !errors.Is(err, ErrExists) ||
		err.Error() != "convert: "+out+": output already exists" {
		t.Errorf("existing output: %v", err)
	}
	if err := writeDir(context.Background(), filepath.Join(base, "raced"), false, func(string) error {
		return os.Mkdir(filepath.Join(base, "raced"), 0o755) // something else writes the output meanwhile
	}); !errors.Is(err, ErrExists) || strings.Contains(err.Error(), "--") {
		t.Errorf("output that appeared while writing: %v", err)
	}
	os.Remove(filepath.Join(base, "raced"))
	boom := errors.New("boom")
	fresh := filepath.Join(base, "fresh")
	err := writeDir(context.Background(), fresh, false, func(dir string) error {
		os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("half"), 0o644)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("writeDir error %v", err)
	}
	ents, _ := os.ReadDir(base)
	if len(ents) != 1 || ents[0].Name() != "out" {
		t.Errorf("after a failed write the directory holds %v", ents)
	}
	if err := writeDir(context.Background(), out, true, func(dir string) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "keep")); string(b) != "old" {
		t.Error("a failed --force write damaged the old output")
	}
	if _, err := Model(stories, out, Options{Bits: 4, GroupSize: 32, Force: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "keep")); string(b) != "old" {
		t.Error("--force lost a file of the old output that is not a checkpoint file")
	}
	if ents, _ := os.ReadDir(base); len(ents) != 1 {
		t.Errorf("temporary directories left behind: %v", ents)
	}
	for _, o := range []Options{{Bits: 3, GroupSize: 64}, {Bits: 4, GroupSize: 48}} {
		if _, err := Model(stories, filepath.Join(base, "x"), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// Force replaces an earlier output, never a directory or file of
// anything else: the error names what it found, and nothing is touched.
func TestForceRefusesOtherFiles(t *testing.T) {
	base := t.TempDir()
	thesis := filepath.Join(base, "thesis")
	os.Mkdir(thesis, 0o755)
	os.WriteFile(filepath.Join(thesis, "thesis.txt"), []byte("four years"), 0o644)
	notes := filepath.Join(base, "notes.txt")
	os.WriteFile(notes, []byte("notes"), 0o644)
	nested := filepath.Join(base, "nested")
	os.MkdirAll(filepath.Join(nested, "sub"), 0o755)
	os.WriteFile(filepath.Join(nested, "config.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(nested, "model.safetensors"), []byte("x"), 0o644)
	for _, c := range []struct{ out, want string }{
		{thesis, "it holds thesis.txt"},
		{notes, "is a file"},
		{nested, "holds sub, which is not a file"},
	} {
		_, err := Model(stories, c.out, Options{Bits: 4, GroupSize: 32, Force: true})
		if !errors.Is(err, ErrNotOutput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrNotOutput saying %q", c.out, err, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(thesis, "thesis.txt")); err != nil || string(b) != "four years" {
		t.Errorf("the thesis is gone: %q %v", b, err)
	}
	if _, err := os.Stat(notes); err != nil {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 3 {
		t.Errorf("left behind: %v", ents)
	}
}

// The output is never the input: the same directory, through a symbolic
// link too, is refused with or without Force, and the input is untouched
// (it was replaced by its quantized self).
func TestOutputIsInput(t *testing.T) {
	base := t.TempDir()
	model := filepath.Join(base, "model")
	if _, err := Model(stories, model, Options{Bits: 32, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(model, link); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(model, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, out string }{{model, model}, {model, model + "/"}, {link, model}, {model, link}} {
		for _, force := range []bool{false, true} {
			_, err := Model(c.in, c.out, Options{Bits: 4, GroupSize: 32, Force: force})
			if !errors.Is(err, ErrOutputIsInput) {
				t.Errorf("in %s, out %s, force %v: %v, want ErrOutputIsInput", c.in, c.out, force, err)
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(model, "model.safetensors")); !bytes.Equal(got, want) {
		t.Error("the input's weights changed")
	}
	head := filepath.Join(base, "head")
	if _, err := Head("../../../models/stories260K/drafter", head, Options{Bits: 32, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	if _, err := Head(head, head, Options{Bits: 4, GroupSize: 32, Force: true}); !errors.Is(err, ErrOutputIsInput) {
		t.Errorf("a head onto itself: %v, want ErrOutputIsInput", err)
	}
}

// Force onto another model's directory replaces its checkpoint files
// (config, weights, also shards no longer written, tokenizer) and keeps
// every other file: a README, notes, a licence.
func TestForceKeepsOtherFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "other")
	os.Mkdir(out, 0o755)
	files := map[string]string{
		"config.json": "{}", "model.safetensors.index.json": "{}",
		"model-00001-of-00002.safetensors": "w1", "model-00002-of-00002.safetensors": "w2",
		"tokenizer.json": "{}", "NOTES.md": "my notes", "LICENSE": "licence", ".gitattributes": "*.safetensors lfs",
	}
	for name, text := range files {
		os.WriteFile(filepath.Join(out, name), []byte(text), 0o644)
	}
	if _, err := Model(stories, out, Options{Bits: 4, GroupSize: 32, Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"NOTES.md", "LICENSE", ".gitattributes"} {
		if b, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(b) != files[name] {
			t.Errorf("%s: %q, %v; want it kept", name, b, err)
		}
	}
	for _, name := range []string{"model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			t.Errorf("%s of the replaced model is still there", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "config.json")); string(b) == "{}" {
		t.Error("config.json was not replaced")
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("temporary directories left behind: %v", ents)
	}
}

// A cancelled conversion stops, returns the context's error and leaves
// neither its output nor a temporary directory.
func TestCancelLeavesNothing(t *testing.T) {
	base := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	opt := Options{Bits: 4, GroupSize: 32, Progress: func(done, total int, name, what string) {
		if n++; n == 3 {
			cancel()
		}
	}}
	if _, err := ModelContext(ctx, stories, filepath.Join(base, "q"), opt); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while encoding: %v", err)
	}
	if n != 3 {
		t.Errorf("went on for %d tensors after the cancellation", n-3)
	}
	// Cancelled while writing: the writer stops at its next buffer.
	ctx, cancel = context.WithCancel(context.Background())
	err := writeDir(ctx, filepath.Join(base, "w"), false, func(dir string) error {
		return writeFile(ctx, filepath.Join(dir, "model.safetensors"), func(w *bufio.Writer) error {
			cancel()
			_, err := w.Write(make([]byte, 4<<20))
			return err
		})
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while writing: %v", err)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// Keep names what exists: a misspelt matrix is an error naming it, the
// aliases are accepted whether or not the input has them.
func TestKeepMustNameMatrices(t *testing.T) {
	base := t.TempDir()
	for _, keep := range []string{"foo", "down_prj", "model.layers.9.mlp.down_proj"} {
		_, err := Model(stories, filepath.Join(base, "q"), Options{Bits: 4, GroupSize: 32, Keep: []string{keep}})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(keep)) {
			t.Errorf("keep %q: %v", keep, err)
		}
	}
	if _, err := Model(stories, filepath.Join(base, "q"), Options{Bits: 4, GroupSize: 32,
		Keep: []string{"lm_head", "embed", "vocab", "down_proj", "model.layers.0.self_attn.q_proj.weight"}}); err != nil {
		t.Error(err)
	}
}

// Large checkpoints are sharded with an index the loader reads.
func TestSharded(t *testing.T) {
	old := shardBytes
	shardBytes = 64 << 10
	defer func() { shardBytes = old }()
	out := filepath.Join(t.TempDir(), "q")
	if _, err := Model(stories, out, Options{Bits: 8, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "model.safetensors.index.json")); err != nil {
		t.Fatal(err)
	}
	ck, err := llama.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if !ck.Model.Layers[4].Up.Quantized() {
		t.Error("not quantized")
	}
}

// The tokenizer.model written for a GGUF vocabulary reads back the same.
func TestSentencePieceModel(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	v, err := tokenizer.FromGGUFMetadata(g.KV)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.model")
	os.WriteFile(path, sentencePieceModel(v), 0o644)
	w, err := tokenizer.LoadSentencePiece(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.Tokens, w.Tokens) || !slices.Equal(v.Scores, w.Scores) || !slices.Equal(v.Types, w.Types) ||
		v.BOS != w.BOS || v.EOS != w.EOS || v.UNK != w.UNK || v.PAD != w.PAD || v.NoSpacePrefix != w.NoSpacePrefix {
		t.Errorf("vocabulary changed: bos %d/%d eos %d/%d unk %d/%d pad %d/%d", v.BOS, w.BOS, v.EOS, w.EOS, v.UNK, w.UNK, v.PAD, w.PAD)
	}
}

// An HF checkpoint (here the f32 conversion of stories260K) quantizes to
// the same tensors as the GGUF it came from, and keeps its side files.
func TestModelFromHF(t *testing.T) {
	dir := t.TempDir()
	hf, a, b := filepath.Join(dir, "hf"), filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if _, err := Model(stories, hf, Options{Bits: 32}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(hf, "generation_config.json"), []byte(`{"do_sample": false}`), 0o644)
	o := Options{Bits: 4, GroupSize: 32, Keep: []string{"lm_head"}}
	if _, err := Model(stories, a, o); err != nil {
		t.Fatal(err)
	}
	if _, err := Model(hf, b, o); err != nil {
		t.Fatal(err)
	}
	sa, err := formats.OpenSafetensors(filepath.Join(a, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := formats.OpenSafetensors(filepath.Join(b, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if len(sa.Tensors) != len(sb.Tensors) {
		t.Fatalf("%d tensors from GGUF, %d from HF", len(sa.Tensors), len(sb.Tensors))
	}
	for i := range sa.Tensors {
		ta, tb := &sa.Tensors[i], &sb.Tensors[i]
		if ta.Name != tb.Name || ta.DType != tb.DType || !slices.Equal(ta.Shape, tb.Shape) || !slices.Equal(ta.Data, tb.Data) {
			t.Errorf("tensor %s (%s %v) differs from %s (%s %v)", ta.Name, ta.DType, ta.Shape, tb.Name, tb.DType, tb.Shape)
		}
	}
	for _, f := range []string{"tokenizer.model", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(b, f)); err != nil {
			t.Errorf("side file %s not copied: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(b, "config.json")); err != nil {
		t.Fatal(err)
	}
	ck, err := llama.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Model.Output.Quantized() || !ck.Model.Embed.Quantized() {
		t.Error("--keep-fp16 lm_head not honoured")
	}
}

// A phi3 model is refused rather than written in a form that loses what
// config.json and the tensors cannot say here: the fused q·k·v and
// gate·up tensors Phi-3's loader reads, longrope's factors.
func TestConvertRefusesPhi3(t *testing.T) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var tok []formats.KV // a GGUF without a vocabulary fails before the architecture matters
	for _, kv := range g.KVs() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			tok = append(tok, kv)
		}
	}
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "phi3", Vocab: 512, Dim: 64, FFN: 96, Layers: 1, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-5, RopeTheta: 1e4, Context: 64, RopeDims: 12, LongRope: llamatest.FixedLongRope(12, 16)}, tok, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{ck.GGUF, ck.HF} {
		if _, err := Model(in, filepath.Join(t.TempDir(), "hf"), Options{Bits: 32}); err == nil || !strings.Contains(err.Error(), "convert: phi3") {
			t.Errorf("%s: %v, want an error naming phi3", filepath.Base(in), err)
		}
	}
}

// A Gemma model is refused by name (its post-norms and 1+w gains are not
// written yet), from GGUF and from HF.
func TestConvertRefusesGemma(t *testing.T) {
	ck, err := llamatest.Write(t.TempDir(), llamatest.Spec{Arch: "gemma3", Vocab: 32, Dim: 32, FFN: 48, Layers: 1, Heads: 4,
		KVHeads: 2, HeadDim: 16, NormEps: 1e-6, RopeTheta: 1e6, Context: 64, Tied: true, SlidingWindow: 8}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{ck.GGUF, ck.HF} {
		_, err := Model(in, filepath.Join(t.TempDir(), "out"), Options{Bits: 4, GroupSize: 64})
		if err == nil || !strings.Contains(err.Error(), "gemma3 models are not supported yet") {
			t.Errorf("convert %s: %v", in, err)
		}
	}
}
