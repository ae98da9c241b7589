package metal

// MatMul: out[M,N] = x[M,K] · w[N,K]ᵀ. Up to Policy.MatvecMaxRows rows of x
// go to matvec.metal (each simdgroup computes MATVEC_ROWS outputs for
// MATVEC_MAX_M rows, reading each weight once), more to matmul.metal (32×32
// tiles of 8×8 simdgroup matrices).
func (e *encoder) matmul() error {
	x, w, out := e.step.In[0], e.step.In[1], e.step.Out
	m, k, n := x.Shape[0], x.Shape[1], w.Shape[0]
	args := MatmulArgs{M: i32(m), N: i32(n), K: i32(k)}
	if m <= e.b.policy.MatvecMaxRows {
		per := matvecRows * matvecSimdgroups
		return e.launch(kernelName("matvec", "nt", w.DType), args,
			[3]int{(n + per - 1) / per, (m + matvecMaxM - 1) / matvecMaxM, 1}, threads1D(32*matvecSimdgroups), nil,
			rd(x), rd(w), wr(out))
	}
	shared := sharedBytes(max((matmulBM+matmulBN)*matmulBK, matmulBM*matmulBN))
	return e.launch(kernelName("matmul", "nt", w.DType), args,
		[3]int{(n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1}, threads1D(matmulThreads),
		[]int{shared}, rd(x), rd(w), wr(out))
}
