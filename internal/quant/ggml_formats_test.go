package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// literalGGML is the value of element e of block b, computed from the
// format's definition one element at a time (ggml-common.h's structs and
// ggml-quants.c's dequantize_row_* formulas, products rounded before sums),
// without sharing any helper with the package's loops: the oracle
// DequantizeGGML is checked against.
func literalGGML(t GGML, b []byte, e int) float32 {
	half := func(off int) float32 { return F16ToF32(uint16(b[off]) | uint16(b[off+1])<<8) }
	// bit i of the little-endian bytes p
	bit := func(p []byte, i int) int { return int(p[i/8] >> (i % 8) & 1) }
	// the 32-element formats' nibbles: element e < 16 in the low nibble of
	// byte e, element e ≥ 16 in the high nibble of byte e-16
	nibble := func(qs []byte, e int) int {
		if e < 16 {
			return int(qs[e] & 0x0F)
		}
		return int(qs[e-16] >> 4)
	}
	kv := [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	// get_scale_min_k4 as ggml writes it
	scaleMin := func(j int, q []byte) (int, int) {
		if j < 4 {
			return int(q[j] & 63), int(q[j+4] & 63)
		}
		return int(q[j+4]&0xF | (q[j-4]>>6)<<4), int(q[j+4]>>4 | (q[j-0]>>6)<<4)
	}
	switch t {
	case Q4_0:
		return float32(nibble(b[2:18], e)-8) * half(0)
	case Q4_1:
		return float32(float32(nibble(b[4:20], e))*half(0)) + half(2)
	case Q5_0:
		q := nibble(b[6:22], e) | bit(b[2:6], e)<<4
		return float32(q-16) * half(0)
	case Q5_1:
		q := nibble(b[8:24], e) | bit(b[4:8], e)<<4
		return float32(float32(q)*half(0)) + half(2)
	case Q8_0:
		return float32(int8(b[2+e])) * half(0)
	case IQ4_NL:
		return half(0) * kv[nibble(b[2:18], e)]
	case Q2_K:
		// scales[16] qs[64] d dmin; element e: 2 bits at position 2·((e%128)/32)
		// of qs[32·(e/128) + e%32]; scale byte e/16, scale low, min high.
		sc := b[e/16]
		q := int(b[16+32*(e/128)+e%32]>>(2*(e%128/32))) & 3
		dl, ml := half(80)*float32(sc&0xF), half(82)*float32(sc>>4)
		return float32(dl*float32(q)) - ml
	case Q3_K:
		// hmask[32] qs[64] scales[12] d. The scales as ggml unpacks them:
		// the 12 bytes as three words, kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f.
		var aux [4]uint32
		for i := range 3 {
			aux[i] = binary.LittleEndian.Uint32(b[96+4*i:])
		}
		tmp := aux[2]
		aux[2] = (aux[0]>>4)&0x0f0f0f0f | ((tmp>>4)&0x03030303)<<4
		aux[3] = (aux[1]>>4)&0x0f0f0f0f | ((tmp>>6)&0x03030303)<<4
		aux[0] = aux[0]&0x0f0f0f0f | ((tmp>>0)&0x03030303)<<4
		aux[1] = aux[1]&0x0f0f0f0f | ((tmp>>2)&0x03030303)<<4
		j := e / 16
		sc := int(int8(aux[j/4] >> (8 * (j % 4))))
		dl := half(108) * float32(sc-32)
		q := int(b[32+32*(e/128)+e%32]>>(2*(e%128/32))) & 3
		if bit(b[0:32], 8*(e%32)+4*(e/128)+e%128/32) == 0 {
			q -= 4
		}
		return dl * float32(q)
	case Q4_K:
		sc, m := scaleMin(e/32, b[4:16])
		q := int(b[16+32*(e/64)+e%32]>>(4*(e%64/32))) & 0xF
		return float32(half(0)*float32(sc)*float32(q)) - half(2)*float32(m)
	case Q5_K:
		// d dmin scales[12] qh[32] qs[128]; the fifth bit of element e is
		// bit e/32 of qh[e%32].
		sc, m := scaleMin(e/32, b[4:16])
		q := int(b[48+32*(e/64)+e%32]>>(4*(e%64/32)))&0xF | bit(b[16:48], 8*(e%32)+e/32)<<4
		return float32(half(0)*float32(sc)*float32(q)) - half(2)*float32(m)
	case Q6_K:
		// ql[128] qh[64] scales[16] d: in each half of 128, element l+32·s
		// takes nibble s/2 of ql[l+32·(s%2)] and bits 2s of qh[l].
		h, s, l := e/128, e%128/32, e%32
		lo := int(b[64*h+l+32*(s%2)]>>(4*(s/2))) & 0xF
		hi := int(b[128+32*h+l]>>(2*s)) & 3
		return half(208) * float32(int8(b[192+e/16])) * float32(lo|hi<<4-32)
	case IQ4_XS:
		// d scales_h scales_l[4] qs[128]; sub-block s = e/32 is an IQ4_NL
		// block's nibbles in qs[16·s:].
		s := e / 32
		ls := int(b[4+s/2]>>(4*(s%2)))&0xF | int(binary.LittleEndian.Uint16(b[2:])>>(2*s))&3<<4
		return half(0) * float32(ls-32) * kv[nibble(b[8+16*s:24+16*s], e%32)]
	}
	panic("no literal definition of " + t.String())
}

// f16Fields are the byte offsets of each format's f16 fields.
var f16Fields = map[GGML][]int{
	Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, Q8_0: {0}, IQ4_NL: {0},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0},
}

