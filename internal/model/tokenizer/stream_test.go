package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var streamTexts = []string{
	"Hello world",
	" leading space, then emoji 🦙🔥 and 👩‍👩‍👧",
	"日本語のテキスト\n\n中文 ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
	"Führer ½ naïve\tTab",
	"",
}

// foreign hides the package's fast path, so StreamDecoder falls back to
// decoding everything again.
type foreign struct{ Tokenizer }

func streamAll(d *StreamDecoder, ids []int32) (chunks []string) {
	for _, id := range ids {
		chunks = append(chunks, d.Add(id))
	}
	return append(chunks, d.Flush())
}

func TestStreamDecoder(t *testing.T) {
	toks := map[string]Tokenizer{"llama-spm": loadLlamaSPM(t)}
	for _, name := range []string{"qwen3", "llama3", "mistral"} {
		_, toks[name] = loadHF(t, name)
	}
	for name, tok := range toks {
		for _, wrap := range []bool{false, true} {
			var tk Tokenizer = tok
			if wrap {
				tk = foreign{tok}
			}
			heldBack := false
			for _, s := range streamTexts {
				ids := tok.Encode(s, true)
				want := tok.Decode(ids)
				if want != s {
					t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, want)
				}
				chunks := streamAll(NewStreamDecoder(tk), ids)
				for i, c := range chunks {
					if !utf8.ValidString(c) {
						t.Errorf("%s (foreign=%v): chunk %d of %q is not valid UTF-8: %q", name, wrap, i, s, c)
					}
					if i < len(ids) && c == "" {
						if _, isByte := parseBytePiece(tok.Piece(ids[i])); isByte {
							heldBack = true
						}
					}
				}
				if got := strings.Join(chunks, ""); got != want {
					t.Errorf("%s (foreign=%v): streamed %q, want %q", name, wrap, got, want)
				}
			}
			if (name == "llama-spm" || name == "mistral") && !heldBack {
				t.Errorf("%s: no byte-fallback token was ever held back; test texts too easy", name)
			}
		}
	}
}

func TestStreamDecoderBytes(t *testing.T) {
	tok := loadLlamaSPM(t)
	b := func(c byte) int32 { return 3 + int32(c) } // <0xXX> pieces are ids 3..258
	d := NewStreamDecoder(tok)
	// 🦙 is F0 9F A6 99: nothing until the last byte.
	for i, c := range []byte{0xF0, 0x9F, 0xA6} {
		if got := d.Add(b(c)); got != "" {
			t.Fatalf("byte %d: Add = %q, want \"\"", i, got)
		}
	}
	if got := d.Add(b(0x99)); got != "🦙" {
		t.Fatalf("last byte: Add = %q", got)
	}
	// An invalid continuation: the held lead byte becomes U+FFFD, as in Decode.
	ids := []int32{b(0xE2), 15043} // <0xE2> ▁Hello
	if got := d.Add(ids[0]); got != "" {
		t.Fatalf("lead byte: Add = %q", got)
	}
	if got := d.Add(ids[1]); got != "\uFFFD Hello" {
		t.Fatalf("after invalid: Add = %q", got)
	}
	if got := tok.Decode(ids); got != "\uFFFD Hello" {
		t.Fatalf("Decode = %q", got)
	}
	// Flush gives up on an incomplete character.
	d.Add(b(0xF0))
	d.Add(b(0x9F))
	if got := d.Flush(); got != "\uFFFD\uFFFD" {
		t.Fatalf("Flush = %q", got)
	}
	if got := d.Flush(); got != "" {
		t.Fatalf("second Flush = %q", got)
	}
}

// TestStreamDecoderSkip checks that generated text after a skipped prompt
// keeps its leading space.
func TestStreamDecoderSkip(t *testing.T) {
	tok := loadLlamaSPM(t)
	ids := tok.Encode("Hello world", true) // <s> ▁Hello ▁world
	for _, tk := range []Tokenizer{tok, foreign{tok}} {
		d := NewStreamDecoder(tk)
		d.Skip(ids[:2]...)
		if got := d.Add(ids[2]); got != " world" {
			t.Errorf("after Skip: Add = %q, want \" world\"", got)
		}
		if d := NewStreamDecoder(tk); d.Add(ids[2]) != "world" {
			t.Error("at sequence start the dummy-prefix space is not dropped")
		}
	}
}
