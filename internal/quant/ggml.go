package quant

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
)

// ggml's block-quantized formats (ggml-common.h), as GGUF files store them:
// blocks of BlockElems elements, back to back along a row. Every f16 is
// little-endian IEEE half; "code" is an unsigned integer read from bits.
//
//	Q8_0    32 elements,  34 bytes: f16 d; int8 qs[32]              x = d·qs[j]
//	Q4_0    32 elements,  18 bytes: f16 d; qs[16]                   x = d·(q-8)
//	Q4_1    32 elements,  20 bytes: f16 d, m; qs[16]                x = d·q + m
//	Q5_0    32 elements,  22 bytes: f16 d; qh[4]; qs[16]            x = d·(q-16)
//	Q5_1    32 elements,  24 bytes: f16 d, m; qh[4]; qs[16]         x = d·q + m
//	IQ4_NL  32 elements,  18 bytes: f16 d; qs[16]                   x = d·kvalues[q]
//	Q2_K   256 elements,  84 bytes: scales[16]; qs[64]; f16 d, dmin
//	        sixteen sub-blocks of 16, 4-bit scale and min: x = d·sc·q - dmin·m, q 2-bit
//	Q3_K   256 elements, 110 bytes: hmask[32]; qs[64]; scales[12]; f16 d
//	        sixteen sub-blocks of 16, 6-bit scales: x = d·(sc-32)·(q-4), q 3-bit
//	        (the low 2 bits in qs, the high one in hmask)
//	Q4_K   256 elements, 144 bytes: f16 d, dmin; scales[12]; qs[128]
//	        eight sub-blocks of 32 with 6-bit scales and mins: x = d·sc·q - dmin·m
//	Q5_K   256 elements, 176 bytes: f16 d, dmin; scales[12]; qh[32]; qs[128]
//	        as Q4_K with 5-bit q (the high bit in qh)
//	Q6_K   256 elements, 210 bytes: ql[128], qh[64]; int8 scales[16]; f16 d
//	        sixteen sub-blocks of 16 with int8 scales: x = d·sc·(q-32), q 6-bit
//	IQ4_XS 256 elements, 136 bytes: f16 d; u16 scales_h; scales_l[4]; qs[128]
//	        eight sub-blocks of 32, 6-bit scales: x = d·(ls-32)·kvalues[q]
//
// For the 32-element formats byte j of qs holds element j in its low nibble
// and element j+16 in its high one, and bit j of the little-endian word qh
// is the fifth bit of element j. The K formats' bit positions are spelled
// out at their dequantization below.
//
// The Dequantize functions are the references: float32 arithmetic in
// ggml's order, every product rounded before a sum (never fused), so the
// values are ggml's definition bit for bit. The ToAffine functions
// re-express the formats whose groups are 32 wide and whose values are
// affine in a code (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K) as affine
// groups whose reference dequantization gives the same values (equal as
// float32 numbers; a zero may change sign).

// GGML is one of ggml's block formats.
type GGML int

// The block formats this package reads.
const (
	Q4_0 GGML = iota + 1
	Q8_0
	Q4_K
	Q6_K
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q5_K
	IQ4_NL
	IQ4_XS
)

// ggmlInfo is one format's name and block size.
type ggmlInfo struct {
	name              string
	elems, blockBytes int
}

var ggmlFormats = map[GGML]ggmlInfo{
	Q4_0: {"Q4_0", 32, 18}, Q8_0: {"Q8_0", 32, 34}, Q4_K: {"Q4_K", 256, 144}, Q6_K: {"Q6_K", 256, 210},
	Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24}, Q2_K: {"Q2_K", 256, 84},
	Q3_K: {"Q3_K", 256, 110}, Q5_K: {"Q5_K", 256, 176}, IQ4_NL: {"IQ4_NL", 32, 18}, IQ4_XS: {"IQ4_XS", 256, 136},
}

// GGMLFormats lists every format this package reads.
func GGMLFormats() []GGML {
	return []GGML{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS}
}

// ParseGGML returns the format of ggml's name for it ("Q5_K").
func ParseGGML(name string) (GGML, bool) {
	for t, in := range ggmlFormats {
		if in.name == name {
			return t, true
		}
	}
	return 0, false
}

func (t GGML) String() string {
	if in, ok := ggmlFormats[t]; ok {
		return in.name
	}
	return fmt.Sprintf("GGML(%d)", int(t))
}

