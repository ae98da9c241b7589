package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// allKV has a value of every GGUF type, in the Go types the reader returns.
func allKV() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"t.u8", uint8(200)},
		{"t.i8", int8(-100)},
		{"t.u16", uint16(60000)},
		{"t.i16", int16(-30000)},
		{"t.u32", uint32(4000000000)},
		{"t.i32", int32(-2000000000)},
		{"t.f32", float32(1e-5)},
		{"t.bool", true},
		{"t.string", "héllo ▁world"},
		{"t.u64", uint64(1 << 63)},
		{"t.i64", int64(-1 << 62)},
		{"t.f64", math.Pi},
		{"t.empty", ""},
		{"a.u8", []uint8{1, 2, 255}},
		{"a.i8", []int8{-1, 0, 1}},
		{"a.u16", []uint16{0, 65535}},
		{"a.i16", []int16{-32768}},
		{"a.u32", []uint32{}},
		{"a.i32", []int32{1, 2, 3}},
		{"a.f32", []float32{0.5, -2}},
		{"a.bool", []bool{true, false, true}},
		{"a.string", []string{"<unk>", "", "▁the"}},
		{"a.u64", []uint64{math.MaxUint64}},
		{"a.i64", []int64{math.MinInt64}},
		{"a.f64", []float64{-0.25}},
		{"a.nested", []any{[]uint32{1, 2}, []uint32{}, []string{"x"}}},
		{"a.nested2", []any{[]any{[]int8{-1}}}},
		{"a.empty", []any{}},
	}
}

// ggufTestTensors covers every shape rank and several types, quantized ones
// included.
func ggufTestTensors() []Tensor {
	return []Tensor{
		codedTensor("f32", F32, 3, 5),
		codedTensor("f16", F16, 7),
		codedTensor("bf16", BF16, 2, 3, 4),
		codedTensor("i32", I32, 1, 1, 1, 9),
		codedTensor("q4_0", Q4_0, 2, 64),
		codedTensor("q8_0", Q8_0, 32),
		codedTensor("q4_k", Q4_K, 1, 256),
		codedTensor("q6_k", Q6_K, 256),
		codedTensor("f64", F64, 2),
		codedTensor("i8", I8, 5),
		codedTensor("i16", I16, 3),
		codedTensor("i64", I64, 2),
		codedTensor("scalar", F32),
	}
}

