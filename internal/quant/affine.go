package quant

import (
	"fmt"
	"math"
)

// Affine quantization, MLX's "affine" mode, exactly as mlx-community
// checkpoints store it.
//
// A weight [rows, cols] is cut into groups of GroupSize consecutive elements
// of a row. Each group has a scale s and a bias b, and each element an
// unsigned Bits-bit code q, with
//
//	value = s·q + b        (q in [0, 2^Bits-1])
//
// Codes are packed into little-endian uint32 words, row by row: word w of a
// row holds elements 32/Bits·w … 32/Bits·(w+1)-1, element j of the word in
// bits [Bits·j, Bits·(j+1)), least significant first. Shapes on disk:
// weight U32 [rows, cols·Bits/32], scales and biases [rows, cols/GroupSize]
// in the model's float type.
//
// The reference dequantization computes value = float32(s·q) + b in float32,
// two roundings (for f16 and bf16 scales the product is exact). Every kernel
// is tested against DequantizeAffine.

// AffineBits reports whether bits is a width this package packs: 2, 4 or 8
// (the widths whose codes never straddle a word).
func AffineBits(bits int) bool { return bits == 2 || bits == 4 || bits == 8 }

// AffineGroupSize reports whether g is a group size MLX allows: 32, 64 or 128.
func AffineGroupSize(g int) bool { return g == 32 || g == 64 || g == 128 }

// CheckAffine returns an error unless a [rows, cols] matrix can be
// quantized with these parameters.
func CheckAffine(cols, bits, groupSize int) error {
	switch {
	case !AffineBits(bits):
		return fmt.Errorf("quant: %d-bit affine quantization is not supported (2, 4 or 8)", bits)
	case !AffineGroupSize(groupSize):
		return fmt.Errorf("quant: group size %d is not supported (32, 64 or 128)", groupSize)
	case cols <= 0 || cols%groupSize != 0:
		return fmt.Errorf("quant: %d columns are not a whole number of groups of %d", cols, groupSize)
	}
	return nil
}

// affineEps is the smallest scale MLX allows.
const affineEps = 1e-7

// AffineParams returns the scale and bias MLX chooses for one group:
// the range [min, max] is cut into 2^bits-1 steps, and the edge with the
// larger magnitude is moved onto the grid so that it, and with it 0.0 when
// the range spans it, is represented exactly:
//
//	s = max((max-min)/(2^bits-1), 1e-7), negated unless |min| > |max|
//	edge = min if |min| > |max|, else max
//	q0 = round(edge/s); if q0 != 0 { s = edge/q0; b = edge } else { b = 0 }
//
// Arithmetic is float32 and round is half away from zero, as in MLX's
// Metal kernel. s and b are returned unrounded: codes are computed with
// them, and only the stored copies are rounded to the model's float type.
func AffineParams(group []float32, bits int) (scale, bias float32) {
	lo, hi := group[0], group[0]
	for _, v := range group[1:] {
		lo = min(lo, v)
		hi = max(hi, v)
	}
	nBins := float32(int(1)<<bits - 1)
	scale = max((hi-lo)/nBins, affineEps)
	side := abs32(lo) > abs32(hi)
	edge := hi
	if side {
		edge = lo
	} else {
		scale = -scale
	}
	q0 := round32(edge / scale)
	if q0 == 0 {
		return scale, 0
	}
	return edge / q0, edge
}

// AffineCode is the code of v in a group with parameters s and b:
// clip(round((v-b)/s), 0, 2^bits-1).
func AffineCode(v, scale, bias float32, bits int) uint8 {
	q := round32((v - bias) / scale)
	if !(q >= 0) { // also NaN
		return 0
	}
	return uint8(min(q, float32(int(1)<<bits-1)))
}

