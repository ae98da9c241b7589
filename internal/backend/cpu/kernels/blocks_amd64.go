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

// blocksVNNI reports whether Q6_K and Q5_K products take the VNNI kernels
// (internal/blocksgen): on AVX-512 VNNI machines, as the affine products
// do. Tests turn it off to check the float path.
var blocksVNNI = affineVNNI

// blockVNNIFunc is a generated VNNI block kernel (internal/blocksgen).
type blockVNNIFunc = func(x *byte, ldx int, aux *byte, blk *byte, blocks int, n int, y *float32, ldy int)

// The generated kernels by rows of x (1..6).
var (
	q6KVNNI = [...]blockVNNIFunc{nil, q6KVNNI1, q6KVNNI2, q6KVNNI3, q6KVNNI4, q6KVNNI5, q6KVNNI6}
	q5KVNNI = [...]blockVNNIFunc{nil, q5KVNNI1, q5KVNNI2, q5KVNNI3, q5KVNNI4, q5KVNNI5, q5KVNNI6}
)

// blocksVNNIFit reports whether products with blocks of format t take
// the VNNI kernels here.
func blocksVNNIFit(t quant.GGML) bool { return blocksVNNI && (t == quant.Q6_K || t == quant.Q5_K) }

// blocksVNNIX is x prepared for the VNNI kernels: quantized per row to
// int8 in blocks of 32 exactly as MatMulAffine quantizes it (vnniPrep,
// 8-bit layout, with the blocks' sums d·Σq) and reordered per block of 256
// as the kernels transpose the codes (transposeVNNIBlocks); for Q6_K also
// each lane's -32·Σx (its codes are q+32), taken from the int8 values.
// Q5_K's kernels use the block sums for the mins.
type blocksVNNIX struct {
	t      quant.GGML
	m, k   int
	l      vnniLayout
	xp, np *[]byte // x and Q6_K's sums; np nil for Q5_K
}

func prepareBlocksVNNI(x []float32, m, k int, t quant.GGML) *blocksVNNIX {
	l := newVNNILayout(k, 8, vnniBlock)
	v := &blocksVNNIX{t: t, m: m, k: k, l: l, xp: vnniBuffer(m, l)}
	xb := *v.xp
	prepareVNNIRows(xb, x, k, 8, vnniBlock, l, 0, m)
	for i := range m {
		transposeVNNIBlocks(xb[i*l.ldx:], k)
	}
	if t == quant.Q6_K {
		v.np = vnniBuffer(m, l)
		for i := range m {
			q8NegSums(unsafe.Slice((*int32)(unsafe.Pointer(&(*v.np)[i*l.ldx])), k/16), xb[i*l.ldx:], k, -32)
		}
	}
	return v
}

func (v *blocksVNNIX) release() {
	bytePool.Put(v.xp)
	if v.np != nil {
		bytePool.Put(v.np)
	}
}

// matMul multiplies every row of w by up to six rows of x at a time (a
// verification batch of 5 or 6 tokens unpacks each block once); a row's
// result depends on its row of x and its row of w alone.
func (v *blocksVNNIX) matMul(y []float32, ldy int, w []byte) {
	t, m, k, l := v.t, v.m, v.k, v.l
	bb, blocks := t.BlockBytes(), k/256
	n := len(w) / (blocks * bb)
	if n == 0 {
		return
	}
	xb := *v.xp
	fn, aux, auxOff := &q5KVNNI, xb, l.xsOff
	if t == quant.Q6_K {
		fn, aux, auxOff = &q6KVNNI, *v.np, 0
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
			fn[mr](&xb[i0*l.ldx], l.ldx, &aux[i0*l.ldx+auxOff], &w[j0*rowBytes], blocks, nr, &y[i0*ldy+j0], ldy)
		}
	}
}

// vnniMaxRows is the most rows of x one VNNI block kernel call takes.
const vnniMaxRows = 6

// transposeVNNIBlocks reorders a row of x prepared in the 8-bit chunk
// layout (k elements) for the block kernels, block of 256 by block: the
// int8 values as the kernels transpose the codes (chunk j's lane 4g+c takes
// chunk c's lane 4g+j, so a lane of the four chunks holds the 16 elements
// 64c+16g..64c+16g+15), and the first chunk's 16 lane scales each the
// scale of its lane's elements (the other chunks' scale slots are unused).
func transposeVNNIBlocks(row []byte, k int) {
	words := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(row))), k/64*32)
	var old [128]uint32
	for b := range k / 256 {
		blk := words[128*b : 128*b+128 : 128*b+128]
		old = [128]uint32(blk)
		for j := range 4 {
			for g := range 4 {
				for c := range 4 {
					blk[32*j+4*g+c] = old[32*c+4*g+j]
				}
			}
		}
		for g := range 4 {
			for c := range 4 {
				blk[16+4*g+c] = old[32*c+16+4*g]
			}
		}
	}
}

// q8NegSums sets dst[16b+lane] to f times the sum of the lane's 16 int8
// values in block b of a row of x prepared by transposeVNNIBlocks (k
// elements: four chunks of 64 values and 16 lane scales a block).
func q8NegSums(dst []int32, row []byte, k int, f int32) {
	for b := range k / 256 {
		for lane := range 16 {
			var s int32
			for j := range 4 {
				q := row[512*b+128*j+4*lane:][:4]
				s += int32(int8(q[0])) + int32(int8(q[1])) + int32(int8(q[2])) + int32(int8(q[3]))
			}
			dst[16*b+lane] = f * s
		}
	}
}
