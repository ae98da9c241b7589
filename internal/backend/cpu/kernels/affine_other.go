//go:build !amd64 || noasm

package kernels

// Without assembly there is no prepared form: MatMulAffineX runs the
// generic code on x itself.

type affinePrep struct{}

type affineKernels struct{ name string }

var affineCur *affineKernels

func (*affineKernels) alloc(x []float32, m, k, bits, gs int) affinePrep            { return affinePrep{} }
func (*affineKernels) prepareRows(*affinePrep, []float32, int, int, int, int, int) {}
func (*affineKernels) release(affinePrep)                                          {}
func (*affineKernels) run(y []float32, ldy int, p *AffineX, w *AffineRows, n int) {
	matMulAffineGeneric(y, ldy, p.x, p.m, w, n)
}

// affineTiles reports whether PackAffineTiles packs: never without assembly.
const affineTiles = false

func hasSymmetricTiles(bits, gs int, st ScaleType) bool { return false }

func runTiles(y []float32, ldy int, p *AffineX, t *AffineTiles) {
	panic("kernels: no tile kernel in this build")
}
