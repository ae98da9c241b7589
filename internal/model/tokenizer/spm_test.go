package tokenizer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// vocabCase is one llama.cpp conformance case: input text and expected ids
// (llama_tokenize with add_special=false, parse_special=false).
type vocabCase struct {
	text string
	ids  []int32
}

// readVocabCases reads llama.cpp's test-tokenizer-0 files the way it does:
// inputs are separated by "\n__ggml_vocab_test__\n" (so an input never has
// the newline before the separator, but may be empty or all whitespace), and
// the expected ids are one line per case.
func readVocabCases(t testing.TB, inp, out string) []vocabCase {
	t.Helper()
	rawIn, err := os.ReadFile(inp)
	if err != nil {
		t.Fatal(err)
	}
	rawOut, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var texts []string
	for s := string(rawIn); s != ""; {
		i := strings.Index(s, sep)
		if i < 0 {
			texts = append(texts, s)
			break
		}
		texts = append(texts, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(rawOut), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s has %d cases, %s has %d", inp, len(texts), out, len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, line := range lines {
		cases[i].text = texts[i]
		for _, f := range strings.Fields(line) {
			n, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s line %d: %v", out, i+1, err)
			}
			cases[i].ids = append(cases[i].ids, int32(n))
		}
	}
	return cases
}

func loadLlamaSPM(t testing.TB) Tokenizer {
	t.Helper()
	v, err := LoadSentencePiece("testdata/tokenizer.model")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func idsString(ids []int32) string { return fmt.Sprint(ids) }

// checkConformance runs the llama.cpp cases against tok; shared with the
// GGUF-sourced test in package tokenizer_test through export_test.go.
func checkConformance(t *testing.T, tok Tokenizer) {
	cases := readVocabCases(t, "testdata/cases.inp", "testdata/cases.out")
	if len(cases) != 46 {
		t.Fatalf("read %d cases, want 46", len(cases))
	}
	for i, c := range cases {
		got := tok.Encode(c.text, false)
		if idsString(got) != idsString(c.ids) {
			t.Errorf("case %d: Encode(%q) = %v, want %v", i, c.text, got, c.ids)
			continue
		}
		if dec := tok.Decode(got); dec != c.text {
			t.Errorf("case %d: Decode(Encode(%q)) = %q", i, c.text, dec)
		}
	}
}

func TestLlamaSPMConformance(t *testing.T) {
	checkConformance(t, loadLlamaSPM(t))
}

func TestLoadSentencePiece(t *testing.T) {
	v, err := LoadSentencePiece("testdata/tokenizer.model")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 32000 || v.Model != ModelSPM || v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || v.PAD != -1 || !v.AddBOS || v.NoSpacePrefix {
		t.Fatalf("vocab: %d tokens, model %q, bos %d eos %d unk %d pad %d addBOS %v noSpacePrefix %v",
			len(v.Tokens), v.Model, v.BOS, v.EOS, v.UNK, v.PAD, v.AddBOS, v.NoSpacePrefix)
	}
	for _, c := range []struct {
		id    int32
		piece string
		typ   int32
	}{{0, "<unk>", TypeUnknown}, {1, "<s>", TypeControl}, {2, "</s>", TypeControl}, {13, "<0x0A>", TypeByte}, {15043, "▁Hello", TypeNormal}, {29871, "▁", TypeNormal}} {
		if v.Tokens[c.id] != c.piece || v.Types[c.id] != c.typ {
			t.Errorf("token %d = %q type %d, want %q type %d", c.id, v.Tokens[c.id], v.Types[c.id], c.piece, c.typ)
		}
	}
	if _, err := LoadSentencePiece("testdata/missing.model"); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestSPMSpecials(t *testing.T) {
	tok := loadLlamaSPM(t)
	// Not parsed by Encode; parsed by EncodeSpecial, with the dummy prefix
	// again after the special token (llama.cpp, HF legacy Llama).
	if got := tok.Encode("<s>", false); len(got) == 1 {
		t.Errorf("Encode(\"<s>\") = %v, want ordinary pieces", got)
	}
	got := tok.EncodeSpecial("<s>[INST] hi", true)
	want := append([]int32{1, 1}, tok.Encode("[INST] hi", false)...)
	if idsString(got) != idsString(want) {
		t.Errorf("EncodeSpecial = %v, want %v", got, want)
	}
	if got := tok.Encode("Hello", true); idsString(got) != "[1 15043]" {
		t.Errorf("Encode(Hello, bos) = %v", got)
	}
	if got := tok.Decode([]int32{1, 15043, 3186, 2}); got != "Hello world" {
		t.Errorf("Decode = %q", got)
	}
	if !tok.IsControl(1) || !tok.IsControl(2) || tok.IsControl(15043) || tok.IsControl(13) {
		t.Error("IsControl wrong")
	}
	if tok.Piece(13) != "<0x0A>" || tok.Piece(-1) != "" || tok.Piece(32000) != "" || tok.VocabSize() != 32000 {
		t.Error("Piece/VocabSize wrong")
	}
	if tok.BOS() != 1 || tok.EOS() != 2 {
		t.Error("BOS/EOS wrong")
	}
	// Out-of-range ids are skipped; a lone continuation byte is U+FFFD.
	if got := tok.Decode([]int32{-5, 40000, 3 + 0x80}); got != "\uFFFD" {
		t.Errorf("Decode(junk) = %q", got)
	}
}

// TestSPMLongInput checks that encoding is not quadratic: 200 KB must encode
// quickly and round-trip.
func TestSPMLongInput(t *testing.T) {
	tok := loadLlamaSPM(t)
	s := strings.Repeat("The quick brown fox jumps over the lazy dog. 日本語 🦙\n", 3000)
	ids := tok.Encode(s, false)
	if got := tok.Decode(ids); got != s {
		t.Fatal("long input does not round-trip")
	}
	same := strings.Repeat("a", 100000) // one long run of identical merges
	if got := tok.Decode(tok.Encode(same, false)); got != same {
		t.Fatal("long run does not round-trip")
	}
}

func BenchmarkSPMEncode(b *testing.B) {
	tok := loadLlamaSPM(b)
	s := strings.Repeat("The quick brown fox jumps over the lazy dog. 日本語 🦙\n", 100)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s, false)
	}
}
