// quant.metal: affine-quantized weights in MLX's layout. A weight [N,K] is
// BITS-bit codes packed in uint32 words (element j of a word at bits
// BITS·j, lowest first; rows of K·BITS/32 words) with a scale s and a bias b
// of type S per group of G consecutive elements of a row ([N, K/G] each):
// value = s·q + b.
//
//   quant_qmv  out[M,N] = x[M,K]·wᵀ for few rows of x (decode, verification).
//              MLX qmv_fast-style: each lane takes QMV_VALUES consecutive
//              codes of a row per step (within one group: GS is a multiple
//              of 32), so a row costs s·Σ(x·q) + b·Σx per lane and step;
//              x is pre-scaled so that codes are masked, never shifted
//              (qmv_load_x). Each simdgroup computes QMV_ROWS outputs for
//              MAXM rows of x, reading every weight once. The group size
//              GS and MAXM (1, 4 or QMV_MAX_M) are template parameters:
//              divisions by GS are shifts and the accumulators registers.
//              It runs graph.LinearOp too (args.fuse, as matvec.metal):
//              the norm's gain folded into the pre-scaled x, Σx² beside
//              it, 1/rms and the epilogue (linear_out) at the end.
//              Grid: (ceil(N/(outputs per simdgroup·QMV_SIMDGROUPS)),
//              ceil(M/MAXM)), outputs per simdgroup QMV_ROWS, QMV_ROWS/2
//              with a GLU; threadgroup: 32·QMV_SIMDGROUPS; buffer(6..8):
//              the gain, bias and residual (bound to anything when off).
//   quant_qmm  the same for many rows of x (prefill): matmul.metal's 64×64
//              tiles (mma.h), the weight tile dequantized into threadgroup
//              memory as it is staged, one word of codes and one scale and
//              bias per thread and row (the group size GS is a template
//              parameter, and a multiple of MATMUL_BK).
//              Grid: (ceil(N/MATMUL_BN), ceil(M/MATMUL_BM)); threadgroup:
//              MATMUL_THREADS; threadgroup(0): as matmul.metal.
//   quant_embed out[M,K] = w[ids[M]] dequantized (a row of zeros for an id
//              outside the table). Grid: (ceil(M·K/256)); threadgroup: 256.
//   quant_dequant out[N,K] = w dequantized. Grid: (ceil(N·K/256)); 256.
#include "mma.h"

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

// qmv_load_x reads QMV_VALUES values of x into xs, pre-scaled for
// qmv_dot, and returns their plain sum. With norm, each value is first
// multiplied by its gain g[i] (the sum too is of x·g, since the bias term
// b·Σx is over the normalised x) and ss accumulates the plain x². Codes are masked in place within
// 16-bit halves of their word, never shifted down: code i of a half is
// worth q·2^(BITS·i) there, so xs[i] is x[i] / 2^(BITS·(i mod codes per
// half)). Scaling by a power of two is exact, so every product xs·(masked
// code) is the bits of x·q: the same sums as a shift-and-mask loop, with
// one multiply per x instead of a shift per code.
template <int BITS>
inline float qmv_load_x(device const float *x, bool norm, device const float *g, thread float &ss, thread float *xs) {
	constexpr int PER_HALF = 16 / BITS;
	float sum = 0.0f;
	for (int i = 0; i < QMV_VALUES; i++) {
		float v = x[i];
		if (norm) {
			ss = fma(v, v, ss);
			v *= g[i];
		}
		sum += v;
		xs[i] = v * (1.0f / float(1u << uint(BITS * (i % PER_HALF))));
	}
	return sum;
}

