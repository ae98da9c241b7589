package inflate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter"
	"github.com/seed9b8f47b1/redrafter/internal/apihooks"
	_ "github.com/seed9b8f47b1/redrafter/internal/backend/cpu" // registers the cpu backend
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/drafter"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
)

const stories = "../../../models/stories260K/stories260K.gguf"

// small inflations of stories260K (dim 64, 8 heads of 8, 4 KV heads, 5
// layers, FFN 172): wider heads, more heads per KV group, more KV heads.
var shapes = []Shape{
	{Dim: 128, Heads: 8, KVHeads: 4, Layers: 8, FFN: 256},  // heads of 16: pair j → 2j; 3 identity layers
	{Dim: 192, Heads: 12, KVHeads: 4, Layers: 6, FFN: 180}, // heads of 16, 3 per KV head
	{Dim: 128, Heads: 16, KVHeads: 8, Layers: 7, FFN: 200}, // heads of 8: only the layout moves
}

func load(t testing.TB, model, head string) *redrafter.Engine {
	t.Helper()
	e, err := redrafter.Load(model, redrafter.Options{Backend: "cpu", Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if head != "" {
		if err := e.LoadDrafter(head); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// forward runs tokens through e and returns every row's logits and
// final-norm hidden state.
func forward(t testing.TB, e *redrafter.Engine, tokens []int32) (logits, hidden []float32) {
	t.Helper()
	p, err := apihooks.NewProbe(e)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := e.Model()
	logits = make([]float32, len(tokens)*c.Vocab)
	hidden = make([]float32, len(tokens)*c.Dim)
	if err := p.Forward(tokens, logits, hidden); err != nil {
		t.Fatal(err)
	}
	return logits, hidden
}

// configOf reads the model configuration of the checkpoint at path.
func configOf(t testing.TB, path string) llama.Config {
	t.Helper()
	ck, err := llama.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	return ck.Model.Config
}

// beamDrafter binds the draft head in dir next to the model at path on the
// CPU, for calling its beam search directly.
func beamDrafter(t testing.TB, path, dir string) *drafter.Drafter {
	t.Helper()
	ck, err := llama.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	be, err := graph.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	r, err := llama.Bind(ck.Model, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	h, err := drafter.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d, err := drafter.NewDrafter(h, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// relErr is max|a-b| / max|a|.
func relErr(a, b []float32) float64 {
	var diff, scale float64
	for i := range a {
		diff = max(diff, math.Abs(float64(a[i]-b[i])))
		scale = max(scale, math.Abs(float64(a[i])))
	}
	return diff / scale
}

func greedy(t testing.TB, e *redrafter.Engine, prompt string, n int, draft redrafter.DraftOptions) *redrafter.Result {
	t.Helper()
	res, err := e.Generate(context.Background(), prompt, redrafter.GenerateOptions{MaxTokens: n, Draft: draft}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkSame compares the original and inflated models: greedy text for 200
// tokens, token for token, and the logits of every position of that text.
func checkSame(t *testing.T, orig, big *redrafter.Engine, prompt string) {
	t.Helper()
	a, b := greedy(t, orig, prompt, 200, redrafter.DraftOptions{Off: true}), greedy(t, big, prompt, 200, redrafter.DraftOptions{Off: true})
	if len(a.Tokens) < 100 {
		t.Fatalf("only %d tokens of greedy output to compare", len(a.Tokens))
	}
	if !slices.Equal(a.Tokens, b.Tokens) {
		t.Fatalf("greedy output differs:\noriginal %q\ninflated %q", a.Text, b.Text)
	}
	seq := append(orig.Tokenizer().Encode(prompt, true), a.Tokens...)
	la, ha := forward(t, orig, seq)
	lb, hb := forward(t, big, seq)
	e := relErr(la, lb)
	if e > 1e-4 {
		t.Errorf("logits of %d positions: relative error %g > 1e-4", len(seq), e)
	}
	t.Logf("%q: %d greedy tokens equal, logits of %d positions within %.2g relative", prompt, len(a.Tokens), len(seq), e)
	d, d2 := orig.Model().Dim, big.Model().Dim
	for r := range seq {
		x := hb[r*d2 : (r+1)*d2]
		if e := relErr(ha[r*d:(r+1)*d], x[:d]); e > 1e-4 {
			t.Errorf("hidden state of position %d: relative error %g", r, e)
		}
		if slices.ContainsFunc(x[d:], func(v float32) bool { return v != 0 }) {
			t.Fatalf("hidden state of position %d is not zero past the original %d dimensions", r, d)
		}
	}
}

func TestInflatedModelIsExact(t *testing.T) {
	orig := load(t, stories, "")
	for _, s := range shapes {
		t.Run(fmt.Sprintf("dim%d_h%d_kv%d_l%d_ffn%d", s.Dim, s.Heads, s.KVHeads, s.Layers, s.FFN), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "big.gguf")
			p, err := Model(stories, out, s, Options{DType: graph.F32, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			big := load(t, out, "")
			cfg := configOf(t, out)
			if got := ShapeOf(cfg); got != s {
				t.Fatalf("inflated model has shape %v, want %v", got, s)
			}
			if cfg.NormEps != p.To.NormEps || cfg.HeadDim != s.Dim/s.Heads {
				t.Fatalf("inflated config %+v", cfg)
			}
			for _, prompt := range []string{"", "Once upon a time, a little dog"} {
				checkSame(t, orig, big, prompt)
			}
		})
	}
}

// TestInflatedF16 checks the float16 inflation at a smaller tolerance:
// the weights are rounded to 11 bits, so logits move by about 1e-3.
func TestInflatedF16(t *testing.T) {
	orig := load(t, stories, "")
	out := filepath.Join(t.TempDir(), "big16.gguf")
	if _, err := Model(stories, out, shapes[0], Options{DType: graph.F16, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	big := load(t, out, "")
	seq := append(orig.Tokenizer().Encode("Once upon a time", true), greedy(t, orig, "Once upon a time", 60, redrafter.DraftOptions{Off: true}).Tokens...)
	la, _ := forward(t, orig, seq)
	lb, _ := forward(t, big, seq)
	if e := relErr(la, lb); e > 1e-2 {
		t.Errorf("f16 logits: relative error %g > 1e-2", e)
	}
	g, err := formats.OpenGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, tn := range g.Tensors {
		want := formats.F16
		if len(tn.Shape) == 1 {
			want = formats.F32
		}
		if tn.DType != want {
			t.Errorf("tensor %s stored as %v, want %v", tn.Name, tn.DType, want)
		}
	}
	if v, _ := g.Uint("general.file_type"); v != 1 {
		t.Errorf("general.file_type = %d, want 1 (mostly f16)", v)
	}
}

// TestRopeFrequenciesKept is the proof behind the pair map, under this
// runtime's own frequency function: pair j·r of the wider head turns at
// exactly the frequency of pair j of the original head, and the naive
// placement (pair j → pair j) would not.
func TestRopeFrequenciesKept(t *testing.T) {
	c := llama.Config{Arch: "llama", Vocab: 16, Dim: 64, FFN: 8, Layers: 1, Heads: 8, KVHeads: 4, HeadDim: 8,
		NormEps: 1e-5, RopeTheta: 10000, RopeDims: 8, Context: 16}
	for _, scale := range []llama.RopeScaling{{}, {Type: "linear", Factor: 4}, {FreqFactors: []float32{1, 2, 4, 8}},
		{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 64}} {
		c.RopeScale = scale
		p, err := NewPlan(c, TinyLlama)
		if err != nil {
			t.Fatal(err)
		}
		from, to := p.From.InvFreq(), p.To.InvFreq()
		for j, f := range from {
			if got := to[j*p.ratio]; got != f {
				t.Errorf("scaling %+v: pair %d → %d turns at %g, want %g", scale, j, j*p.ratio, got, f)
			}
			if j > 0 && to[j] == f {
				t.Errorf("scaling %+v: naive placement would also keep pair %d; the test proves nothing", scale, j)
			}
		}
	}
}

// TestPlanLayout checks the maps: injective, each query head stays with its
// KV head, rotary partners stay partners.
func TestPlanLayout(t *testing.T) {
	for _, neox := range []bool{false, true} {
		c := llama.Config{Arch: "llama", Vocab: 16, Dim: 64, FFN: 8, Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8,
			NormEps: 1e-5, RopeTheta: 10000, RopeDims: 8, Context: 16, RopeNeoX: neox}
		p, err := NewPlan(c, TinyLlama)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for q := range c.Heads * c.HeadDim {
			r := p.QRow(q)
			if seen[r] || r >= p.To.Heads*p.To.HeadDim {
				t.Fatalf("neox=%v: QRow(%d) = %d repeats or overflows", neox, q, r)
			}
			seen[r] = true
			if kvOf := (r / p.To.HeadDim) / (p.To.Heads / p.To.KVHeads); kvOf != (q/c.HeadDim)/(c.Heads/c.KVHeads) {
				t.Errorf("neox=%v: query row %d moved to KV group %d", neox, q, kvOf)
			}
			if k := p.KVRow(q % (c.KVHeads * c.HeadDim)); k%p.To.HeadDim != r%p.To.HeadDim {
				t.Errorf("neox=%v: query row %d and key row %d land at different head offsets", neox, q, q%(c.KVHeads*c.HeadDim))
			}
		}
		for j := range c.HeadDim / 2 {
			a, b := 2*j, 2*j+1
			half, half2 := c.HeadDim/2, p.To.HeadDim/2
			if neox {
				a, b = j, j+half
			}
			ra, rb := p.QRow(a), p.QRow(b)
			want := ra + 1
			if neox {
				want = ra + half2
			}
			if rb != want {
				t.Errorf("neox=%v: partners %d,%d → %d,%d", neox, a, b, ra, rb)
			}
		}
		if !slices.Equal(p.LayerAt, []int{0, 4, 8, 13, 17}) {
			t.Errorf("layers at %v", p.LayerAt)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	c := llama.Config{Arch: "llama", Vocab: 16, Dim: 64, FFN: 172, Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8,
		NormEps: 1e-5, RopeTheta: 10000, RopeDims: 8, Context: 16}
	for _, tc := range []struct {
		s    Shape
		want string
	}{
		{Shape{Dim: 32, Heads: 4, KVHeads: 4, Layers: 5, FFN: 172}, "smaller than the model's 64"},
		{Shape{Dim: 128, Heads: 8, KVHeads: 4, Layers: 4, FFN: 172}, "fewer than the model's 5"},
		{Shape{Dim: 128, Heads: 8, KVHeads: 4, Layers: 5, FFN: 100}, "FFN 100 is smaller"},
		{Shape{Dim: 128, Heads: 8, KVHeads: 2, Layers: 5, FFN: 172}, "2 KV heads are fewer"},
		{Shape{Dim: 96, Heads: 8, KVHeads: 4, Layers: 5, FFN: 172}, "head size 12"},
		{Shape{Dim: 128, Heads: 4, KVHeads: 4, Layers: 5, FFN: 172}, "1 query heads per KV head"},
		{Shape{Dim: 100, Heads: 8, KVHeads: 4, Layers: 5, FFN: 172}, "not a multiple of 8 heads"},
		{Shape{Dim: 128, Heads: 8, KVHeads: 3, Layers: 5, FFN: 172}, "not a multiple of 3 KV heads"},
		{Shape{}, "non-positive"},
	} {
		if _, err := NewPlan(c, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPlan(%v) = %v, want an error containing %q", tc.s, err, tc.want)
		}
	}
	g := c
	g.Arch, g.PostNorms, g.EmbedScale = "gemma2", true, 8
	if _, err := NewPlan(g, TinyLlama); err == nil || !strings.Contains(err.Error(), "gemma2 is not supported") {
		t.Errorf("gemma2: %v", err)
	}
	c.RopeDims = 4
	if _, err := NewPlan(c, TinyLlama); err == nil || !strings.Contains(err.Error(), "partial rotary") {
		t.Errorf("partial rotary: %v", err)
	}
	c.RopeDims = 8
	c.RopeScale = llama.RopeScaling{Type: "longrope", OriginalContext: 8, ShortFactors: []float32{1, 1, 1, 1},
		LongFactors: []float32{1, 2, 3, 4}, AttnFactor: 1.1}
	if _, err := NewPlan(c, TinyLlama); err == nil || !strings.Contains(err.Error(), "longrope") {
		t.Errorf("longrope: %v", err)
	}
	if _, err := Model(stories, filepath.Join(t.TempDir(), "x.gguf"), TinyLlama, Options{DType: graph.BF16}); err == nil {
		t.Error("bf16 output was accepted")
	}
	if _, err := Model(t.TempDir(), filepath.Join(t.TempDir(), "x.gguf"), TinyLlama, Options{}); err == nil || !strings.Contains(err.Error(), ".gguf file") {
		t.Errorf("directory input: %v", err)
	}
}

// TestInflatedDrafter: the inflated head on the inflated model drafts the
// same beams as the original head on the original model, and ReDrafter
// decoding accepts the same drafts step by step.
func TestInflatedDrafter(t *testing.T) {
	for _, tc := range []struct {
		hc   drafter.Config
		exit int // inflated exit width; 0: Head's default
	}{
		{drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 2, RNN: true}, 0},
		{drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 1, RNN: false}, 0},
		{drafter.Config{VocabSize: 512, HiddenSize: 64, ExitDim: 96, NumDraftLayers: 1, RNN: true}, 0},   // with an input projection
		{drafter.Config{VocabSize: 512, HiddenSize: 64, NumDraftLayers: 2, RNN: true}, 192},              // an input projection added
		{drafter.Config{VocabSize: 512, HiddenSize: 64, ExitDim: 96, NumDraftLayers: 1, RNN: true}, 160}, // the input projection widened
	} {
		hc := tc.hc
		t.Run(fmt.Sprintf("rnn=%v_exit%d_layers%d_to%d", hc.RNN, hc.ExitDim, hc.NumDraftLayers, tc.exit), func(t *testing.T) {
			dir := t.TempDir()
			headDir, bigHeadDir, out := filepath.Join(dir, "head"), filepath.Join(dir, "bighead"), filepath.Join(dir, "big.gguf")
			if err := drafter.NewRandom(hc, 5).Save(headDir); err != nil {
				t.Fatal(err)
			}
			p, err := Model(stories, out, shapes[0], Options{DType: graph.F32, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.HeadDir(headDir, bigHeadDir, graph.F32, tc.exit); err != nil {
				t.Fatal(err)
			}
			orig, big := load(t, stories, headDir), load(t, out, bigHeadDir)
			origBeams, bigBeams := beamDrafter(t, stories, headDir), beamDrafter(t, out, bigHeadDir)
			want := tc.exit
			if want == 0 {
				want = cmp.Or(hc.ExitDim, 2*shapes[0].Dim)
			}
			if bh, _ := big.DraftHead(); bh.ExitDim != want {
				t.Errorf("inflated exit dim %d, want %d", bh.ExitDim, want)
			}
			// Beams from the hidden states of a real text.
			seq := append(orig.Tokenizer().Encode("Once upon a time", true), greedy(t, orig, "Once upon a time", 40, redrafter.DraftOptions{Off: true}).Tokens...)
			_, ha := forward(t, orig, seq)
			_, hb := forward(t, big, seq)
			d, d2 := orig.Model().Dim, big.Model().Dim
			for r := 0; r+1 < len(seq); r += 3 {
				for _, wl := range [][2]int{{1, 5}, {4, 4}, {8, 3}} {
					a, err := origBeams.BeamSearch(ha[r*d:(r+1)*d], seq[r+1], wl[0], wl[1], false)
					if err != nil {
						t.Fatal(err)
					}
					b, err := bigBeams.BeamSearch(hb[r*d2:(r+1)*d2], seq[r+1], wl[0], wl[1], false)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.EqualFunc(a.Tokens, b.Tokens, slices.Equal) {
						t.Fatalf("position %d, W=%d L=%d: beams %v, inflated %v", r, wl[0], wl[1], a.Tokens, b.Tokens)
					}
				}
			}
			// Whole ReDrafter decodes: same text, same acceptance.
			draft := redrafter.DraftOptions{BeamWidth: 3, BeamLength: 4}
			ra, rb := greedy(t, orig, "Once upon a time", 100, draft), greedy(t, big, "Once upon a time", 100, draft)
			if !slices.Equal(ra.Tokens, rb.Tokens) || !slices.Equal(ra.Stats.Draft.AcceptHist, rb.Stats.Draft.AcceptHist) {
				t.Errorf("ReDrafter decoding differs: %v vs %v accepted", ra.Stats.Draft.AcceptHist, rb.Stats.Draft.AcceptHist)
			}
		})
	}
}

func TestHeadRefusesOtherModel(t *testing.T) {
	g, err := llama.Open(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p, err := NewPlan(g.Model.Config, shapes[0])
	if err != nil {
		t.Fatal(err)
	}
	h := drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 32, NumDraftLayers: 1, RNN: true}, 1)
	if _, err := p.Head(h, graph.F32, 0); err == nil || !strings.Contains(err.Error(), "hidden size 32") {
		t.Errorf("head for another model: %v", err)
	}
	h = drafter.NewRandom(drafter.Config{VocabSize: 512, HiddenSize: 64, ExitDim: 96, NumDraftLayers: 1, RNN: true}, 1)
	for _, tc := range []struct {
		exit int
		want string
	}{{64, "narrower than the head's 96"}, {2 * shapes[0].Dim, "no input projection"}} {
		if _, err := p.Head(h, graph.F32, tc.exit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("exit width %d: %v, want an error containing %q", tc.exit, err, tc.want)
		}
	}
}

// TestNeoX inflates a qwen2-architecture model (NeoX rotary halves, q/k/v
// biases): stories260K's weights with random biases.
func TestNeoX(t *testing.T) {
	src := filepath.Join(t.TempDir(), "qwen.gguf")
	writeQwen(t, src)
	orig := load(t, src, "")
	if c := configOf(t, src); !c.RopeNeoX || !c.QKVBias {
		t.Fatalf("test model is not NeoX with biases: %+v", c)
	}
	out := filepath.Join(t.TempDir(), "big.gguf")
	if _, err := Model(src, out, shapes[1], Options{DType: graph.F32, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	checkSame(t, orig, load(t, out, ""), "Once upon a time")
}

// writeQwen writes stories260K relabelled as qwen2, with random biases.
func writeQwen(t *testing.T, path string) {
	g, err := formats.OpenGGUF(stories)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var kv []formats.KV
	for _, e := range g.KVs() {
		switch {
		case e.Key == "general.architecture":
			e.Value = "qwen2"
		case strings.HasPrefix(e.Key, "llama."):
			e.Key = "qwen2." + strings.TrimPrefix(e.Key, "llama.")
		}
		kv = append(kv, e)
	}
	tensors := slices.Clone(g.Tensors)
	r := rand.New(rand.NewPCG(9, 9))
	for l := range 5 {
		for _, b := range []struct {
			name string
			n    int
		}{{"attn_q.bias", 64}, {"attn_k.bias", 32}, {"attn_v.bias", 32}} {
			v := make([]float32, b.n)
			for i := range v {
				v[i] = float32(r.NormFloat64() * 0.3)
			}
			tensors = append(tensors, formats.Tensor{Name: fmt.Sprintf("blk.%d.%s", l, b.name), DType: formats.F32, Shape: []int{b.n}, Data: graph.AsBytes(v)})
		}
	}
	if err := writeFile(path, func(f *os.File) error { return formats.WriteGGUF(f, kv, tensors, 0) }); err != nil {
		t.Fatal(err)
	}
}

// A cancelled inflation stops handing out tensors, or stops writing, and
// leaves neither its output nor its temporary file.
func TestCancelLeavesNothing(t *testing.T) {
	small := Shape{Dim: 128, Heads: 8, KVHeads: 4, Layers: 6, FFN: 256}
	for _, at := range []string{"building", "writing"} {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		built := 0
		opt := Options{DType: graph.F16, Progress: func(done, total int, name string) {
			built = done
			if (at == "building" && done == 2) || (at == "writing" && done == total) {
				cancel()
			}
		}}
		_, err := ModelContext(ctx, stories, filepath.Join(dir, "big.gguf"), small, opt)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", at, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s: left behind %v", at, ents)
		}
		if at == "building" && built > 2+runtime.GOMAXPROCS(0) {
			t.Errorf("built %d tensors after the cancellation at 2", built-2)
		}
	}
}