// BlockElems is the number of elements in one block (0 for an unknown format).
func (t GGML) BlockElems() int { return ggmlFormats[t].elems }

// BlockBytes is the size of one block (0 for an unknown format).
func (t GGML) BlockBytes() int { return ggmlFormats[t].blockBytes }

// checkBlocks validates a call: dst elements from data bytes.
func (t GGML) checkBlocks(n int, data []byte) error {
	be := t.BlockElems()
	if be == 0 {
		return fmt.Errorf("quant: unknown block format %v", t)
	}
	if n%be != 0 {
		return fmt.Errorf("quant: %v: %d elements are not a whole number of %d-element blocks", t, n, be)
	}
	if want := n / be * t.BlockBytes(); len(data) != want {
		return fmt.Errorf("quant: %v: %d elements need %d bytes, have %d", t, n, want, len(data))
	}
	return nil
}

func f16At(b []byte, off int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[off:])) }

// DequantizeGGML is the reference dequantization of len(dst) elements from
// their blocks. It returns an error if data does not hold exactly that many
// blocks. It is also fast enough to decode rows on the fly: one loop per
// format, over fixed-size blocks.
func DequantizeGGML(t GGML, dst []float32, data []byte) error {
	if err := t.checkBlocks(len(dst), data); err != nil {
		return err
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	n := len(dst) / be
	var each func(y []float32, blk []byte)
	switch t {
	case Q8_0:
		each = dequantQ8_0
	case Q4_0:
		each = dequantQ4_0
	case Q4_1:
		each = dequantQ4_1
	case Q5_0:
		each = dequantQ5_0
	case Q5_1:
		each = dequantQ5_1
	case IQ4_NL:
		each = dequantIQ4NL
	case Q2_K:
		each = dequantQ2K
	case Q3_K:
		each = dequantQ3K
	case Q4_K:
		each = dequantQ4K
	case Q5_K:
		each = dequantQ5K
	case Q6_K:
		each = dequantQ6K
	case IQ4_XS:
		each = dequantIQ4XS
	}
	for i := range n {
		each(dst[i*be:(i+1)*be:(i+1)*be], data[i*bb:(i+1)*bb:(i+1)*bb])
	}
	return nil
}

func dequantQ8_0(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[34]byte)(blk)
	d := f16At(b[:], 0)
	for j := range 32 {
		y[j] = float32(int8(b[2+j])) * d
	}
}

func dequantQ4_0(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[18]byte)(blk)
	d := f16At(b[:], 0)
	for j := range 16 {
		y[j] = float32(int(b[2+j]&15)-8) * d
		y[j+16] = float32(int(b[2+j]>>4)-8) * d
	}
}

// The decoders below compute each value as ggml does, with two shortcuts
// that keep its bits (TestDequantizeGGMLDefinition): a table of the levels
// a (sub-)block can take, filled by the same float32 operations ggml
// applies to each value, so that a value is one load; or a table of the
// codes as floats (q6Levels, q3Levels, codeLevels) instead of an integer
// conversion per value; and the K formats' loops take every value a loaded
// byte holds at once, with constant shifts. Decoding is what a CPU product
// with these weights costs: these made it 1.2–2× faster.

func dequantQ4_1(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[20]byte)(blk)
	d, m := f16At(b[:], 0), f16At(b[:], 2)
	var lv [16]float32
	for q := range lv {
		lv[q] = float32(float32(q)*d) + m
	}
	for j := range 16 {
		y[j] = lv[b[4+j]&15]
		y[j+16] = lv[b[4+j]>>4]
	}
}

func dequantQ5_0(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[22]byte)(blk)
	d := f16At(b[:], 0)
	var lv [32]float32
	for q := range lv {
		lv[q] = float32(q-16) * d
	}
	qh := binary.LittleEndian.Uint32(b[2:6])
	for j := range 16 {
		y[j] = lv[b[6+j]&15|uint8(qh>>j&1)<<4]
		y[j+16] = lv[b[6+j]>>4|uint8(qh>>(j+16)&1)<<4]
	}
}

