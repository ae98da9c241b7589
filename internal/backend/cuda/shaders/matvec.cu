// matvec.cu: out = x·wᵀ for f32/f16/bf16 weights, x [m,k] f32, w [n,k],
// out [m,n] f32, shaped for decoding and verification (small m, read w at
// memory bandwidth), and the same products with a layer's neighbours folded
// in (graph.LinearOp, the linear* kernels): an RMS norm of x before, and a
// bias, SwiGLU or GeGLU over the joined [gate; up] weight and a residual after. The
// matvec kernels are the linear ones with nothing folded in, so they share
// one code path and its bit-exactness argument.
//
// Norm prologue: each block reads all of x's row anyway, so it adds up Σx²
// beside the dot, multiplies x by the norm's gain as it is loaded, and
// scales each row's sums by 1/sqrt(mean(x²)+eps) at the end: Σ(x·g)·w·scale
// rather than RMSNorm's Σ(x·scale·g)·w, the same up to rounding, and
// without a launch and a round trip of h through memory.
// Epilogue (the thread that writes an output): + bias, then
// SiLU(gate)·up or GELU(gate)·up (gate column j is w's row j, up column j
// its row n+j, the block computing both), then r + y: the order of the
// unfused ops.
#include "prelude.cuh"

// What a linear launch folds in (its flags argument).
#define LIN_NORM 1
#define LIN_BIAS 2
#define LIN_SWIGLU 4
#define LIN_RESIDUAL 8
#define LIN_GEGLU 16
#define LIN_GLU (LIN_SWIGLU | LIN_GEGLU) // either: w holds the gate rows, then the up rows

// LinArgs are a launch's arguments. gain, bias and res are read only when
// flags say so (the host passes x for those it lacks: every pointer
// argument is a live allocation). n is out's columns; w has 2n rows with
// LIN_GLU, else n.
template <class T> struct LinArgs {
	float *out;
	const float *x, *gain;
	const T *w;
	const float *bias, *res;
	int m, k, n;
	float eps;
	int flags;
};

DEVICE float lin_silu(float v) { return v * (1.0f / (1.0f + cu_exp(-v))); }
// lin_gelu is elementwise.cu's gelu (GeGLU's), the same expression.
DEVICE float lin_gelu(float x) {
	const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
	return 0.5f * x * (2.0f - 2.0f / (1.0f + cu_exp(2.0f * u)));
}

// lin_out is output (row, j) from its sums: y = x·w_j, u = x·w_{n+j} (with
// a GLU) and ss = Σx² over the row (with the norm).
template <class T> DEVICE ALWAYS_INLINE float lin_out(const LinArgs<T> &a, int row, int j, float y, float u, float ss) {
	const int f = a.flags;
	if (f & LIN_NORM) {
		const float scale = 1.0f / cu_sqrt(ss / float(a.k) + a.eps); // as rms_norm_f32 computes it
		y *= scale;
		u *= scale;
	}
	if (f & LIN_BIAS) {
		y += a.bias[j];
		if (f & LIN_GLU) u += a.bias[a.n + j];
	}
	if (f & LIN_SWIGLU) y = lin_silu(y) * u;
	else if (f & LIN_GEGLU) y = lin_gelu(y) * u;
	if (f & LIN_RESIDUAL) y = a.res[u64(row) * u64(a.n) + u64(j)] + y;
	return y;
}

