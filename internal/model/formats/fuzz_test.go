package formats

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/stories260K-small.gguf from "+stories260K)

// smallSeed is stories260K's metadata (tokenizer included) with only its
// norm tensors: the real file's header shape at 15 KB instead of 1.2 MB.
const smallSeed = "testdata/stories260K-small.gguf"

func TestUpdateSmallSeed(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite " + smallSeed)
	}
	g, err := OpenGGUF(stories260K)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var keep []Tensor
	for _, name := range []string{"output_norm.weight", "blk.0.attn_norm.weight"} {
		tt, _ := g.Tensor(name)
		keep = append(keep, *tt)
	}
	if err := os.WriteFile(smallSeed, writeGGUFBytes(t, g.KVs(), keep, 0), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkFormatErr fails unless err is one of the package's error types.
func checkFormatErr(t *testing.T, err error) {
	var fe *FormatError
	var ue *UnsupportedError
	if !errors.As(err, &fe) && !errors.As(err, &ue) {
		t.Fatalf("error %q is %T, want *FormatError or *UnsupportedError", err, err)
	}
}

// FuzzParseGGUF checks that ParseGGUF never panics, returns only its own
// error types, and that whatever it accepts the writer writes out in a form
// that reads back and writes again byte for byte.
func FuzzParseGGUF(f *testing.F) {
	f.Add(writeGGUFBytes(f, allKV(), ggufTestTensors(), 0))
	f.Add(writeGGUFBytes(f, []KV{{"general.architecture", "llama"}}, []Tensor{codedTensor("w", F32, 2, 3)}, 64))
	f.Add(newGGUFRaw(2, 0, 0).b)
	seed, err := os.ReadFile(smallSeed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGGUF("fuzz.gguf", data)
		if err != nil {
			checkFormatErr(t, err)
			return
		}
		for _, tt := range g.Tensors {
			numel, _ := shapeNumel(tt.Shape)
			if size, ok := tt.DType.ByteSize(numel); !ok || size != len(tt.Data) || tt.Offset%int64(g.Alignment) != 0 {
				t.Fatalf("tensor %v: %d bytes at %d, want %d at a multiple of %d", &tt, len(tt.Data), tt.Offset, size, g.Alignment)
			}
		}
		var b1, b2 bytes.Buffer
		if err := WriteGGUF(&b1, g.KVs(), g.Tensors, g.Alignment); err != nil {
			t.Fatalf("WriteGGUF of a parsed file: %v", err)
		}
		g2, err := ParseGGUF("rewritten.gguf", b1.Bytes())
		if err != nil {
			t.Fatalf("ParseGGUF of a rewritten file: %v", err)
		}
		if err := WriteGGUF(&b2, g2.KVs(), g2.Tensors, g2.Alignment); err != nil {
			t.Fatalf("WriteGGUF of a rewritten file: %v", err)
		}
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Fatalf("rewriting is not stable: %d then %d bytes", b1.Len(), b2.Len())
		}
	})
}

// FuzzParseSafetensors is FuzzParseGGUF for safetensors.
func FuzzParseSafetensors(f *testing.F) {
	f.Add(writeSafetensorsBytes(f, stTestTensors(), map[string]string{"format": "mlx"}))
	f.Add(writeSafetensorsBytes(f, []Tensor{codedTensor("w", BF16, 2, 3)}, nil))
	f.Add(stFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}`, 8))
	f.Add(stFile(`{}`, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSafetensors("fuzz.safetensors", data)
		if err != nil {
			checkFormatErr(t, err)
			return
		}
		for _, tt := range s.Tensors {
			numel, _ := shapeNumel(tt.Shape)
			if size, ok := tt.DType.ByteSize(numel); !ok || size != len(tt.Data) {
				t.Fatalf("tensor %v: %d bytes, want %d", &tt, len(tt.Data), size)
			}
		}
		var b1, b2 bytes.Buffer
		if err := WriteSafetensors(&b1, s.Tensors, s.Meta); err != nil {
			t.Fatalf("WriteSafetensors of a parsed file: %v", err)
		}
		s2, err := ParseSafetensors("rewritten.safetensors", b1.Bytes())
		if err != nil {
			t.Fatalf("ParseSafetensors of a rewritten file: %v", err)
		}
		if err := WriteSafetensors(&b2, s2.Tensors, s2.Meta); err != nil {
			t.Fatalf("WriteSafetensors of a rewritten file: %v", err)
		}
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Fatalf("rewriting is not stable:\n%q\n%q", b1.Bytes(), b2.Bytes())
		}
	})
}
