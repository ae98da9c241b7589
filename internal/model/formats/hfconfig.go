package formats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// HFConfig is a Hugging Face config.json of a Llama-family model (Llama 1-3,
// Vicuna, TinyLlama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and 3), by its
// config.json names. ReadHFConfig and ParseHFConfig fill in the defaults
// listed at ReadHFConfig; unknown keys are ignored.
//
// An image-text Gemma 3 (model_type "gemma3", Gemma3ForConditionalGeneration)
// keeps its text model's settings under text_config: its HFConfig has
// Architectures, ModelType, TorchDType, Quantization and the special token
// ids of the file's top level, and the text model in TextConfig.
type HFConfig struct {
	Architectures         []string     `json:"architectures"` // e.g. ["LlamaForCausalLM"]
	ModelType             string       `json:"model_type"`    // "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", or "gemma3" (image-text: TextConfig holds the text model)
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads"` // default NumAttentionHeads
	HeadDim               int          `json:"head_dim"`            // default HiddenSize/NumAttentionHeads
	RMSNormEps            float64      `json:"rms_norm_eps"`        // default 1e-6
	RopeTheta             float64      `json:"rope_theta"`          // default 10000
	RopeScaling           *RopeScaling `json:"rope_scaling"`        // nil: none
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	// OriginalMaxPositionEmbeddings is Phi-3's top-level pretrained
	// context, which its longrope scaling is relative to (0 when absent).
	OriginalMaxPositionEmbeddings int `json:"original_max_position_embeddings"`
	VocabSize                     int `json:"vocab_size"`
	// TieWordEmbeddings: there is no lm_head.weight; the output projection
	// reuses model.embed_tokens.weight.
	TieWordEmbeddings bool `json:"tie_word_embeddings"`
	// AttentionBias is Llama's flag for biases on q, k, v and o. Qwen2 does
	// not set it but always has q, k and v biases (and none on o): key that
	// on ModelType or on the tensors present.
	AttentionBias bool   `json:"attention_bias"`
	MLPBias       bool   `json:"mlp_bias"`
	BOSTokenID    *int   `json:"-"`           // bos_token_id; nil if absent or null
	EOSTokenIDs   []int  `json:"-"`           // eos_token_id, an int or a list
	TorchDType    string `json:"torch_dtype"` // "float16", "bfloat16", "float32"; newer files say "dtype"
	HiddenAct     string `json:"hidden_act"`  // default "silu"
	SlidingWindow *int   `json:"sliding_window"`
	// PartialRotaryFactor is the fraction of each head RoPE rotates
	// (Phi-3: 1, Phi-4-mini: 0.75); nil when absent (all of it).
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	// UseSlidingWindow is Qwen2's switch for SlidingWindow (false there by
	// default); Mistral has no switch and uses the window when it is set.
	UseSlidingWindow *bool `json:"use_sliding_window"`
	// Gemma 2 and 3's keys; nil (or empty) when absent.
	HiddenActivation      string   `json:"hidden_activation"` // "gelu_pytorch_tanh"
	QueryPreAttnScalar    *float64 `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	SlidingWindowPattern  *int     `json:"sliding_window_pattern"`
	LayerTypes            []string `json:"layer_types"` // "sliding_attention" or "full_attention" per layer
	RopeLocalBaseFreq     *float64 `json:"rope_local_base_freq"`
	// Quantization is "quantization", or else "quantization_config"; nil if
	// neither is present.
	Quantization *Quantization `json:"-"`
	// SlidingRope is transformers 5's rope_parameters["sliding_attention"]
	// where rope_parameters is keyed by layer type (Gemma 3; its
	// rope_theta is also RopeLocalBaseFreq); nil otherwise. The
	// "full_attention" entry fills RopeTheta, RopeScaling and
	// PartialRotaryFactor as a rope_parameters of one dict does.
	SlidingRope *RopeParameters `json:"-"`
	// TextConfig is an image-text Gemma 3's text_config, with
	// transformers' Gemma3TextConfig defaults for the keys it leaves out
	// (see gemma3TextDefaults); nil for every other model.
	TextConfig *HFConfig `json:"-"`
}

// RopeParameters is one dict of transformers 5's rope_parameters
// (modeling_rope_utils.py, RopeParameters): the base, the part of each head
// rotated and the scaling, whose Type is "default" (or "") for none.
type RopeParameters struct {
	RopeTheta           float64
	PartialRotaryFactor *float64
	Scaling             RopeScaling
}

// parseRopeParameters reads one rope_parameters dict.
func parseRopeParameters(raw json.RawMessage) (*RopeParameters, error) {
	var rp struct {
		RopeTheta           float64  `json:"rope_theta"`
		PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	}
	if err := json.Unmarshal(raw, &rp); err != nil {
		return nil, err
	}
	p := &RopeParameters{RopeTheta: rp.RopeTheta, PartialRotaryFactor: rp.PartialRotaryFactor}
	if err := json.Unmarshal(raw, &p.Scaling); err != nil {
		return nil, err
	}
	return p, nil
}

// scaled reports whether p's rope_type is one that scales.
func (p *RopeParameters) scaled() bool { return p.Scaling.Type != "" && p.Scaling.Type != "default" }

// ropeLayerTypes are the layer types transformers 5 may key rope_parameters
// by (standardize_rope_params: keys that are all layer types make a dict per
// layer type); the ones of the models here.
var ropeLayerTypes = []string{"full_attention", "sliding_attention"}

// RopeScaling is config.json "rope_scaling".
type RopeScaling struct {
	Type                          string  `json:"-"` // "rope_type", or else "type": "linear", "dynamic", "yarn", "llama3"
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`                  // llama3
	HighFreqFactor                float64 `json:"high_freq_factor"`                 // llama3
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"` // llama3, yarn, longrope
	// longrope ("su" in older Phi-3 files): per-dimension divisors of the
	// frequencies for short and long contexts, and the factor cos and sin
	// are multiplied by (nil: derived from the contexts).
	ShortFactor     []float64 `json:"short_factor"`
	LongFactor      []float64 `json:"long_factor"`
	AttentionFactor *float64  `json:"attention_factor"`
}

