package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// roundTripSeeds are inputs that stress the merge loop and byte fallback.
var roundTripSeeds = []string{
	"", " ", "\n", "  Hello\n\n world\t!", "▁", "a▁b", "<s></s><unk>",
	"🦙🔥 日本語 Ünïcödé \u00a0\u3000", "333333333", "I'M Don't", "\x7f\x00\x1b[0m",
	"<|im_start|>user\nhi<|im_end|>", strings.Repeat("ab", 200),
}

// checkRoundTrip checks Decode(Encode(s)) and the streamed decoding against
// want.
func checkRoundTrip(t *testing.T, name string, tok Tokenizer, s, want string) {
	ids := tok.Encode(s, true)
	if got := tok.Decode(ids); got != want {
		t.Fatalf("%s: Decode(Encode(%q)) = %q, want %q (ids %v)", name, s, got, want, ids)
	}
	d := NewStreamDecoder(tok)
	var b strings.Builder
	for _, id := range ids {
		c := d.Add(id)
		if !utf8.ValidString(c) {
			t.Fatalf("%s: stream chunk %q of %q is not valid UTF-8", name, c, s)
		}
		b.WriteString(c)
	}
	b.WriteString(d.Flush())
	if b.String() != want {
		t.Fatalf("%s: streamed %q, want %q", name, b.String(), want)
	}
}

// FuzzSPMRoundTrip: SentencePiece reproduces any valid UTF-8 text, except
// that a literal "▁" in the input comes back as a space (it is the space).
func FuzzSPMRoundTrip(f *testing.F) {
	for _, s := range roundTripSeeds {
		f.Add(s)
	}
	for _, c := range readVocabCases(f, "testdata/cases.inp", "testdata/cases.out") {
		f.Add(c.text)
	}
	tok := loadLlamaSPM(f)
	_, mistral := loadHF(f, "mistral")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		want := strings.ReplaceAll(s, spaceSymbol, " ")
		checkRoundTrip(t, "llama", tok, s, want)
		checkRoundTrip(t, "mistral", mistral, s, want)
	})
}

// FuzzBPERoundTrip: byte-level BPE reproduces any valid UTF-8 text. The
// testdata vocabularies are cut down, but keep every single-byte token.
func FuzzBPERoundTrip(f *testing.F) {
	for _, s := range roundTripSeeds {
		f.Add(s)
	}
	_, qwen := loadHF(f, "qwen3")
	_, llama3 := loadHF(f, "llama3")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		checkRoundTrip(t, "qwen3", qwen, s, s)
		checkRoundTrip(t, "llama3", llama3, s, s)
	})
}
