// attention.cu: attention of n new queries over a KV cache [kvh, c, d]
// (f32 or f16) that already holds the new tokens' rows at kvlen..kvlen+n-1.
// Query i sees every cache row before kvlen, and new row j iff
// j <= i <= end[j] (the new tokens are a tree in DFS pre-order: a chain is
// causal prefill, one token is decode, packed beams are verification).
// Query head hh reads KV head hh / (h/kvh).
//
// The design is Metal's (attention.metal). The keys a query sees, in order
// (the cache rows, then its ancestors among the new tokens), are numbered by
// visible index and cut into chunks of ATT_CHUNK. A chunk's partial result
// (maximum m, sum l, unnormalized weighted values o) is computed by one
// block of 4 warps, in one of two ways fixed by d (and the caches'
// alignment, fixed for a plan):
//   att_chunk8 (d a multiple of 8, the caches 16-byte aligned: every model
//     we run): the warps take tiles of ATT_TILE consecutive keys
//     round-robin. Lane i scores key i of the tile alone, reading its K row
//     in 16-byte words against the query in shared memory (no shuffle per
//     key); the tile's softmax is one warp_max and one warp_sum; then the
//     lanes split the V rows into 16-byte words (d/8 lanes a row, 32/(d/8)
//     rows at a time) and the row groups are added in order at the end of
//     the chunk. A tile's K and V words are all requested before the first
//     is used: one memory latency per tile of 32 keys.
//   att_chunk1 (any d <= 256): the warps take blocks of ATT_BLOCK keys
//     round-robin, lane l holds dims 4l..4l+3 (+128) read one element at a
//     time, a key's score is a warp_sum, and the online softmax takes one
//     exp per key plus one per block.
// Either way the warps' partials are then merged in warp order. The chunks' partials are
// then merged in chunk order, online (att_merge):
//   attention_tree_*   one block per (head, query) walks the chunks itself:
//                      prefill, and any shape with enough (head, query)
//                      pairs to fill the GPU. Grid (h, n).
//   attention_split_*  one block per (head, query, chunk). A block past the
//                      query's keys leaves at once; when the query's keys
//                      fit one chunk, its block stores the result itself;
//                      otherwise each of the np non-empty chunks' blocks
//                      writes its partial to a scratch [n][h][p][d+2], and
//                      the last of them to finish, found with an atomic
//                      count, merges the np partials in chunk order. Decode and small trees
//                      over long caches, where (head, query) alone gives too
//                      few blocks to read the cache at the GPU's bandwidth.
//                      Grid (h, n, p). The merge is in the same launch (not
//                      a second kernel as on Metal) so that a decode step
//                      pays one launch per layer for attention at every
//                      context length.
// With a sliding window (window > 0) a query sees only the last window of
// its visible keys (a visible key's index is its position; see
// graph.AttentionOp): the first chunk it reads starts at the window's
// first key, and chunks wholly before the window are skipped (split: their
// blocks leave, and the merge starts at the window's chunk).
// The chunks, the blocks and every sum's order depend on the visible index
// alone, and both kernels run the same code on the same partials (the
// split's go through memory as floats, exactly), so a row's result does not
// depend on the kernel, on n, or on which block finishes last: a tree
// token gets the bits it gets decoded alone after its ancestors, which
// greedy ReDrafter needs to reproduce greedy decoding exactly.
// Block: 128 threads. d <= 256.
#include "prelude.cuh"

#define ATT_WARPS 4
#define ATT_THREADS (32 * ATT_WARPS)
#define ATT_MAXD 256
#define ATT_CHUNK 256
#define ATT_BLOCK 8
#define ATT_GROUPS (ATT_MAXD / 128)       // groups of 4 dims per lane
#define ATT_DPT (ATT_MAXD / ATT_THREADS) // output dims per thread
#define ATT_NEG (-3.402823466e38f)      // -FLT_MAX: -inf would give inf - inf
#define ATT_TILE 32                     // att_chunk8: keys a warp scores at once, one a lane
#define ATT_WORDS 8                     // att_chunk8: 16-byte words a lane has in flight per batch
#define ATT_MERGE 8                     // split merge: partials read at once

