package formats

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// stMaxHeader caps the JSON header, as the reference implementation does.
const stMaxHeader = 100 << 20

// Safetensors is an open safetensors file: its metadata and tensor table,
// with tensor data viewed in place. Tensor data starts 8-byte aligned only if
// every tensor before it has a size that is a multiple of 8: check before
// viewing Data as wider elements (Tensor.Float32s does). See the package
// documentation for the lifetime of Tensor.Data.
type Safetensors struct {
	Path string
	// Meta is the optional "__metadata__" object (MLX writes "format": "mlx").
	Meta map[string]string
	// Tensors sorted by name.
	Tensors []Tensor
	// DataOffset is where the data buffer starts: 8 + the header length.
	DataOffset int64

	data   []byte
	unmap  func() error
	byName map[string]int
}

// OpenSafetensors maps a safetensors file read-only and parses it. Close
// releases it.
func OpenSafetensors(path string) (*Safetensors, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	s, err := ParseSafetensors(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	s.unmap = unmap
	return s, nil
}

// Close unmaps the file; as for GGUF.Close, every Tensor.Data is invalid
// afterwards and those in s.Tensors are set to nil.
func (s *Safetensors) Close() error {
	for i := range s.Tensors {
		s.Tensors[i].Data = nil
	}
	s.data = nil
	unmap := s.unmap
	s.unmap = nil
	if unmap == nil {
		return nil
	}
	if err := unmap(); err != nil {
		return fmt.Errorf("safetensors: %s: munmap: %w", s.Path, err)
	}
	return nil
}

// Bytes returns the whole file as mapped (read-only).
func (s *Safetensors) Bytes() []byte { return s.data }

// Tensor returns the tensor with the given name.
func (s *Safetensors) Tensor(name string) (*Tensor, bool) {
	i, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	return &s.Tensors[i], true
}

// stEntry is one tensor of the header. Pointers tell absent fields apart.
type stEntry struct {
	DType   *string   `json:"dtype"`
	Shape   *[]int    `json:"shape"`
	Offsets *[]uint64 `json:"data_offsets"`
}

// ParseSafetensors parses a safetensors file held in data. Tensor.Data are
// views into data. path is used in errors only.
//
// It checks what the format promises: a header of at most 100 MiB that is one
// JSON object with unique keys, known dtypes, non-negative dimensions, and
// data_offsets that match dtype×shape, lie inside the data buffer and do not
// overlap. Gaps between tensors are allowed.
func ParseSafetensors(path string, data []byte) (*Safetensors, error) {
	fail := func(off int64, format string, args ...any) error {
		return &FormatError{Format: "safetensors", Path: path, Offset: off, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < 8 {
		return nil, fail(0, "file too short (%d bytes) for the header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > stMaxHeader {
		return nil, fail(0, "header length %d exceeds the %d-byte limit", n, stMaxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, fail(0, "header length %d exceeds the %d bytes after it", n, len(data)-8)
	}
	base := 8 + int(n)
	hdr := data[8:base]
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, fail(8, "header is not a JSON object")
	}

	s := &Safetensors{Path: path, DataOffset: int64(base), byName: map[string]int{}}
	type placement struct{ begin, end uint64 }
	var places []placement
	dec := json.NewDecoder(bytes.NewReader(hdr))
	jsonErr := func(err error) error {
		return fail(8+dec.InputOffset(), "header: %s", jsonMsg(err))
	}
	if _, err := dec.Token(); err != nil { // the '{' checked above
		return nil, jsonErr(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		name, ok := tok.(string)
		if !ok { // the decoder only returns strings for keys; be safe
			return nil, fail(8+dec.InputOffset(), "header: object key is %v, not a string", tok)
		}
		at := 8 + dec.InputOffset()
		if seen[name] {
			return nil, fail(at, "duplicate key %q", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&s.Meta); err != nil {
				return nil, fail(at, "__metadata__: %s", jsonMsg(err))
			}
			continue
		}
		var e stEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fail(at, "tensor %q: %s", name, jsonMsg(err))
		}
		t, p, err := stTensor(name, &e, uint64(len(data)-base))
		if err != nil {
			var ue *UnsupportedError
			if errors.As(err, &ue) {
				ue.Path = path
				return nil, ue
			}
			return nil, fail(at, "%v", err)
		}
		s.Tensors = append(s.Tensors, t)
		places = append(places, placement{p[0], p[1]})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, jsonErr(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail(8+dec.InputOffset(), "header: data after the JSON object")
	}

	for i := range s.Tensors {
		t, p := &s.Tensors[i], places[i]
		at := base + int(p.begin)
		t.Offset = int64(at)
		t.Data = data[at : base+int(p.end) : base+int(p.end)]
	}
	slices.SortFunc(s.Tensors, func(a, b Tensor) int { return cmp.Compare(a.Offset, b.Offset) })
	var last *Tensor // the non-empty tensor that ends last so far
	for i := range s.Tensors {
		cur := &s.Tensors[i]
		if len(cur.Data) == 0 {
			continue
		}
		if last != nil && last.Offset+int64(len(last.Data)) > cur.Offset {
			rel := func(t *Tensor) (int64, int64) {
				return t.Offset - int64(base), t.Offset - int64(base) + int64(len(t.Data))
			}
			cb, ce := rel(cur)
			lb, le := rel(last)
			return nil, fail(-1, "tensor %q (data [%d, %d)) overlaps tensor %q (data [%d, %d))", cur.Name, cb, ce, last.Name, lb, le)
		}
		if last == nil || cur.Offset+int64(len(cur.Data)) > last.Offset+int64(len(last.Data)) {
			last = cur
		}
	}
	slices.SortFunc(s.Tensors, func(a, b Tensor) int { return cmp.Compare(a.Name, b.Name) })
	for i := range s.Tensors {
		s.byName[s.Tensors[i].Name] = i
	}
	s.data = data
	return s, nil
}

// stTensor checks one header entry against a data buffer of size bytes.
func stTensor(name string, e *stEntry, size uint64) (Tensor, [2]uint64, error) {
	var none [2]uint64
	switch {
	case e.DType == nil:
		return Tensor{}, none, fmt.Errorf("tensor %q: no dtype", name)
	case e.Shape == nil:
		return Tensor{}, none, fmt.Errorf("tensor %q: no shape", name)
	case e.Offsets == nil:
		return Tensor{}, none, fmt.Errorf("tensor %q: no data_offsets", name)
	}
	dt, ok := ParseDType(*e.DType)
	if !ok || !dtypes[dt].safetensors {
		return Tensor{}, none, &UnsupportedError{Format: "safetensors", What: fmt.Sprintf("tensor %q: dtype %q", name, *e.DType)}
	}
	shape := *e.Shape
	numel, ok := shapeNumel(shape)
	if !ok {
		return Tensor{}, none, fmt.Errorf("tensor %q: shape %v has a negative dimension or too many elements", name, shape)
	}
	nbytes, ok := dt.ByteSize(numel)
	if !ok {
		return Tensor{}, none, fmt.Errorf("tensor %q: %s %v is too large", name, dt, shape)
	}
	off := *e.Offsets
	if len(off) != 2 {
		return Tensor{}, none, fmt.Errorf("tensor %q: data_offsets has %d values, want 2", name, len(off))
	}
	begin, end := off[0], off[1]
	switch {
	case end < begin:
		return Tensor{}, none, fmt.Errorf("tensor %q: data_offsets [%d, %d) end before they begin", name, begin, end)
	case end > size:
		return Tensor{}, none, fmt.Errorf("tensor %q: data_offsets [%d, %d) exceed the %d-byte data buffer", name, begin, end, size)
	case end-begin != uint64(nbytes):
		return Tensor{}, none, fmt.Errorf("tensor %q: data_offsets [%d, %d) hold %d bytes, %s %v needs %d",
			name, begin, end, end-begin, dt, shape, nbytes)
	}
	return Tensor{Name: name, DType: dt, Shape: shape}, [2]uint64{begin, end}, nil
}

// WriteSafetensors writes tensors as a safetensors file, as the Hugging Face
// writer lays it out: the header padded with spaces to a multiple of 8,
// tensors sorted by name, data back to back with no other alignment. meta
// becomes "__metadata__" when it is not empty. Only safetensors dtypes can be
// written; quantized ggml types are an error.
func WriteSafetensors(w io.Writer, tensors []Tensor, meta map[string]string) error {
	sorted := make([]*Tensor, len(tensors))
	for i := range tensors {
		sorted[i] = &tensors[i]
	}
	slices.SortFunc(sorted, func(a, b *Tensor) int { return cmp.Compare(a.Name, b.Name) })

	var h bytes.Buffer
	h.WriteByte('{')
	if len(meta) > 0 {
		h.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			writeJSONString(&h, k)
			h.WriteByte(':')
			writeJSONString(&h, meta[k])
		}
		h.WriteByte('}')
	}
	var off uint64
	for i, t := range sorted {
		if i > 0 && t.Name == sorted[i-1].Name {
			return fmt.Errorf("safetensors: write: duplicate tensor %q", t.Name)
		}
		if t.Name == "__metadata__" {
			return fmt.Errorf("safetensors: write: a tensor cannot be named __metadata__")
		}
		if !t.DType.Valid() || !dtypes[t.DType].safetensors {
			return fmt.Errorf("safetensors: write: tensor %q: safetensors cannot store %s", t.Name, t.DType)
		}
		numel, ok := shapeNumel(t.Shape)
		size, ok2 := t.DType.ByteSize(numel)
		if !ok || !ok2 || size != len(t.Data) {
			return fmt.Errorf("safetensors: write: tensor %q: %s %v needs %d bytes, Data has %d", t.Name, t.DType, t.Shape, size, len(t.Data))
		}
		if i > 0 || len(meta) > 0 {
			h.WriteByte(',')
		}
		writeJSONString(&h, t.Name)
		fmt.Fprintf(&h, `:{"dtype":"%s","shape":[`, t.DType)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, off, off+uint64(size))
		off += uint64(size)
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}

	bw := bufio.NewWriter(w)
	bw.Write(binary.LittleEndian.AppendUint64(nil, uint64(h.Len())))
	bw.Write(h.Bytes())
	for _, t := range sorted {
		bw.Write(t.Data)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// writeJSONString writes s as a JSON string, leaving <, > and & as they are
// (as serde_json does).
func writeJSONString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	e.Encode(s)             // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

// jsonMsg describes a decoding error; the decoder reports a header cut short
// as a bare EOF.
func jsonMsg(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "JSON ends early"
	}
	return err.Error()
}
