package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
	"github.com/seed9b8f47b1/redrafter/internal/testenv"
)

// newRand returns a generator seeded by testenv.Seed: logged, and replayed
// from REDRAFTER_SEED.
func newRand(t testing.TB) *rand.Rand {
	return rand.New(rand.NewPCG(testenv.Seed(t), 0x9e3779b97f4a7c15))
}

// testLengths are the tail and unroll boundaries of every kernel.
var testLengths = []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4095, 4096, 4097}

// fastSets returns the non-reference Sets, skipping the test if there are none.
func fastSets(t *testing.T) []Set {
	s := Sets()[1:]
	if len(s) == 0 {
		t.Skip("no assembly Set on this CPU or build (noasm tag, non-amd64, or no AVX2+FMA+F16C)")
	}
	return s
}

// misaligned returns a slice of length n starting off elements into a
// fresh backing array, so the kernels see every alignment.
func misaligned[T any](n, off int) []T { return make([]T, n+off+1)[off : off+n : off+n] }

func randF32(r *rand.Rand, n, off int) []float32 {
	s := misaligned[float32](n, off)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func randF16(r *rand.Rand, n, off int) []uint16 {
	s := misaligned[uint16](n, off)
	for i := range s {
		s[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	return s
}

func randBF16(r *rand.Rand, n, off int) []uint16 {
	s := misaligned[uint16](n, off)
	for i := range s {
		s[i] = quant.F32ToBF16(float32(r.NormFloat64()))
	}
	return s
}

// absDot is Σ|a·b|, the scale of a dot product's rounding error.
func absDot(a []float32, b func(int) float32) float64 {
	s := 0.0
	for i, v := range a {
		s += math.Abs(float64(v) * float64(b(i)))
	}
	return s
}

// close reports whether got is within relative 1e-5 of the scale of the sum.
func close(got, want float32, scale float64) bool {
	return math.Abs(float64(got)-float64(want)) <= 1e-5*scale+1e-30
}

func TestActiveIsLast(t *testing.T) {
	s := Sets()
	if s[0].Name != "generic" || Active().Name != s[len(s)-1].Name {
		t.Fatalf("Sets() = %v..., Active() = %s", s[0].Name, Active().Name)
	}
	t.Logf("active set: %s (of %d)", Active().Name, len(s))
}

// TestGenericDot checks the reference against a float64 sum.
func TestGenericDot(t *testing.T) {
	r := newRand(t)
	for _, n := range testLengths {
		a, b := randF32(r, n, 0), randF32(r, n, 0)
		want := 0.0
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		if got := Generic.DotF32(a, b); !close(got, float32(want), absDot(a, func(i int) float32 { return b[i] })) {
			t.Errorf("Generic.DotF32(n=%d) = %g, want %g", n, got, want)
		}
		h := randF16(r, n, 0)
		want = 0
		for i := range a {
			want += float64(a[i]) * float64(quant.F16ToF32(h[i]))
		}
		if got := Generic.DotF16(h, a); !close(got, float32(want), absDot(a, func(i int) float32 { return quant.F16ToF32(h[i]) })) {
			t.Errorf("Generic.DotF16(n=%d) = %g, want %g", n, got, want)
		}
	}
}

func TestDot(t *testing.T) {
	r := newRand(t)
	for _, s := range fastSets(t) {
		for _, n := range testLengths {
			for off := range 3 {
				a, b := randF32(r, n, off), randF32(r, n, 2-off)
				want := Generic.DotF32(a, b)
				if got := s.DotF32(a, b); !close(got, want, absDot(a, func(i int) float32 { return b[i] })) {
					t.Errorf("%s.DotF32(n=%d, off=%d) = %g, want %g", s.Name, n, off, got, want)
				}
				if got, want := s.SumSquares(a), Generic.SumSquares(a); !close(got, want, absDot(a, func(i int) float32 { return a[i] })) {
					t.Errorf("%s.SumSquares(n=%d, off=%d) = %g, want %g", s.Name, n, off, got, want)
				}
				h := randF16(r, n, off)
				want = Generic.DotF16(h, a)
				if got := s.DotF16(h, a); !close(got, want, absDot(a, func(i int) float32 { return quant.F16ToF32(h[i]) })) {
					t.Errorf("%s.DotF16(n=%d, off=%d) = %g, want %g", s.Name, n, off, got, want)
				}
				bf := randBF16(r, n, off)
				want = Generic.DotBF16(bf, a)
				if got := s.DotBF16(bf, a); !close(got, want, absDot(a, func(i int) float32 { return quant.BF16ToF32(bf[i]) })) {
					t.Errorf("%s.DotBF16(n=%d, off=%d) = %g, want %g", s.Name, n, off, got, want)
				}
			}
		}
	}
}

// checkMat compares y against want for an m×n output with stride ldy, and
// checks that the padding between rows kept its sentinel.
func checkMat(t *testing.T, call string, y, want []float32, scale []float64, m, n, ldy int) {
	t.Helper()
	for i := range m {
		for j := range ldy {
			idx := i*ldy + j
			if idx >= len(y) {
				break
			}
			if j >= n {
				if y[idx] != 12345 {
					t.Fatalf("%s: wrote y[%d] outside the %d×%d block (ldy %d)", call, idx, m, n, ldy)
				}
				continue
			}
			if !close(y[idx], want[idx], scale[idx]) {
				t.Fatalf("%s: y[%d,%d] = %g, want %g", call, i, j, y[idx], want[idx])
			}
		}
	}
}

func TestMatVec(t *testing.T) {
	r := newRand(t)
	for _, s := range fastSets(t) {
		for _, rows := range []int{0, 1, 2, 3, 4, 5, 7, 9, 17} {
			for _, k := range testLengths {
				if rows*k > 1<<16 {
					continue
				}
				off := (rows + k) % 3
				x := randF32(r, k, off)
				for _, dt := range []string{"F32", "F16", "BF16"} {
					y, want := misaligned[float32](rows, off), make([]float32, rows)
					scale := make([]float64, rows)
					call := fmt.Sprintf("%s.MatVec%s(rows=%d, k=%d)", s.Name, dt, rows, k)
					switch dt {
					case "F32":
						w := randF32(r, rows*k, 2-off)
						Generic.MatVecF32(want, w, x)
						s.MatVecF32(y, w, x)
						for i := range scale {
							scale[i] = absDot(x, func(j int) float32 { return w[i*k+j] })
						}
					case "F16", "BF16":
						w, conv, gen, fast := randF16(r, rows*k, 2-off), quant.F16ToF32, Generic.MatVecF16, s.MatVecF16
						if dt == "BF16" {
							w, conv, gen, fast = randBF16(r, rows*k, 2-off), quant.BF16ToF32, Generic.MatVecBF16, s.MatVecBF16
						}
						gen(want, w, x)
						fast(y, w, x)
						for i := range scale {
							scale[i] = absDot(x, func(j int) float32 { return conv(w[i*k+j]) })
						}
					}
					checkMat(t, call, y, want, scale, rows, rows, rows)
				}
			}
		}
	}
}

func TestMatMul(t *testing.T) {
	r := newRand(t)
	for _, s := range fastSets(t) {
		for m := 1; m <= 19; m++ {
			if m > 9 && m != 12 && m != 13 && m != 17 && m != 19 {
				continue
			}
			for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 13} {
				for _, k := range []int{1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 129, 257, 4097} {
					if k == 4097 && (m < 17 || n > 5) {
						continue
					}
					off := (m + n + k) % 3
					ldy := n + (m+k)%3
					x := randF32(r, m*k, off)
					for _, dt := range []string{"F32", "F16", "BF16"} {
						call := fmt.Sprintf("%s.MatMul%s(m=%d, n=%d, k=%d, ldy=%d)", s.Name, dt, m, n, k, ldy)
						size := (m-1)*ldy + n
						y, want := misaligned[float32](size, 2-off), make([]float32, size)
						for i := range y {
							y[i], want[i] = 12345, 12345
						}
						scale := make([]float64, size)
						var wf func(j, kk int) float32
						switch dt {
						case "F32":
							w := randF32(r, n*k, 2-off)
							Generic.MatMulF32(want, ldy, x, m, w)
							s.MatMulF32(y, ldy, x, m, w)
							wf = func(j, kk int) float32 { return w[j*k+kk] }
						case "F16", "BF16":
							w, conv, gen, fast := randF16(r, n*k, 2-off), quant.F16ToF32, Generic.MatMulF16, s.MatMulF16
							if dt == "BF16" {
								w, conv, gen, fast = randBF16(r, n*k, 2-off), quant.BF16ToF32, Generic.MatMulBF16, s.MatMulBF16
							}
							gen(want, ldy, x, m, w)
							fast(y, ldy, x, m, w)
							wf = func(j, kk int) float32 { return conv(w[j*k+kk]) }
						}
						for i := range m {
							for j := range n {
								scale[i*ldy+j] = absDot(x[i*k:(i+1)*k], func(kk int) float32 { return wf(j, kk) })
							}
						}
						checkMat(t, call, y, want, scale, m, n, ldy)
					}
				}
			}
		}
	}
}

func TestAxpyScale(t *testing.T) {
	r := newRand(t)
	for _, s := range fastSets(t) {
		for _, n := range testLengths {
			for off := range 3 {
				a := float32(r.NormFloat64())
				x, y := randF32(r, n, off), randF32(r, n, 2-off)
				want := append([]float32(nil), y...)
				Generic.Axpy(want, a, x)
				s.Axpy(y, a, x)
				for i := range y {
					// One rounding (FMA) against up to two.
					if !close(y[i], want[i], 0.1*(math.Abs(float64(want[i]))+math.Abs(float64(a*x[i])))) {
						t.Fatalf("%s.Axpy(n=%d, off=%d): y[%d] = %g, want %g", s.Name, n, off, i, y[i], want[i])
					}
				}
				want = append(want[:0], x...)
				Generic.Scale(want, a)
				s.Scale(x, a)
				for i := range x {
					if x[i] != want[i] {
						t.Fatalf("%s.Scale(n=%d, off=%d): x[%d] = %g, want %g", s.Name, n, off, i, x[i], want[i])
					}
				}
			}
		}
	}
}

// TestMax: every Set's Max is the largest element, at every position and
// length, with NaNs skipped, and -Inf for none.
func TestMax(t *testing.T) {
	r := newRand(t)
	nan := float32(math.NaN())
	for _, set := range Sets() {
		for _, n := range testLengths {
			for off := range 3 {
				x := randF32(r, n, off)
				if got := set.Max(x); got != Generic.Max(x) && n > 0 {
					t.Fatalf("%s.Max(n=%d, off=%d) = %g, want %g", set.Name, n, off, got, Generic.Max(x))
				}
				for i := 0; i < n; i += 1 + n/7 {
					old := x[i]
					x[i] = 100
					if got := set.Max(x); got != 100 {
						t.Fatalf("%s.Max(n=%d, off=%d) with 100 at %d = %g", set.Name, n, off, i, got)
					}
					x[i] = nan
					want := float32(math.Inf(-1))
					for j, v := range x {
						if j != i && v > want {
							want = v
						}
					}
					if got := set.Max(x); got != want {
						t.Fatalf("%s.Max(n=%d, off=%d) with a NaN at %d = %g, want %g", set.Name, n, off, i, got, want)
					}
					x[i] = old
				}
			}
		}
		if got := set.Max(nil); !math.IsInf(float64(got), -1) {
			t.Errorf("%s.Max(nil) = %g, want -Inf", set.Name, got)
		}
		if got := set.Max([]float32{nan, nan, nan}); !math.IsInf(float64(got), -1) {
			t.Errorf("%s.Max(NaNs) = %g, want -Inf", set.Name, got)
		}
		all := make([]float32, 40)
		for i := range all {
			all[i] = -float32(i) - 1
		}
		if got := set.Max(all); got != -1 {
			t.Errorf("%s.Max(-1..-40) = %g, want -1", set.Name, got)
		}
	}
}

// TestRotations: RotatePairs and RotateHalves of every Set against the
// definition, computed here in float64 and rounded as the contract says
// (each product, then the sum; float64 holds a float32 product exactly),
// bit for bit, at lengths with and without a tail, in place.
func TestRotations(t *testing.T) {
	r := newRand(t)
	rot := func(a, b, c, s float32) (float32, float32) {
		p := func(u, v float32) float64 { return float64(float32(float64(u) * float64(v))) }
		return float32(p(a, c) - p(b, s)), float32(p(a, s) + p(b, c))
	}
	for _, set := range Sets() {
		for _, n := range testLengths {
			for off := range 3 {
				c, s := randF32(r, n, off), randF32(r, n, 2-off)
				v := randF32(r, 2*n, off)
				got := append([]float32(nil), v...)
				set.RotatePairs(got, c, s)
				for i := range n {
					w0, w1 := rot(v[2*i], v[2*i+1], c[i], s[i])
					if got[2*i] != w0 || got[2*i+1] != w1 {
						t.Fatalf("%s.RotatePairs(n=%d, off=%d): pair %d = (%g, %g), want (%g, %g)", set.Name, n, off, i, got[2*i], got[2*i+1], w0, w1)
					}
				}
				x, y := randF32(r, n, 2-off), randF32(r, n, off)
				gx, gy := append([]float32(nil), x...), append([]float32(nil), y...)
				set.RotateHalves(gx, gy, c, s)
				for i := range n {
					w0, w1 := rot(x[i], y[i], c[i], s[i])
					if gx[i] != w0 || gy[i] != w1 {
						t.Fatalf("%s.RotateHalves(n=%d, off=%d): pair %d = (%g, %g), want (%g, %g)", set.Name, n, off, i, gx[i], gy[i], w0, w1)
					}
				}
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s.RotatePairs with 3 cosines for 8 elements did not panic", set.Name)
				}
			}()
			set.RotatePairs(make([]float32, 8), make([]float32, 3), make([]float32, 3))
		}()
	}
}

// TestConvertHalves checks every half and bfloat16 bit pattern, against
// package quant and against each Set.
func TestConvertHalves(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	want := make([]float32, len(src))
	Generic.ConvertF16ToF32(want, src)
	for i, h := range src {
		q := math.Float32bits(quant.F16ToF32(h))
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			q |= 0x00400000 // F16C quietens signalling NaNs
		}
		if g := math.Float32bits(want[i]); g != q {
			t.Fatalf("Generic.ConvertF16ToF32(%#04x) = %#08x, want %#08x", h, g, q)
		}
	}
	for _, s := range Sets()[1:] {
		for _, off := range []int{0, 1} {
			got := misaligned[float32](len(src)-off, off)
			s.ConvertF16ToF32(got, src[off:])
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i+off]) {
					t.Fatalf("%s.ConvertF16ToF32(%#04x) = %#08x, want %#08x", s.Name, src[i+off], math.Float32bits(got[i]), math.Float32bits(want[i+off]))
				}
			}
			s.ConvertBF16ToF32(got, src[off:])
			for i := range got {
				if q := quant.BF16ToF32(src[i+off]); math.Float32bits(got[i]) != math.Float32bits(q) {
					t.Fatalf("%s.ConvertBF16ToF32(%#04x) = %#08x, want %#08x", s.Name, src[i+off], math.Float32bits(got[i]), math.Float32bits(q))
				}
			}
		}
	}
}

