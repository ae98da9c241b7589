package quant

import "math"

// F16ToF32 converts an IEEE 754 binary16 value, given as its bits, to float32.
// It is exact for every input: normals, subnormals, infinities and NaNs.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN; keep the payload
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias 15 -> 127
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: value is man * 2^-24, which is a normal float32.
	f := float32(man) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(f))
}

// F32ToF16 converts a float32 to binary16 bits with round-to-nearest-even,
// as F16C's VCVTPS2PH does with rounding mode 0. Overflow gives infinity and
// NaNs stay NaNs.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13) // quiet NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal or zero in half precision.
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the correct rounding
	}
	return sign | uint16(h)
}

// BF16ToF32 converts bfloat16 bits to float32 (exact).
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 converts a float32 to bfloat16 bits with round-to-nearest-even;
// NaNs stay quiet NaNs.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F32sToF16 returns v rounded to IEEE halves, element by element (F32ToF16).
func F32sToF16(v []float32) []uint16 {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = F32ToF16(x)
	}
	return h
}

// F32sToBF16 returns v rounded to bfloat16s, element by element (F32ToBF16).
func F32sToBF16(v []float32) []uint16 {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = F32ToBF16(x)
	}
	return h
}
