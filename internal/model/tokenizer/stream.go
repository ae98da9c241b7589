package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// StreamDecoder detokenizes one token at a time. The concatenation of
// everything Add and Flush return equals Decode of all the ids, and no
// returned string ends inside a UTF-8 character: bytes of a character split
// across byte-fallback tokens are held until it is complete.
//
// To print only the generated part of a sequence, pass the prompt to Skip
// first; otherwise the first generated piece is treated as the start of the
// text and loses its SentencePiece dummy-prefix space.
type StreamDecoder struct {
	t       Tokenizer
	pd      pieceDecoder // nil for a Tokenizer from outside this package
	start   bool
	pending []byte

	// Fallback for other Tokenizer implementations: decode everything again
	// and emit what is new.
	ids  []int32
	sent int // bytes of Decode(ids) already returned
}

// NewStreamDecoder returns a decoder at the start of a sequence.
func NewStreamDecoder(t Tokenizer) *StreamDecoder {
	d := &StreamDecoder{t: t, start: true}
	d.pd, _ = t.(pieceDecoder)
	return d
}

// Add consumes id and returns the text that is complete so far and not yet
// returned (often "", e.g. for control tokens or the first bytes of a
// character).
func (d *StreamDecoder) Add(id int32) string {
	if d.pd == nil {
		return d.addSlow(id, false)
	}
	d.pending = d.pd.appendPiece(d.pending, id, &d.start)
	out, n := appendValid(nil, d.pending, false)
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return string(out)
}

// Skip consumes ids without returning their text, as context for what
// follows (typically the prompt before generated tokens).
func (d *StreamDecoder) Skip(ids ...int32) {
	for _, id := range ids {
		d.Add(id)
	}
	if d.pd == nil {
		d.sent = len(d.t.Decode(d.ids))
	}
}

// Flush returns the held-back bytes of an incomplete character, each as
// U+FFFD (what Decode makes of them), and empties the decoder's buffer.
func (d *StreamDecoder) Flush() string {
	if d.pd == nil {
		return d.addSlow(-1, true)
	}
	out, _ := appendValid(nil, d.pending, true)
	d.pending = d.pending[:0]
	return string(out)
}

func (d *StreamDecoder) addSlow(id int32, final bool) string {
	if !final {
		d.ids = append(d.ids, id)
	}
	text := d.t.Decode(d.ids)
	if len(text) < d.sent {
		return "" // the decoder rewrote earlier text; nothing sensible to add
	}
	next := text[d.sent:]
	if !final {
		// Hold back what may still change: an incomplete character, or
		// replacement characters a later byte may turn into one.
		end := len(next)
		for end > 0 {
			r, n := utf8.DecodeLastRuneInString(next[:end])
			if r != utf8.RuneError {
				break
			}
			end -= n
		}
		next = next[:end]
	}
	d.sent += len(next)
	return strings.Clone(next)
}