func TestConvertF32ToF16(t *testing.T) {
	r := newRand(t)
	var src []float32
	for h := range 1 << 16 {
		f := quant.F16ToF32(uint16(h))
		src = append(src, f)
		if h&0x7fff < 0x7c00 { // finite: the tie above h, and its neighbours
			b := math.Float32bits(f)
			next := math.Float32bits(quant.F16ToF32(uint16(h + 1)))
			if h&0x7fff == 0x7bff {
				next = b + 0x2000 // 65520, the tie to infinity
			}
			mid := b + (next-b)/2
			src = append(src, math.Float32frombits(mid), math.Float32frombits(mid-1), math.Float32frombits(mid+1))
		}
	}
	for range 1 << 18 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	src = append(src, float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00001), 1e-45, -1e-40, 65519.99)
	want := make([]uint16, len(src))
	for i, f := range src {
		want[i] = quant.F32ToF16(f)
	}
	for _, s := range Sets() {
		for _, off := range []int{0, 1, 3} {
			got := misaligned[uint16](len(src)-off, off)
			s.ConvertF32ToF16(got, src[off:])
			for i := range got {
				if got[i] != want[i+off] {
					t.Fatalf("%s.ConvertF32ToF16(%g = %#08x) = %#04x, want %#04x", s.Name, src[i+off], math.Float32bits(src[i+off]), got[i], want[i+off])
				}
			}
		}
	}
}

