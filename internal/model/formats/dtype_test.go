package formats

import (
	"math"
	"testing"
)

func TestDTypeSizes(t *testing.T) {
	cases := []struct {
		d           DType
		name        string
		block, size int
		ggml        int // -1: none
	}{
		{F32, "F32", 1, 4, 0}, {F16, "F16", 1, 2, 1}, {BF16, "BF16", 1, 2, 30}, {F64, "F64", 1, 8, 28},
		{I8, "I8", 1, 1, 24}, {I16, "I16", 1, 2, 25}, {I32, "I32", 1, 4, 26}, {I64, "I64", 1, 8, 27},
		{U8, "U8", 1, 1, -1}, {U16, "U16", 1, 2, -1}, {U32, "U32", 1, 4, -1}, {U64, "U64", 1, 8, -1},
		{BOOL, "BOOL", 1, 1, -1}, {F8_E4M3, "F8_E4M3", 1, 1, -1}, {F8_E5M2, "F8_E5M2", 1, 1, -1},
		{Q4_0, "Q4_0", 32, 18, 2}, {Q4_1, "Q4_1", 32, 20, 3}, {Q5_0, "Q5_0", 32, 22, 6}, {Q5_1, "Q5_1", 32, 24, 7},
		{Q8_0, "Q8_0", 32, 34, 8}, {Q8_1, "Q8_1", 32, 36, 9},
		{Q2_K, "Q2_K", 256, 84, 10}, {Q3_K, "Q3_K", 256, 110, 11}, {Q4_K, "Q4_K", 256, 144, 12},
		{Q5_K, "Q5_K", 256, 176, 13}, {Q6_K, "Q6_K", 256, 210, 14}, {Q8_K, "Q8_K", 256, 292, 15},
		{IQ2_XXS, "IQ2_XXS", 256, 66, 16}, {IQ2_XS, "IQ2_XS", 256, 74, 17}, {IQ3_XXS, "IQ3_XXS", 256, 98, 18},
		{IQ1_S, "IQ1_S", 256, 50, 19}, {IQ4_NL, "IQ4_NL", 32, 18, 20}, {IQ3_S, "IQ3_S", 256, 110, 21},
		{IQ2_S, "IQ2_S", 256, 82, 22}, {IQ4_XS, "IQ4_XS", 256, 136, 23}, {IQ1_M, "IQ1_M", 256, 56, 29},
		{TQ1_0, "TQ1_0", 256, 54, 34}, {TQ2_0, "TQ2_0", 256, 66, 35}, {MXFP4, "MXFP4", 32, 17, 39},
	}
	for _, c := range cases {
		if c.d.String() != c.name || c.d.BlockSize() != c.block || c.d.BytesPerBlock() != c.size || !c.d.Valid() {
			t.Errorf("%d: %s block %d bytes %d, want %s %d %d", uint8(c.d), c.d, c.d.BlockSize(), c.d.BytesPerBlock(), c.name, c.block, c.size)
		}
		if d, ok := ParseDType(c.name); d != c.d || !ok {
			t.Errorf("ParseDType(%q) = %v, %v", c.name, d, ok)
		}
		id, ok := c.d.GGMLType()
		if c.ggml < 0 {
			if ok {
				t.Errorf("%s.GGMLType() = %d, want none", c.d, id)
			}
			continue
		}
		if !ok || id != uint32(c.ggml) {
			t.Errorf("%s.GGMLType() = %d, %v, want %d", c.d, id, ok, c.ggml)
		}
		if d, ok := DTypeFromGGML(id); d != c.d || !ok {
			t.Errorf("DTypeFromGGML(%d) = %v, %v, want %s", id, d, ok, c.d)
		}
		if size, ok := c.d.ByteSize(3 * c.block); size != 3*c.size || !ok {
			t.Errorf("%s.ByteSize(%d) = %d, %v, want %d", c.d, 3*c.block, size, ok, 3*c.size)
		}
	}
	for _, id := range []uint32{4, 5, 31, 32, 33, 36, 37, 38, 40, 63, 64, 1 << 31} {
		if d, ok := DTypeFromGGML(id); ok {
			t.Errorf("DTypeFromGGML(%d) = %s, want none", id, d)
		}
	}
	if s := DType(0).String(); s != "DType(0)" || DType(0).Valid() || DType(200).Valid() {
		t.Errorf("invalid DType: String %q", s)
	}
	if _, ok := ParseDType(""); ok {
		t.Errorf("ParseDType(\"\") ok")
	}
	bad := []struct {
		d     DType
		numel int
	}{{Q4_0, 33}, {F32, -1}, {F64, math.MaxInt / 4}, {DType(0), 1}, {Q8_K, math.MaxInt / 256 * 256}}
	for _, c := range bad {
		if size, ok := c.d.ByteSize(c.numel); ok {
			t.Errorf("%s.ByteSize(%d) = %d, want not ok", c.d, c.numel, size)
		}
	}
}
