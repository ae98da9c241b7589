package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// reduce encodes the row reductions: LogSoftmaxOp, ArgmaxOp, TopKOp,
// WarpLogSoftmaxOp and BeamTopOp.
func (e *encoder) reduce() error {
	switch op := e.step.Op.(type) {
	case graph.LogSoftmaxOp:
		m, v := lastDim(e.shape(0))
		e.add(logSoftmaxLaunch(e.out, e.in[0], m, v))
	case graph.ArgmaxOp:
		m, v := lastDim(e.shape(0))
		e.add(argmaxLaunch(e.out, e.in[0], m, v))
	case graph.TopKOp:
		m, v := lastDim(e.shape(0))
		e.add(topKLaunch(e.out, e.in[0], m, v, op.K))
	case graph.WarpLogSoftmaxOp:
		m, v := lastDim(e.shape(0))
		e.add(warpLogSoftmaxLaunch(e.out, e.in[0], m, v, op.K, op.Masked))
	case graph.BeamTopOp:
		rows, v := lastDim(e.shape(1))
		e.add(beamTopLaunch(e.out, e.in[0], e.in[1], e.shape(0)[1], rows, v, op.Width))
	}
	return nil
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

// warpLogSoftmaxLaunch: WarpLogSoftmaxOp{K: k, Masked: masked} over x [m,v].
func warpLogSoftmaxLaunch(out, x devptr, m, v, k int, masked float32) *launch {
	return newLaunch("warp_log_softmax_f32", grid1(m), 256).ptr(out).ptr(x).i32(m).i32(v).i32(k).f32(masked)
}

// beamTopLaunch: BeamTopOp{Width: width} of beams [3,nb] and lp [rows,v]
// (rows = nb or 1) into out [3,width].
func beamTopLaunch(out, beams, lp devptr, nb, rows, v, width int) *launch {
	return newLaunch("beam_top_f32", grid1(1), 256).ptr(out).ptr(beams).ptr(lp).i32(nb).i32(rows).i32(v).i32(width)
}
