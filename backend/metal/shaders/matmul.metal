// matmul.metal: out[M,N] = x[M,K] · w[N,K]ᵀ for many rows of x (prefill and
// tree verification), with 8x8 simdgroup matrices. A threadgroup computes a
// MATMUL_BM×MATMUL_BN tile with 4 simdgroups of 16×16 each; both operands are
// staged as float in threadgroup memory, MATMUL_BK columns of K at a time,
// zero-filled past the edges, so any M, N and K work.
// Grid: (ceil(N/MATMUL_BN), ceil(M/MATMUL_BM)); threadgroup: MATMUL_THREADS;
// threadgroup(0): (MATMUL_BM+MATMUL_BN)·MATMUL_BK floats (≥ BM·BN).
#include "common.h"

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
	threadgroup float *xs = shmem;                         // [BM][BK]
	threadgroup float *ws = shmem + MATMUL_BM * MATMUL_BK; // [BN][BK]
	const int m0 = int(tgpig.y) * MATMUL_BM;
	const int n0 = int(tgpig.x) * MATMUL_BN;
	const int sm = int(sgitg) / 2;
	const int sn = int(sgitg) % 2;

	simdgroup_float8x8 c[2][2];
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			c[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
		}
	}
	for (int k0 = 0; k0 < args.K; k0 += MATMUL_BK) {
		for (int i = int(tiitg); i < MATMUL_BM * MATMUL_BK; i += MATMUL_THREADS) {
			const int r = i / MATMUL_BK;
			const int gk = k0 + i % MATMUL_BK;
			const int gm = m0 + r;
			const int gn = n0 + r;
			xs[i] = (gm < args.M && gk < args.K) ? x[ulong(gm) * ulong(args.K) + ulong(gk)] : 0.0f;
			ws[i] = (gn < args.N && gk < args.K) ? to_float(w[ulong(gn) * ulong(args.K) + ulong(gk)]) : 0.0f;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		for (int kk = 0; kk < MATMUL_BK; kk += 8) {
			simdgroup_float8x8 a[2];
			simdgroup_float8x8 b[2];
			for (int i = 0; i < 2; i++) {
				simdgroup_load(a[i], xs + (sm * 16 + i * 8) * MATMUL_BK + kk, MATMUL_BK);
			}
			for (int j = 0; j < 2; j++) {
				// b[j](k, n) = w[n, k]: a transposed load of the w tile.
				simdgroup_load(b[j], ws + (sn * 16 + j * 8) * MATMUL_BK + kk, MATMUL_BK, ulong2(0), true);
			}
			for (int i = 0; i < 2; i++) {
				for (int j = 0; j < 2; j++) {
					simdgroup_multiply_accumulate(c[i][j], a[i], b[j], c[i][j]);
				}
			}
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
	// Through threadgroup memory, so that edge tiles store only what exists.
	threadgroup float *cs = shmem; // [BM][BN]
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			simdgroup_store(c[i][j], cs + (sm * 16 + i * 8) * MATMUL_BN + sn * 16 + j * 8, MATMUL_BN);
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	for (int i = int(tiitg); i < MATMUL_BM * MATMUL_BN; i += MATMUL_THREADS) {
		const int gm = m0 + i / MATMUL_BN;
		const int gn = n0 + i % MATMUL_BN;
		if (gm < args.M && gn < args.N) {
			out[ulong(gm) * ulong(args.N) + ulong(gn)] = cs[i];
		}
	}
}

instantiate_kernel("matmul_nt_f32", matmul_nt, float)
instantiate_kernel("matmul_nt_f16", matmul_nt, half)
instantiate_kernel("matmul_nt_bf16", matmul_nt, bf16)
