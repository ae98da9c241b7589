package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/llama"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// named is one weight of a model with its HF name.
type named struct {
	name  string // HF tensor name
	field string // llama.Model / llama.Layer field
	w     *llama.Weight
}

// hfWeights lists m's weights under their HF names, read from the st tags
// of llama.Model and llama.Layer (the loader's own mapping). A tied output
// and absent biases are left out.
func hfWeights(m *llama.Model) []named {
	var out []named
	walk := func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			w, ok := v.Field(i).Addr().Interface().(*llama.Weight)
			if !ok || !w.Present() || (f.Name == "Output" && m.Config.TiedOutput) {
				continue
			}
			out = append(out, named{name: prefix + f.Tag.Get("st"), field: f.Name, w: w})
		}
	}
	walk(reflect.ValueOf(m).Elem(), "")
	layers, _ := reflect.TypeOf(*m).FieldByName("Layers")
	for i := range m.Layers {
		walk(reflect.ValueOf(&m.Layers[i]).Elem(), fmt.Sprintf(layers.Tag.Get("st"), i))
	}
	return out
}

// values returns a weight's values as float32 (dequantized if quantized).
func values(w llama.Weight) []float32 {
	w = llama.ToF32(w)
	v := make([]float32, w.Shape.Numel())
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
	}
	return v
}

// unpermuteRows undoes llama.cpp's Q/K row interleaving for heads of hd
// rows: GGUF row h·hd + 2j + i is HF row h·hd + i·hd/2 + j.
func unpermuteRows(v []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(v))
	for h := range heads {
		for j := range hd / 2 {
			for i := range 2 {
				src, dst := (h*hd+2*j+i)*cols, (h*hd+i*hd/2+j)*cols
				copy(out[dst:dst+cols], v[src:src+cols])
			}
		}
	}
	return out
}

// srcDType is the float type a model's matrices are stored in.
func srcDType(m *llama.Model) graph.DType {
	if m.Embed.Quantized() {
		return m.Embed.Quant.Scales.DType
	}
	return m.Embed.DType
}

func formatsDType(d graph.DType) formats.DType {
	switch d {
	case graph.F16:
		return formats.F16
	case graph.BF16:
		return formats.BF16
	}
	return formats.F32
}

// Model converts the model at in (an HF checkpoint directory or a .gguf
// file) to an HF-style checkpoint directory out, quantized as opt says.
func Model(in, out string, opt Options) (Summary, error) {
	return ModelContext(context.Background(), in, out, opt)
}

// ModelContext is Model, stopped when ctx is done: it checks ctx between
// tensors and while writing, removes what it wrote, and returns ctx's
// error.
func ModelContext(ctx context.Context, in, out string, opt Options) (Summary, error) {
	if err := opt.check(); err != nil {
		return Summary{}, err
	}
	if err := checkNotInput(in, out); err != nil {
		return Summary{}, err
	}
	if err := checkOut(out, opt.Force); err != nil {
		return Summary{}, err
	}
	ck, err := llama.Open(in)
	if err != nil {
		return Summary{}, err
	}
	defer ck.Close()
	m, c := ck.Model, ck.Model.Config
	if c.Arch == "phi3" {
		// Written as unfused Llama tensors under model_type phi3 it would
		// not load (Phi-3's loader reads the fused qkv_proj and
		// gate_up_proj), and config.json here says nothing of longrope.
		return Summary{}, fmt.Errorf("convert: phi3 models cannot be converted yet (%s)", in)
	}
	if c.PostNorms {
		// Gemma's extra norms, its 1+w gains (stored w+1 in GGUF) and its
		// config keys are not written by this converter yet.
		return Summary{}, fmt.Errorf("convert: %s: %s models are not supported yet", in, c.Arch)
	}
	gguf := ck.Meta != nil
	permuted := gguf && !c.RopeNeoX
	if permuted && c.RopeDims != c.HeadDim {
		return Summary{}, fmt.Errorf("convert: %s: partial rotary (%d of %d dims) in a GGUF llama model cannot be put back in HF order", in, c.RopeDims, c.HeadDim)
	}
	if gguf && len(c.RopeScale.FreqFactors) > 0 {
		return Summary{}, fmt.Errorf("convert: %s: rope_freqs (llama3 rope scaling) cannot be expressed in config.json; convert from the HF checkpoint", in)
	}
	ws := hfWeights(m)
	var matrices []string
	for _, n := range ws {
		if len(n.w.Shape) == 2 {
			matrices = append(matrices, strings.TrimSuffix(n.name, ".weight"))
		}
	}
	if err := opt.checkKeep(matrices); err != nil {
		return Summary{}, err
	}
	src := srcDType(m)
	e := newEncoder(&opt, src, len(ws))
	for _, n := range ws {
		if err := ctx.Err(); err != nil {
			return Summary{}, fmt.Errorf("convert: %w", err)
		}
		v := values(*n.w)
		if len(n.w.Shape) == 1 {
			e.vector(n.name, v, formatsDType(src))
			continue
		}
		rows, cols := n.w.Shape[0], n.w.Shape[1]
		if permuted && (n.field == "Q" || n.field == "K") {
			heads := c.Heads
			if n.field == "K" {
				heads = c.KVHeads
			}
			v = unpermuteRows(v, heads, c.HeadDim, cols)
		}
		alias := ""
		if n.field == "Embed" {
			alias = "embed"
		}
		if err := e.matrix(strings.TrimSuffix(n.name, ".weight"), alias, v, rows, cols); err != nil {
			return Summary{}, err
		}
	}
	var cfg []byte
	var vocab *tokenizer.Vocab
	if gguf {
		if vocab, err = tokenizer.FromGGUFMetadata(ck.Meta); err != nil {
			return Summary{}, fmt.Errorf("convert: %s: %w", in, err)
		}
		if vocab.Model != tokenizer.ModelSPM {
			return Summary{}, fmt.Errorf("convert: %s: a %q tokenizer cannot be written as tokenizer.model; convert from the HF checkpoint", in, vocab.Model)
		}
		cfg, err = ggufConfig(c, vocab, e)
	} else {
		cfg, err = hfConfig(filepath.Join(in, "config.json"), e)
	}
	if err != nil {
		return Summary{}, err
	}
	err = writeDir(ctx, out, opt.Force, func(dir string) error {
		if err := writeCheckpoint(ctx, dir, e.tensors); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		if vocab != nil {
			return os.WriteFile(filepath.Join(dir, "tokenizer.model"), sentencePieceModel(vocab), 0o644)
		}
		return copySideFiles(in, dir)
	})
	return e.c.summary(), err
}

