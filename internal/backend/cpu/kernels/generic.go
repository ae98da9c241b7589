package kernels

import (
	"math"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// Generic is the pure-Go reference Set. Its results define what every other
// Set computes (up to float rounding, see the package comment). Its loops
// use eight independent accumulators, so it is also a usable fallback.
var Generic = Set{
	Name:             "generic",
	DotF32:           dotF32Generic,
	DotF16:           dotF16Generic,
	DotBF16:          dotBF16Generic,
	MatVecF32:        matVecF32Generic,
	MatVecF16:        matVecF16Generic,
	MatVecBF16:       matVecBF16Generic,
	MatMulF32:        matMulF32Generic,
	MatMulF16:        matMulF16Generic,
	MatMulBF16:       matMulBF16Generic,
	MatMulStridedF32: matMulStridedF32Generic,
	MatMulStridedF16: matMulStridedF16Generic,
	Axpy:             axpyGeneric,
	AxpyRows:         axpyRowsGeneric,
	AxpyRowsF16:      axpyRowsF16Generic,
	Scale:            scaleGeneric,
	ExpSum:           expSumGeneric,
	SiLU:             siluGeneric,
	SwiGLU:           swigluGeneric,
	SumSquares:       sumSquaresGeneric,
	Max:              maxGeneric,
	RotatePairs:      rotatePairsGeneric,
	RotateHalves:     rotateHalvesGeneric,
	ConvertF16ToF32:  convertF16ToF32Generic,
	ConvertF32ToF16:  convertF32ToF16Generic,
	ConvertBF16ToF32: convertBF16ToF32Generic,
}

// f16ToF32 is quant.F16ToF32 with signalling NaNs quietened, which is what
// F16C's VCVTPH2PS returns.
func f16ToF32(h uint16) float32 {
	if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
		return math.Float32frombits(uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13)
	}
	return quant.F16ToF32(h)
}

// f16Table maps every half to f16ToF32 of it. The generic F16 kernels build
// it on first use (256 KiB): a table lookup is several times faster than
// decoding, which matters where Generic is the only Set (arm64, noasm).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for i := range t {
		t[i] = f16ToF32(uint16(i))
	}
	return t
})

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func dotF32Generic(a, b []float32) float32 {
	checkSameLen("DotF32", len(a), len(b))
	return dotF32(a, b)
}

