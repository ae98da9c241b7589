package llama

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// configOf parses a config.json given as a map and reads its Config.
func configOf(t *testing.T, cfg map[string]any) (Config, error) {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := formats.ParseHFConfig("config.json", b)
	if err != nil {
		return Config{}, err
	}
	return configFromHF(h)
}

// ropeV5Base is a tiny config.json of arch without its RoPE keys.
func ropeV5Base(arch string) map[string]any {
	c := map[string]any{
		"model_type": arch, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 64,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
	}
	switch arch {
	case "mistral":
		c["sliding_window"] = 8
	case "gemma2":
		c["sliding_window"], c["query_pre_attn_scalar"] = 8, 8
		c["attn_logit_softcapping"], c["final_logit_softcapping"] = 50.0, 30.0
	case "gemma3_text":
		c["sliding_window"], c["query_pre_attn_scalar"], c["sliding_window_pattern"] = 8, 8, 6
	}
	return c
}

// with returns a copy of m with kv set.
func with(m map[string]any, kv map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range m {
		c[k] = v
	}
	for k, v := range kv {
		c[k] = v
	}
	return c
}

// transformers 5 writes rope_theta and rope_scaling (and Phi-3's
// partial_rotary_factor) into rope_parameters: one dict for most models
// (modeling_rope_utils.py, standardize_rope_params), one per layer type
// for Gemma 3 (Gemma3TextConfig.convert_rope_params_to_dict). For every
// architecture here each v5 form reads as the same Config as the older
// keys; scaling rope_parameters does not name, or gives a sliding layer, is
// refused by name.
func TestRopeParametersV5(t *testing.T) {
	factors := []float64{1, 1.5, 2}
	long := []float64{1, 4, 16}
	cases := []struct {
		name     string
		arch     string
		old, new map[string]any
	}{
		{"llama3", "llama",
			map[string]any{"rope_theta": 500000.0, "rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0,
				"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
				"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 512}}},
		{"llama linear", "llama",
			map[string]any{"rope_theta": 10000.0, "rope_scaling": map[string]any{"type": "linear", "factor": 2.0}},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}}},
		{"llama default", "llama",
			map[string]any{"rope_theta": 20000.0},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 20000.0}}},
		{"mistral", "mistral",
			map[string]any{"rope_theta": 1e6},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}},
		{"qwen2", "qwen2",
			map[string]any{"rope_theta": 1e6},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}},
		{"qwen3", "qwen3",
			map[string]any{"rope_theta": 1e6},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e6}}},
		{"gemma2", "gemma2",
			map[string]any{"rope_theta": 10000.0},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}},
		{"gemma3", "gemma3_text",
			map[string]any{"rope_theta": 1e6, "rope_local_base_freq": 20000.0, "rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0}},
			map[string]any{"rope_parameters": map[string]any{
				"full_attention":    map[string]any{"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
				"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 20000.0}}}},
		{"gemma3 unscaled", "gemma3_text",
			map[string]any{"rope_theta": 1e6, "rope_local_base_freq": 10000.0},
			map[string]any{"rope_parameters": map[string]any{
				"full_attention":    map[string]any{"rope_type": "default", "rope_theta": 1e6},
				"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}}},
		{"phi3 longrope", "phi3",
			map[string]any{"rope_theta": 10000.0, "partial_rotary_factor": 0.75, "original_max_position_embeddings": 512,
				"rope_scaling": map[string]any{"type": "longrope", "short_factor": factors, "long_factor": long}},
			map[string]any{"rope_parameters": map[string]any{"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
				"original_max_position_embeddings": 512, "short_factor": factors, "long_factor": long}}},
		{"phi3 longrope, original at the top", "phi3",
			map[string]any{"rope_theta": 10000.0, "original_max_position_embeddings": 512,
				"rope_scaling": map[string]any{"type": "longrope", "short_factor": []float64{1, 2, 3, 4}, "long_factor": []float64{5, 6, 7, 8}}},
			map[string]any{"original_max_position_embeddings": 512, "rope_parameters": map[string]any{"rope_type": "longrope", "rope_theta": 10000.0,
				"original_max_position_embeddings": 512, "short_factor": []float64{1, 2, 3, 4}, "long_factor": []float64{5, 6, 7, 8}}}},
	}
	for _, tc := range cases {
		base := ropeV5Base(tc.arch)
		want, err := configOf(t, with(base, tc.old))
		if err != nil {
			t.Fatalf("%s, older keys: %v", tc.name, err)
		}
		got, err := configOf(t, with(base, tc.new))
		if err != nil {
			t.Errorf("%s, rope_parameters: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: rope_parameters gives\n%+v\nthe older keys\n%+v", tc.name, got, want)
		}
	}
	// A Gemma 3 whose rope_parameters states only rope_type takes
	// Gemma3TextConfig's bases, as one without any RoPE keys.
	bare := ropeV5Base("gemma3_text")
	want, err := configOf(t, bare)
	if err != nil {
		t.Fatal(err)
	}
	if want.RopeTheta != 1e6 || want.RopeLocalTheta != 10000 {
		t.Errorf("gemma3_text without RoPE keys: bases %g and %g, want Gemma3TextConfig's 1e6 and 1e4", want.RopeTheta, want.RopeLocalTheta)
	}
	got, err := configOf(t, with(bare, map[string]any{"rope_parameters": map[string]any{
		"full_attention": map[string]any{"rope_type": "default"}, "sliding_attention": map[string]any{"rope_type": "default"}}}))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("gemma3_text with rope_parameters of rope_type alone: %v\n%+v\nwant\n%+v", err, got, want)
	}

	for _, tc := range []struct {
		arch string
		rope map[string]any
		want string
	}{
		{"llama", map[string]any{"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}, `rope_type "yarn" is not supported`},
		{"gemma3_text", map[string]any{"full_attention": map[string]any{"rope_type": "dynamic", "factor": 4.0}}, `rope_type "dynamic" is not supported`},
		{"gemma3_text", map[string]any{"full_attention": map[string]any{"rope_type": "default"},
			"sliding_attention": map[string]any{"rope_type": "linear", "factor": 2.0}}, `rope_parameters["sliding_attention"] rope_type "linear" is not supported`},
		{"mistral", map[string]any{"full_attention": map[string]any{"rope_type": "default", "rope_theta": 1e6},
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 1e4}}, "only gemma3 has a RoPE of its own for sliding layers"},
	} {
		_, err := configOf(t, with(ropeV5Base(tc.arch), map[string]any{"rope_parameters": tc.rope}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v, want one containing %q", tc.arch, tc.rope, err, tc.want)
		}
	}
}
