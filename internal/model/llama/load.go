package llama

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// Checkpoint is a loaded model with the file it came from, which stays
// mapped while the model is in use.
type Checkpoint struct {
	Model *Model
	// Meta is the GGUF metadata (nil for HF checkpoints); the tokenizer and
	// chat template are read from it.
	Meta map[string]any
	// Dir is the HF checkpoint directory ("" for GGUF).
	Dir string
	// Ignored says which tensors of the checkpoint are not part of the
	// model loaded ("" when it holds no others): an image-text Gemma 3's
	// vision tower and projector. Callers log it.
	Ignored string
	closer  io.Closer
}

// Close unmaps the checkpoint; its weights must no longer be used.
func (c *Checkpoint) Close() error {
	if c.closer == nil {
		return nil
	}
	return c.closer.Close()
}

// Open loads a .gguf file or an HF checkpoint directory (config.json with
// model.safetensors or its shards).
func Open(path string) (*Checkpoint, error) {
	st, err := formats.CheckFileOrDir(path) // a named pipe would block the open
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	if st.IsDir() {
		return openHF(path)
	}
	return openGGUF(path)
}

func openGGUF(path string) (*Checkpoint, error) {
	g, err := formats.OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	m, err := modelFromGGUF(g)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Checkpoint{Model: m, Meta: g.KV, closer: g}, nil
}