func TestConvertLengths(t *testing.T) {
	r := newRand(t)
	for _, s := range fastSets(t) {
		for _, n := range testLengths {
			for off := range 3 {
				h := randF16(r, n, off)
				got, want := misaligned[float32](n, 2-off), make([]float32, n)
				s.ConvertF16ToF32(got, h)
				Generic.ConvertF16ToF32(want, h)
				s.ConvertBF16ToF32(got[:0], h[:0])
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s.ConvertF16ToF32(n=%d, off=%d): [%d] = %g, want %g", s.Name, n, off, i, got[i], want[i])
					}
				}
				s.ConvertBF16ToF32(got, h)
				Generic.ConvertBF16ToF32(want, h)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s.ConvertBF16ToF32(n=%d, off=%d): [%d] = %g, want %g", s.Name, n, off, i, got[i], want[i])
					}
				}
				h2, w2 := misaligned[uint16](n, off), make([]uint16, n)
				s.ConvertF32ToF16(h2, got)
				Generic.ConvertF32ToF16(w2, got)
				for i := range w2 {
					if h2[i] != w2[i] {
						t.Fatalf("%s.ConvertF32ToF16(n=%d, off=%d): [%d] = %#04x, want %#04x", s.Name, n, off, i, h2[i], w2[i])
					}
				}
			}
		}
	}
}

