package cpu

import (
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
)

// RMSNormOp; mirrors internal/backend/metal/norm.go.

// rmsnorm: out = x / sqrt(mean(x²) + eps) * w, per row of length d. Rows
// are split across the workers, each row whole, so the thread count does
// not change how a row's sum rounds. The reference sums in index order (a
// dependent chain: ~3 µs a row of 2048, and a verification pass normalizes
// 5 or more rows 45 times); the fast backend sums with the vector kernel,
// whose order depends on the length alone.
func (b *Backend) rmsnorm(y, x, w []float32, d int, eps float32) {
	b.pool.parallel(len(x)/d, 1, 2, func(lo, hi int) { b.rmsnormRows(y, x, w, d, eps, lo, hi) })
}

// rmsnormRows normalizes rows lo to hi-1.
func (b *Backend) rmsnormRows(y, x, w []float32, d int, eps float32, lo, hi int) {
	for r := lo * d; r < hi*d; r += d {
		xr := x[r : r+d]
		var ss float32
		if b.reference {
			for _, v := range xr {
				ss += v * v
			}
		} else {
			ss = kernels.SumSquares(xr)
		}
		scale := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
		yr, w := y[r:r+d], w[:d]
		for i, v := range xr {
			yr[i] = v * scale * w[i]
		}
	}
}
