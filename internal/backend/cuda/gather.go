package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// gatherRows and takeAlong encode the gathers.
func (e *encoder) gatherRows() error {
	x := e.shape(0)
	e.add(gatherRowsLaunch(e.out, e.in[0], e.in[1], e.dtype(0), x[0], e.shape(1).Numel(), x.Numel()/max(x[0], 1)))
	return nil
}

func (e *encoder) takeAlong() error {
	m, v := lastDim(e.shape(0))
	_, k := lastDim(e.shape(1))
	e.add(takeAlongLaunch(e.out, e.in[0], e.in[1], m, v, k))
	return nil
}

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