func TestPanics(t *testing.T) {
	for _, s := range Sets() {
		cases := map[string]func(){
			"DotF32":      func() { s.DotF32(make([]float32, 3), make([]float32, 4)) },
			"DotF16":      func() { s.DotF16(make([]uint16, 3), make([]float32, 4)) },
			"MatVecF32":   func() { s.MatVecF32(make([]float32, 2), make([]float32, 7), make([]float32, 4)) },
			"MatVecF16":   func() { s.MatVecF16(make([]float32, 2), make([]uint16, 9), make([]float32, 4)) },
			"MatMulF32/x": func() { s.MatMulF32(make([]float32, 8), 4, make([]float32, 7), 2, make([]float32, 8)) },
			"MatMulF16/w": func() { s.MatMulF16(make([]float32, 8), 4, make([]float32, 8), 2, make([]uint16, 7)) },
			"MatMulF16/y": func() { s.MatMulF16(make([]float32, 5), 3, make([]float32, 8), 2, make([]uint16, 12)) },
			"Axpy":        func() { s.Axpy(make([]float32, 3), 1, make([]float32, 4)) },
			"Convert":     func() { s.ConvertF16ToF32(make([]float32, 3), make([]uint16, 4)) },
		}
		for name, f := range cases {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s.%s: no panic", s.Name, name)
					}
				}()
				f()
			}()
		}
		// Empty products are fine.
		s.MatMulF32(nil, 0, nil, 0, nil)
		s.MatMulF16(nil, 0, nil, 3, nil)
		y := []float32{1, 2}
		s.MatVecF32(y, nil, nil)
		if y[0] != 0 || y[1] != 0 {
			t.Errorf("%s.MatVecF32 with k=0 left y = %v", s.Name, y)
		}
	}
}