// qmv_dot is Σ xs[i]·(code i at its place) over a lane's QMV_VALUES codes,
// packed in words; xs comes from qmv_load_x.
template <int BITS>
inline float qmv_dot(thread const uint *words, thread const float *xs) {
	constexpr int PER_HALF = 16 / BITS;
	constexpr uint MASK = (1u << BITS) - 1u;
	float d = 0.0f;
	for (int i = 0; i < QMV_VALUES; i++) {
		const int half_index = i / PER_HALF; // which 16-bit half of the codes
		const uint word = words[half_index / 2];
		const uint h = (half_index % 2 == 0) ? (word & 0xffffu) : (word >> 16);
		d = fma(xs[i], float(h & (MASK << uint(BITS * (i % PER_HALF)))), d);
	}
	return d;
}

template <int BITS, int GS, typename S, int MAXM>
kernel void quant_qmv(
		constant QuantArgs &args [[buffer(0)]],
		device const float *x [[buffer(1)]],
		device const uint *w [[buffer(2)]],
		device const S *scales [[buffer(3)]],
		device const S *biases [[buffer(4)]],
		device float *out [[buffer(5)]],
		device const float *gain [[buffer(6)]],
		device const float *lbias [[buffer(7)]],
		device const float *res [[buffer(8)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	constexpr int WORDS = QMV_VALUES * BITS / 32; // words of codes per lane and step
	constexpr int PER = 32 / BITS;
	static_assert(GS % QMV_VALUES == 0, "a lane's codes lie in one group");
	const bool norm = (args.fuse & LINEAR_NORM) != 0;
	const bool glu = linear_glu(args.fuse);
	const int outs = glu ? QMV_ROWS / 2 : QMV_ROWS; // outputs per simdgroup
	const int n0 = (int(tgpig.x) * QMV_SIMDGROUPS + int(sgitg)) * outs;
	const int m0 = int(tgpig.y) * MAXM;
	if (n0 >= args.N) {
		return; // the whole simdgroup leaves together
	}
	const int K = args.K;
	const int rowWords = K / PER;
	const int groups = K / GS;
	// Rows past the end repeat the last one (valid memory) and are not
	// stored: of w, so that every row is read; of x, so that the loops
	// below have compile-time bounds.
	device const uint *wr[QMV_ROWS];
	device const S *sr[QMV_ROWS];
	device const S *br[QMV_ROWS];
	for (int r = 0; r < QMV_ROWS; r++) {
		const ulong n = ulong(linear_row(glu, QMV_ROWS, r, n0, args.N));
		wr[r] = w + n * ulong(rowWords);
		sr[r] = scales + n * ulong(groups);
		br[r] = biases + n * ulong(groups);
	}
	device const float *xr[MAXM];
	for (int j = 0; j < MAXM; j++) {
		xr[j] = x + ulong(min(m0 + j, args.M - 1)) * ulong(K);
	}
	float acc[QMV_ROWS][MAXM];
	float ss[MAXM]; // Σx² of this lane's share of each row of x (the norm)
	for (int j = 0; j < MAXM; j++) {
		ss[j] = 0.0f;
		for (int r = 0; r < QMV_ROWS; r++) {
			acc[r][j] = 0.0f;
		}
	}
	// K is a multiple of GS, so of QMV_VALUES: a lane's codes all exist.
	for (int k = int(lane) * QMV_VALUES; k < K; k += 32 * QMV_VALUES) {
		uint packed[QMV_ROWS][WORDS];
		float s[QMV_ROWS];
		float b[QMV_ROWS];
		for (int r = 0; r < QMV_ROWS; r++) {
			for (int i = 0; i < WORDS; i++) {
				packed[r][i] = wr[r][k / PER + i];
			}
			s[r] = to_float(sr[r][k / GS]);
			b[r] = to_float(br[r][k / GS]);
		}
		for (int j = 0; j < MAXM; j++) {
			float xs[QMV_VALUES];
			const float xsum = qmv_load_x<BITS>(xr[j] + k, norm, gain + k, ss[j], xs);
			for (int r = 0; r < QMV_ROWS; r++) {
				const float d = qmv_dot<BITS>(packed[r], xs);
				acc[r][j] += fma(s[r], d, b[r] * xsum);
			}
		}
	}
	float scale[MAXM];
	for (int j = 0; j < MAXM; j++) {
		scale[j] = norm ? 1.0f / sqrt(simd_sum(ss[j]) / float(K) + args.eps) : 1.0f;
	}
	float sums[QMV_ROWS][MAXM];
	for (int r = 0; r < QMV_ROWS; r++) {
		for (int j = 0; j < MAXM; j++) {
			sums[r][j] = simd_sum(acc[r][j]);
		}
	}
	if (lane != 0) {
		return;
	}
	// Compile-time slot indices (r + half, not r + outs) keep sums in registers.
	constexpr int half_rows = QMV_ROWS / 2;
	for (int r = 0; r < QMV_ROWS; r++) {
		if (r >= outs) {
			break;
		}
		const int up_slot = r + half_rows < QMV_ROWS ? r + half_rows : r;
		for (int j = 0; j < MAXM; j++) {
			if (n0 + r < args.N && m0 + j < args.M) {
				const float up = glu ? sums[up_slot][j] : 0.0f;
				out[ulong(m0 + j) * ulong(args.N) + ulong(n0 + r)] =
						linear_out(args.fuse, scale[j], sums[r][j], up, lbias, res, m0 + j, n0 + r, args.N);
			}
		}
	}
}

// qmm_stage dequantizes rows [n0, n0+MATMUL_BN) × columns [k0,
// k0+MATMUL_BK) of the weight into ws [MATMUL_BN][MATMUL_BK] (zeros past
// N). K is a multiple of GS, and GS of MATMUL_BK, so the step lies in one
// group of each row and is never cut by K: one scale and bias per row, and
// whole words of codes. Every thread calls it.
template <int BITS, int GS, typename S>
inline void qmm_stage(device const uint *w, device const S *scales, device const S *biases, int N, int K, int n0, int k0,
		threadgroup float *ws, uint tiitg) {
	constexpr int PER = 32 / BITS;                  // codes per word
	constexpr int WPR = MATMUL_BK / PER;            // words per row of the step
	constexpr uint MASK = (1u << BITS) - 1u;
	static_assert(GS % MATMUL_BK == 0, "a step lies in one group");
	const int rowWords = K / PER;
	for (int i = int(tiitg); i < MATMUL_BN * WPR; i += MATMUL_THREADS) {
		const int r = i / WPR;
		const int c = (i % WPR) * PER;
		const int n = n0 + r;
		threadgroup float *dst = ws + r * MATMUL_BK + c;
		if (n >= N) {
			for (int e = 0; e < PER; e++) {
				dst[e] = 0.0f;
			}
			continue;
		}
		const uint word = w[ulong(n) * ulong(rowWords) + ulong((k0 + c) / PER)];
		const ulong g = ulong(n) * ulong(K / GS) + ulong(k0 / GS);
		const float s = to_float(scales[g]);
		const float b = to_float(biases[g]);
		for (int e = 0; e < PER; e++) {
			dst[e] = s * float((word >> uint(BITS * e)) & MASK) + b;
		}
	}
}

template <int BITS, int GS, typename S>
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
	// Rows of x are K floats with K a multiple of 32: 4-wide loads when the
	// buffer allows.
	const bool vec4 = args.vec4 != 0;

	simdgroup_float8x8 c[4][4];
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 4; j++) {
			c[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
		}
	}
	for (int k0 = 0; k0 < args.K; k0 += MATMUL_BK) {
		matmul_stage<float>(x, args.M, args.K, m0, k0, vec4, xs, tiitg);
		qmm_stage<BITS, GS, S>(w, scales, biases, args.N, args.K, n0, k0, ws, tiitg);
		threadgroup_barrier(mem_flags::mem_threadgroup);
		matmul_tile<float>(xs, ws, sm, sn, c);
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
	matmul_store(c, out, args.M, args.N, m0, n0, sm, sn, shmem, tiitg);
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

instantiate_kernel("quant_qmv4g32m1_f16", quant_qmv, 4, 32, half, 1)
instantiate_kernel("quant_qmv4g32m1_bf16", quant_qmv, 4, 32, bf16, 1)
instantiate_kernel("quant_qmv4g32m1_f32", quant_qmv, 4, 32, float, 1)
instantiate_kernel("quant_qmv4g32m4_f16", quant_qmv, 4, 32, half, 4)
instantiate_kernel("quant_qmv4g32m4_bf16", quant_qmv, 4, 32, bf16, 4)
instantiate_kernel("quant_qmv4g32m4_f32", quant_qmv, 4, 32, float, 4)
instantiate_kernel("quant_qmv4g32m8_f16", quant_qmv, 4, 32, half, QMV_MAX_M)
instantiate_kernel("quant_qmv4g32m8_bf16", quant_qmv, 4, 32, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv4g32m8_f32", quant_qmv, 4, 32, float, QMV_MAX_M)
instantiate_kernel("quant_qmv4g64m1_f16", quant_qmv, 4, 64, half, 1)
instantiate_kernel("quant_qmv4g64m1_bf16", quant_qmv, 4, 64, bf16, 1)
instantiate_kernel("quant_qmv4g64m1_f32", quant_qmv, 4, 64, float, 1)
instantiate_kernel("quant_qmv4g64m4_f16", quant_qmv, 4, 64, half, 4)
instantiate_kernel("quant_qmv4g64m4_bf16", quant_qmv, 4, 64, bf16, 4)
instantiate_kernel("quant_qmv4g64m4_f32", quant_qmv, 4, 64, float, 4)
instantiate_kernel("quant_qmv4g64m8_f16", quant_qmv, 4, 64, half, QMV_MAX_M)
instantiate_kernel("quant_qmv4g64m8_bf16", quant_qmv, 4, 64, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv4g64m8_f32", quant_qmv, 4, 64, float, QMV_MAX_M)
instantiate_kernel("quant_qmv4g128m1_f16", quant_qmv, 4, 128, half, 1)
instantiate_kernel("quant_qmv4g128m1_bf16", quant_qmv, 4, 128, bf16, 1)
instantiate_kernel("quant_qmv4g128m1_f32", quant_qmv, 4, 128, float, 1)
instantiate_kernel("quant_qmv4g128m4_f16", quant_qmv, 4, 128, half, 4)
instantiate_kernel("quant_qmv4g128m4_bf16", quant_qmv, 4, 128, bf16, 4)
instantiate_kernel("quant_qmv4g128m4_f32", quant_qmv, 4, 128, float, 4)
instantiate_kernel("quant_qmv4g128m8_f16", quant_qmv, 4, 128, half, QMV_MAX_M)
instantiate_kernel("quant_qmv4g128m8_bf16", quant_qmv, 4, 128, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv4g128m8_f32", quant_qmv, 4, 128, float, QMV_MAX_M)
instantiate_kernel("quant_qmv8g32m1_f16", quant_qmv, 8, 32, half, 1)
instantiate_kernel("quant_qmv8g32m1_bf16", quant_qmv, 8, 32, bf16, 1)
instantiate_kernel("quant_qmv8g32m1_f32", quant_qmv, 8, 32, float, 1)
instantiate_kernel("quant_qmv8g32m4_f16", quant_qmv, 8, 32, half, 4)
instantiate_kernel("quant_qmv8g32m4_bf16", quant_qmv, 8, 32, bf16, 4)
instantiate_kernel("quant_qmv8g32m4_f32", quant_qmv, 8, 32, float, 4)
instantiate_kernel("quant_qmv8g32m8_f16", quant_qmv, 8, 32, half, QMV_MAX_M)
instantiate_kernel("quant_qmv8g32m8_bf16", quant_qmv, 8, 32, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv8g32m8_f32", quant_qmv, 8, 32, float, QMV_MAX_M)
instantiate_kernel("quant_qmv8g64m1_f16", quant_qmv, 8, 64, half, 1)
instantiate_kernel("quant_qmv8g64m1_bf16", quant_qmv, 8, 64, bf16, 1)
instantiate_kernel("quant_qmv8g64m1_f32", quant_qmv, 8, 64, float, 1)
instantiate_kernel("quant_qmv8g64m4_f16", quant_qmv, 8, 64, half, 4)
instantiate_kernel("quant_qmv8g64m4_bf16", quant_qmv, 8, 64, bf16, 4)
instantiate_kernel("quant_qmv8g64m4_f32", quant_qmv, 8, 64, float, 4)
instantiate_kernel("quant_qmv8g64m8_f16", quant_qmv, 8, 64, half, QMV_MAX_M)
instantiate_kernel("quant_qmv8g64m8_bf16", quant_qmv, 8, 64, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv8g64m8_f32", quant_qmv, 8, 64, float, QMV_MAX_M)
instantiate_kernel("quant_qmv8g128m1_f16", quant_qmv, 8, 128, half, 1)
instantiate_kernel("quant_qmv8g128m1_bf16", quant_qmv, 8, 128, bf16, 1)
instantiate_kernel("quant_qmv8g128m1_f32", quant_qmv, 8, 128, float, 1)
instantiate_kernel("quant_qmv8g128m4_f16", quant_qmv, 8, 128, half, 4)
instantiate_kernel("quant_qmv8g128m4_bf16", quant_qmv, 8, 128, bf16, 4)
instantiate_kernel("quant_qmv8g128m4_f32", quant_qmv, 8, 128, float, 4)
instantiate_kernel("quant_qmv8g128m8_f16", quant_qmv, 8, 128, half, QMV_MAX_M)
instantiate_kernel("quant_qmv8g128m8_bf16", quant_qmv, 8, 128, bf16, QMV_MAX_M)
instantiate_kernel("quant_qmv8g128m8_f32", quant_qmv, 8, 128, float, QMV_MAX_M)
instantiate_kernel("quant_qmm4g32_f16", quant_qmm, 4, 32, half)
instantiate_kernel("quant_qmm4g32_bf16", quant_qmm, 4, 32, bf16)
instantiate_kernel("quant_qmm4g32_f32", quant_qmm, 4, 32, float)
instantiate_kernel("quant_qmm4g64_f16", quant_qmm, 4, 64, half)
instantiate_kernel("quant_qmm4g64_bf16", quant_qmm, 4, 64, bf16)
instantiate_kernel("quant_qmm4g64_f32", quant_qmm, 4, 64, float)
instantiate_kernel("quant_qmm4g128_f16", quant_qmm, 4, 128, half)
instantiate_kernel("quant_qmm4g128_bf16", quant_qmm, 4, 128, bf16)
instantiate_kernel("quant_qmm4g128_f32", quant_qmm, 4, 128, float)
instantiate_kernel("quant_qmm8g32_f16", quant_qmm, 8, 32, half)
instantiate_kernel("quant_qmm8g32_bf16", quant_qmm, 8, 32, bf16)
instantiate_kernel("quant_qmm8g32_f32", quant_qmm, 8, 32, float)
instantiate_kernel("quant_qmm8g64_f16", quant_qmm, 8, 64, half)
instantiate_kernel("quant_qmm8g64_bf16", quant_qmm, 8, 64, bf16)
instantiate_kernel("quant_qmm8g64_f32", quant_qmm, 8, 64, float)
instantiate_kernel("quant_qmm8g128_f16", quant_qmm, 8, 128, half)
instantiate_kernel("quant_qmm8g128_bf16", quant_qmm, 8, 128, bf16)
instantiate_kernel("quant_qmm8g128_f32", quant_qmm, 8, 128, float)
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
