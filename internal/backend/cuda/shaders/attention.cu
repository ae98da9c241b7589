// attention.cu: attention of n new queries over a KV cache [kvh, c, d]
// (f32 or f16) that already holds the new tokens' rows at kvlen..kvlen+n-1.
// Query i sees every cache row before kvlen, and new row j iff
// j <= i <= end[j] (the new tokens are a tree in DFS pre-order: a chain is
// causal prefill, one token is decode, packed beams are verification).
// Query head hh reads KV head hh / (h/kvh).
//
// One block of 4 warps per (query head, query). The keys a query sees are
// numbered by visible rank (the prefix, then its visible new keys in order)
// and warp w takes ranks w, w+4, ...; each warp keeps an online softmax
// (running max, sum, and lane l holds dims l, l+32, ... of the weighted
// values), and the 4 warps are merged in order at the end. A tree token
// thus sees the same keys, dealt the same way, as the same token decoded
// alone after its ancestors: its output has the same bits.
// Grid: (h, n); block: 128 threads. d <= 256.
#include "prelude.cuh"

#define ATT_WARPS 4
#define ATT_MAXD 256
#define ATT_PER (ATT_MAXD / 32)

template <class T>
DEVICE void attention_tree(float *out, const float *q, const T *k, const T *v, const int *kvlen_p, const int *end, int n, int h, int kvh, int d, int cap, float scale) {
	SHARED float wm[ATT_WARPS], wl[ATT_WARPS];
	SHARED float wacc[ATT_WARPS][ATT_MAXD];
	const int hh = int(blockIdx.x), i = int(blockIdx.y);
	const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
	const int kvlen = kvlen_p[0];
	const int kh = hh / (h / kvh);
	const float *qr = q + (u64(i) * u64(h) + u64(hh)) * u64(d);
	float qv[ATT_PER], acc[ATT_PER];
	for (int e = 0; e < ATT_PER; e++) {
		const int c = lane + 32 * e;
		qv[e] = c < d ? qr[c] : 0.0f;
		acc[e] = 0.0f;
	}
	float mx = -cu_inf(), l = 0.0f;
	// visit folds key row r into this warp's state.
	auto visit = [&](u64 r) {
		const u64 base = (u64(kh) * u64(cap) + r) * u64(d);
		float dot = 0.0f;
		for (int e = 0; e < ATT_PER; e++) {
			const int c = lane + 32 * e;
			if (c < d) dot = cu_fma(qv[e], load_w(k, base + u64(c)), dot);
		}
		const float s = warp_sum(dot) * scale;
		const float m2 = cu_fmax(mx, s);
		const float corr = cu_exp(mx - m2), p = cu_exp(s - m2);
		l = l * corr + p;
		for (int e = 0; e < ATT_PER; e++) {
			const int c = lane + 32 * e;
			if (c < d) acc[e] = cu_fma(acc[e], corr, p * load_w(v, base + u64(c)));
		}
		mx = m2;
	};
	for (int r = warp; r < kvlen; r += ATT_WARPS) visit(u64(r));
	int rank = kvlen;
	for (int j = 0; j <= i; j++) {
		if (end[j] < i) continue;
		if (rank % ATT_WARPS == warp) visit(u64(kvlen) + u64(j));
		rank++;
	}
	if (lane == 0) {
		wm[warp] = mx;
		wl[warp] = l;
	}
	for (int e = 0; e < ATT_PER; e++) {
		const int c = lane + 32 * e;
		if (c < d) wacc[warp][c] = acc[e];
	}
	sync_threads();
	float m = wm[0];
	for (int w = 1; w < ATT_WARPS; w++) m = cu_fmax(m, wm[w]);
	float f[ATT_WARPS], total = 0.0f;
	for (int w = 0; w < ATT_WARPS; w++) {
		// A warp that saw no key has max -inf and sum 0: its factor is 0.
		f[w] = wl[w] > 0.0f ? cu_exp(wm[w] - m) : 0.0f;
		total += wl[w] * f[w];
	}
	float *o = out + (u64(i) * u64(h) + u64(hh)) * u64(d);
	for (int c = int(threadIdx.x); c < d; c += int(blockDim.x)) {
		float s = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++) {
			if (f[w] > 0.0f) s = cu_fma(wacc[w][c], f[w], s);
		}
		o[c] = s / total;
	}
}

KERNEL void attention_tree_f32(float *out, const float *q, const float *k, const float *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap, float scale) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale);
}
KERNEL void attention_tree_f16(float *out, const float *q, const f16_t *k, const f16_t *v, const int *kvlen, const int *end, int n, int h, int kvh, int d, int cap, float scale) {
	attention_tree(out, q, k, v, kvlen, end, n, h, kvh, d, cap, scale);
}
