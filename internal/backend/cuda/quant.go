package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// qembed, qmatmul and dequantize encode the ops over affine-quantized
// weights (codes, scales, biases).
func (e *encoder) qembed(op graph.QEmbedOp) error {
	n, k := e.shape(3).Numel(), e.step.Out.Shape[1]
	e.add(qembedLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], op.Bits, e.dtype(1), n, k, e.shape(0)[0], op.GroupSize))
	return nil
}

func (e *encoder) qmatmul(op graph.QMatMulOp) error {
	m, k := e.shape(0)[0], e.shape(0)[1]
	if !codesAligned(e.in[1]) {
		return fmt.Errorf("quantized weight codes at %#x are not 16-byte aligned", uint64(e.in[1]))
	}
	e.add(qmatvecLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], op.Bits, e.dtype(2), m, k, e.shape(1)[0], op.GroupSize))
	return nil
}

func (e *encoder) dequantize(op graph.DequantizeOp) error {
	n, k := e.step.Out.Shape[0], e.step.Out.Shape[1]
	e.add(dequantLaunch(e.out, e.in[0], e.in[1], e.in[2], op.Bits, e.dtype(1), n, k, op.GroupSize))
	return nil
}

func qembedLaunch(out, w, scales, biases, ids devptr, bits int, sdt graph.DType, n, d, v, gs int) *launch {
	return newLaunch(fmt.Sprintf("qembed_%d_%v", bits, sdt), grid1(n), 128).
		ptr(out).ptr(w).ptr(scales).ptr(biases).ptr(ids).i32(n).i32(d).i32(v).i32(gs)
}

// qmatvecLaunch: w must be 16-byte aligned (codesAligned). One row of x
// (decoding) goes to qmatvec1_*, whose blocks compute qmvBlockCols(1)
// columns (twice the multi-row kernels': more weight bytes in flight a
// block for the same fixed cost); more go to qmatvec_*, which computes 4
// rows at a time. Both compute a (row, column) with the same code, in an
// order the columns a block has do not change, so its bits do not depend
// on m (TestQMatVecRowsSameBitsAnyM).
func qmatvecLaunch(out, x, w, scales, biases devptr, bits int, sdt graph.DType, m, k, n, gs int) *launch {
	name := "qmatvec"
	if m == 1 {
		name = "qmatvec1"
	}
	return newLaunch(fmt.Sprintf("%s_%d_%v", name, bits, sdt), grid1(ceilDiv(n, qmvBlockCols(m))), 128).
		ptr(out).ptr(x).ptr(w).ptr(scales).ptr(biases).i32(m).i32(k).i32(n).i32(gs)
}

// qmvKThreads is the threads of a qmatvec block that share a column's row
// (QMV_KTHREADS in quant.cu), each reading 16-byte chunks of it: a row of
// k = 2048 codes is 64 chunks at 4 bits and 128 at 8, so none is idle at
// the model's width (TestQMatVecKSplit).
const qmvKThreads = 64

// qmvSetCols is the columns of a set of qmvKThreads threads in the
// multi-row kernels (QMV_SET_COLS in quant.cu), qmv1SetCols in the one-row
// ones (QMV1_SET_COLS): a SwiGLU block's outputs, its sets reading their
// gate and up rows. A block is two sets.
const (
	qmvSetCols  = 4
	qmv1SetCols = 8
)

// qmvSetColumns is the columns of a set of the kernels that take m rows.
func qmvSetColumns(m int) int {
	if m == 1 {
		return qmv1SetCols
	}
	return qmvSetCols
}

// qmvBlockCols is the columns of a block (two sets) of the kernels that
// take m rows.
func qmvBlockCols(m int) int { return 2 * qmvSetColumns(m) }

// codesAligned reports whether packed codes at w can be read 16 bytes at
// a time, as quant.cu does (rows are whole 16-byte chunks for every
// group size).
func codesAligned(w devptr) bool { return w%16 == 0 }

// dequantLaunch: DequantizeOp{Bits: bits, GroupSize: gs} of codes w [n,
// k·bits/32] and scales, biases [n, k/gs] of sdt into out [n,k] f32.
func dequantLaunch(out, w, scales, biases devptr, bits int, sdt graph.DType, n, k, gs int) *launch {
	return newLaunch(fmt.Sprintf("dequant_%d_%v", bits, sdt), grid1(ceilDiv(n*k, 256)), 256).
		ptr(out).ptr(w).ptr(scales).ptr(biases).i32(n).i32(k).i32(gs)
}
