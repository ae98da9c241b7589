// matmul.metal: out[M,N] = x[M,K] · w[N,K]ᵀ for many rows of x (prefill),
// with 8x8 simdgroup matrices. A threadgroup computes a MATMUL_BM×MATMUL_BN
// (64×64) tile with 4 simdgroups of 32×32 each (16 accumulators apiece, so
// each 8×8 operand loaded from threadgroup memory feeds 4 multiplies). K
// goes MATMUL_BK columns at a time: x is staged as float, w in the type
// that holds it exactly (half for f16 weights, halving that tile's
// threadgroup memory and traffic; float for f32 and bf16), with 4-wide
// loads when args.vec4 and zeros past the edges, so any M, N and K work.
// Full tiles are stored straight from the simdgroup matrices; edge tiles go
// through threadgroup memory so that only what exists is written.
// Grid: (ceil(N/MATMUL_BN), ceil(M/MATMUL_BM)); threadgroup: MATMUL_THREADS;
// threadgroup(0): MATMUL_BM·MATMUL_BN floats (≥ both staged tiles).
#include "mma.h"

template <typename W>
kernel void matmul_nt(
		constant MatmulArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const W *w [[buffer(2)]],
		device float *out [[buffer(3)]],
		threadgroup float *shmem [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]]) {
	typedef typename stage_type<W>::type T;
	threadgroup float *xs = shmem;                                                   // [BM][BK]
	threadgroup T *ws = (threadgroup T *)(shmem + MATMUL_BM * MATMUL_BK);           // [BN][BK]
	const int m0 = int(tgpig.y) * MATMUL_BM;
	const int n0 = int(tgpig.x) * MATMUL_BN;
	const int sm = int(sgitg) / 2;
	const int sn = int(sgitg) % 2;
	const bool vec4 = args.vec4 != 0;

	simdgroup_float8x8 c[4][4];
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 4; j++) {
			c[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
		}
	}
	for (int k0 = 0; k0 < args.K; k0 += MATMUL_BK) {
		matmul_stage<float>(x, args.M, args.K, m0, k0, vec4, xs, tiitg);
		matmul_stage<T>(w, args.N, args.K, n0, k0, vec4, ws, tiitg);
		threadgroup_barrier(mem_flags::mem_threadgroup);
		matmul_tile<T>(xs, ws, sm, sn, c);
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
	matmul_store(c, out, args.M, args.N, m0, n0, sm, sn, shmem, tiitg);
}

instantiate_kernel("matmul_nt_f32", matmul_nt, float)
instantiate_kernel("matmul_nt_f16", matmul_nt, half)
instantiate_kernel("matmul_nt_bf16", matmul_nt, bf16)
