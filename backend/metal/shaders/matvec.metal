// matvec.metal: out[M,N] = x[M,K] · w[N,K]ᵀ for few rows of x (decode and
// tree verification). Each simdgroup computes MATVEC_ROWS outputs for up to
// MATVEC_MAX_M rows of x at once, so every weight is read once per
// threadgroup and used MATVEC_MAX_M times; lanes stride over K, so reads of
// w are coalesced.
// Grid: (ceil(N / (MATVEC_ROWS·MATVEC_SIMDGROUPS)), ceil(M / MATVEC_MAX_M));
// threadgroup: 32·MATVEC_SIMDGROUPS.
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
	const int n0 = (int(tgpig.x) * MATVEC_SIMDGROUPS + int(sgitg)) * MATVEC_ROWS;
	const int m0 = int(tgpig.y) * MATVEC_MAX_M;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	// Rows past the end repeat the last one (valid memory) and are not stored.
	device const W *wr[MATVEC_ROWS];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		wr[r] = w + ulong(min(n0 + r, args.N - 1)) * ulong(args.K);
	}
	device const float *xr[MATVEC_MAX_M];
	for (int j = 0; j < MATVEC_MAX_M; j++) {
		xr[j] = x + ulong(min(m0 + j, args.M - 1)) * ulong(args.K);
	}
	float acc[MATVEC_ROWS][MATVEC_MAX_M];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			acc[r][j] = 0.0f;
		}
	}
	for (int k = int(lane); k < args.K; k += 32) {
		float xv[MATVEC_MAX_M];
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			xv[j] = xr[j][k];
		}
		for (int r = 0; r < MATVEC_ROWS; r++) {
			const float wv = to_float(wr[r][k]);
			for (int j = 0; j < MATVEC_MAX_M; j++) {
				acc[r][j] += wv * xv[j];
			}
		}
	}
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			const float s = simd_sum(acc[r][j]);
			if (lane == 0 && n0 + r < args.N && m0 + j < args.M) {
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] = s;
			}
		}
	}
}

instantiate_kernel("matvec_nt_f32", matvec_nt, float)
instantiate_kernel("matvec_nt_f16", matvec_nt, half)
instantiate_kernel("matvec_nt_bf16", matvec_nt, bf16)
