package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/dlclark/regexp2"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
)

// LoadHF reads a Hugging Face tokenizer directory: tokenizer.json, plus
// tokenizer_config.json (bos_token, eos_token, add_bos_token) and the chat
// template as ReadChatTemplate finds it.
//
// Two tokenizer.json forms are understood, both with model.type "BPE":
//   - SentencePiece-style (Llama 2, Mistral): normalizer Prepend("▁") and
//     Replace(" ", "▁"), or a Metaspace pre-tokenizer; byte_fallback. The
//     result is Model "llama" merged by rank.
//   - Byte-level (Llama 3, Qwen2/3): a ByteLevel pre-tokenizer, optionally
//     after Split regexes. The result is Model "gpt2" with the regexes in
//     Pretokenizers.
//
// added_tokens become control tokens when "special" and user-defined tokens
// otherwise. Merges may be "a b" strings or ["a", "b"] pairs. A NFC
// normalizer (Qwen) is not applied: text is tokenized as given.
func LoadHF(dir string) (*Vocab, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := formats.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	v, err := parseHFTokenizer(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := formats.ReadFile(cfgPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("tokenizer: %w", err)
	default:
		if err := applyHFConfig(v, cfg); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
		}
	}
	if v.ChatTemplate, err = chooseChatTemplate(dir, v.ChatTemplate); err != nil {
		return nil, err
	}
	return v, nil
}

// ReadChatTemplate returns the chat template of the HF checkpoint in dir
// as transformers finds it: chat_template.jinja, which wins over
// tokenizer_config.json's chat_template (the tokenizer's from_pretrained
// reads the file over the config's entry: transformers'
// test_chat_template_file_priority), else tokenizer_config.json's, else
// chat_template.json ({"chat_template": "..."}, the processor's file, where
// image-text repos such as Gemma 3's keep it too). It is "" when none has
// one. LoadHF reads the template so; a checkpoint with only
// tokenizer.model reads it here.
func ReadChatTemplate(dir string) (string, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := formats.ReadFile(path)
	fromConfig := ""
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("tokenizer: %w", err)
	default:
		var c struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			return "", fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		if fromConfig, err = parseChatTemplate(c.ChatTemplate); err != nil {
			return "", fmt.Errorf("tokenizer: %s: %w", path, err)
		}
	}
	return chooseChatTemplate(dir, fromConfig)
}

// chooseChatTemplate is ReadChatTemplate's order, given
// tokenizer_config.json's template fromConfig ("" if none).
func chooseChatTemplate(dir, fromConfig string) (string, error) {
	if t, err := formats.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(t), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	if fromConfig != "" {
		return fromConfig, nil
	}
	path := filepath.Join(dir, "chat_template.json")
	data, err := formats.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	var c struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return c.ChatTemplate, nil
}

type hfFile struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    *hfNode `json:"normalizer"`
	PreTokenizer  *hfNode `json:"pre_tokenizer"`
	PostProcessor *hfNode `json:"post_processor"`
	Model         struct {
		Type         string           `json:"type"`
		Vocab        map[string]int32 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		ByteFallback bool             `json:"byte_fallback"`
		IgnoreMerges bool             `json:"ignore_merges"`
		UnkToken     *string          `json:"unk_token"`
	} `json:"model"`
}

// hfNode is any normalizer, pre-tokenizer or post-processor; only the fields
// we read are declared.
type hfNode struct {
	Type          string   `json:"type"`
	Normalizers   []hfNode `json:"normalizers"`
	Pretokenizers []hfNode `json:"pretokenizers"`
	Processors    []hfNode `json:"processors"`
	Pattern       struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Content          string  `json:"content"`
	Prepend          string  `json:"prepend"`
	Behavior         string  `json:"behavior"`
	Invert           bool    `json:"invert"`
	UseRegex         *bool   `json:"use_regex"`
	AddPrefixSpace   *bool   `json:"add_prefix_space"`
	PrependScheme    string  `json:"prepend_scheme"`
	IndividualDigits bool    `json:"individual_digits"`
	Single           []hfRef `json:"single"`
}

type hfRef struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
}

// flatten lists n and its Sequence members depth first.
func (n *hfNode) flatten() []*hfNode {
	if n == nil {
		return nil
	}
	out := []*hfNode{n}
	for _, kids := range [][]hfNode{n.Normalizers, n.Pretokenizers, n.Processors} {
		for i := range kids {
			out = append(out, kids[i].flatten()...)
		}
	}
	return out
}

