package llama

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// blockTypes are the GGUF types blockModels cycles through, one per matrix.
var blockTypes = []formats.DType{formats.Q6_K, formats.Q5_K, formats.Q3_K, formats.Q2_K, formats.IQ4_XS,
	formats.Q5_0, formats.Q5_1, formats.IQ4_NL, formats.Q4_1}

// blockModels writes a random llama with stories260K's tokenizer (vocabulary
// 512), dim 256, 2 layers, 4 heads (2 KV heads), FFN 512, whose matrices
// take the blockTypes in turn (QuantizeGGML of random weights), and the f32
// model of the same dequantized values. It returns both paths and the type
// of each tensor.
func blockModels(t *testing.T) (quantized, dense string, types map[string]formats.DType) {
	t.Helper()
	g, err := formats.OpenGGUF(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const vocab, dim, layers, heads, kvHeads, ffn = 512, 256, 2, 4, 2, 512
	kv := slices.Clone(g.KVs())
	set := map[string]any{
		"llama.embedding_length": uint32(dim), "llama.block_count": uint32(layers),
		"llama.attention.head_count": uint32(heads), "llama.attention.head_count_kv": uint32(kvHeads),
		"llama.feed_forward_length": uint32(ffn), "llama.rope.dimension_count": uint32(dim / heads),
	}
	for i := range kv {
		if v, ok := set[kv[i].Key]; ok {
			kv[i].Value = v
		}
	}
	r := rand.New(rand.NewPCG(33, 33))
	types = map[string]formats.DType{}
	var qt, dt []formats.Tensor
	add := func(name string, scale float64, shape ...int) {
		v := make([]float32, graph.Shape(shape).Numel())
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		if len(shape) == 1 {
			for i := range v {
				v[i]++
			}
			tn := formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: encode(v, formats.F32)}
			qt, dt = append(qt, tn), append(dt, tn)
			return
		}
		typ := blockTypes[len(types)%len(blockTypes)]
		types[name] = typ
		qtyp, _ := quant.ParseGGML(typ.String())
		data, err := quant.QuantizeGGML(qtyp, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := quant.DequantizeGGML(qtyp, v, data); err != nil {
			t.Fatal(err)
		}
		qt = append(qt, formats.Tensor{Name: name, DType: typ, Shape: shape, Data: data})
		dt = append(dt, formats.Tensor{Name: name, DType: formats.F32, Shape: shape, Data: encode(v, formats.F32)})
	}
	add("token_embd.weight", 1, vocab, dim)
	add("output_norm.weight", 0.1, dim)
	add("output.weight", 0.3, vocab, dim)
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", 0.1, dim)
		add(p+"attn_q.weight", 0.2, dim, dim)
		add(p+"attn_k.weight", 0.2, dim/2, dim)
		add(p+"attn_v.weight", 0.2, dim/2, dim)
		add(p+"attn_output.weight", 0.2, dim, dim)
		add(p+"ffn_norm.weight", 0.1, dim)
		add(p+"ffn_gate.weight", 0.2, ffn, dim)
		add(p+"ffn_up.weight", 0.2, ffn, dim)
		add(p+"ffn_down.weight", 0.2, dim, ffn)
	}
	dir := t.TempDir()
	write := func(name string, ts []formats.Tensor) string {
		var buf bytes.Buffer
		if err := formats.WriteGGUF(&buf, kv, ts, 32); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("blocks.gguf", qt), write("dense.gguf", dt), types
}

// noBlocks is a backend without kernels for ggml blocks, as the GPU
// backends are today: the CPU reference declining the block ops.
type noBlocks struct{ graph.Backend }

func (b noBlocks) Supports(op graph.Op, in []graph.DType) bool {
	switch op.(type) {
	case graph.BlockMatMulOp, graph.BlockEmbedOp, graph.DequantizeBlocksOp:
		return false
	}
	return b.Backend.Supports(op, in)
}

// greedy decodes n tokens after prompt, greedily, on be.
func greedy(t *testing.T, path string, be graph.Backend, prompt []int32, n int) []int32 {
	t.Helper()
	ck, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, be)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.NewState(len(prompt) + n)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vocab := ck.Model.Config.Vocab
	logits := make([]float32, vocab)
	batch, out := Chain(prompt, false), []int32(nil)
	for range n {
		if err := s.Forward(batch, logits, nil); err != nil {
			t.Fatal(err)
		}
		s.Advance(len(batch.Tokens))
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		out = append(out, int32(best))
		batch = Chain([]int32{int32(best)}, false)
	}
	return out
}

