// attention.metal: scaled dot-product attention of N new queries over a KV
// cache, one kernel for decode (N=1), prefill (a chain) and tree
// verification. Query q sees every cache row before kvLen and new row k iff
// k <= q <= end[k] (the new tokens are a tree in DFS pre-order). Query head
// h reads KV head h / (H/KVH). The cache is float or half (the kernel's
// name says which); queries and outputs are float.
//
// The visible keys of a query, in order (the cache rows, then its
// ancestors among the new tokens), are cut into chunks of ATTN_CHUNK by
// their visible index. A chunk's partial result (maximum m, sum l,
// weighted values o) is computed by one threadgroup: its ATTN_SIMDGROUPS
// simdgroups take blocks of ATTN_BLOCK consecutive keys round-robin; lanes
// split the head dim four at a time (d = 4·lane + 128·t, 4-wide loads when
// args.vec4), a block's ATTN_BLOCK scores are simd_sums, and the online
// softmax takes one exp per key plus one per block. The simdgroups' partials
// are merged in threadgroup memory, and the chunks' partials are merged in
// chunk order, online:
//   attention_tree_*   one threadgroup per (head, query) walks the chunks
//                      itself (prefill, and any shape with enough queries).
//                      Grid: (H, N); threadgroup: ATTN_THREADS.
//   attention_split_*  one threadgroup per (head, query, chunk) writes the
//                      chunk's partial to a scratch buffer [N][H][P][D+2]
//                      (empty past the visible keys), and
//   attention_reduce_f32 merges them: decode and small trees over long
//                      caches, where (head, query) alone gives too few
//                      threadgroups. Grid: (H, N, P), then (H, N);
//                      threadgroup: ATTN_THREADS.
// With a sliding window (args.window > 0) a query sees only the last
// args.window of its visible keys (a visible key's index is its position):
// the first chunk it reads starts at the window's first key, and chunks
// wholly before the window are skipped (split: stored empty).
// The chunks, blocks and every sum's order depend on the visible index
// alone, and both paths run the same code on the same partials, so a tree
// token's result is the bits it gets decoded alone after its ancestors,
// which greedy ReDrafter needs to reproduce greedy decoding exactly.
// threadgroup(0): ATTN_SIMDGROUPS·(D+2) floats; threadgroup(1):
// ATTN_CHUNK + 32 ints (the chunk's cache rows, scan scratch).
#include "common.h"

#define ATTN_PER_LANE (ATTN_MAX_HEAD_DIM / 128) // groups of 4 dims per lane
#define ATTN_THREADS (32 * ATTN_SIMDGROUPS)
#define ATTN_DIMS_PER_THREAD (ATTN_MAX_HEAD_DIM / ATTN_THREADS)

// attn_load4 reads 4 dims of a cache row (zeros past D).
template <typename KV>
inline void attn_load4(device const KV *p, int left, bool vec4, thread float *v) {
	if (vec4) {
		load4(p, v);
	} else {
		load4_tail(p, left, v);
	}
}

