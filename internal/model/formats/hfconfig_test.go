package formats

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestReadHFConfig(t *testing.T) {
	llama := []string{"LlamaForCausalLM"}
	llama3Rope := func(factor float64) *RopeScaling {
		return &RopeScaling{Type: "llama3", Factor: factor, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	}
	cases := []struct {
		file string
		want HFConfig
	}{
		{"llama2-7b.json", HFConfig{
			Architectures: llama, ModelType: "llama", HiddenSize: 4096, IntermediateSize: 11008,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128,
			RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 4096, VocabSize: 32000,
			BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, TorchDType: "float16", HiddenAct: "silu",
		}},
		{"vicuna-7b-v1.3.json", HFConfig{ // Llama 1: no num_key_value_heads, no rope_theta
			Architectures: llama, ModelType: "llama", HiddenSize: 4096, IntermediateSize: 11008,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128,
			RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 2048, VocabSize: 32000,
			BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, TorchDType: "float16", HiddenAct: "silu",
		}},
		{"llama3.1-8b-instruct.json", HFConfig{
			Architectures: llama, ModelType: "llama", HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama3Rope(8), MaxPositionEmbeddings: 131072,
			VocabSize: 128256, BOSTokenID: ptr(128000), EOSTokenIDs: []int{128001, 128008, 128009},
			TorchDType: "bfloat16", HiddenAct: "silu",
		}},
		{"mistral-7b-v0.1.json", HFConfig{
			Architectures: []string{"MistralForCausalLM"}, ModelType: "mistral", HiddenSize: 4096, IntermediateSize: 14336,
			NumHiddenLayers: 32, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
			RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32768, VocabSize: 32000,
			BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, TorchDType: "bfloat16", HiddenAct: "silu", SlidingWindow: ptr(4096),
		}},
		{"qwen2-0.5b-instruct.json", HFConfig{
			Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", HiddenSize: 896, IntermediateSize: 4864,
			NumHiddenLayers: 24, NumAttentionHeads: 14, NumKeyValueHeads: 2, HeadDim: 64,
			RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 32768, VocabSize: 151936, TieWordEmbeddings: true,
			BOSTokenID: ptr(151643), EOSTokenIDs: []int{151645}, TorchDType: "bfloat16", HiddenAct: "silu",
			SlidingWindow: ptr(32768), UseSlidingWindow: ptr(false),
		}},
		{"tinyllama-1.1b-chat.json", HFConfig{
			Architectures: llama, ModelType: "llama", HiddenSize: 2048, IntermediateSize: 5632,
			NumHiddenLayers: 22, NumAttentionHeads: 32, NumKeyValueHeads: 4, HeadDim: 64,
			RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 2048, VocabSize: 32000,
			BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, TorchDType: "bfloat16", HiddenAct: "silu",
		}},
		{"mlx-llama3.2-1b-4bit.json", HFConfig{
			Architectures: llama, ModelType: "llama", HiddenSize: 2048, IntermediateSize: 8192,
			NumHiddenLayers: 16, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64,
			RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama3Rope(32), MaxPositionEmbeddings: 131072,
			VocabSize: 128256, TieWordEmbeddings: true, BOSTokenID: ptr(128000), EOSTokenIDs: []int{128001, 128008, 128009},
			TorchDType: "bfloat16", HiddenAct: "silu",
			Quantization: &Quantization{GroupSize: 64, Bits: 4, Mode: "affine"},
		}},
		{"synthetic-mlx-mixed.json", HFConfig{
			ModelType: "qwen2", HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000,
			MaxPositionEmbeddings: 2048, VocabSize: 100, HiddenAct: "silu",
			Quantization: &Quantization{GroupSize: 32, Bits: 4, Mode: "affine", Overrides: map[string]json.RawMessage{
				"model.layers.0.mlp.down_proj": json.RawMessage(`{"bits": 8}`),
				"model.layers.1.mlp.down_proj": json.RawMessage(`{"group_size": 64, "bits": 6}`),
				"lm_head":                      json.RawMessage(`false`),
			}},
		}},
		{"synthetic-transformers-v5.json", HFConfig{
			Architectures: llama, ModelType: "llama", HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDim: 32, RMSNormEps: 1e-6, RopeTheta: 500000,
			RopeScaling: llama3Rope(8), MaxPositionEmbeddings: 2048, VocabSize: 100,
			BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, TorchDType: "bfloat16", HiddenAct: "silu",
		}},
		// transformers v5 keeps longrope's parameters and Phi-4-mini's
		// partial_rotary_factor in rope_parameters.
		{"synthetic-phi3-longrope-v5.json", HFConfig{
			Architectures: []string{"Phi3ForCausalLM"}, ModelType: "phi3", HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000,
			RopeScaling: &RopeScaling{Type: "longrope", OriginalMaxPositionEmbeddings: 512,
				ShortFactor: []float64{1, 1.5, 2, 2.5, 3, 3.5}, LongFactor: []float64{1, 2, 4, 8, 16, 32}, AttentionFactor: ptr(1.25)},
			MaxPositionEmbeddings: 4096, VocabSize: 100, TorchDType: "bfloat16", HiddenAct: "silu",
			SlidingWindow: ptr(262144), PartialRotaryFactor: ptr(0.75),
		}},
	}
	for _, c := range cases {
		got, err := ReadHFConfig(filepath.Join("testdata", "hfconfig", c.file))
		if err != nil {
			t.Errorf("ReadHFConfig(%s): %v", c.file, err)
			continue
		}
		if !reflect.DeepEqual(*got, c.want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(&c.want)
			t.Errorf("ReadHFConfig(%s) =\n%s\nwant\n%s\n(%+v)", c.file, g, w, *got)
		}
	}
}

func TestQuantizationModule(t *testing.T) {
	c, err := ReadHFConfig("testdata/hfconfig/synthetic-mlx-mixed.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path            string
		groupSize, bits int
		quantized       bool
	}{
		{"model.layers.0.self_attn.q_proj", 32, 4, true},
		{"model.layers.0.mlp.down_proj", 32, 8, true},
		{"model.layers.1.mlp.down_proj", 64, 6, true},
		{"lm_head", 0, 0, false},
	}
	for _, tc := range cases {
		gs, bits, ok := c.Quantization.Module(tc.path)
		if gs != tc.groupSize || bits != tc.bits || ok != tc.quantized {
			t.Errorf("Module(%q) = %d, %d, %v; want %d, %d, %v", tc.path, gs, bits, ok, tc.groupSize, tc.bits, tc.quantized)
		}
	}
}

// TestHFConfigHFQuantizer keeps a Hugging Face quantization_config without
// MLX defaults or overrides.
func TestHFConfigHFQuantizer(t *testing.T) {
	c, err := ParseHFConfig("gptq/config.json", []byte(`{"hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 7,
		"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false, "sym": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if q := c.Quantization; q == nil || q.QuantMethod != "gptq" || q.Bits != 4 || q.GroupSize != 128 || q.Mode != "" || q.Overrides != nil {
		t.Errorf("Quantization = %+v", c.Quantization)
	}
}

func TestHFConfigErrors(t *testing.T) {
	const base = `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10`
	cases := []struct {
		name, json, want string
	}{
		{"no hidden_size", `{"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}`, `missing required key "hidden_size"`},
		{"null vocab", `{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": null}`, `missing required key "vocab_size"`},
		{"no intermediate", `{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}`, `missing required key "intermediate_size"`},
		{"no layers", `{"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 10}`, `missing required key "num_hidden_layers"`},
		{"no heads", `{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 10}`, `missing required key "num_attention_heads"`},
		{"zero heads", `{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 0, "vocab_size": 10}`, `num_attention_heads is 0, want > 0`},
		{"gqa", `{` + base + `, "num_key_value_heads": 3}`, `num_attention_heads 4 is not a multiple of num_key_value_heads 3`},
		{"head dim", `{"hidden_size": 66, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}`, `hidden_size 66 is not a multiple of num_attention_heads 4, and head_dim is not set`},
		{"negative head dim", `{` + base + `, "head_dim": -1}`, `head_dim is -1`},
		{"eos string", `{` + base + `, "eos_token_id": "x"}`, `eos_token_id: json: cannot unmarshal string`},
		{"bad override", `{` + base + `, "quantization": {"bits": 4, "m": {"bits": "x"}}}`, `module "m"`},
		{"not json", `{`, `unexpected end of JSON input`},
		{"wrong type", `{` + base + `, "rope_theta": "big"}`, `cannot unmarshal string`},
		{"rope_theta 0", `{` + base + `, "rope_theta": 0}`, `rope_theta is 0, want > 0`},
		{"rms_norm_eps 0", `{` + base + `, "rms_norm_eps": 0.0}`, `rms_norm_eps is 0, want > 0`},
		{"bos outside the vocabulary", `{` + base + `, "bos_token_id": 99999}`, `special token id 99999`},
		{"eos outside the vocabulary", `{` + base + `, "eos_token_id": [2, 10]}`, `special token id 10`},
		{"negative bos", `{` + base + `, "bos_token_id": -1}`, `special token id -1`},
	}
	for _, c := range cases {
		_, err := ParseHFConfig("m/config.json", []byte(c.json))
		checkErr(t, "ParseHFConfig("+c.name+")", err, "", c.want)
		if err != nil && !strings.HasPrefix(err.Error(), "config: m/config.json: ") {
			t.Errorf("ParseHFConfig(%s): error %q does not name the file", c.name, err)
		}
	}
	_, err := ReadHFConfig(filepath.Join(t.TempDir(), "config.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadHFConfig(missing) = %v, want fs.ErrNotExist", err)
	}
	// A directory means its config.json.
	dir := t.TempDir()
	writeFile(t, dir, "config.json", []byte(`{`+base+`}`))
	if c, err := ReadHFConfig(dir); err != nil || c.HeadDim != 16 {
		t.Errorf("ReadHFConfig(dir) = %+v, %v", c, err)
	}
}

// An image-text Gemma 3's config.json (google/gemma-3-4b-it's layout, and
// the same model as transformers 5 writes it: rope_parameters keyed by
// layer type) reads its text model from text_config, with Gemma3TextConfig's
// defaults for the keys text_config leaves out (the 4B's real heads, head
// size, vocabulary, bases and attention scalar are those defaults) and the
// dtype and stop ids from the top level.
func TestReadHFConfigGemma3ImageText(t *testing.T) {
	text := HFConfig{
		ModelType: "gemma3_text", HiddenSize: 2560, IntermediateSize: 10240, NumHiddenLayers: 34,
		NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 256, RMSNormEps: 1e-6, RopeTheta: 1e6,
		RopeScaling: &RopeScaling{Type: "linear", Factor: 8}, MaxPositionEmbeddings: 131072, VocabSize: 262208,
		TieWordEmbeddings: true, BOSTokenID: ptr(2), EOSTokenIDs: []int{1, 106}, TorchDType: "bfloat16",
		HiddenAct: "silu", SlidingWindow: ptr(1024), HiddenActivation: "gelu_pytorch_tanh",
		QueryPreAttnScalar: ptr(256.0), RopeLocalBaseFreq: ptr(10000.0),
	}
	for _, file := range []string{"gemma-3-4b-it.json", "synthetic-gemma-3-4b-it-v5.json"} {
		got, err := ReadHFConfig(filepath.Join("testdata", "hfconfig", file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		want := text
		if strings.Contains(file, "v5") {
			want.SlidingRope = &RopeParameters{RopeTheta: 10000, Scaling: RopeScaling{Type: "default"}}
		}
		if got.ModelType != "gemma3" || !slices.Equal(got.Architectures, []string{"Gemma3ForConditionalGeneration"}) ||
			got.TextConfig == nil || !reflect.DeepEqual(*got.TextConfig, want) {
			g, _ := json.Marshal(got.TextConfig)
			w, _ := json.Marshal(&want)
			t.Errorf("%s: model_type %q, %v; text config\n%s\nwant\n%s", file, got.ModelType, got.Architectures, g, w)
		}
	}
	if _, err := ParseHFConfig("c.json", []byte(`{"model_type": "gemma3", "vision_config": {}}`)); err == nil || !strings.Contains(err.Error(), "has no text_config") {
		t.Errorf("gemma3 without text_config: %v", err)
	}
	if _, err := ParseHFConfig("c.json", []byte(`{"model_type": "gemma3", "text_config": {"num_hidden_layers": 0}}`)); err == nil || !strings.Contains(err.Error(), "text_config: num_hidden_layers is 0") {
		t.Errorf("gemma3 with 0 layers: %v", err)
	}
}

// transformers 5's rope_parameters: one dict, or one per layer type; a
// top-level value that contradicts it is refused.
func TestHFConfigRopeParameters(t *testing.T) {
	base := `"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 7`
	for _, tc := range []struct {
		json string
		want func(c *HFConfig) bool
		err  string
	}{
		{`"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}`,
			func(c *HFConfig) bool { return c.RopeTheta == 5e5 && c.RopeScaling == nil && c.SlidingRope == nil }, ""},
		{`"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}`,
			func(c *HFConfig) bool {
				return c.RopeTheta == 5e5 && reflect.DeepEqual(*c.RopeScaling, RopeScaling{Type: "linear", Factor: 2})
			}, ""},
		{`"rope_theta": 500000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}`,
			func(c *HFConfig) bool { return c.RopeTheta == 5e5 }, ""},
		{`"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}`,
			func(c *HFConfig) bool {
				return c.RopeTheta == 1e6 && reflect.DeepEqual(*c.RopeScaling, RopeScaling{Type: "linear", Factor: 8}) && *c.RopeLocalBaseFreq == 20000 &&
					c.SlidingRope.RopeTheta == 20000 && c.SlidingRope.Scaling.Type == "default"
			}, ""},
		{`"rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}`, nil,
			"rope_theta 10000 and rope_parameters' rope_theta 500000 disagree"},
		{`"rope_local_base_freq": 10000.0, "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}`, nil,
			"rope_local_base_freq 10000 and sliding_attention's rope_theta 20000 disagree"},
	} {
		c, err := ParseHFConfig("c.json", []byte("{"+base+", "+tc.json+"}"))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.json, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.json, err)
		case !tc.want(c):
			t.Errorf("%s: got %+v (scaling %+v, sliding %+v)", tc.json, c, c.RopeScaling, c.SlidingRope)
		}
	}
}
