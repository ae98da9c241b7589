package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Tokenizer converts between text and token ids.
type Tokenizer interface {
	// Encode tokenizes text. Control-token text such as "<s>" is not parsed
	// (llama.cpp parse_special=false); user-defined tokens are. With addBOS
	// the BOS id, if the vocabulary has one, comes first.
	Encode(text string, addBOS bool) []int32
	// EncodeSpecial is Encode that also turns control-token text (the
	// vocabulary's "<s>", "<|im_start|>", …) into those tokens. Use it for
	// prompts rendered from a chat template.
	EncodeSpecial(text string, addBOS bool) []int32
	// EncodeParts encodes a chat prompt (RenderChatParts): the control-token
	// text of Special parts becomes those tokens, the other parts' text is
	// plain, as Encode's. Text on both sides of a part boundary is encoded
	// as one run, so the ids are EncodeSpecial's of the joined text wherever
	// the content spells no control token.
	EncodeParts(parts []Part, addBOS bool) []int32
	// Decode turns ids into text. Control tokens print nothing.
	// SentencePiece vocabularies drop the dummy-prefix space of the first
	// piece, so Decode(Encode(s, false)) == s for valid UTF-8 s.
	Decode(ids []int32) string
	// Piece is the raw vocabulary entry of id ("▁Hello", "<0x0A>", "Ġworld"),
	// or "" if id is out of range.
	Piece(id int32) string
	// VocabSize is the number of ids.
	VocabSize() int
	// BOS and EOS are the begin/end-of-sequence ids, -1 if none.
	BOS() int32
	EOS() int32
	// IsControl reports whether id is a control token (BOS, EOS, chat
	// markers), which Decode does not print.
	IsControl(id int32) bool
}

// Token types, as sentencepiece and GGUF tokenizer.ggml.token_type number them.
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Model names in [Vocab.Model].
const (
	ModelSPM = "llama" // SentencePiece BPE
	ModelBPE = "gpt2"  // byte-level BPE
)

// Vocab is the plain data every tokenizer source is turned into.
type Vocab struct {
	Model  string    // ModelSPM ("llama") or ModelBPE ("gpt2")
	Tokens []string  // piece text by id
	Scores []float32 // SentencePiece piece scores; nil for byte-level BPE
	Types  []int32   // TypeNormal … TypeByte by id; nil means all normal
	// Merges are "left right" pairs, best first. Byte-level BPE requires them;
	// for SentencePiece they replace Scores (tokenizer.json form).
	Merges []string

	BOS, EOS, UNK, PAD int32 // -1 if none
	AddBOS             bool  // the model expects BOS at the start of a prompt

	// Pre is the GGUF pre-tokenizer name (tokenizer.ggml.pre: "llama-bpe",
	// "qwen2", "gpt-2", …). It picks the split regexes of byte-level BPE when
	// Pretokenizers is empty.
	Pre string
	// Pretokenizers are byte-level BPE split regexes (.NET/Oniguruma syntax,
	// as in tokenizer.json), applied in order; each splits every piece the
	// previous one produced into matches and the text between them.
	Pretokenizers []string
	// IgnoreMerges: a byte-level pre-token that is itself in the vocabulary is
	// emitted whole (tokenizer.json "ignore_merges", Llama 3).
	IgnoreMerges bool
	// NoSpacePrefix turns off SentencePiece's dummy prefix
	// (add_dummy_prefix=false, tokenizer.ggml.add_space_prefix=false).
	NoSpacePrefix bool

	ChatTemplate string // the model's Jinja chat template, if any
	// EndOfTurn are ids besides EOS that end a reply (GGUF
	// tokenizer.ggml.eot_token_id and eom_token_id: Llama 3's <|eot_id|>
	// and <|eom_id|>, Gemma's <end_of_turn>), even where their type is not
	// control.
	EndOfTurn []int32
}

// New checks v and builds its tokenizer.
func New(v *Vocab) (Tokenizer, error) {
	if v == nil {
		return nil, errors.New("tokenizer: nil vocab")
	}
	b, err := newBase(v)
	if err != nil {
		return nil, err
	}
	switch v.Model {
	case ModelSPM:
		return newSPM(b, v)
	case ModelBPE:
		return newBPE(b, v)
	}
	return nil, fmt.Errorf("tokenizer: unsupported model %q (want %q or %q)", v.Model, ModelSPM, ModelBPE)
}

// base is what both algorithms share: the pieces, their types, the special
// ids and the matcher for tokens that are split out before the model runs.
type base struct {
	pieces []string
	types  []int32
	ids    map[string]int32 // piece → id; the lowest id wins on duplicates
	bos    int32
	eos    int32
	unk    int32

	// specials are matched in the text before BPE, leftmost-longest, indexed
	// by first byte. always is false for control/unknown tokens, which only
	// EncodeSpecial parses.
	specials [256][]special
}

type special struct {
	text   string
	id     int32
	always bool
}