// QuantizeAffine quantizes w, row-major [len(w)/cols, cols], group by
// group. It returns the packed codes, [rows, cols·bits/32], and each
// group's unrounded scale and bias, [rows, cols/groupSize]; round them to
// the storage type with F32ToF16 or F32ToBF16 (or keep them as float32).
func QuantizeAffine(w []float32, cols, bits, groupSize int) (packed []uint32, scales, biases []float32, err error) {
	if err := CheckAffine(cols, bits, groupSize); err != nil {
		return nil, nil, nil, err
	}
	if len(w)%cols != 0 {
		return nil, nil, nil, fmt.Errorf("quant: %d values are not a whole number of rows of %d", len(w), cols)
	}
	groups := len(w) / groupSize
	scales, biases = make([]float32, groups), make([]float32, groups)
	codes := make([]uint8, len(w))
	for g := range groups {
		grp := w[g*groupSize : (g+1)*groupSize]
		s, b := AffineParams(grp, bits)
		scales[g], biases[g] = s, b
		for i, v := range grp {
			codes[g*groupSize+i] = AffineCode(v, s, b, bits)
		}
	}
	return PackAffine(codes, bits), scales, biases, nil
}

// PackAffine packs codes (each < 2^bits) into words, element j of a word
// at bits [bits·j, bits·(j+1)). len(codes)·bits must be a multiple of 32.
func PackAffine(codes []uint8, bits int) []uint32 {
	per := 32 / bits
	if !AffineBits(bits) || len(codes)%per != 0 {
		panic(fmt.Sprintf("quant: PackAffine of %d %d-bit codes", len(codes), bits))
	}
	out := make([]uint32, len(codes)/per)
	for i, c := range codes {
		out[i/per] |= uint32(c) << (bits * (i % per))
	}
	return out
}

// UnpackAffine returns the codes of packed words, 32/bits per word.
func UnpackAffine(packed []uint32, bits int) []uint8 {
	if !AffineBits(bits) {
		panic(fmt.Sprintf("quant: UnpackAffine of %d-bit codes", bits))
	}
	per := 32 / bits
	mask := uint32(1)<<bits - 1
	out := make([]uint8, len(packed)*per)
	for i := range out {
		out[i] = uint8(packed[i/per] >> (bits * (i % per)) & mask)
	}
	return out
}

// AffineCodeAt returns element i of a packed row.
func AffineCodeAt(packed []uint32, i, bits int) uint32 {
	per := 32 / bits
	return packed[i/per] >> (bits * (i % per)) & (1<<bits - 1)
}

// DequantizeAffine is the reference dequantization: it sets dst, row-major
// [rows, cols] with cols = len(dst)/rows, to float32(s·q) + b for each
// element's group scale s, bias b (already in float32, converted from their
// storage type) and code q. packed is [rows, cols·bits/32] and scales and
// biases are [rows, cols/groupSize].
func DequantizeAffine(dst []float32, packed []uint32, scales, biases []float32, bits, groupSize int) {
	per := 32 / bits
	if !AffineBits(bits) || groupSize <= 0 || len(dst) != len(packed)*per || len(dst) != len(scales)*groupSize ||
		len(biases) != len(scales) {
		panic(fmt.Sprintf("quant: DequantizeAffine of %d values from %d words, %d scales, %d biases (%d bits, groups of %d)",
			len(dst), len(packed), len(scales), len(biases), bits, groupSize))
	}
	// Loops over groups and words, not i/per and i/groupSize per element:
	// divisions by values known only at run time cost more than the
	// arithmetic (a 4-bit row of 2048 took 14 µs, now 3-4).
	mask := uint32(1)<<bits - 1
	if groupSize%per == 0 {
		wpg, shift := groupSize/per, uint(bits)&31
		for g, sc := range scales {
			bi := biases[g]
			out := dst[g*groupSize : (g+1)*groupSize]
			for w, word := range packed[g*wpg : (g+1)*wpg] {
				o := out[w*per : (w+1)*per]
				for j := range o {
					o[j] = float32(sc*float32(word&mask)) + bi
					word >>= shift
				}
			}
		}
		return
	}
	i, g, inGroup := 0, 0, 0
	for _, word := range packed {
		for j := range per {
			q := word >> (bits * j) & mask
			dst[i] = float32(scales[g]*float32(q)) + biases[g]
			i++
			if inGroup++; inGroup == groupSize {
				inGroup, g = 0, g+1
			}
		}
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// round32 rounds half away from zero, as Metal's round.
func round32(v float32) float32 { return float32(math.Round(float64(v))) }
