// matmul.cu: out = x·wᵀ on tensor cores, for the prefill: x [m,k] f32, w
// [n,k] f16 or bf16, out [m,n] f32, with m larger than the rows matvec.cu
// serves (the backend's InvariantRows), so decoding and verification never
// come here and a row's bits do not depend on its batch there.
//
// x is f32 and the tensor cores take 16-bit inputs, so each element of x is
// split into hi = x rounded to the weight's type and lo = (x - hi) rounded,
// and x·w = hi·w + lo·w: two mma's per step, keeping about 22 bits of x with
// f16 weights (16 with bf16), where one rounding keeps 11 (8). Products are
// exact and accumulate in f32. (With f16 weights an |x| above 65504, the
// type's largest value, does not fit: such activations need bf16 weights.)
//
// A block computes 64 rows × 32 columns of out with 4 warps, warp i rows
// 16i..16i+15 as four 16×8 tiles, stepping k by 16 through shared memory;
// tails in m, n and k read as zeros. Grid: (ceil(n/32), ceil(m/64)); block: 128.
#include "prelude.cuh"

#define MM_BM 64
#define MM_BN 32
#define MM_BK 16

DEVICE unsigned short to16(float v, bool bf16) {
	if (!bf16) return f16_bits(v);
	const unsigned u = f32_bits(v);
	return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); // round to nearest even
}
DEVICE float from16(unsigned short h, bool bf16) { return bf16 ? bits_f32(unsigned(h) << 16) : bits_f16(h); }
DEVICE unsigned pack(unsigned short lo, unsigned short hi) { return unsigned(lo) | (unsigned(hi) << 16); }

template <class T, bool BF16> DEVICE void matmul_mma(float *out, const float *x, const T *w, int m, int k, int n) {
	SHARED unsigned short xhi[MM_BM][MM_BK], xlo[MM_BM][MM_BK], ws[MM_BN][MM_BK];
	const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int row0 = int(blockIdx.y) * MM_BM, col0 = int(blockIdx.x) * MM_BN;
	const unsigned short *wbits = reinterpret_cast<const unsigned short *>(w);
	float acc[4][4];
	for (int j = 0; j < 4; j++)
		for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
	for (int k0 = 0; k0 < k; k0 += MM_BK) {
		sync_threads(); // the previous step's fragments have been read
		for (int e = tid; e < MM_BM * MM_BK; e += 128) {
			const int r = e / MM_BK, c = e % MM_BK;
			const float v = row0 + r < m && k0 + c < k ? x[u64(row0 + r) * u64(k) + u64(k0 + c)] : 0.0f;
			const unsigned short h = to16(v, BF16);
			xhi[r][c] = h;
			xlo[r][c] = to16(v - from16(h, BF16), BF16);
		}
		for (int e = tid; e < MM_BN * MM_BK; e += 128) {
			const int r = e / MM_BK, c = e % MM_BK;
			ws[r][c] = col0 + r < n && k0 + c < k ? wbits[u64(col0 + r) * u64(k) + u64(k0 + c)] : (unsigned short)0;
		}
		sync_threads();
		const int r = warp * 16 + g;
		const unsigned ahi[4] = {pack(xhi[r][2 * t], xhi[r][2 * t + 1]), pack(xhi[r + 8][2 * t], xhi[r + 8][2 * t + 1]),
		                         pack(xhi[r][2 * t + 8], xhi[r][2 * t + 9]), pack(xhi[r + 8][2 * t + 8], xhi[r + 8][2 * t + 9])};
		const unsigned alo[4] = {pack(xlo[r][2 * t], xlo[r][2 * t + 1]), pack(xlo[r + 8][2 * t], xlo[r + 8][2 * t + 1]),
		                         pack(xlo[r][2 * t + 8], xlo[r][2 * t + 9]), pack(xlo[r + 8][2 * t + 8], xlo[r + 8][2 * t + 9])};
		for (int j = 0; j < 4; j++) {
			const int c = j * 8 + g;
			const unsigned b[2] = {pack(ws[c][2 * t], ws[c][2 * t + 1]), pack(ws[c][2 * t + 8], ws[c][2 * t + 9])};
			if (BF16) {
				mma_bf16(acc[j], alo, b, acc[j]);
				mma_bf16(acc[j], ahi, b, acc[j]);
			} else {
				mma_f16(acc[j], alo, b, acc[j]);
				mma_f16(acc[j], ahi, b, acc[j]);
			}
		}
	}
	const int r = row0 + warp * 16 + g;
	for (int j = 0; j < 4; j++) {
		const int c = col0 + j * 8 + 2 * t;
		for (int i = 0; i < 4; i++) {
			const int rr = r + (i >= 2 ? 8 : 0), cc = c + (i & 1);
			if (rr < m && cc < n) out[u64(rr) * u64(n) + u64(cc)] = acc[j][i];
		}
	}
}

KERNEL void matmul_mma_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { matmul_mma<f16_t, false>(out, x, w, m, k, n); }
KERNEL void matmul_mma_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { matmul_mma<bf16_t, true>(out, x, w, m, k, n); }
