package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddMulBroadcast: AddOp and MulOp against the definition, y[i] = a[i]
// op b[i mod len(b)], for b as long as a, one row of a, and one element, in
// place too.
func TestAddMulBroadcast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][2]int{{1, 1}, {12, 12}, {15, 5}, {5 * 2048, 2048}, {7, 1}} {
		a, b := randF32(r, s[0]), randF32(r, s[1])
		for _, op := range []struct {
			name string
			run  func(y, a, b []float32)
			f    func(a, b float32) float32
		}{{"add", add, func(a, b float32) float32 { return a + b }}, {"mul", mul, func(a, b float32) float32 { return a * b }}} {
			y := make([]float32, len(a))
			op.run(y, a, b)
			inPlace := append([]float32(nil), a...)
			op.run(inPlace, inPlace, b)
			for i := range a {
				want := op.f(a[i], b[i%len(b)])
				if y[i] != want || inPlace[i] != want {
					t.Fatalf("%s %v: y[%d] = %g (in place %g), want %g", op.name, s, i, y[i], inPlace[i], want)
				}
			}
		}
	}
}

// TestRMSNormRowsSplit: rows normalized across workers equal, bit for bit,
// the formula applied row by row on one thread (the rounding of the sum must
// not depend on the thread count, or greedy decoding would).
func TestRMSNormRowsSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const d, eps = 64, 1e-5
	w := randF32(r, d)
	for _, threads := range []int{1, 2, 3, 8} {
		b := New(threads)
		for _, rows := range []int{1, 2, 5, 33} {
			x := randF32(r, rows*d)
			y := make([]float32, rows*d)
			b.rmsnorm(y, x, w, d, eps)
			for row := range rows {
				xr := x[row*d : (row+1)*d]
				var ss float32
				for _, v := range xr {
					ss += v * v
				}
				scale := float32(1 / math.Sqrt(float64(ss/d+eps)))
				for i, v := range xr {
					if want := v * scale * w[i]; y[row*d+i] != want {
						t.Fatalf("threads %d rows %d: y[%d][%d] = %g, want %g", threads, rows, row, i, y[row*d+i], want)
					}
				}
			}
		}
	}
}