// attn_visible returns the number of keys query qi sees: past plus its
// ancestors among the new tokens (itself included). Every thread calls it.
inline int attn_visible(device const int *end, int qi, int past, threadgroup int *scan, uint tiitg, uint sgitg, uint lane) {
	int count = 0;
	for (int j = int(tiitg); j <= qi; j += ATTN_THREADS) {
		count += end[j] >= qi ? 1 : 0;
	}
	count = simd_sum(count);
	if (lane == 0) {
		scan[sgitg] = count;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	int total = 0;
	for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
		total += scan[s];
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	return past + total;
}

// attn_rows writes rows[v - c0] = the cache row of visible key v for the
// visible keys v in [max(c0, past), c1) (new tokens: the ancestors of qi in
// order, found by a threadgroup-wide prefix count). Every thread calls it.
inline void attn_rows(device const int *end, int qi, int past, int c0, int c1, threadgroup int *rows,
		threadgroup int *scan, uint tiitg, uint sgitg, uint lane) {
	if (c1 <= past) {
		return; // the chunk is all cache rows: row = visible index
	}
	const int lo = max(c0, past) - past; // ancestor ranks wanted: [lo, hi)
	const int hi = c1 - past;
	int seen = 0;
	for (int j0 = 0; j0 <= qi && seen < hi; j0 += ATTN_THREADS) {
		const int j = j0 + int(tiitg);
		const int f = (j <= qi && end[j] >= qi) ? 1 : 0;
		const int before = simd_prefix_exclusive_sum(f);
		const int tot = simd_sum(f);
		if (lane == 0) {
			scan[sgitg] = tot;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		int rank = seen + before;
		int all = 0;
		for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
			rank += s < int(sgitg) ? scan[s] : 0;
			all += scan[s];
		}
		if (f != 0 && rank >= lo && rank < hi) {
			rows[past + rank - c0] = past + j;
		}
		seen += all;
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
}

// attn_softcap is Gemma 2's soft-cap of a score, cap·tanh(s/cap), with
// tanh(u) as 1 - 2/(1 + e^(2u)) (±1 where e^(2u) over- or underflows); s
// itself when cap is 0.
inline float attn_softcap(float s, float cap) {
	return cap > 0.0f ? cap - 2.0f * cap / (1.0f + exp(2.0f * s / cap)) : s;
}

// attn_chunk computes the partial of visible keys [c0, c1) (c0 < c1): on
// return every thread has the chunk's maximum m and sum l, and o[i] for
// its dims d = tiitg + ATTN_THREADS·i (unnormalized). qv is this lane's
// query dims, pre-scaled. Every thread calls it.
template <typename KV>
inline void attn_chunk(constant AttentionArgs &args, device const KV *k, device const KV *v, int g, int past,
		int c0, int c1, thread const float (*qv)[4], threadgroup const int *rows, threadgroup float *shmem,
		uint tiitg, uint sgitg, uint lane, thread float &m, thread float &l, thread float *o) {
	const int D = args.D;
	const bool vec4 = args.vec4 != 0;
	float mx = -FLT_MAX;
	float sum = 0.0f;
	float acc[ATTN_PER_LANE][4];
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		for (int i = 0; i < 4; i++) {
			acc[t][i] = 0.0f;
		}
	}
	const int blocks = (c1 - c0 + ATTN_BLOCK - 1) / ATTN_BLOCK;
	for (int b = int(sgitg); b < blocks; b += ATTN_SIMDGROUPS) {
		const int v0 = c0 + b * ATTN_BLOCK;
		ulong off[ATTN_BLOCK];
		float sc[ATTN_BLOCK];
		for (int i = 0; i < ATTN_BLOCK; i++) {
			const int vi = v0 + i;
			const int r = vi < c1 ? (vi < past ? vi : rows[vi - c0]) : 0;
			off[i] = (ulong(g) * ulong(args.C) + ulong(r)) * ulong(D);
			float dot = 0.0f;
			if (vi < c1) {
				for (int t = 0; t < ATTN_PER_LANE; t++) {
					const int d = 4 * int(lane) + 128 * t;
					if (d < D) {
						float kv[4];
						attn_load4(k + off[i] + ulong(d), D - d, vec4, kv);
						for (int e = 0; e < 4; e++) {
							dot = fma(qv[t][e], kv[e], dot);
						}
					}
				}
			}
			dot = simd_sum(dot);
			sc[i] = vi < c1 ? attn_softcap(dot, args.softcap) : -FLT_MAX;
		}
		float bm = sc[0];
		for (int i = 1; i < ATTN_BLOCK; i++) {
			bm = max(bm, sc[i]);
		}
		const float mnew = max(mx, bm);
		const float corr = exp(mx - mnew);
		float p[ATTN_BLOCK];
		float ps = 0.0f;
		for (int i = 0; i < ATTN_BLOCK; i++) {
			p[i] = v0 + i < c1 ? exp(sc[i] - mnew) : 0.0f;
			ps += p[i];
		}
		sum = fma(sum, corr, ps);
		float pv[ATTN_PER_LANE][4];
		for (int t = 0; t < ATTN_PER_LANE; t++) {
			for (int e = 0; e < 4; e++) {
				pv[t][e] = 0.0f;
			}
		}
		for (int i = 0; i < ATTN_BLOCK; i++) {
			if (v0 + i < c1) {
				for (int t = 0; t < ATTN_PER_LANE; t++) {
					const int d = 4 * int(lane) + 128 * t;
					if (d < D) {
						float vv[4];
						attn_load4(v + off[i] + ulong(d), D - d, vec4, vv);
						for (int e = 0; e < 4; e++) {
							pv[t][e] = fma(p[i], vv[e], pv[t][e]);
						}
					}
				}
			}
		}
		for (int t = 0; t < ATTN_PER_LANE; t++) {
			for (int e = 0; e < 4; e++) {
				acc[t][e] = fma(acc[t][e], corr, pv[t][e]);
			}
		}
		mx = mnew;
	}

	// Merge the simdgroups: shmem = [S] maxima, [S] sums, [S][D] values.
	threadgroup float *ms = shmem;
	threadgroup float *ls = shmem + ATTN_SIMDGROUPS;
	threadgroup float *os = shmem + 2 * ATTN_SIMDGROUPS;
	if (lane == 0) {
		ms[sgitg] = mx;
		ls[sgitg] = sum;
	}
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		for (int e = 0; e < 4; e++) {
			const int d = 4 * int(lane) + 128 * t + e;
			if (d < D) {
				os[int(sgitg) * D + d] = acc[t][e];
			}
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	m = -FLT_MAX;
	for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
		m = max(m, ms[s]);
	}
	float wgt[ATTN_SIMDGROUPS];
	l = 0.0f;
	for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
		wgt[s] = ls[s] > 0.0f ? exp(ms[s] - m) : 0.0f;
		l = fma(ls[s], wgt[s], l);
	}
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		const int d = int(tiitg) + ATTN_THREADS * i;
		float a = 0.0f;
		if (d < D) {
			for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
				a = fma(os[s * D + d], wgt[s], a);
			}
		}
		o[i] = a;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup); // shmem is reused
}

