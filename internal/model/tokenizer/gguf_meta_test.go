package tokenizer

import (
	"math"
	"strings"
	"testing"
)

// ggufKV is a minimal SentencePiece vocabulary as a GGUF reader returns it.
func ggufKV() map[string]any {
	return map[string]any{
		keyModel:  "llama",
		keyTokens: []string{"<unk>", "<s>", "</s>", "▁", "a", "▁a"},
		keyScores: []float32{0, 0, 0, -1, -2, -3},
		keyTypes:  []int32{2, 3, 3, 1, 1, 1},
		keyBOS:    uint32(1),
		keyEOS:    uint32(2),
		keyUNK:    uint32(0),
		keyPAD:    uint32(math.MaxUint32),
	}
}

func TestFromGGUFMetadata(t *testing.T) {
	v, err := FromGGUFMetadata(ggufKV())
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != ModelSPM || v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || v.PAD != -1 || !v.AddBOS || len(v.Tokens) != 6 {
		t.Fatalf("vocab %+v", v)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsString(tok.Encode("a", true)); got != "[1 5]" {
		t.Errorf("Encode = %s", got)
	}

	// Other integer types and untyped arrays, as other readers produce.
	kv := ggufKV()
	kv[keyTokens] = []any{"<unk>", "<s>", "</s>", "▁", "a", "▁a"}
	kv[keyScores] = []float64{0, 0, 0, -1, -2, -3}
	kv[keyTypes] = []any{int32(2), uint8(3), int64(3), uint32(1), 1, int16(1)}
	kv[keyBOS] = int64(1)
	kv[keyEOS] = uint8(2)
	kv[keyPAD] = int32(-1)
	kv[keyAddBOS] = false
	kv[keySpacePrefix] = false
	kv[keyChatTemplate] = "{{ '<|im_start|>' }}"
	v, err = FromGGUFMetadata(kv)
	if err != nil {
		t.Fatal(err)
	}
	if v.Tokens[4] != "a" || v.Scores[5] != -3 || v.Types[1] != TypeControl || v.BOS != 1 || v.EOS != 2 || v.PAD != -1 || v.AddBOS || !v.NoSpacePrefix || DetectTemplate(v.ChatTemplate) != TemplateChatML {
		t.Fatalf("vocab %+v", v)
	}
	tok, _ = New(v)
	if got := idsString(tok.Encode("a", false)); got != "[4]" {
		t.Errorf("without space prefix: Encode = %s", got)
	}

	// Byte-level BPE: merges required, llama-bpe turns on ignore_merges.
	bpeKV := map[string]any{
		keyModel:  "gpt2",
		keyTokens: []string{"a", "b", "ab", "<|eot|>"},
		keyTypes:  []int32{1, 1, 1, 3},
		keyMerges: []string{"a b"},
		keyPre:    "llama-bpe",
		keyEOS:    uint32(3),
	}
	v, err = FromGGUFMetadata(bpeKV)
	if err != nil {
		t.Fatal(err)
	}
	if v.BOS != -1 || v.EOS != 3 || v.AddBOS || !v.IgnoreMerges {
		t.Fatalf("bpe vocab %+v", v)
	}
	tok, err = New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsString(tok.EncodeSpecial("ab<|eot|>", false)); got != "[2 3]" {
		t.Errorf("bpe EncodeSpecial = %s", got)
	}
}

func TestFromGGUFMetadataErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no model", func(kv map[string]any) { delete(kv, keyModel) }, `"tokenizer.ggml.model" missing`},
		{"bad model", func(kv map[string]any) { kv[keyModel] = "t5" }, `unsupported model "t5"`},
		{"model type", func(kv map[string]any) { kv[keyModel] = 7 }, `"tokenizer.ggml.model" has type int, want string`},
		{"no tokens", func(kv map[string]any) { delete(kv, keyTokens) }, `"tokenizer.ggml.tokens" missing`},
		{"tokens type", func(kv map[string]any) { kv[keyTokens] = []int32{1} }, `"tokenizer.ggml.tokens" has type []int32, want []string`},
		{"token elem", func(kv map[string]any) { kv[keyTokens] = []any{"a", 1} }, "element 1 has type int"},
		{"scores type", func(kv map[string]any) { kv[keyScores] = "x" }, `"tokenizer.ggml.scores" has type string`},
		{"scores len", func(kv map[string]any) { kv[keyScores] = []float32{1} }, "has 1 entries for 6 tokens"},
		{"types elem", func(kv map[string]any) { kv[keyTypes] = []int64{1, 1, 1, 1, 1, 1 << 40} }, "element 5"},
		{"bos type", func(kv map[string]any) { kv[keyBOS] = "1" }, `"tokenizer.ggml.bos_token_id" has type string, want an integer`},
		{"bos range", func(kv map[string]any) { kv[keyBOS] = uint32(6) }, "id 6 out of range [0, 6)"},
		{"add_bos type", func(kv map[string]any) { kv[keyAddBOS] = 1 }, `"tokenizer.ggml.add_bos_token" has type int, want bool`},
		{"bpe merges", func(kv map[string]any) { kv[keyModel] = "gpt2" }, `"tokenizer.ggml.merges" missing`},
	} {
		kv := ggufKV()
		c.edit(kv)
		_, err := FromGGUFMetadata(kv)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		v    *Vocab
		want string
	}{
		{"nil", nil, "nil vocab"},
		{"empty", &Vocab{Model: ModelSPM}, "empty vocabulary"},
		{"model", &Vocab{Model: "wordpiece", Tokens: []string{"a"}, BOS: -1, EOS: -1, UNK: -1, PAD: -1}, `unsupported model "wordpiece"`},
		{"no scores", &Vocab{Model: ModelSPM, Tokens: []string{"a"}, BOS: -1, EOS: -1, UNK: -1, PAD: -1}, "neither scores nor merges"},
		{"types len", &Vocab{Model: ModelSPM, Tokens: []string{"a"}, Types: []int32{1, 1}, BOS: -1, EOS: -1, UNK: -1, PAD: -1}, "2 token types for 1 tokens"},
		{"eos range", &Vocab{Model: ModelSPM, Tokens: []string{"a"}, Scores: []float32{0}, BOS: -1, EOS: 1, UNK: -1, PAD: -1}, "eos id 1 out of range"},
		{"bad merge", &Vocab{Model: ModelBPE, Tokens: []string{"a"}, Merges: []string{"ab"}, BOS: -1, EOS: -1, UNK: -1, PAD: -1}, `merge 0 "ab"`},
		{"bad pre", &Vocab{Model: ModelBPE, Tokens: []string{"a"}, Merges: []string{"a a"}, Pre: "falcon", BOS: -1, EOS: -1, UNK: -1, PAD: -1}, `unsupported pre-tokenizer "falcon"`},
		{"bad regex", &Vocab{Model: ModelBPE, Tokens: []string{"a"}, Merges: []string{"a a"}, Pretokenizers: []string{"("}, BOS: -1, EOS: -1, UNK: -1, PAD: -1}, "pre-tokenizer regex"},
	} {
		_, err := New(c.v)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// tokenizer.ggml.eot_token_id and eom_token_id are end-of-turn ids; one
// equal to EOS, or out of range, is not.
func TestGGUFEndOfTurn(t *testing.T) {
	kv := ggufKV()
	kv[keyEOT] = uint32(4)
	kv[keyEOM] = uint32(2)
	v, err := FromGGUFMetadata(kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.EndOfTurn) != 1 || v.EndOfTurn[0] != 4 {
		t.Errorf("EndOfTurn = %v, want [4]", v.EndOfTurn)
	}
	kv[keyEOT] = uint32(6)
	if _, err := FromGGUFMetadata(kv); err == nil || !strings.Contains(err.Error(), keyEOT) {
		t.Errorf("eot id 6 of 6 tokens: %v", err)
	}

	// Without eot_token_id, a user-defined or control <end_of_turn> (Gemma)
	// is found by its text; a normal piece spelling it is not.
	kv = ggufKV()
	kv[keyTokens] = []string{"<unk>", "<s>", "</s>", "▁", "a", "<end_of_turn>"}
	for typ, want := range map[int32]int{TypeUserDefined: 1, TypeControl: 1, TypeNormal: 0} {
		kv[keyTypes] = []int32{2, 3, 3, 1, 1, typ}
		v, err := FromGGUFMetadata(kv)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.EndOfTurn) != want || want == 1 && v.EndOfTurn[0] != 5 {
			t.Errorf("<end_of_turn> of type %d: EndOfTurn = %v", typ, v.EndOfTurn)
		}
	}
}
