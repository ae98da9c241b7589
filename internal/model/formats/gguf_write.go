package formats

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
)

// KV is one GGUF metadata pair. Value has one of the Go types GGUF.KV holds.
type KV struct {
	Key   string
	Value any
}

// KVs returns the metadata in file order, ready for WriteGGUF.
func (g *GGUF) KVs() []KV {
	kv := make([]KV, len(g.Keys))
	for i, k := range g.Keys {
		kv[i] = KV{k, g.KV[k]}
	}
	return kv
}

// WriteGGUF writes a GGUF v3 file that OpenGGUF reads back: the metadata in
// the order given, then the tensors in the order given, each tensor's data
// starting at a multiple of alignment. Shapes are written reversed (ne[0] is
// the innermost dimension).
//
// alignment 0 means general.alignment from kv, or 32 if kv has none. An
// alignment other than 32 that kv does not carry is added to the metadata as
// general.alignment (uint32). Values must have the Go types GGUF.KV holds;
// an int, for one, is an error (say which width). An empty []any is written
// as an empty array of arrays.
func WriteGGUF(w io.Writer, kv []KV, tensors []Tensor, alignment int) error {
	kv, align, err := ggufWriteAlignment(kv, alignment)
	if err != nil {
		return err
	}
	b := []byte(ggufMagic)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kv)))

	seen := make(map[string]bool, len(kv))
	for _, p := range kv {
		if seen[p.Key] {
			return fmt.Errorf("gguf: write: duplicate metadata key %q", p.Key)
		}
		seen[p.Key] = true
		typ, ok := ggufTypeOf(p.Value)
		if !ok {
			return fmt.Errorf("gguf: write: key %q: unsupported value type %T", p.Key, p.Value)
		}
		b = appendGGUFString(b, p.Key)
		b = binary.LittleEndian.AppendUint32(b, typ)
		if b, err = appendGGUFValue(b, p.Value, 0); err != nil {
			return fmt.Errorf("gguf: write: key %q: %w", p.Key, err)
		}
	}

	names := make(map[string]bool, len(tensors))
	var rel uint64 // offset of the next tensor in the data section
	for i := range tensors {
		t := &tensors[i]
		if names[t.Name] {
			return fmt.Errorf("gguf: write: duplicate tensor %q", t.Name)
		}
		names[t.Name] = true
		typ, err := ggufCheckTensor(t)
		if err != nil {
			return err
		}
		b = appendGGUFString(b, t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Shape)))
		for j := len(t.Shape) - 1; j >= 0; j-- {
			b = binary.LittleEndian.AppendUint64(b, uint64(t.Shape[j]))
		}
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = binary.LittleEndian.AppendUint64(b, rel)
		rel += alignUp(uint64(len(t.Data)), align)
	}
	if len(tensors) > 0 { // a file without tensors ends after its metadata
		b = append(b, make([]byte, alignUp(uint64(len(b)), align)-uint64(len(b)))...)
	}

	bw := bufio.NewWriter(w)
	bw.Write(b)
	var pad []byte
	for i := range tensors {
		n := uint64(len(tensors[i].Data))
		bw.Write(tensors[i].Data)
		if p := alignUp(n, align) - n; p > 0 {
			if uint64(len(pad)) < p {
				pad = make([]byte, p)
			}
			bw.Write(pad[:p])
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

func alignUp(x, align uint64) uint64 { return (x + align - 1) &^ (align - 1) }

// ggufWriteAlignment settles the alignment and adds general.alignment to kv
// when the reader would otherwise assume 32.
func ggufWriteAlignment(kv []KV, alignment int) ([]KV, uint64, error) {
	var fromKV uint64
	for _, p := range kv {
		if p.Key == "general.alignment" {
			a, ok := asUint(p.Value)
			if !ok {
				return nil, 0, fmt.Errorf("gguf: write: general.alignment has type %T, want an unsigned integer", p.Value)
			}
			fromKV = a
		}
	}
	a := uint64(alignment)
	switch {
	case alignment < 0:
		return nil, 0, fmt.Errorf("gguf: write: alignment %d is negative", alignment)
	case alignment == 0 && fromKV != 0:
		a = fromKV
	case alignment == 0:
		a = ggufDefaultAlignment
	case fromKV != 0 && fromKV != a:
		return nil, 0, fmt.Errorf("gguf: write: alignment %d disagrees with general.alignment %d", alignment, fromKV)
	}
	if a&(a-1) != 0 || a > ggufMaxAlignment {
		return nil, 0, fmt.Errorf("gguf: write: alignment %d is not a power of two up to %d", a, ggufMaxAlignment)
	}
	if fromKV == 0 && a != ggufDefaultAlignment {
		kv = append(kv[:len(kv):len(kv)], KV{"general.alignment", uint32(a)})
	}
	return kv, a, nil
}

// ggufCheckTensor checks that t can be written and returns its ggml type id.
func ggufCheckTensor(t *Tensor) (uint32, error) {
	typ, ok := t.DType.GGMLType()
	if !ok {
		return 0, fmt.Errorf("gguf: write: tensor %q: GGUF cannot store %s", t.Name, t.DType)
	}
	if len(t.Shape) > ggufMaxDims {
		return 0, fmt.Errorf("gguf: write: tensor %q: shape %v has more than %d dimensions", t.Name, t.Shape, ggufMaxDims)
	}
	for _, d := range t.Shape {
		if d <= 0 {
			return 0, fmt.Errorf("gguf: write: tensor %q: shape %v has a dimension < 1", t.Name, t.Shape)
		}
	}
	if n := len(t.Shape); n > 0 && t.Shape[n-1]%t.DType.BlockSize() != 0 {
		return 0, fmt.Errorf("gguf: write: tensor %q: rows of %d elements are not whole %s blocks of %d",
			t.Name, t.Shape[n-1], t.DType, t.DType.BlockSize())
	}
	numel, ok := shapeNumel(t.Shape)
	size, ok2 := t.DType.ByteSize(numel)
	if !ok || !ok2 || size != len(t.Data) {
		return 0, fmt.Errorf("gguf: write: tensor %q: %s %v needs %d bytes, Data has %d", t.Name, t.DType, t.Shape, size, len(t.Data))
	}
	return typ, nil
}

// ggufTypeOf returns the GGUF value type of v.
func ggufTypeOf(v any) (uint32, bool) {
	switch v.(type) {
	case uint8:
		return ggufU8, true
	case int8:
		return ggufI8, true
	case uint16:
		return ggufU16, true
	case int16:
		return ggufI16, true
	case uint32:
		return ggufU32, true
	case int32:
		return ggufI32, true
	case float32:
		return ggufF32, true
	case bool:
		return ggufBool, true
	case string:
		return ggufString, true
	case uint64:
		return ggufU64, true
	case int64:
		return ggufI64, true
	case float64:
		return ggufF64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool,
		[]string, []uint64, []int64, []float64, []any:
		return ggufArray, true
	}
	return 0, false
}

func appendGGUFString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendArray appends an array header and the elements of s.
func appendArray[T any](b []byte, typ uint32, s []T, elem func([]byte, T) []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	for _, v := range s {
		b = elem(b, v)
	}
	return b
}

// appendGGUFValue appends v without its type tag. depth counts enclosing
// arrays.
func appendGGUFValue(b []byte, v any, depth int) ([]byte, error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Len() > ggufMaxArrayLen {
		return nil, fmt.Errorf("array of %d elements (limit %d)", rv.Len(), ggufMaxArrayLen)
	}
	le := binary.LittleEndian
	u8 := func(b []byte, v uint8) []byte { return append(b, v) }
	i8 := func(b []byte, v int8) []byte { return append(b, uint8(v)) }
	u16 := le.AppendUint16
	i16 := func(b []byte, v int16) []byte { return le.AppendUint16(b, uint16(v)) }
	u32 := le.AppendUint32
	i32 := func(b []byte, v int32) []byte { return le.AppendUint32(b, uint32(v)) }
	f32 := func(b []byte, v float32) []byte { return le.AppendUint32(b, math.Float32bits(v)) }
	boolean := func(b []byte, v bool) []byte {
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	}
	u64 := le.AppendUint64
	i64 := func(b []byte, v int64) []byte { return le.AppendUint64(b, uint64(v)) }
	f64 := func(b []byte, v float64) []byte { return le.AppendUint64(b, math.Float64bits(v)) }

	switch v := v.(type) {
	case uint8:
		return u8(b, v), nil
	case int8:
		return i8(b, v), nil
	case uint16:
		return u16(b, v), nil
	case int16:
		return i16(b, v), nil
	case uint32:
		return u32(b, v), nil
	case int32:
		return i32(b, v), nil
	case float32:
		return f32(b, v), nil
	case bool:
		return boolean(b, v), nil
	case string:
		return appendGGUFString(b, v), nil
	case uint64:
		return u64(b, v), nil
	case int64:
		return i64(b, v), nil
	case float64:
		return f64(b, v), nil
	case []uint8:
		return appendArray(b, ggufU8, v, u8), nil
	case []int8:
		return appendArray(b, ggufI8, v, i8), nil
	case []uint16:
		return appendArray(b, ggufU16, v, u16), nil
	case []int16:
		return appendArray(b, ggufI16, v, i16), nil
	case []uint32:
		return appendArray(b, ggufU32, v, u32), nil
	case []int32:
		return appendArray(b, ggufI32, v, i32), nil
	case []float32:
		return appendArray(b, ggufF32, v, f32), nil
	case []bool:
		return appendArray(b, ggufBool, v, boolean), nil
	case []string:
		return appendArray(b, ggufString, v, appendGGUFString), nil
	case []uint64:
		return appendArray(b, ggufU64, v, u64), nil
	case []int64:
		return appendArray(b, ggufI64, v, i64), nil
	case []float64:
		return appendArray(b, ggufF64, v, f64), nil
	case []any:
		return appendGGUFAnyArray(b, v, depth)
	}
	return nil, fmt.Errorf("unsupported value type %T", v)
}

// appendGGUFAnyArray appends a []any whose elements share one GGUF type.
func appendGGUFAnyArray(b []byte, v []any, depth int) ([]byte, error) {
	et := ggufArray
	if len(v) > 0 {
		var ok bool
		if et, ok = ggufTypeOf(v[0]); !ok {
			return nil, fmt.Errorf("array element 0: unsupported value type %T", v[0])
		}
	}
	if et == ggufArray && depth+1 >= ggufMaxArrayDepth {
		return nil, fmt.Errorf("arrays nested more than %d deep", ggufMaxArrayDepth)
	}
	b = binary.LittleEndian.AppendUint32(b, et)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(v)))
	for i, e := range v {
		if t, _ := ggufTypeOf(e); t != et || e == nil {
			return nil, fmt.Errorf("array element %d has type %T, element 0 has %T", i, e, v[0])
		}
		var err error
		if b, err = appendGGUFValue(b, e, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}
