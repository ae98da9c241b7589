//go:build !amd64 || noasm

package kernels

import "github.com/seed9b8f47b1/redrafter/internal/quant"

// Without assembly every format decodes with package quant's reference.
func decodeBlocksFast(t quant.GGML, dst []float32, src []byte) bool { return false }

// Without assembly no format has a VNNI product.
var blocksVNNI = false

func blocksVNNIFit(t quant.GGML) bool { return false }

func matMulBlocksVNNI(y []float32, ldy int, x []float32, m int, w []byte, t quant.GGML, k int) bool {
	return false
}
