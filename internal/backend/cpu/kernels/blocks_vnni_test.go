package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// quantizeQ8 rounds a row of x as vnniPrep does, per block of 32: the
// scale d = max|x|·(1/127) and q = x·(127/max|x|) rounded to the nearest
// integer, ties to even, every step in float32.
func quantizeQ8(x []float32) (q []int8, d []float32) {
	q, d = make([]int8, len(x)), make([]float32, len(x)/32)
	for b := range d {
		blk := x[32*b : 32*b+32]
		var m float32
		for _, v := range blk {
			m = max(m, float32(math.Abs(float64(v))))
		}
		d[b] = m * float32(1.0/127)
		inv := 127 / max(m, 0x1p-126)
		for i, v := range blk {
			q[32*b+i] = int8(math.RoundToEven(float64(v * inv)))
		}
	}
	return q, d
}

// q6KVNNIRef is the VNNI Q6_K product in pure Go, operation for operation
// as internal/blocksgen's kernels compute it: per block and int32 lane
// 4g+c (the 16 elements 64c+16g.., one sub-block, as the kernels transpose
// the codes) the exact Σ (q-32)·x of the int8 x, converted to float, times
// the lane's x scale, then times its weight scale d·scales[sub-block] and
// added to the lane's accumulator in one fused multiply-add (fma32); then
// the lanes summed in the kernels' tree. Every other float operation is rounded on
// its own (explicit conversions: nothing may be fused).
func q6KVNNIRef(y []float32, ldy int, x []float32, m int, w []byte, k int) {
	const bb = 210
	blocks := k / 256
	n := len(w) / (blocks * bb)
	for i := range m {
		qx, dx := quantizeQ8(x[i*k : (i+1)*k])
		for j := range n {
			var acc [16]float32
			for b := range blocks {
				blk := w[(j*blocks+b)*bb : (j*blocks+b+1)*bb]
				d := quant.F16ToF32(uint16(blk[208]) | uint16(blk[209])<<8)
				for lane := range 16 {
					// The lane's 16 elements: 64c+16g .. 64c+16g+15, one sub-block.
					g, c := lane/4, lane%4
					first := 64*c + 16*g
					var sum int32
					for el := first; el < first+16; el++ {
						h, s, l := el/128, el%128/32, el%32
						ql := blk[64*h+32*(s%2)+l]
						if s >= 2 {
							ql >>= 4
						}
						q := int32(ql&15) | int32(blk[128+32*h+l]>>(2*s)&3)<<4
						sum += (q - 32) * int32(qx[256*b+el])
					}
					ws := float32(float32(int8(blk[192+first/16])) * d)
					t := float32(float32(sum) * dx[(256*b+first)/32])
					acc[lane] = fma32(t, ws, acc[lane])
				}
			}
			v := acc
			for width := 8; width >= 1; width /= 2 {
				for l := range width {
					v[l] = v[l] + v[l+width]
				}
			}
			y[i*ldy+j] = v[0]
		}
	}
}

// q5KVNNIRef is the VNNI Q5_K product in pure Go, operation for operation
// as internal/blocksgen's kernels compute it: the lanes' exact Σ q·x of the
// int8 x (16 elements, half a sub-block of 32, as q6KVNNIRef's) scaled as
// q6KVNNIRef's (weight scale d·sc[sub-block]), and per block a bias lane per sub-block less (dmin·m)·(d·Σq of
// x's block); the result is the lanes of acc + bias (zero past lane 7)
// summed in the kernels' tree.
func q5KVNNIRef(y []float32, ldy int, x []float32, m int, w []byte, k int) {
	const bb = 176
	blocks := k / 256
	n := len(w) / (blocks * bb)
	for i := range m {
		qx, dx := quantizeQ8(x[i*k : (i+1)*k])
		xsum := make([]float32, len(dx))
		for b := range dx {
			var s int32
			for _, q := range qx[32*b : 32*b+32] {
				s += int32(q)
			}
			xsum[b] = float32(float32(s) * dx[b])
		}
		for j := range n {
			var acc, bias [16]float32
			for b := range blocks {
				blk := w[(j*blocks+b)*bb : (j*blocks+b+1)*bb]
				d := quant.F16ToF32(uint16(blk[0]) | uint16(blk[1])<<8)
				dmin := quant.F16ToF32(uint16(blk[2]) | uint16(blk[3])<<8)
				sc, mn := q5KScales(blk[4:16])
				for s := range 8 {
					bias[s] = bias[s] - float32(float32(float32(mn[s])*dmin)*xsum[8*b+s])
				}
				for lane := range 16 {
					// The lane's 16 elements: 64c+16g .. 64c+16g+15, half a sub-block.
					g, c := lane/4, lane%4
					first := 64*c + 16*g
					var sum int32
					for el := first; el < first+16; el++ {
						u, l := el%64/32, el%32
						q := int32(blk[48+32*c+l]>>(4*u)&15) | int32(blk[16+l]>>(2*c+u)&1)<<4
						sum += q * int32(qx[256*b+el])
					}
					ws := float32(float32(sc[first/32]) * d)
					t := float32(float32(sum) * dx[(256*b+first)/32])
					acc[lane] = fma32(t, ws, acc[lane])
				}
			}
			var v [16]float32
			for l := range 16 {
				v[l] = acc[l] + bias[l]
			}
			for width := 8; width >= 1; width /= 2 {
				for l := range width {
					v[l] = v[l] + v[l+width]
				}
			}
			y[i*ldy+j] = v[0]
		}
	}
}

