// kv.metal: writes new rows [N,KVH,D] (float) into a KV cache [KVH,C,D]
// (float or half, rounded to nearest) at kvLen, and compacts the accepted
// path of a verified tree (position kvLen+idx[i] moves to kvLen+i in every
// head). args.row = KVH·D.
// kv_rope (graph.RoPEKVWriteOp) takes a layer's fused Q·K·V rows and does
// RoPE and both KV writes in one dispatch: one thread per element of qkv
// rotates query elements into q, key elements into the key cache and copies
// value elements into the value cache, rounding as kv_write does.
// Grid: (ceil(N·row/256)) for kv_write, (ceil(row/256)) for kv_compact,
// (ceil(M·(H+2·KVH)·D/256)) for kv_rope; threadgroup: 256.
#include "common.h"

template <typename T>
kernel void kv_write(
		constant KVArgs &args [[buffer(0)]],
		device T *cache [[buffer(1)]],
		device const float *rows [[buffer(2)]],
		device const int *kv_len [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const int at = kv_len[0];
	const uint i = tpig.x;
	if (i >= uint(args.N) * uint(args.row) || at < 0 || at + args.N > args.C) {
		return;
	}
	const uint n = i / uint(args.row), h = i % uint(args.row) / uint(args.D), e = i % uint(args.D);
	cache[(ulong(h) * ulong(args.C) + ulong(at) + n) * ulong(args.D) + e] = T(rows[i]);
}

// Each thread owns one column of the row and walks the indices in order, so
// the in-place forward copy is safe without barriers: idx is increasing with
// idx[i] >= i, so a row is read before any later step overwrites it.
template <typename T>
kernel void kv_compact(
		constant KVArgs &args [[buffer(0)]],
		device T *cache [[buffer(1)]],
		device const int *kv_len [[buffer(2)]],
		device const int *idx [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const int at = kv_len[0];
	const uint c = tpig.x;
	if (c >= uint(args.row) || at < 0) {
		return;
	}
	device T *head = cache + ulong(c / uint(args.D)) * ulong(args.C) * ulong(args.D) + c % uint(args.D);
	for (int i = 0; i < args.N; i++) {
		const int j = idx[i];
		if (j != i && at + j < args.C) {
			head[ulong(at + i) * ulong(args.D)] = head[ulong(at + j) * ulong(args.D)];
		}
	}
}

template <typename T, bool NeoX>
kernel void kv_rope(
		constant RoPEKVArgs &args [[buffer(0)]],
		device const float *qkv [[buffer(1)]],
		device const int *pos [[buffer(2)]],
		constant float *inv_freq [[buffer(3)]],
		device float *q [[buffer(4)]],
		device T *kcache [[buffer(5)]],
		device T *vcache [[buffer(6)]],
		device const int *kv_len [[buffer(7)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint width = uint(args.H + 2 * args.KVH) * uint(args.D);
	const uint idx = tpig.x;
	if (idx >= uint(args.M) * width) {
		return;
	}
	const int m = int(idx / width);
	const int c = int(idx % width);
	const int h = c / args.D; // query heads, then key heads, then value heads
	const int i = c % args.D;
	float v = qkv[idx];
	if (h < args.H + args.KVH && i < 2 * args.P) {
		v = rope_at<NeoX>(qkv + (idx - uint(i)), i, args.P, float(pos[m]), inv_freq);
	}
	if (h < args.H) {
		q[ulong(m) * ulong(args.H * args.D) + ulong(c)] = v;
		return;
	}
	// As kv_write: rows that would run past the cache are not written.
	const int at = kv_len[0];
	if (at < 0 || at + args.M > args.C) {
		return;
	}
	const bool key = h < args.H + args.KVH;
	const int kh = key ? h - args.H : h - args.H - args.KVH;
	device T *cache = key ? kcache : vcache;
	cache[(ulong(kh) * ulong(args.C) + ulong(at + m)) * ulong(args.D) + ulong(i)] = T(v);
}

instantiate_kernel("kv_write_f32", kv_write, float)
instantiate_kernel("kv_write_f16", kv_write, half)
instantiate_kernel("kv_compact_f32", kv_compact, float)
instantiate_kernel("kv_compact_f16", kv_compact, half)
instantiate_kernel("kv_ropeneox_f32", kv_rope, float, true)
instantiate_kernel("kv_ropeneox_f16", kv_rope, half, true)
instantiate_kernel("kv_ropeadjacent_f32", kv_rope, float, false)
instantiate_kernel("kv_ropeadjacent_f16", kv_rope, half, false)
