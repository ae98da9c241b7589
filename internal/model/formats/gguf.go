package formats

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// GGUF value types (gguf.md, gguf_type).
const (
	ggufU8 uint32 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

const (
	ggufMagic            = "GGUF"
	ggufDefaultAlignment = 32
	ggufMaxDims          = 4       // GGML_MAX_DIMS
	ggufMaxAlignment     = 1 << 30 // far above any real file; keeps offset arithmetic small
	ggufMaxArrayDepth    = 4       // nesting of arrays of arrays; llama.cpp writes none
	ggufMaxArrayLen      = 1 << 26 // elements in one array; the largest vocabularies have ~256k
)

// GGUF is an open GGUF file: its metadata and tensor table, with tensor data
// viewed in place. See the package documentation for the lifetime of
// Tensor.Data.
type GGUF struct {
	Path    string
	Version uint32 // 2 or 3
	// KV holds the metadata. Scalars are uint8, int8, uint16, int16, uint32,
	// int32, float32, uint64, int64, float64, bool or string; arrays are
	// typed slices ([]string, []float32, []int32, ...) and arrays of arrays
	// are []any of those.
	KV map[string]any
	// Keys lists the keys of KV in file order.
	Keys []string
	// Tensors in file order. Shapes are outermost first (ne reversed).
	Tensors []Tensor
	// Alignment is general.alignment, or 32 when the file does not set it.
	Alignment int
	// DataOffset is where the tensor data section starts in the file.
	DataOffset int64

	data   []byte
	unmap  func() error
	byName map[string]int
}

// OpenGGUF maps a GGUF file read-only and parses it. Close releases it.
func OpenGGUF(path string) (*GGUF, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	g, err := ParseGGUF(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	g.unmap = unmap
	return g, nil
}

// Close unmaps the file. Tensor.Data of every tensor, including copies of
// Tensor values made earlier, is invalid afterwards; the slices in g.Tensors
// are set to nil. Metadata stays valid. Close is safe to call more than once.
func (g *GGUF) Close() error {
	for i := range g.Tensors {
		g.Tensors[i].Data = nil
	}
	g.data = nil
	unmap := g.unmap
	g.unmap = nil
	if unmap == nil {
		return nil
	}
	if err := unmap(); err != nil {
		return fmt.Errorf("gguf: %s: munmap: %w", g.Path, err)
	}
	return nil
}

// Bytes returns the whole file as mapped (read-only), for a backend that
// wraps the mapping once and addresses tensors by Tensor.Offset.
func (g *GGUF) Bytes() []byte { return g.data }

// Tensor returns the tensor with the given name.
func (g *GGUF) Tensor(name string) (*Tensor, bool) {
	i, ok := g.byName[name]
	if !ok {
		return nil, false
	}
	return &g.Tensors[i], true
}

// Architecture returns general.architecture ("llama", "qwen2", ...), or "".
func (g *GGUF) Architecture() string {
	s, _ := g.String("general.architecture")
	return s
}

// String returns a string value.
func (g *GGUF) String(key string) (string, bool) {
	s, ok := g.KV[key].(string)
	return s, ok
}

// Uint returns a value of any integer type that is not negative.
func (g *GGUF) Uint(key string) (uint64, bool) { return asUint(g.KV[key]) }

// Int returns a value of any integer type that fits in an int64.
func (g *GGUF) Int(key string) (int64, bool) {
	switch v := g.KV[key].(type) {
	case int8:
		return int64(v), true
	case int16:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	}
	u, ok := asUint(g.KV[key])
	if !ok || u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// Float returns a float32 or float64 value as float64. A float32 keeps its
// float32 value (1e-5 stored as f32 reads as 9.99999974e-06); convert back to
// float32 to use it as the file meant.
func (g *GGUF) Float(key string) (float64, bool) {
	switch v := g.KV[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// Bool returns a bool value.
func (g *GGUF) Bool(key string) (value, ok bool) {
	value, ok = g.KV[key].(bool)
	return value, ok
}

// Strings returns an array of strings, such as tokenizer.ggml.tokens.
func (g *GGUF) Strings(key string) ([]string, bool) {
	s, ok := g.KV[key].([]string)
	return s, ok
}

// Float32s returns an array of float32, such as tokenizer.ggml.scores.
func (g *GGUF) Float32s(key string) ([]float32, bool) {
	s, ok := g.KV[key].([]float32)
	return s, ok
}

// Int32s returns an array of int32, such as tokenizer.ggml.token_type.
func (g *GGUF) Int32s(key string) ([]int32, bool) {
	s, ok := g.KV[key].([]int32)
	return s, ok
}

// asUint returns v as uint64 if it is an integer that is not negative.
func asUint(v any) (uint64, bool) {
	switch v := v.(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int8:
		if v >= 0 {
			return uint64(v), true
		}
	case int16:
		if v >= 0 {
			return uint64(v), true
		}
	case int32:
		if v >= 0 {
			return uint64(v), true
		}
	case int64:
		if v >= 0 {
			return uint64(v), true
		}
	}
	return 0, false
}

// ParseGGUF parses a GGUF file held in data. Tensor.Data are views into data.
// path is used in errors only.
func ParseGGUF(path string, data []byte) (*GGUF, error) {
	d := &ggufDecoder{path: path, data: data}
	version, nTensors, nKV, err := d.header()
	if err != nil {
		return nil, err
	}
	g := &GGUF{
		Path:      path,
		Version:   version,
		KV:        make(map[string]any, capHint(nKV)),
		Keys:      make([]string, 0, capHint(nKV)),
		Alignment: ggufDefaultAlignment,
		byName:    make(map[string]int, capHint(nTensors)),
	}
	if err := d.metadata(g, nKV); err != nil {
		return nil, err
	}
	if err := d.alignment(g); err != nil {
		return nil, err
	}
	places, err := d.tensorInfos(g, nTensors)
	if err != nil {
		return nil, err
	}
	if err := d.placeData(g, places); err != nil {
		return nil, err
	}
	if err := d.checkOverlaps(g, places); err != nil {
		return nil, err
	}
	g.data = data
	return g, nil
}

// header reads the magic, the version and the tensor and metadata counts,
// and checks that the version is one this reader knows and that the counts
// could fit in the file.
func (d *ggufDecoder) header() (version uint32, nTensors, nKV uint64, err error) {
	if len(d.data) < 4 {
		return 0, 0, 0, d.errAt(0, "file too short (%d bytes)", len(d.data))
	}
	if string(d.data[:4]) != ggufMagic {
		return 0, 0, 0, d.errAt(0, "bad magic %q, want %q", d.data[:4], ggufMagic)
	}
	d.off = 4
	version = d.u32("version")
	nTensors = d.u64("tensor count")
	nKV = d.u64("metadata count")
	if d.err != nil {
		return 0, 0, 0, d.err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return 0, 0, 0, &UnsupportedError{"gguf", d.path, "version 1"}
	case version != 0 && bits.ReverseBytes32(version) <= 3:
		return 0, 0, 0, &UnsupportedError{"gguf", d.path, fmt.Sprintf("big-endian file (version %d)", bits.ReverseBytes32(version))}
	default:
		return 0, 0, 0, &UnsupportedError{"gguf", d.path, fmt.Sprintf("version %d", version)}
	}
	// A metadata pair takes at least 13 bytes (key length, type, a one-byte
	// value) and a tensor info at least 24 (name length, n_dims, type,
	// offset), so these bound every allocation that follows by the file size.
	if nKV > uint64(d.left())/13 {
		return 0, 0, 0, d.errAt(16, "metadata count %d cannot fit in the %d bytes left", nKV, d.left())
	}
	if nTensors > uint64(d.left())/24 {
		return 0, 0, 0, d.errAt(8, "tensor count %d cannot fit in the %d bytes left", nTensors, d.left())
	}
	return version, nTensors, nKV, nil
}

// metadata reads the n key-value pairs into g.KV, in file order in g.Keys.
func (d *ggufDecoder) metadata(g *GGUF, n uint64) error {
	for range n {
		keyOff := d.off
		key := d.str("metadata key")
		typOff := d.off
		typ := d.u32("metadata value type")
		if d.err != nil {
			return d.err
		}
		if _, dup := g.KV[key]; dup {
			return d.errAt(keyOff, "duplicate metadata key %q", key)
		}
		if !ggufKnownType(typ) {
			return d.errAt(typOff, "key %q: unknown value type %d", key, typ)
		}
		v := d.value(typ, "key "+strconv.Quote(key))
		if d.err != nil {
			return d.err
		}
		g.KV[key] = v
		g.Keys = append(g.Keys, key)
	}
	return nil
}

// alignment sets g.Alignment from general.alignment, when the file has it.
func (d *ggufDecoder) alignment(g *GGUF) error {
	v, ok := g.KV["general.alignment"]
	if !ok {
		return nil
	}
	a, isInt := asUint(v)
	if !isInt || a == 0 || a&(a-1) != 0 || a > ggufMaxAlignment {
		return d.errAt(-1, "general.alignment %v is not a power of two up to %d", v, ggufMaxAlignment)
	}
	g.Alignment = int(a)
	return nil
}

// A ggufPlacement is where a tensor info says its data lies: the offset in
// the data section, where in the file that offset was written (for
// errors), and the data's size.
type ggufPlacement struct {
	rel, at uint64
	size    int
}

// tensorInfos reads the n tensor infos into g.Tensors (without their data)
// and returns where each one's data lies.
func (d *ggufDecoder) tensorInfos(g *GGUF, n uint64) ([]ggufPlacement, error) {
	g.Tensors = make([]Tensor, 0, capHint(n))
	places := make([]ggufPlacement, 0, capHint(n))
	for i := range n {
		t, p, err := d.tensorInfo(g, i)
		if err != nil {
			return nil, err
		}
		g.byName[t.Name] = len(g.Tensors)
		g.Tensors = append(g.Tensors, t)
		places = append(places, p)
	}
	return places, nil
}

// tensorInfo reads the info of tensor i: name, shape, type and data
// offset, each checked.
func (d *ggufDecoder) tensorInfo(g *GGUF, i uint64) (Tensor, ggufPlacement, error) {
	infoOff := d.off
	name := d.str(fmt.Sprintf("tensor %d name", i))
	nd := d.u32("tensor n_dims")
	if d.err != nil {
		return Tensor{}, ggufPlacement{}, d.err
	}
	if nd > ggufMaxDims {
		return Tensor{}, ggufPlacement{}, d.errAt(d.off-4, "tensor %q: %d dimensions, at most %d", name, nd, ggufMaxDims)
	}
	shape, numel, err := d.shape(name, int(nd))
	if err != nil {
		return Tensor{}, ggufPlacement{}, err
	}
	typOff := d.off
	typ := d.u32("tensor type")
	relOff := d.off
	rel := d.u64("tensor offset")
	if d.err != nil {
		return Tensor{}, ggufPlacement{}, d.err
	}
	if _, dup := g.byName[name]; dup {
		return Tensor{}, ggufPlacement{}, d.errAt(infoOff, "duplicate tensor %q", name)
	}
	dt, ok := DTypeFromGGML(typ)
	if !ok {
		return Tensor{}, ggufPlacement{}, &UnsupportedError{"gguf", d.path, fmt.Sprintf("tensor %q: ggml type %d", name, typ)}
	}
	if nd > 0 && shape[nd-1]%dt.BlockSize() != 0 {
		return Tensor{}, ggufPlacement{}, d.errAt(typOff, "tensor %q: rows of %d elements are not whole %s blocks of %d", name, shape[nd-1], dt, dt.BlockSize())
	}
	size, ok := dt.ByteSize(int(numel))
	if !ok {
		return Tensor{}, ggufPlacement{}, d.errAt(typOff, "tensor %q: %d elements of %s have no valid byte size", name, numel, dt)
	}
	if align := uint64(g.Alignment); rel%align != 0 {
		return Tensor{}, ggufPlacement{}, d.errAt(relOff, "tensor %q: data offset %d is not a multiple of the alignment %d", name, rel, align)
	}
	return Tensor{Name: name, DType: dt, Shape: shape}, ggufPlacement{rel: rel, at: uint64(relOff), size: size}, nil
}

// shape reads the nd dimensions of tensor name (stored innermost first)
// and returns them outermost first, with their product.
func (d *ggufDecoder) shape(name string, nd int) ([]int, uint64, error) {
	shape := make([]int, nd)
	numel := uint64(1)
	for j := range nd {
		ne := d.u64("tensor dimension")
		if d.err != nil {
			return nil, 0, d.err
		}
		hi, lo := bits.Mul64(numel, ne)
		if ne == 0 || hi != 0 || lo > math.MaxInt {
			return nil, 0, d.errAt(d.off-8, "tensor %q: dimension %d is %d (need 1 or more, and an element count that fits in an int)", name, j, ne)
		}
		numel = lo
		shape[nd-1-j] = int(ne)
	}
	return shape, numel, nil
}

// placeData sets g.DataOffset, the aligned start of the data section after
// the infos, and each tensor's Offset and Data, a view of the file, once
// checked to lie inside it.
func (d *ggufDecoder) placeData(g *GGUF, places []ggufPlacement) error {
	align := uint64(g.Alignment)
	start := (uint64(d.off) + align - 1) &^ (align - 1)
	g.DataOffset = int64(start)
	if len(g.Tensors) > 0 && start > uint64(len(d.data)) {
		return d.errAt(d.off, "data section would start at %d, past the end of the file (%d bytes)", start, len(d.data))
	}
	for i := range g.Tensors {
		t, p := &g.Tensors[i], places[i]
		avail := uint64(len(d.data)) - start
		if p.rel > avail || uint64(p.size) > avail-p.rel {
			return d.errAt(int(p.at), "tensor %q: data [%d, %d) lies outside the %d-byte data section",
				t.Name, p.rel, p.rel+uint64(p.size), avail)
		}
		at := int(start + p.rel)
		t.Offset = int64(at)
		t.Data = d.data[at : at+p.size : at+p.size]
	}
	return nil
}

// checkOverlaps fails when two tensors' data overlap.
func (d *ggufDecoder) checkOverlaps(g *GGUF, places []ggufPlacement) error {
	order := make([]int, len(g.Tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(g.Tensors[a].Offset, g.Tensors[b].Offset) })
	for k := 1; k < len(order); k++ {
		prev, cur := &g.Tensors[order[k-1]], &g.Tensors[order[k]]
		if prev.Offset+int64(len(prev.Data)) > cur.Offset {
			return d.errAt(int(places[order[k]].at), "tensor %q overlaps tensor %q", cur.Name, prev.Name)
		}
	}
	return nil
}

// ggufDecoder reads little-endian values with a sticky error: after the first
// failure every read returns zero values and d.err holds the FormatError.
type ggufDecoder struct {
	path string
	data []byte
	off  int
	err  error
}

func (d *ggufDecoder) errAt(off int, format string, args ...any) error {
	return &FormatError{Format: "gguf", Path: d.path, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

func (d *ggufDecoder) fail(off int, format string, args ...any) {
	if d.err == nil {
		d.err = d.errAt(off, format, args...)
	}
}

func (d *ggufDecoder) left() int { return len(d.data) - d.off }

// take returns the next n bytes, or nil after an error.
func (d *ggufDecoder) take(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(d.left()) {
		d.fail(d.off, "%s: need %d bytes, %d left", what, n, d.left())
		return nil
	}
	b := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *ggufDecoder) u32(what string) uint32 {
	if b := d.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *ggufDecoder) u64(what string) uint64 {
	if b := d.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *ggufDecoder) str(what string) string {
	at := d.off
	n := d.u64(what)
	if d.err == nil && n > uint64(d.left()) {
		d.fail(at, "%s: string length %d exceeds the %d bytes left", what, n, d.left())
	}
	return string(d.take(n, what))
}

// ggufScalarSize is the byte size of a fixed-size value type, or 0.
func ggufScalarSize(typ uint32) uint64 {
	switch typ {
	case ggufU8, ggufI8, ggufBool:
		return 1
	case ggufU16, ggufI16:
		return 2
	case ggufU32, ggufI32, ggufF32:
		return 4
	case ggufU64, ggufI64, ggufF64:
		return 8
	}
	return 0
}

func ggufKnownType(typ uint32) bool {
	return ggufScalarSize(typ) > 0 || typ == ggufString || typ == ggufArray
}

// value reads a value of a known type.
func (d *ggufDecoder) value(typ uint32, what string) any {
	switch typ {
	case ggufString:
		return d.str(what)
	case ggufArray:
		return d.array(0, what)
	}
	b := d.take(ggufScalarSize(typ), what)
	if b == nil {
		return nil
	}
	le := binary.LittleEndian
	switch typ {
	case ggufU8:
		return b[0]
	case ggufI8:
		return int8(b[0])
	case ggufU16:
		return le.Uint16(b)
	case ggufI16:
		return int16(le.Uint16(b))
	case ggufU32:
		return le.Uint32(b)
	case ggufI32:
		return int32(le.Uint32(b))
	case ggufF32:
		return math.Float32frombits(le.Uint32(b))
	case ggufBool:
		return b[0] != 0
	case ggufU64:
		return le.Uint64(b)
	case ggufI64:
		return int64(le.Uint64(b))
	default: // ggufF64
		return math.Float64frombits(le.Uint64(b))
	}
}

// array reads an array header (element type, count) and its elements.
func (d *ggufDecoder) array(depth int, what string) any {
	at := d.off
	et := d.u32(what)
	n := d.u64(what)
	if d.err != nil {
		return nil
	}
	var min uint64
	switch {
	case ggufScalarSize(et) > 0:
		min = ggufScalarSize(et)
	case et == ggufString:
		min = 8
	case et == ggufArray:
		min = 12
		if depth+1 >= ggufMaxArrayDepth {
			d.err = &UnsupportedError{"gguf", d.path, fmt.Sprintf("%s: arrays nested more than %d deep", what, ggufMaxArrayDepth)}
			return nil
		}
	default:
		d.fail(at, "%s: unknown array element type %d", what, et)
		return nil
	}
	if n > uint64(d.left())/min {
		d.fail(at+4, "%s: %d array elements cannot fit in the %d bytes left", what, n, d.left())
		return nil
	}
	if n > ggufMaxArrayLen {
		d.err = &UnsupportedError{"gguf", d.path, fmt.Sprintf("%s: array of %d elements (limit %d)", what, n, ggufMaxArrayLen)}
		return nil
	}
	switch et {
	case ggufString:
		out := make([]string, 0, capHint(n))
		for range n {
			if out = append(out, d.str(what)); d.err != nil {
				return nil
			}
		}
		return out
	case ggufArray:
		out := make([]any, 0, capHint(n))
		for range n {
			if out = append(out, d.array(depth+1, what)); d.err != nil {
				return nil
			}
		}
		return out
	}
	b := d.take(n*min, what)
	if b == nil {
		return nil
	}
	le := binary.LittleEndian
	switch et {
	case ggufU8:
		return fixedArray(b, 1, func(b []byte) uint8 { return b[0] })
	case ggufI8:
		return fixedArray(b, 1, func(b []byte) int8 { return int8(b[0]) })
	case ggufU16:
		return fixedArray(b, 2, le.Uint16)
	case ggufI16:
		return fixedArray(b, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case ggufU32:
		return fixedArray(b, 4, le.Uint32)
	case ggufI32:
		return fixedArray(b, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case ggufF32:
		return fixedArray(b, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case ggufBool:
		return fixedArray(b, 1, func(b []byte) bool { return b[0] != 0 })
	case ggufU64:
		return fixedArray(b, 8, le.Uint64)
	case ggufI64:
		return fixedArray(b, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	default: // ggufF64
		return fixedArray(b, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	}
}

// capHint bounds the initial capacity for n items read one by one, so that a
// count that is wrong but still fits in a large file costs no more memory
// than the items actually read.
func capHint(n uint64) int { return int(min(n, 1<<12)) }

// fixedArray decodes len(b)/size elements of size bytes each.
func fixedArray[T any](b []byte, size int, conv func([]byte) T) []T {
	out := make([]T, len(b)/size)
	for i := range out {
		out[i] = conv(b[i*size:])
	}
	return out
}
