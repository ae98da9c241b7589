package cpu

import "github.com/seed9b8f47b1/redrafter/quant"

// Temporary pure-Go inner loops until the SIMD kernels package lands.

func dotF32(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpy(y []float32, a float32, x []float32) {
	for i, v := range x {
		y[i] += a * v
	}
}

func matmulF32(y []float32, ldy int, x []float32, m int, w []float32) {
	k := len(x) / m
	n := len(w) / k
	for i := range m {
		xr := x[i*k : (i+1)*k]
		for j := range n {
			y[i*ldy+j] = dotF32(w[j*k:(j+1)*k], xr)
		}
	}
}

func matmulHalf(y []float32, ldy int, x []float32, m int, w []uint16, bf bool) {
	k := len(x) / m
	n := len(w) / k
	row := make([]float32, k)
	for j := range n {
		for t, h := range w[j*k : (j+1)*k] {
			if bf {
				row[t] = quant.BF16ToF32(h)
			} else {
				row[t] = quant.F16ToF32(h)
			}
		}
		for i := range m {
			y[i*ldy+j] = dotF32(row, x[i*k:(i+1)*k])
		}
	}
}
