package tokenizer

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
)

// pb builds protobuf messages for tests.
type pb []byte

func (b pb) varint(field int, v uint64) pb {
	b = binary.AppendUvarint(b, uint64(field)<<3|wireVarint)
	return binary.AppendUvarint(b, v)
}

func (b pb) bytes(field int, p []byte) pb {
	b = binary.AppendUvarint(b, uint64(field)<<3|wireBytes)
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func (b pb) float(field int, f float32) pb {
	b = binary.AppendUvarint(b, uint64(field)<<3|wireFixed32)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
}

type testPiece struct {
	text  string
	score float32
	typ   int32
}

// spmModel serializes a ModelProto with BPE trainer spec.
func spmModel(pieces []testPiece, bos, eos int64) []byte {
	var m pb
	for _, p := range pieces {
		m = m.bytes(pbModelPieces, pb(nil).bytes(pbPieceText, []byte(p.text)).float(pbPieceScore, p.score).varint(pbPieceType, uint64(p.typ)))
	}
	trainer := pb(nil).varint(pbTrainerType, spmTypeBPE).varint(pbTrainerUNK, 0).
		varint(pbTrainerBOS, uint64(bos)).varint(pbTrainerEOS, uint64(eos)).varint(pbTrainerPAD, math.MaxUint64)
	m = m.bytes(pbModelTrainer, trainer)
	return m.bytes(pbModelNormalizer, pb(nil).bytes(1, []byte("identity")).varint(pbNormDummyPrefix, 1))
}

// tinyPieces: "ab" and "ba" tie on score, "▁a" does not exist, byte
// pieces cover the rest.
func tinyPieces() []testPiece {
	ps := []testPiece{{"<unk>", 0, TypeUnknown}, {"<s>", 0, TypeControl}, {"</s>", 0, TypeControl}}
	for c := 0; c < 256; c++ {
		ps = append(ps, testPiece{"<0x" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])) + ">", 0, TypeByte})
	}
	return append(ps,
		testPiece{"▁", -1, TypeNormal},   // 259
		testPiece{"a", -2, TypeNormal},   // 260
		testPiece{"b", -2, TypeNormal},   // 261
		testPiece{"ab", -5, TypeNormal},  // 262
		testPiece{"ba", -5, TypeNormal},  // 263
		testPiece{"xyz", -9, TypeNormal}, // 264, unreachable from the inputs
		testPiece{"bb", -3, TypeNormal},  // 265
		testPiece{"<s", -1, TypeNormal},  // must never merge into the control piece
	)
}

func TestParseSentencePieceTiny(t *testing.T) {
	v, err := parseSentencePiece(spmModel(tinyPieces(), 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 267 || v.Tokens[260] != "a" || v.Scores[262] != -5 || v.Types[3] != TypeByte || v.PAD != -1 || v.BOS != 1 {
		t.Fatalf("parsed %d tokens: %q %g %d pad %d", len(v.Tokens), v.Tokens[260], v.Scores[262], v.Types[3], v.PAD)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want string
	}{
		{"aba", "[259 262 260]"},     // ab and ba tie: the leftmost merges first
		{"abb", "[259 260 265]"},     // bb (-3) beats ab (-5)
		{"c", "[259 102]"},           // byte fallback <0x63>
		{"<s>", "[259 266 65]"},      // "<s" merges, "<s>" is control and never a merge result
		{"é", "[259 198 172]"},       // two byte pieces
		{"a b", "[259 260 259 261]"}, // spaces are ▁
	} {
		if got := idsString(tok.Encode(c.in, false)); got != c.want {
			t.Errorf("Encode(%q) = %s, want %s", c.in, got, c.want)
		}
		if got := tok.Decode(tok.Encode(c.in, false)); got != c.in {
			t.Errorf("Decode(Encode(%q)) = %q", c.in, got)
		}
	}
	// Score order, not piece order: make "ba" better than "ab".
	ps := tinyPieces()
	ps[263].score = -4
	v, _ = parseSentencePiece(spmModel(ps, 1, 2))
	tok, _ = New(v)
	if got := idsString(tok.Encode("aba", false)); got != "[259 260 263]" {
		t.Errorf("with ba ahead: Encode(aba) = %s", got)
	}
}

func TestParseSentencePieceErrors(t *testing.T) {
	good := spmModel(tinyPieces(), 1, 2)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no pieces"},
		{"truncated", good[:len(good)/2], "exceeds"},
		{"bad key", []byte{0x80}, "bad field key"},
		{"field 0", []byte{0x00, 0x00}, "bad field number"},
		{"group", []byte{0x0b}, "wire type 3"},
		{"bad type", pb(nil).bytes(pbModelPieces, pb(nil).varint(pbPieceType, 9)), "type 9 out of range"},
		{"unigram", pb(nil).bytes(pbModelPieces, pb(nil).bytes(1, []byte("a"))).bytes(pbModelTrainer, pb(nil).varint(pbTrainerType, 1)), "model type 1 not supported"},
		{"varint overflow", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "bad varint"},
	} {
		_, err := parseSentencePiece(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func FuzzParseSentencePiece(f *testing.F) {
	f.Add(spmModel(tinyPieces(), 1, 2))
	if data, err := os.ReadFile("testdata/tokenizer.model"); err == nil {
		f.Add(data[:4096])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseSentencePiece(data)
		if err != nil {
			return
		}
		tok, err := New(v)
		if err != nil {
			return
		}
		ids := tok.Encode("héllo wörld 🦙", true)
		tok.Decode(ids)
		tok.EncodeSpecial("<s>x", false)
	})
}