// att_shared is a block's shared memory: the pre-scaled query (zero past
// d), the warps' partials, the cache rows of a chunk's new keys, and a
// prefix-count scratch.
struct att_shared {
	float q[ATT_MAXD];
	float m[ATT_WARPS], l[ATT_WARPS];
	float o[ATT_WARPS][ATT_MAXD];
	int rows[ATT_CHUNK];
	int scan[ATT_WARPS];
	int last;
	float softcap; // the scores' soft-cap (0: none), set with the query
};

// att_softcap is Gemma 2's soft-cap of a score, cap·tanh(s/cap), with
// tanh(u) as 1 - 2/(1 + e^(2u)) (±1 where e^(2u) over- or underflows); s
// itself when cap is 0.
DEVICE float att_softcap(float s, float cap) {
	return cap > 0.0f ? cap - 2.0f * cap / (1.0f + cu_exp(2.0f * s / cap)) : s;
}

DEVICE int att_min(int a, int b) { return a < b ? a : b; }
DEVICE int att_max(int a, int b) { return a > b ? a : b; }

// att_warp_isum adds an int over a warp (exact, so any order does).
DEVICE int att_warp_isum(int v) {
	for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
	return v;
}

// att_warp_exclusive returns the sum of v over the lanes below this one.
DEVICE int att_warp_exclusive(int v, int lane) {
	int x = v;
	for (int off = 1; off < 32; off <<= 1) {
		const int t = shfl_idx(x, lane >= off ? lane - off : 0);
		if (lane >= off) x += t;
	}
	return x - v;
}

// att_visible returns the number of keys query qi sees: kvlen plus its
// ancestors among the new tokens (itself included). Every thread calls it.
ALWAYS_INLINE DEVICE int att_visible(const int *end, int qi, int kvlen, att_shared &sh, int tid, int warp, int lane) {
	int count = 0;
	for (int j = tid; j <= qi; j += ATT_THREADS) count += end[j] >= qi ? 1 : 0;
	count = att_warp_isum(count);
	if (lane == 0) sh.scan[warp] = count;
	sync_threads();
	int total = 0;
	for (int w = 0; w < ATT_WARPS; w++) total += sh.scan[w];
	sync_threads();
	return kvlen + total;
}

// att_rows writes sh.rows[x - c0] = the cache row of visible key x for the
// new keys x in [max(c0, kvlen), c1): the ancestors of qi in order, ranked
// by a block-wide prefix count. Every thread calls it.
ALWAYS_INLINE DEVICE void att_rows(const int *end, int qi, int kvlen, int c0, int c1, att_shared &sh, int tid, int warp, int lane) {
	if (c1 <= kvlen) return; // all cache rows: the row is the visible index
	const int lo = att_max(c0, kvlen) - kvlen, hi = c1 - kvlen; // ancestor ranks wanted
	int seen = 0;
	for (int j0 = 0; j0 <= qi && seen < hi; j0 += ATT_THREADS) {
		const int j = j0 + tid;
		const int f = (j <= qi && end[j] >= qi) ? 1 : 0;
		const int before = att_warp_exclusive(f, lane);
		const int tot = att_warp_isum(f);
		if (lane == 0) sh.scan[warp] = tot;
		sync_threads();
		int rank = seen + before, all = 0;
		for (int w = 0; w < ATT_WARPS; w++) {
			rank += w < warp ? sh.scan[w] : 0;
			all += sh.scan[w];
		}
		if (f != 0 && rank >= lo && rank < hi) sh.rows[kvlen + rank - c0] = kvlen + j;
		seen += all;
		sync_threads();
	}
}

// att_warps merges the warps' partials in sh (each warp's m, l and o over
// d dims), in warp order: on return every thread has the chunk's maximum m
// and sum l, and o[i] for its dims tid + ATT_THREADS·i (unnormalized).
ALWAYS_INLINE DEVICE void att_warps(att_shared &sh, int d, int tid, float &m, float &l, float (&o)[ATT_DPT]) {
	sync_threads();
	m = ATT_NEG;
	for (int w = 0; w < ATT_WARPS; w++) m = cu_fmax(m, sh.m[w]);
	float wgt[ATT_WARPS];
	l = 0.0f;
	for (int w = 0; w < ATT_WARPS; w++) {
		// A warp that saw no key has sum 0: its weight is 0.
		wgt[w] = sh.l[w] > 0.0f ? cu_exp(sh.m[w] - m) : 0.0f;
		l = cu_fma(sh.l[w], wgt[w], l);
	}
	for (int i = 0; i < ATT_DPT; i++) {
		const int c = tid + ATT_THREADS * i;
		float a = 0.0f;
		if (c < d) {
			for (int w = 0; w < ATT_WARPS; w++) a = cu_fma(sh.o[w][c], wgt[w], a);
		}
		o[i] = a;
	}
	sync_threads(); // sh is reused by the next chunk
}

