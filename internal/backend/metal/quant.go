package metal

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Affine-quantized weights (graph.QMatMulOp, QEmbedOp, DequantizeOp) run the
// kernels of quant.metal, named quant_<variant><bits>_<scale dtype>. Up to
// Policy.MatvecMaxRows rows of x go to qmv (each simdgroup computes
// QMV_ROWS outputs for 1, up to 4 or up to QMV_MAX_M rows of x, QMV_VALUES
// codes per lane per step: s·Σx·q + b·Σx, x pre-scaled so that codes are
// only masked; the group size and the rows of x are template parameters,
// so the variant is quant_qmv<bits>g<group size>m<rows>), more to qmm
// (quant_qmm<bits>g<group size>: matmul.metal's 64×64 tiles with the weight
// tile dequantized as it is staged).

// scaleDTypes are the scale and bias types the quant kernels are
// instantiated for.
var scaleDTypes = []graph.DType{graph.F32, graph.F16, graph.BF16}

// quantBits and quantGroupSizes are what the kernels are instantiated for:
// graph.QuantBits and graph.QuantGroupSize.
var (
	quantBits       = []int{4, 8}
	quantGroupSizes = []int{32, 64, 128}
)

func quantVariant(variant string, bits int) string { return fmt.Sprintf("%s%d", variant, bits) }

func qmmVariant(bits, groupSize int) string { return fmt.Sprintf("qmm%dg%d", bits, groupSize) }

func qmvVariant(bits, groupSize, rows int) string {
	return fmt.Sprintf("qmv%dg%dm%d", bits, groupSize, rows)
}

func (e *encoder) qmatmul(op graph.QMatMulOp) error {
	x, out := e.step.In[0], e.step.Out
	w := qweight{e.step.In[1], e.step.In[2], e.step.In[3], op.Bits, op.GroupSize}
	if x.Shape[0] <= e.b.policy.MatvecMaxRows {
		return e.qmv(x, w, out, plain(x))
	}
	return e.qmm(x, w, out)
}

// qweight is a quantized weight's operands (codes, scales, biases) and
// format.
type qweight struct {
	w, s, b         graph.Operand
	bits, groupSize int
}

// rows returns rows lo..lo+n of the weight.
func (q qweight) rows(lo, n int) qweight {
	return qweight{rowsOf(q.w, lo, n), rowsOf(q.s, lo, n), rowsOf(q.b, lo, n), q.bits, q.groupSize}
}

// qmv launches quant_qmv for out [M,N] = x·wᵀ with f folded in (linear.go);
// N is out's columns (half w's rows with a GLU).
func (e *encoder) qmv(x graph.Operand, q qweight, out graph.Operand, f fusion) error {
	m, k, n := x.Shape[0], x.Shape[1], out.Shape[1]
	args := QuantArgs{M: i32(m), N: i32(n), K: i32(k), G: i32(q.groupSize), Fuse: f.bits, Eps: f.eps}
	rows := matvecRowsFor(m)
	per := f.outputsPer(qmvRows) * qmvSimdgroups
	return e.launch(kernelName("quant", qmvVariant(q.bits, q.groupSize, rows), q.s.DType), args,
		[3]int{(n + per - 1) / per, (m + rows - 1) / rows, 1}, threads1D(32*qmvSimdgroups), nil,
		rd(x), rd(q.w), rd(q.s), rd(q.b), wr(out), rd(f.gain), rd(f.bias), rd(f.res))
}

// qmm launches quant_qmm for out = x·wᵀ.
func (e *encoder) qmm(x graph.Operand, q qweight, out graph.Operand) error {
	m, k, n := x.Shape[0], x.Shape[1], q.w.Shape[0]
	args := QuantArgs{M: i32(m), N: i32(n), K: i32(k), G: i32(q.groupSize), Vec4: e.vec4(k, x)}
	shared := sharedBytes(max((matmulBM+matmulBN)*matmulBK, matmulBM*matmulBN))
	return e.launch(kernelName("quant", qmmVariant(q.bits, q.groupSize), q.s.DType), args,
		[3]int{(n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1}, threads1D(matmulThreads),
		[]int{shared}, rd(x), rd(q.w), rd(q.s), rd(q.b), wr(out))
}

func (e *encoder) qembed(op graph.QEmbedOp) error {
	w, s, b, ids, out := e.step.In[0], e.step.In[1], e.step.In[2], e.step.In[3], e.step.Out
	n, k := ids.Shape[0], out.Shape[1]
	args := QuantArgs{M: i32(n), N: i32(w.Shape[0]), K: i32(k), G: i32(op.GroupSize)}
	return e.launch(kernelName("quant", quantVariant("embed", op.Bits), s.DType), args,
		groups1D(n*k, 256), threads1D(256), nil, rd(w), rd(s), rd(b), rd(ids), wr(out))
}

func (e *encoder) dequantize(op graph.DequantizeOp) error {
	w, s, b, out := e.step.In[0], e.step.In[1], e.step.In[2], e.step.Out
	n, k := out.Shape[0], out.Shape[1]
	args := QuantArgs{N: i32(n), K: i32(k), G: i32(op.GroupSize)}
	return e.launch(kernelName("quant", quantVariant("dequant", op.Bits), s.DType), args,
		groups1D(n*k, 256), threads1D(256), nil, rd(w), rd(s), rd(b), wr(out))
}
