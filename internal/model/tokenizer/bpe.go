package tokenizer

import (
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Pre-tokenizer regexes of the byte-level BPE families, as their
// tokenizer.json files write them.
const (
	regexGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Llama 3: case-insensitive contractions, up to three digits per piece.
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen2/2.5/3: Llama 3's with single digits.
	regexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// preRegexes maps GGUF tokenizer.ggml.pre names to their split regexes.
var preRegexes = map[string][]string{
	"gpt-2":            {regexGPT2},
	"gpt2":             {regexGPT2},
	"llama-bpe":        {regexLlama3},
	"llama3":           {regexLlama3},
	"llama-v3":         {regexLlama3},
	"smaug-bpe":        {regexLlama3},
	"qwen2":            {regexQwen2},
	"deepseek-r1-qwen": {regexQwen2},
}

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the others to U+0100 onwards, so every byte is a visible rune.
var byteToRune [256]rune

// runeToByte inverts byteToRune; -1 for runes that are not byte images.
var runeToByte [324]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !('!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = 256 + n
			n++
		}
		byteToRune[b] = r
		runeToByte[r] = int16(b)
	}
}

// bpe is GPT-2 style byte-level BPE.
type bpe struct {
	*base
	ranks        map[uint64]merge
	splits       []*regexp2.Regexp
	charIDs      [256]int32 // token of each single byte's rune, -1 if absent
	ignoreMerges bool
}

func newBPE(b *base, v *Vocab) (*bpe, error) {
	if len(v.Merges) == 0 {
		return nil, fmt.Errorf("tokenizer: %s vocabulary has no merges", ModelBPE)
	}
	ranks, err := mergeRanks(v.Merges, b.ids)
	if err != nil {
		return nil, err
	}
	t := &bpe{base: b, ranks: ranks, ignoreMerges: v.IgnoreMerges}
	exprs := v.Pretokenizers
	if len(exprs) == 0 {
		var ok bool
		if exprs, ok = preRegexes[v.Pre]; !ok {
			return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (known: gpt-2, llama-bpe, qwen2, …; or set Vocab.Pretokenizers)", v.Pre)
		}
	}
	for _, e := range exprs {
		re, err := regexp2.Compile(e, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: pre-tokenizer regex %q: %w", e, err)
		}
		t.splits = append(t.splits, re)
	}
	for c := range t.charIDs {
		t.charIDs[c] = -1
		if id, ok := b.ids[string(byteToRune[c])]; ok {
			t.charIDs[c] = id
		}
	}
	return t, nil
}

func (t *bpe) Encode(text string, addBOS bool) []int32 {
	return encode(t.base, t, text, addBOS, false)
}

func (t *bpe) EncodeSpecial(text string, addBOS bool) []int32 {
	return encode(t.base, t, text, addBOS, true)
}

func (t *bpe) EncodeParts(parts []Part, addBOS bool) []int32 {
	return encodeParts(t.base, t, parts, addBOS)
}

func (t *bpe) encodeText(out []int32, text string, _ bool) []int32 {
	chunks := []string{text}
	for _, re := range t.splits {
		var next []string
		for _, c := range chunks {
			next = splitRegex(re, c, next)
		}
		chunks = next
	}
	var (
		enc  []byte
		syms []symbol
		h    candHeap
	)
	pair := func(a, b *symbol) (float64, int32, bool) {
		if a.id < 0 || b.id < 0 {
			return 0, 0, false
		}
		m, ok := t.ranks[pairKey(a.id, b.id)]
		return -float64(m.rank), m.id, ok
	}
	for _, c := range chunks {
		if t.ignoreMerges {
			enc = enc[:0]
			for i := 0; i < len(c); i++ {
				enc = utf8.AppendRune(enc, byteToRune[c[i]])
			}
			if id, ok := t.ids[string(enc)]; ok && t.types[id] == TypeNormal {
				out = append(out, id)
				continue
			}
		}
		syms = syms[:0]
		for i := 0; i < len(c); i++ {
			k := int32(i)
			syms = append(syms, symbol{start: k, end: k + 1, prev: k - 1, next: k + 1, id: t.charIDs[c[i]]})
		}
		if len(syms) == 0 {
			continue
		}
		syms[len(syms)-1].next = -1
		mergeSymbols(syms, pair, &h)
		for i := int32(0); i >= 0; i = syms[i].next {
			switch {
			case syms[i].id >= 0:
				out = append(out, syms[i].id)
			case t.unk >= 0:
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// splitRegex appends to dst the matches of re in s and the text between
// them, in order. regexp2 matches runes; offsets are mapped back to bytes so
// that invalid UTF-8 passes through unchanged.
func splitRegex(re *regexp2.Regexp, s string, dst []string) []string {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	prev := 0
	m, err := re.FindRunesMatch(runes)
	for m != nil && err == nil {
		st, en := offs[m.Index], offs[m.Index+m.Length]
		if st > prev {
			dst = append(dst, s[prev:st])
		}
		if en > st {
			dst = append(dst, s[st:en])
		}
		prev = en
		m, err = re.FindNextMatch(m)
	}
	if prev < len(s) {
		dst = append(dst, s[prev:])
	}
	return dst
}

func (t *bpe) Decode(ids []int32) string { return decode(t, ids) }

// appendPiece maps a byte-level piece back to bytes. Added tokens
// (user-defined) are literal text, as are pieces with a rune that is not a
// byte image.
func (t *bpe) appendPiece(dst []byte, id int32, _ *bool) []byte {
	if id < 0 || int(id) >= len(t.pieces) || t.IsControl(id) {
		return dst
	}
	p := t.pieces[id]
	if t.types[id] == TypeUserDefined {
		return append(dst, p...)
	}
	n := len(dst)
	for _, r := range p {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return append(dst[:n], p...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}
