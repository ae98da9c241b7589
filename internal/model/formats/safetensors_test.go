package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// stTestTensors are out of name order on purpose, and "b.u8" (3 bytes)
// misaligns every tensor after it.
func stTestTensors() []Tensor {
	return []Tensor{
		codedTensor("c.f32", F32, 3, 5),
		codedTensor("b.u8", U8, 3),
		codedTensor("a.f16", F16, 7),
		codedTensor("d.bf16", BF16, 2, 3, 4),
		codedTensor("e.i32", I32, 9),
		codedTensor("f.u32", U32, 2, 4),
		codedTensor("g.bool", BOOL, 2),
		codedTensor("h.i64", I64),
		codedTensor("i.empty", F64, 0, 4),
		codedTensor("j.f8", F8_E4M3, 5),
		codedTensor("k.u16", U16, 1, 1, 1, 1, 1, 3),
		codedTensor("l.i8", I8, 257),
		codedTensor("m.f64", F64, 2),
		codedTensor("n.i16", I16, 31),
		codedTensor("o.u64", U64, 1),
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	meta := map[string]string{"format": "mlx", "quote": `a"b<c>\`}
	want := stTestTensors()
	data := writeSafetensorsBytes(t, want, meta)
	n := binary.LittleEndian.Uint64(data)
	if hdr := bytes.TrimRight(data[8:8+n], " "); n%8 != 0 || hdr[len(hdr)-1] != '}' || int(n)-len(hdr) >= 8 {
		t.Errorf("header length %d is not a multiple of 8 ending in '}' and spaces: %q", n, data[8:8+n])
	}
	path := writeFile(t, t.TempDir(), "model.safetensors", data)
	s, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !maps.Equal(s.Meta, meta) {
		t.Errorf("Meta = %v, want %v", s.Meta, meta)
	}
	if s.DataOffset != int64(8+n) {
		t.Errorf("DataOffset = %d, want %d", s.DataOffset, 8+n)
	}
	slices.SortFunc(want, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	if len(s.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(s.Tensors), len(want))
	}
	next := s.DataOffset // tensors lie back to back in name order
	for i, w := range want {
		got := &s.Tensors[i]
		if got.Name != w.Name || got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) || !bytes.Equal(got.Data, w.Data) {
			t.Errorf("tensor %d = %v (%d bytes), want %v (%d bytes)", i, got, len(got.Data), &w, len(w.Data))
		}
		if got.Offset != next {
			t.Errorf("tensor %q at %d, want %d", got.Name, got.Offset, next)
		}
		next += int64(len(w.Data))
		if tt, ok := s.Tensor(w.Name); !ok || tt != got {
			t.Errorf("Tensor(%q) = %v, %v", w.Name, tt, ok)
		}
	}
	if next != int64(len(data)) {
		t.Errorf("data ends at %d, file at %d", next, len(data))
	}

	// c.f32 follows the 3-byte b.u8, so it is misaligned: Float32s copies.
	c, _ := s.Tensor("c.f32")
	if c.Offset%4 == 0 {
		t.Fatalf("c.f32 at offset %d is aligned; the test wants it unaligned", c.Offset)
	}
	vals, err := c.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.Pointer(&vals[0]) == unsafe.Pointer(&c.Data[0]) {
		t.Errorf("Float32s of unaligned data returned a view")
	}
	for r := range 3 {
		for col := range 5 {
			if got := vals[r*5+col]; got != float32(10*r+col) {
				t.Errorf("c.f32[%d,%d] = %g, want %d", r, col, got, 10*r+col)
			}
		}
	}
	for _, name := range []string{"a.f16", "d.bf16"} {
		tt, _ := s.Tensor(name)
		vals, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if want := float32(coordCode(tt.Shape, i)); v != want {
				t.Errorf("%s.Float32s()[%d] = %g, want %g", name, i, v, want)
			}
		}
	}
	if _, err := s.Tensors[0].Float32s(); err != nil {
		t.Errorf("a.f16 Float32s: %v", err)
	}
	u, _ := s.Tensor("f.u32")
	if _, err := u.Float32s(); err == nil {
		t.Errorf("Float32s of U32: no error")
	}
}

// TestSafetensorsNoMeta writes no __metadata__ for empty meta and no tensors.
func TestSafetensorsNoMeta(t *testing.T) {
	data := writeSafetensorsBytes(t, nil, map[string]string{})
	if want := "\x08\x00\x00\x00\x00\x00\x00\x00{}      "; string(data) != want {
		t.Errorf("WriteSafetensors(nothing) = %q, want %q", data, want)
	}
	s, err := ParseSafetensors("e.safetensors", data)
	if err != nil || len(s.Tensors) != 0 || s.Meta != nil {
		t.Errorf("ParseSafetensors(empty) = %+v, %v", s, err)
	}
}

// stFile builds a safetensors file from a header and a data buffer size.
func stFile(header string, dataSize int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataSize)...)
}

func TestParseSafetensorsErrors(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		kind string
		want string
	}{
		{"empty", nil, "format", "offset 0: file too short (0 bytes)"},
		{"short", []byte{1, 2, 3}, "format", "file too short (3 bytes)"},
		{"header too big", binary.LittleEndian.AppendUint64(nil, 100<<20+1), "format", "header length 104857601 exceeds the 104857600-byte limit"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 10), "{}"...), "format", "header length 10 exceeds the 2 bytes after it"},
		{"empty header", stFile("", 0), "format", "offset 8: header is not a JSON object"},
		{"array header", stFile("[1]", 0), "format", "header is not a JSON object"},
		{"bad json", stFile(`{"a":`, 0), "format", `offset 12: tensor "a": JSON ends early`},
		{"cut key", stFile(`{"a`, 0), "format", `header: JSON ends early`},
		{"number key", stFile(`{1:2}`, 0), "format", "header: "},
		{"trailing", stFile(`{} x`, 0), "format", "header: data after the JSON object"},
		{"two objects", stFile(`{}{}`, 0), "format", "header: data after the JSON object"},
		{"duplicate", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "format", `duplicate key "a"`},
		{"dtype", stFile(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1), "unsupported", `safetensors: x.safetensors: unsupported tensor "a": dtype "F4"`},
		{"quantized dtype", stFile(`{"a":{"dtype":"Q4_0","shape":[32],"data_offsets":[0,18]}}`, 18), "unsupported", `dtype "Q4_0"`},
		{"no dtype", stFile(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, 1), "format", `tensor "a": no dtype`},
		{"no shape", stFile(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, 1), "format", `tensor "a": no shape`},
		{"no offsets", stFile(`{"a":{"dtype":"U8","shape":[1]}}`, 1), "format", `tensor "a": no data_offsets`},
		{"negative dim", stFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 1), "format", `shape [-1] has a negative dimension`},
		{"float dim", stFile(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), "format", `tensor "a": json: cannot unmarshal`},
		{"numel overflow", stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1), "format", on64(`too many elements`, `cannot unmarshal number 4294967296`)},
		{"bytes overflow", stFile(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]}}`, 1), "format", on64(`F64 [4611686018427387904] is too large`, `cannot unmarshal number 4611686018427387904`)},
		{"three offsets", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 2), "format", `data_offsets has 3 values, want 2`},
		{"negative offset", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 2), "format", `tensor "a": json: cannot unmarshal`},
		{"reversed", stFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, 2), "format", `data_offsets [2, 1) end before they begin`},
		{"out of bounds", stFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 2), "format", `data_offsets [1, 3) exceed the 2-byte data buffer`},
		{"size mismatch", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), "format", `data_offsets [0, 4) hold 4 bytes, F32 [2] needs 8`},
		{"overlap", stFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}`, 8), "format", `tensor "b" (data [3, 5)) overlaps tensor "a" (data [0, 4))`},
		{"overlap past empty", stFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 8), "format", `tensor "b" (data [2, 4)) overlaps tensor "a"`},
		{"metadata value", stFile(`{"__metadata__":{"n":1}}`, 0), "format", `__metadata__: json: cannot unmarshal number`},
		{"entry not object", stFile(`{"a":[1,2]}`, 0), "format", `tensor "a": json: cannot unmarshal array`},
	}
	for _, c := range cases {
		s, err := ParseSafetensors("x.safetensors", c.data)
		checkErr(t, "ParseSafetensors("+c.name+")", err, c.kind, c.want)
		if s != nil {
			t.Errorf("ParseSafetensors(%s) returned a file with an error", c.name)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "safetensors: x.safetensors: ") {
			t.Errorf("ParseSafetensors(%s): error %q lacks the safetensors: path: prefix", c.name, err)
		}
	}
}

