package cpu

import "math"

// RMSNormOp; mirrors backend/metal/norm.go.

// rmsnorm: out = x / sqrt(mean(x²) + eps) * w, per row of length d.
func (b *Backend) rmsnorm(y, x, w []float32, d int, eps float32) {
	for r := 0; r < len(x); r += d {
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
}