// fma32 is a·b + c rounded once to float32, as VFMADD231PS computes it.
// The product is exact in float64 and the sum's rounding error is exact
// too (TwoSum); rounding the float64 sum to float32 can then differ from
// rounding the exact sum only when the float64 sum lies exactly halfway
// between two float32s, where the error's sign decides.
func fma32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b))
	s := float64(p + float64(c))
	bv := float64(s - p)
	e := float64(float64(p-float64(s-bv)) + float64(float64(c)-bv))
	r := float32(s)
	if e == 0 || float64(r) == s || math.IsInf(float64(r), 0) {
		return r
	}
	// The float32 neighbour of r on s's other side, and their midpoint.
	other := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if mid := (float64(r) + float64(other)) / 2; mid != s {
		return r
	}
	if (e > 0) == (float64(other) > float64(r)) {
		return other
	}
	return r
}

// q5KScales unpacks Q5_K's eight 6-bit scales and mins (ggml's
// get_scale_min_k4).
func q5KScales(q []byte) (sc, mn [8]uint8) {
	for j := range 8 {
		if j < 4 {
			sc[j], mn[j] = q[j]&63, q[j+4]&63
		} else {
			sc[j] = q[j+4]&0xf | q[j-4]>>6<<4
			mn[j] = q[j+4]>>4 | q[j]>>6<<4
		}
	}
	return sc, mn
}

// On AVX-512 VNNI machines MatMulBlocks multiplies Q6_K and Q5_K rows by x rounded
// to int8: bit for bit q6KVNNIRef's or q5KVNNIRef's on fresh random inputs (x of every row
// count 1..17, rows of w that do and do not fill a kernel call or, at
// k=2048 and m > 4, one block of rows kept in L2 (75 rows), odd widths,
// a column block of a wider y), every row's bits independent of m, and the
// product within the int8 rounding of x of the float32 one.
func TestMatMulBlocksVNNI(t *testing.T) {
	r := rand.New(rand.NewPCG(uint64(rand.Int64()), 6))
	if !blocksVNNI {
		// No VNNI kernels here: the reference is still checked against
		// the float product below, and MatMulBlocks by TestMatMulBlocks.
		t.Log("no AVX-512 VNNI: MatMulBlocks keeps the float path; checking the reference only")
	}
	refs := map[quant.GGML]func(y []float32, ldy int, x []float32, m int, w []byte, k int){quant.Q6_K: q6KVNNIRef, quant.Q5_K: q5KVNNIRef}
	for _, c := range []struct {
		typ  quant.GGML
		k, n int
	}{{quant.Q6_K, 256, 1}, {quant.Q6_K, 512, 7}, {quant.Q6_K, 768, 13}, {quant.Q6_K, 2048, 75}, {quant.Q6_K, 1280, 5},
		{quant.Q5_K, 256, 1}, {quant.Q5_K, 512, 7}, {quant.Q5_K, 768, 13}, {quant.Q5_K, 2048, 75}, {quant.Q5_K, 1280, 5}} {
		typ, k, n := c.typ, c.k, c.n
		data, dense := quantizedRows(t, r, typ, n, k)
		const mMax = 17
		x := make([]float32, mMax*k)
		for i := range x {
			x[i] = float32(r.NormFloat64()) * float32(math.Exp(r.NormFloat64()))
		}
		const ldy, col = 84, 3
		want := make([]float32, mMax*ldy)
		refs[typ](want[col:], ldy, x, mMax, data, k)
		// The reference: within x's int8 rounding of the float product.
		for i := range mMax {
			for j := range n {
				var exact, bound float64
				xr := x[i*k : (i+1)*k]
				for kk, xv := range xr {
					wv := float64(dense[j*k+kk])
					exact += float64(xv) * wv
					blk := xr[kk/32*32 : kk/32*32+32]
					var mx float64
					for _, v := range blk {
						mx = max(mx, math.Abs(float64(v)))
					}
					bound += math.Abs(wv) * (mx/254 + 1e-5*math.Abs(float64(xv)))
				}
				if got := float64(want[i*ldy+col+j]); math.Abs(got-exact) > bound+1e-6 {
					t.Fatalf("%v k=%d n=%d: reference y[%d,%d] = %v, float product %v (bound %v)", typ, k, n, i, j, got, exact, bound)
				}
			}
		}
		if !blocksVNNI {
			continue
		}
		for m := 1; m <= mMax; m++ {
			got := make([]float32, m*ldy)
			for i := range got {
				got[i] = -7 // untouched outside the [m, n] block
			}
			MatMulBlocks(got[col:], ldy, x[:m*k], m, data, typ, k, make([]float32, BlockRows(k)*k))
			for i := range m {
				for c := range ldy {
					g := got[i*ldy+c]
					if c < col || c >= col+n {
						if g != -7 {
							t.Fatalf("%v k=%d n=%d m=%d: y[%d,%d] = %v written outside the block", typ, k, n, m, i, c, g)
						}
						continue
					}
					if w := want[i*ldy+c]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%v k=%d n=%d m=%d: y[%d,%d] = %v, reference %v", typ, k, n, m, i, c-col, g, w)
					}
				}
			}
		}
	}
}

