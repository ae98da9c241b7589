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
// read 16 bytes at a time, serves all MV8_COLS columns. Rows go up to 4 at
// a time (a pass per 4 rows, the second and later reading w from the
// cache), the count a template argument so that the sums stay in
// registers. A (row, column)'s sum runs over the words of thread t in
// order, then the warp's butterfly, then the 4 warps in order: an order
// that depends on k alone, never on m or the other rows, so greedy
// ReDrafter stays bit-exact (the backend picks this kernel from k and w's
// address alone).
// Grid: (ceil(n/MV8_COLS)); block: 128 threads.
#define MV8_COLS 8
template <bool BF16> DEVICE float w8_at(const u32x4 &v, int e) {
	const unsigned short h = (unsigned short)((v.v[e >> 1] >> (16 * (e & 1))) & 0xffffu);
	return BF16 ? bits_f32(unsigned(h) << 16) : bits_f16(h);
}
// x8 reads x[i..i+8): 16 bytes at a time where x is 16-byte aligned (k is
// a multiple of 8, so then every row is too), else one float at a time;
// the values, and so the sums, are the same either way.
template <bool VEC> DEVICE void x8(float xs[8], const float *x, u64 i) {
	if (VEC) {
		const f32x4 a = ld_v4_f32(x + i), b = ld_v4_f32(x + i + 4u);
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
// matvec8_rows computes rows r0..r0+R of the block's columns.
template <bool BF16, bool VEC, int R>
DEVICE ALWAYS_INLINE void matvec8_rows(float *out, const float *x, const unsigned *w, int r0, int k, int n, float part[4][4][MV8_COLS]) {
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int col0 = int(blockIdx.x) * MV8_COLS;
	const u64 words = u64(k / 8);
	// Columns past n read column n-1 (so every load is unconditional);
	// their sums are never written.
	u64 wrow[MV8_COLS];
#pragma unroll
	for (int c = 0; c < MV8_COLS; c++) wrow[c] = u64(col0 + c < n ? col0 + c : n - 1) * words;
	float acc[R][MV8_COLS];
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < MV8_COLS; c++) acc[r][c] = 0.0f;
	}
	for (u64 j = u64(t); j < words; j += 128u) {
		u32x4 v[MV8_COLS];
#pragma unroll
		for (int c = 0; c < MV8_COLS; c++) v[c] = ld_v4_u32(w + (wrow[c] + j) * 4u);
#pragma unroll
		for (int r = 0; r < R; r++) {
			float xs[8];
			x8<VEC>(xs, x, u64(r0 + r) * u64(k) + j * 8u);
#pragma unroll
			for (int e = 0; e < 8; e++) {
#pragma unroll
				for (int c = 0; c < MV8_COLS; c++) acc[r][c] = cu_fma(xs[e], w8_at<BF16>(v[c], e), acc[r][c]);
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < MV8_COLS; c++) {
			const float s = warp_sum(acc[r][c]);
			if (lane == 0) part[warp][r][c] = s;
		}
	}
	sync_threads();
	if (t < R * MV8_COLS) {
		const int r = t / MV8_COLS, c = t % MV8_COLS;
		if (col0 + c < n) out[u64(r0 + r) * u64(n) + u64(col0 + c)] = ((part[0][r][c] + part[1][r][c]) + part[2][r][c]) + part[3][r][c];
	}
	sync_threads(); // part is written again by the next rows
}
template <bool BF16, bool VEC> DEVICE ALWAYS_INLINE void matvec8(float *out, const float *x, const unsigned *w, int m, int k, int n, float part[4][4][MV8_COLS]) {
	if constexpr (!VEC) { // a row at a time: slower, and a quarter of the code
		for (int r0 = 0; r0 < m; r0++) matvec8_rows<BF16, false, 1>(out, x, w, r0, k, n, part);
	} else {
		for (int r0 = 0; r0 < m; r0 += 4) {
			switch (m - r0) {
			case 1: matvec8_rows<BF16, VEC, 1>(out, x, w, r0, k, n, part); break;
			case 2: matvec8_rows<BF16, VEC, 2>(out, x, w, r0, k, n, part); break;
			case 3: matvec8_rows<BF16, VEC, 3>(out, x, w, r0, k, n, part); break;
			default: matvec8_rows<BF16, VEC, 4>(out, x, w, r0, k, n, part); break;
			}
		}
	}
}
template <bool BF16> DEVICE ALWAYS_INLINE void matvec8(float *out, const float *x, const void *w, int m, int k, int n) {
	SHARED float part[4][4][MV8_COLS]; // [warp][row][column] sums of each warp
	const unsigned *wu = reinterpret_cast<const unsigned *>(w);
	if ((reinterpret_cast<u64>(x) & 15u) == 0) {
		matvec8<BF16, true>(out, x, wu, m, k, n, part);
	} else {
		matvec8<BF16, false>(out, x, wu, m, k, n, part);
	}
}

KERNEL void matvec_f32(float *out, const float *x, const float *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec(out, x, w, m, k, n); }
KERNEL void matvec8_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matvec8<false>(out, x, w, m, k, n); }
KERNEL void matvec8_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matvec8<true>(out, x, w, m, k, n); }