func dotF32(a, b []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		pa, pb := (*[8]float32)(a[i:i+8]), (*[8]float32)(b[i:i+8])
		s0 += pa[0] * pb[0]
		s1 += pa[1] * pb[1]
		s2 += pa[2] * pb[2]
		s3 += pa[3] * pb[3]
		s4 += pa[4] * pb[4]
		s5 += pa[5] * pb[5]
		s6 += pa[6] * pb[6]
		s7 += pa[7] * pb[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func dotF16Generic(w []uint16, x []float32) float32 {
	checkSameLen("DotF16", len(w), len(x))
	return dotF16(w, x)
}

func dotF16(w []uint16, x []float32) float32 {
	tab := f16Table()
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(w); i += 8 {
		pw, px := (*[8]uint16)(w[i:i+8]), (*[8]float32)(x[i:i+8])
		s0 += tab[pw[0]] * px[0]
		s1 += tab[pw[1]] * px[1]
		s2 += tab[pw[2]] * px[2]
		s3 += tab[pw[3]] * px[3]
		s4 += tab[pw[4]] * px[4]
		s5 += tab[pw[5]] * px[5]
		s6 += tab[pw[6]] * px[6]
		s7 += tab[pw[7]] * px[7]
	}
	for ; i < len(w); i++ {
		s0 += tab[w[i]] * x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func dotBF16Generic(w []uint16, x []float32) float32 {
	checkSameLen("DotBF16", len(w), len(x))
	return dotBF16(w, x)
}

func dotBF16(w []uint16, x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(w); i += 8 {
		pw, px := (*[8]uint16)(w[i:i+8]), (*[8]float32)(x[i:i+8])
		s0 += bf16ToF32(pw[0]) * px[0]
		s1 += bf16ToF32(pw[1]) * px[1]
		s2 += bf16ToF32(pw[2]) * px[2]
		s3 += bf16ToF32(pw[3]) * px[3]
		s4 += bf16ToF32(pw[4]) * px[4]
		s5 += bf16ToF32(pw[5]) * px[5]
		s6 += bf16ToF32(pw[6]) * px[6]
		s7 += bf16ToF32(pw[7]) * px[7]
	}
	for ; i < len(w); i++ {
		s0 += bf16ToF32(w[i]) * x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func matVecF32Generic(y, w, x []float32) {
	checkMatVec("MatVecF32", len(y), len(w), len(x))
	k := len(x)
	for r := range y {
		y[r] = dotF32(w[r*k:(r+1)*k], x)
	}
}

func matVecF16Generic(y []float32, w []uint16, x []float32) {
	checkMatVec("MatVecF16", len(y), len(w), len(x))
	k := len(x)
	for r := range y {
		y[r] = dotF16(w[r*k:(r+1)*k], x)
	}
}

func matVecBF16Generic(y []float32, w []uint16, x []float32) {
	checkMatVec("MatVecBF16", len(y), len(w), len(x))
	k := len(x)
	for r := range y {
		y[r] = dotBF16(w[r*k:(r+1)*k], x)
	}
}

func matMulF32Generic(y []float32, ldy int, x []float32, m int, w []float32) {
	k, n := checkMatMul("MatMulF32", len(y), ldy, len(x), m, len(w))
	for i := 0; i < m && k > 0; i++ {
		for j := 0; j < n; j++ {
			y[i*ldy+j] = dotF32(x[i*k:(i+1)*k], w[j*k:(j+1)*k])
		}
	}
}

func matMulStridedF32Generic(y []float32, ldy int, x []float32, ldx, m int, w []float32, ldw, n, k int) {
	if !checkStrided(len(y), ldy, len(x), ldx, m, len(w), ldw, n, k) {
		return
	}
	for i := range m {
		for j := range n {
			y[i*ldy+j] = dotF32(x[i*ldx:i*ldx+k], w[j*ldw:j*ldw+k])
		}
	}
}

func matMulStridedF16Generic(y []float32, ldy int, x []float32, ldx, m int, w []uint16, ldw, n, k int) {
	if !checkStrided(len(y), ldy, len(x), ldx, m, len(w), ldw, n, k) {
		return
	}
	for i := range m {
		for j := range n {
			y[i*ldy+j] = dotF16(w[j*ldw:j*ldw+k], x[i*ldx:i*ldx+k])
		}
	}
}

func matMulF16Generic(y []float32, ldy int, x []float32, m int, w []uint16) {
	k, n := checkMatMul("MatMulF16", len(y), ldy, len(x), m, len(w))
	for i := 0; i < m && k > 0; i++ {
		for j := 0; j < n; j++ {
			y[i*ldy+j] = dotF16(w[j*k:(j+1)*k], x[i*k:(i+1)*k])
		}
	}
}

func matMulBF16Generic(y []float32, ldy int, x []float32, m int, w []uint16) {
	k, n := checkMatMul("MatMulBF16", len(y), ldy, len(x), m, len(w))
	for i := 0; i < m && k > 0; i++ {
		for j := 0; j < n; j++ {
			y[i*ldy+j] = dotBF16(w[j*k:(j+1)*k], x[i*k:(i+1)*k])
		}
	}
}

func axpyGeneric(y []float32, a float32, x []float32) {
	checkSameLen("Axpy", len(y), len(x))
	axpy(y, a, x)
}

func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

func axpyRowsGeneric(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []float32, ldv int) {
	if !checkAxpyRows(len(y), ldy, m, d, len(p), ldp, rows, len(v), ldv) {
		return
	}
	for i := range m {
		for r, a := range p[i*ldp : i*ldp+rows] {
			axpy(y[i*ldy:i*ldy+d], a, v[r*ldv:r*ldv+d])
		}
	}
}

func expSumGeneric(x []float32, mx float32) float32 {
	var sum float32
	for i, v := range x {
		e := Expf(v - mx)
		x[i] = e
		sum += e
	}
	return sum
}

// Sigmoid is 1/(1+e^-x) through Expf, which only takes exponents <= 0.
func Sigmoid(x float32) float32 {
	if x >= 0 {
		return 1 / (1 + Expf(-x))
	}
	e := Expf(x)
	return e / (1 + e)
}

func siluGeneric(y, x []float32) {
	checkSameLen("SiLU", len(y), len(x))
	for i, v := range x {
		y[i] = v * Sigmoid(v)
	}
}

func swigluGeneric(y, gate, up []float32) {
	checkSameLen("SwiGLU", len(y), len(gate))
	checkSameLen("SwiGLU", len(y), len(up))
	for i, g := range gate {
		y[i] = g * Sigmoid(g) * up[i]
	}
}

// Expf is e^x for x <= 0, within 3e-7 relative, and 0 below -87 or for
// NaN: the algorithm of the ExpSum kernels (internal/asmgen's expConsts) in
// scalar Go, a few times cheaper than math.Exp. x = n·ln2 + r with
// |r| <= ln2/2 (ln2 split in two so r is exact), e^r by its degree-6 Taylor
// polynomial (remainder < 1.2e-7), times 2^n; n is rounded by the 1.5·2^23
// trick, whose low mantissa bits are then n itself: no conversions, no
// branches.
func Expf(x float32) float32 {
	if !(x >= -87) {
		return 0
	}
	y := x*1.442695041 + 12582912 // 1.5·2^23: rounds x·log2(e) to an integer
	n := y - 12582912
	r := x - n*0.693145752 - n*1.42860677e-6
	p := (((((r*(1.0/720)+1.0/120)*r+1.0/24)*r+1.0/6)*r+0.5)*r+1)*r + 1
	return p * math.Float32frombits(uint32(int32(math.Float32bits(y))-0x4B400000+127)<<23)
}

func axpyRowsF16Generic(y []float32, ldy, m, d int, p []float32, ldp, rows int, v []uint16, ldv int) {
	if !checkAxpyRows(len(y), ldy, m, d, len(p), ldp, rows, len(v), ldv) {
		return
	}
	for i := range m {
		for r, a := range p[i*ldp : i*ldp+rows] {
			axpyF16(y[i*ldy:i*ldy+d], a, v[r*ldv:r*ldv+d])
		}
	}
}

// axpyF16 is axpy with IEEE half x.
func axpyF16(y []float32, a float32, x []uint16) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * f16ToF32(x[i])
	}
}

func scaleGeneric(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

func sumSquaresGeneric(x []float32) float32 { return dotF32(x, x) }

func maxGeneric(x []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// The rotations convert each product to float32 explicitly: the Go
// compiler may otherwise fuse a*b - c*d into one FMA (it does on arm64, and
// on amd64 at GOAMD64=v3), which rounds differently from the vector kernels.

func rotatePairsGeneric(v, c, s []float32) {
	checkSameLen("RotatePairs", len(v), 2*len(c))
	checkSameLen("RotatePairs", len(s), len(c))
	for i := range c {
		v0, v1 := v[2*i], v[2*i+1]
		v[2*i] = float32(v0*c[i]) - float32(v1*s[i])
		v[2*i+1] = float32(v0*s[i]) + float32(v1*c[i])
	}
}

func rotateHalvesGeneric(x, y, c, s []float32) {
	checkSameLen("RotateHalves", len(x), len(y))
	checkSameLen("RotateHalves", len(x), len(c))
	checkSameLen("RotateHalves", len(x), len(s))
	for i := range x {
		x0, y0 := x[i], y[i]
		x[i] = float32(x0*c[i]) - float32(y0*s[i])
		y[i] = float32(x0*s[i]) + float32(y0*c[i])
	}
}

func convertF16ToF32Generic(dst []float32, src []uint16) {
	checkSameLen("ConvertF16ToF32", len(dst), len(src))
	if len(src) == 0 {
		return
	}
	tab := f16Table()
	for i, h := range src {
		dst[i] = tab[h]
	}
}

func convertF32ToF16Generic(dst []uint16, src []float32) {
	checkSameLen("ConvertF32ToF16", len(dst), len(src))
	for i, f := range src {
		dst[i] = quant.F32ToF16(f)
	}
}

func convertBF16ToF32Generic(dst []float32, src []uint16) {
	checkSameLen("ConvertBF16ToF32", len(dst), len(src))
	for i, h := range src {
		dst[i] = bf16ToF32(h)
	}
}
