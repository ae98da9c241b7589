package cpu

import "math"

// RMSNormOp; mirrors backend/metal/norm.go.

// rmsnorm: out = x / sqrt(mean(x²) + eps) * w, per row of length d. Rows
// are split across the workers: a row is ~5 µs (the sum is one dependent
// chain, kept in order so that every backend and thread count rounds alike),
// and a verification pass normalizes 5 or more rows 45 times.
func (b *Backend) rmsnorm(y, x, w []float32, d int, eps float32) {
	b.pool.parallel(len(x)/d, 1, 1, func(lo, hi int) {
		for r := lo * d; r < hi*d; r += d {
			xr := x[r : r+d]
			var ss float32
			for _, v := range xr {
				ss += v * v
			}
			scale := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
			yr := y[r : r+d]
			for i, v := range xr {
				yr[i] = v * scale * w[i]
			}
		}
	})
}