func newBase(v *Vocab) (*base, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, errors.New("tokenizer: empty vocabulary")
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	for _, s := range []struct {
		name string
		id   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unk", v.UNK}, {"pad", v.PAD}} {
		if s.id < -1 || int(s.id) >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d out of range [0, %d)", s.name, s.id, n)
		}
	}
	b := &base{
		pieces: v.Tokens,
		types:  v.Types,
		ids:    make(map[string]int32, n),
		bos:    v.BOS,
		eos:    v.EOS,
		unk:    v.UNK,
	}
	if b.types == nil {
		b.types = make([]int32, n)
		for i, p := range v.Tokens {
			b.types[i] = TypeNormal
			if _, ok := parseBytePiece(p); ok && v.Model == ModelSPM {
				b.types[i] = TypeByte
			}
		}
	}
	for i, p := range v.Tokens {
		if p == "" {
			continue
		}
		if _, dup := b.ids[p]; !dup {
			b.ids[p] = int32(i)
		}
		switch t := b.types[i]; t {
		case TypeControl, TypeUnknown, TypeUserDefined:
			b.specials[p[0]] = append(b.specials[p[0]], special{p, int32(i), t == TypeUserDefined})
		}
	}
	for i := range b.specials {
		s := b.specials[i]
		sort.SliceStable(s, func(a, c int) bool { return len(s[a].text) > len(s[c].text) })
	}
	return b, nil
}

func (b *base) Piece(id int32) string {
	if id < 0 || int(id) >= len(b.pieces) {
		return ""
	}
	return b.pieces[id]
}

func (b *base) VocabSize() int { return len(b.pieces) }
func (b *base) BOS() int32     { return b.bos }
func (b *base) EOS() int32     { return b.eos }

func (b *base) IsControl(id int32) bool {
	if id < 0 || int(id) >= len(b.pieces) {
		return false
	}
	return b.types[id] == TypeControl || id == b.bos || id == b.eos
}

func (b *base) typ(id int32) int32 {
	if id < 0 || int(id) >= len(b.types) {
		return TypeUnused
	}
	return b.types[id]
}

// fragment is a piece of the input: raw text, or a special token (id >= 0).
type fragment struct {
	text string
	id   int32
}

// split cuts the special tokens out of text, leftmost-longest. Control and
// unknown tokens count only with parseSpecial.
func (b *base) split(text string, parseSpecial bool) []fragment {
	var frags []fragment
	start := 0
	for i := 0; i < len(text); {
		var hit *special
		for k := range b.specials[text[i]] {
			s := &b.specials[text[i]][k]
			if (s.always || parseSpecial) && strings.HasPrefix(text[i:], s.text) {
				hit = s
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		if start < i {
			frags = append(frags, fragment{text: text[start:i], id: -1})
		}
		frags = append(frags, fragment{id: hit.id})
		i += len(hit.text)
		start = i
	}
	if start < len(text) {
		frags = append(frags, fragment{text: text[start:], id: -1})
	}
	return frags
}

// textEncoder is the model-specific part of encoding: it appends the ids of
// one run of raw text. first is true at the start of the input and after a
// special token (SentencePiece prepends its dummy prefix there).
type textEncoder interface {
	encodeText(out []int32, text string, first bool) []int32
}

func encode(b *base, m textEncoder, text string, addBOS, parseSpecial bool) []int32 {
	return encodeParts(b, m, []Part{{Text: text, Special: parseSpecial}}, addBOS)
}

// encodeParts splits each part at its special tokens (control tokens only in
// Special parts) and encodes the raw text between the tokens. A run of raw
// text is encoded whole even where it spans parts: encoding content apart
// from the markup around it would change the ids at the seams (a
// SentencePiece dummy-prefix space before the content, byte-level BPE's
// pre-tokenizer splitting " USER:" + " hi" differently from " USER: hi"),
// and the model was trained on the template's text tokenized as one.
func encodeParts(b *base, m textEncoder, parts []Part, addBOS bool) []int32 {
	n := 0
	for _, p := range parts {
		n += len(p.Text)
	}
	out := make([]int32, 0, n/3+2)
	if addBOS && b.bos >= 0 {
		out = append(out, b.bos)
	}
	first := true
	var run strings.Builder // raw text not yet encoded
	flush := func() {
		if run.Len() > 0 {
			out = m.encodeText(out, run.String(), first)
			first = false
			run.Reset()
		}
	}
	for _, p := range parts {
		for _, f := range b.split(p.Text, p.Special) {
			if f.id < 0 {
				run.WriteString(f.text)
				continue
			}
			flush()
			out = append(out, f.id)
			first = true
		}
	}
	flush()
	return out
}

// pieceDecoder is the model-specific part of decoding: it appends the bytes
// of one token. start is true until the first non-control token; the decoder
// clears it.
type pieceDecoder interface {
	appendPiece(dst []byte, id int32, start *bool) []byte
}

// decode appends the tokens' bytes and makes the result valid UTF-8.
func decode(d pieceDecoder, ids []int32) string {
	var buf []byte
	start := true
	for _, id := range ids {
		buf = d.appendPiece(buf, id, &start)
	}
	out, _ := appendValid(nil, buf, true)
	return string(out)
}

// appendValid appends the decidable prefix of src to dst as valid UTF-8 and
// returns how many bytes of src it consumed. An invalid byte becomes U+FFFD.
// A trailing incomplete sequence is left unconsumed unless final, in which
// case each of its bytes becomes U+FFFD. Because the decision for each byte
// depends only on the bytes after it, consuming a stream piecewise gives the
// same text as consuming it at once.
func appendValid(dst, src []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(src) {
		c := src[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if !final && !utf8.FullRune(src[i:]) {
			break
		}
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, src[i:i+size]...)
		}
		i += size
	}
	return dst, i
}