// att_chunk1 computes the partial of visible keys [c0, c1) (c0 < c1) for
// any d, one element at a time (as att_warps returns it). Every thread
// calls it.
template <class T>
ALWAYS_INLINE DEVICE void att_chunk1(const T *k, const T *v, int kh, int d, int cap, int kvlen, int c0, int c1, att_shared &sh, int tid, int warp, int lane,
                                     float &m, float &l, float (&o)[ATT_DPT]) {
	float mx = ATT_NEG, sum = 0.0f;
	float acc[ATT_GROUPS][4];
	for (int t = 0; t < ATT_GROUPS; t++)
		for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;
	const int blocks = (c1 - c0 + ATT_BLOCK - 1) / ATT_BLOCK;
	for (int b = warp; b < blocks; b += ATT_WARPS) {
		const int x0 = c0 + b * ATT_BLOCK;
		u64 off[ATT_BLOCK];
		float sc[ATT_BLOCK];
		#pragma unroll
		for (int i = 0; i < ATT_BLOCK; i++) {
			const int x = x0 + i;
			const int r = x < c1 ? (x < kvlen ? x : sh.rows[x - c0]) : 0;
			off[i] = (u64(kh) * u64(cap) + u64(r)) * u64(d);
			float dot = 0.0f;
			if (x < c1) {
				for (int t = 0; t < ATT_GROUPS; t++) {
					const int c = 4 * lane + 128 * t;
					for (int e = 0; e < 4; e++) {
						if (c + e < d) dot = cu_fma(sh.q[c + e], load_w(k, off[i] + u64(c + e)), dot);
					}
				}
			}
			dot = warp_sum(dot);
			sc[i] = x < c1 ? att_softcap(dot, sh.softcap) : ATT_NEG;
		}
		float bm = sc[0];
		for (int i = 1; i < ATT_BLOCK; i++) bm = cu_fmax(bm, sc[i]);
		const float mnew = cu_fmax(mx, bm);
		const float corr = cu_exp(mx - mnew);
		float p[ATT_BLOCK], ps = 0.0f;
		#pragma unroll
		for (int i = 0; i < ATT_BLOCK; i++) {
			p[i] = x0 + i < c1 ? cu_exp(sc[i] - mnew) : 0.0f;
			ps += p[i];
		}
		sum = cu_fma(sum, corr, ps);
		float pv[ATT_GROUPS][4];
		for (int t = 0; t < ATT_GROUPS; t++)
			for (int e = 0; e < 4; e++) pv[t][e] = 0.0f;
		#pragma unroll
		for (int i = 0; i < ATT_BLOCK; i++) {
			if (x0 + i >= c1) continue;
			for (int t = 0; t < ATT_GROUPS; t++) {
				const int c = 4 * lane + 128 * t;
				for (int e = 0; e < 4; e++) {
					if (c + e < d) pv[t][e] = cu_fma(p[i], load_w(v, off[i] + u64(c + e)), pv[t][e]);
				}
			}
		}
		for (int t = 0; t < ATT_GROUPS; t++)
			for (int e = 0; e < 4; e++) acc[t][e] = cu_fma(acc[t][e], corr, pv[t][e]);
		mx = mnew;
	}
	// Merge the warps, in warp order.
	if (lane == 0) {
		sh.m[warp] = mx;
		sh.l[warp] = sum;
	}
	for (int t = 0; t < ATT_GROUPS; t++) {
		for (int e = 0; e < 4; e++) {
			const int c = 4 * lane + 128 * t + e;
			if (c < d) sh.o[warp][c] = acc[t][e];
		}
	}
	att_warps(sh, d, tid, m, l, o);
}

