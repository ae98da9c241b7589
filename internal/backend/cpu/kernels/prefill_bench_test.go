package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkMatMulPrefill is the prefill shape: a chunk of 128 or 256 prompt
// tokens against TinyLlama-sized f16 matrices (hot: w stays in L3), one
// goroutine. GFLOP/s counts 2MNK.
func BenchmarkMatMulPrefill(b *testing.B) {
	for _, sz := range [][3]int{{256, 2048, 2816}, {128, 5632, 1024}} {
		m, k, n := sz[0], sz[1], sz[2]
		x := make([]float32, m*k)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		w := make([]uint16, n*k)
		for i := range w {
			w[i] = 0x3c00
		}
		y := make([]float32, m*n)
		b.Run(fmt.Sprintf("M%d_K%d_N%d", m, k, n), func(b *testing.B) {
			for b.Loop() {
				MatMulF16(y, n, x, m, w)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