// randomBlocks returns n blocks of random bytes whose f16 fields are finite
// halves of ordinary magnitude, either sign.
func randomBlocks(r *rand.Rand, t GGML, n int) []byte {
	data := make([]byte, n*t.BlockBytes())
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for off := 0; off < len(data); off += t.BlockBytes() {
		for _, at := range f16Fields[t] {
			binary.LittleEndian.PutUint16(data[off+at:], F32ToF16(float32(r.NormFloat64()*0.02)))
		}
	}
	return data
}

// Every format's dequantization equals the literal definition bit for bit
// on blocks of random bytes.
func TestDequantizeGGMLDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 1))
	for _, typ := range GGMLFormats() {
		const blocks = 40
		data := randomBlocks(r, typ, blocks)
		be, bb := typ.BlockElems(), typ.BlockBytes()
		got := make([]float32, blocks*be)
		if err := DequantizeGGML(typ, got, data); err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			want := literalGGML(typ, data[i/be*bb:(i/be+1)*bb], i%be)
			if math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("%v element %d: %g (%#x), the definition gives %g (%#x)", typ, i, g, math.Float32bits(g), want, math.Float32bits(want))
			}
		}
	}
}

// Hand-made blocks, one per new format, with values worked out by hand from
// ggml-common.h's layouts.
func TestDequantizeGGMLKnownValues(t *testing.T) {
	put := func(b []byte, off int, v float32) { binary.LittleEndian.PutUint16(b[off:], F32ToF16(v)) }
	check := func(typ GGML, b []byte, want map[int]float32) {
		t.Helper()
		y := make([]float32, typ.BlockElems())
		if err := DequantizeGGML(typ, y, b); err != nil {
			t.Fatal(err)
		}
		for e, w := range want {
			if y[e] != w {
				t.Errorf("%v element %d = %g, want %g", typ, e, y[e], w)
			}
		}
	}

	q41 := make([]byte, 20)
	put(q41, 0, 0.5)
	put(q41, 2, -1)
	q41[4], q41[19] = 0x3f, 0x20 // e0 = 15, e16 = 3, e15 = 0, e31 = 2
	check(Q4_1, q41, map[int]float32{0: 6.5, 16: 0.5, 15: -1, 31: 0})

	q50 := make([]byte, 22)
	put(q50, 0, 0.25)
	q50[2], q50[5] = 0x01, 0x80  // fifth bit of e0 and of e31
	q50[6], q50[21] = 0x0f, 0xf1 // e0 = 15|16 = 31, e16 = 0, e15 = 1, e31 = 15|16
	check(Q5_0, q50, map[int]float32{0: 0.25 * 15, 16: 0.25 * -16, 15: 0.25 * -15, 31: 0.25 * 15, 1: -4})

	q51 := make([]byte, 24)
	put(q51, 0, 2)
	put(q51, 2, 1)
	q51[6] = 0x01 // fifth bit of e16
	q51[8] = 0x21 // e0 = 1, e16 = 2|16 = 18
	check(Q5_1, q51, map[int]float32{0: 3, 16: 37, 1: 1})

	nl := make([]byte, 18)
	put(nl, 0, 0.5)
	nl[2], nl[17] = 0xf0, 0x08 // e0 = kv[0] = -127, e16 = kv[15] = 113, e15 = kv[8] = 1
	check(IQ4_NL, nl, map[int]float32{0: -63.5, 16: 56.5, 15: 0.5, 31: -63.5})

	q2 := make([]byte, 84)
	put(q2, 80, 0.5)
	put(q2, 82, 0.25)
	q2[0] = 0x23        // sub-block 0: scale 3, min 2 → 1.5·q - 0.5
	q2[15] = 0x41       // sub-block 15: scale 1, min 4 → 0.5·q - 1
	q2[16] = 0xc3       // e0: bits 0-1 = 3; e96: bits 6-7 = 3
	q2[16+32+31] = 0xc0 // e255: bits 6-7 of qs[63] = 3
	check(Q2_K, q2, map[int]float32{0: 4, 1: -0.5, 255: 0.5})

	q3 := make([]byte, 110)
	put(q3, 108, 0.5)
	q3[96] = 0x01       // scale 0: low 1
	q3[96+8] = 0x02     // scale 0: high 2 → 1|2<<4 = 33 → 33-32 = 1
	q3[96+7] = 0xf0     // scale 15: low 15 (high nibble of byte 7)
	q3[96+11] = 0x40    // scale 15: high bits 2·(15/4) = 6 of byte 8+3 → 1 → 31 → -1
	q3[32] = 0x02       // e0: low 2
	q3[0] = 0x01        // e0: high bit set → q = 2
	q3[32+32+31] = 0xc0 // e255: low 3, high bit (bit 7 of hmask[31]) clear → 3-4 = -1
	check(Q3_K, q3, map[int]float32{0: 1, 1: -2, 255: 0.5})

	q5 := make([]byte, 176)
	put(q5, 0, 0.5)
	put(q5, 2, 1)
	q5[4], q5[8] = 3, 2 // sub-block 0: scale 3, min 2 → 1.5·q - 2
	q5[16] = 0x02       // e32 (sub-block 1): fifth bit (bit 1 of qh[0])
	q5[5], q5[9] = 1, 1 // sub-block 1: scale 1, min 1 → 0.5·q - 1
	q5[48] = 0x4f       // e0 = 15, e32 = 4|16 = 20
	check(Q5_K, q5, map[int]float32{0: 20.5, 32: 9, 1: -2})

	xs := make([]byte, 136)
	put(xs, 0, 0.25)
	xs[4] = 0x3f                                  // ls0 low 15, ls1 low 3
	binary.LittleEndian.PutUint16(xs[2:], 0x0006) // ls0 high 2 → 47; ls1 high 1 → 19
	xs[8] = 0xf0                                  // e0 = kv[0], e16 = kv[15]
	xs[24] = 0x08                                 // e32 = kv[8] = 1
	check(IQ4_XS, xs, map[int]float32{0: 0.25 * 15 * -127, 16: 0.25 * 15 * 113, 32: 0.25 * -13 * 1})
}

