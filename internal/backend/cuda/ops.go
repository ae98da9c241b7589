package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// The launches of each op, by kernel: shapes in, grid, block and arguments
// out. The emulator tests run them against the CPU reference, and the
// backend's encoder (encode.go) maps plan steps onto them.

func embedLaunch(out, table, ids devptr, dt graph.DType, n, d, v int) *launch {
	return newLaunch("embed_"+dt.String(), grid1(n), 128).ptr(out).ptr(table).ptr(ids).i32(n).i32(d).i32(v)
}

func qembedLaunch(out, w, scales, biases, ids devptr, bits int, sdt graph.DType, n, d, v, gs int) *launch {
	return newLaunch(fmt.Sprintf("qembed_%d_%v", bits, sdt), grid1(n), 128).
		ptr(out).ptr(w).ptr(scales).ptr(biases).ptr(ids).i32(n).i32(d).i32(v).i32(gs)
}

// rmsNormLaunch: a block of 1024 threads per row. With 256, each thread's
// 8 dependent loads of a 2048-wide row made the kernel take 9 µs on an H200
// (ncu, docs/BENCHMARKS.md), twice per layer; with 1024, 2 loads.
func rmsNormLaunch(out, x, w devptr, m, d int, eps float32) *launch {
	return newLaunch("rms_norm_f32", grid1(m), 1024).ptr(out).ptr(x).ptr(w).i32(m).i32(d).f32(eps)
}

// ropeLaunch: invFreq is a device copy of the op's inverse frequencies.
func ropeLaunch(out, x, pos, invFreq devptr, neox bool, m, h, d, p int) *launch {
	name := "rope_adjacent_f32"
	if neox {
		name = "rope_neox_f32"
	}
	return newLaunch(name, grid1(ceilDiv(m*h*d, 256)), 256).ptr(out).ptr(x).ptr(pos).ptr(invFreq).i32(m).i32(h).i32(d).i32(p)
}

func siluLaunch(out, x devptr, n int) *launch {
	return newLaunch("silu_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(x).u64(n)
}

func swigluLaunch(out, gate, up devptr, n int) *launch {
	return newLaunch("swiglu_f32", grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(gate).ptr(up).u64(n)
}

// binaryLaunch is Add or Mul; b has nb elements, broadcast over a's n.
func binaryLaunch(kernel string, out, a, b devptr, n, nb int) *launch {
	return newLaunch(kernel, grid1(ceilDiv(n, 256)), 256).ptr(out).ptr(a).ptr(b).u64(n).u64(nb)
}

func concatLaunch(out, a, b devptr, m, da, db int) *launch {
	return newLaunch("concat_f32", grid1(ceilDiv(m*(da+db), 256)), 256).ptr(out).ptr(a).ptr(b).i32(m).i32(da).i32(db)
}

func matvecLaunch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("matvec_"+dt.String(), grid1(ceilDiv(n, 4)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}

// matvec8Cols is the columns of out a block of matvec8 and qmatvec
// computes (MV8_COLS, QMV_COLS).
const matvec8Cols = 8

// matvec8Launch is matvecLaunch for f16/bf16 weights read 16 bytes at a
// time; w8 says whether w qualifies (vecWeights).
func matvec8Launch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("matvec8_"+dt.String(), grid1(ceilDiv(n, matvec8Cols)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}

// vecWeights reports whether an [n,k] weight of dt at w can be read by
// matvec8: 16-bit elements, rows of whole 16-byte words, 16-byte aligned.
// It depends on the weight alone, so every pass over it (decode, verify,
// joint) uses the same kernel and rows keep their bits.
func vecWeights(w devptr, dt graph.DType, k int) bool {
	return (dt == graph.F16 || dt == graph.BF16) && k%8 == 0 && w%16 == 0
}

// qmatvecLaunch: w must be 16-byte aligned (codesAligned).
func qmatvecLaunch(out, x, w, scales, biases devptr, bits int, sdt graph.DType, m, k, n, gs int) *launch {
	return newLaunch(fmt.Sprintf("qmatvec_%d_%v", bits, sdt), grid1(ceilDiv(n, matvec8Cols)), 128).
		ptr(out).ptr(x).ptr(w).ptr(scales).ptr(biases).i32(m).i32(k).i32(n).i32(gs)
}

// codesAligned reports whether packed codes at w can be read 16 bytes at
// a time, as quant.cu does (rows are whole 16-byte chunks for every
// group size).
func codesAligned(w devptr) bool { return w%16 == 0 }

// kvWriteLaunch writes n rows of rowlen = KVH·d into a cache [KVH, c, d].
func kvWriteLaunch(cache, rows, kvLen devptr, dt graph.DType, n, rowlen, c, d int) *launch {
	return newLaunch("kv_write_"+dt.String(), grid1(ceilDiv(n*rowlen, 256)), 256).ptr(cache).ptr(rows).ptr(kvLen).i32(n).i32(rowlen).i32(c).i32(d)
}

// kvCompactLaunch keeps n positions of a cache [KVH, c, d] (rowlen = KVH·d).
func kvCompactLaunch(cache, kvLen, idx devptr, dt graph.DType, n, rowlen, c, d int) *launch {
	return newLaunch("kv_compact_"+dt.String(), grid1(ceilDiv(rowlen, 256)), 256).ptr(cache).ptr(kvLen).ptr(idx).i32(n).i32(rowlen).i32(c).i32(d)
}

// attentionMaxD is the largest head dimension attention.cu takes.
const attentionMaxD = 256

// attentionLaunch: q [n, h, d], caches [kvh, c, d].
func attentionLaunch(out, q, k, v, kvLen, end devptr, dt graph.DType, n, h, kvh, d, c int, scale float32) (*launch, error) {
	if d > attentionMaxD {
		return nil, fmt.Errorf("cuda: attention head dim %d > %d", d, attentionMaxD)
	}
	return newLaunch("attention_tree_"+dt.String(), grid2(h, n), 128).
		ptr(out).ptr(q).ptr(k).ptr(v).ptr(kvLen).ptr(end).i32(n).i32(h).i32(kvh).i32(d).i32(c).f32(scale), nil
}

func logSoftmaxLaunch(out, x devptr, m, v int) *launch {
	return newLaunch("log_softmax_f32", grid1(m), 256).ptr(out).ptr(x).i32(m).i32(v)
}

func argmaxLaunch(out, x devptr, m, v int) *launch {
	return newLaunch("argmax_f32", grid1(m), 256).ptr(out).ptr(x).i32(m).i32(v)
}

func topKLaunch(out, x devptr, m, v, k int) *launch {
	return newLaunch("top_k_f32", grid1(m), 256).ptr(out).ptr(x).i32(m).i32(v).i32(k)
}

// readXorLaunch reads words (a multiple of 4) 32-bit words at x with
// blocks blocks, writing one XOR per block to out [blocks].
func readXorLaunch(out, x devptr, words, blocks int) *launch {
	return newLaunch("read_xor_u32", grid1(blocks), 256).ptr(out).ptr(x).u64(words)
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

func matmulMMALaunch(out, x, w devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("matmul_mma_"+dt.String(), grid2(ceilDiv(n, 32), ceilDiv(m, 64)), 128).ptr(out).ptr(x).ptr(w).i32(m).i32(k).i32(n)
}