// A model whose matrices are Q2_K … Q6_K, Q5_0, Q5_1, Q4_1, IQ4_NL and
// IQ4_XS loads with ggml's values: on the CPU it keeps them as blocks
// (Q4_1 as the same bytes of affine groups) and computes the dense f32
// model's logits (bit for bit on the reference backend, within float
// rounding on the fast one, with the same greedy tokens); on a backend
// without block kernels it is converted exactly and again gives the dense
// model's logits bit for bit. DecodeBytes counts the blocks' own bytes.
func TestBlockModel(t *testing.T) {
	qp, dp, types := blockModels(t)
	ck, err := Open(qp)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	dk, err := Open(dp)
	if err != nil {
		t.Fatal(err)
	}
	defer dk.Close()
	m, d := ck.Model, dk.Model
	pairs := map[string][2]*Weight{"token_embd.weight": {&m.Embed, &d.Embed}, "output.weight": {&m.Output, &d.Output}}
	for i := range m.Layers {
		q, w := &m.Layers[i], &d.Layers[i]
		for name, p := range map[string][2]*Weight{"attn_q": {&q.Q, &w.Q}, "attn_k": {&q.K, &w.K}, "attn_v": {&q.V, &w.V},
			"attn_output": {&q.O, &w.O}, "ffn_gate": {&q.Gate, &w.Gate}, "ffn_up": {&q.Up, &w.Up}, "ffn_down": {&q.Down, &w.Down}} {
			pairs[fmt.Sprintf("blk.%d.%s.weight", i, name)] = p
		}
	}
	for name, p := range pairs {
		typ := types[name]
		switch {
		case typ == formats.Q4_1:
			if !p[0].Quantized() || p[0].Quant.Bits != 4 {
				t.Errorf("%s (%v): loaded as %v, want 4-bit affine", name, typ, p[0].DType)
			}
		case p[0].Blocks.String() != typ.String() || p[0].DType != graph.U8:
			t.Errorf("%s (%v): loaded as %v blocks %v, want its own blocks", name, typ, p[0].DType, p[0].Blocks)
		}
		if !bytes.Equal(ToF32(*p[0]).Data, p[1].Data) {
			t.Errorf("%s (%v): values differ from ggml's", name, typ)
		}
	}

	prompt := []int32{1, 403, 407, 261, 378, 13, 300, 289}
	ref := cpu.NewReference()
	dense := logitsOfTokens(t, dp, ref, prompt)
	if got := logitsOfTokens(t, qp, ref, prompt); !equalF32(got, dense) {
		t.Errorf("reference backend: logits differ from the dense model's (max rel %g)", maxRel(got, dense))
	}
	if got := logitsOfTokens(t, qp, noBlocks{ref}, prompt); !equalF32(got, dense) {
		t.Errorf("converted for a backend without block kernels: logits differ from the dense model's (max rel %g)", maxRel(got, dense))
	}
	fast := cpu.New(2)
	// Every block product is MatMulF32's over ggml's values, as the dense
	// model's; only Q4_1's affine kernel rounds differently (int8
	// activations on VNNI machines).
	tol := 1e-5
	if kernels.AffineImpl() == "avx512vnni" {
		tol = 5e-2
	}
	if e := maxRel(logitsOfTokens(t, qp, fast, prompt), logitsOfTokens(t, dp, fast, prompt)); e > tol {
		t.Errorf("fast backend: logits differ from the dense model's by %g (tolerance %g)", e, tol)
	}
	if got, want := greedy(t, qp, fast, prompt, 24), greedy(t, dp, fast, prompt, 24); !slices.Equal(got, want) {
		t.Errorf("fast backend: greedy tokens %v, the dense model's %v", got, want)
	}

	r, err := Bind(m, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Model != m {
		t.Error("the CPU converted block weights it runs natively")
	}
	// The bytes a decode step reads are the file's: every tensor but the
	// embedding, of which one row.
	g, err := formats.OpenGGUF(qp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var want int64
	for _, tn := range g.Tensors {
		if tn.Name == "token_embd.weight" {
			want += int64(len(tn.Data) / tn.Shape[0])
			continue
		}
		want += int64(len(tn.Data))
	}
	if got := r.Model.DecodeBytes(nil); got != want {
		t.Errorf("DecodeBytes on the CPU = %d, the file's tensors (one embedding row) %d", got, want)
	}
	c, err := Bind(m, noBlocks{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, w := range c.Model.weightsOf() {
		if w.Blocks != 0 {
			t.Errorf("%s: still %v blocks for a backend without block kernels", w.Name, w.Blocks)
		}
	}
	if m.Embed.Blocks == 0 {
		t.Error("binding for another backend changed the loaded model")
	}
}

// A GGUF tensor of a type we do not read is an error naming the tensor and
// its type (it used to be "tensor "token_embd.weight" has shape [], the
// config implies [512,256]").
func TestUnsupportedGGUFType(t *testing.T) {
	g, err := formats.OpenGGUF(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var ts []formats.Tensor
	for _, tn := range g.Tensors {
		if tn.Name == "token_embd.weight" {
			tn.DType = formats.IQ2_XXS
			size, _ := formats.IQ2_XXS.ByteSize(tn.Shape[0] * 256)
			tn.Shape = []int{tn.Shape[0], 256}
			tn.Data = make([]byte, size)
		}
		ts = append(ts, tn)
	}
	var buf bytes.Buffer
	if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "iq2.gguf")
	os.WriteFile(p, buf.Bytes(), 0o644)
	_, err = Open(p)
	if err == nil || !strings.Contains(err.Error(), `"token_embd.weight"`) || !strings.Contains(err.Error(), "IQ2_XXS") ||
		!strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Open = %v, want an error naming token_embd.weight and IQ2_XXS", err)
	}
}

// RunsAs says how each GGUF type runs on the CPU (Q6_K's and Q5_K's
// blocks with int8 activations on AVX-512 VNNI machines) and on a backend
// without block kernels.
func TestRunsAs(t *testing.T) {
	for _, c := range []struct {
		typ       formats.DType
		cpu, none string
	}{
		{formats.F16, "as stored", "as stored"},
		{formats.Q4_0, "4-bit affine (exact)", "4-bit affine (exact)"},
		{formats.Q4_1, "4-bit affine (exact)", "4-bit affine (exact)"},
		{formats.Q8_0, "8-bit affine (exact)", "8-bit affine (exact)"},
		{formats.Q5_K, "Q5_K blocks", "8-bit affine (exact)"},
		{formats.Q6_K, "Q6_K blocks", "f16 or f32 (exact)"},
		{formats.IQ4_XS, "IQ4_XS blocks", "f16 or f32 (exact)"},
		{formats.IQ2_XXS, "not supported", "not supported"},
	} {
		want := c.cpu
		if b, ok := quant.ParseGGML(c.typ.String()); ok && strings.HasSuffix(want, "blocks") && kernels.BlocksInt8(b) {
			want += ", int8 activations (AVX-512 VNNI)"
		}
		if got := RunsAs(c.typ, cpu.New(1)); got != want {
			t.Errorf("%v on the CPU: %q, want %q", c.typ, got, want)
		}
		if got := RunsAs(c.typ, noBlocks{cpu.NewReference()}); got != c.none {
			t.Errorf("%v without block kernels: %q, want %q", c.typ, got, c.none)
		}
	}
}

// On the CUDA backend (over a fake driver that runs nothing: this checks
// the plans, not the numbers) a block model binds, converted, and every op
// of a prefill and a decode step has its kernel; the numbers of the
// conversion are TestBlockModel's, and Metal's fake device runs it whole in
// the API's TestBlockFormatsGreedy.
func TestBlockModelPlansOnCUDA(t *testing.T) {
	qp, _, _ := blockModels(t)
	ck, err := Open(qp)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Bind(ck.Model, cudafake.NewBackend(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, w := range r.Model.weightsOf() {
		if w.Blocks != 0 {
			t.Errorf("%s: %v blocks bound for CUDA", w.Name, w.Blocks)
		}
	}
	s, err := r.NewState(16)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits := make([]float32, ck.Model.Config.Vocab)
	for _, b := range []Batch{Chain([]int32{1, 403, 407}, false), Chain([]int32{261}, false)} {
		if err := s.Forward(b, logits, nil); err != nil {
			t.Fatal(err)
		}
		s.Advance(len(b.Tokens))
	}
}
