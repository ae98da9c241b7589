package redrafter

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/tools/convert"
)

// quantizedModel converts the model at path to 4-bit affine weights.
func quantizedModel(t testing.TB, path string, bits, gs int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("q%d-g%d", bits, gs))
	if _, err := convert.Model(path, out, convert.Options{Bits: bits, GroupSize: gs}); err != nil {
		t.Fatal(err)
	}
	return out
}

// quantizedHead writes a random draft head for e's model, quantizes it and
// loads it.
func quantizedHead(t testing.TB, e *Engine, rnn bool, layers, exit int, seed uint64, bits, gs int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("head-%d", seed))
	h := drafter.NewRandom(drafter.Config{VocabSize: e.cfg.Vocab, HiddenSize: e.cfg.Dim, ExitDim: exit,
		NumDraftLayers: layers, RNN: rnn}, seed)
	if err := h.Save(dir); err != nil {
		t.Fatal(err)
	}
	out := dir + "-q"
	if _, err := convert.Head(dir, out, convert.Options{Bits: bits, GroupSize: gs}); err != nil {
		t.Fatal(err)
	}
	if err := e.LoadDrafter(out); err != nil {
		t.Fatal(err)
	}
	if !e.drafter.Head.Vocab.Quantized() {
		t.Fatal("the draft head's vocabulary projection is not quantized")
	}
}

// Greedy ReDrafter with 4-bit (and 8-bit) weights, in the LLM and in the
// draft head, equals greedy autoregressive decoding with the same weights,
// token for token: the quantized kernels compute every row of a
// verification batch as they compute a single decoded row.
func TestReDrafterGreedyEqualsAutoregressiveQuantized(t *testing.T) {
	type model struct {
		name      string
		path      string
		bits, gs  int
		rnn       bool
		layers    int
		exit      int
		headBits  int
		headGroup int
	}
	models := []model{
		{"stories260K-4bit-g32", quantizedModel(t, stories, 4, 32), 4, 32, true, 2, 0, 4, 32},
		{"random-d64-4bit-g64", quantizedModel(t, randomModel(t, 64, 2, 4, 2, 128, 21), 4, 64), 4, 64, true, 1, 96, 4, 32},
		{"random-d128-8bit-g128", quantizedModel(t, randomModel(t, 128, 2, 4, 4, 256, 22), 8, 128), 8, 128, false, 0, 0, 8, 128},
		// K a multiple of 128 at 4 bits: the CPU's tile kernel, on machines with one.
		{"random-d128-4bit-g64", quantizedModel(t, randomModel(t, 128, 2, 4, 2, 256, 23), 4, 64), 4, 64, true, 1, 0, 4, 64},
	}
	widths, lengths := []int{1, 4, 16}, []int{2, 5}
	if testing.Short() {
		widths, lengths = []int{4}, []int{3}
	}
	for _, m := range models {
		e, err := Load(m.path, Options{Backend: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if !e.runner.Model.Layers[0].Q.Quantized() {
			t.Fatalf("%s: not quantized", m.name)
		}
		quantizedHead(t, e, m.rnn, m.layers, m.exit, 5, m.headBits, m.headGroup)
		const maxTokens = 40
		want, steps, tokens := checkGreedyEqual(t, e, m.name, maxTokens, widths, lengths)
		t.Logf("%s: random head: %d steps, %.2f tokens per step", m.name, steps, float64(tokens)/float64(max(steps, 1)))
		// Drafts that follow the truth for a while reach deep acceptance.
		for _, p := range specPrompts {
			for _, shape := range [][2]int{{1, 6}, {8, 5}, {16, 3}} {
				src := &oracleSource{truth: want[p], r: rand.New(rand.NewPCG(uint64(shape[0]), 9)), vocab: e.cfg.Vocab}
				e.draftSource = &trackingSource{o: src}
				res, err := e.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens,
					Draft: DraftOptions{BeamWidth: shape[0], BeamLength: shape[1]}}, nil)
				e.draftSource = e.drafter
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Tokens, want[p]) {
					t.Fatalf("%s oracle W=%d L=%d prompt %q:\n redrafter %v\n autoregr. %v", m.name, shape[0], shape[1], p, res.Tokens, want[p])
				}
				if tps := res.Stats.Draft.TokensPerStep(); tps < 1.5 {
					t.Errorf("%s oracle W=%d L=%d: %.2f tokens per step", m.name, shape[0], shape[1], tps)
				}
			}
		}
	}
}

