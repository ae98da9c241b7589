// attention.metal: scaled dot-product attention of N new queries over a KV
// cache, one kernel for decode (N=1), prefill (a chain) and tree
// verification. Query q sees every cache row before kvLen and new row k iff
// k <= q <= end[k] (the new tokens are a tree in DFS pre-order). Query head
// h reads KV head h / (H/KVH). The cache is float or half (the kernel's
// name says which); queries and outputs are float.
//
// One threadgroup per (head, query). Its ATTN_SIMDGROUPS simdgroups take the
// visible keys round-robin by their index among the visible keys (not by
// cache row); lanes split the head dim (d = lane + 32t), a key's score is a
// simd_sum, and each simdgroup keeps an online softmax (running max, sum and
// weighted values). The partial results are merged through threadgroup
// memory at the end. Dealing by visible index makes a tree token's result
// the bits it gets decoded alone after its ancestors (the same keys, in the
// same order, to the same simdgroups), which greedy ReDrafter needs to
// reproduce greedy decoding exactly.
// Grid: (H, N); threadgroup: 32·ATTN_SIMDGROUPS;
// threadgroup(0): ATTN_SIMDGROUPS·(D+2) floats.
#include "common.h"

#define ATTN_PER_LANE (ATTN_MAX_HEAD_DIM / 32)

// attend_row folds cache row r of KV head g into a simdgroup's online
// softmax: running maximum mx, sum l and weighted values o (this lane's
// dims d = lane + 32t). (MSL has no lambdas, hence the parameters.)
template <typename KV>
inline void attend_row(
		constant AttentionArgs &args, device const KV *k, device const KV *v, int r, int g, uint lane,
		thread const float *qv, thread float *o, thread float &mx, thread float &l) {
	const int D = args.D;
	const ulong off = (ulong(r) * ulong(args.KVH) + ulong(g)) * ulong(D);
	float s = 0.0f;
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		const int d = int(lane) + 32 * t;
		if (d < D) {
			s += qv[t] * float(k[off + ulong(d)]);
		}
	}
	s = simd_sum(s) * args.scale;
	const float mnew = max(mx, s);
	const float corr = exp(mx - mnew);
	const float p = exp(s - mnew);
	l = l * corr + p;
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		const int d = int(lane) + 32 * t;
		if (d < D) {
			o[t] = o[t] * corr + p * float(v[off + ulong(d)]);
		}
	}
	mx = mnew;
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
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint tiitg [[thread_index_in_threadgroup]],
		uint sgitg [[simdgroup_index_in_threadgroup]],
		uint lane [[thread_index_in_simdgroup]]) {
	const int h = int(tgpig.x);
	const int qi = int(tgpig.y);
	const int D = args.D;
	const int g = h / (args.H / args.KVH);
	const int past = kv_len[0];

	float qv[ATTN_PER_LANE];
	float o[ATTN_PER_LANE];
	device const float *qr = q + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(D);
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		const int d = int(lane) + 32 * t;
		qv[t] = d < D ? float(qr[d]) : 0.0f;
		o[t] = 0.0f;
	}
	float mx = -FLT_MAX;
	float l = 0.0f;
	// The cached rows are visible keys 0..past-1; the new tokens that are
	// ancestors of qi (j <= qi <= end[j]) follow, in order.
	for (int r = int(sgitg); r < past; r += ATTN_SIMDGROUPS) {
		attend_row(args, k, v, r, g, lane, qv, o, mx, l);
	}
	int seen = past;
	for (int j = 0; j <= qi; j++) {
		if (end[j] < qi) {
			continue; // a new token that is not an ancestor of qi
		}
		if (seen % ATTN_SIMDGROUPS == int(sgitg)) {
			attend_row(args, k, v, past + j, g, lane, qv, o, mx, l);
		}
		seen++;
	}

	// Merge the simdgroups: shmem = [S] maxima, [S] sums, [S][D] values.
	threadgroup float *ms = shmem;
	threadgroup float *ls = shmem + ATTN_SIMDGROUPS;
	threadgroup float *os = shmem + 2 * ATTN_SIMDGROUPS;
	if (lane == 0) {
		ms[sgitg] = mx;
		ls[sgitg] = l;
	}
	for (int t = 0; t < ATTN_PER_LANE; t++) {
		const int d = int(lane) + 32 * t;
		if (d < D) {
			os[int(sgitg) * D + d] = o[t];
		}
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float m = -FLT_MAX;
	for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
		m = max(m, ms[s]);
	}
	float sum = 0.0f;
	float wgt[ATTN_SIMDGROUPS];
	for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
		wgt[s] = ls[s] > 0.0f ? exp(ms[s] - m) : 0.0f;
		sum += ls[s] * wgt[s];
	}
	device float *orow = out + (ulong(qi) * ulong(args.H) + ulong(h)) * ulong(D);
	for (int d = int(tiitg); d < D; d += 32 * ATTN_SIMDGROUPS) {
		float acc = 0.0f;
		for (int s = 0; s < ATTN_SIMDGROUPS; s++) {
			if (wgt[s] > 0.0f) {
				acc += os[s * D + d] * wgt[s];
			}
		}
		orow[d] = sum > 0.0f ? acc / sum : 0.0f;
	}
}

instantiate_kernel("attention_tree_f32", attention_tree, float)
instantiate_kernel("attention_tree_f16", attention_tree, half)