func dequantQ5_1(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[24]byte)(blk)
	d, m := f16At(b[:], 0), f16At(b[:], 2)
	var lv [32]float32
	for q := range lv {
		lv[q] = float32(float32(q)*d) + m
	}
	qh := binary.LittleEndian.Uint32(b[4:8])
	for j := range 16 {
		y[j] = lv[b[8+j]&15|uint8(qh>>j&1)<<4]
		y[j+16] = lv[b[8+j]>>4|uint8(qh>>(j+16)&1)<<4]
	}
}

// KValuesIQ4NL is ggml's kvalues_iq4nl: the 16 levels a 4-bit code of
// IQ4_NL and IQ4_XS stands for, denser near zero.
var KValuesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func dequantIQ4NL(dst []float32, blk []byte) {
	y, b := (*[32]float32)(dst), (*[18]byte)(blk)
	d := f16At(b[:], 0)
	var lv [16]float32
	for q, k := range KValuesIQ4NL {
		lv[q] = d * float32(k)
	}
	for j := range 16 {
		y[j] = lv[b[2+j]&15]
		y[j+16] = lv[b[2+j]>>4]
	}
}

// Q2_K: element e = 128·h + 32·s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1
// of qs[32·h + l]; its sub-block e/16 has scale byte scales[e/16], the
// scale in the low nibble and the min in the high one.
func dequantQ2K(dst []float32, blk []byte) {
	y, b := (*[256]float32)(dst), (*[84]byte)(blk)
	d, dmin := f16At(b[:], 80), f16At(b[:], 82)
	for h := range 2 {
		qs := (*[32]byte)(b[16+32*h:])
		y := (*[128]float32)(y[128*h:])
		for half := range 2 {
			// The four levels of sub-blocks 8h + 2s + half, s < 4.
			var lv [4][4]float32
			for s := range lv {
				sc := b[8*h+2*s+half]
				dl, ml := d*float32(sc&15), dmin*float32(sc>>4)
				for q := range lv[s] {
					lv[s][q] = float32(dl*float32(q)) - ml
				}
			}
			for l := 16 * half; l < 16*half+16; l++ {
				a := qs[l]
				y[l] = lv[0][a&3]
				y[l+32] = lv[1][a>>2&3]
				y[l+64] = lv[2][a>>4&3]
				y[l+96] = lv[3][a>>6]
			}
		}
	}
}

// q3KScale is Q3_K's 6-bit scale j (0..15), as a signed value (sc-32): the
// low 4 bits are nibble j of scales[0:8] (low nibbles first), the high 2
// bits are bits 2·(j/4) of scales[8+j%4].
func q3KScale(sc *[12]byte, j int) int {
	lo := sc[j%8] & 15
	if j >= 8 {
		lo = sc[j-8] >> 4
	}
	hi := sc[8+j%4] >> (2 * (j / 4)) & 3
	return int(lo|hi<<4) - 32
}

// Q3_K: element e = 128·h + 32·s + l (h < 2, s < 4, l < 32) has its low
// two bits at bits 2s..2s+1 of qs[32·h + l] and its high bit at bit 4h+s
// of hmask[l]; q = low + 4·high, and the value is d·(sc-32)·(q-4).
func dequantQ3K(dst []float32, blk []byte) {
	y, b := (*[256]float32)(dst), (*[110]byte)(blk)
	d := f16At(b[:], 108)
	sc := (*[12]byte)(b[96:108])
	hm := (*[32]byte)(b[0:32])
	for h := range 2 {
		qs := (*[32]byte)(b[32+32*h:])
		y := (*[128]float32)(y[128*h:])
		for half := range 2 {
			// The scales of sub-blocks 8h + 2s + half, s < 4.
			var dl [4]float32
			for s := range dl {
				dl[s] = d * float32(q3KScale(sc, 8*h+2*s+half))
			}
			for l := 16 * half; l < 16*half+16; l++ {
				a, hb := qs[l], hm[l]>>(4*h)
				// low + 4·high, less 4, looked up as a float
				y[l] = dl[0] * q3Levels[a&3|(hb&1)<<2]
				y[l+32] = dl[1] * q3Levels[a>>2&3|(hb&2)<<1]
				y[l+64] = dl[2] * q3Levels[a>>4&3|(hb&4)]
				y[l+96] = dl[3] * q3Levels[a>>6|(hb&8)>>1]
			}
		}
	}
}

