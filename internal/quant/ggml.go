package quant

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
)

// ggml's block-quantized formats (ggml-common.h), as GGUF files store them:
// blocks of BlockElems elements, back to back along a row.
//
//	Q8_0  32 elements, 34 bytes: f16 d; int8 qs[32]         x[j] = d·qs[j]
//	Q4_0  32 elements, 18 bytes: f16 d; uint8 qs[16]        x[j] = d·((qs[j]&15)-8), x[j+16] = d·((qs[j]>>4)-8)
//	Q4_K 256 elements, 144 bytes: f16 d, dmin; uint8 scales[12]; uint8 qs[128]
//	      eight sub-blocks of 32 with 6-bit scales and mins: x = d·sc·q - dmin·m
//	Q6_K 256 elements, 210 bytes: uint8 ql[128], qh[64]; int8 scales[16]; f16 d
//	      sixteen sub-blocks of 16 with int8 scales: x = d·sc·(q-32), q 6-bit
//
// The Dequantize functions are the references (float32 arithmetic in
// ggml's order); the ToAffine functions re-express Q8_0, Q4_0 and Q4_K
// blocks as affine groups whose reference dequantization gives the same
// values (equal as float32 numbers; a zero may change sign).

// GGML is one of ggml's block formats.
type GGML int

// The block formats this package reads.
const (
	Q4_0 GGML = iota + 1
	Q8_0
	Q4_K
	Q6_K
)

func (t GGML) String() string {
	switch t {
	case Q4_0:
		return "Q4_0"
	case Q8_0:
		return "Q8_0"
	case Q4_K:
		return "Q4_K"
	case Q6_K:
		return "Q6_K"
	}
	return fmt.Sprintf("GGML(%d)", int(t))
}

// BlockElems is the number of elements in one block.
func (t GGML) BlockElems() int {
	switch t {
	case Q4_0, Q8_0:
		return 32
	case Q4_K, Q6_K:
		return 256
	}
	return 0
}

// BlockBytes is the size of one block.
func (t GGML) BlockBytes() int {
	switch t {
	case Q4_0:
		return 18
	case Q8_0:
		return 34
	case Q4_K:
		return 144
	case Q6_K:
		return 210
	}
	return 0
}

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
// blocks.
func DequantizeGGML(t GGML, dst []float32, data []byte) error {
	if err := t.checkBlocks(len(dst), data); err != nil {
		return err
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	for i := 0; i < len(dst)/be; i++ {
		blk, y := data[i*bb:(i+1)*bb], dst[i*be:(i+1)*be]
		switch t {
		case Q8_0:
			d := f16At(blk, 0)
			for j := range 32 {
				y[j] = float32(int8(blk[2+j])) * d
			}
		case Q4_0:
			d := f16At(blk, 0)
			for j := range 16 {
				y[j] = float32(int(blk[2+j]&15)-8) * d
				y[j+16] = float32(int(blk[2+j]>>4)-8) * d
			}
		case Q4_K:
			dequantQ4K(y, blk)
		case Q6_K:
			dequantQ6K(y, blk)
		}
	}
	return nil
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

func dequantQ6K(y []float32, blk []byte) {
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	d := f16At(blk, 208)
	for half := range 2 {
		ql, qh, sc, y := ql[64*half:], qh[32*half:], sc[8*half:], y[128*half:]
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xF|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

// AffineOfGGML is a GGML tensor re-expressed as affine groups of 32: Bits
// 4 (Q4_0, Q4_K) or 8 (Q8_0). Scales and biases are float32 values, exact
// in F16 when F16 is true (always for Q4_0 and Q8_0 blocks of ordinary
// magnitude; Q4_K's products d·sc need float32).
type AffineOfGGML struct {
	Bits           int
	Packed         []uint32
	Scales, Biases []float32
	F16            bool
}

// GGMLToAffine re-expresses n elements of blocks as affine groups of 32
// whose reference dequantization (DequantizeAffine) equals
// DequantizeGGML's. Q6_K has no such form (its groups are 16 wide); it
// returns an error.
func GGMLToAffine(t GGML, n int, data []byte) (*AffineOfGGML, error) {
	if err := t.checkBlocks(n, data); err != nil {
		return nil, err
	}
	be := t.BlockElems()
	out := &AffineOfGGML{Bits: 4, Scales: make([]float32, n/32), Biases: make([]float32, n/32), F16: true}
	if t == Q8_0 {
		out.Bits = 8
	}
	if t != Q4_0 && t != Q8_0 && t != Q4_K {
		return nil, fmt.Errorf("quant: %v has no affine form", t)
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
