package cpu

import "github.com/seed9b8f47b1/redrafter/graph"

// RNNStepOp; mirrors backend/metal/drafter.go.

// rnnStep computes SiLU(e·wᵀ + s·uᵀ + b) with the matmul and SiLU kernels,
// in the unfused graph's order, so it equals that graph exactly on either
// backend.
func (b *Backend) rnnStep(out graph.Operand, in []graph.Operand) error {
	e, s, w, u, bias := in[0], in[1], in[2], in[3], f32(in[4])
	m, n := e.Shape[0], w.Shape[0]
	if err := b.matmul(out, e, w); err != nil {
		return err
	}
	// s·uᵀ goes to scratch memory of this call's own.
	scratch := b.scratch(m * n)
	defer b.release(scratch)
	su := *scratch
	tmp := out
	tmp.Buf, tmp.Off = &buffer{b: graph.AsBytes(su)}, 0
	if err := b.matmul(tmp, s, u); err != nil {
		return err
	}
	y := f32(out)
	for i := range m {
		row, sr := y[i*n:(i+1)*n], su[i*n:(i+1)*n]
		for j := range row {
			row[j] = (row[j] + sr[j]) + bias[j]
		}
	}
	b.silu(y, y)
	return nil
}
