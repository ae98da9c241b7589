//go:build !amd64 || noasm

package kernels

func affineKernelSets() []affineKernels { return nil }

func (affineKernels) call(y []float32, ldy int, x []float32, m int, w AffineRows) {
	MatMulAffineGeneric(y, ldy, x, m, w)
}