func TestGGUFRoundTrip(t *testing.T) {
	for _, align := range []int{0, 32, 64, 8, 1} {
		want := ggufTestTensors()
		data := writeGGUFBytes(t, allKV(), want, align)
		path := writeFile(t, t.TempDir(), "m.gguf", data)
		g, err := OpenGGUF(path)
		if err != nil {
			t.Fatalf("OpenGGUF(align=%d): %v", align, err)
		}
		wantAlign := max(align, 32*boolInt(align == 0))
		if g.Version != 3 || g.Alignment != wantAlign {
			t.Errorf("align=%d: version %d alignment %d, want 3 and %d", align, g.Version, g.Alignment, wantAlign)
		}
		wantKV := allKV()
		if wantAlign != 32 {
			wantKV = append(wantKV, KV{"general.alignment", uint32(wantAlign)})
		}
		if got := g.KVs(); !reflect.DeepEqual(got, wantKV) {
			t.Errorf("align=%d: KVs differ:\n got %v\nwant %v", align, got, wantKV)
		}
		if len(g.Tensors) != len(want) {
			t.Fatalf("align=%d: %d tensors, want %d", align, len(g.Tensors), len(want))
		}
		for i, w := range want {
			got := g.Tensors[i]
			if got.Name != w.Name || got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) || !bytes.Equal(got.Data, w.Data) {
				t.Errorf("align=%d: tensor %d = %v (%d bytes), want %v (%d bytes)", align, i, &got, len(got.Data), &w, len(w.Data))
			}
			if got.Shape == nil {
				t.Errorf("align=%d: tensor %q: nil Shape, want empty", align, got.Name)
			}
			if (got.Offset-g.DataOffset)%int64(wantAlign) != 0 || got.Offset%int64(wantAlign) != 0 {
				t.Errorf("align=%d: tensor %q at offset %d (data section %d)", align, got.Name, got.Offset, g.DataOffset)
			}
			if !bytes.Equal(g.Bytes()[got.Offset:got.Offset+int64(len(got.Data))], got.Data) {
				t.Errorf("align=%d: tensor %q: Offset does not locate Data in Bytes()", align, got.Name)
			}
			if p := uintptr(unsafe.Pointer(&got.Data[0])); wantAlign >= 32 && p%32 != 0 {
				t.Errorf("align=%d: tensor %q: Data at %#x is not 32-byte aligned", align, got.Name, p)
			}
			if tt, ok := g.Tensor(w.Name); !ok || tt != &g.Tensors[i] {
				t.Errorf("align=%d: Tensor(%q) = %v, %v", align, w.Name, tt, ok)
			}
		}
		// Shape is outermost first: f32 [3,5] has element (r, c) at r*5+c.
		f, _ := g.Tensor("f32")
		vals, err := f.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for r := range 3 {
			for c := range 5 {
				if got := vals[r*5+c]; got != float32(10*r+c) {
					t.Errorf("align=%d: f32[%d,%d] = %g, want %d", align, r, c, got, 10*r+c)
				}
			}
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if g.Tensors[0].Data != nil || g.Bytes() != nil {
			t.Errorf("align=%d: Data still set after Close", align)
		}
		if err := g.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestGGUFNeReversed checks the on-disk ne order of a Linear weight.
func TestGGUFNeReversed(t *testing.T) {
	data := writeGGUFBytes(t, nil, []Tensor{codedTensor("w", F32, 3, 5)}, 0)
	// magic, version, n_tensors, n_kv, name length, name "w", n_dims, ne...
	ne := data[4+4+8+8+8+1+4:]
	if n0, n1 := binary.LittleEndian.Uint64(ne), binary.LittleEndian.Uint64(ne[8:]); n0 != 5 || n1 != 3 {
		t.Errorf("Shape [3 5] written as ne [%d %d], want [5 3]", n0, n1)
	}
}

func TestGGUFGetters(t *testing.T) {
	g, err := ParseGGUF("kv.gguf", writeGGUFBytes(t, allKV(), nil, 0))
	if err != nil {
		t.Fatal(err)
	}
	uints := []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"t.u8", 200, true}, {"t.u16", 60000, true}, {"t.u32", 4000000000, true}, {"t.u64", 1 << 63, true},
		{"t.i8", 0, false}, {"t.i32", 0, false}, {"t.f32", 0, false}, {"t.string", 0, false}, {"missing", 0, false},
	}
	for _, c := range uints {
		if got, ok := g.Uint(c.key); got != c.want || ok != c.ok {
			t.Errorf("Uint(%q) = %d, %v, want %d, %v", c.key, got, ok, c.want, c.ok)
		}
	}
	ints := []struct {
		key  string
		want int64
		ok   bool
	}{
		{"t.i8", -100, true}, {"t.i16", -30000, true}, {"t.i32", -2000000000, true}, {"t.i64", -1 << 62, true},
		{"t.u32", 4000000000, true}, {"t.u64", 0, false}, {"t.bool", 0, false},
	}
	for _, c := range ints {
		if got, ok := g.Int(c.key); got != c.want || ok != c.ok {
			t.Errorf("Int(%q) = %d, %v, want %d, %v", c.key, got, ok, c.want, c.ok)
		}
	}
	if f, ok := g.Float("t.f32"); !ok || float32(f) != 1e-5 {
		t.Errorf("Float(t.f32) = %g, %v", f, ok)
	}
	if f, ok := g.Float("t.f64"); !ok || f != math.Pi {
		t.Errorf("Float(t.f64) = %g, %v", f, ok)
	}
	if _, ok := g.Float("t.u32"); ok {
		t.Errorf("Float(t.u32) ok, want not ok")
	}
	if s, ok := g.String("t.string"); !ok || s != "héllo ▁world" {
		t.Errorf("String(t.string) = %q, %v", s, ok)
	}
	if b, ok := g.Bool("t.bool"); !ok || !b {
		t.Errorf("Bool(t.bool) = %v, %v", b, ok)
	}
	if s, ok := g.Strings("a.string"); !ok || len(s) != 3 || s[2] != "▁the" {
		t.Errorf("Strings(a.string) = %q, %v", s, ok)
	}
	if s, ok := g.Float32s("a.f32"); !ok || len(s) != 2 {
		t.Errorf("Float32s(a.f32) = %v, %v", s, ok)
	}
	if s, ok := g.Int32s("a.i32"); !ok || len(s) != 3 {
		t.Errorf("Int32s(a.i32) = %v, %v", s, ok)
	}
	if a := g.Architecture(); a != "llama" {
		t.Errorf("Architecture() = %q", a)
	}
}

