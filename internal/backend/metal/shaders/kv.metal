// kv.metal: writes new rows [N,KVH,D] (float) into a KV cache [KVH,C,D]
// (float or half, rounded to nearest) at kvLen, and compacts the accepted
// path of a verified tree (position kvLen+idx[i] moves to kvLen+i in every
// head). args.row = KVH·D.
// Grid: (ceil(N·row/256)) for kv_write and (ceil(row/256)) for kv_compact;
// threadgroup: 256.
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

instantiate_kernel("kv_write_f32", kv_write, float)
instantiate_kernel("kv_write_f16", kv_write, half)
instantiate_kernel("kv_compact_f32", kv_compact, float)
instantiate_kernel("kv_compact_f16", kv_compact, half)
