// mma.h: the simdgroup-matrix tile of matmul.metal and quant.metal's qmm:
// a MATMUL_BM×MATMUL_BN (64×64) output tile per threadgroup, 4 simdgroups
// of 32×32 (16 8×8 float accumulators each, so each operand loaded from
// threadgroup memory feeds 4 multiplies), MATMUL_BK columns of K per step.
#pragma once

#include "common.h"

// stage_type is the type a weight tile is staged in.
template <typename W>
struct stage_type {
	typedef float type;
};
template <>
struct stage_type<half> {
	typedef half type;
};

// matmul_stage loads rows [r0, r0+rows) × columns [k0, k0+MATMUL_BK) of
// src [R, K] into dst [rows][MATMUL_BK] as T, zeros outside src. Every
// thread calls it.
template <typename T, typename W>
inline void matmul_stage(device const W *src, int R, int K, int r0, int k0, bool vec4, threadgroup T *dst, uint tiitg) {
	constexpr int GROUPS = MATMUL_BM * MATMUL_BK / 4; // 4-element groups per tile
	for (int i = int(tiitg); i < GROUPS; i += MATMUL_THREADS) {
		const int r = i / (MATMUL_BK / 4);
		const int c = (i % (MATMUL_BK / 4)) * 4;
		const int gr = r0 + r;
		const int gk = k0 + c;
		float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		if (gr < R && gk < K) {
			device const W *p = src + ulong(gr) * ulong(K) + ulong(gk);
			if (vec4) {
				load4(p, v); // K is a multiple of 4: the group is whole
			} else {
				load4_tail(p, K - gk, v);
			}
		}
		for (int e = 0; e < 4; e++) {
			dst[r * MATMUL_BK + c + e] = T(v[e]);
		}
	}
}

// matmul_tile multiplies the staged tiles into c (this simdgroup's 32×32:
// rows sm·32.., columns sn·32..).
template <typename T>
inline void matmul_tile(threadgroup const float *xs, threadgroup const T *ws, int sm, int sn,
		thread simdgroup_float8x8 (*c)[4]) {
	for (int kk = 0; kk < MATMUL_BK; kk += 8) {
		simdgroup_float8x8 a[4];
		simdgroup_matrix<T, 8, 8> b[4];
		for (int i = 0; i < 4; i++) {
			simdgroup_load(a[i], xs + (sm * 32 + i * 8) * MATMUL_BK + kk, MATMUL_BK);
		}
		for (int j = 0; j < 4; j++) {
			// b[j](k, n) = w[n, k]: a transposed load of the w tile.
			simdgroup_load(b[j], ws + (sn * 32 + j * 8) * MATMUL_BK + kk, MATMUL_BK, ulong2(0), true);
		}
		for (int i = 0; i < 4; i++) {
			for (int j = 0; j < 4; j++) {
				simdgroup_multiply_accumulate(c[i][j], a[i], b[j], c[i][j]);
			}
		}
	}
}

// matmul_store writes c to out [M, N] at tile (m0, n0). Every thread calls it.
inline void matmul_store(thread simdgroup_float8x8 (*c)[4], device float *out, int M, int N, int m0, int n0, int sm,
		int sn, threadgroup float *shmem, uint tiitg) {
	if (m0 + MATMUL_BM <= M && n0 + MATMUL_BN <= N) {
		for (int i = 0; i < 4; i++) {
			for (int j = 0; j < 4; j++) {
				device float *o = out + ulong(m0 + sm * 32 + i * 8) * ulong(N) + ulong(n0 + sn * 32 + j * 8);
				simdgroup_store(c[i][j], o, ulong(N));
			}
		}
		return; // the whole threadgroup takes the same branch
	}
	threadgroup float *cs = shmem; // [BM][BN]
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 4; j++) {
			simdgroup_store(c[i][j], cs + (sm * 32 + i * 8) * MATMUL_BN + sn * 32 + j * 8, MATMUL_BN);
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	for (int i = int(tiitg); i < MATMUL_BM * MATMUL_BN; i += MATMUL_THREADS) {
		const int gm = m0 + i / MATMUL_BN;
		const int gn = n0 + i % MATMUL_BN;
		if (gm < M && gn < N) {
			out[ulong(gm) * ulong(N) + ulong(gn)] = cs[i];
		}
	}
}

