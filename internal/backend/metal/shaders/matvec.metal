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
//
// It also runs graph.LinearOp (args.fuse, LINEAR_ bits): the threadgroup
// reads all of each row of x anyway, so the norm is a prologue (each lane
// accumulates Σx² beside its dot products and multiplies x by the gain as
// it loads it; 1/rms scales the sums at the end) and bias, SwiGLU or GeGLU
// and residual an epilogue (linear_out). With a GLU a simdgroup's slots hold
// MATVEC_ROWS/2 gate rows and the matching up rows (linear_row). The Σx²
// is summed in the same fixed order for every row of x, so a row's result
// still depends on K alone.
// Grid: (ceil(N / (outputs per simdgroup·MATVEC_SIMDGROUPS)), ceil(M / MAXM)),
// outputs per simdgroup MATVEC_ROWS, or MATVEC_ROWS/2 with a GLU;
// threadgroup: 32·MATVEC_SIMDGROUPS. buffer(4..6): the gain, bias and
// residual (bound to anything when their bit is off).
#include "common.h"

template <typename W, int MAXM>
kernel void matvec_nt(
		constant MatmulArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const W *w [[buffer(2)]],
		device float *out [[buffer(3)]],
		device const float *gain [[buffer(4)]],
		device const float *bias [[buffer(5)]],
		device const float *res [[buffer(6)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const bool norm = (args.fuse & LINEAR_NORM) != 0;
	const bool glu = linear_glu(args.fuse);
	const int outs = glu ? MATVEC_ROWS / 2 : MATVEC_ROWS; // outputs per simdgroup
	const int n0 = (int(tgpig.x) * MATVEC_SIMDGROUPS + int(sgitg)) * outs;
	const int m0 = int(tgpig.y) * MAXM;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	const int K = args.K;
	const bool vec4 = args.vec4 != 0;
	device const W *wr[MATVEC_ROWS];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		wr[r] = w + ulong(linear_row(glu, MATVEC_ROWS, r, n0, args.N)) * ulong(K);
	}
	// Rows of x past the end repeat the last one and are not stored.
	device const float *xr[MAXM];
	for (int j = 0; j < MAXM; j++) {
		xr[j] = x + ulong(min(m0 + j, args.M - 1)) * ulong(K);
	}
	float acc[MATVEC_ROWS][MAXM];
	float ss[MAXM]; // Σx² of this lane's share of each row of x (the norm)
	for (int j = 0; j < MAXM; j++) {
		ss[j] = 0.0f;
		for (int r = 0; r < MATVEC_ROWS; r++) {
			acc[r][j] = 0.0f;
		}
	}
	for (int k = 4 * int(lane); k < K; k += 128) {
		float xv[MAXM][4];
		float gv[4];
		if (norm) {
			if (vec4) {
				load4(gain + k, gv);
			} else {
				load4_tail(gain + k, K - k, gv);
			}
		}
		for (int j = 0; j < MAXM; j++) {
			if (vec4) {
				load4(xr[j] + k, xv[j]);
			} else {
				load4_tail(xr[j] + k, K - k, xv[j]);
			}
			if (norm) {
				for (int i = 0; i < 4; i++) {
					ss[j] = fma(xv[j][i], xv[j][i], ss[j]);
					xv[j][i] *= gv[i];
				}
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
	float scale[MAXM];
	for (int j = 0; j < MAXM; j++) {
		scale[j] = norm ? 1.0f / sqrt(simd_sum(ss[j]) / float(K) + args.eps) : 1.0f;
	}
	float sums[MATVEC_ROWS][MAXM];
	for (int r = 0; r < MATVEC_ROWS; r++) {
		for (int j = 0; j < MAXM; j++) {
			sums[r][j] = simd_sum(acc[r][j]);
		}
	}
	if (lane != 0) {
		return;
	}
	// Compile-time slot indices (r + half, not r + outs) keep sums in registers.
	constexpr int half_rows = MATVEC_ROWS / 2;
	for (int r = 0; r < MATVEC_ROWS; r++) {
		if (r >= outs) {
			break;
		}
		const int up_slot = r + half_rows < MATVEC_ROWS ? r + half_rows : r;
		for (int j = 0; j < MAXM; j++) {
			if (n0 + r < args.N && m0 + j < args.M) {
				const float up = glu ? sums[up_slot][j] : 0.0f;
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] =
						linear_out(args.fuse, scale[j], sums[r][j], up, bias, res, m0 + j, n0 + r, args.N);
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