func TestWriteGGUFErrors(t *testing.T) {
	ok := codedTensor("ok", F32, 2)
	short := codedTensor("short", F32, 4)
	short.Data = short.Data[:12]
	cases := []struct {
		name    string
		kv      []KV
		tensors []Tensor
		align   int
		want    string
	}{
		{"u32 tensor", nil, []Tensor{codedTensor("u", U32, 2)}, 0, `tensor "u": GGUF cannot store U32`},
		{"int value", []KV{{"k", 1}}, nil, 0, `key "k": unsupported value type int`},
		{"mixed any", []KV{{"k", []any{uint8(1), "x"}}}, nil, 0, `key "k": array element 1 has type string`},
		{"nil in any", []KV{{"k", []any{uint8(1), nil}}}, nil, 0, `key "k": array element 1 has type <nil>`},
		{"too deep", []KV{{"k", []any{[]any{[]any{[]any{[]uint8{}}}}}}}, nil, 0, `key "k": arrays nested more than 4 deep`},
		{"duplicate key", []KV{{"k", uint8(1)}, {"k", uint8(2)}}, nil, 0, `duplicate metadata key "k"`},
		{"duplicate tensor", nil, []Tensor{ok, ok}, 0, `duplicate tensor "ok"`},
		{"5 dims", nil, []Tensor{codedTensor("t", F32, 1, 1, 1, 1, 2)}, 0, `more than 4 dimensions`},
		{"zero dim", nil, []Tensor{{Name: "t", DType: F32, Shape: []int{0, 2}}}, 0, `has a dimension < 1`},
		{"short data", nil, []Tensor{short}, 0, `F32 [4] needs 16 bytes, Data has 12`},
		{"partial block", nil, []Tensor{{Name: "q", DType: Q4_0, Shape: []int{33}, Data: make([]byte, 18)}}, 0, `rows of 33 elements are not whole Q4_0 blocks of 32`},
		{"alignment 3", nil, nil, 3, `alignment 3 is not a power of two`},
		{"alignment mismatch", []KV{{"general.alignment", uint32(64)}}, nil, 32, `alignment 32 disagrees with general.alignment 64`},
		{"alignment type", []KV{{"general.alignment", "64"}}, nil, 0, `general.alignment has type string`},
	}
	for _, c := range cases {
		var b bytes.Buffer
		err := WriteGGUF(&b, c.kv, c.tensors, c.align)
		checkErr(t, "WriteGGUF("+c.name+")", err, "", c.want)
		if err != nil && !strings.HasPrefix(err.Error(), "gguf: write: ") {
			t.Errorf("WriteGGUF(%s): error %q lacks the gguf: write: prefix", c.name, err)
		}
	}
}

// ggufRaw builds GGUF bytes by hand, for malformed files.
type ggufRaw struct{ b []byte }

func newGGUFRaw(version uint32, nTensors, nKV uint64) *ggufRaw {
	r := &ggufRaw{[]byte("GGUF")}
	return r.u32(version).u64(nTensors).u64(nKV)
}

func (r *ggufRaw) u32(v uint32) *ggufRaw { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *ggufRaw) u64(v uint64) *ggufRaw { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *ggufRaw) str(s string) *ggufRaw { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }
func (r *ggufRaw) raw(b ...byte) *ggufRaw {
	r.b = append(r.b, b...)
	return r
}

