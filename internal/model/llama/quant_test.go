package llama

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// mlxPack packs codes the way MLX lays them out on disk, written out
// byte by byte rather than through package quant: for 4 bits, byte i of a
// row holds element 2i in its low nibble and 2i+1 in its high nibble; for
// 8 bits, byte i is element i.
func mlxPack(codes []uint8, bits int) []byte {
	if bits == 8 {
		return append([]byte(nil), codes...)
	}
	out := make([]byte, len(codes)/2)
	for i := range out {
		out[i] = codes[2*i] | codes[2*i+1]<<4
	}
	return out
}

func f16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToF16(x))
	}
	return b
}

// mlxCheckpoint writes stories260K as an MLX 4-bit checkpoint in MLX's
// exact layout: U32 codes, f16 scales and biases, a quantization block with
// a per-module override (8 bits for layer 0's gate_proj), lm_head left in
// f32 with a false override, and ffn_down unquantized (172 columns are not
// whole groups: no .scales, no override). Codes, scales and biases are
// random; it returns the directory and the dense HF checkpoint of the
// values they stand for (s·q + b in float32).
func mlxCheckpoint(t *testing.T, gs int) (dir, dense string) {
	t.Helper()
	g, err := formats.OpenGGUF(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c, _ := modelFromGGUF(g)
	r := rand.New(rand.NewPCG(7, uint64(gs)))
	base := t.TempDir()
	dir, dense = filepath.Join(base, "mlx"), filepath.Join(base, "dense")
	os.Mkdir(dir, 0o755)
	os.Mkdir(dense, 0o755)
	var qt, dt []formats.Tensor
	for _, tn := range g.Tensors {
		name := ggufToHF(tn.Name)
		v, _ := tn.Float32s()
		v = append([]float32(nil), v...)
		path := strings.TrimSuffix(name, ".weight")
		bits := 4
		if path == "model.layers.0.mlp.gate_proj" {
			bits = 8
		}
		if len(tn.Shape) == 1 || path == "lm_head" || tn.Shape[1]%gs != 0 {
			qt = append(qt, formats.Tensor{Name: name, DType: formats.F32, Shape: tn.Shape, Data: encode(v, formats.F32)})
			dt = append(dt, formats.Tensor{Name: name, DType: formats.F32, Shape: tn.Shape, Data: encode(v, formats.F32)})
			continue
		}
		rows, cols := tn.Shape[0], tn.Shape[1]
		codes := make([]uint8, rows*cols)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		ng := rows * cols / gs
		s, b := make([]float32, ng), make([]float32, ng)
		for i := range s {
			s[i] = quant.F16ToF32(quant.F32ToF16(float32(r.Float64()*0.02 + 0.001)))
			b[i] = quant.F16ToF32(quant.F32ToF16(float32(-r.Float64() * 0.1)))
		}
		val := make([]float32, rows*cols)
		for i := range val {
			val[i] = float32(s[i/gs]*float32(codes[i])) + b[i/gs]
		}
		qt = append(qt,
			formats.Tensor{Name: name, DType: formats.U32, Shape: []int{rows, cols * bits / 32}, Data: mlxPack(codes, bits)},
			formats.Tensor{Name: path + ".scales", DType: formats.F16, Shape: []int{rows, cols / gs}, Data: f16Bytes(s)},
			formats.Tensor{Name: path + ".biases", DType: formats.F16, Shape: []int{rows, cols / gs}, Data: f16Bytes(b)})
		dt = append(dt, formats.Tensor{Name: name, DType: formats.F32, Shape: tn.Shape, Data: encode(val, formats.F32)})
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": c.Config.Dim,
		"intermediate_size": c.Config.FFN, "num_hidden_layers": c.Config.Layers,
		"num_attention_heads": c.Config.Heads, "num_key_value_heads": c.Config.KVHeads,
		"rms_norm_eps": c.Config.NormEps, "rope_theta": c.Config.RopeTheta, "vocab_size": c.Config.Vocab,
		"max_position_embeddings": 512, "torch_dtype": "float32", "hidden_act": "silu",
	}
	cj, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(dense, "config.json"), cj, 0o644)
	cfg["quantization"] = map[string]any{"group_size": gs, "bits": 4,
		"model.layers.0.mlp.gate_proj": map[string]any{"bits": 8}, "lm_head": false}
	cj, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, qt, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644)
	writeST(t, filepath.Join(dense, "model.safetensors"), dt)
	return dir, dense
}