// Q5_K: element e = 64·c + 32·u + l (c < 4, u < 2, l < 32) has its low
// nibble in qs[32·c + l] (low nibble when u = 0, high when 1) and its
// fifth bit at bit 2c+u of qh[l]; sub-block e/32 takes scaleMinK4.
func dequantQ5K(dst []float32, blk []byte) {
	y, b := (*[256]float32)(dst), (*[176]byte)(blk)
	d, dmin := f16At(b[:], 0), f16At(b[:], 2)
	qh := (*[32]byte)(b[16:48])
	for c := range 4 {
		qs := (*[32]byte)(b[48+32*c:])
		sc0, m0 := scaleMinK4(2*c, b[4:16])
		sc1, m1 := scaleMinK4(2*c+1, b[4:16])
		dl0, ml0 := d*float32(sc0), dmin*float32(m0)
		dl1, ml1 := d*float32(sc1), dmin*float32(m1)
		y0, y1 := (*[32]float32)(y[64*c:]), (*[32]float32)(y[64*c+32:])
		hb := uint(2 * c)
		for l := range 32 {
			a, h := qs[l], qh[l]>>hb
			y0[l] = float32(dl0*codeLevels[a&15|(h&1)<<4]) - ml0
			y1[l] = float32(dl1*codeLevels[a>>4|(h&2)<<3]) - ml1
		}
	}
}

// q3Levels is float32(i-4) for each 3-bit code i.
var q3Levels = [8]float32{-4, -3, -2, -1, 0, 1, 2, 3}

// codeLevels is float32(q) for each code q < 64.
var codeLevels = func() (t [64]float32) {
	for q := range t {
		t[q] = float32(q)
	}
	return t
}()

// IQ4_XS: sub-block s (32 elements) has the 6-bit scale ls whose low 4
// bits are nibble s of scales_l (low nibbles first) and high 2 bits are
// bits 2s..2s+1 of scales_h; its elements are laid out as an IQ4_NL block's
// in qs[16·s:16·s+16].
func dequantIQ4XS(dst []float32, blk []byte) {
	y, b := (*[256]float32)(dst), (*[136]byte)(blk)
	d := f16At(b[:], 0)
	sh := binary.LittleEndian.Uint16(b[2:4])
	for s := range 8 {
		ls := int(b[4+s/2]>>(4*(s%2))&15) | int(sh>>(2*s)&3)<<4
		dl := d * float32(ls-32)
		var lv [16]float32
		for q, k := range KValuesIQ4NL {
			lv[q] = dl * float32(k)
		}
		q := (*[16]byte)(b[8+16*s:])
		y := (*[32]float32)(y[32*s:])
		for j := range 16 {
			y[j] = lv[q[j]&15]
			y[j+16] = lv[q[j]>>4]
		}
	}
}

// scaleMinK4 is ggml's get_scale_min_k4: the 6-bit scale and min of
// sub-block j (0..7) from the 12 packed bytes q.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// q4KSub returns sub-block s's scale d·sc and min dmin·m (float32 products).
func q4KSub(blk []byte, s int) (scale, min float32) {
	d, dmin := f16At(blk, 0), f16At(blk, 2)
	sc, m := scaleMinK4(s, blk[4:16])
	return d * float32(sc), dmin * float32(m)
}

// q4KCode returns the 4-bit code of element e (0..255) of a Q4_K block:
// each 64-element chunk takes 32 bytes, low nibbles first.
func q4KCode(blk []byte, e int) uint8 {
	b := blk[16+e/64*32+e%32]
	if e%64 >= 32 {
		return b >> 4
	}
	return b & 15
}

func dequantQ4K(y []float32, blk []byte) {
	for s := range 8 {
		sc, m := q4KSub(blk, s)
		for l := range 32 {
			e := s*32 + l
			y[e] = float32(sc*float32(q4KCode(blk, e))) - m
		}
	}
}

