// quant.metal: affine-quantized weights in MLX's layout. A weight [N,K] is
// BITS-bit codes packed in uint32 words (element j of a word at bits
// BITS·j, lowest first; rows of K·BITS/32 words) with a scale s and a bias b
// of type S per group of G consecutive elements of a row ([N, K/G] each):
// value = s·q + b.
//
//   quant_qmv  out[M,N] = x[M,K]·wᵀ for few rows of x (decode, verification).
//              MLX qmv_fast-style: each lane takes QMV_VALUES consecutive
//              codes of a row per step (one group: G is a multiple of 32),
//              so a row costs s·Σ(x·q) + b·Σx per lane and step; each
//              simdgroup computes QMV_ROWS outputs for up to QMV_MAX_M rows
//              of x, reading every weight once.
//              Grid: (ceil(N/(QMV_ROWS·QMV_SIMDGROUPS)), ceil(M/QMV_MAX_M));
//              threadgroup: 32·QMV_SIMDGROUPS.
//   quant_qmm  the same for many rows of x (prefill): matmul.metal's 32×32
//              tiles of 8×8 simdgroup matrices, the weight tile dequantized
//              into threadgroup memory as it is staged.
//              Grid: (ceil(N/MATMUL_BN), ceil(M/MATMUL_BM)); threadgroup:
//              MATMUL_THREADS; threadgroup(0): as matmul.metal.
//   quant_embed out[M,K] = w[ids[M]] dequantized (a row of zeros for an id
//              outside the table). Grid: (ceil(M·K/256)); threadgroup: 256.
//   quant_dequant out[N,K] = w dequantized. Grid: (ceil(N·K/256)); 256.
#include "common.h"

// code_at is element k of a row of packed codes.
template <int BITS>
inline uint code_at(device const uint *row, int k) {
	constexpr int per = 32 / BITS;
	return (row[k / per] >> uint(BITS * (k % per))) & ((1u << BITS) - 1u);
}

// dequant is element (n, k) of the weight.
template <int BITS, typename S>
inline float dequant(device const uint *w, device const S *scales, device const S *biases, int n, int k, int K, int G) {
	const ulong g = ulong(n) * ulong(K / G) + ulong(k / G);
	const float q = float(code_at<BITS>(w + ulong(n) * ulong(K * BITS / 32), k));
	return to_float(scales[g]) * q + to_float(biases[g]);
}