func parseHFTokenizer(data []byte) (*Vocab, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("model type %q not supported (only BPE)", f.Model.Type)
	}
	v := &Vocab{BOS: -1, EOS: -1, UNK: -1, PAD: -1, IgnoreMerges: f.Model.IgnoreMerges}

	// Pick the algorithm from the pipeline around the model.
	var byteLevel, spm bool
	for _, n := range append(f.PreTokenizer.flatten(), f.Normalizer.flatten()...) {
		switch n.Type {
		case "ByteLevel":
			byteLevel = true
		case "Metaspace":
			spm = true
			if n.PrependScheme == "never" || n.AddPrefixSpace != nil && !*n.AddPrefixSpace {
				v.NoSpacePrefix = true
			}
		case "Prepend":
			spm = spm || n.Prepend == spaceSymbol
		case "Replace":
			spm = spm || n.Content == spaceSymbol
		}
	}
	switch {
	case byteLevel:
		v.Model = ModelBPE
		for _, n := range f.PreTokenizer.flatten() {
			switch n.Type {
			case "Sequence":
			case "Split":
				if n.Invert || n.Behavior != "Isolated" {
					return nil, fmt.Errorf("pre-tokenizer Split with behavior %q invert %v not supported", n.Behavior, n.Invert)
				}
				switch {
				case n.Pattern.Regex != nil:
					v.Pretokenizers = append(v.Pretokenizers, *n.Pattern.Regex)
				case n.Pattern.String != nil:
					v.Pretokenizers = append(v.Pretokenizers, regexp2.Escape(*n.Pattern.String))
				default:
					return nil, errors.New("pre-tokenizer Split without a pattern")
				}
			case "Digits":
				if n.IndividualDigits {
					v.Pretokenizers = append(v.Pretokenizers, `\p{N}`)
				} else {
					v.Pretokenizers = append(v.Pretokenizers, `\p{N}+`)
				}
			case "ByteLevel":
				if n.AddPrefixSpace != nil && *n.AddPrefixSpace {
					return nil, errors.New("pre-tokenizer ByteLevel with add_prefix_space not supported")
				}
				if n.UseRegex == nil || *n.UseRegex {
					v.Pretokenizers = append(v.Pretokenizers, regexGPT2)
				}
			default:
				return nil, fmt.Errorf("pre-tokenizer %q not supported", n.Type)
			}
		}
		if len(v.Pretokenizers) == 0 {
			v.Pretokenizers = []string{`[\s\S]+`} // no split: the whole text is one piece
		}
	case spm:
		v.Model = ModelSPM
	default:
		return nil, errors.New("neither a ByteLevel nor a SentencePiece-style (▁) BPE tokenizer")
	}

	// Tokens by id: the model vocabulary, then added tokens over it.
	n := 0
	for _, id := range f.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: negative id %d", id)
		}
		n = max(n, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added_tokens: negative id %d", a.ID)
		}
		n = max(n, int(a.ID)+1)
	}
	if n > 1<<24 {
		return nil, fmt.Errorf("vocabulary of %d ids is implausibly large", n)
	}
	v.Tokens = make([]string, n)
	v.Types = make([]int32, n)
	for i := range v.Types {
		v.Types[i] = TypeUnused // ids nobody defines
	}
	for p, id := range f.Model.Vocab {
		v.Tokens[id] = p
		v.Types[id] = TypeNormal
		if _, ok := parseBytePiece(p); ok && v.Model == ModelSPM && f.Model.ByteFallback {
			v.Types[id] = TypeByte
		}
	}
	if u := f.Model.UnkToken; u != nil {
		if id, ok := f.Model.Vocab[*u]; ok {
			v.UNK = id
			v.Types[id] = TypeUnknown
		}
	}
	for _, a := range f.AddedTokens {
		v.Tokens[a.ID] = a.Content
		switch {
		case a.ID == v.UNK:
		case a.Special:
			v.Types[a.ID] = TypeControl
		default:
			v.Types[a.ID] = TypeUserDefined
		}
	}

	merges, err := parseHFMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}
	v.Merges = merges

	// A post-processor that puts a special token before the text adds BOS.
	for _, p := range f.PostProcessor.flatten() {
		if p.Type != "TemplateProcessing" || len(p.Single) == 0 || p.Single[0].SpecialToken == nil {
			continue
		}
		if id, ok := tokenID(v, p.Single[0].SpecialToken.ID); ok {
			v.AddBOS = true
			v.BOS = id
		}
	}
	return v, nil
}

// parseHFMerges accepts ["a b", …] and [["a", "b"], …].
func parseHFMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model.merges: neither strings nor pairs: %w", err)
	}
	s = make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("model.merges[%d]: %d parts, want 2", i, len(p))
		}
		s[i] = p[0] + " " + p[1]
	}
	return s, nil
}

// tokenID finds the id of a token's text (the lowest id if repeated).
func tokenID(v *Vocab, text string) (int32, bool) {
	for i, t := range v.Tokens {
		if t == text && text != "" {
			return int32(i), true
		}
	}
	return -1, false
}

// applyHFConfig reads tokenizer_config.json.
func applyHFConfig(v *Vocab, data []byte) error {
	var c struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		PAD          json.RawMessage `json:"pad_token"`
		AddBOS       *bool           `json:"add_bos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	for _, t := range []struct {
		key string
		raw json.RawMessage
		dst *int32
	}{{"bos_token", c.BOS, &v.BOS}, {"eos_token", c.EOS, &v.EOS}, {"pad_token", c.PAD, &v.PAD}} {
		text, ok, err := hfTokenText(t.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", t.key, err)
		}
		if !ok {
			continue
		}
		id, found := tokenID(v, text)
		if !found {
			return fmt.Errorf("%s %q is not in the vocabulary", t.key, text)
		}
		*t.dst = id
	}
	if c.AddBOS != nil {
		v.AddBOS = *c.AddBOS
	}
	var err error
	if v.ChatTemplate, err = parseChatTemplate(c.ChatTemplate); err != nil {
		return err
	}
	return nil
}

// parseChatTemplate reads tokenizer_config.json's chat_template: a string,
// or a list of named templates, of which it takes "default", else the
// first. Absent or null is "".
func parseChatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template: neither a string nor a list of templates: %w", err)
	}
	for i, t := range named {
		if i == 0 || t.Name == "default" {
			s = t.Template
		}
		if t.Name == "default" {
			break
		}
	}
	return s, nil
}

// hfTokenText reads a token given as "text", {"content": "text", …} or null.
func hfTokenText(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s != "", nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", false, fmt.Errorf("neither a string nor an object with content: %w", err)
	}
	return o.Content, o.Content != "", nil
}