// A checkpoint in MLX's exact layout loads with the right bits and group
// sizes, dequantizes to s·q + b, and on the reference backend gives the
// logits of the dense model of those values bit for bit (and on the fast
// backend to rounding).
func TestMLXLayoutCheckpoint(t *testing.T) {
	for _, gs := range []int{32, 64} {
		dir, dense := mlxCheckpoint(t, gs)
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		dk, err := Open(dense)
		if err != nil {
			t.Fatal(err)
		}
		m, d := ck.Model, dk.Model
		type pair struct {
			name string
			q, d *Weight
			bits int // 0: not quantized
		}
		pairs := []pair{{"embed", &m.Embed, &d.Embed, 4}, {"lm_head", &m.Output, &d.Output, 0}}
		for i := range m.Layers {
			ql, dl := &m.Layers[i], &d.Layers[i]
			gate := 4
			if i == 0 {
				gate = 8
			}
			pairs = append(pairs, pair{"q", &ql.Q, &dl.Q, 4}, pair{"gate", &ql.Gate, &dl.Gate, gate},
				pair{"down", &ql.Down, &dl.Down, 0})
		}
		for _, p := range pairs {
			if p.bits == 0 {
				if p.q.Quantized() {
					t.Errorf("g%d %s: quantized, want plain", gs, p.name)
				}
				continue
			}
			if !p.q.Quantized() || p.q.Quant.Bits != p.bits || p.q.Quant.GroupSize != gs {
				t.Fatalf("g%d %s: quant %+v, want %d bits in groups of %d", gs, p.name, p.q.Quant, p.bits, gs)
			}
			got, want := ToF32(*p.q).Data, p.d.Data
			if !bytes.Equal(got, want) {
				t.Fatalf("g%d %s: dequantized values differ from s·q+b", gs, p.name)
			}
		}
		ref := cpu.NewReference()
		if ql, dl := logitsOf(t, dir, ref), logitsOf(t, dense, ref); !equalF32(ql, dl) {
			t.Errorf("g%d: reference-backend logits of the quantized model differ from the dense model's (max rel %g)", gs, maxRel(ql, dl))
		}
		fast := cpu.New(2)
		tol := 1e-5
		if kernels.AffineImpl() == "avx512vnni" {
			tol = 5e-2 // int8 activations: ~1e-3 per product, through five layers
		}
		if e := maxRel(logitsOf(t, dir, fast), logitsOf(t, dense, fast)); e > tol {
			t.Errorf("g%d: fast-backend logits differ by %g", gs, e)
		}
		ck.Close()
		dk.Close()
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// GGUF Q8_0 and Q4_0 models load as affine weights with ggml's values, Q4_K
// tensors map to weights with ggml's values, and Q6_K stays blocks with
// them.
func TestGGUFQuantizedTypes(t *testing.T) {
	g, err := formats.OpenGGUF(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r := rand.New(rand.NewPCG(9, 9))
	// randomBlocks makes n elements of typ with random codes and sane scales.
	ggmlTypes := func(typ formats.DType) quant.GGML { q, _ := quant.ParseGGML(typ.String()); return q }
	randomBlocks := func(typ formats.DType, n int) []byte {
		qt := ggmlTypes(typ)
		data := make([]byte, n/qt.BlockElems()*qt.BlockBytes())
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		for off := 0; off < len(data); off += qt.BlockBytes() {
			ats := map[formats.DType][]int{formats.Q8_0: {0}, formats.Q4_0: {0}, formats.Q4_K: {0, 2}, formats.Q6_K: {208}}[typ]
			for _, at := range ats {
				binary.LittleEndian.PutUint16(data[off+at:], quant.F32ToF16(float32(r.Float64()*0.01)))
			}
		}
		return data
	}
	for _, typ := range []formats.DType{formats.Q4_K, formats.Q6_K, formats.Q8_0, formats.Q4_0} {
		tn := &formats.Tensor{Name: "x.weight", DType: typ, Shape: []int{3, 512}, Data: randomBlocks(typ, 3*512)}
		w, err := WeightOf(tn)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 3*512)
		quant.DequantizeGGML(ggmlTypes(typ), want, tn.Data)
		got := f32View(ToF32(w).Data)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: element %d: %v, ggml %v", typ, i, got[i], want[i])
			}
		}
		if typ == formats.Q6_K && (w.DType != graph.U8 || w.Blocks != quant.Q6_K) {
			t.Errorf("Q6_K loads as %v, want Q6_K blocks", w.DType)
		}
		if (typ == formats.Q6_K) == w.Quantized() {
			t.Errorf("%v: quantized = %v", typ, w.Quantized())
		}
		if sym := typ == formats.Q4_0 || typ == formats.Q8_0; w.Quantized() && w.Quant.Symmetric != sym {
			t.Errorf("%v: symmetric = %v", typ, w.Quant.Symmetric)
		}
	}
	// Whole models: every matrix in Q8_0 or Q4_0, on the reference backend
	// equal to the f32 model of the dequantized values.
	for _, typ := range []formats.DType{formats.Q8_0, formats.Q4_0} {
		var qt, dt []formats.Tensor
		for _, tn := range g.Tensors {
			if len(tn.Shape) == 2 {
				n := tn.Shape[0] * tn.Shape[1]
				if tn.Shape[1]%32 == 0 {
					data := randomBlocks(typ, n)
					v := make([]float32, n)
					quant.DequantizeGGML(ggmlTypes(typ), v, data)
					qt = append(qt, formats.Tensor{Name: tn.Name, DType: typ, Shape: tn.Shape, Data: data})
					dt = append(dt, formats.Tensor{Name: tn.Name, DType: formats.F32, Shape: tn.Shape, Data: encode(v, formats.F32)})
					continue
				}
			}
			qt = append(qt, tn)
			dt = append(dt, tn)
		}
		dir := t.TempDir()
		write := func(name string, ts []formats.Tensor) string {
			var buf bytes.Buffer
			if err := formats.WriteGGUF(&buf, g.KVs(), ts, 32); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, name)
			os.WriteFile(p, buf.Bytes(), 0o644)
			return p
		}
		qp, dp := write("q.gguf", qt), write("d.gguf", dt)
		ref := cpu.NewReference()
		if ql, dl := logitsOf(t, qp, ref), logitsOf(t, dp, ref); !equalF32(ql, dl) {
			t.Errorf("%v model: logits differ from the dequantized f32 model (max rel %g)", typ, maxRel(ql, dl))
		}
		// A backend that computes symmetric biases reads none of the
		// matrices' biases; the untied embedding row is looked up with its own.
		ck, err := Open(qp)
		if err != nil {
			t.Fatal(err)
		}
		m := ck.Model
		var biases int64
		for _, w := range m.weightsOf() {
			if q := w.Quant; q != nil && (w != &m.Embed || m.Config.TiedOutput) {
				biases += int64(len(q.Biases.Data))
			}
		}
		all, computed := m.DecodeBytes(nil), m.DecodeBytes(func(*Quant) bool { return true })
		if biases == 0 || all-computed != biases || m.DecodeBytes(func(*Quant) bool { return false }) != all {
			t.Errorf("%v model: DecodeBytes %d, %d with computed biases; the matrices' biases are %d bytes", typ, all, computed, biases)
		}
		ck.Close()
	}
}

