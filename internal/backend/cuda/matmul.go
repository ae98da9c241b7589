package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// matmul encodes MatMulOp: tensor cores for many rows of f16 or bf16
// weights, else a matvec (8 columns at once where the weights allow).
func (e *encoder) matmul() error {
	m, k := e.shape(0)[0], e.shape(0)[1]
	switch dt := e.dtype(1); {
	case m >= mmaMinRows && (dt == graph.F16 || dt == graph.BF16):
		e.add(matmulMMALaunch(e.out, e.in[0], e.in[1], dt, m, k, e.shape(1)[0]))
	case vecWeights(e.in[1], dt, k):
		e.add(matvec8Launch(e.out, e.in[0], e.in[1], dt, m, k, e.shape(1)[0]))
	default:
		e.add(matvecLaunch(e.out, e.in[0], e.in[1], dt, m, k, e.shape(1)[0]))
	}
	return nil
}

// matvecMaxRows is the rows one pass may hold with every row's result
// the same bits as alone (InvariantRows: the Group's joint passes are cut
// there). matvec8, qmatvec and matvec compute each row in an order that
// depends on k alone, at any m.
const matvecMaxRows = 64

// mmaMinRows is the fewest rows that go to the tensor cores (matmul.cu),
// with f16 or bf16 weights: more than a prefill chunk (256 tokens), so
// that none does. On an H200, matmul.cu took 93 ms for a pass over 65
// tokens of the TinyLlama-shaped model (about 600 µs per matrix; one tile
// shape, no pipelining) where matvec8 takes a few (docs/BENCHMARKS.md).
const mmaMinRows = 257

func matvecLaunch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("matvec_"+dt.String(), grid1(ceilDiv(n, 4)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}

// matvec8Cols is the columns of out a block of matvec8 and qmatvec
// computes (MV8_COLS, QMV_COLS); matvec8Cols8 a block of the 8-row
// kernels (MV8_COLS8).
const (
	matvec8Cols  = 8
	matvec8Cols8 = 4
)

// matvec8Launch is matvecLaunch for f16/bf16 weights read 16 bytes at a
// time (w must qualify: vecWeights). The row count picks the kernel
// (matvec8Name), each holding the sums of its largest pass in registers.
// All compute a row with the same code in the same order, so its bits do
// not depend on m.
func matvec8Launch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	name, cols := matvec8Name("matvec8", m)
	return newLaunch(name+dt.String(), grid1(ceilDiv(n, cols)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}

// The row counts of the 8-row kernels (matvec8x8_*, linear8x8_*: 8 rows
// of 4 columns a pass): verification, W·L+1 rows (at most 11 for W ≤ 2,
// L ≤ 5), in one pass up to 8 rows and two up to 16, where the 4-row
// kernels take 2 to 4 passes, each reading the weights again. Under 5 rows
// and past 16 (prefill chunks, large joint passes) the 4-row kernels stay:
// a block there reads x once for 8 columns of w, not 4, so at many rows,
// where x rather than w is most of the bytes a block reads (each block
// reads all of x's rows, from L2 or L1), they read half the x bytes; and
// prefill's time was measured on them (docs/CUDA.md).
const (
	matvec8MinRows8 = 5
	matvec8MaxRows8 = 16
)

// matvec8Name is the kernel-name prefix of a matvec8-family launch over m
// rows and the weight rows a block reads (columns of out; with SwiGLU the
// gate and up rows of half as many): the one-row kernel (base+"x1_") for
// m = 1 (decoding), the 8-row one (base+"x8_") for m in
// [matvec8MinRows8, matvec8MaxRows8] (verification), else the 4-row one
// (base+"_").
func matvec8Name(base string, m int) (string, int) {
	switch {
	case m == 1:
		return base + "x1_", matvec8Cols
	case m >= matvec8MinRows8 && m <= matvec8MaxRows8:
		return base + "x8_", matvec8Cols8
	}
	return base + "_", matvec8Cols
}

// vecWeights reports whether an [n,k] weight of dt at w can be read by
// matvec8: 16-bit elements, rows of whole 16-byte words, 16-byte aligned.
// It depends on the weight alone, so every pass over it (decode, verify,
// joint) uses the same kernel and rows keep their bits.
func vecWeights(w devptr, dt graph.DType, k int) bool {
	return (dt == graph.F16 || dt == graph.BF16) && k%8 == 0 && w%16 == 0
}

func matmulMMALaunch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("matmul_mma_"+dt.String(), grid2(ceilDiv(n, 32), ceilDiv(m, 64)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}