// TestSafetensorsLenient accepts what the format allows: gaps between
// tensors, unknown fields, whitespace, tensors in any offset order.
func TestSafetensorsLenient(t *testing.T) {
	data := stFile(` {"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1}, "a":{"dtype":"U8","shape":[],"data_offsets":[6,7]}}  `, 8)
	s, err := ParseSafetensors("ok.safetensors", data[:])
	if err == nil {
		t.Fatalf("ParseSafetensors accepted a header starting with a space")
	}
	data = stFile(`{"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1}, "a":{"dtype":"U8","shape":[],"data_offsets":[6,7]}}  `, 8)
	if s, err = ParseSafetensors("ok.safetensors", data); err != nil {
		t.Fatal(err)
	}
	if len(s.Tensors) != 2 || s.Tensors[0].Name != "a" || len(s.Tensors[0].Shape) != 0 || len(s.Tensors[0].Data) != 1 {
		t.Errorf("tensors = %v", s.Tensors)
	}
}

func TestParseSafetensorsTruncated(t *testing.T) {
	data := writeSafetensorsBytes(t, stTestTensors(), map[string]string{"k": "v"})
	for n := range len(data) {
		_, err := ParseSafetensors("t.safetensors", data[:n])
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("ParseSafetensors(first %d of %d bytes): error %v, want a *FormatError", n, len(data), err)
		}
	}
}

