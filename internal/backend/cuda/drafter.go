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
// u [n,k] of dt (f32, f16 or bf16), b [n] f32.
func rnnStepLaunch(out, e, s, w, u, b devptr, dt graph.DType, m, k, n int) *launch {
	return newLaunch("rnn_step_"+dt.String(), grid1(ceilDiv(n, 4)), 128).ptr(out).ptr(e).ptr(s).ptr(w).ptr(u).ptr(b).i32(m).i32(k).i32(n)
}