// tensor appends a tensor info; ne is innermost first, as on disk.
func (r *ggufRaw) tensor(name string, typ uint32, off uint64, ne ...uint64) *ggufRaw {
	r.str(name).u32(uint32(len(ne)))
	for _, n := range ne {
		r.u64(n)
	}
	return r.u32(typ).u64(off)
}

// data pads to 32 and appends n zero bytes.
func (r *ggufRaw) data(n int) []byte {
	r.b = append(r.b, make([]byte, int(alignUp(uint64(len(r.b)), 32))-len(r.b)+n)...)
	return r.b
}

// on64 picks the message a 64-bit or a 32-bit int gives.
func on64(msg64, msg32 string) string {
	if strconv.IntSize == 64 {
		return msg64
	}
	return msg32
}

func TestParseGGUFErrors(t *testing.T) {
	const f32 = 0
	cases := []struct {
		name string
		data []byte
		kind string
		want string
	}{
		{"empty", nil, "format", "offset 0: file too short (0 bytes)"},
		{"short", []byte("GG"), "format", "file too short (2 bytes)"},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), "format", `bad magic "GGML", want "GGUF"`},
		{"no counts", []byte("GGUF\x03\x00\x00\x00"), "format", "offset 8: tensor count: need 8 bytes, 0 left"},
		{"version 1", newGGUFRaw(1, 0, 0).b, "unsupported", "unsupported version 1"},
		{"big-endian", append([]byte("GGUF\x00\x00\x00\x03"), make([]byte, 16)...), "unsupported", "big-endian file (version 3)"},
		{"version 4", newGGUFRaw(4, 0, 0).b, "unsupported", "unsupported version 4"},
		{"kv count", newGGUFRaw(3, 0, 1<<60).b, "format", "metadata count 1152921504606846976 cannot fit in the 0 bytes left"},
		{"tensor count", newGGUFRaw(3, 1<<40, 0).raw(make([]byte, 100)...).b, "format", "tensor count 1099511627776 cannot fit"},
		{"key length", newGGUFRaw(3, 0, 1).u64(1 << 62).raw(make([]byte, 20)...).b, "format", "metadata key: string length 4611686018427387904 exceeds the 20 bytes left"},
		{"value type", newGGUFRaw(3, 0, 1).str("k").u32(13).raw(0).b, "format", `key "k": unknown value type 13`},
		{"truncated value", newGGUFRaw(3, 0, 1).str("k").u32(ggufU64).raw(1, 2).b, "format", `key "k": need 8 bytes, 2 left`},
		{"array count", newGGUFRaw(3, 0, 1).str("k").u32(ggufArray).u32(ggufU32).u64(1 << 61).raw(make([]byte, 64)...).b, "format", `key "k": 2305843009213693952 array elements cannot fit in the 64 bytes left`},
		{"string array count", newGGUFRaw(3, 0, 1).str("k").u32(ggufArray).u32(ggufString).u64(9).raw(make([]byte, 64)...).b, "format", `9 array elements cannot fit`},
		{"array element type", newGGUFRaw(3, 0, 1).str("k").u32(ggufArray).u32(99).u64(1).raw(0).b, "format", `key "k": unknown array element type 99`},
		{"nested too deep", newGGUFRaw(3, 0, 1).str("k").u32(ggufArray).
			u32(ggufArray).u64(1).u32(ggufArray).u64(1).u32(ggufArray).u64(1).u32(ggufArray).u64(1).u32(ggufU8).u64(0).b,
			"unsupported", "arrays nested more than 4 deep"},
		{"duplicate key", newGGUFRaw(3, 0, 2).str("k").u32(ggufU8).raw(1).str("k").u32(ggufU8).raw(2).b, "format", `duplicate metadata key "k"`},
		{"alignment 48", newGGUFRaw(3, 0, 1).str("general.alignment").u32(ggufU32).u32(48).b, "format", "general.alignment 48 is not a power of two"},
		{"alignment 0", newGGUFRaw(3, 0, 1).str("general.alignment").u32(ggufU32).u32(0).b, "format", "general.alignment 0 is not a power of two"},
		{"alignment string", newGGUFRaw(3, 0, 1).str("general.alignment").u32(ggufString).str("32").b, "format", "general.alignment 32 is not a power of two"},
		{"5 dims", newGGUFRaw(3, 1, 0).tensor("t", f32, 0, 1, 1, 1, 1, 1).data(4), "format", `tensor "t": 5 dimensions, at most 4`},
		{"zero dim", newGGUFRaw(3, 1, 0).tensor("t", f32, 0, 4, 0).data(64), "format", `tensor "t": dimension 1 is 0`},
		{"dims overflow", newGGUFRaw(3, 1, 0).tensor("t", f32, 0, 1<<32, 1<<32).data(64), "format", on64(`tensor "t": dimension 1 is 4294967296`, `dimension 0 is 4294967296`)},
		{"bytes overflow", newGGUFRaw(3, 1, 0).tensor("t", f32, 0, 1<<62).data(64), "format", on64(`tensor "t": 4611686018427387904 elements of F32 have no valid byte size`, `dimension 0 is 4611686018427387904`)},
		{"ggml type 4", newGGUFRaw(3, 1, 0).tensor("t", 4, 0, 32).data(64), "unsupported", `unsupported tensor "t": ggml type 4`},
		{"ggml type huge", newGGUFRaw(3, 1, 0).tensor("t", 1<<31, 0, 32).data(64), "unsupported", `ggml type 2147483648`},
		{"partial block", newGGUFRaw(3, 1, 0).tensor("t", 2, 0, 33).data(64), "format", `tensor "t": rows of 33 elements are not whole Q4_0 blocks of 32`},
		{"misaligned", newGGUFRaw(3, 1, 0).tensor("t", f32, 4, 2).data(64), "format", `tensor "t": data offset 4 is not a multiple of the alignment 32`},
		{"out of bounds", newGGUFRaw(3, 1, 0).tensor("t", f32, 32, 16).data(64), "format", `tensor "t": data [32, 96) lies outside the 64-byte data section`},
		{"offset huge", newGGUFRaw(3, 1, 0).tensor("t", f32, 1<<63, 16).data(64), "format", `lies outside the 64-byte data section`},
		{"no data section", newGGUFRaw(3, 1, 0).tensor("t", f32, 0, 1).b, "format", `data section would start at 64, past the end of the file (57 bytes)`},
		{"overlap", newGGUFRaw(3, 2, 0).tensor("a", f32, 0, 16).tensor("b", f32, 32, 8).data(96), "format", `tensor "b" overlaps tensor "a"`},
		{"duplicate tensor", newGGUFRaw(3, 2, 0).tensor("a", f32, 0, 1).tensor("a", f32, 32, 1).data(64), "format", `duplicate tensor "a"`},
		{"truncated info", newGGUFRaw(3, 1, 0).str("t").u32(4).u64(4).u64(4).b, "format", `tensor dimension: need 8 bytes, 0 left`},
	}
	for _, c := range cases {
		g, err := ParseGGUF("x.gguf", c.data)
		checkErr(t, "ParseGGUF("+c.name+")", err, c.kind, c.want)
		if g != nil {
			t.Errorf("ParseGGUF(%s) returned a GGUF with an error", c.name)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "gguf: x.gguf: ") {
			t.Errorf("ParseGGUF(%s): error %q lacks the gguf: path: prefix", c.name, err)
		}
	}
}