// att_word holds one 16-byte load's raw bits: 8 f16 or 4 f32 (two words
// for 8 f32). Raw, so that the conversion, which waits for the load, sits
// where the value is used and not where the load is issued.
template <class T> struct att_word;
template <> struct att_word<f16_t> {
	u32x4 a;
};
template <> struct att_word<float> {
	f32x4 a, b;
};
DEVICE void att_zero(att_word<f16_t> &w) {
	for (int i = 0; i < 4; i++) w.a.v[i] = 0u;
}
DEVICE void att_zero(att_word<float> &w) {
	for (int i = 0; i < 4; i++) w.a.v[i] = w.b.v[i] = 0.0f;
}
DEVICE void att_ld(const f16_t *p, att_word<f16_t> &w) { w.a = ld_v4_u32(p); }
DEVICE void att_ld(const float *p, att_word<float> &w) {
	w.a = ld_v4_f32(p);
	w.b = ld_v4_f32(p + 4);
}
// att_el is element e (0..7, a constant once unrolled) of a word.
DEVICE float att_el(const att_word<f16_t> &w, int e) {
	const unsigned u = w.a.v[e >> 1];
	return bits_f16((unsigned short)((e & 1) != 0 ? u >> 16 : u & 0xffffu));
}
DEVICE float att_el(const att_word<float> &w, int e) { return e < 4 ? w.a.v[e] : w.b.v[e - 4]; }

// att_vload requests this lane's V words of steps s0..s0+ATT_WORDS-1 of
// the tile at t0: at step s the lane adds key vr + rg·s of the tile, dims
// 8·vw..8·vw+7 (zero words and weights where it adds nothing).
template <class T>
ALWAYS_INLINE DEVICE void att_vload(const T *vb, int d, int kvlen, int c0, int c1, int t0, int s0, int steps, int rg, int vr, int vw, const att_shared &sh,
                                    att_word<T> (&w)[ATT_WORDS], bool (&ok)[ATT_WORDS]) {
	#pragma unroll
	for (int i = 0; i < ATT_WORDS; i++) {
		const int kk = vr + rg * (s0 + i), x = t0 + kk;
		ok[i] = vr < rg && s0 + i < steps && kk < ATT_TILE && x < c1;
		att_zero(w[i]);
		if (ok[i]) {
			const int r = x < kvlen ? x : sh.rows[x - c0];
			att_ld(vb + u64(r) * u64(d) + u64(8 * vw), w[i]);
		}
	}
}

