//go:build amd64 && !noasm

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// blocksAVX512 reports whether the generated block decoders
// (internal/blocksgen) run on this CPU.
var blocksAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasF16C

// decodeBlocksFast decodes the blocks in src into dst with a generated
// decoder, bit for bit quant.DequantizeGGML's values, and reports whether
// it did: false when t has no decoder here or the CPU lacks AVX-512.
// dst holds exactly the elements of src's whole blocks.
func decodeBlocksFast(t quant.GGML, dst []float32, src []byte) bool {
	if !blocksAVX512 || len(src) == 0 {
		return false
	}
	n := len(src) / t.BlockBytes()
	switch t {
	case quant.Q6_K:
		decodeQ6K_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.Q5_K:
		decodeQ5K_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.Q5_0:
		decodeQ5_0_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.IQ4_NL:
		decodeIQ4NL_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	case quant.IQ4_XS:
		decodeIQ4XS_avx512(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	default:
		return false
	}
	return true
}

// blocksVNNI reports whether Q6_K products take the VNNI kernels
// (internal/blocksgen): on AVX-512 VNNI machines, as the affine products
// do. Tests turn it off to check the float path.
var blocksVNNI = affineVNNI

// q6KVNNI are the generated kernels by rows of x (1..4).
var q6KVNNI = [...]func(x *byte, ldx int, nsum *int32, blk *byte, blocks int, n int, y *float32, ldy int){
	nil, q6KVNNI1, q6KVNNI2, q6KVNNI3, q6KVNNI4}

// matMulBlocksVNNI runs MatMulBlocks with the VNNI kernels and reports
// whether it did: for Q6_K on AVX-512 VNNI machines. x is quantized per row
// to int8 in blocks of 32 exactly as MatMulAffine quantizes it (vnniPrep,
// 8-bit layout), each lane's -32·Σx taken from the int8 values, and every
// row of w multiplied by up to four rows of x at a time; a row's result
// depends on its row of x and its row of w alone.
func matMulBlocksVNNI(y []float32, ldy int, x []float32, m int, w []byte, t quant.GGML, k int) bool {
	if !blocksVNNI || t != quant.Q6_K {
		return false
	}
	const bb = 210 // Q6_K's bytes per block
	blocks := k / 256
	n := len(w) / (blocks * bb)
	if m == 0 || n == 0 {
		return true
	}
	l := newVNNILayout(k, 8, vnniBlock)
	xp, np := vnniBuffer(m, l), vnniBuffer(m, l)
	xb, nb := *xp, *np
	prepareVNNIRows(xb, x, k, 8, vnniBlock, l, 0, m)
	for i := range m {
		q8NegSums(unsafe.Slice((*int32)(unsafe.Pointer(&nb[i*l.ldx])), k/4), xb[i*l.ldx:], k, -32)
	}
	// Rows of w go in blocks that stay in L2 while every group of rows of x
	// goes past them; one pass when one group takes every row of x.
	rowBytes := blocks * bb
	rb := n
	if m > vnniMaxRows {
		rb = max(1, affineRowBlock/rowBytes)
	}
	for j0 := 0; j0 < n; j0 += rb {
		nr := min(rb, n-j0)
		for i0 := 0; i0 < m; i0 += vnniMaxRows {
			mr := min(vnniMaxRows, m-i0)
			q6KVNNI[mr](&xb[i0*l.ldx], l.ldx, (*int32)(unsafe.Pointer(&nb[i0*l.ldx])), &w[j0*rowBytes], blocks, nr, &y[i0*ldy+j0], ldy)
		}
	}
	bytePool.Put(xp)
	bytePool.Put(np)
	return true
}

// vnniMaxRows is the most rows of x one VNNI block kernel call takes.
const vnniMaxRows = 4

// q8NegSums sets dst[lane] to f times the sum of the lane's four int8 values
// of a row of x prepared in the 8-bit chunk layout (k elements: k/64 chunks
// of 64 values and 16 lane scales).
func q8NegSums(dst []int32, row []byte, k int, f int32) {
	for c := range k / 64 {
		q := row[128*c : 128*c+64 : 128*c+64]
		for lane := range 16 {
			s := int32(int8(q[4*lane])) + int32(int8(q[4*lane+1])) + int32(int8(q[4*lane+2])) + int32(int8(q[4*lane+3]))
			dst[16*c+lane] = f * s
		}
	}
}