// BenchmarkDecode decodes greedily from the model named by
// $REDRAFTER_BENCH_MODEL (skipped when unset): decode tokens per second of a
// large model, with a profile (-cpuprofile) of where the time goes.
func BenchmarkDecode(b *testing.B) {
	path := os.Getenv("REDRAFTER_BENCH_MODEL")
	if path == "" {
		b.Skip("set REDRAFTER_BENCH_MODEL to a model")
	}
	e, err := Load(path, Options{Backend: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const n = 32
	for b.Loop() {
		res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: n, Draft: DraftOptions{Off: true}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(res.Tokens))/res.Stats.Decode.Seconds(), "tok/s")
	}
}

// BenchmarkForwardPass times one forward pass over $REDRAFTER_BENCH_TOKENS
// (default 17) new tokens of the model named by $REDRAFTER_BENCH_MODEL
// (skipped when unset): the cost of a ReDrafter verification.
func BenchmarkForwardPass(b *testing.B) {
	path := os.Getenv("REDRAFTER_BENCH_MODEL")
	if path == "" {
		b.Skip("set REDRAFTER_BENCH_MODEL to a model")
	}
	n := 17
	if v := os.Getenv("REDRAFTER_BENCH_TOKENS"); v != "" {
		fmt.Sscan(v, &n)
	}
	e, err := Load(path, Options{Backend: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	st, err := e.runner.NewState(256)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(3 + i)
	}
	logits := make([]float32, n*e.cfg.Vocab)
	for b.Loop() {
		st.Trim(0)
		if err := st.Forward(llama.Chain(toks, true), logits, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// GGUF models with Q4_0 and Q4_K layers on the CPU: their converted
// weights are handed to the backend and repacked in place for the tile
// kernel (on machines that have it; Q4_K's scales are float32), and greedy
// ReDrafter still equals greedy decoding token for token.
func TestReDrafterGreedyEqualsAutoregressiveGGUFQ4(t *testing.T) {
	for _, c := range []struct {
		typ               formats.DType
		dim, kvHeads, ffn int
		scales            kernels.ScaleType
		gs                int
	}{
		{formats.Q4_0, 128, 2, 256, kernels.ScalesF16, 32},
		{formats.Q4_K, 256, 2, 512, kernels.ScalesF32, 32},
	} {
		path := ggufQ4(t, randomModel(t, c.dim, 2, 4, c.kvHeads, c.ffn, 24), c.typ)
		e, err := Load(path, Options{Backend: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if !e.runner.Model.Layers[0].Q.Quantized() || !e.runner.Model.Layers[0].Q.Owned || e.runner.Model.Embed.Owned {
			t.Fatalf("%v: layers should load as owned affine weights, the embedding as the host's", c.typ)
		}
		randomHead(t, e, true, 1, 0, 6)
		widths, lengths := []int{1, 4}, []int{3, 5}
		if testing.Short() {
			widths, lengths = []int{4}, []int{3}
		}
		_, steps, tokens := checkGreedyEqual(t, e, c.typ.String(), 32, widths, lengths)
		t.Logf("%v: random head: %d steps, %.2f tokens per step", c.typ, steps, float64(tokens)/float64(max(steps, 1)))
		deepAcceptance(t, e) // drafts that follow the truth: trees of up to 31 tokens verified
		inPlace, copies := e.be.(*cpu.Backend).Repacked()
		t.Logf("%v: 4-bit weights repacked: %d in place, %d copies (affine kernels: %s)", c.typ, inPlace, copies, kernels.AffineImpl())
		// REDRAFTER_CPU_TILES=off turns repacking off: nothing to count then.
		fit := kernels.TilesFit(kernels.AffineRows{Bits: 4, GroupSize: c.gs, K: c.dim, ScaleType: c.scales}) && !envvar.CPUTiles.Off()
		if fit && (inPlace != 2*7 || copies != 0) {
			t.Errorf("%v: want the 14 layer matrices repacked in place and none copied", c.typ)
		}
		// Q4_0's are symmetric (its biases are -8 times its scales): the
		// kernels compute the biases, and DecodeBytes leaves them out.
		sym := e.be.(*cpu.Backend).RepackedSymmetric()
		var biases int64
		for _, l := range e.runner.Model.Layers {
			for _, w := range []*llama.Weight{&l.Q, &l.K, &l.V, &l.O, &l.Gate, &l.Up, &l.Down} {
				biases += int64(len(w.Quant.Biases.Data))
			}
		}
		stored := e.runner.Model.DecodeBytes(nil)
		switch {
		case fit && c.typ == formats.Q4_0 && (sym != 14 || e.decodeBytes != stored-biases):
			t.Errorf("%v: %d symmetric tiles, want 14; DecodeBytes %d, want %d", c.typ, sym, e.decodeBytes, stored-biases)
		case (!fit || c.typ != formats.Q4_0) && (sym != 0 || e.decodeBytes != stored):
			t.Errorf("%v: %d symmetric tiles, want none; DecodeBytes %d, want %d", c.typ, sym, e.decodeBytes, stored)
		}
	}
}

// ggufQ4 rewrites the GGUF model at path with its layers' matrices in
// Q4_0 (nearest of 16 steps of max|v|/7 per block of 32) or Q4_K (random
// blocks with sane scales) blocks.
func ggufQ4(t testing.TB, path string, typ formats.DType) string {
	t.Helper()
	g, err := formats.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r := rand.New(rand.NewPCG(25, 26))
	var ts []formats.Tensor
	for _, tn := range g.Tensors {
		tn.Data = slices.Clone(tn.Data)
		if len(tn.Shape) == 2 && strings.HasPrefix(tn.Name, "blk.") {
			v := make([]float32, len(tn.Data)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
			}
			tn.DType, tn.Data = typ, q4_0Blocks(v)
			if typ == formats.Q4_K {
				tn.Data = q4KRandomBlocks(r, len(v))
			}
		}
		ts = append(ts, tn)
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), strings.ToLower(typ.String())+".gguf")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// q4KRandomBlocks makes n elements of Q4_K blocks (256 elements, 144
// bytes) with random codes and sub-scales, and super-scales d and dmin
// below 0.01.
func q4KRandomBlocks(r *rand.Rand, n int) []byte {
	data := make([]byte, n/256*144)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for off := 0; off < len(data); off += 144 {
		binary.LittleEndian.PutUint16(data[off:], quant.F32ToF16(float32(r.Float64()*0.01)))
		binary.LittleEndian.PutUint16(data[off+2:], quant.F32ToF16(float32(r.Float64()*0.01)))
	}
	return data
}

func q4_0Blocks(v []float32) []byte {
	var out []byte
	for b := 0; b < len(v); b += 32 {
		blk := v[b : b+32]
		var amax float32
		for _, x := range blk {
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		h := quant.F32ToF16(max(amax/7, 1e-6))
		d := quant.F16ToF32(h)
		code := func(x float32) byte { return byte(min(15, max(0, int(math.Round(float64(x/d)))+8))) }
		out = append(out, byte(h), byte(h>>8))
		for j := range 16 {
			out = append(out, code(blk[j])|code(blk[j+16])<<4)
		}
	}
	return out
}