// torchDType names the stored float type as config.json does.
func torchDType(d formats.DType) string {
	switch d {
	case formats.F16:
		return "float16"
	case formats.BF16:
		return "bfloat16"
	}
	return "float32"
}

// hfConfig is the input's config.json with the quantization block replaced.
func hfConfig(path string, e *encoder) ([]byte, error) {
	raw, err := formats.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("convert: %s: %w", path, err)
	}
	delete(cfg, "quantization")
	delete(cfg, "quantization_config")
	set := func(k string, v any) error {
		b, err := json.Marshal(v)
		cfg[k] = b
		return err
	}
	if err := set("torch_dtype", torchDType(e.half)); err != nil {
		return nil, err
	}
	if q := e.quantizationBlock(); q != nil {
		set("quantization", q)
		set("quantization_config", q)
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	return append(out, '\n'), err
}

// ggufConfig writes the config.json of a model read from GGUF.
func ggufConfig(c llama.Config, v *tokenizer.Vocab, e *encoder) ([]byte, error) {
	archs := map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
		"qwen3": "Qwen3ForCausalLM"}
	cfg := map[string]any{
		"architectures":           []string{archs[c.Arch]},
		"model_type":              c.Arch,
		"hidden_size":             c.Dim,
		"intermediate_size":       c.FFN,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"rms_norm_eps":            json.Number(strconv.FormatFloat(float64(c.NormEps), 'g', -1, 32)),
		"rope_theta":              c.RopeTheta,
		"max_position_embeddings": c.Context,
		"vocab_size":              c.Vocab,
		"tie_word_embeddings":     c.TiedOutput,
		"hidden_act":              "silu",
		"torch_dtype":             torchDType(e.half),
	}
	if c.SlidingWindow > 0 {
		// Mistral's window (GGUF mistral.attention.sliding_window; the
		// loader reads it for mistral only, and refuses phi3 and Gemma
		// here), which transformers' Mistral applies whenever it is set.
		cfg["sliding_window"] = c.SlidingWindow
	}
	if c.RopeScale.Type == "linear" {
		cfg["rope_scaling"] = map[string]any{"type": "linear", "factor": c.RopeScale.Factor}
	}
	if v.BOS >= 0 {
		cfg["bos_token_id"] = v.BOS
	}
	if v.EOS >= 0 {
		cfg["eos_token_id"] = v.EOS
	}
	if q := e.quantizationBlock(); q != nil {
		cfg["quantization"] = q
		cfg["quantization_config"] = q
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	return append(out, '\n'), err
}

// copySideFiles copies the input directory's other files (tokenizer,
// generation config, README) but not its weights or config.json.
func copySideFiles(in, dir string) error {
	ents, err := os.ReadDir(in)
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	for _, ent := range ents {
		name := ent.Name()
		if !ent.Type().IsRegular() || name == "config.json" || strings.HasPrefix(name, ".") || isWeightFile(name) {
			continue
		}
		if err := copyFile(filepath.Join(in, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
	}
	return nil
}

func isWeightFile(name string) bool {
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".npz"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return name == "model.safetensors.index.json" || name == "pytorch_model.bin.index.json"
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
