package tokenizer

import (
	"fmt"
	"math"
	"reflect"
)

// GGUF metadata keys read by FromGGUFMetadata.
const (
	keyModel        = "tokenizer.ggml.model"
	keyTokens       = "tokenizer.ggml.tokens"
	keyScores       = "tokenizer.ggml.scores"
	keyTypes        = "tokenizer.ggml.token_type"
	keyMerges       = "tokenizer.ggml.merges"
	keyBOS          = "tokenizer.ggml.bos_token_id"
	keyEOS          = "tokenizer.ggml.eos_token_id"
	keyUNK          = "tokenizer.ggml.unknown_token_id"
	keyPAD          = "tokenizer.ggml.padding_token_id"
	keyAddBOS       = "tokenizer.ggml.add_bos_token"
	keySpacePrefix  = "tokenizer.ggml.add_space_prefix"
	keyPre          = "tokenizer.ggml.pre"
	keyChatTemplate = "tokenizer.chat_template"
	keyEOT          = "tokenizer.ggml.eot_token_id"
	keyEOM          = "tokenizer.ggml.eom_token_id"
)

// FromGGUFMetadata reads the tokenizer.* keys of a GGUF file's metadata.
// Arrays may be typed slices ([]string, []float32, []int32, …) or []any;
// ids may be any integer type. An id of -1 or 0xFFFFFFFF means none. Absent
// ids and add_bos_token take llama.cpp's defaults: for SentencePiece
// BOS 1, EOS 2, UNK 0 and AddBOS true; for byte-level BPE none and false.
func FromGGUFMetadata(kv map[string]any) (*Vocab, error) {
	v := &Vocab{BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	eot, eom := int32(-1), int32(-1)
	var err error
	if v.Model, err = ggufString(kv, keyModel, true); err != nil {
		return nil, err
	}
	switch v.Model {
	case ModelSPM:
		v.BOS, v.EOS, v.UNK, v.AddBOS = 1, 2, 0, true
	case ModelBPE:
	default:
		return nil, fmt.Errorf("tokenizer: gguf key %q: unsupported model %q (want %q or %q)", keyModel, v.Model, ModelSPM, ModelBPE)
	}
	if v.Tokens, err = ggufStrings(kv, keyTokens, true); err != nil {
		return nil, err
	}
	if v.Scores, err = ggufFloats(kv, keyScores); err != nil {
		return nil, err
	}
	if v.Types, err = ggufInts(kv, keyTypes); err != nil {
		return nil, err
	}
	if v.Merges, err = ggufStrings(kv, keyMerges, v.Model == ModelBPE); err != nil {
		return nil, err
	}
	for _, id := range []struct {
		key string
		dst *int32
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyUNK, &v.UNK}, {keyPAD, &v.PAD}, {keyEOT, &eot}, {keyEOM, &eom}} {
		x, ok := kv[id.key]
		if !ok {
			continue
		}
		n, ok := toInt64(x)
		if !ok {
			return nil, fmt.Errorf("tokenizer: gguf key %q has type %T, want an integer", id.key, x)
		}
		switch {
		case n == -1 || n == math.MaxUint32:
			*id.dst = -1
		case n < 0 || n >= int64(len(v.Tokens)):
			return nil, fmt.Errorf("tokenizer: gguf key %q: id %d out of range [0, %d)", id.key, n, len(v.Tokens))
		default:
			*id.dst = int32(n)
		}
	}
	if _, ok := kv[keyEOT]; !ok {
		// Older conversions name no end-of-turn id; llama.cpp then finds it
		// by its text (Gemma's <end_of_turn> is a user-defined piece).
		eot = findEndOfTurn(v.Tokens, v.Types)
	}
	for _, id := range []int32{eot, eom} {
		if id >= 0 && id != v.EOS {
			v.EndOfTurn = append(v.EndOfTurn, id)
		}
	}
	if err := ggufBool(kv, keyAddBOS, &v.AddBOS); err != nil {
		return nil, err
	}
	spacePrefix := true
	if err := ggufBool(kv, keySpacePrefix, &spacePrefix); err != nil {
		return nil, err
	}
	v.NoSpacePrefix = !spacePrefix
	if v.Pre, err = ggufString(kv, keyPre, false); err != nil {
		return nil, err
	}
	if v.ChatTemplate, err = ggufString(kv, keyChatTemplate, false); err != nil {
		return nil, err
	}
	if v.Model == ModelBPE && (v.Pre == "llama-bpe" || v.Pre == "llama3" || v.Pre == "llama-v3") {
		v.IgnoreMerges = true // llama.cpp sets ignore_merges for the Llama 3 pre-tokenizer
	}
	if v.Scores != nil && len(v.Scores) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer: gguf key %q has %d entries for %d tokens", keyScores, len(v.Scores), len(v.Tokens))
	}
	if v.Types != nil && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer: gguf key %q has %d entries for %d tokens", keyTypes, len(v.Types), len(v.Tokens))
	}
	return v, nil
}

