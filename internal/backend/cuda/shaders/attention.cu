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
// block of 4 warps: the warps take blocks of ATT_BLOCK consecutive keys
// round-robin, lane l holds dims 4l..4l+3 (+128), a key's score is a
// warp_sum, and the online softmax takes one exp per key plus one per block;
// the warps' partials are merged in warp order. The chunks' partials are
// then merged in chunk order, online (att_merge):
//   attention_tree_*   one block per (head, query) walks the chunks itself:
//                      prefill, and any shape with enough (head, query)
//                      pairs to fill the GPU. Grid (h, n).
//   attention_split_*  one block per (head, query, chunk) writes its chunk's
//                      partial to a scratch [n][h][p][d+2] (an empty one
//                      past the visible keys); the last block of a (head,
//                      query) to finish, found with an atomic count, merges
//                      the p partials in chunk order. Decode and small trees
//                      over long caches, where (head, query) alone gives too
//                      few blocks to read the cache at the GPU's bandwidth.
//                      Grid (h, n, p). The merge is in the same launch (not
//                      a second kernel as on Metal) so that a decode step
//                      pays one launch per layer for attention at every
//                      context length.
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

// att_shared is a block's shared memory: the warps' partials, the cache
// rows of a chunk's new keys, and a prefix-count scratch.
struct att_shared {
	float m[ATT_WARPS], l[ATT_WARPS];
	float o[ATT_WARPS][ATT_MAXD];
	int rows[ATT_CHUNK];
	int scan[ATT_WARPS];
	int last;
};

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

// att_chunk computes the partial of visible keys [c0, c1) (c0 < c1): on
// return every thread has the chunk's maximum m and sum l, and o[i] for its
// dims tid + ATT_THREADS·i (unnormalized). qv holds this lane's query dims,
// pre-scaled. Every thread calls it.
template <class T>
ALWAYS_INLINE DEVICE void att_chunk(const T *k, const T *v, int kh, int d, int cap, int kvlen, int c0, int c1, const float (&qv)[ATT_GROUPS][4],
                                    att_shared &sh, int tid, int warp, int lane, float &m, float &l, float (&o)[ATT_DPT]) {
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
						if (c + e < d) dot = cu_fma(qv[t][e], load_w(k, off[i] + u64(c + e)), dot);
					}
				}
			}
			dot = warp_sum(dot);
			sc[i] = x < c1 ? dot : ATT_NEG;
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

// att_merge folds a chunk's partial (mp, lp, op) into the running result
// (m, l, o), in chunk order. Both kernels use it, on the same values.
DEVICE void att_merge(float &m, float &l, float (&o)[ATT_DPT], float mp, float lp, const float (&op)[ATT_DPT]) {
	const float mn = cu_fmax(m, mp);
	const float a = cu_exp(m - mn), b = cu_exp(mp - mn);
	l = cu_fma(l, a, lp * b);
	for (int i = 0; i < ATT_DPT; i++) o[i] = cu_fma(o[i], a, op[i] * b);
	m = mn;
}

// att_query loads this lane's query dims, pre-scaled.
DEVICE void att_query(const float *q, int qi, int hh, int h, int d, float scale, int lane, float (&qv)[ATT_GROUPS][4]) {
	const float *qr = q + (u64(qi) * u64(h) + u64(hh)) * u64(d);
	for (int t = 0; t < ATT_GROUPS; t++) {
		const int c = 4 * lane + 128 * t;
		for (int e = 0; e < 4; e++) qv[t][e] = c + e < d ? qr[c + e] * scale : 0.0f;
	}
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
                           float scale) {
	SHARED att_shared sh;
	const int hh = int(blockIdx.x), qi = int(blockIdx.y);
	const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
	const int kvlen = kvlen_p[0];
	const int kh = hh / (h / kvh);
	float qv[ATT_GROUPS][4];
	att_query(q, qi, hh, h, d, scale, lane, qv);
	const int vis = att_visible(end, qi, kvlen, sh, tid, warp, lane);
	float m = ATT_NEG, l = 0.0f, o[ATT_DPT];
	for (int i = 0; i < ATT_DPT; i++) o[i] = 0.0f;
	for (int c0 = 0; c0 < vis; c0 += ATT_CHUNK) {
		const int c1 = att_min(c0 + ATT_CHUNK, vis);
		att_rows(end, qi, kvlen, c0, c1, sh, tid, warp, lane);
		float mp, lp, op[ATT_DPT];
		att_chunk<T>(k, v, kh, d, cap, kvlen, c0, c1, qv, sh, tid, warp, lane, mp, lp, op);
		att_merge(m, l, o, mp, lp, op);
	}
	att_store(out, qi, hh, h, d, tid, l, o);
}

