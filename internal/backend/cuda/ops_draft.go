package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// The launches of the draft head's, the beam search's and the ReDrafter
// step's ops (gather.cu, drafter.cu, chains.cu, reduce.cu's warp and beam
// kernels) and of DequantizeOp (quant.cu), in ops.go's style: shapes in,
// grid, block and arguments out.

// gatherRowsLaunch: out[i,:] = x[idx[i],:] for x [m, row] of dt (f32 or
// i32; row is the elements per row, the product of x's trailing
// dimensions) and idx [n]. An index outside [0, m) gives a row of zeros.
func gatherRowsLaunch(out, x, idx devptr, dt graph.DType, m, n, row int) *launch {
	return newLaunch("gather_rows_"+dt.String(), grid1(ceilDiv(n*row, 256)), 256).ptr(out).ptr(x).ptr(idx).i32(m).i32(n).i32(row)
}

// takeAlongLaunch: out[i,j] = x[i, idx[i,j]] for x [m,v] f32, idx [m,k]. An
// index outside [0, v) gives zero.
func takeAlongLaunch(out, x, idx devptr, m, v, k int) *launch {
	return newLaunch("take_along_f32", grid1(ceilDiv(m*k, 256)), 256).ptr(out).ptr(x).ptr(idx).i32(m).i32(v).i32(k)
}

// rnnStepLaunch: out [m,n] = SiLU((e·wᵀ + s·uᵀ) + b) for e, s [m,k] f32, w,
// u [n,k] of dt (f32, f16 or bf16), b [n] f32.
func rnnStepLaunch(out, e, s, w, u, b devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("rnn_step_"+dt.String(), grid1(ceilDiv(n, 4)), 128).ptr(out).ptr(e).ptr(s).ptr(w).ptr(u).ptr(b).i32(m).i32(k).i32(n)
}

// warpLogSoftmaxLaunch: WarpLogSoftmaxOp{K: k, Masked: masked} over x [m,v].
func warpLogSoftmaxLaunch(out, x devptr, m, v, k int, masked float32) *launch {
	return newLaunch("warp_log_softmax_f32", grid1(m), 256).ptr(out).ptr(x).i32(m).i32(v).i32(k).f32(masked)
}

// beamTopLaunch: BeamTopOp{Width: width} of beams [3,nb] and lp [rows,v]
// (rows = nb or 1) into out [3,width].
func beamTopLaunch(out, beams, lp devptr, nb, rows, v, width int) *launch {
	return newLaunch("beam_top_f32", grid1(1), 256).ptr(out).ptr(beams).ptr(lp).i32(nb).i32(rows).i32(v).i32(width)
}

// beamChainsLaunch: BeamChainsOp{Depth: depth} of tree [1+w·(l-1)] and sel
// [3,w] into out [1+w·(l-1)].
func beamChainsLaunch(out, tree, sel devptr, w, l, depth int) *launch {
	return newLaunch("beam_chains_i32", grid1(ceilDiv(1+w*(l-1), 256)), 256).ptr(out).ptr(tree).ptr(sel).i32(w).i32(l).i32(depth)
}

// acceptChainsLaunch: AcceptChainsOp{Width: w} of tokens and argmax
// [1+w·(l-1)] into out [3,l].
func acceptChainsLaunch(out, tokens, argmax devptr, w, l int) *launch {
	return newLaunch("accept_chains_i32", grid1(1), 32).ptr(out).ptr(tokens).ptr(argmax).i32(w).i32(l)
}

// dequantLaunch: DequantizeOp{Bits: bits, GroupSize: gs} of codes w [n,
// k·bits/32] and scales, biases [n, k/gs] of sdt into out [n,k] f32.
func dequantLaunch(out, w, scales, biases devptr, bits int, sdt graph.DType, n, k, gs int) *launch {
	return newLaunch(fmt.Sprintf("dequant_%d_%v", bits, sdt), grid1(ceilDiv(n*k, 256)), 256).
		ptr(out).ptr(w).ptr(scales).ptr(biases).i32(n).i32(k).i32(gs)
}