// Each warp computes one column of out for every row: lane l adds x·w over
// k = l, l+32, ... and the warp's butterfly adds the lanes, so a row's
// result depends on k alone, never on m or the other rows (greedy ReDrafter
// stays bit-exact). Rows go 4 at a time so that one load of w serves 4
// rows; with a GLU the warp reads the gate and the up row. Grid:
// (ceil(n/4)); block: 128 threads (4 warps).
template <class T> DEVICE ALWAYS_INLINE void linear_warp(const LinArgs<T> &a) {
	const int lane = int(threadIdx.x) & 31;
	const int col = int(blockIdx.x) * 4 + (int(threadIdx.x) >> 5);
	const int m = a.m, k = a.k, n = a.n;
	if (col >= n) return;
	const bool norm = (a.flags & LIN_NORM) != 0, glu = (a.flags & LIN_GLU) != 0;
	const u64 wrow = u64(col) * u64(k), urow = u64(n + (glu ? col : 0)) * u64(k);
	for (int r0 = 0; r0 < m; r0 += 4) {
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, up[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		const int rows = m - r0 < 4 ? m - r0 : 4;
		for (int i = lane; i < k; i += 32) {
			const float wv = load_w(a.w, wrow + u64(i));
			const float uv = glu ? load_w(a.w, urow + u64(i)) : 0.0f;
			const float g = norm ? a.gain[i] : 1.0f;
#pragma unroll
			for (int r = 0; r < 4; r++) {
				if (r < rows) {
					float xv = a.x[u64(r0 + r) * u64(k) + u64(i)];
					if (norm) {
						ss[r] = cu_fma(xv, xv, ss[r]);
						xv *= g;
					}
					acc[r] = cu_fma(xv, wv, acc[r]);
					if (glu) up[r] = cu_fma(xv, uv, up[r]);
				}
			}
		}
#pragma unroll
		for (int r = 0; r < 4; r++) {
			const float s = warp_sum(acc[r]);
			const float u = glu ? warp_sum(up[r]) : 0.0f;
			const float q = norm ? warp_sum(ss[r]) : 0.0f;
			if (lane == 0 && r < rows) a.out[u64(r0 + r) * u64(n) + u64(col)] = lin_out(a, r0 + r, col, s, u, q);
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
// a time in the 4-row kernels, up to 8 (over MV8_COLS8 = 4 columns) in the
// 8-row ones: a pass per 4 or 8 rows, each pass reading w again, so a
// verification pass of 5 rows read w twice in the 4-row kernels and reads
// it once in the 8-row ones. The row count is a template argument so that
// the sums stay in registers. A (row, column)'s sum runs over the words of
// thread t in order, then the warp's butterfly, then the 4 warps in order:
// an order that depends on k alone, never on m, the other rows or the
// block's columns, so greedy ReDrafter stays bit-exact (the backend picks
// this family from k and w's address alone; m picks only the kernel of the
// family, each computing a row with the same code).
// Grid: (ceil(n/MV8_COLS)), the 8-row kernels (ceil(n/MV8_COLS8)); block:
// 128 threads.
#define MV8_COLS 8
#define MV8_COLS8 4 // the 8-row kernels' columns a block: 8 rows x 4 keeps the 4-row kernels' 32 sums a thread
#define MV8_MAXR 8
#define MV8_SUMS 32 // the sums of a block's warp: rows x columns
// matvec8_rows computes rows r0..r0+R of the block's columns: COLS weight
// rows, which are COLS columns of out, or with a GLU the gate and up rows
// of COLS/2 columns (the first half of the block's weight rows gate, the
// second up). With NORM, x is multiplied by the gain as it is loaded and
// each thread adds up x² beside the dot (Σx² reduced as the sums are: the
// thread's words, the butterfly, the warps in order). COLS changes which
// columns a block holds, not how a column is summed: thread t still reads
// words t, t+128, ... of each of its rows, so a (row, column)'s bits are
// the same at any COLS and R.
template <bool BF16, bool VEC, int R, bool NORM, int COLS>
DEVICE ALWAYS_INLINE void matvec8_rows(const LinArgs<unsigned> &a, int r0, int cb, float part[4][MV8_SUMS], float sqs[4][MV8_MAXR]) {
	static_assert(R * COLS <= MV8_SUMS && R <= MV8_MAXR, "the block's sums outgrow part");
	const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
	const int k = a.k, n = a.n;
	const bool glu = (a.flags & LIN_GLU) != 0;
	const int per = glu ? COLS / 2 : COLS; // columns of out per block
	const int col0 = cb * per;
	const u64 words = u64(k / 8);
	// Columns past n read column n-1 (so every load is unconditional);
	// their sums are never written.
	u64 wrow[COLS];
#pragma unroll
	for (int c = 0; c < COLS; c++) {
		const int j = col0 + (glu ? c % per : c), jc = j < n ? j : n - 1;
		wrow[c] = u64(glu && c >= per ? n + jc : jc) * words;
	}
	float acc[R][COLS], ss[R];
#pragma unroll
	for (int r = 0; r < R; r++) {
		ss[r] = 0.0f;
#pragma unroll
		for (int c = 0; c < COLS; c++) acc[r][c] = 0.0f;
	}
	for (u64 j = u64(t); j < words; j += 128u) {
		u32x4 v[COLS];
#pragma unroll
		for (int c = 0; c < COLS; c++) v[c] = ld_v4_u32(a.w + (wrow[c] + j) * 4u);
		float gs[8];
		if (NORM) x8<VEC>(gs, a.gain, j * 8u);
#pragma unroll
		for (int r = 0; r < R; r++) {
			float xs[8];
			x8<VEC>(xs, a.x, u64(r0 + r) * u64(k) + j * 8u);
			if (NORM) {
#pragma unroll
				for (int e = 0; e < 8; e++) {
					ss[r] = cu_fma(xs[e], xs[e], ss[r]);
					xs[e] *= gs[e];
				}
			}
#pragma unroll
			for (int e = 0; e < 8; e++) {
#pragma unroll
				for (int c = 0; c < COLS; c++) acc[r][c] = cu_fma(xs[e], w8_at<BF16>(v[c], e), acc[r][c]);
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
#pragma unroll
		for (int c = 0; c < COLS; c++) {
			const float s = warp_sum(acc[r][c]);
			if (lane == 0) part[warp][r * COLS + c] = s;
		}
		if (NORM) {
			const float q = warp_sum(ss[r]);
			if (lane == 0) sqs[warp][r] = q;
		}
	}
	sync_threads();
	if (t < R * per) {
		const int r = t / per, c = t % per, i = r * COLS + c;
		const float y = ((part[0][i] + part[1][i]) + part[2][i]) + part[3][i];
		float u = 0.0f, q = 0.0f;
		if (glu) u = ((part[0][i + per] + part[1][i + per]) + part[2][i + per]) + part[3][i + per];
		if (NORM) q = ((sqs[0][r] + sqs[1][r]) + sqs[2][r]) + sqs[3][r];
		if (col0 + c < n) a.out[u64(r0 + r) * u64(n) + u64(col0 + c)] = lin_out(a, r0 + r, col0 + c, y, u, q);
	}
	sync_threads(); // part is written again by the next rows
}
// matvec8 computes m rows: up to MAXR (1, 4 or 8) at a time where x is
// 16-byte aligned, else one. A kernel holds the registers of its largest
// path, so a kernel per MAXR: the one-row kernels (matvec8x1_*,
// linear8x1_*: decoding) hold one row's sums; the 4-row ones (matvec8_*,
// linear8_*) 4 rows of 8 columns; the 8-row ones (matvec8x8_*, linear8x8_*:
// verification) 8 rows of 4 columns (MV8_COLS8), the same 32 sums a
// thread, so that a pass of up to 8 rows reads each weight word once. All
// run matvec8_rows, whose sums do not depend on R or COLS, so a row has
// the same bits at any m.
//
// Column groups: a block computes the column groups (COLS weight rows each)
// blockIdx.x, blockIdx.x + gridDim.x, ... below ceil(n/per), one after the
// other for each pass of rows, so the host sets how many groups G a block
// takes by the grid alone: ceil(groups/G) blocks (matvec8Groups in
// matmul.go). Every block reads the same x, and thread t reads the same
// words of it (t, t+128, ...) for every column, so a block's later groups
// find their x in L1: at G groups a block, x's traffic from L2 drops
// G-fold (8 rows of x at k = 2048 are 64 KB, 4 times the 16 KB of weights
// a group of the 8-row kernels reads). Keeping a thread's own words of x
// in shared memory instead would need no barrier (a thread reads only what
// it wrote), but 8 rows of them are 64 KB a block at k = 2048 and 176 KB
// at 5632, past what 2 or 3 blocks an SM may hold; L1 holds them for all
// the SM's blocks at once, since all read the same x. The group changes
// which columns a pass computes, never how: a (row, column)'s bits are the
// same at any G.
template <int MAXR> constexpr int mv8_cols() { return MAXR == 8 ? MV8_COLS8 : MV8_COLS; }
template <bool BF16, bool VEC, int MAXR, bool NORM>
DEVICE ALWAYS_INLINE void matvec8(const LinArgs<unsigned> &a, float part[4][MV8_SUMS], float sqs[4][MV8_MAXR]) {
	constexpr int C = mv8_cols<MAXR>();
	const int m = a.m;
	const int per = (a.flags & LIN_GLU) != 0 ? C / 2 : C; // columns of out a group
	const int groups = (a.n + per - 1) / per;
	if constexpr (!VEC || MAXR == 1) { // a row at a time (unaligned x: slower, and a fraction of the code)
		for (int r0 = 0; r0 < m; r0++) {
			for (int cb = int(blockIdx.x); cb < groups; cb += int(gridDim.x)) matvec8_rows<BF16, VEC, 1, NORM, C>(a, r0, cb, part, sqs);
		}
	} else if constexpr (MAXR == 4) {
		for (int r0 = 0; r0 < m; r0 += 4) {
			for (int cb = int(blockIdx.x); cb < groups; cb += int(gridDim.x)) {
				switch (m - r0) {
				case 1: matvec8_rows<BF16, VEC, 1, NORM, C>(a, r0, cb, part, sqs); break;
				case 2: matvec8_rows<BF16, VEC, 2, NORM, C>(a, r0, cb, part, sqs); break;
				case 3: matvec8_rows<BF16, VEC, 3, NORM, C>(a, r0, cb, part, sqs); break;
				default: matvec8_rows<BF16, VEC, 4, NORM, C>(a, r0, cb, part, sqs); break;
				}
			}
		}
	} else {
		for (int r0 = 0; r0 < m; r0 += 8) {
			for (int cb = int(blockIdx.x); cb < groups; cb += int(gridDim.x)) {
				switch (m - r0) {
				case 1: matvec8_rows<BF16, VEC, 1, NORM, C>(a, r0, cb, part, sqs); break;
				case 2: matvec8_rows<BF16, VEC, 2, NORM, C>(a, r0, cb, part, sqs); break;
				case 3: matvec8_rows<BF16, VEC, 3, NORM, C>(a, r0, cb, part, sqs); break;
				case 4: matvec8_rows<BF16, VEC, 4, NORM, C>(a, r0, cb, part, sqs); break;
				case 5: matvec8_rows<BF16, VEC, 5, NORM, C>(a, r0, cb, part, sqs); break;
				case 6: matvec8_rows<BF16, VEC, 6, NORM, C>(a, r0, cb, part, sqs); break;
				case 7: matvec8_rows<BF16, VEC, 7, NORM, C>(a, r0, cb, part, sqs); break;
				default: matvec8_rows<BF16, VEC, 8, NORM, C>(a, r0, cb, part, sqs); break;
				}
			}
		}
	}
}
// linear8 runs matvec8 over a's x, reading x (and the gain) 16 bytes at a
// time where both are 16-byte aligned. The flags' norm bit is NORM's.
template <bool BF16, bool NORM, int MAXR, class T> DEVICE ALWAYS_INLINE void linear8(const LinArgs<T> &in) {
	SHARED float part[4][MV8_SUMS]; // [warp][row * columns + column] sums of each warp
	SHARED float sqs[4][MV8_MAXR];  // [warp][row] Σx² of each warp (NORM)
	const LinArgs<unsigned> a = {in.out, in.x, in.gain, reinterpret_cast<const unsigned *>(in.w), in.bias, in.res,
	                             in.m, in.k, in.n, in.eps, NORM ? in.flags | LIN_NORM : in.flags & ~LIN_NORM};
	const bool aligned = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (!NORM || (reinterpret_cast<u64>(a.gain) & 15u) == 0);
	if (aligned) {
		matvec8<BF16, true, MAXR, NORM>(a, part, sqs);
	} else {
		matvec8<BF16, false, MAXR, NORM>(a, part, sqs);
	}
}

// Blocks an SM: a kernel is held (launch_bounds: 128 threads, blocks an
// SM) to the registers that let that many blocks share an SM without
// spilling (shaders_test.go's TestPtxas fails on a spill). The weights are
// read once, so the loads other blocks have in flight are what keeps the
// memory busy. ptxas, sm_90 (sm_80): the one-row kernels (matvec8x1_*,
// linear8x1_*) 96 registers, 5 blocks (they would take 100 and 113
// unbounded: 4); matvec8_* and linear8_* 168, 3 blocks (the bound only
// pins that); linear8_norm_* 176 (214), 2 blocks, unbounded because it
// spills when held to 168. The 8-row kernels: matvec8x8_* and linear8x8_*
// 168, 3 blocks (160 (156, 144) unbounded: 3 as well); linear8x8_norm_*
// 142 (182): 3 blocks on sm_90 (2 on sm_80), unbounded because held to 168
// it spills (8 bytes on sm_90, 24 on sm_80); it took 184 and 2 blocks
// before the column-group loop. 8 rows of 8 columns (64 sums a thread)
// spilled at every bound.
#if CU_DEVICE_BUILD
#define MV8_BOUNDS(blocks) __attribute__((launch_bounds(128, blocks)))
#else
#define MV8_BOUNDS(blocks)
#endif

// The plain products: nothing folded in.
template <class T> DEVICE LinArgs<T> mv_args(float *out, const float *x, const T *w, int m, int k, int n) {
	return LinArgs<T>{out, x, x, w, x, x, m, k, n, 0.0f, 0};
}
KERNEL void matvec_f32(float *out, const float *x, const float *w, int m, int k, int n) { linear_warp(mv_args(out, x, w, m, k, n)); }
KERNEL void matvec_f16(float *out, const float *x, const f16_t *w, int m, int k, int n) { linear_warp(mv_args(out, x, w, m, k, n)); }
KERNEL void matvec_bf16(float *out, const float *x, const bf16_t *w, int m, int k, int n) { linear_warp(mv_args(out, x, w, m, k, n)); }
#define MATVEC8(T, NAME, BF16) \
	KERNEL MV8_BOUNDS(3) void matvec8_##NAME(float *out, const float *x, const T *w, int m, int k, int n) { linear8<BF16, false, 4>(mv_args(out, x, w, m, k, n)); } \
	KERNEL MV8_BOUNDS(5) void matvec8x1_##NAME(float *out, const float *x, const T *w, int m, int k, int n) { \
		linear8<BF16, false, 1>(mv_args(out, x, w, m, k, n)); \
	} \
	KERNEL MV8_BOUNDS(3) void matvec8x8_##NAME(float *out, const float *x, const T *w, int m, int k, int n) { \
		linear8<BF16, false, 8>(mv_args(out, x, w, m, k, n)); \
	}
MATVEC8(f16_t, f16, false)
MATVEC8(bf16_t, bf16, true)

// The fused products (graph.LinearOp). linear_*: a warp per column, any
// weight (f32, or rows not whole 16-byte words); the norm is a flag, as
// this is not the decoding kernel. linear8_*: matvec8's, the norm a
// template argument (linear8_norm_*) so that the plain loop stays as lean
// as matvec8's; linear8x1_* the one-row kernels, linear8x8_* the 8-row
// ones. Grid: linear (ceil(n/4)); linear8 and linear8x1 (ceil(n/8)), or
// (ceil(n/4)) with a GLU; linear8x8 (ceil(n/4)), or (ceil(n/2)) with
// a GLU.
#define LIN_PARAMS(T) float *out, const float *x, const float *gain, const T *w, const float *bias, const float *res, int m, int k, int n, float eps, int flags
#define LIN_ARGS(T) LinArgs<T>{out, x, gain, w, bias, res, m, k, n, eps, flags}
KERNEL void linear_f32(LIN_PARAMS(float)) { linear_warp(LIN_ARGS(float)); }
KERNEL void linear_f16(LIN_PARAMS(f16_t)) { linear_warp(LIN_ARGS(f16_t)); }
KERNEL void linear_bf16(LIN_PARAMS(bf16_t)) { linear_warp(LIN_ARGS(bf16_t)); }
#define LINEAR8(T, NAME, BF16) \
	KERNEL MV8_BOUNDS(3) void linear8_##NAME(LIN_PARAMS(T)) { linear8<BF16, false, 4>(LIN_ARGS(T)); } \
	KERNEL void linear8_norm_##NAME(LIN_PARAMS(T)) { linear8<BF16, true, 4>(LIN_ARGS(T)); } \
	KERNEL MV8_BOUNDS(5) void linear8x1_##NAME(LIN_PARAMS(T)) { linear8<BF16, false, 1>(LIN_ARGS(T)); } \
	KERNEL MV8_BOUNDS(5) void linear8x1_norm_##NAME(LIN_PARAMS(T)) { linear8<BF16, true, 1>(LIN_ARGS(T)); } \
	KERNEL MV8_BOUNDS(3) void linear8x8_##NAME(LIN_PARAMS(T)) { linear8<BF16, false, 8>(LIN_ARGS(T)); } \
	KERNEL void linear8x8_norm_##NAME(LIN_PARAMS(T)) { linear8<BF16, true, 8>(LIN_ARGS(T)); }
LINEAR8(f16_t, f16, false)
LINEAR8(bf16_t, bf16, true)
