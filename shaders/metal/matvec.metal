// matvec.metal: out[M,N] = x[M,K] · w[N,K]ᵀ for few rows of x (decode and
// short verification batches). Each simdgroup computes MATVEC_ROWS outputs
// of one row of x; lanes stride over K, so reads of w are coalesced.
// Grid: (ceil(N / (MATVEC_ROWS·MATVEC_SIMDGROUPS)), M); threadgroup: 32·MATVEC_SIMDGROUPS.
#include "common.h"

template <typename W>
kernel void matvec_nt(
		constant MatmulArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const W *w [[buffer(2)]],
		device float *out [[buffer(3)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int m = int(tgpig.y);
	const int n0 = (int(tgpig.x) * MATVEC_SIMDGROUPS + int(sgitg)) * MATVEC_ROWS;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	device const float *xr = x + ulong(m) * ulong(args.K);
	device const W *wr[MATVEC_ROWS];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		wr[r] = w + ulong(min(n0 + r, args.N - 1)) * ulong(args.K);
	}
	float acc[MATVEC_ROWS] = {0.0f};
	for (int k = int(lane); k < args.K; k += 32) {
		const float xv = xr[k];
		for (int r = 0; r < MATVEC_ROWS; r++) {
			acc[r] += xv * to_float(wr[r][k]);
		}
	}
	for (int r = 0; r < MATVEC_ROWS; r++) {
		const float s = simd_sum(acc[r]);
		if (lane == 0 && n0 + r < args.N) {
			out[ulong(m) * ulong(args.N) + ulong(n0 + r)] = s;
		}
	}
}

instantiate_kernel("matvec_nt_f32", matvec_nt, float)
instantiate_kernel("matvec_nt_f16", matvec_nt, half)
instantiate_kernel("matvec_nt_bf16", matvec_nt, bf16)
