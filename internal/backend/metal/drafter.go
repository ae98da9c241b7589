package metal

// RNNStep: out[M,N] = SiLU(e·wᵀ + s·uᵀ + b) in one dispatch of
// drafter.metal, on matvec.metal's grid (MATVEC_ROWS outputs per simdgroup,
// MATVEC_MAX_M beams per threadgroup row).
func (e *encoder) rnnStep() error {
	in, out := e.step.In, e.step.Out
	x, w := in[0], in[2]
	m, k, n := x.Shape[0], x.Shape[1], w.Shape[0]
	per := matvecRows * matvecSimdgroups
	return e.launch(kernelName("drafter", "rnn", w.DType), MatmulArgs{M: i32(m), N: i32(n), K: i32(k)},
		[3]int{(n + per - 1) / per, (m + matvecMaxM - 1) / matvecMaxM, 1}, threads1D(32*matvecSimdgroups), nil,
		rd(x), rd(in[1]), rd(w), rd(in[3]), rd(in[4]), wr(out))
}