// QuantizeGGML writes blocks whose values stay near the input, for every
// format, and values on a format's own grid come back exactly.
func TestQuantizeGGML(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 2))
	// Relative tolerance on the block's largest magnitude, by bits per code.
	// The symmetric formats clamp the extreme of the other sign one step
	// short, as ggml does (Q5_0: 15/16 of the block maximum).
	tol := map[GGML]float64{Q8_0: 0.01, Q4_0: 0.15, Q4_1: 0.1, Q5_0: 0.08, Q5_1: 0.05, IQ4_NL: 0.16, IQ4_XS: 0.2,
		Q2_K: 0.5, Q3_K: 0.4, Q4_K: 0.15, Q5_K: 0.08, Q6_K: 0.06}
	for _, typ := range GGMLFormats() {
		x := make([]float32, 4*256)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		data, err := QuantizeGGML(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := DequantizeGGML(typ, y, data); err != nil {
			t.Fatal(err)
		}
		be := typ.BlockElems()
		for i := range x {
			m := maxAbs(x[i/be*be : (i/be+1)*be])
			if d := math.Abs(float64(y[i] - x[i])); d > tol[typ]*float64(m) {
				t.Fatalf("%v element %d: %g came back as %g", typ, i, x[i], y[i])
			}
		}
		// Its own output is on the grid: quantizing it again changes nothing
		// for the formats whose scales come straight from the data.
		if typ == Q8_0 || typ == Q4_0 || typ == Q5_0 || typ == IQ4_NL {
			again, _ := QuantizeGGML(typ, y)
			z := make([]float32, len(y))
			if err := DequantizeGGML(typ, z, again); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if z[i] != y[i] {
					t.Fatalf("%v element %d: %g requantized to %g", typ, i, y[i], z[i])
				}
			}
		}
	}
	if _, err := QuantizeGGML(Q5_K, make([]float32, 100)); err == nil {
		t.Error("100 elements quantized as Q5_K")
	}
}

// The affine forms of the new 32-wide formats dequantize to ggml's values.
func TestGGMLToAffineNewFormats(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 3))
	for _, typ := range GGMLFormats() {
		data := randomBlocks(r, typ, 16)
		n := 16 * typ.BlockElems()
		a, err := GGMLToAffine(typ, n, data)
		if !typ.HasAffineForm() {
			if err == nil {
				t.Errorf("%v converted to affine", typ)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		want, got := make([]float32, n), make([]float32, n)
		if err := DequantizeGGML(typ, want, data); err != nil {
			t.Fatal(err)
		}
		DequantizeAffine(got, a.Packed, a.Scales, a.Biases, a.Bits, 32)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v element %d: affine %g, ggml %g", typ, i, got[i], want[i])
			}
		}
		if f16 := typ == Q4_1 || typ == Q5_0 || typ == Q5_1; f16 && !a.F16 {
			t.Errorf("%v: scales not exact in f16", typ)
		}
	}
}

func TestParseGGML(t *testing.T) {
	for _, typ := range GGMLFormats() {
		if got, ok := ParseGGML(typ.String()); !ok || got != typ {
			t.Errorf("ParseGGML(%q) = %v, %v", typ.String(), got, ok)
		}
	}
	if _, ok := ParseGGML("IQ2_XXS"); ok {
		t.Error("IQ2_XXS parsed")
	}
}
