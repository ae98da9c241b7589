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
		n := e.shape(1)[0]
		g := e.b.verifyGroups(m, ceilDiv(n, matvec8Cols8), matvec8BlocksPerSM)
		e.add(matvec8GroupsLaunch(e.out, e.in[0], e.in[1], dt, m, k, n, g))
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
	return matvec8GroupsLaunch(out, x, w, dt, m, k, n, 1)
}

// matvec8GroupsLaunch is matvec8Launch with g column groups a block (a
// grid of ceil(groups/g) blocks; matvec.cu's matvec8 loops over them):
// fewer blocks, each reading x once from L2 for g groups. g changes no
// row's bits.
func matvec8GroupsLaunch(out, x, w devptr, dt graph.DType, m, k, n, g int) *launch {
	name, cols := matvec8Name("matvec8", m)
	return newLaunch(name+dt.String(), grid1(ceilDiv(ceilDiv(n, cols), g)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
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
// rows and the weight rows a block reads (columns of out; with a GLU the
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

// Blocks an SM of the 8-row kernels (matvec.cu's ptxas figures): 3 for
// matvec8x8_* and linear8x8_* (their launch bounds), 3 for
// linear8x8_norm_* on sm_90 (142 registers; 2 on sm_80, where auto then
// leaves more blocks than slots, not fewer).
const (
	matvec8BlocksPerSM     = 3
	matvec8NormBlocksPerSM = 3
)

// verifyGroupMax is the most column groups a block of the 8-row kernels
// takes (REDRAFTER_CUDA_VERIFY_GROUPS accepts 1, 2, 4 and 8).
const verifyGroupMax = 8

// verifyGroups is the column groups a block of a matvec8-family launch
// over m rows takes, out of groups in all, for a kernel that holds
// blocksPerSM blocks an SM: 1 unless m picks the 8-row kernels
// (matvec8Name); there REDRAFTER_CUDA_VERIFY_GROUPS's value when set, else
// (auto) the largest of 8, 4, 2 that leaves one block for every slot of the
// GPU (multiprocessors × blocksPerSM), so that no SM idles, and 1 where
// none does. Wave quantization and L1's hit rate are not modelled: the
// switch is there to measure them.
func (b *Backend) verifyGroups(m, groups, blocksPerSM int) int {
	if _, cols := matvec8Name("matvec8", m); cols != matvec8Cols8 {
		return 1
	}
	if b.vgroups > 0 {
		return b.vgroups
	}
	sms := b.drv.info().Multiprocessors
	if sms <= 0 {
		sms = 132 // an H100 or H200 SXM
	}
	return autoVerifyGroups(groups, sms*blocksPerSM)
}

// autoVerifyGroups is the largest of 8, 4, 2 column groups a block that
// still leaves at least slots blocks, else 1.
func autoVerifyGroups(groups, slots int) int {
	for g := verifyGroupMax; g > 1; g /= 2 {
		if ceilDiv(groups, g) >= slots {
			return g
		}
	}
	return 1
}