template <int BITS, typename S>
kernel void quant_qmv(
		constant QuantArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const uint *w [[buffer(2)]],
		device const S *scales [[buffer(3)]],
		device const S *biases [[buffer(4)]],
		device float *out [[buffer(5)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	constexpr int WORDS = QMV_VALUES * BITS / 32; // words of codes per lane and step
	constexpr uint MASK = (1u << BITS) - 1u;
	constexpr int PER = 32 / BITS;
	const int n0 = (int(tgpig.x) * QMV_SIMDGROUPS + int(sgitg)) * QMV_ROWS;
	const int m0 = int(tgpig.y) * QMV_MAX_M;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	const int K = args.K;
	const int rowWords = K * BITS / 32;
	const int groups = K / args.G;
	const int mrows = min(QMV_MAX_M, args.M - m0);
	// Rows past the end repeat the last one (valid memory) and are not stored.
	int rows[QMV_ROWS];
	for (int r = 0; r < QMV_ROWS; r++) {
		rows[r] = min(n0 + r, args.N - 1);
	}
	float acc[QMV_ROWS][QMV_MAX_M];
	for (int r = 0; r < QMV_ROWS; r++) {
		for (int j = 0; j < QMV_MAX_M; j++) {
			acc[r][j] = 0.0f;
		}
	}
	for (int k = int(lane) * QMV_VALUES; k < K; k += 32 * QMV_VALUES) {
		uint packed[QMV_ROWS][WORDS];
		float s[QMV_ROWS];
		float b[QMV_ROWS];
		for (int r = 0; r < QMV_ROWS; r++) {
			device const uint *wr = w + ulong(rows[r]) * ulong(rowWords) + ulong(k / PER);
			for (int i = 0; i < WORDS; i++) {
				packed[r][i] = wr[i];
			}
			const ulong g = ulong(rows[r]) * ulong(groups) + ulong(k / args.G);
			s[r] = to_float(scales[g]);
			b[r] = to_float(biases[g]);
		}
		for (int j = 0; j < mrows; j++) {
			device const float *xr = x + ulong(m0 + j) * ulong(K) + ulong(k);
			float xv[QMV_VALUES];
			float xsum = 0.0f;
			for (int i = 0; i < QMV_VALUES; i++) {
				xv[i] = xr[i];
				xsum += xv[i];
			}
			for (int r = 0; r < QMV_ROWS; r++) {
				float d = 0.0f;
				for (int i = 0; i < QMV_VALUES; i++) {
					d += xv[i] * float((packed[r][i / PER] >> uint(BITS * (i % PER))) & MASK);
				}
				acc[r][j] += s[r] * d + b[r] * xsum;
			}
		}
	}
	for (int r = 0; r < QMV_ROWS; r++) {
		for (int j = 0; j < QMV_MAX_M; j++) {
			const float v = simd_sum(acc[r][j]);
			if (lane == 0 && n0 + r < args.N && j < mrows) {
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] = v;
			}
		}
	}
}

template <int BITS, typename S>
kernel void quant_qmm(
		constant QuantArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const uint *w [[buffer(2)]],
		device const S *scales [[buffer(3)]],
		device const S *biases [[buffer(4)]],
		device float *out [[buffer(5)]],
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
	const int K = args.K;

	simdgroup_float8x8 c[2][2];
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			c[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
		}
	}
	for (int k0 = 0; k0 < K; k0 += MATMUL_BK) {
		for (int i = int(tiitg); i < MATMUL_BM * MATMUL_BK; i += MATMUL_THREADS) {
			const int r = i / MATMUL_BK;
			const int gk = k0 + i % MATMUL_BK;
			const int gm = m0 + r;
			const int gn = n0 + r;
			xs[i] = (gm < args.M && gk < K) ? x[ulong(gm) * ulong(K) + ulong(gk)] : 0.0f;
			ws[i] = (gn < args.N && gk < K) ? dequant<BITS, S>(w, scales, biases, gn, gk, K, args.G) : 0.0f;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		for (int kk = 0; kk < MATMUL_BK; kk += 8) {
			simdgroup_float8x8 a[2];
			simdgroup_float8x8 bt[2];
			for (int i = 0; i < 2; i++) {
				simdgroup_load(a[i], xs + (sm * 16 + i * 8) * MATMUL_BK + kk, MATMUL_BK);
			}
			for (int j = 0; j < 2; j++) {
				simdgroup_load(bt[j], ws + (sn * 16 + j * 8) * MATMUL_BK + kk, MATMUL_BK, ulong2(0), true);
			}
			for (int i = 0; i < 2; i++) {
				for (int j = 0; j < 2; j++) {
					simdgroup_multiply_accumulate(c[i][j], a[i], bt[j], c[i][j]);
				}
			}
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
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

template <int BITS, typename S>
kernel void quant_embed(
		constant QuantArgs &args [[buffer(0)]],
		device const uint *w [[buffer(1)]],
		device const S *scales [[buffer(2)]],
		device const S *biases [[buffer(3)]],
		device const int *ids [[buffer(4)]],
		device float *out [[buffer(5)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.M) * uint(args.K)) {
		return;
	}
	const int r = int(i / uint(args.K));
	const int c = int(i % uint(args.K));
	const int id = ids[r];
	out[i] = (id >= 0 && id < args.N) ? dequant<BITS, S>(w, scales, biases, id, c, args.K, args.G) : 0.0f;
}

template <int BITS, typename S>
kernel void quant_dequant(
		constant QuantArgs &args [[buffer(0)]],
		device const uint *w [[buffer(1)]],
		device const S *scales [[buffer(2)]],
		device const S *biases [[buffer(3)]],
		device float *out [[buffer(4)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.N) * uint(args.K)) {
		return;
	}
	out[i] = dequant<BITS, S>(w, scales, biases, int(i / uint(args.K)), int(i % uint(args.K)), args.K, args.G);
}

instantiate_kernel("quant_qmv4_f16", quant_qmv, 4, half)
instantiate_kernel("quant_qmv4_bf16", quant_qmv, 4, bf16)
instantiate_kernel("quant_qmv4_f32", quant_qmv, 4, float)
instantiate_kernel("quant_qmv8_f16", quant_qmv, 8, half)
instantiate_kernel("quant_qmv8_bf16", quant_qmv, 8, bf16)
instantiate_kernel("quant_qmv8_f32", quant_qmv, 8, float)
instantiate_kernel("quant_qmm4_f16", quant_qmm, 4, half)
instantiate_kernel("quant_qmm4_bf16", quant_qmm, 4, bf16)
instantiate_kernel("quant_qmm4_f32", quant_qmm, 4, float)
instantiate_kernel("quant_qmm8_f16", quant_qmm, 8, half)
instantiate_kernel("quant_qmm8_bf16", quant_qmm, 8, bf16)
instantiate_kernel("quant_qmm8_f32", quant_qmm, 8, float)
instantiate_kernel("quant_embed4_f16", quant_embed, 4, half)
instantiate_kernel("quant_embed4_bf16", quant_embed, 4, bf16)
instantiate_kernel("quant_embed4_f32", quant_embed, 4, float)
instantiate_kernel("quant_embed8_f16", quant_embed, 8, half)
instantiate_kernel("quant_embed8_bf16", quant_embed, 8, bf16)
instantiate_kernel("quant_embed8_f32", quant_embed, 8, float)
instantiate_kernel("quant_dequant4_f16", quant_dequant, 4, half)
instantiate_kernel("quant_dequant4_bf16", quant_dequant, 4, bf16)
instantiate_kernel("quant_dequant4_f32", quant_dequant, 4, float)
instantiate_kernel("quant_dequant8_f16", quant_dequant, 8, half)
instantiate_kernel("quant_dequant8_bf16", quant_dequant, 8, bf16)
instantiate_kernel("quant_dequant8_f32", quant_dequant, 8, float)