// fma32 rounds a·b + c once: against math/big on random operands of
// every magnitude the kernels meet, and on a sum whose float64 rounding
// lands exactly halfway between two float32s (a·b = 64 + 2^-30, c = 2^30:
// the float64 sum is 2^30 + 64, which ties to even down to 2^30; the exact
// sum rounds up to 2^30 + 128).
func TestFMA32(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).Mul(big.NewFloat(float64(a)), big.NewFloat(float64(b)))
		f, _ := p.Add(p, big.NewFloat(float64(c))).Float32()
		return f
	}
	a, b := float32(8*(1+2048*0x1p-23)), float32(8*(1-4095*0x1p-24))
	if got, want := fma32(a, b, 0x1p30), float32(0x1p30+128); got != want || exact(a, b, 0x1p30) != want {
		t.Fatalf("fma32 at a tie of the float64 sum: %v, want %v (math/big %v)", got, want, exact(a, b, 0x1p30))
	}
	r := rand.New(rand.NewPCG(uint64(rand.Int64()), 7))
	for range 200000 {
		f := func() float32 {
			return float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-20))
		}
		a, b, c := f(), f(), f()
		if got, want := fma32(a, b, c), exact(a, b, c); got != want {
			t.Fatalf("fma32(%v, %v, %v) = %v, math/big %v", a, b, c, got, want)
		}
	}
}

// MatMulBlocks panics, rather than writing past y, when y cannot hold the
// [m, n] block (the VNNI kernels store without bounds checks).
func TestMatMulBlocksShortY(t *testing.T) {
	data, _ := quantizedRows(t, rand.New(rand.NewPCG(1, 9)), quant.Q6_K, 3, 256)
	x := make([]float32, 2*256)
	for _, c := range []struct{ leny, ldy int }{{5, 3}, {6, 2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("len(y)=%d, ldy=%d for [2, 3]: no panic", c.leny, c.ldy)
				}
			}()
			MatMulBlocks(make([]float32, c.leny), c.ldy, x, 2, data, quant.Q6_K, 256, make([]float32, BlockRows(256)*256))
		}()
	}
}

// MatMulBlocksX over the parts of a weight that the backend's workers take,
// in any order, with x prepared once, gives MatMulBlocks' bits for the whole
// weight: for the VNNI formats and for one that decodes (Q4_1).
func TestMatMulBlocksXParts(t *testing.T) {
	r := rand.New(rand.NewPCG(uint64(rand.Int64()), 10))
	const k, n = 512, 23
	scratch := make([]float32, BlockRows(k)*k)
	for _, typ := range []quant.GGML{quant.Q6_K, quant.Q5_K, quant.Q4_1} {
		data, _ := quantizedRows(t, r, typ, n, k)
		rb := len(data) / n
		for _, m := range []int{1, 5, 7} {
			x := make([]float32, m*k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			want := make([]float32, m*n)
			MatMulBlocks(want, n, x, m, data, typ, k, scratch)
			got := make([]float32, m*n)
			p := PrepareBlocks(x, m, k, typ)
			for _, part := range [][2]int{{8, 23}, {0, 3}, {3, 8}} {
				MatMulBlocksX(got[part[0]:], n, p, data[part[0]*rb:part[1]*rb], scratch)
			}
			p.Release()
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v m=%d: y[%d, %d] = %v in parts, %v whole", typ, m, i/n, i%n, got[i], want[i])
				}
			}
		}
	}
}
