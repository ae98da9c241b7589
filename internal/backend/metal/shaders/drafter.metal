// drafter.metal: the draft head's recurrent step in one dispatch,
// out[M,N] = SiLU((e[M,K]·w[N,K]ᵀ + s[M,K]·u[N,K]ᵀ) + b[N]), in place of
// two matvecs, two adds and a SiLU (five dispatches, each waiting on the
// last, at every step of the beam search). It has matvec.metal's layout:
// each simdgroup computes MATVEC_ROWS outputs for up to MATVEC_MAX_M beams,
// reading each weight of w and u once; lanes stride over K.
// Grid: (ceil(N / (MATVEC_ROWS·MATVEC_SIMDGROUPS)), ceil(M / MATVEC_MAX_M));
// threadgroup: 32·MATVEC_SIMDGROUPS.
#include "common.h"

template <typename W>
kernel void drafter_rnn(
		constant MatmulArgs &args [[buffer(0)]],
		device const float *e [[buffer(1)]],
		device const float *s [[buffer(2)]],
		device const W *w [[buffer(3)]],
		device const W *u [[buffer(4)]],
		device const float *bias [[buffer(5)]],
		device float *out [[buffer(6)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int n0 = (int(tgpig.x) * MATVEC_SIMDGROUPS + int(sgitg)) * MATVEC_ROWS;
	const int m0 = int(tgpig.y) * MATVEC_MAX_M;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	// Rows past the end repeat the last one (valid memory) and are not stored.
	ulong wrow[MATVEC_ROWS];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		wrow[r] = ulong(min(n0 + r, args.N - 1)) * ulong(args.K);
	}
	ulong xrow[MATVEC_MAX_M];
	for (int j = 0; j < MATVEC_MAX_M; j++) {
		xrow[j] = ulong(min(m0 + j, args.M - 1)) * ulong(args.K);
	}
	// The two products are summed apart and added at the end, as the
	// unfused graph does.
	float accw[MATVEC_ROWS][MATVEC_MAX_M];
	float accu[MATVEC_ROWS][MATVEC_MAX_M];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			accw[r][j] = 0.0f;
			accu[r][j] = 0.0f;
		}
	}
	for (int k = int(lane); k < args.K; k += 32) {
		float ev[MATVEC_MAX_M];
		float sv[MATVEC_MAX_M];
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			ev[j] = e[xrow[j] + ulong(k)];
			sv[j] = s[xrow[j] + ulong(k)];
		}
		for (int r = 0; r < MATVEC_ROWS; r++) {
			const float wv = to_float(w[wrow[r] + ulong(k)]);
			const float uv = to_float(u[wrow[r] + ulong(k)]);
			for (int j = 0; j < MATVEC_MAX_M; j++) {
				accw[r][j] += wv * ev[j];
				accu[r][j] += uv * sv[j];
			}
		}
	}
	for (int r = 0; r < MATVEC_ROWS; r++) {
		const float b = bias[min(n0 + r, args.N - 1)];
		for (int j = 0; j < MATVEC_MAX_M; j++) {
			const float v = (simd_sum(accw[r][j]) + simd_sum(accu[r][j])) + b;
			if (lane == 0 && n0 + r < args.N && m0 + j < args.M) {
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] = v / (1.0f + exp(-v));
			}
		}
	}
}

instantiate_kernel("drafter_rnn_f32", drafter_rnn, float)
instantiate_kernel("drafter_rnn_f16", drafter_rnn, half)
instantiate_kernel("drafter_rnn_bf16", drafter_rnn, bf16)
