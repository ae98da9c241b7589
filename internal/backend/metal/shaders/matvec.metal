// matvec.metal: out[M,N] = x[M,K] · w[N,K]ᵀ for few rows of x (decode and
// tree verification). Each simdgroup computes MATVEC_ROWS outputs for up to
// MAXM rows of x at once, so every weight is read once per threadgroup and
// used MAXM times. MAXM is a template parameter, instantiated for 1 (decode),
// 4 and MATVEC_MAX_M (verification), so that the accumulators are registers
// indexed by compile-time bounds and a decode step does not compute seven
// copies of its one row.
//
// Lane l takes K four elements at a time, k = 4l + 128t, so a simdgroup
// reads 128 consecutive weights of a row per step (256 bytes of f16) with
// one 4-wide load per lane (half4, float4, or a bf16's ushort4) when
// args.vec4 says rows are aligned for it, and with scalar loads otherwise
// (K not a multiple of 4, or a misaligned buffer). Both paths accumulate
// the same products in the same order with explicit fma, so a row's result
// depends on K alone: not on M, the variant, the load width or the
// compiler's contraction choices. Tree verification needs that to reproduce
// decode bit for bit.
// Grid: (ceil(N / (MATVEC_ROWS·MATVEC_SIMDGROUPS)), ceil(M / MAXM));
// threadgroup: 32·MATVEC_SIMDGROUPS.
#include "common.h"

template <typename W, int MAXM>
kernel void matvec_nt(
		constant MatmulArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const W *w [[buffer(2)]],
		device float *out [[buffer(3)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int n0 = (int(tgpig.x) * MATVEC_SIMDGROUPS + int(sgitg)) * MATVEC_ROWS;
	const int m0 = int(tgpig.y) * MAXM;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	const int K = args.K;
	const bool vec4 = args.vec4 != 0;
	// Rows past the end repeat the last one (valid memory) and are not stored.
	device const W *wr[MATVEC_ROWS];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		wr[r] = w + ulong(min(n0 + r, args.N - 1)) * ulong(K);
	}
	device const float *xr[MAXM];
	for (int j = 0; j < MAXM; j++) {
		xr[j] = x + ulong(min(m0 + j, args.M - 1)) * ulong(K);
	}
	float acc[MATVEC_ROWS][MAXM];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MAXM; j++) {
			acc[r][j] = 0.0f;
		}
	}
	for (int k = 4 * int(lane); k < K; k += 128) {
		float xv[MAXM][4];
		for (int j = 0; j < MAXM; j++) {
			if (vec4) {
				load4(xr[j] + k, xv[j]);
			} else {
				load4_tail(xr[j] + k, K - k, xv[j]);
			}
		}
		for (int r = 0; r < MATVEC_ROWS; r++) {
			float wv[4];
			if (vec4) {
				load4(wr[r] + k, wv);
			} else {
				load4_tail(wr[r] + k, K - k, wv);
			}
			for (int j = 0; j < MAXM; j++) {
				for (int i = 0; i < 4; i++) {
					acc[r][j] = fma(wv[i], xv[j][i], acc[r][j]);
				}
			}
		}
	}
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MAXM; j++) {
			const float s = simd_sum(acc[r][j]);
			if (lane == 0 && n0 + r < args.N && m0 + j < args.M) {
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] = s;
			}
		}
	}
}

instantiate_kernel("matvec_nt1_f32", matvec_nt, float, 1)
instantiate_kernel("matvec_nt1_f16", matvec_nt, half, 1)
instantiate_kernel("matvec_nt1_bf16", matvec_nt, bf16, 1)
instantiate_kernel("matvec_nt4_f32", matvec_nt, float, 4)
instantiate_kernel("matvec_nt4_f16", matvec_nt, half, 4)
instantiate_kernel("matvec_nt4_bf16", matvec_nt, bf16, 4)
instantiate_kernel("matvec_nt8_f32", matvec_nt, float, MATVEC_MAX_M)
instantiate_kernel("matvec_nt8_f16", matvec_nt, half, MATVEC_MAX_M)
instantiate_kernel("matvec_nt8_bf16", matvec_nt, bf16, MATVEC_MAX_M)