func ggufString(kv map[string]any, key string, required bool) (string, error) {
	x, ok := kv[key]
	if !ok {
		if required {
			return "", fmt.Errorf("tokenizer: gguf key %q missing", key)
		}
		return "", nil
	}
	s, ok := x.(string)
	if !ok {
		return "", fmt.Errorf("tokenizer: gguf key %q has type %T, want string", key, x)
	}
	return s, nil
}

func ggufBool(kv map[string]any, key string, dst *bool) error {
	x, ok := kv[key]
	if !ok {
		return nil
	}
	b, ok := x.(bool)
	if !ok {
		return fmt.Errorf("tokenizer: gguf key %q has type %T, want bool", key, x)
	}
	*dst = b
	return nil
}

func ggufStrings(kv map[string]any, key string, required bool) ([]string, error) {
	x, ok := kv[key]
	if !ok {
		if required {
			return nil, fmt.Errorf("tokenizer: gguf key %q missing", key)
		}
		return nil, nil
	}
	switch s := x.(type) {
	case []string:
		return s, nil
	case []any:
		out := make([]string, len(s))
		for i, e := range s {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("tokenizer: gguf key %q: element %d has type %T, want string", key, i, e)
			}
			out[i] = str
		}
		return out, nil
	}
	return nil, fmt.Errorf("tokenizer: gguf key %q has type %T, want []string", key, x)
}

func ggufFloats(kv map[string]any, key string) ([]float32, error) {
	x, ok := kv[key]
	if !ok {
		return nil, nil
	}
	if f, ok := x.([]float32); ok {
		return f, nil
	}
	rv := reflect.ValueOf(x)
	if rv.Kind() == reflect.Slice {
		out := make([]float32, rv.Len())
		for i := range out {
			e := rv.Index(i)
			if e.Kind() == reflect.Interface {
				e = e.Elem()
			}
			switch e.Kind() {
			case reflect.Float32, reflect.Float64:
				out[i] = float32(e.Float())
			default:
				return nil, fmt.Errorf("tokenizer: gguf key %q: element %d has type %s, want a float", key, i, e.Kind())
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("tokenizer: gguf key %q has type %T, want []float32", key, x)
}

func ggufInts(kv map[string]any, key string) ([]int32, error) {
	x, ok := kv[key]
	if !ok {
		return nil, nil
	}
	if s, ok := x.([]int32); ok {
		return s, nil
	}
	rv := reflect.ValueOf(x)
	if rv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("tokenizer: gguf key %q has type %T, want []int32", key, x)
	}
	out := make([]int32, rv.Len())
	for i := range out {
		n, ok := toInt64(rv.Index(i).Interface())
		if !ok || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: gguf key %q: element %d (%v) is not an int32", key, i, rv.Index(i).Interface())
		}
		out[i] = int32(n)
	}
	return out, nil
}

// toInt64 converts any Go integer type; uint64 values above MaxInt64 fail.
func toInt64(x any) (int64, bool) {
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return 0, false
		}
		return int64(u), true
	}
	return 0, false
}

// endOfTurnTexts are the end-of-turn markers of the chat formats, as
// llama.cpp looks them up when the metadata names no eot_token_id.
var endOfTurnTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<|end_of_turn|>"}

// findEndOfTurn is the id of the first endOfTurnTexts entry the vocabulary
// has as a control or user-defined token, or -1.
func findEndOfTurn(tokens []string, types []int32) int32 {
	for _, text := range endOfTurnTexts {
		for id, tok := range tokens {
			if tok == text && (types == nil || types[id] == TypeControl || types[id] == TypeUserDefined) {
				return int32(id)
			}
		}
	}
	return -1
}