// att_chunk8 computes the partial of visible keys [c0, c1) (c0 < c1) for d
// a multiple of 8 and 16-byte aligned caches (as att_warps returns it).
// Every thread calls it.
//
// A warp's tile of 32 keys: lane i scores key t0+i over its whole K row
// (8 dot accumulators, one per element of a word, added in a fixed tree),
// so a score needs no shuffle; the tile's maximum and sum are one
// warp_max and one warp_sum. For V a row is g = d/8 words: lane vr·g+vw
// (vr < rg = 32/g) adds keys vr, vr+rg, ... of the tile, words vw, with the
// key's weight fetched from its lane. The rg row groups' sums are added in
// group order once the chunk is done. Every order depends on d and the
// visible index alone.
template <class T>
ALWAYS_INLINE DEVICE void att_chunk8(const T *k, const T *v, int kh, int d, int cap, int kvlen, int c0, int c1, att_shared &sh, int tid, int warp, int lane,
                                     float &m, float &l, float (&o)[ATT_DPT]) {
	const int g = d >> 3, rg = ATT_TILE / g;
	const int vr = lane / g, vw = lane - vr * g;
	const int steps = (ATT_TILE + rg - 1) / rg;
	const T *kb = k + u64(kh) * u64(cap) * u64(d);
	const T *vb = v + u64(kh) * u64(cap) * u64(d);
	float mx = ATT_NEG, sum = 0.0f, acc[8];
	for (int e = 0; e < 8; e++) acc[e] = 0.0f;
	for (int t0 = c0 + ATT_TILE * warp; t0 < c1; t0 += ATT_TILE * ATT_WARPS) {
		// The first V words go out with the K words: they depend on the
		// key's row only, not on its weight.
		att_word<T> vwd[ATT_WORDS];
		bool vok[ATT_WORDS];
		att_vload(vb, d, kvlen, c0, c1, t0, 0, steps, rg, vr, vw, sh, vwd, vok);
		const int x = t0 + lane;
		const bool in = x < c1;
		const T *kr = kb + u64(in ? (x < kvlen ? x : sh.rows[x - c0]) : 0) * u64(d);
		float dp[8];
		for (int e = 0; e < 8; e++) dp[e] = 0.0f;
		for (int c = 0; c < d; c += 8 * ATT_WORDS) {
			att_word<T> kw[ATT_WORDS];
			#pragma unroll
			for (int i = 0; i < ATT_WORDS; i++) {
				att_zero(kw[i]);
				if (in && c + 8 * i < d) att_ld(kr + c + 8 * i, kw[i]);
			}
			#pragma unroll
			for (int i = 0; i < ATT_WORDS; i++) {
				if (c + 8 * i < d) {
					#pragma unroll
					for (int e = 0; e < 8; e++) dp[e] = cu_fma(sh.q[c + 8 * i + e], att_el(kw[i], e), dp[e]);
				}
			}
		}
		const float dot = ((dp[0] + dp[1]) + (dp[2] + dp[3])) + ((dp[4] + dp[5]) + (dp[6] + dp[7]));
		const float sc = in ? att_softcap(dot, sh.softcap) : ATT_NEG;
		const float mnew = cu_fmax(mx, warp_max(sc));
		const float corr = cu_exp(mx - mnew);
		const float p = in ? cu_exp(sc - mnew) : 0.0f;
		sum = cu_fma(sum, corr, warp_sum(p));
		float pv[8];
		for (int e = 0; e < 8; e++) pv[e] = 0.0f;
		for (int s0 = 0; s0 < steps; s0 += ATT_WORDS) {
			if (s0 > 0) att_vload(vb, d, kvlen, c0, c1, t0, s0, steps, rg, vr, vw, sh, vwd, vok);
			#pragma unroll
			for (int i = 0; i < ATT_WORDS; i++) {
				const int kk = vr + rg * (s0 + i);
				// Every lane shuffles (the weight of a lane that adds
				// nothing is dropped), so the warp stays converged.
				const float pk = shfl_idx(p, kk < ATT_TILE ? kk : 0);
				const float wk = vok[i] ? pk : 0.0f;
				#pragma unroll
				for (int e = 0; e < 8; e++) pv[e] = cu_fma(wk, att_el(vwd[i], e), pv[e]);
			}
		}
		for (int e = 0; e < 8; e++) acc[e] = cu_fma(acc[e], corr, pv[e]);
		mx = mnew;
	}
	// The row groups' sums, in group order, into the warp's o.
	#pragma unroll
	for (int e = 0; e < 8; e++) {
		float a = acc[e];
		for (int j = 1; j < rg; j++) a += shfl_idx(acc[e], j * g + vw);
		if (vr == 0) sh.o[warp][8 * vw + e] = a;
	}
	if (lane == 0) {
		sh.m[warp] = mx;
		sh.l[warp] = sum;
	}
	att_warps(sh, d, tid, m, l, o);
}

// att_chunk computes the partial of visible keys [c0, c1) with the path
// fast8 picks (att_fast8: the same for every block of a launch).
template <class T>
ALWAYS_INLINE DEVICE void att_chunk(bool fast8, const T *k, const T *v, int kh, int d, int cap, int kvlen, int c0, int c1, att_shared &sh, int tid, int warp,
                                    int lane, float &m, float &l, float (&o)[ATT_DPT]) {
	if (fast8)
		att_chunk8<T>(k, v, kh, d, cap, kvlen, c0, c1, sh, tid, warp, lane, m, l, o);
	else
		att_chunk1<T>(k, v, kh, d, cap, kvlen, c0, c1, sh, tid, warp, lane, m, l, o);
}

// att_fast8 says whether att_chunk8 may read the caches: d a multiple of 8
// and both caches 16-byte aligned make every row's words 16-byte aligned.
// A plan's caches and d never change, so neither does the path (nor the
// bits) between a decode pass and a verification pass.
template <class T> DEVICE bool att_fast8(const T *k, const T *v, int d) { return d % 8 == 0 && ((u64(k) | u64(v)) & 15u) == 0; }

// att_merge folds a chunk's partial (mp, lp, op) into the running result
// (m, l, o), in chunk order. Both kernels use it, on the same values.
DEVICE void att_merge(float &m, float &l, float (&o)[ATT_DPT], float mp, float lp, const float (&op)[ATT_DPT]) {
	const float mn = cu_fmax(m, mp);
	const float a = cu_exp(m - mn), b = cu_exp(mp - mn);
	l = cu_fma(l, a, lp * b);
	for (int i = 0; i < ATT_DPT; i++) o[i] = cu_fma(o[i], a, op[i] * b);
	m = mn;
}