// Q6_K: element e = 128·h + 32·s + l (h < 2, s < 4, l < 32) has its low
// nibble in ql[64·h + 32·(s%2) + l] (low nibble for s < 2, high for s ≥ 2)
// and its high two bits at bits 2s..2s+1 of qh[32·h + l]; sub-block e/16
// has the int8 scale scales[e/16]. The value is (d·sc)·(q-32).
func dequantQ6K(dst []float32, blk []byte) {
	y, b := (*[256]float32)(dst), (*[210]byte)(blk)
	d := f16At(b[:], 208)
	var dsc [16]float32
	for i := range dsc {
		dsc[i] = d * float32(int8(b[192+i]))
	}
	for h := range 2 {
		ql, qh := (*[64]byte)(b[64*h:]), (*[32]byte)(b[128+32*h:])
		y, dsc := (*[128]float32)(y[128*h:]), (*[8]float32)(dsc[8*h:])
		for half := range 2 {
			s0, s1, s2, s3 := dsc[half], dsc[half+2], dsc[half+4], dsc[half+6]
			for l := 16 * half; l < 16*half+16; l++ {
				a, c, hb := ql[l], ql[l+32], qh[l]
				y[l] = s0 * q6Levels[a&0xF|(hb&3)<<4]
				y[l+32] = s1 * q6Levels[c&0xF|(hb>>2&3)<<4]
				y[l+64] = s2 * q6Levels[a>>4|(hb>>4&3)<<4]
				y[l+96] = s3 * q6Levels[c>>4|(hb>>6)<<4]
			}
		}
	}
}

// q6Levels is float32(q-32) for each 6-bit code q.
var q6Levels = func() (t [64]float32) {
	for q := range t {
		t[q] = float32(q - 32)
	}
	return t
}()

// AffineOfGGML is a GGML tensor re-expressed as affine groups of 32: Bits
// 4 (Q4_0, Q4_1, Q4_K) or 8 (Q8_0, and the 5-bit Q5_0, Q5_1, Q5_K, whose
// codes take a byte each). Scales and biases are float32 values, exact in
// F16 when F16 is true (always for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks
// of ordinary magnitude; the K formats' products d·sc need float32).
type AffineOfGGML struct {
	Bits           int
	Packed         []uint32
	Scales, Biases []float32
	F16            bool
}

// GGMLToAffine re-expresses n elements of blocks as affine groups of 32
// whose reference dequantization (DequantizeAffine) equals
// DequantizeGGML's. The other formats have no such form (Q2_K, Q3_K and
// Q6_K have groups 16 wide, IQ4_NL and IQ4_XS non-linear levels); it
// returns an error for them (HasAffineForm).
func GGMLToAffine(t GGML, n int, data []byte) (*AffineOfGGML, error) {
	if err := t.checkBlocks(n, data); err != nil {
		return nil, err
	}
	if !t.HasAffineForm() {
		return nil, fmt.Errorf("quant: %v has no affine form", t)
	}
	be := t.BlockElems()
	out := &AffineOfGGML{Bits: 4, Scales: make([]float32, n/32), Biases: make([]float32, n/32), F16: true}
	switch t {
	case Q8_0, Q5_0, Q5_1, Q5_K:
		out.Bits = 8
	}
	// The codes go straight into packed words: each of ggml's layouts
	// keeps runs of 8 (4-bit) or 4 (8-bit) consecutive elements in
	// consecutive bytes or nibbles.
	out.Packed = make([]uint32, n*out.Bits/32)
	// Large tensors are converted by several goroutines: the work is mostly
	// first touches of fresh pages, which the cores then take in parallel.
	parallelBlocks(n/be, func(lo, hi int) { ggmlBlocksToAffine(t, out, data, lo, hi) })
	for i := range out.Scales {
		if !exactF16(out.Scales[i]) || !exactF16(out.Biases[i]) {
			out.F16 = false
			break
		}
	}
	return out, nil
}

// HasAffineForm reports whether GGMLToAffine converts t.
func (t GGML) HasAffineForm() bool {
	switch t {
	case Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K:
		return true
	}
	return false
}

// parallelBlocks runs f over [0, n) in contiguous parts, one goroutine
// each when n is large enough to pay for them.
func parallelBlocks(n int, f func(lo, hi int)) {
	const minPart = 1 << 14
	parts := min(runtime.GOMAXPROCS(0), n/minPart)
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { f(n*p/parts, n*(p+1)/parts) })
	}
	wg.Wait()
}

