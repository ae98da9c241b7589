package formats

import (
	"fmt"
	"math"
	"math/bits"
)

// DType is the storage type of a tensor: a plain element type, or a ggml
// block-quantized type whose elements are stored in fixed-size blocks.
// The zero DType is invalid.
type DType uint8

// Plain element types. The names are the safetensors dtype strings.
const (
	F32     DType = iota + 1 // IEEE binary32
	F16                      // IEEE binary16
	BF16                     // bfloat16
	F64                      // IEEE binary64
	I8                       // int8
	U8                       // uint8
	I16                      // int16
	U16                      // uint16
	I32                      // int32
	U32                      // uint32 (MLX packed 4-bit weights)
	I64                      // int64
	U64                      // uint64
	BOOL                     // one byte, 0 or 1
	F8_E4M3                  // float8 e4m3fn
	F8_E5M2                  // float8 e5m2
)

// ggml block-quantized types (ggml-common.h). Only GGUF files hold them.
const (
	Q4_0 DType = iota + 32
	Q4_1
	Q5_0
	Q5_1
	Q8_0
	Q8_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	Q8_K
	IQ2_XXS
	IQ2_XS
	IQ3_XXS
	IQ1_S
	IQ4_NL
	IQ3_S
	IQ2_S
	IQ4_XS
	IQ1_M
	TQ1_0
	TQ2_0
	MXFP4
)

// dtypeInfo describes one DType. A plain type is a block of one element.
type dtypeInfo struct {
	name        string
	blockElems  int
	blockBytes  int
	ggml        int32 // ggml_type id, or -1 if GGUF cannot store it
	safetensors bool  // a safetensors dtype
}

// noGGML marks a DType without a ggml_type id.
const noGGML = -1

var dtypes = [...]dtypeInfo{
	F32:     {"F32", 1, 4, 0, true},
	F16:     {"F16", 1, 2, 1, true},
	BF16:    {"BF16", 1, 2, 30, true},
	F64:     {"F64", 1, 8, 28, true},
	I8:      {"I8", 1, 1, 24, true},
	U8:      {"U8", 1, 1, noGGML, true},
	I16:     {"I16", 1, 2, 25, true},
	U16:     {"U16", 1, 2, noGGML, true},
	I32:     {"I32", 1, 4, 26, true},
	U32:     {"U32", 1, 4, noGGML, true},
	I64:     {"I64", 1, 8, 27, true},
	U64:     {"U64", 1, 8, noGGML, true},
	BOOL:    {"BOOL", 1, 1, noGGML, true},
	F8_E4M3: {"F8_E4M3", 1, 1, noGGML, true},
	F8_E5M2: {"F8_E5M2", 1, 1, noGGML, true},

	// Block sizes and bytes follow the static_asserts of ggml-common.h.
	Q4_0:    {"Q4_0", 32, 18, 2, false},
	Q4_1:    {"Q4_1", 32, 20, 3, false},
	Q5_0:    {"Q5_0", 32, 22, 6, false},
	Q5_1:    {"Q5_1", 32, 24, 7, false},
	Q8_0:    {"Q8_0", 32, 34, 8, false},
	Q8_1:    {"Q8_1", 32, 36, 9, false},
	Q2_K:    {"Q2_K", 256, 84, 10, false},
	Q3_K:    {"Q3_K", 256, 110, 11, false},
	Q4_K:    {"Q4_K", 256, 144, 12, false},
	Q5_K:    {"Q5_K", 256, 176, 13, false},
	Q6_K:    {"Q6_K", 256, 210, 14, false},
	Q8_K:    {"Q8_K", 256, 292, 15, false},
	IQ2_XXS: {"IQ2_XXS", 256, 66, 16, false},
	IQ2_XS:  {"IQ2_XS", 256, 74, 17, false},
	IQ3_XXS: {"IQ3_XXS", 256, 98, 18, false},
	IQ1_S:   {"IQ1_S", 256, 50, 19, false},
	IQ4_NL:  {"IQ4_NL", 32, 18, 20, false},
	IQ3_S:   {"IQ3_S", 256, 110, 21, false},
	IQ2_S:   {"IQ2_S", 256, 82, 22, false},
	IQ4_XS:  {"IQ4_XS", 256, 136, 23, false},
	IQ1_M:   {"IQ1_M", 256, 56, 29, false},
	TQ1_0:   {"TQ1_0", 256, 54, 34, false},
	TQ2_0:   {"TQ2_0", 256, 66, 35, false},
	MXFP4:   {"MXFP4", 32, 17, 39, false},
}

func (d DType) info() (dtypeInfo, bool) {
	if int(d) >= len(dtypes) || dtypes[d].name == "" {
		return dtypeInfo{}, false
	}
	return dtypes[d], true
}

// Valid reports whether d is one of the DType constants.
func (d DType) Valid() bool {
	_, ok := d.info()
	return ok
}

// String returns the safetensors name of a plain type ("F32", "BF16") or the
// ggml name of a quantized one ("Q4_K").
func (d DType) String() string {
	if in, ok := d.info(); ok {
		return in.name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// BlockSize is the number of elements in one storage block: 1 for plain types,
// 32 or 256 for quantized ones. It is 0 for an invalid DType.
func (d DType) BlockSize() int {
	in, _ := d.info()
	return in.blockElems
}

// BytesPerBlock is the byte size of one storage block; for a plain type it is
// the element size. It is 0 for an invalid DType.
func (d DType) BytesPerBlock() int {
	in, _ := d.info()
	return in.blockBytes
}

// IsQuantized reports whether d is a ggml block-quantized type.
func (d DType) IsQuantized() bool { return d.BlockSize() > 1 }

// ByteSize returns the bytes needed for numel elements:
// numel/BlockSize()*BytesPerBlock(). ok is false if d is invalid, numel is
// negative or not a whole number of blocks, or the size overflows an int.
func (d DType) ByteSize(numel int) (size int, ok bool) {
	in, valid := d.info()
	if !valid || numel < 0 || numel%in.blockElems != 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(numel/in.blockElems), uint64(in.blockBytes))
	if hi != 0 || lo > math.MaxInt {
		return 0, false
	}
	return int(lo), true
}

// GGMLType returns the ggml_type id GGUF uses for d. ok is false for types GGUF
// cannot store (U8, U16, U32, U64, BOOL, F8_*).
func (d DType) GGMLType() (id uint32, ok bool) {
	in, valid := d.info()
	if !valid || in.ggml == noGGML {
		return 0, false
	}
	return uint32(in.ggml), true
}

// DTypeFromGGML returns the DType of a ggml_type id.
func DTypeFromGGML(id uint32) (DType, bool) {
	if id < uint32(len(ggmlToDType)) && ggmlToDType[id] != 0 {
		return ggmlToDType[id], true
	}
	return 0, false
}

// ParseDType returns the DType with the given name, as String returns it. For
// plain types these are the safetensors dtype strings.
func ParseDType(name string) (DType, bool) {
	for d, in := range dtypes {
		if in.name == name && name != "" {
			return DType(d), true
		}
	}
	return 0, false
}

var ggmlToDType = func() (m [64]DType) {
	for d, in := range dtypes {
		if in.name != "" && in.ggml != noGGML {
			m[in.ggml] = DType(d)
		}
	}
	return m
}()
