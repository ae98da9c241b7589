package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// QuantizeGGML encodes src (a whole number of blocks) in format t with a
// simple round-to-nearest quantizer: each block's scales come from its
// range, each code is the nearest level under the scales as stored. The
// blocks are valid and close to src, not the best ones ggml's quantizer
// searches for; llama.cpp's quantizer is the tool for real models. Tests
// and test models use it to write every format.
func QuantizeGGML(t GGML, src []float32) ([]byte, error) {
	be, bb := t.BlockElems(), t.BlockBytes()
	if be == 0 {
		return nil, fmt.Errorf("quant: unknown block format %v", t)
	}
	if len(src)%be != 0 {
		return nil, fmt.Errorf("quant: %v: %d elements are not a whole number of %d-element blocks", t, len(src), be)
	}
	out := make([]byte, len(src)/be*bb)
	for i := range len(src) / be {
		x, b := src[i*be:(i+1)*be], out[i*bb:(i+1)*bb]
		switch t {
		case Q8_0:
			d := putF16(b, 0, maxAbs(x)/127)
			for j, v := range x {
				b[2+j] = byte(int8(clampRound(v, d, -127, 127)))
			}
		case Q4_0, Q5_0:
			// d = signed extreme / -8 (-16), as ggml: the extreme gets code 0.
			half := 8
			if t == Q5_0 {
				half = 16
			}
			d := putF16(b, 0, signedMax(x)/float32(-half))
			codes := make([]int, 32)
			for j, v := range x {
				codes[j] = clampRound(v, d, -half, half-1) + half
			}
			if t == Q4_0 {
				packNibbles(b[2:18], codes)
			} else {
				packQ5(b[2:6], b[6:22], codes)
			}
		case Q4_1, Q5_1:
			top := 15
			if t == Q5_1 {
				top = 31
			}
			lo, hi := minMax(x)
			d := putF16(b, 0, (hi-lo)/float32(top))
			m := putF16(b, 2, lo)
			codes := make([]int, 32)
			for j, v := range x {
				codes[j] = clampRound(v-m, d, 0, top)
			}
			if t == Q4_1 {
				packNibbles(b[4:20], codes)
			} else {
				packQ5(b[4:8], b[8:24], codes)
			}
		case IQ4_NL:
			d := putF16(b, 0, signedMax(x)/-127)
			codes := make([]int, 32)
			for j, v := range x {
				codes[j] = nearestIQ4(v, d)
			}
			packNibbles(b[2:18], codes)
		case IQ4_XS:
			quantizeIQ4XS(b, x)
		case Q2_K:
			quantizeQ2K(b, x)
		case Q3_K:
			quantizeQ3K(b, x)
		case Q4_K, Q5_K:
			quantizeQ45K(t, b, x)
		case Q6_K:
			quantizeQ6K(b, x)
		}
	}
	return out, nil
}

// putF16 stores v as a half at b[off:] and returns the stored value.
func putF16(b []byte, off int, v float32) float32 {
	h := F32ToF16(v)
	binary.LittleEndian.PutUint16(b[off:], h)
	return F16ToF32(h)
}

func maxAbs(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, abs32(v))
	}
	return m
}

// signedMax is the element of largest magnitude, with its sign.
func signedMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if abs32(v) > abs32(m) {
			m = v
		}
	}
	return m
}