// Broken quantized checkpoints are errors that say what is wrong.
func TestQuantizedErrors(t *testing.T) {
	dir, _ := mlxCheckpoint(t, 32)
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	st, err := formats.OpenSafetensors(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]formats.Tensor(nil), st.Tensors...)
	for i := range orig {
		orig[i].Data = append([]byte(nil), orig[i].Data...)
	}
	st.Close()
	variant := func(cfg func(map[string]any), edit func([]formats.Tensor) []formats.Tensor) string {
		d := t.TempDir()
		var c map[string]any
		json.Unmarshal(raw, &c)
		if cfg != nil {
			cfg(c)
		}
		cj, _ := json.Marshal(c)
		os.WriteFile(filepath.Join(d, "config.json"), cj, 0o644)
		ts := append([]formats.Tensor(nil), orig...)
		if edit != nil {
			ts = edit(ts)
		}
		writeST(t, filepath.Join(d, "model.safetensors"), ts)
		return d
	}
	drop := func(name string) func([]formats.Tensor) []formats.Tensor {
		return func(ts []formats.Tensor) []formats.Tensor {
			var out []formats.Tensor
			for _, tn := range ts {
				if tn.Name != name {
					out = append(out, tn)
				}
			}
			return out
		}
	}
	reshape := func(name string, shape []int, dt formats.DType) func([]formats.Tensor) []formats.Tensor {
		return func(ts []formats.Tensor) []formats.Tensor {
			for i := range ts {
				if ts[i].Name == name {
					ts[i].Shape, ts[i].DType = shape, dt
				}
			}
			return ts
		}
	}
	q := "model.layers.1.self_attn.q_proj"
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"no block", variant(func(c map[string]any) { delete(c, "quantization") }, nil), "no quantization block"},
		{"override false", variant(func(c map[string]any) { c["quantization"].(map[string]any)[q] = false }, nil), "does not quantize"},
		{"group size disagrees", variant(func(c map[string]any) { c["quantization"].(map[string]any)["group_size"] = 64 }, nil), "shapes imply"},
		{"bits disagree", variant(func(c map[string]any) { c["quantization"].(map[string]any)["bits"] = 8 }, nil), "groups of 16"},
		{"mode", variant(func(c map[string]any) { c["quantization"].(map[string]any)["mode"] = "mxfp4" }, nil), `mode "mxfp4"`},
		{"no biases", variant(nil, drop(q+".biases")), "both .scales and .biases"},
		{"scales dtype", variant(nil, reshape(q+".scales", []int{64, 2}, formats.I16)), "scales of dtype I16"},
		{"codes dtype", variant(nil, reshape(q+".weight", []int{64, 8}, formats.I32)), "want U32"},
		{"groups", variant(nil, func(ts []formats.Tensor) []formats.Tensor {
			ts = reshape(q+".scales", []int{64, 4}, formats.U8)(ts)
			return reshape(q+".biases", []int{64, 4}, formats.U8)(ts)
		}), "groups of 16"},
	} {
		_, err := Open(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// tinyQuantized is a 1-layer model with every matrix quantized, small
// enough to fuzz: its config.json, safetensors header and data buffer.
func tinyQuantized(t testing.TB) (cfg []byte, header []byte, data []byte) {
	r := rand.New(rand.NewPCG(1, 1))
	var ts []formats.Tensor
	mat := func(name string, rows, cols int) {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		codes, s, b, _ := quant.QuantizeAffine(v, cols, 4, 32)
		p := strings.TrimSuffix(name, ".weight")
		ts = append(ts, formats.Tensor{Name: name, DType: formats.U32, Shape: []int{rows, cols / 8}, Data: append([]byte(nil), graph.AsBytes(codes)...)},
			formats.Tensor{Name: p + ".scales", DType: formats.F16, Shape: []int{rows, cols / 32}, Data: f16Bytes(s)},
			formats.Tensor{Name: p + ".biases", DType: formats.F16, Shape: []int{rows, cols / 32}, Data: f16Bytes(b)})
	}
	vec := func(name string, n int) {
		ts = append(ts, formats.Tensor{Name: name, DType: formats.F32, Shape: []int{n}, Data: encode(make([]float32, n), formats.F32)})
	}
	mat("model.embed_tokens.weight", 16, 32)
	mat("lm_head.weight", 16, 32)
	vec("model.norm.weight", 32)
	p := "model.layers.0."
	vec(p+"input_layernorm.weight", 32)
	vec(p+"post_attention_layernorm.weight", 32)
	for _, n := range []string{"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"} {
		mat(p+n+".weight", 32, 32)
	}
	mat(p+"self_attn.k_proj.weight", 16, 32)
	mat(p+"self_attn.v_proj.weight", 16, 32)
	var buf bytes.Buffer
	if err := formats.WriteSafetensors(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	cfg = []byte(`{"model_type":"llama","hidden_size":32,"intermediate_size":32,"num_hidden_layers":1,
"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":16,"max_position_embeddings":64,
"quantization":{"group_size":32,"bits":4}}`)
	return cfg, b[8 : 8+n], b[8+n:]
}

// Hostile quantized checkpoints (mutated headers and configs) give errors,
// never panics, through loading, binding and a forward pass.
func FuzzOpenQuantized(f *testing.F) {
	cfg, hdr, data := tinyQuantized(f)
	f.Add(cfg, hdr)
	f.Add(cfg, bytes.Replace(hdr, []byte(`"shape":[16,4]`), []byte(`"shape":[16,2]`), 1))
	f.Add(bytes.Replace(cfg, []byte(`"bits":4`), []byte(`"bits":8`), 1), hdr)
	f.Fuzz(func(t *testing.T, cfg, hdr []byte) {
		dir := t.TempDir()
		st := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		st = append(append(st, hdr...), data...)
		os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644)
		os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
		ck, err := Open(dir)
		if err != nil {
			return
		}
		defer ck.Close()
		if ck.Model.Config.Dim*ck.Model.Config.Vocab > 1<<16 || ck.Model.Config.Layers > 2 {
			return // keep each run small
		}
		r, err := Bind(ck.Model, cpu.NewReference())
		if err != nil {
			return
		}
		defer r.Close()
		s, err := r.NewState(4)
		if err != nil {
			return
		}
		defer s.Close()
		s.Forward(Chain([]int32{1, 2}, true), nil, nil)
	})
}

func TestTinyQuantizedLoads(t *testing.T) {
	cfg, hdr, data := tinyQuantized(t)
	dir := t.TempDir()
	st := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	os.WriteFile(filepath.Join(dir, "model.safetensors"), append(append(st, hdr...), data...), 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	logits := logitsOfTokens(t, dir, cpu.New(1), []int32{1, 2, 3})
	for _, v := range logits {
		if math.IsNaN(float64(v)) {
			t.Fatal("NaN logits")
		}
	}
}

// logitsOfTokens runs tokens as one chain through the checkpoint at path
// and returns every row's logits.
func logitsOfTokens(t *testing.T, path string, be graph.Backend, tokens []int32) []float32 {
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
	s, err := r.NewState(max(16, len(tokens)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits := make([]float32, len(tokens)*ck.Model.Config.Vocab)
	if err := s.Forward(Chain(tokens, true), logits, nil); err != nil {
		t.Fatal(fmt.Errorf("forward: %w", err))
	}
	return logits
}