// TestBatchInvariance checks that every Set computes each output of a
// product the same way whatever the batch: MatMul over m rows equals, bit
// for bit, MatVec of each row alone, and splitting w into row blocks (as the
// backend does across goroutines) changes nothing. Speculative verification
// relies on this to reproduce single-token decoding exactly.
func TestBatchInvariance(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, k := range []int{1, 17, 64, 257, 1000} {
			for _, n := range []int{1, 5, 13} {
				w32, w16 := randF32(r, n*k, 1), randF16(r, n*k, 1)
				for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 17} {
					x := randF32(r, m*k, 0)
					for _, dt := range []string{"F32", "F16", "BF16"} {
						one := make([]float32, m*n)
						for i := range m {
							switch dt {
							case "F32":
								s.MatVecF32(one[i*n:(i+1)*n], w32, x[i*k:(i+1)*k])
							case "F16":
								s.MatVecF16(one[i*n:(i+1)*n], w16, x[i*k:(i+1)*k])
							case "BF16":
								s.MatVecBF16(one[i*n:(i+1)*n], w16, x[i*k:(i+1)*k])
							}
						}
						for _, split := range []int{n, 1, 3} {
							if split > n {
								continue
							}
							all := make([]float32, m*n)
							for _, b := range [][2]int{{0, split}, {split, n}} {
								if b[0] == b[1] {
									continue
								}
								switch dt {
								case "F32":
									s.MatMulF32(all[b[0]:], n, x, m, w32[b[0]*k:b[1]*k])
								case "F16":
									s.MatMulF16(all[b[0]:], n, x, m, w16[b[0]*k:b[1]*k])
								case "BF16":
									s.MatMulBF16(all[b[0]:], n, x, m, w16[b[0]*k:b[1]*k])
								}
							}
							for i := range all {
								if math.Float32bits(all[i]) != math.Float32bits(one[i]) {
									t.Fatalf("%s.MatMul%s(m=%d, n=%d, k=%d, w split at %d): y[%d,%d] = %g, MatVec gives %g",
										s.Name, dt, m, n, k, split, i/n, i%n, all[i], one[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// MatMulStridedF32 must give every output the bits MatMulF32 gives the same
// row and column alone, in every Set (Generic included), with strides that
// skip elements, and write nothing between n and ldy.
func TestMatMulStrided(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, sz := range [][3]int{{1, 1, 1}, {8, 37, 64}, {5, 9, 8}, {13, 6, 100}, {2, 70, 128}, {7, 4, 33}} {
			m, n, k := sz[0], sz[1], sz[2]
			ldx, ldw, ldy := k+r.IntN(5), k+r.IntN(200), n+r.IntN(3)
			x, w := randF32(r, (m-1)*ldx+k, r.IntN(3)), randF32(r, (n-1)*ldw+k, r.IntN(3))
			y := misaligned[float32]((m-1)*ldy+n, 1)
			for i := range y {
				y[i] = 12345
			}
			s.MatMulStridedF32(y, ldy, x, ldx, m, w, ldw, n, k)
			for i := range m {
				for j := range ldy {
					if i*ldy+j >= len(y) {
						break
					}
					got := y[i*ldy+j]
					if j >= n {
						if got != 12345 {
							t.Fatalf("%s m=%d n=%d k=%d: y[%d,%d] past n was written", s.Name, m, n, k, i, j)
						}
						continue
					}
					var one [1]float32
					s.MatMulF32(one[:], 1, x[i*ldx:i*ldx+k], 1, w[j*ldw:j*ldw+k])
					if math.Float32bits(got) != math.Float32bits(one[0]) {
						t.Fatalf("%s m=%d n=%d k=%d ldx=%d ldw=%d: y[%d,%d] = %v, alone %v", s.Name, m, n, k, ldx, ldw, i, j, got, one[0])
					}
				}
			}
		}
	}
}

// AxpyRows must leave every row of y as one Axpy per row of v would, bit
// for bit, in every Set, for 1 to 9 rows of y, widths around the vector and
// chunk sizes, and strides that skip elements.
func TestAxpyRows(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, d := range []int{1, 7, 8, 15, 16, 17, 33, 63, 64, 65, 80, 128, 129, 200} {
			for _, sz := range [][2]int{{1, 0}, {1, 1}, {2, 5}, {3, 2}, {4, 40}, {5, 7}, {8, 33}, {9, 3}} {
				m, rows := sz[0], sz[1]
				ldy, ldp, ldv := d+r.IntN(3), rows+r.IntN(4), d+r.IntN(70)
				p := randF32(r, (m-1)*ldp+rows, r.IntN(3))
				v := randF32(r, max(0, (rows-1)*ldv+d), r.IntN(3))
				y := randF32(r, (m-1)*ldy+d, r.IntN(3))
				want := append([]float32(nil), y...)
				for i := range m {
					for k := range rows {
						s.Axpy(want[i*ldy:i*ldy+d], p[i*ldp+k], v[k*ldv:k*ldv+d])
					}
				}
				s.AxpyRows(y, ldy, m, d, p, ldp, rows, v, ldv)
				for j := range want {
					if math.Float32bits(y[j]) != math.Float32bits(want[j]) {
						t.Fatalf("%s m=%d d=%d rows=%d ldy=%d ldp=%d ldv=%d: y[%d] = %v, Axpy per row %v", s.Name, m, d, rows, ldy, ldp, ldv, j, y[j], want[j])
					}
				}
			}
		}
	}
}

// ExpSum: every value within 3e-7 of e^(x-mx) relative (and exactly 0 below
// -87, for -Inf and NaN), the sum within float rounding of the exact sum,
// and the same bits for the same values at any address.
func TestExpSum(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, n := range testLengths {
			x := randF32(r, n, r.IntN(3))
			for i := range x {
				x[i] = x[i] * 30
			}
			if n > 3 {
				x[0], x[1], x[2] = float32(math.Inf(-1)), float32(math.NaN()), -200
			}
			mx := float32(math.Inf(-1))
			for _, v := range x {
				if v > mx {
					mx = v
				}
			}
			got := append([]float32(nil), x...)
			sum := s.ExpSum(got, mx)
			var want float64
			for i, v := range x {
				d := float64(v - mx) // the kernel exponentiates the float32 difference
				e := 0.0
				if d >= -87 {
					e = math.Exp(d)
				}
				want += e
				if e == 0 {
					if got[i] != 0 {
						t.Fatalf("%s n=%d: exp(%v - %v) = %v, want 0", s.Name, n, v, mx, got[i])
					}
					continue
				}
				if rel := math.Abs(float64(got[i])-e) / e; rel > 3e-7 {
					t.Fatalf("%s n=%d: exp(%v - %v) = %v, want %v (rel %g)", s.Name, n, v, mx, got[i], e, rel)
				}
			}
			if math.Abs(float64(sum)-want) > 1e-6*want+1e-30 {
				t.Fatalf("%s n=%d: sum %v, want %v", s.Name, n, sum, want)
			}
			moved := misaligned[float32](n, 2)
			copy(moved, x)
			if sum2 := s.ExpSum(moved, mx); math.Float32bits(sum2) != math.Float32bits(sum) {
				t.Fatalf("%s n=%d: sum %v at another address, %v here", s.Name, n, sum2, sum)
			}
		}
	}
}

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x <= 0; x += 0.0007 {
		want := math.Exp(float64(x))
		got := float64(Expf(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Errorf("Expf: max relative error %g > 3e-7", worst)
	}
	if Expf(0) != 1 || Expf(-100) != 0 || Expf(float32(math.Inf(-1))) != 0 || Expf(float32(math.NaN())) != 0 {
		t.Errorf("Expf edge cases: %v %v %v %v", Expf(0), Expf(-100), Expf(float32(math.Inf(-1))), Expf(float32(math.NaN())))
	}
}

// SiLU and SwiGLU (divided back by up) within 1e-6 relative (plus 1e-30
// absolute) of the float64 definition, over the range where the exponential saturates too.
func TestSiLU(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, n := range testLengths {
			x, up := randF32(r, n, r.IntN(3)), randF32(r, n, r.IntN(3))
			for i := range x {
				x[i] *= []float32{1, 10, 60}[i%3]
			}
			if n > 4 {
				x[0], x[1], x[2], x[3] = 200, -200, 0, -90
			}
			y, z := make([]float32, n), append([]float32(nil), up...)
			s.SiLU(y, x)
			s.SwiGLU(z, x, z) // in place over up
			for i, v := range x {
				want := float64(v) / (1 + math.Exp(-float64(v)))
				for name, got := range map[string]float64{"SiLU": float64(y[i]), "SwiGLU": float64(z[i]) / float64(up[i])} {
					if name == "SwiGLU" && up[i] == 0 {
						continue
					}
					if d := math.Abs(got - want); d > 1e-6*math.Abs(want)+1e-30 {
						t.Fatalf("%s.%s(%v) = %v, want %v", s.Name, name, v, got, want)
					}
				}
			}
		}
	}
}

func TestSigmoid(t *testing.T) {
	for x := float32(-100); x <= 100; x += 0.013 {
		got, want := float64(Sigmoid(x)), 1/(1+math.Exp(-float64(x)))
		if d := math.Abs(got - want); d > 1e-6*want && d > 1e-12 {
			t.Fatalf("Sigmoid(%g) = %g, want %g", x, got, want)
		}
	}
}

// The IEEE-half forms: MatMulStridedF16 gives every output the bits of
// MatMulF16 alone, and AxpyRowsF16 the bits of AxpyRows over the converted
// values, in every Set.
func TestStridedAndAxpyRowsF16(t *testing.T) {
	r := newRand(t)
	for _, s := range Sets() {
		for _, sz := range [][3]int{{1, 1, 1}, {8, 37, 64}, {5, 9, 8}, {13, 6, 100}, {2, 70, 128}, {7, 4, 33}} {
			m, n, k := sz[0], sz[1], sz[2]
			ldx, ldw, ldy := k+r.IntN(5), k+r.IntN(200), n+r.IntN(3)
			x, w := randF32(r, (m-1)*ldx+k, r.IntN(3)), randF16(r, (n-1)*ldw+k, r.IntN(3))
			y := make([]float32, (m-1)*ldy+n)
			s.MatMulStridedF16(y, ldy, x, ldx, m, w, ldw, n, k)
			for i := range m {
				for j := range n {
					var one [1]float32
					s.MatMulF16(one[:], 1, x[i*ldx:i*ldx+k], 1, w[j*ldw:j*ldw+k])
					if math.Float32bits(y[i*ldy+j]) != math.Float32bits(one[0]) {
						t.Fatalf("%s MatMulStridedF16 m=%d n=%d k=%d: y[%d,%d] = %v, alone %v", s.Name, m, n, k, i, j, y[i*ldy+j], one[0])
					}
				}
			}
		}
		for _, d := range []int{1, 7, 8, 16, 17, 64, 80, 128, 129} {
			for _, sz := range [][2]int{{1, 1}, {3, 5}, {4, 40}, {6, 7}} {
				m, rows := sz[0], sz[1]
				ldy, ldp, ldv := d+r.IntN(3), rows+r.IntN(4), d+r.IntN(70)
				p := randF32(r, (m-1)*ldp+rows, 0)
				v := randF16(r, (rows-1)*ldv+d, r.IntN(3))
				vf := make([]float32, len(v))
				s.ConvertF16ToF32(vf, v)
				y := randF32(r, (m-1)*ldy+d, 0)
				want := append([]float32(nil), y...)
				s.AxpyRows(want, ldy, m, d, p, ldp, rows, vf, ldv)
				s.AxpyRowsF16(y, ldy, m, d, p, ldp, rows, v, ldv)
				for j := range want {
					if math.Float32bits(y[j]) != math.Float32bits(want[j]) {
						t.Fatalf("%s AxpyRowsF16 m=%d d=%d rows=%d: y[%d] = %v, over converted values %v", s.Name, m, d, rows, j, y[j], want[j])
					}
				}
			}
		}
	}
}
