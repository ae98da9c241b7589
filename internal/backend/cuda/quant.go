package cuda

import (
	"fmt"
	"slices"

	"github.com/seed9b8f47b1/redrafter/internal/envvar"
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
	n := e.shape(1)[0]
	e.add(qmatvecColsLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], op.Bits, e.dtype(2), m, k, n, op.GroupSize, e.qmvCols(m, n, false)))
	return nil
}

// qmvCols is the columns a set of a quantized product's blocks has: for
// one row (decoding) the backend's qmv1Cols (REDRAFTER_CUDA_QMV1_COLS),
// forced or chosen from the grid and the device's SMs; for more, the
// 4-row kernels' qmvSetCols. glu: the product is a GLU's gate and up, a
// block's outputs one set's columns.
func (e *encoder) qmvCols(m, n int, glu bool) int {
	if m != 1 {
		return qmvSetCols
	}
	return qmv1Cols(e.b.qmv1Cols, e.b.drv.info().Multiprocessors, n, glu)
}

func (e *encoder) dequantize(op graph.DequantizeOp) error {
	n, k := e.step.Out.Shape[0], e.step.Out.Shape[1]
	e.add(dequantLaunch(e.out, e.in[0], e.in[1], e.in[2], op.Bits, e.dtype(1), n, k, op.GroupSize))
	return nil
}

func qembedLaunch(out, w, scales, biases, ids devptr, bits int, sdt graph.DType, n, d, v, gs int) *launch {
	return newLaunch(fmt.Sprintf("qembed_%d_%v", bits, sdt), grid2(n, ceilDiv(d, 128)), 128).
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
	return qmatvecColsLaunch(out, x, w, scales, biases, bits, sdt, m, k, n, gs, qmvSetColumns(m))
}

// qmatvecColsLaunch is qmatvecLaunch with sets of sc columns: for one row
// one of qmv1Widths (8: qmatvec1_*, 4 and 2: qmatvec1_c4_*, qmatvec1_c2_*,
// the same bits), for more qmvSetCols.
func qmatvecColsLaunch(out, x, w, scales, biases devptr, bits int, sdt graph.DType, m, k, n, gs, sc int) *launch {
	name := "qmatvec"
	if m == 1 {
		name = "qmatvec1" + qmv1Suffix(sc)
	} else {
		sc = qmvSetCols
	}
	return newLaunch(fmt.Sprintf("%s_%d_%v", name, bits, sdt), grid1(ceilDiv(n, 2*sc)), 128).
		ptr(out).ptr(x).ptr(w).ptr(scales).ptr(biases).i32(m).i32(k).i32(n).i32(gs)
}

// qmv1Widths are the columns a set of the one-row kernels may have, widest
// first: quant.cu instantiates qmatvec1_* and qlinear1_* for each.
var qmv1Widths = []int{qmv1SetCols, 4, 2}

// qmv1Suffix names the one-row kernels with sets of sc columns: none for
// qmv1SetCols (the kernels' names before the narrow ones existed), else
// _c<sc>.
func qmv1Suffix(sc int) string {
	if sc == qmv1SetCols {
		return ""
	}
	return fmt.Sprintf("_c%d", sc)
}

// qmv1Cols chooses the columns a set of a one-row product over n columns
// has: force when it is not 0 (REDRAFTER_CUDA_QMV1_COLS), else the widest
// of qmv1Widths whose grid gives every SM at least 2 blocks, the narrowest
// when none does. A decoding product is bound by a block's latency, not by
// bytes (quant.cu): with 16 columns a block, O and down (n = 2048) are 128
// blocks, one for each of 128 of an H100's 132 SMs, and a scheduler has a
// single warp to issue from while that warp waits on memory; narrower
// sets give each SM more blocks for the same bytes, at the cost of
// loading and pre-scaling x for fewer columns. On 132 SMs: Q·K·V (n =
// 2560) gets 4, gate·up (5632, SwiGLU) 8, O and down 2. Without a count
// of SMs (sms ≤ 0) the widest.
func qmv1Cols(force, sms, n int, glu bool) int {
	if force != 0 {
		return force
	}
	if sms <= 0 {
		return qmv1Widths[0]
	}
	for _, sc := range qmv1Widths {
		blocks := ceilDiv(n, 2*sc)
		if glu {
			blocks = ceilDiv(n, sc)
		}
		if blocks >= 2*sms {
			return sc
		}
	}
	return qmv1Widths[len(qmv1Widths)-1]
}

// parseQMV1Cols reads REDRAFTER_CUDA_QMV1_COLS's value: auto (0: qmv1Cols
// chooses per launch), or one of qmv1Widths for every one-row product, for
// comparison on a GPU. Unset is 8, the kernels measured on a GPU: the
// narrower sets and auto's rule wait for one (no GPU was lent after they
// were written, 2026-11-28), as the shared-x kernels showed a guess can
// lose.
func parseQMV1Cols(s string) (int, error) {
	switch s {
	case "":
		return qmv1SetCols, nil
	case "auto":
		return 0, nil
	}
	for _, sc := range qmv1Widths {
		if s == fmt.Sprint(sc) {
			return sc, nil
		}
	}
	return 0, fmt.Errorf("%s=%q: want auto, 8, 4 or 2", envvar.CUDAQMV1Cols.Name(), s)
}

// qmvKThreads is the threads of a qmatvec block that share a column's row
// (QMV_KTHREADS in quant.cu), each reading 16-byte chunks of it: a row of
// k = 2048 codes is 64 chunks at 4 bits and 128 at 8, so none is idle at
// the model's width (TestQMatVecKSplit).
const qmvKThreads = 64

// qmvSetCols is the columns of a set of qmvKThreads threads in the
// multi-row kernels (QMV_SET_COLS in quant.cu), qmv1SetCols in the one-row
// ones (QMV1_SET_COLS): a GLU block's outputs, its sets reading their
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

// QMV1Cols is the columns a set of the one-row quantized products has on b
// (8, 4 or 2), or 0 when each launch chooses (auto).
func (b *Backend) QMV1Cols() int { return b.qmv1Cols }

// SetQMV1Cols sets what REDRAFTER_CUDA_QMV1_COLS set when b was opened: 0
// (auto) or one of 8, 4 and 2, for the plans encoded from then on. Every
// width gives the same bits; the self-test uses it to run each width's
// kernels.
func (b *Backend) SetQMV1Cols(cols int) error {
	if cols != 0 && !slices.Contains(qmv1Widths, cols) {
		return fmt.Errorf("cuda: %d columns a set: want 0 (auto), 8, 4 or 2", cols)
	}
	b.qmv1Cols = cols
	return nil
}
