package kernels

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// ggml block-quantized weights (GGUF's Q5_K, Q6_K, ...; package quant).
// On AVX-512 VNNI machines Q6_K and Q5_K products round x to int8 per
// block of 32 as MatMulAffine does and multiply it by the blocks' codes
// unpacked to bytes in registers (VPDPBUSD; internal/blocksgen, see
// blocksVNNIX): they read the blocks at memory speed, and a row's
// result still depends on its row of x and its row of w alone. Otherwise
// a product decodes a few rows of blocks at a time into float32 scratch,
// with generated AVX-512 decoders where there are (Q6_K, Q5_K; see
// internal/blocksgen) and quant's reference dequantization otherwise, the
// values ggml's bit for bit either way, and multiplies them with MatMulF32
// while they are in the L1 cache: the weights are read from memory once,
// at their own bytes per element.
// Every output is then MatMulF32's over the dequantized row, so the
// batch-invariance promise carries over: a row's result does not depend on
// m or on which rows share a call (as it does not with the VNNI kernels).

//go:generate go run ./internal/blocksgen -dir .

// blockScratchFloats bounds the rows decoded at once: 8 rows, or as many
// as fit in 32 KiB of floats (at least one).
const blockScratchFloats = 8 << 10

// BlockRows is the number of weight rows MatMulBlocks decodes at a time for
// rows of k elements; its scratch must hold BlockRows(k)·k floats.
func BlockRows(k int) int { return max(1, min(8, blockScratchFloats/max(k, 1))) }

// MatMulBlocks sets y[i*ldy+j] = Σ_kk x[i*k+kk]·W[j,kk] for i < m and the
// rows j of W held in w as blocks of format t (k elements, a whole number
// of blocks, per row); scratch holds at least BlockRows(k)·k floats. It
// panics unless len(w) is a whole number of rows, len(x) == m·k and y
// holds the [m, n] block (ldy ≥ n, len(y) ≥ (m-1)·ldy + n); the
// caller checks the format and the row size.
func MatMulBlocks(y []float32, ldy int, x []float32, m int, w []byte, t quant.GGML, k int, scratch []float32) {
	p := PrepareBlocks(x, m, k, t)
	MatMulBlocksX(y, ldy, p, w, scratch)
	p.Release()
}

// BlocksX is x prepared for products with blocks of one format: on AVX-512
// VNNI machines, for Q6_K and Q5_K, rounded to int8 and reordered for the
// VNNI kernels, once for all the parts of a weight that a product's
// workers take (MatMulBlocksX); otherwise x itself.
type BlocksX struct {
	x    []float32
	m, k int
	t    quant.GGML
	v    *blocksVNNIX // nil: the decoding path
}

// PrepareBlocks prepares the m rows of k elements in x for MatMulBlocksX
// with blocks of format t. It panics unless len(x) == m·k. Release returns
// its buffers.
func PrepareBlocks(x []float32, m, k int, t quant.GGML) *BlocksX {
	if len(x) != m*k {
		panic("kernels: PrepareBlocks: operands disagree")
	}
	p := &BlocksX{x: x, m: m, k: k, t: t}
	if m > 0 && blocksVNNIFit(t) && k%256 == 0 {
		p.v = prepareBlocksVNNI(x, m, k, t)
	}
	return p
}

// Release returns p's buffers; p must not be used again.
func (p *BlocksX) Release() {
	if p.v != nil {
		p.v.release()
		p.v = nil
	}
}

// MatMulBlocksX is MatMulBlocks with x prepared by PrepareBlocks: the
// same bits, whichever rows of the weight w holds.
func MatMulBlocksX(y []float32, ldy int, p *BlocksX, w []byte, scratch []float32) {
	x, m, k, t := p.x, p.m, p.k, p.t
	rb := k / t.BlockElems() * t.BlockBytes()
	if rb == 0 || len(w)%rb != 0 {
		panic("kernels: MatMulBlocks: operands disagree")
	}
	// The VNNI kernels store without bounds checks.
	if n := len(w) / rb; m > 0 && n > 0 && (ldy < n || len(y) < (m-1)*ldy+n) {
		panic(fmt.Sprintf("kernels: MatMulBlocks: y of %d (ldy %d) for [%d, %d]", len(y), ldy, m, n))
	}
	if p.v != nil {
		p.v.matMul(y, ldy, w)
		return
	}
	n, step := len(w)/rb, BlockRows(k)
	for j := 0; j < n; j += step {
		r := min(step, n-j)
		rows := scratch[:r*k]
		decodeBlocks(t, rows, w[j*rb:(j+r)*rb])
		// One row of x (a decode step) takes the tiles that do not
		// prefetch past the scratch; their bits are MatMulF32's.
		if m == 1 && matVecF32Hot(y[j:j+r], x, rows) {
			continue
		}
		MatMulF32(y[j:], ldy, x, m, rows)
	}
}

// BlocksInt8 reports whether MatMulBlocks multiplies blocks of format t by
// x rounded to int8 per block of 32 (the AVX-512 VNNI kernels: Q6_K and
// Q5_K on machines that have them) rather than by MatMulF32 over the
// decoded rows.
func BlocksInt8(t quant.GGML) bool { return blocksVNNIFit(t) }

// decodeBlocks sets dst to the values of the whole blocks in src (exactly
// len(dst) elements), quant.DequantizeGGML's bit for bit.
func decodeBlocks(t quant.GGML, dst []float32, src []byte) {
	if len(dst) != len(src)/t.BlockBytes()*t.BlockElems() {
		panic("kernels: decodeBlocks: operands disagree")
	}
	if decodeBlocksFast(t, dst, src) {
		return
	}
	if err := quant.DequantizeGGML(t, dst, src); err != nil {
		panic("kernels: MatMulBlocks: " + err.Error())
	}
}
