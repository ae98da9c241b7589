package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/quant"
)

// Affine-quantized matrix products (MLX's layout, package quant): weights
// stored as 4- or 8-bit codes packed in uint32 words with a scale s and a
// bias b per group of GroupSize elements of a row, value = s·q + b.
//
// MatMulAffine computes y = x·wᵀ without expanding w. Every implementation
// computes each output y[i,j] from row i of x and row j of w alone, by the
// same sequence of operations whatever m is and whichever rows of w the
// call covers, so batching rows (speculative verification) or splitting w
// across goroutines never changes a result.
//
// The reference (affine_generic.go) accumulates Σ x·q per group and adds
// s·Σx·q + b·Σx with the group's x sum; the amd64 kernels (AVX2, AVX-512)
// dequantize each group exactly, s·q + b as one fused multiply-add (exact
// where the product s·q is, as it always is for F16 and BF16 scales), and
// take a dot product with several accumulators. Both differ from the
// dequantize-then-dot reference of runtime/cpu by float rounding only.

// ScaleType is the storage type of the scales and biases.
type ScaleType uint8

const (
	ScalesF16  ScaleType = iota // IEEE half, as mlx-community checkpoints store them
	ScalesBF16                  // bfloat16
	ScalesF32                   // float32
)

// Size is the bytes of one scale.
func (t ScaleType) Size() int {
	if t == ScalesF32 {
		return 4
	}
	return 2
}

// AffineRows is a block of rows of an affine-quantized [n, K] matrix.
type AffineRows struct {
	Bits      int // 4 or 8
	GroupSize int // 32, 64 or 128
	K         int // elements per row, a multiple of GroupSize
	// Codes are the packed codes, [n, K·Bits/32].
	Codes []uint32
	// Scales and Biases hold [n, K/GroupSize] values of ScaleType,
	// little-endian.
	Scales, Biases []byte
	ScaleType      ScaleType
}

// N is the number of rows.
func (w *AffineRows) N() int {
	if w.K == 0 {
		return 0
	}
	return len(w.Codes) / (w.K * w.Bits / 32)
}

// Rows returns rows [lo, hi) of w.
func (w *AffineRows) Rows(lo, hi int) AffineRows {
	r := *w
	words, sb := w.K*w.Bits/32, w.K/w.GroupSize*w.ScaleType.Size()
	r.Codes = w.Codes[lo*words : hi*words]
	r.Scales, r.Biases = w.Scales[lo*sb:hi*sb], w.Biases[lo*sb:hi*sb]
	return r
}

// check validates w and returns its row count.
func (w *AffineRows) check(op string) int {
	if (w.Bits != 4 && w.Bits != 8) || !quant.AffineGroupSize(w.GroupSize) || w.K <= 0 || w.K%w.GroupSize != 0 {
		panic(fmt.Sprintf("kernels: %s: %d bits, groups of %d, K=%d", op, w.Bits, w.GroupSize, w.K))
	}
	words := w.K * w.Bits / 32
	n := len(w.Codes) / words
	sb := n * (w.K / w.GroupSize) * w.ScaleType.Size()
	if len(w.Codes) != n*words || len(w.Scales) != sb || len(w.Biases) != sb {
		panic(fmt.Sprintf("kernels: %s: %d words, %d+%d scale bytes for rows of %d words", op,
			len(w.Codes), len(w.Scales), len(w.Biases), words))
	}
	return n
}

// at returns the float32 value of scale (or bias) i of b.
func (t ScaleType) at(b []byte, i int) float32 {
	switch t {
	case ScalesF16:
		return quant.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	case ScalesBF16:
		return quant.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// MatMulAffine sets y[i*ldy+j] = Σ_k x[i*K+k]·(s·q+b)[j,k] for i < m and
// every row j of w. It panics unless len(x) == m·w.K, ldy ≥ n and
// len(y) ≥ (m-1)·ldy+n.
func MatMulAffine(y []float32, ldy int, x []float32, m int, w AffineRows) {
	n := w.check("MatMulAffine")
	if len(x) != m*w.K || (m > 0 && n > 0 && (ldy < n || len(y) < (m-1)*ldy+n)) {
		panic(fmt.Sprintf("kernels: MatMulAffine: len(x)=%d for m=%d, K=%d; len(y)=%d, ldy=%d, n=%d",
			len(x), m, w.K, len(y), ldy, n))
	}
	if m == 0 || n == 0 {
		return
	}
	affineActive(y, ldy, x, m, &w, n)
}

// MatMulAffineGeneric is MatMulAffine's pure-Go reference implementation,
// for tests and benchmarks.
func MatMulAffineGeneric(y []float32, ldy int, x []float32, m int, w AffineRows) {
	n := w.check("MatMulAffine")
	if len(x) != m*w.K || (m > 0 && n > 0 && (ldy < n || len(y) < (m-1)*ldy+n)) {
		panic("kernels: MatMulAffineGeneric: bad lengths")
	}
	if m > 0 && n > 0 {
		matMulAffineGeneric(y, ldy, x, m, &w, n)
	}
}

// AffineImpl names the implementation MatMulAffine uses: "generic", "avx2"
// or "avx512".
func AffineImpl() string { return affineImpl }