// att_query puts the query, pre-scaled, in sh.q (zero past d), and the
// soft-cap in sh.softcap; the barriers of att_visible, which every caller
// runs next, publish them.
DEVICE void att_query(const float *q, int qi, int hh, int h, int d, float scale, float softcap, int tid, att_shared &sh) {
	const float *qr = q + (u64(qi) * u64(h) + u64(hh)) * u64(d);
	for (int c = tid; c < ATT_MAXD; c += ATT_THREADS) sh.q[c] = c < d ? qr[c] * scale : 0.0f;
	if (tid == 0) sh.softcap = softcap;
}

// att_store writes the normalized result of (head hh, query qi).
DEVICE void att_store(float *out, int qi, int hh, int h, int d, int tid, float l, const float (&o)[ATT_DPT]) {
	float *orow = out + (u64(qi) * u64(h) + u64(hh)) * u64(d);
	for (int i = 0; i < ATT_DPT; i++) {
		const int c = tid + ATT_THREADS * i;
		if (c < d) orow[c] = l > 0.0f ? o[i] / l : 0.0f;
	}
}

template <class T>
DEVICE void attention_tree(float *out, const float *q, const T *k, const T *v, const int *kvlen_p, const int *end, int n, int h, int kvh, int d, int cap,
                           float scale, int window, float softcap) {
	SHARED att_shared sh;
	const int hh = int(blockIdx.x), qi = int(blockIdx.y);
	const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
	const int kvlen = kvlen_p[0];
	const int kh = hh / (h / kvh);
	const bool fast8 = att_fast8(k, v, d);
	att_query(q, qi, hh, h, d, scale, softcap, tid, sh);
	const int vis = att_visible(end, qi, kvlen, sh, tid, warp, lane);
	float m = ATT_NEG, l = 0.0f, o[ATT_DPT];
	for (int i = 0; i < ATT_DPT; i++) o[i] = 0.0f;
	const int lo = window > 0 ? att_max(0, vis - window) : 0; // the window's first visible key
	for (int z0 = lo / ATT_CHUNK * ATT_CHUNK; z0 < vis; z0 += ATT_CHUNK) {
		const int c0 = att_max(z0, lo), c1 = att_min(z0 + ATT_CHUNK, vis);
		att_rows(end, qi, kvlen, c0, c1, sh, tid, warp, lane);
		float mp, lp, op[ATT_DPT];
		att_chunk<T>(fast8, k, v, kh, d, cap, kvlen, c0, c1, sh, tid, warp, lane, mp, lp, op);
		att_merge(m, l, o, mp, lp, op);
	}
	att_store(out, qi, hh, h, d, tid, l, o);
}

