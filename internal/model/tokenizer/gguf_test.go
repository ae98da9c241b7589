package tokenizer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/model/formats"
	"github.com/seed9b8f47b1/redrafter/internal/model/tokenizer"
)

// These tests read tokenizers embedded in GGUF files through
// internal/model/formats, which package tokenizer itself does not import.

func openGGUFVocab(t *testing.T, path string) (*tokenizer.Vocab, tokenizer.Tokenizer) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s: %v", path, err)
	}
	g, err := formats.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	v, err := tokenizer.FromGGUFMetadata(g.KV)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return v, tok
}

// TestGGUFVocabConformance runs the llama.cpp cases on the vocab-only GGUF
// they were made with (llama.cpp models/ggml-vocab-llama-spm.gguf), from
// shared/ beside the repository, and checks it holds the same vocabulary as
// testdata/tokenizer.model.
func TestGGUFVocabConformance(t *testing.T) {
	v, tok := openGGUFVocab(t, filepath.Join("..", "..", "..", "..", "shared", "tokenizers", "llama-spm", "ggml-vocab-llama-spm.gguf"))
	tokenizer.CheckConformance(t, tok)

	sp, err := tokenizer.LoadSentencePiece("testdata/tokenizer.model")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != len(sp.Tokens) || v.BOS != sp.BOS || v.EOS != sp.EOS || v.UNK != sp.UNK || v.AddBOS != sp.AddBOS {
		t.Fatalf("gguf vocab: %d tokens bos %d eos %d unk %d addBOS %v; tokenizer.model: %d tokens bos %d eos %d unk %d addBOS %v",
			len(v.Tokens), v.BOS, v.EOS, v.UNK, v.AddBOS, len(sp.Tokens), sp.BOS, sp.EOS, sp.UNK, sp.AddBOS)
	}
	for i := range v.Tokens {
		if v.Tokens[i] != sp.Tokens[i] || v.Scores[i] != sp.Scores[i] || v.Types[i] != sp.Types[i] {
			t.Fatalf("token %d: gguf %q %g type %d, tokenizer.model %q %g type %d",
				i, v.Tokens[i], v.Scores[i], v.Types[i], sp.Tokens[i], sp.Scores[i], sp.Types[i])
		}
	}
}

// TestStories260K checks the 512-piece vocabulary embedded in the bundled
// demo model: the prompt round-trips, and llama2.c's documented greedy
// output (with its newlines, which the model emits as the byte piece
// <0x0A>) decodes back to itself, in one go and streamed.
func TestStories260K(t *testing.T) {
	root := filepath.Join("..", "..", "..", "models", "stories260K")
	v, tok := openGGUFVocab(t, filepath.Join(root, "stories260K.gguf"))
	if tok.VocabSize() != 512 || tok.BOS() != 1 || tok.EOS() != 2 || !v.AddBOS || v.PAD != -1 {
		t.Fatalf("vocab %d bos %d eos %d addBOS %v pad %d", tok.VocabSize(), tok.BOS(), tok.EOS(), v.AddBOS, v.PAD)
	}

	const prompt = "Once upon a time"
	ids := tok.Encode(prompt, true)
	if len(ids) < 3 || ids[0] != 1 {
		t.Fatalf("Encode(%q) = %v", prompt, ids)
	}
	if got := tok.Decode(ids); got != prompt {
		t.Fatalf("Decode(%v) = %q, want %q", ids, got, prompt)
	}

	md, err := os.ReadFile(filepath.Join(root, "golden-greedy.md"))
	if err != nil {
		t.Skip(err)
	}
	// The first fenced block after the "-t 0.0" command is the output.
	s := string(md)
	i := strings.Index(s, "-t 0.0\n")
	if i < 0 {
		t.Fatal("golden-greedy.md: no greedy command")
	}
	s = s[i+len("-t 0.0\n"):]
	golden := s[:strings.Index(s, "\n```")]
	if !strings.HasPrefix(golden, prompt) || !strings.Contains(golden, "\n") {
		t.Fatalf("golden text %q", golden)
	}
	all := tok.Encode(golden, true)
	nl := tok.Encode("\n", false) // dummy prefix "▁" then <0x0A>
	if tok.Piece(nl[len(nl)-1]) != "<0x0A>" {
		t.Fatalf("newline encodes as %v", nl)
	}
	if got := tok.Decode(all); got != golden {
		t.Fatalf("Decode(Encode(golden)) = %q", got)
	}
	d := tokenizer.NewStreamDecoder(tok)
	var b strings.Builder
	for _, id := range all {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	if b.String() != golden {
		t.Fatalf("streamed = %q", b.String())
	}
}