// count [n][h] (zero before the first launch; the last block leaves it
// zero again for the next run), part [n][h][p][d+2].
template <class T>
DEVICE void attention_split(float *out, const float *q, const T *k, const T *v, const int *kvlen_p, const int *end, int *count, float *part, int n, int h,
                            int kvh, int d, int cap, int p, float scale) {
	SHARED att_shared sh;
	const int hh = int(blockIdx.x), qi = int(blockIdx.y), z = int(blockIdx.z);
	const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
	const int kvlen = kvlen_p[0];
	const int kh = hh / (h / kvh);
	const u64 pair = u64(qi) * u64(h) + u64(hh);
	float *pr = part + (pair * u64(p) + u64(z)) * u64(d + 2);
	const int vis = att_visible(end, qi, kvlen, sh, tid, warp, lane);
	const int c0 = z * ATT_CHUNK;
	if (c0 < vis) { // the condition is the block's: its barriers are all or none
		const int c1 = att_min(c0 + ATT_CHUNK, vis);
		float qv[ATT_GROUPS][4];
		att_query(q, qi, hh, h, d, scale, lane, qv);
		att_rows(end, qi, kvlen, c0, c1, sh, tid, warp, lane);
		float mp, lp, op[ATT_DPT];
		att_chunk<T>(k, v, kh, d, cap, kvlen, c0, c1, qv, sh, tid, warp, lane, mp, lp, op);
		if (tid == 0) {
			pr[0] = mp;
			pr[1] = lp;
		}
		for (int i = 0; i < ATT_DPT; i++) {
			const int c = tid + ATT_THREADS * i;
			if (c < d) pr[2 + c] = op[i];
		}
	} else if (tid == 0) {
		pr[0] = ATT_NEG;
		pr[1] = 0.0f; // empty: the merge skips it
	}
	// Every thread's partial is visible device-wide before the block is
	// counted; the block that counts p is the last and merges.
	thread_fence();
	sync_threads();
	if (tid == 0) {
		const int done = atomic_add_i32(count + pair, 1);
		sh.last = done == p - 1;
		if (sh.last) count[pair] = 0; // for the next run: every block of the pair has counted
	}
	sync_threads();
	if (!sh.last) return;
	thread_fence();
	// The other blocks' partials are read past this SM's L1, which may
	// hold nothing of them but is not coherent with the other SMs.
	const volatile float *base = part + pair * u64(p) * u64(d + 2);
	float m = ATT_NEG, l = 0.0f, o[ATT_DPT];
	for (int i = 0; i < ATT_DPT; i++) o[i] = 0.0f;
	for (int c = 0; c < p; c++) {
		const volatile float *cp = base + u64(c) * u64(d + 2);
		const float lp = cp[1];
		if (lp > 0.0f) {
			float op[ATT_DPT];
			for (int i = 0; i < ATT_DPT; i++) {
				const int e = tid + ATT_THREADS * i;
				op[i] = e < d ? cp[2 + e] : 0.0f;
			}
			att_merge(m, l, o, cp[0], lp, op);
		}
	}
	att_store(out, qi, hh, h, d, tid, l, o);
}

KERNEL void attention_tree_f32(float *out, const float *q, const float *k, const float *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap,
                               float scale) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale);
}
KERNEL void attention_tree_f16(float *out, const float *q, const f16_t *k, const f16_t *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap,
                               float scale) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale);
}
KERNEL void attention_split_f32(float *out, const float *q, const float *k, const float *v, const int *kvlen, const int *end, int *count, float *part, int n, int h,
                                int kvh, int d, int cap, int p, float scale) {
	attention_split(out, q, k, v, kvlen, end, count, part, n, h, kvh, d, cap, p, scale);
}
KERNEL void attention_split_f16(float *out, const float *q, const f16_t *k, const f16_t *v, const int *kvlen, const int *end, int *count, float *part, int n,
                                int h, int kvh, int d, int cap, int p, float scale) {
	attention_split(out, q, k, v, kvlen, end, count, part, n, h, kvh, d, cap, p, scale);
}