func TestWriteSafetensorsErrors(t *testing.T) {
	ok := codedTensor("ok", F32, 2)
	short := codedTensor("short", F32, 4)
	short.Data = short.Data[:12]
	cases := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"quantized", []Tensor{codedTensor("q", Q4_0, 32)}, `tensor "q": safetensors cannot store Q4_0`},
		{"invalid dtype", []Tensor{{Name: "z", Shape: []int{1}, Data: []byte{0}}}, `tensor "z": safetensors cannot store DType(0)`},
		{"duplicate", []Tensor{ok, ok}, `duplicate tensor "ok"`},
		{"short data", []Tensor{short}, `tensor "short": F32 [4] needs 16 bytes, Data has 12`},
		{"negative dim", []Tensor{{Name: "n", DType: U8, Shape: []int{-1}}}, `tensor "n": U8 [-1] needs`},
		{"metadata name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{0}}}, `a tensor cannot be named __metadata__`},
	}
	for _, c := range cases {
		var b bytes.Buffer
		err := WriteSafetensors(&b, c.tensors, nil)
		checkErr(t, "WriteSafetensors("+c.name+")", err, "", c.want)
		if err != nil && !strings.HasPrefix(err.Error(), "safetensors: write: ") {
			t.Errorf("WriteSafetensors(%s): error %q lacks the prefix", c.name, err)
		}
	}
}

func TestOpenSafetensorsErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenSafetensors(filepath.Join(dir, "missing.safetensors"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "safetensors: ") {
		t.Errorf("OpenSafetensors(missing) = %v, want a safetensors: error wrapping fs.ErrNotExist", err)
	}
	_, err = OpenSafetensors(writeFile(t, dir, "empty.safetensors", nil))
	checkErr(t, "OpenSafetensors(empty file)", err, "format", "file too short (0 bytes)")
}
