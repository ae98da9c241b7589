package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bpeGolden is one entry of testdata/bpe_golden.json: transformers.js's
// encoding (add_special_tokens=false, added-token text parsed) of text with
// the full tokenizer.json, and its decoding with special tokens skipped.
type bpeGolden struct {
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

func readBPEGolden(t testing.TB) map[string][]bpeGolden {
	t.Helper()
	data, err := os.ReadFile("testdata/bpe_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g map[string][]bpeGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func loadHF(t testing.TB, name string) (*Vocab, Tokenizer) {
	t.Helper()
	v, err := LoadHF(filepath.Join("testdata", "hf", name))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return v, tok
}

func TestHFGolden(t *testing.T) {
	golden := readBPEGolden(t)
	for _, name := range []string{"qwen3", "llama3", "mistral"} {
		t.Run(name, func(t *testing.T) {
			cases := golden[name]
			if len(cases) < 50 {
				t.Fatalf("%d golden cases", len(cases))
			}
			v, tok := loadHF(t, name)
			for i, c := range cases {
				got := tok.EncodeSpecial(c.Text, false)
				if idsString(got) != idsString(c.IDs) {
					t.Errorf("case %d: EncodeSpecial(%q) =\n%v, want\n%v", i, c.Text, got, c.IDs)
					continue
				}
				if !hasAddedToken(v, c.Text) {
					if plain := tok.Encode(c.Text, false); idsString(plain) != idsString(got) {
						t.Errorf("case %d: Encode(%q) = %v, differs from EncodeSpecial %v", i, c.Text, plain, got)
					}
				}
				if dec := tok.Decode(got); dec != c.Decoded {
					t.Errorf("case %d: Decode(%v) = %q, want %q", i, got, dec, c.Decoded)
				}
			}
		})
	}
}

// hasAddedToken reports whether text contains a control or user-defined
// token's text.
func hasAddedToken(v *Vocab, text string) bool {
	for i, p := range v.Tokens {
		if (v.Types[i] == TypeControl || v.Types[i] == TypeUserDefined) && p != "" && strings.Contains(text, p) {
			return true
		}
	}
	return false
}

func TestLoadHF(t *testing.T) {
	for _, c := range []struct {
		name          string
		model         string
		bos, eos, unk int32
		addBOS        bool
		ignoreMerges  bool
		template      string
	}{
		{"qwen3", ModelBPE, -1, 151645, -1, false, false, TemplateChatML},
		{"llama3", ModelBPE, 128000, 128001, -1, false, true, TemplateLlama3},
		{"mistral", ModelSPM, 1, 2, 0, true, false, ""},
	} {
		v, tok := loadHF(t, c.name)
		if v.Model != c.model || v.BOS != c.bos || v.EOS != c.eos || v.UNK != c.unk || v.AddBOS != c.addBOS || v.IgnoreMerges != c.ignoreMerges {
			t.Errorf("%s: model %q bos %d eos %d unk %d addBOS %v ignoreMerges %v", c.name, v.Model, v.BOS, v.EOS, v.UNK, v.AddBOS, v.IgnoreMerges)
		}
		if got := DetectTemplate(v.ChatTemplate); got != c.template {
			t.Errorf("%s: DetectTemplate = %q, want %q", c.name, got, c.template)
		}
		if c.eos >= 0 && !tok.IsControl(c.eos) {
			t.Errorf("%s: eos %d is not control", c.name, c.eos)
		}
	}
	if _, err := LoadHF("testdata/none"); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") {
		t.Errorf("missing dir: err = %v", err)
	}
}

// TestHFSpecialParsing checks that Encode leaves control-token text alone
// while EncodeSpecial turns it into the token.
func TestHFSpecialParsing(t *testing.T) {
	_, tok := loadHF(t, "qwen3")
	const s = "<|im_start|>user\nhi<|im_end|>"
	special := tok.EncodeSpecial(s, false)
	if special[0] != 151644 || special[len(special)-1] != 151645 {
		t.Errorf("EncodeSpecial(%q) = %v", s, special)
	}
	plain := tok.Encode(s, false)
	for _, id := range plain {
		if tok.IsControl(id) {
			t.Errorf("Encode(%q) = %v contains control token %d", s, plain, id)
		}
	}
	if got := tok.Decode(plain); got != s {
		t.Errorf("Decode(Encode(%q)) = %q", s, got)
	}
}

func TestParseHFErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{`, "unexpected end"},
		{`{"model":{"type":"Unigram"}}`, `model type "Unigram" not supported`},
		{`{"model":{"type":"BPE","vocab":{"a":0}}}`, "neither a ByteLevel nor"},
		{`{"pre_tokenizer":{"type":"Whitespace"},"normalizer":{"type":"Prepend","prepend":"▁"},"model":{"type":"BPE","vocab":{"a":0}}}`, ""},
		{`{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Punctuation"},{"type":"ByteLevel"}]},"model":{"type":"BPE","vocab":{"a":0}}}`, `pre-tokenizer "Punctuation" not supported`},
		{`{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":-1}}}`, "negative id"},
		{`{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[["a"]]}}`, "1 parts, want 2"},
	} {
		_, err := parseHFTokenizer([]byte(c.json))
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.json, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.json, err, c.want)
		}
	}
}