// TestGGUFMinimal accepts files without tensors, including one that ends
// right after its metadata (no padding to a data section).
func TestGGUFMinimal(t *testing.T) {
	for _, data := range [][]byte{
		newGGUFRaw(3, 0, 0).b,
		newGGUFRaw(2, 0, 1).str("general.architecture").u32(ggufString).str("llama").b,
	} {
		g, err := ParseGGUF("min.gguf", data)
		if err != nil {
			t.Errorf("ParseGGUF(%q): %v", data, err)
			continue
		}
		if len(g.Tensors) != 0 {
			t.Errorf("ParseGGUF(%q): %d tensors", data, len(g.Tensors))
		}
	}
}

// TestGGUFTruncated parses every prefix of a valid file: each one that cuts
// into the header or tensor data is a FormatError, never a panic.
func TestGGUFTruncated(t *testing.T) {
	data := writeGGUFBytes(t, allKV(), ggufTestTensors(), 0)
	full, err := ParseGGUF("t.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, tt := range full.Tensors {
		end = max(end, tt.Offset+int64(len(tt.Data)))
	}
	for n := range len(data) {
		_, err := ParseGGUF("t.gguf", data[:n])
		var fe *FormatError
		switch {
		case int64(n) < end && !errors.As(err, &fe):
			t.Fatalf("ParseGGUF(first %d of %d bytes): error %v, want a *FormatError", n, len(data), err)
		case int64(n) >= end && err != nil:
			t.Fatalf("ParseGGUF(first %d of %d bytes, data ends at %d): %v", n, len(data), end, err)
		}
	}
}

func TestOpenGGUFErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenGGUF(filepath.Join(dir, "missing.gguf"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "gguf: ") {
		t.Errorf("OpenGGUF(missing) = %v, want a gguf: error wrapping fs.ErrNotExist", err)
	}
	_, err = OpenGGUF(writeFile(t, dir, "empty.gguf", nil))
	checkErr(t, "OpenGGUF(empty file)", err, "format", "file too short (0 bytes)")
	_, err = OpenGGUF(dir)
	checkErr(t, "OpenGGUF(dir)", err, "", "not a regular file")
}

const stories260K = "../../../models/stories260K/stories260K.gguf"

func TestStories260K(t *testing.T) {
	g, err := OpenGGUF(stories260K)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Version != 3 || g.Architecture() != "llama" {
		t.Errorf("version %d, architecture %q; want 3, llama", g.Version, g.Architecture())
	}
	for key, want := range map[string]uint64{
		"llama.embedding_length":        64,
		"llama.block_count":             5,
		"llama.attention.head_count":    8,
		"llama.attention.head_count_kv": 4,
		"llama.feed_forward_length":     172,
		"tokenizer.ggml.bos_token_id":   1,
		"tokenizer.ggml.eos_token_id":   2,
	} {
		if got, ok := g.Uint(key); !ok || got != want {
			t.Errorf("Uint(%q) = %d, %v, want %d", key, got, ok, want)
		}
	}
	if eps, ok := g.Float("llama.attention.layer_norm_rms_epsilon"); !ok || float32(eps) != 1e-5 {
		t.Errorf("rms epsilon = %g, %v", eps, ok)
	}
	tokens, _ := g.Strings("tokenizer.ggml.tokens")
	scores, _ := g.Float32s("tokenizer.ggml.scores")
	types, _ := g.Int32s("tokenizer.ggml.token_type")
	if len(tokens) != 512 || len(scores) != 512 || len(types) != 512 || tokens[1] != "<s>" {
		t.Errorf("tokenizer: %d tokens (token 1 %q), %d scores, %d types; want 512 each", len(tokens), tokens[1], len(scores), len(types))
	}
	if len(g.Tensors) != 48 {
		t.Errorf("%d tensors, want 48", len(g.Tensors))
	}
	for name, shape := range map[string][]int{
		"token_embd.weight":     {512, 64},
		"output.weight":         {512, 64},
		"output_norm.weight":    {64},
		"blk.0.attn_k.weight":   {32, 64},
		"blk.4.ffn_down.weight": {64, 172},
		"blk.4.ffn_up.weight":   {172, 64},
	} {
		tt, ok := g.Tensor(name)
		if !ok || tt.DType != F32 || !reflect.DeepEqual(tt.Shape, shape) {
			t.Errorf("Tensor(%q) = %v, %v; want F32 %v", name, tt, ok, shape)
			continue
		}
		vals, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if unsafe.Pointer(&vals[0]) != unsafe.Pointer(&tt.Data[0]) {
			t.Errorf("Tensor(%q).Float32s() copied; want a view of the mapping", name)
		}
		if p := uintptr(unsafe.Pointer(&tt.Data[0])); p%32 != 0 {
			t.Errorf("Tensor(%q): data at %#x is not 32-byte aligned", name, p)
		}
	}
}
