package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Flags of a linear launch: what it folds into its product (LIN_* in
// matvec.cu).
const (
	linNorm = 1 << iota
	linBias
	linSwiGLU
	linResidual
	linGeGLU
	linGLU = linSwiGLU | linGeGLU // either: w holds the gate rows, then the up rows
)

// linear encodes LinearOp as one launch at every row count: over a
// quantized weight, qmatvec's kernels with the same folds (qlinearLaunch);
// over a float one, matvec8's kernel with a norm prologue and a bias, SwiGLU
// or GeGLU and residual epilogue where the weight is matvec8's (vecWeights), else the
// warp-per-column kernel with the same folds. Past mmaMinRows MatMulOp goes
// to the tensor cores; LinearOp does not: the matvec kernels keep each
// row's bits whatever the rows batched with it (the op's contract, at any
// M), no pass of the models here has that many rows (a prefill chunk is
// 256), and on an H200 matvec8 beat matmul.cu at 65 rows (matmul.go).
func (e *encoder) linear(op graph.LinearOp) error {
	src := op.Sources()
	m, k := e.shape(src.X)[0], e.shape(src.X)[1]
	n := e.step.Out.Shape[1]
	x := e.in[src.X]
	// The pointers a launch does not read are x: every pointer argument
	// is a live allocation (what a GPU would fault on is checked by the
	// fake driver), and the flags say what is read.
	gain, bias, res := x, x, x
	flags := 0
	if op.Norm {
		gain, flags = e.in[src.Norm], flags|linNorm
	}
	if op.Bias {
		bias, flags = e.in[src.Bias], flags|linBias
	}
	switch op.GLU {
	case graph.GLUSiLU:
		flags |= linSwiGLU
	case graph.GLUGELU:
		flags |= linGeGLU
	}
	if op.Residual {
		res, flags = e.in[src.Residual], flags|linResidual
	}
	if op.Bits > 0 {
		w := e.in[src.Weight]
		if !codesAligned(w) {
			return fmt.Errorf("quantized weight codes at %#x are not 16-byte aligned", uint64(w))
		}
		e.add(qlinearColsLaunch(e.out, x, gain, w, e.in[src.Weight+1], e.in[src.Weight+2], bias, res, op.Bits, e.dtype(src.Weight+1),
			flags, m, k, n, op.GroupSize, op.Eps, e.qmvCols(m, n, op.GLU != graph.NoGLU)))
		return nil
	}
	w, dt := e.in[src.Weight], e.dtype(src.Weight)
	w8 := vecWeights(w, dt, k)
	g := 1
	if w8 {
		per, bps := matvec8Cols8, matvec8BlocksPerSM
		if op.GLU != graph.NoGLU {
			per /= 2
		}
		if op.Norm {
			bps = matvec8NormBlocksPerSM
		}
		g = e.b.verifyGroups(m, ceilDiv(n, per), bps)
	}
	e.add(linearGroupsLaunch(e.out, x, gain, w, bias, res, dt, w8, flags, m, k, n, op.Eps, g))
	return nil
}

// linearLaunch is one LinearOp over x [m,k] into out [m,n]; w8 says
// whether w is matvec8's (vecWeights). With linGLU, w has 2n rows (gate
// then up) and a matvec8 block computes half as many columns of out (its
// weight rows are gate and up).
func linearLaunch(out, x, gain, w, bias, res devptr, dt graph.DType, w8 bool, flags, m, k, n int, eps float32) *launch {
	return linearGroupsLaunch(out, x, gain, w, bias, res, dt, w8, flags, m, k, n, eps, 1)
}

// linearGroupsLaunch is linearLaunch with g column groups a matvec8 block
// (as matvec8GroupsLaunch; g is ignored by the warp-per-column kernel).
func linearGroupsLaunch(out, x, gain, w, bias, res devptr, dt graph.DType, w8 bool, flags, m, k, n int, eps float32, g int) *launch {
	name, blocks := "linear_"+dt.String(), ceilDiv(n, 4)
	if w8 {
		// linear8x1[_norm]_* for one row (decoding), linear8x8[_norm]_*
		// for 5 to 16 (verification), as matvec8Launch.
		base, cols := matvec8Name("linear8", m)
		name, blocks = base+dt.String(), ceilDiv(n, cols)
		if flags&linNorm != 0 {
			name = base + "norm_" + dt.String()
		}
		if flags&linGLU != 0 {
			blocks = ceilDiv(n, cols/2)
		}
		blocks = ceilDiv(blocks, g)
	}
	return newLaunch(name, grid1(blocks), 128).ptr(out).ptr(x).ptr(gain).ptr(w).ptr(bias).ptr(res).
		i32(m).i32(k).i32(n).f32(eps).i32(flags)
}

// qlinearLaunch is one LinearOp over x [m,k] into out [m,n] with a
// quantized w (codes 16-byte aligned, scales and biases of sdt): m = 1
// (decoding) goes to qlinear1_*, more rows to qlinear_* (4 at a time), as
// qmatvecLaunch splits them and with a row's bits independent of m the same
// way; the norm picks the *_norm_* kernels. A block computes
// qmvBlockCols(m) columns; with linGLU, w has 2n rows and a block
// computes qmvSetColumns(m) (a set's gate rows, the other's up rows).
func qlinearLaunch(out, x, gain, w, scales, biases, bias, res devptr, bits int, sdt graph.DType, flags, m, k, n, gs int, eps float32) *launch {
	return qlinearColsLaunch(out, x, gain, w, scales, biases, bias, res, bits, sdt, flags, m, k, n, gs, eps, qmvSetColumns(m))
}

// qlinearColsLaunch is qlinearLaunch with sets of sc columns: for one row
// one of qmv1Widths (qlinear1_c4_*, qlinear1_c2_* besides qlinear1_*,
// the same bits, as qmatvecColsLaunch), for more qmvSetCols.
func qlinearColsLaunch(out, x, gain, w, scales, biases, bias, res devptr, bits int, sdt graph.DType, flags, m, k, n, gs int, eps float32, sc int) *launch {
	name := "qlinear"
	if m == 1 {
		name = "qlinear1" + qmv1Suffix(sc)
	} else {
		sc = qmvSetCols
	}
	if flags&linNorm != 0 {
		name += "_norm"
	}
	blocks := ceilDiv(n, 2*sc)
	if flags&linGLU != 0 {
		blocks = ceilDiv(n, sc)
	}
	return newLaunch(fmt.Sprintf("%s_%d_%v", name, bits, sdt), grid1(blocks), 128).
		ptr(out).ptr(x).ptr(gain).ptr(w).ptr(scales).ptr(biases).ptr(bias).ptr(res).
		i32(m).i32(k).i32(n).i32(gs).f32(eps).i32(flags)
}