// attn_merge folds a chunk's partial (mp, lp, op) into the running result
// (m, l, o), in chunk order. Both paths use it, on the same values.
inline void attn_merge(thread float &m, thread float &l, thread float *o, float mp, float lp, thread const float *op) {
	const float mn = max(m, mp);
	const float a = exp(m - mn);
	const float b = exp(mp - mn);
	l = fma(l, a, lp * b);
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		o[i] = fma(o[i], a, op[i] * b);
	}
	m = mn;
}

// attn_query loads this lane's query dims, pre-scaled by args.scale.
inline void attn_query(constant AttentionArgs &args, device const float *q, int qi, int h, uint lane, thread float (*qv)[4]) {
	const int D = args.D;
	device const float *qr = q + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(D);
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		const int d = 4 * int(lane) + 128 * t;
		for (int e = 0; e < 4; e++) {
			qv[t][e] = d + e < D ? qr[d + e] * args.scale : 0.0f;
		}
	}
}

template <typename KV>
kernel void attention_tree(
		constant AttentionArgs &args [[buffer(0)]],
		device const float *q [[buffer(1)]],
		device const KV *k [[buffer(2)]],
		device const KV *v [[buffer(3)]],
		device const int *kv_len [[buffer(4)]],
		device const int *end [[buffer(5)]],
		device float *out [[buffer(6)]],
		threadgroup float *shmem [[threadgroup(0)]],
		threadgroup int *ishmem [[threadgroup(1)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int h = int(tgpig.x);
	const int qi = int(tgpig.y);
	const int g = h / (args.H / args.KVH);
	const int past = kv_len[0];
	threadgroup int *rows = ishmem;
	threadgroup int *scan = ishmem + ATTN_CHUNK;
	float qv[ATTN_PER_LANE][4];
	attn_query(args, q, qi, h, lane, qv);
	const int L = attn_visible(end, qi, past, scan, tiitg, sgitg, lane);
	float m = -FLT_MAX;
	float l = 0.0f;
	float o[ATTN_DIMS_PER_THREAD];
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		o[i] = 0.0f;
	}
	const int lo = args.window > 0 ? max(0, L - args.window) : 0; // the window's first visible key
	for (int z0 = lo / ATTN_CHUNK * ATTN_CHUNK; z0 < L; z0 += ATTN_CHUNK) {
		const int c0 = max(z0, lo);
		const int c1 = min(z0 + ATTN_CHUNK, L);
		attn_rows(end, qi, past, c0, c1, rows, scan, tiitg, sgitg, lane);
		float mp, lp;
		float op[ATTN_DIMS_PER_THREAD];
		attn_chunk<KV>(args, k, v, g, past, c0, c1, qv, rows, shmem, tiitg, sgitg, lane, mp, lp, op);
		attn_merge(m, l, o, mp, lp, op);
	}
	device float *orow = out + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(args.D);
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		const int d = int(tiitg) + ATTN_THREADS * i;
		if (d < args.D) {
			orow[d] = l > 0.0f ? o[i] / l : 0.0f;
		}
	}
}

