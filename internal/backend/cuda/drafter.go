package cuda

import (
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// rnnStep encodes RNNStepOp, the draft head's recurrent step.
func (e *encoder) rnnStep() error {
	m, k := e.shape(0)[0], e.shape(0)[1]
	e.add(rnnStepLaunch(e.out, e.in[0], e.in[1], e.in[2], e.in[3], e.in[4], e.dtype(2), m, k, e.shape(2)[0]))
	return nil
}

// rnnStepLaunch: out [m,n] = SiLU((e·wᵀ + s·uᵀ) + b) for e, s [m,k] f32, w,
// u [n,k] of dt (f32, f16 or bf16), b [n] f32. 16-bit weights that
// matvec8 could read (vecWeights, both of them) take rnn_step8_*, which
// reads them 16 bytes at a time; the choice depends on the weights alone,
// never on m, so a row has the same bits in every pass.
func rnnStepLaunch(out, e, s, w, u, b devptr, dt graph.DType, m, k, n int) *launch {
	if vecWeights(w, dt, k) && vecWeights(u, dt, k) {
		name := "rnn_step8_"
		if m == 1 { // the draft step of one beam: the kernel with one row's registers, same bits
			name = "rnn_step8x1_"
		}
		return newLaunch(name+dt.String(), grid1(ceilDiv(n, rnnStep8Cols)), 128).ptr(out).ptr(e).ptr(s).ptr(w).ptr(u).ptr(b).i32(m).i32(k).i32(n)
	}
	return newLaunch("rnn_step_"+dt.String(), grid1(ceilDiv(n, 4)), 128).ptr(out).ptr(e).ptr(s).ptr(w).ptr(u).ptr(b).i32(m).i32(k).i32(n)
}

// rnnStep8Cols is the columns of out a block of rnn_step8_* computes
// (RNN8_COLS in drafter.cu).
const rnnStep8Cols = 4
