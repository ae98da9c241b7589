//go:build !amd64 || noasm

package kernels

import "github.com/seed9b8f47b1/redrafter/internal/quant"

// Without assembly every format decodes with package quant's reference.
func decodeBlocksFast(t quant.GGML, dst []float32, src []byte) bool { return false }

// Without assembly no format has a VNNI product.
var blocksVNNI = false

func blocksVNNIFit(t quant.GGML) bool { return false }

type blocksVNNIX struct{}

func prepareBlocksVNNI(x []float32, m, k int, t quant.GGML) *blocksVNNIX { return nil }

func (v *blocksVNNIX) release() {}

func (v *blocksVNNIX) matMul(y []float32, ldy int, w []byte) {}