func BenchmarkBPEEncode(b *testing.B) {
	_, tok := loadHF(b, "llama3")
	s := strings.Repeat("Hello, y'all! How are you 😁 ?我想在apple工作1314151天～ ", 100)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s, false)
	}
}

// The chat template is found as transformers finds it:
// chat_template.jinja over tokenizer_config.json's chat_template (its
// test_chat_template_file_priority), that over chat_template.json; and
// ReadChatTemplate, for a checkpoint without tokenizer.json, finds the same.
func TestHFChatTemplateFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "hf", "qwen3", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	load := func() string {
		v, err := LoadHF(dir)
		if err != nil {
			t.Fatal(err)
		}
		return v.ChatTemplate
	}
	if got := load(); got != "" {
		t.Errorf("no template files: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "chat_template.json"), []byte(`{"chat_template": "{{ json }}"}`), 0o644)
	if got := load(); got != "{{ json }}" {
		t.Errorf("chat_template.json: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ jinja }}"), 0o644)
	if got := load(); got != "{{ jinja }}" {
		t.Errorf("chat_template.jinja beside chat_template.json: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "{{ config }}"}`), 0o644)
	if got := load(); got != "{{ jinja }}" {
		t.Errorf("chat_template.jinja beside tokenizer_config.json's: %q", got)
	}
	os.Remove(filepath.Join(dir, "chat_template.jinja"))
	if got := load(); got != "{{ config }}" {
		t.Errorf("tokenizer_config.json's beside chat_template.json: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": [{"name": "tool_use", "template": "{{ tools }}"}, {"name": "default", "template": "{{ default }}"}]}`), 0o644)
	if got := load(); got != "{{ default }}" {
		t.Errorf("tokenizer_config.json's named templates: %q", got)
	}
	// Without tokenizer.json (a checkpoint with tokenizer.model alone).
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	for _, step := range []struct{ write, remove, want string }{
		{"", "", "{{ default }}"},
		{"chat_template.jinja", "", "{{ jinja }}"},
		{"", "chat_template.jinja", "{{ default }}"},
		{"", "tokenizer_config.json", "{{ json }}"},
		{"", "chat_template.json", ""},
	} {
		if step.write != "" {
			os.WriteFile(filepath.Join(dir, step.write), []byte("{{ jinja }}"), 0o644)
		}
		if step.remove != "" {
			os.Remove(filepath.Join(dir, step.remove))
		}
		if got, err := ReadChatTemplate(dir); err != nil || got != step.want {
			t.Errorf("ReadChatTemplate (+%q -%q) = %q, %v; want %q", step.write, step.remove, got, err, step.want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), mustRead(t, filepath.Join("testdata", "hf", "qwen3", "tokenizer.json")), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "chat_template.json"), []byte(`{"chat_template": 3}`), 0o644)
	if _, err := LoadHF(dir); err == nil || !strings.Contains(err.Error(), "chat_template.json") {
		t.Errorf("a chat_template.json without a string: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