func modelFromGGUF(g *formats.GGUF) (*Model, error) {
	arch, ok := g.String("general.architecture")
	if !ok {
		return nil, errors.New("gguf metadata has no general.architecture")
	}
	switch arch {
	case "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3":
	default:
		return nil, fmt.Errorf("unsupported architecture %q (supported: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3)", arch)
	}
	num := func(key string, def int) (int, error) {
		v, ok := g.Uint(arch + "." + key)
		if !ok {
			if def < 0 {
				return 0, fmt.Errorf("gguf metadata has no %s.%s", arch, key)
			}
			return def, nil
		}
		if v > 1<<31 {
			return 0, fmt.Errorf("gguf metadata %s.%s = %d is out of range", arch, key, v)
		}
		return int(v), nil
	}
	c := Config{Arch: arch, QKVBias: arch == "qwen2", QKNorm: arch == "qwen3"}
	var err error
	for _, f := range []struct {
		dst *int
		key string
		def int
	}{
		{&c.Dim, "embedding_length", -1},
		{&c.FFN, "feed_forward_length", -1},
		{&c.Layers, "block_count", -1},
		{&c.Heads, "attention.head_count", -1},
		{&c.Context, "context_length", 2048},
	} {
		if *f.dst, err = num(f.key, f.def); err != nil {
			return nil, err
		}
	}
	if c.KVHeads, err = num("attention.head_count_kv", c.Heads); err != nil {
		return nil, err
	}
	if c.Heads > 0 {
		if c.HeadDim, err = num("attention.key_length", c.Dim/c.Heads); err != nil {
			return nil, err
		}
	}
	if c.RopeDims, err = num("rope.dimension_count", c.HeadDim); err != nil {
		return nil, err
	}
	if arch == "mistral" {
		// Absent: no window (llama.cpp writes it for Mistral when the HF
		// config has one).
		if c.SlidingWindow, err = num("attention.sliding_window", 0); err != nil {
			return nil, err
		}
	}
	eps, ok := g.Float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok {
		return nil, fmt.Errorf("gguf metadata has no %s.attention.layer_norm_rms_epsilon", arch)
	}
	c.NormEps = float32(eps)
	c.RopeTheta = 10000
	if v, ok := g.Float(arch + ".rope.freq_base"); ok {
		c.RopeTheta = v
	}
	// llama.cpp's converter permutes the Q/K rows of llama/mistral so that
	// RoPE rotates adjacent pairs. q·k is unchanged by a permutation applied
	// to both, so we keep the weights as they are and rotate adjacent pairs
	// too: no copy at load time. It leaves Qwen's rows as HF has them.
	c.RopeNeoX = arch == "qwen2" || arch == "qwen3" || arch == "phi3" // llama.cpp: LLAMA_ROPE_TYPE_NEOX for phi3
	if arch == "phi3" {
		// As transformers, not llama.cpp (see phi3.go). The converter
		// writes 0 for Phi-4 (no window).
		if c.SlidingWindow, err = num("attention.sliding_window", 0); err != nil {
			return nil, err
		}
		c.SlidingWindow = phi3Window(c.SlidingWindow, c.Context)
	}
	// Partial rotary (rope.dimension_count below the head dimension,
	// Phi-4-mini's 3/4) needs nothing more: RoPE rotates each head's
	// first RopeDims dimensions, as llama.cpp does for every architecture.
	if err := ggufRopeScaling(g, arch, &c); err != nil {
		return nil, err
	}
	emb, ok := g.Tensor("token_embd.weight")
	if !ok {
		return nil, errors.New("tensor token_embd.weight is missing")
	}
	if len(emb.Shape) != 2 {
		return nil, fmt.Errorf("tensor token_embd.weight has shape %v", emb.Shape)
	}
	c.Vocab = emb.Shape[0]
	if isGemma(arch) {
		if err := gemmaFromGGUF(g, &c); err != nil {
			return nil, err
		}
	}
	if rf, ok := g.Tensor("rope_freqs.weight"); ok {
		w, err := WeightOf(rf)
		if err != nil {
			return nil, err
		}
		w = ToF32(w)
		c.RopeScale.FreqFactors = append([]float32(nil), f32View(w.Data)...)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: c}
	var bad error
	var find lookup = func(name string) (Weight, bool) {
		t, ok := g.Tensor(name)
		if !ok {
			return Weight{}, false
		}
		w, err := WeightOf(t)
		if err != nil && bad == nil {
			bad = err
		}
		return w, true
	}
	badFused := new(error)
	if arch == "phi3" {
		find, badFused = c.fusedLookup("gguf", find)
	}
	err = bindWeights(m, "gguf", nil, find)
	if bad != nil { // the cause, rather than the shape check it failed
		err = bad
	} else if *badFused != nil {
		err = *badFused
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// WeightOf maps a stored tensor to a Weight without copying, except GGUF
// block-quantized tensors of Q4_0, Q8_0, Q4_1 and Q4_K, which become
// affine-quantized weights with the same values; the other block formats
// it reads stay blocks (see ggmlWeight). Any other type is an error naming
// the tensor and its type.
func WeightOf(t *formats.Tensor) (Weight, error) {
	var dt graph.DType
	switch t.DType {
	case formats.F32:
		dt = graph.F32
	case formats.F16:
		dt = graph.F16
	case formats.BF16:
		dt = graph.BF16
	default:
		if t.DType.IsQuantized() {
			return ggmlWeight(t)
		}
		return Weight{}, fmt.Errorf("tensor %q: dtype %v is not supported (supported: %s)", t.Name, t.DType, supportedTypes())
	}
	return Weight{Name: t.Name, DType: dt, Shape: append(graph.Shape(nil), t.Shape...), Data: t.Data}, nil
}

func openHF(dir string) (*Checkpoint, error) {
	hc, err := formats.ReadHFConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	c, err := configFromHF(hc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	ck, err := formats.OpenSafetensorsDir(dir)
	if err != nil {
		return nil, err
	}
	rename, ignored := func(name string) string { return name }, ""
	if hc.TextConfig != nil {
		if rename, ignored, err = gemmaTextNames(ck); err != nil {
			ck.Close()
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	m := &Model{Config: c}
	var bad error
	var find lookup = func(name string) (Weight, bool) {
		w, ok, err := hfWeight(ck, hc.Quantization, name)
		if err != nil && bad == nil {
			bad = err
		}
		return w, ok
	}
	badFused := new(error)
	if c.Arch == "phi3" {
		find, badFused = c.fusedLookup("st", find)
	}
	if isGemma(c.Arch) {
		find = gemmaNormShift(find)
	}
	err = bindWeights(m, "st", rename, find)
	if err == nil && isGemma(c.Arch) {
		gemmaBound(m)
	}
	if bad != nil { // the cause, rather than the shape check it failed
		err = bad
	} else if *badFused != nil {
		err = *badFused
	}
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &Checkpoint{Model: m, Dir: dir, Ignored: ignored, closer: ck}, nil
}

func configFromHF(h *formats.HFConfig) (Config, error) {
	arch := h.ModelType
	switch arch {
	case "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text":
	case "gemma3":
		// An image-text Gemma 3: its text model, as the gemma3_text it is.
		if t := h.TextConfig; t == nil || t.ModelType != "gemma3_text" {
			return Config{}, errors.New(`model_type "gemma3" (image-text) without a text_config of model_type "gemma3_text"`)
		}
		return configFromHF(h.TextConfig)
	default:
		return Config{}, fmt.Errorf("unsupported model_type %q (supported: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, gemma3 (its text model))", arch)
	}
	c := Config{
		Arch: arch, Vocab: h.VocabSize, Dim: h.HiddenSize, FFN: h.IntermediateSize,
		Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads, KVHeads: h.NumKeyValueHeads,
		HeadDim: h.HeadDim, NormEps: float32(h.RMSNormEps), RopeTheta: h.RopeTheta,
		RopeNeoX: true, Context: h.MaxPositionEmbeddings,
		QKVBias: arch == "qwen2" || h.AttentionBias,
		// Qwen3 has attention_bias false and q_norm/k_norm in every layer.
		QKNorm: arch == "qwen3",
	}
	c.RopeDims = c.HeadDim
	if f := h.PartialRotaryFactor; f != nil && *f != 1 {
		// transformers rotates int(head_dim·f) dimensions. Of the
		// architectures here only Phi-3's modeling code rotates part of a
		// head (the others would fail on the shapes): refused for them.
		if arch != "phi3" {
			return Config{}, fmt.Errorf("partial_rotary_factor %g is only supported for phi3", *f)
		}
		if !(*f > 0 && *f <= 1) {
			return Config{}, fmt.Errorf("partial_rotary_factor %g", *f)
		}
		c.RopeDims = int(float64(c.HeadDim) * *f)
	}
	// Mistral and Phi-3 use sliding_window whenever it is set (null or
	// absent: no window; see phi3.go). Qwen2's is off unless
	// use_sliding_window, and then only for some layers, which we do not
	// run: refused.
	if w := h.SlidingWindow; w != nil && (arch == "mistral" || arch == "phi3") {
		if *w < 0 {
			return Config{}, fmt.Errorf("sliding_window %d", *w)
		}
		c.SlidingWindow = *w
	}
	if u := h.UseSlidingWindow; u != nil && *u && arch == "qwen2" {
		return Config{}, errors.New("qwen2 with use_sliding_window is not supported")
	}
	if c.Context == 0 {
		c.Context = 2048
	}
	if arch == "gemma3_text" || arch == "gemma2" {
		if err := gemmaFromHF(h, &c); err != nil {
			return Config{}, err
		}
	}
	if arch == "phi3" {
		c.SlidingWindow = phi3Window(c.SlidingWindow, c.Context)
	}
	if err := hfRopeScaling(h, &c); err != nil {
		return Config{}, err
	}
	if err := checkSlidingRope(h, arch); err != nil {
		return Config{}, err
	}
	return c, c.validate()
}