template <typename KV>
kernel void attention_split(
		constant AttentionArgs &args [[buffer(0)]],
		device const float *q [[buffer(1)]],
		device const KV *k [[buffer(2)]],
		device const KV *v [[buffer(3)]],
		device const int *kv_len [[buffer(4)]],
		device const int *end [[buffer(5)]],
		device float *part [[buffer(6)]],
		threadgroup float *shmem [[threadgroup(0)]],
		threadgroup int *ishmem [[threadgroup(1)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int h = int(tgpig.x);
	const int qi = int(tgpig.y);
	const int z0 = int(tgpig.z) * ATTN_CHUNK;
	const int g = h / (args.H / args.KVH);
	const int past = kv_len[0];
	threadgroup int *rows = ishmem;
	threadgroup int *scan = ishmem + ATTN_CHUNK;
	device float *pr = part + ((ulong(qi) * ulong(args.H) + ulong(h)) * ulong(args.P) + ulong(tgpig.z)) * ulong(args.D + 2);
	const int L = attn_visible(end, qi, past, scan, tiitg, sgitg, lane);
	const int lo = args.window > 0 ? max(0, L - args.window) : 0; // the window's first visible key
	if (z0 >= L || z0 + ATTN_CHUNK <= lo) {
		if (tiitg == 0) {
			pr[0] = -FLT_MAX;
			pr[1] = 0.0f; // empty: the reduction skips it
		}
		return; // the whole threadgroup leaves together
	}
	const int c0 = max(z0, lo);
	const int c1 = min(z0 + ATTN_CHUNK, L);
	float qv[ATTN_PER_LANE][4];
	attn_query(args, q, qi, h, lane, qv);
	attn_rows(end, qi, past, c0, c1, rows, scan, tiitg, sgitg, lane);
	float mp, lp;
	float op[ATTN_DIMS_PER_THREAD];
	attn_chunk<KV>(args, k, v, g, past, c0, c1, qv, rows, shmem, tiitg, sgitg, lane, mp, lp, op);
	if (tiitg == 0) {
		pr[0] = mp;
		pr[1] = lp;
	}
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		const int d = int(tiitg) + ATTN_THREADS * i;
		if (d < args.D) {
			pr[2 + d] = op[i];
		}
	}
}

template <typename T>
kernel void attention_reduce(
		constant AttentionArgs &args [[buffer(0)]],
		device const T *part [[buffer(1)]],
		device float *out [[buffer(2)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint tiitg [[thread_index_in_threadgroup]]) {
	const int h = int(tgpig.x);
	const int qi = int(tgpig.y);
	const int D = args.D;
	device const T *pr = part + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(args.P) * ulong(D + 2);
	float m = -FLT_MAX;
	float l = 0.0f;
	float o[ATTN_DIMS_PER_THREAD];
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		o[i] = 0.0f;
	}
	for (int p = 0; p < args.P; p++) {
		device const T *c = pr + ulong(p) * ulong(D + 2);
		const float lp = c[1];
		if (lp > 0.0f) {
			float op[ATTN_DIMS_PER_THREAD];
			for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
				const int d = int(tiitg) + ATTN_THREADS * i;
				op[i] = d < D ? c[2 + d] : 0.0f;
			}
			attn_merge(m, l, o, c[0], lp, op);
		}
	}
	device float *orow = out + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(D);
	for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
		const int d = int(tiitg) + ATTN_THREADS * i;
		if (d < D) {
			orow[d] = l > 0.0f ? o[i] / l : 0.0f;
		}
	}
}

instantiate_kernel("attention_tree_f32", attention_tree, float)
instantiate_kernel("attention_tree_f16", attention_tree, half)
instantiate_kernel("attention_split_f32", attention_split, float)
instantiate_kernel("attention_split_f16", attention_split, half)
instantiate_kernel("attention_reduce_f32", attention_reduce, float)