// minMax is the range of x, widened to include 0.
func minMax(x []float32) (lo, hi float32) {
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// clampRound is round(v/d) clamped to [lo, hi]; 0 when d is 0.
func clampRound(v, d float32, lo, hi int) int {
	if d == 0 {
		return max(lo, min(hi, 0))
	}
	q := int(math.Round(float64(v / d)))
	return max(lo, min(hi, q))
}

// nearestIQ4 is the index of the level d·kvalues[i] nearest v.
func nearestIQ4(v, d float32) int {
	best, bestErr := 0, float32(math.Inf(1))
	for i, k := range KValuesIQ4NL {
		if e := abs32(v - d*float32(k)); e < bestErr {
			best, bestErr = i, e
		}
	}
	return best
}

// packNibbles stores 32 4-bit codes as ggml's 32-element blocks do: byte j
// holds code j in its low nibble and code j+16 in its high one.
func packNibbles(qs []byte, codes []int) {
	for j := range 16 {
		qs[j] = byte(codes[j]&15 | (codes[j+16]&15)<<4)
	}
}

// packQ5 stores 32 5-bit codes: the nibbles as packNibbles, the fifth bits
// in the little-endian word qh.
func packQ5(qh, qs []byte, codes []int) {
	packNibbles(qs, codes)
	var h uint32
	for j, c := range codes {
		h |= uint32(c>>4&1) << j
	}
	binary.LittleEndian.PutUint32(qh, h)
}

// quantizeIQ4XS: a signed scale per sub-block of 32, quantized to 6 bits
// (ls-32) under the block's d.
func quantizeIQ4XS(b []byte, x []float32) {
	var sub [8]float32
	for s := range 8 {
		sub[s] = signedMax(x[32*s:32*s+32]) / -127
	}
	d := putF16(b, 0, signedMax(sub[:])/-32)
	var sh uint16
	for s := range 8 {
		ls := clampRound(sub[s], d, -32, 31) + 32
		b[4+s/2] |= byte(ls&15) << (4 * (s % 2))
		sh |= uint16(ls>>4) << (2 * s)
		dl := d * float32(ls-32)
		codes := make([]int, 32)
		for j, v := range x[32*s : 32*s+32] {
			codes[j] = nearestIQ4(v, dl)
		}
		packNibbles(b[8+16*s:24+16*s], codes)
	}
	binary.LittleEndian.PutUint16(b[2:], sh)
}

// quantizeQ2K: per sub-block of 16 a min (≤ 0) and a step over 3 levels,
// each quantized to 4 bits under d and dmin.
func quantizeQ2K(b []byte, x []float32) {
	var steps, mins [16]float32
	for s := range 16 {
		lo, hi := minMax(x[16*s : 16*s+16])
		steps[s], mins[s] = (hi-lo)/3, -lo
	}
	d := putF16(b, 80, maxOf(steps[:])/15)
	dmin := putF16(b, 82, maxOf(mins[:])/15)
	for s := range 16 {
		sc := clampRound(steps[s], d, 0, 15)
		// Round the min up so that the sub-block's lowest value stays in range.
		m := 0
		if dmin > 0 {
			m = min(15, int(math.Ceil(float64(mins[s]/dmin))))
		}
		b[s] = byte(sc | m<<4)
		dl, ml := d*float32(sc), dmin*float32(m)
		for l := range 16 {
			e := 16*s + l
			q := clampRound(x[e]+ml, dl, 0, 3)
			b[16+32*(e/128)+e%32] |= byte(q) << (2 * (e % 128 / 32))
		}
	}
}

// quantizeQ3K: a signed step per sub-block of 16 over 8 levels (-4..3),
// quantized to 6 bits (sc-32) under d.
func quantizeQ3K(b []byte, x []float32) {
	var steps [16]float32
	for s := range 16 {
		steps[s] = signedMax(x[16*s:16*s+16]) / -4
	}
	d := putF16(b, 108, signedMax(steps[:])/-32)
	for s := range 16 {
		sc := clampRound(steps[s], d, -32, 31) + 32
		if s < 8 {
			b[96+s] |= byte(sc & 15)
		} else {
			b[96+s-8] |= byte(sc&15) << 4
		}
		b[96+8+s%4] |= byte(sc>>4) << (2 * (s / 4))
		dl := d * float32(sc-32)
		for l := range 16 {
			e := 16*s + l
			q := clampRound(x[e], dl, -4, 3) + 4
			b[32+32*(e/128)+e%32] |= byte(q&3) << (2 * (e % 128 / 32))
			if q >= 4 {
				b[e%32] |= 1 << (4*(e/128) + e%128/32)
			}
		}
	}
}

// quantizeQ45K: per sub-block of 32 a min (≤ 0) and a step over 15 (Q4_K)
// or 31 (Q5_K) levels, quantized to 6 bits under d and dmin and packed as
// get_scale_min_k4 reads them.
func quantizeQ45K(t GGML, b []byte, x []float32) {
	top := 15
	if t == Q5_K {
		top = 31
	}
	var steps, mins [8]float32
	for s := range 8 {
		lo, hi := minMax(x[32*s : 32*s+32])
		steps[s], mins[s] = (hi-lo)/float32(top), -lo
	}
	d := putF16(b, 0, maxOf(steps[:])/63)
	dmin := putF16(b, 2, maxOf(mins[:])/63)
	sc := b[4:16]
	for s := range 8 {
		ls := clampRound(steps[s], d, 0, 63)
		lm := 0
		if dmin > 0 {
			lm = min(63, int(math.Ceil(float64(mins[s]/dmin))))
		}
		if s < 4 {
			sc[s], sc[s+4] = byte(ls), byte(lm)
		} else {
			sc[s+4] = byte(ls&15 | (lm&15)<<4)
			sc[s-4] |= byte(ls>>4) << 6
			sc[s] |= byte(lm>>4) << 6
		}
		dl, ml := d*float32(ls), dmin*float32(lm)
		for l := range 32 {
			e := 32*s + l
			q := clampRound(x[e]+ml, dl, 0, top)
			c, u := s/2, s%2
			if t == Q4_K {
				b[16+32*c+l] |= byte(q) << (4 * u)
			} else {
				b[48+32*c+l] |= byte(q&15) << (4 * u)
				b[16+l] |= byte(q>>4) << (2*c + u)
			}
		}
	}
}

// quantizeQ6K: a signed step per sub-block of 16 over 64 levels (-32..31),
// quantized to int8 under d.
func quantizeQ6K(b []byte, x []float32) {
	var steps [16]float32
	for s := range 16 {
		steps[s] = signedMax(x[16*s:16*s+16]) / -32
	}
	d := putF16(b, 208, signedMax(steps[:])/-128)
	for s := range 16 {
		sc := clampRound(steps[s], d, -128, 127)
		b[192+s] = byte(int8(sc))
		dl := d * float32(sc)
		for l := range 16 {
			e := 16*s + l
			q := clampRound(x[e], dl, -32, 31) + 32
			h, sub, i := e/128, e%128/32, e%32
			b[64*h+32*(sub%2)+i] |= byte(q&15) << (4 * (sub / 2))
			b[128+32*h+i] |= byte(q>>4) << (2 * sub)
		}
	}
}

func maxOf(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, v)
	}
	return m
}