// count [n][h] (zero before the first launch; the last block leaves it
// zero again for the next run), part [n][h][p][d+2].
template <class T>
DEVICE void attention_split(float *out, const float *q, const T *k, const T *v, const int *kvlen_p, const int *end, int *count, float *part, int n, int h,
                            int kvh, int d, int cap, int p, float scale, int window, float softcap) {
	SHARED att_shared sh;
	const int hh = int(blockIdx.x), qi = int(blockIdx.y), z = int(blockIdx.z);
	const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
	const int kvlen = kvlen_p[0];
	const int z0 = z * ATT_CHUNK;
	// Query qi sees at most kvlen + qi + 1 keys (the cache and its ancestors
	// among the new tokens, itself included): a chunk past them is empty
	// whatever the tree, and its block leaves before any other memory
	// traffic, barrier or atomic (decode at 100 keys over a 2,048-row
	// cache: 7 of a pair's 8 blocks). The condition is the block's.
	if (z0 >= kvlen + qi + 1) return;
	// It sees at least kvlen + 1, so its window starts at kvlen + 1 - window
	// or later: a chunk that ends before that is empty too (decode over a
	// long cache with a window: all but the window's chunks).
	if (window > 0 && z0 + ATT_CHUNK <= kvlen + 1 - window) return;
	const int kh = hh / (h / kvh);
	const u64 pair = u64(qi) * u64(h) + u64(hh);
	const bool fast8 = att_fast8(k, v, d);
	att_query(q, qi, hh, h, d, scale, softcap, tid, sh);
	const int vis = att_visible(end, qi, kvlen, sh, tid, warp, lane);
	const int lo = window > 0 ? att_max(0, vis - window) : 0; // the window's first visible key
	if (z0 >= vis || z0 + ATT_CHUNK <= lo) return; // the block's condition too: empty, counted by nobody
	// np, the pair's non-empty chunks (za.. in the grid), is what its blocks
	// count to: every block of the pair computes the same vis.
	const int za = lo / ATT_CHUNK;
	const int np = (vis + ATT_CHUNK - 1) / ATT_CHUNK - za;
	const int c0 = att_max(z0, lo), c1 = att_min(z0 + ATT_CHUNK, vis);
	att_rows(end, qi, kvlen, c0, c1, sh, tid, warp, lane);
	float mp, lp, op[ATT_DPT];
	att_chunk<T>(fast8, k, v, kh, d, cap, kvlen, c0, c1, sh, tid, warp, lane, mp, lp, op);
	float m = ATT_NEG, l = 0.0f, o[ATT_DPT];
	for (int i = 0; i < ATT_DPT; i++) o[i] = 0.0f;
	if (np == 1) {
		// The only chunk: merged into the empty result from registers, as
		// attention_tree merges it, so the bits are the same, with no
		// scratch, fence or atomic.
		att_merge(m, l, o, mp, lp, op);
		att_store(out, qi, hh, h, d, tid, l, o);
		return;
	}
	float *pr = part + (pair * u64(p) + u64(z)) * u64(d + 2);
	if (tid == 0) {
		pr[0] = mp;
		pr[1] = lp;
	}
	for (int i = 0; i < ATT_DPT; i++) {
		const int c = tid + ATT_THREADS * i;
		if (c < d) pr[2 + c] = op[i];
	}
	// Every thread's partial is visible device-wide before the block is
	// counted; the block that counts np is the last and merges.
	thread_fence();
	sync_threads();
	if (tid == 0) {
		const int done = atomic_add_i32(count + pair, 1);
		sh.last = done == np - 1;
		if (sh.last) count[pair] = 0; // for the next run: every block of the pair has counted
	}
	sync_threads();
	if (!sh.last) return;
	thread_fence();
	// The other blocks' partials are read past this SM's L1, which may
	// hold nothing of them but is not coherent with the other SMs. They
	// are read ATT_MERGE chunks at a time, all requested before the first
	// is merged (no load waits on a merge), then merged in chunk order.
	const volatile float *base = part + (pair * u64(p) + u64(za)) * u64(d + 2);
	for (int cb = 0; cb < np; cb += ATT_MERGE) {
		float pm[ATT_MERGE], pl[ATT_MERGE], po[ATT_MERGE][ATT_DPT];
		#pragma unroll
		for (int j = 0; j < ATT_MERGE; j++) {
			pm[j] = ATT_NEG;
			pl[j] = 0.0f;
			for (int i = 0; i < ATT_DPT; i++) po[j][i] = 0.0f;
			if (cb + j < np) {
				const volatile float *cp = base + u64(cb + j) * u64(d + 2);
				pm[j] = cp[0];
				pl[j] = cp[1];
				for (int i = 0; i < ATT_DPT; i++) {
					const int e = tid + ATT_THREADS * i;
					if (e < d) po[j][i] = cp[2 + e];
				}
			}
		}
		#pragma unroll
		for (int j = 0; j < ATT_MERGE; j++) {
			if (cb + j < np) att_merge(m, l, o, pm[j], pl[j], po[j]);
		}
	}
	att_store(out, qi, hh, h, d, tid, l, o);
}

KERNEL void attention_tree_f32(float *out, const float *q, const float *k, const float *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap,
                               float scale, int window, float softcap) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale, window, softcap);
}
KERNEL void attention_tree_f16(float *out, const float *q, const f16_t *k, const f16_t *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap,
                               float scale, int window, float softcap) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale, window, softcap);
}
KERNEL void attention_split_f32(float *out, const float *q, const float *k, const float *v, const int *kvlen, const int *end, int *count, float *part, int n, int h,
                                int kvh, int d, int cap, int p, float scale, int window, float softcap) {
	attention_split(out, q, k, v, kvlen, end, count, part, n, h, kvh, d, cap, p, scale, window, softcap);
}
KERNEL void attention_split_f16(float *out, const float *q, const f16_t *k, const f16_t *v, const int *kvlen, const int *end, int *count, float *part, int n,
                                int h, int kvh, int d, int cap, int p, float scale, int window, float softcap) {
	attention_split(out, q, k, v, kvlen, end, count, part, n, h, kvh, d, cap, p, scale, window, softcap);
}
