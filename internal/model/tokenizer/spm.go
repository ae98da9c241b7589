package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const spaceSymbol = "▁" // U+2581, SentencePiece's visible space

// spm is SentencePiece BPE, merged by piece score (tokenizer.model, GGUF) or
// by merge rank (tokenizer.json).
type spm struct {
	*base
	scores      []float32
	mergeable   map[string]int32 // pieces a merge may produce: normal and user-defined
	ranks       map[uint64]merge // by-rank form; nil when merging by score
	byteIDs     [256]int32       // <0xXX> pieces, -1 if absent
	spacePrefix bool
}

// merge is one entry of a merge table: its rank and the id it produces.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newSPM(b *base, v *Vocab) (*spm, error) {
	t := &spm{
		base:        b,
		scores:      v.Scores,
		mergeable:   make(map[string]int32, len(b.pieces)),
		spacePrefix: !v.NoSpacePrefix,
	}
	for i, p := range b.pieces {
		if p == "" {
			continue
		}
		if ty := b.types[i]; ty == TypeNormal || ty == TypeUserDefined {
			if _, dup := t.mergeable[p]; !dup {
				t.mergeable[p] = int32(i)
			}
		}
	}
	for c := range t.byteIDs {
		t.byteIDs[c] = -1
		if id, ok := b.ids[fmt.Sprintf("<0x%02X>", c)]; ok {
			t.byteIDs[c] = id
		}
	}
	if len(v.Merges) > 0 {
		r, err := mergeRanks(v.Merges, b.ids)
		if err != nil {
			return nil, err
		}
		t.ranks = r
	} else if v.Scores == nil {
		return nil, fmt.Errorf("tokenizer: %s vocabulary has neither scores nor merges", ModelSPM)
	}
	return t, nil
}

// mergeRanks parses "left right" merges. As in llama.cpp the split is at the
// first space after the first byte, so a left part may start with a space.
// Merges whose parts or result are not in the vocabulary can never apply and
// are dropped.
func mergeRanks(merges []string, ids map[string]int32) (map[uint64]merge, error) {
	r := make(map[uint64]merge, len(merges))
	for i, m := range merges {
		sp := -1
		if len(m) > 1 {
			sp = strings.IndexByte(m[1:], ' ')
		}
		if sp < 0 {
			return nil, fmt.Errorf("tokenizer: merge %d %q: no space between the two parts", i, m)
		}
		left, right := m[:sp+1], m[sp+2:]
		a, okA := ids[left]
		b, okB := ids[right]
		c, okC := ids[left+right]
		if !okA || !okB || !okC {
			continue
		}
		k := pairKey(a, b)
		if _, dup := r[k]; !dup {
			r[k] = merge{rank: int32(i), id: c}
		}
	}
	return r, nil
}

func (t *spm) Encode(text string, addBOS bool) []int32 {
	return encode(t.base, t, text, addBOS, false)
}

func (t *spm) EncodeSpecial(text string, addBOS bool) []int32 {
	return encode(t.base, t, text, addBOS, true)
}

func (t *spm) EncodeParts(parts []Part, addBOS bool) []int32 {
	return encodeParts(t.base, t, parts, addBOS)
}

func (t *spm) encodeText(out []int32, text string, first bool) []int32 {
	if first && t.spacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", spaceSymbol)

	// One symbol per UTF-8 character (a stray byte is its own symbol).
	syms := make([]symbol, 0, len(text))
	for i := 0; i < len(text); {
		_, n := utf8.DecodeRuneInString(text[i:])
		id, ok := t.mergeable[text[i:i+n]]
		if !ok {
			id = -1
		}
		k := int32(len(syms))
		syms = append(syms, symbol{start: int32(i), end: int32(i + n), prev: k - 1, next: k + 1, id: id})
		i += n
	}
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1

	var pair pairFunc
	if t.ranks != nil {
		pair = func(a, b *symbol) (float64, int32, bool) {
			if a.id < 0 || b.id < 0 {
				return 0, 0, false
			}
			m, ok := t.ranks[pairKey(a.id, b.id)]
			return -float64(m.rank), m.id, ok
		}
	} else {
		pair = func(a, b *symbol) (float64, int32, bool) {
			id, ok := t.mergeable[text[a.start:b.end]]
			if !ok {
				return 0, 0, false
			}
			return float64(t.scores[id]), id, true
		}
	}
	var h candHeap
	mergeSymbols(syms, pair, &h)

	for i := int32(0); i >= 0; i = syms[i].next {
		s := &syms[i]
		if s.id >= 0 {
			out = append(out, s.id)
			continue
		}
		out = t.byteFallback(out, text[s.start:s.end])
	}
	return out
}

// byteFallback emits <0xXX> pieces for a character that has no piece, or
// one UNK if the vocabulary lacks any of them.
func (t *spm) byteFallback(out []int32, s string) []int32 {
	for i := 0; i < len(s); i++ {
		if t.byteIDs[s[i]] < 0 {
			if t.unk >= 0 {
				out = append(out, t.unk)
			}
			return out
		}
	}
	for i := 0; i < len(s); i++ {
		out = append(out, t.byteIDs[s[i]])
	}
	return out
}

func (t *spm) Decode(ids []int32) string { return decode(t, ids) }

// appendPiece follows sentencepiece's decoder: control tokens vanish, byte
// pieces are raw bytes, "▁" is a space, and the first non-control token loses
// one leading "▁" (the dummy prefix).
func (t *spm) appendPiece(dst []byte, id int32, start *bool) []byte {
	if id < 0 || int(id) >= len(t.pieces) || t.IsControl(id) {
		return dst
	}
	p := t.pieces[id]
	wasStart := *start
	*start = false
	if t.types[id] == TypeByte {
		if c, ok := parseBytePiece(p); ok {
			return append(dst, c)
		}
	}
	if wasStart && t.spacePrefix {
		p = strings.TrimPrefix(p, spaceSymbol)
	}
	for {
		i := strings.Index(p, spaceSymbol)
		if i < 0 {
			return append(dst, p...)
		}
		dst = append(dst, p[:i]...)
		dst = append(dst, ' ')
		p = p[i+len(spaceSymbol):]
	}
}

// parseBytePiece parses "<0xXX>".
func parseBytePiece(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(p[3])
	lo, ok2 := hexVal(p[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
