//go:build !amd64 || noasm

package kernels

const affineImpl = "generic"

func affineActive(y []float32, ldy int, x []float32, m int, w *AffineRows, n int) {
	matMulAffineGeneric(y, ldy, x, m, w, n)
}
