// matvec.cu: out = x·wᵀ for f32/f16/bf16 weights, x [m,k] f32, w [n,k],
// out [m,n] f32, shaped for decoding and verification (small m, read w at
// memory bandwidth). Each warp computes one column of out for every row:
// lane l adds x·w over k = l, l+32, ... and the warp's butterfly adds the
// lanes, so a row's result depends on k alone, never on m or the other rows
// (greedy ReDrafter stays bit-exact). Rows go 4 at a time so that one load
// of w serves 4 rows. Grid: (ceil(n/4)); block: 128 threads (4 warps).
#include "prelude.cuh"

template <class T> DEVICE void matvec(float *out, const float *x, const T *w, int m, int k, int n) {
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	if (col >= n) return;
	const u64 wrow = u64(col) * u64(k);
	for (int r0 = 0; r0 < m; r0 += 4) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int i = lane; i < k; i += 32) {
			const float wv = load_w(w, wrow + u64(i));
			for (int r = 0; r < 4; r++) {
				if (r < rows) acc[r] = cu_fma(x[u64(r0 + r) * u64(k) + u64(i)], wv, acc[r]);
			}
		}
		for (int r = 0; r < 4; r++) {
			const float s = warp_sum(acc[r]);
			if (lane == 0 && r < rows) out[u64(r0 + r) * u64(n) + u64(col)] = s;
		}
	}
}

// matvec8: f16/bf16 weights whose rows are whole 16-byte words (k a
// multiple of 8, w 16-byte aligned), the kernel of decoding and
// verification. Measured on an H100 (docs/BENCHMARKS.md), a warp per column
// with scalar loads of x left decoding at 16% of the memory's bandwidth and
// made a pass over 17 rows cost 5.6 single steps: the loads of x, not of
// w, were the limit. So a block of 128 threads takes MV8_COLS columns:
// thread t reads 16-byte words t, t+128, ... of each column's row (8
// independent 16-byte loads in flight per thread) and each element of x,
// read 16 bytes at a time, serves all MV8_COLS columns. Rows go 4 at a
// time, one pass over w per 4 rows (the second and later from the cache).
// A (row, column)'s sum runs over the words of thread t in order, then
// the warp's butterfly, then the 4 warps in order: an order that depends
// on k alone, never on m or the other rows, so greedy ReDrafter stays
// bit-exact (the backend picks this kernel from k and w's address alone).
// Grid: (ceil(n/MV8_COLS)); block: 128 threads.
#define MV8_COLS 8
struct __attribute__((aligned(16))) w8 {
	unsigned u[4]; // 8 weights, two per word, the lower index in the low half
};
struct __attribute__((aligned(16))) f32x4 {
	float v[4];
};
template <bool BF16> DEVICE float w8_at(const w8 &v, int e) {
	const unsigned short h = (unsigned short)((v.u[e >> 1] >> (16 * (e & 1))) & 0xffffu);
	return BF16 ? bits_f32(unsigned(h) << 16) : bits_f16(h);
}
// x8 reads x[i..i+8): 16 bytes at a time where x is 16-byte aligned (k is
// a multiple of 8, so then every row is too), else one float at a time;
// the values, and so the sums, are the same either way.
DEVICE void x8(float xs[8], const float *x, u64 i, bool vec) {
	if (vec) {
		const f32x4 a = reinterpret_cast<const f32x4 *>(x + i)[0], b = reinterpret_cast<const f32x4 *>(x + i)[1];
#pragma unroll
		for (int e = 0; e < 4; e++) {
			xs[e] = a.v[e];
			xs[4 + e] = b.v[e];
		}
	} else {
#pragma unroll
		for (int e = 0; e < 8; e++) xs[e] = x[i + u64(e)];
	}
}
template <bool BF16> DEVICE void matvec8(float *out, const float *x, const void *w, int m, int k, int n) {
	SHARED float part[4][4][MV8_COLS]; // [warp][row][column] sums of each warp
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int col0 = int(blockIdx.x) * MV8_COLS;
	const int words = k / 8;
	const bool vec = (reinterpret_cast<u64>(x) & 15u) == 0;
	const w8 *wcol = reinterpret_cast<const w8 *>(w) + u64(col0) * u64(words);
	for (int r0 = 0; r0 < m; r0 += 4) {
		const int rows = m - r0 < 4 ? m - r0 : 4;
		float acc[4][MV8_COLS];
#pragma unroll
		for (int r = 0; r < 4; r++) {
#pragma unroll
			for (int c = 0; c < MV8_COLS; c++) acc[r][c] = 0.0f;
		}
		for (int j = t; j < words; j += 128) {
			w8 v[MV8_COLS];
#pragma unroll
			for (int c = 0; c < MV8_COLS; c++) {
				if (col0 + c < n) {
					v[c] = wcol[u64(c) * u64(words) + u64(j)];
				} else {
					v[c] = w8{{0u, 0u, 0u, 0u}};
				}
			}
#pragma unroll
			for (int r = 0; r < 4; r++) {
				if (r >= rows) break;
				float xs[8];
				x8(xs, x, u64(r0 + r) * u64(k) + u64(j) * 8u, vec);
#pragma unroll
				for (int e = 0; e < 8; e++) {
#pragma unroll
					for (int c = 0; c < MV8_COLS; c++) acc[r][c] = cu_fma(xs[e], w8_at<BF16>(v[c], e), acc[r][c]);
				}
			}
		}
#pragma unroll
		for (int r = 0; r < 4; r++) {
			if (r >= rows) break;
#pragma unroll
			for (int c = 0; c < MV8_COLS; c++) {
				const float s = warp_sum(acc[r][c]);
				if (lane == 0) part[warp][r][c] = s;
			}
		}
		sync_threads();
		if (t < 4 * MV8_COLS) {
			const int r = t / MV8_COLS, c = t % MV8_COLS;
			if (r < rows && col0 + c < n) {
				out[u64(r0 + r) * u64(n) + u64(col0 + c)] = ((part[0][r][c] + part[1][r][c]) + part[2][r][c]) + part[3][r][c];
			}
		}
		sync_threads(); // part is written again by the next 4 rows
	}
}

KERNEL void matvec_f32(float *out, const float *x, const float *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec8_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec8<false>(out, x, w, m, k, n); }
KERNEL void matvec8_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec8<true>(out, x, w, m, k, n); }