// UnmarshalJSON accepts the type under "rope_type" or "type".
func (r *RopeScaling) UnmarshalJSON(b []byte) error {
	type plain RopeScaling
	aux := struct {
		*plain
		Type     string `json:"type"`
		RopeType string `json:"rope_type"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	r.Type = aux.RopeType
	if r.Type == "" {
		r.Type = aux.Type
	}
	return nil
}

// Quantization is the quantization block of config.json. MLX checkpoints
// write {"group_size": 64, "bits": 4} plus optional per-module overrides
// keyed by module path; Hugging Face quantizers (GPTQ, AWQ, ...) write
// "quant_method" and their own keys, which are not interpreted here.
type Quantization struct {
	GroupSize   int    `json:"group_size"`   // MLX default 64
	Bits        int    `json:"bits"`         // MLX default 4
	Mode        string `json:"mode"`         // MLX: "affine" (default), "mxfp4", ...
	QuantMethod string `json:"quant_method"` // Hugging Face quantizers only
	// Overrides holds the per-module entries as written: a JSON object with
	// group_size and/or bits, or false for a module left unquantized. Only
	// MLX-style blocks (no quant_method) have them.
	Overrides map[string]json.RawMessage `json:"-"`
}

// quantOverride is one object in Quantization.Overrides.
type quantOverride struct {
	GroupSize int `json:"group_size"`
	Bits      int `json:"bits"`
}

// UnmarshalJSON reads the known keys and keeps object and boolean entries as
// Overrides.
func (q *Quantization) UnmarshalJSON(b []byte) error {
	type plain Quantization
	if err := json.Unmarshal(b, (*plain)(q)); err != nil {
		return err
	}
	if q.QuantMethod != "" {
		return nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k, v := range all {
		switch k {
		case "group_size", "bits", "mode", "quant_method":
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case len(v) > 0 && v[0] == '{':
			var o quantOverride
			if err := json.Unmarshal(v, &o); err != nil {
				return fmt.Errorf("module %q: %w", k, err)
			}
		case string(v) == "false" || string(v) == "true":
		default:
			continue
		}
		if q.Overrides == nil {
			q.Overrides = map[string]json.RawMessage{}
		}
		q.Overrides[k] = v
	}
	return nil
}

// Module returns the group size and bits for the module at path (for example
// "model.layers.0.mlp.down_proj"), applying its override if there is one. ok
// is false if the override is false. In MLX checkpoints whether a module is
// quantized at all is decided by the presence of <path>.scales; Module only
// says how.
func (q *Quantization) Module(path string) (groupSize, bits int, ok bool) {
	groupSize, bits = q.GroupSize, q.Bits
	v, found := q.Overrides[path]
	switch {
	case !found || string(v) == "true":
		return groupSize, bits, true
	case string(v) == "false":
		return 0, 0, false
	}
	var o quantOverride
	json.Unmarshal(v, &o) // checked by UnmarshalJSON
	if o.GroupSize != 0 {
		groupSize = o.GroupSize
	}
	if o.Bits != 0 {
		bits = o.Bits
	}
	return groupSize, bits, true
}

// UnmarshalJSON decodes config.json without applying defaults: it handles
// eos_token_id as an int or a list, "dtype" for "torch_dtype", the two names
// of the quantization block, and the "rope_parameters" block of newer
// transformers releases (which holds rope_theta, the scaling and
// partial_rotary_factor).
func (c *HFConfig) UnmarshalJSON(b []byte) error {
	type plain HFConfig
	aux := struct {
		*plain
		BOS                json.RawMessage `json:"bos_token_id"`
		EOS                json.RawMessage `json:"eos_token_id"`
		DType              string          `json:"dtype"`
		Quantization       *Quantization   `json:"quantization"`
		QuantizationConfig *Quantization   `json:"quantization_config"`
		RopeParameters     json.RawMessage `json:"rope_parameters"`
	}{plain: (*plain)(c)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	bos, err := tokenIDs(aux.BOS)
	if err != nil {
		return fmt.Errorf("bos_token_id: %w", err)
	}
	if len(bos) > 0 {
		c.BOSTokenID = &bos[0]
	}
	if c.EOSTokenIDs, err = tokenIDs(aux.EOS); err != nil {
		return fmt.Errorf("eos_token_id: %w", err)
	}
	if c.TorchDType == "" {
		c.TorchDType = aux.DType
	}
	c.Quantization = aux.Quantization
	if c.Quantization == nil {
		c.Quantization = aux.QuantizationConfig
	}
	if len(aux.RopeParameters) > 0 && string(aux.RopeParameters) != "null" {
		if err := c.readRopeParameters(aux.RopeParameters); err != nil {
			return fmt.Errorf("rope_parameters: %w", err)
		}
	}
	return nil
}

// readRopeParameters reads transformers 5's rope_parameters (per
// modeling_rope_utils.py's standardize_rope_params): one dict with
// rope_theta, rope_type and that type's keys (and partial_rotary_factor
// where the model has one), or, where every key is a layer type (Gemma 3's
// Gemma3TextConfig.convert_rope_params_to_dict), one such dict per layer
// type: "full_attention" for the global layers, "sliding_attention" for the
// sliding ones. rope_scaling, where a file also has it, wins over the
// dict's scaling, as transformers 5 lets it (convert_rope_params_to_dict);
// a top-level rope_theta or rope_local_base_freq that disagrees with the
// dict's is an error rather than a guess.
func (c *HFConfig) readRopeParameters(raw json.RawMessage) error {
	var byKey map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byKey); err != nil {
		return err
	}
	nested := len(byKey) > 0
	for k := range byKey {
		nested = nested && slices.Contains(ropeLayerTypes, k)
	}
	global := raw
	if nested {
		global = byKey["full_attention"]
		if s, ok := byKey["sliding_attention"]; ok {
			p, err := parseRopeParameters(s)
			if err != nil {
				return fmt.Errorf("sliding_attention: %w", err)
			}
			if err := agree(&c.RopeLocalBaseFreq, p.RopeTheta, "rope_local_base_freq", "sliding_attention's rope_theta"); err != nil {
				return err
			}
			c.SlidingRope = p
		}
		if global == nil {
			return nil
		}
	}
	p, err := parseRopeParameters(global)
	if err != nil {
		return err
	}
	if c.RopeTheta != 0 && p.RopeTheta != 0 && c.RopeTheta != p.RopeTheta {
		return fmt.Errorf("rope_theta %g and rope_parameters' rope_theta %g disagree", c.RopeTheta, p.RopeTheta)
	}
	if p.RopeTheta != 0 {
		c.RopeTheta = p.RopeTheta
	}
	if c.PartialRotaryFactor == nil {
		c.PartialRotaryFactor = p.PartialRotaryFactor
	}
	if c.RopeScaling == nil && p.scaled() {
		c.RopeScaling = &p.Scaling
	}
	return nil
}

// agree sets *dst to v (when v is not 0), or fails when *dst is already
// set to another value.
func agree(dst **float64, v float64, name, from string) error {
	switch {
	case v == 0:
	case *dst == nil:
		*dst = &v
	case **dst != v:
		return fmt.Errorf("%s %g and %s %g disagree", name, **dst, from, v)
	}
	return nil
}

// tokenIDs decodes null, an int, or a list of ints.
func tokenIDs(raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '[' {
		var ids []int
		err := json.Unmarshal(raw, &ids)
		return ids, err
	}
	var id int
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, err
	}
	return []int{id}, nil
}

// ReadHFConfig reads a config.json (path may also be the directory holding
// it), checks the required keys (hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, vocab_size: an error names the
// missing key and the file) and fills in the defaults. Optional numbers that
// are absent, null or 0 get:
//
//	num_key_value_heads      num_attention_heads (no GQA: Llama 1, Vicuna)
//	head_dim                 hidden_size / num_attention_heads
//	rope_theta               10000 (Llama 1/2; an explicit 0 is an error)
//	rms_norm_eps             1e-6 (transformers' LlamaConfig default; Llama 2 files say 1e-5; 0 is an error)
//	max_position_embeddings  2048 (transformers' LlamaConfig default)
//	hidden_act               "silu"
//	quantization             group_size 64, bits 4, mode "affine" (MLX blocks: no quant_method)
//
// A gemma3_text config, alone or as an image-text Gemma 3's text_config,
// first gets transformers' Gemma3TextConfig defaults for what it leaves out
// (gemma3TextDefaults; rope_theta 1e6, rope_local_base_freq 1e4).
func ReadHFConfig(path string) (*HFConfig, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseHFConfig(path, data)
}

// ParseHFConfig parses config.json text as ReadHFConfig does. path is used in
// errors only.
func ParseHFConfig(path string, data []byte) (*HFConfig, error) {
	c, err := parseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, nil
}

func parseHFConfig(data []byte) (*HFConfig, error) {
	var present map[string]json.RawMessage
	if err := json.Unmarshal(data, &present); err != nil {
		return nil, err
	}
	var modelType string
	json.Unmarshal(present["model_type"], &modelType) // a wrong type fails below
	if modelType == "gemma3_text" {
		var err error
		if data, err = withDefaults(present, gemma3TextDefaults); err != nil {
			return nil, err
		}
	}
	c := new(HFConfig)
	if err := json.Unmarshal(data, c); err != nil {
		return nil, err
	}
	switch modelType {
	case "gemma3":
		return c, c.readTextConfig(present)
	case "gemma3_text":
		// Gemma3TextConfig's bases (default_theta in transformers 5),
		// where neither rope_theta nor rope_parameters gives them.
		if c.RopeTheta == 0 {
			c.RopeTheta = 1e6
		}
		if c.RopeLocalBaseFreq == nil {
			c.RopeLocalBaseFreq = ptrTo(10000.0)
		}
	}
	if err := c.setDefaults(present); err != nil {
		return nil, err
	}
	return c, nil
}

func ptrTo[T any](v T) *T { return &v }

// gemma3TextDefaults are the defaults of transformers' Gemma3TextConfig
// (models/gemma3/configuration_gemma3.py, Gemma3TextConfig.__init__: the
// same values from 4.50 to 5's modular_gemma3.py) for the keys read here.
// The image-text checkpoints' text_config leaves most of them out
// (gemma-3-4b-it's states only hidden_size, intermediate_size,
// num_hidden_layers, rope_scaling and sliding_window), and transformers
// fills them in; so do we, for every gemma3_text config. rope_theta (1e6)
// and rope_local_base_freq (1e4) are filled in after rope_parameters is
// read; sliding_window_pattern (6) is left to the loader, which derives the
// pattern from layer_types where a file has them.
var gemma3TextDefaults = map[string]any{
	"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
	"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
	"hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
	"bos_token_id": 2, "eos_token_id": 1, "tie_word_embeddings": true,
	"query_pre_attn_scalar": 256, "sliding_window": 4096,
}

// withDefaults adds to present each default whose key it lacks and
// returns the result as JSON.
func withDefaults(present map[string]json.RawMessage, defaults map[string]any) ([]byte, error) {
	for k, v := range defaults {
		if _, ok := present[k]; ok {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		present[k] = b
	}
	return json.Marshal(present)
}

// readTextConfig reads an image-text Gemma 3's text_config into
// c.TextConfig, as a gemma3_text config (its default model_type). What the
// text model shares with the whole file and text_config may leave to the
// top level — the dtype, the quantization block, the special token ids —
// is taken from there.
func (c *HFConfig) readTextConfig(present map[string]json.RawMessage) error {
	raw, ok := present["text_config"]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return errors.New(`model_type "gemma3" (image-text) has no text_config`)
	}
	var text map[string]json.RawMessage
	if err := json.Unmarshal(raw, &text); err != nil {
		return fmt.Errorf("text_config: %w", err)
	}
	if _, ok := text["model_type"]; !ok {
		text["model_type"] = json.RawMessage(`"gemma3_text"`)
	}
	for _, keys := range [][]string{{"torch_dtype", "dtype"}, {"quantization", "quantization_config"}, {"bos_token_id"}, {"eos_token_id"}} {
		if slices.ContainsFunc(keys, func(k string) bool { _, ok := text[k]; return ok }) {
			continue
		}
		for _, k := range keys {
			if v, ok := present[k]; ok {
				text[k] = v
			}
		}
	}
	b, err := json.Marshal(text)
	if err != nil {
		return err
	}
	if c.TextConfig, err = parseHFConfig(b); err != nil {
		return fmt.Errorf("text_config: %w", err)
	}
	return nil
}

// setDefaults checks the required keys and derives every default listed at
// ReadHFConfig, in one place. present holds the keys of the file.
func (c *HFConfig) setDefaults(present map[string]json.RawMessage) error {
	required := []struct {
		key string
		v   int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"vocab_size", c.VocabSize},
	}
	for _, r := range required {
		if v, ok := present[r.key]; !ok || string(v) == "null" {
			return fmt.Errorf("missing required key %q", r.key)
		}
		if r.v <= 0 {
			return fmt.Errorf("%s is %d, want > 0", r.key, r.v)
		}
	}
	switch {
	case c.NumKeyValueHeads < 0:
		return fmt.Errorf("num_key_value_heads is %d, want > 0", c.NumKeyValueHeads)
	case c.HeadDim < 0:
		return fmt.Errorf("head_dim is %d, want > 0", c.HeadDim)
	case c.RopeTheta < 0:
		return fmt.Errorf("rope_theta is %g, want > 0", c.RopeTheta)
	case c.RMSNormEps < 0:
		return fmt.Errorf("rms_norm_eps is %g, want > 0", c.RMSNormEps)
	}
	// rope_theta and rms_norm_eps written as 0 are broken values, not
	// "use the default": GGUF's readers refuse them, and so do we.
	for _, k := range []string{"rope_theta", "rms_norm_eps"} {
		if v, ok := present[k]; ok && string(v) != "null" {
			if f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64); err == nil && f == 0 {
				return fmt.Errorf("%s is 0, want > 0", k)
			}
		}
	}
	// Special token ids must name a row of the vocabulary.
	ids := c.EOSTokenIDs
	if c.BOSTokenID != nil {
		ids = append([]int{*c.BOSTokenID}, ids...)
	}
	for _, id := range ids {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("special token id %d (bos_token_id or eos_token_id) is outside the vocabulary of %d", id, c.VocabSize)
		}
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d, and head_dim is not set", c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = 2048
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	if q := c.Quantization; q != nil && q.QuantMethod == "" {
		if q.GroupSize == 0 {
			q.GroupSize = 64
		}
		if q.Bits == 0 {
			q.Bits = 4
		}
		if q.Mode == "" {
			q.Mode = "affine"
		}
	}
	return nil
}