// ggmlBlocksToAffine converts blocks [lo, hi) of data into out.
func ggmlBlocksToAffine(t GGML, out *AffineOfGGML, data []byte, lo, hi int) {
	be, bb := t.BlockElems(), t.BlockBytes()
	for i := lo; i < hi; i++ {
		blk := data[i*bb : (i+1)*bb]
		s, b := out.Scales[i*be/32:], out.Biases[i*be/32:]
		words := out.Packed[i*be*out.Bits/32:]
		switch t {
		case Q8_0:
			d := f16At(blk, 0)
			s[0], b[0] = d, -128*d
			for w := range 8 {
				// int8 q becomes the unsigned code q+128: flip the sign bits.
				words[w] = binary.LittleEndian.Uint32(blk[2+4*w:]) ^ 0x80808080
			}
		case Q4_0:
			d := f16At(blk, 0)
			s[0], b[0] = d, -8*d
			// Elements 0-15 are the low nibbles of bytes 2-17, 16-31 the high ones.
			lo, hi := binary.LittleEndian.Uint64(blk[2:]), binary.LittleEndian.Uint64(blk[10:])
			words[0], words[1] = nibbles8(lo), nibbles8(hi)
			words[2], words[3] = nibbles8(lo>>4), nibbles8(hi>>4)
		case Q4_1:
			s[0], b[0] = f16At(blk, 0), f16At(blk, 2)
			lo, hi := binary.LittleEndian.Uint64(blk[4:]), binary.LittleEndian.Uint64(blk[12:])
			words[0], words[1] = nibbles8(lo), nibbles8(hi)
			words[2], words[3] = nibbles8(lo>>4), nibbles8(hi>>4)
		case Q5_0, Q5_1:
			// d·(q-16) = d·q + (-16·d) exactly: both products fit in 16 bits.
			var v [32]float32
			if t == Q5_0 {
				s[0] = f16At(blk, 0)
				b[0] = -16 * s[0]
				codes5(&v, blk[2:6], blk[6:22])
			} else {
				s[0], b[0] = f16At(blk, 0), f16At(blk, 2)
				codes5(&v, blk[4:8], blk[8:24])
			}
			packBytes(words[:8], &v)
		case Q5_K:
			var v [32]float32
			for sub := range 8 {
				sc, m := scaleMinK4(sub, blk[4:16])
				s[sub], b[sub] = f16At(blk, 0)*float32(sc), -(f16At(blk, 2) * float32(m))
				c, u := sub/2, uint(sub%2)
				for l := range 32 {
					q := blk[48+32*c+l] >> (4 * u) & 15
					v[l] = float32(q | (blk[16+l]>>(2*uint(c)+u)&1)<<4)
				}
				packBytes(words[8*sub:8*sub+8], &v)
			}
		case Q4_K:
			for sub := range 8 {
				s[sub], b[sub] = q4KSub(blk, sub)
				b[sub] = -b[sub]
			}
			// Each 64-element chunk: 32 bytes, low nibbles first (see q4KCode).
			for c := range 4 {
				q := blk[16+32*c:]
				for k := range 4 {
					v := binary.LittleEndian.Uint64(q[8*k:])
					words[8*c+k], words[8*c+4+k] = nibbles8(v), nibbles8(v>>4)
				}
			}
		}
	}
}

// codes5 sets v to the 5-bit codes of a Q5_0 or Q5_1 block: qh the four
// bytes of high bits, qs the sixteen bytes of nibbles.
func codes5(v *[32]float32, qh, qs []byte) {
	h := binary.LittleEndian.Uint32(qh)
	for j := range 16 {
		v[j] = float32(qs[j]&15 | uint8(h>>j&1)<<4)
		v[j+16] = float32(qs[j]>>4 | uint8(h>>(j+16)&1)<<4)
	}
}

// packBytes packs 32 8-bit codes (held as floats) into 8 words, first
// element lowest.
func packBytes(words []uint32, v *[32]float32) {
	for w := range 8 {
		words[w] = uint32(v[4*w]) | uint32(v[4*w+1])<<8 | uint32(v[4*w+2])<<16 | uint32(v[4*w+3])<<24
	}
}

// nibbles8 packs the low nibbles of the 8 bytes of v, first byte lowest,
// into one word: MLX's order of 8 consecutive 4-bit codes.
func nibbles8(v uint64) uint32 {
	v &= 0x0F0F0F0F0F0F0F0F
	v = (v | v>>4) & 0x00FF00FF00FF00FF
	v = (v | v>>8) & 0x0000FFFF0000FFFF
	v = (v | v>>16) & 0x00000000FFFFFFFF
	return uint32(v)
}

// exactF16 reports whether v survives a round trip through IEEE half
// (NaNs do not count as surviving).
func exactF16(v float32) bool { return F16ToF32(F32ToF16(v)) == v }
