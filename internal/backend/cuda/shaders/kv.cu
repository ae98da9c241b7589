// kv.cu: the KV cache [kvh, c, d] (f32, or f16 rounded to nearest).
// kv_write copies n new rows [n, kvh, d] to positions kvlen..kvlen+n-1 of
// every head: one thread per element, grid (ceil(n·rowlen/256)), block 256
// (rowlen = kvh·d).
// kv_compact moves position kvlen+idx[i] to kvlen+i for i in order (idx
// strictly increasing, idx[i] >= i), in every head. A later position's
// source can be an earlier one's destination, so each thread owns one
// column (head and element) and walks i in order: grid (ceil(rowlen/256)),
// block 256.
#include "prelude.cuh"

// kv_at is the cache index of element e of head h at position p.
DEVICE u64 kv_at(int h, u64 p, int e, int c, int d) { return (u64(h) * u64(c) + p) * u64(d) + u64(e); }

KERNEL void kv_write_f32(float *cache, const float *rows, const int *kvlen, int n, int rowlen, int c, int d) {
	const u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (i >= u64(n) * u64(rowlen)) return;
	const int col = int(i % u64(rowlen));
	cache[kv_at(col / d, u64(kvlen[0]) + i / u64(rowlen), col % d, c, d)] = rows[i];
}
KERNEL void kv_write_f16(f16_t *cache, const float *rows, const int *kvlen, int n, int rowlen, int c, int d) {
	const u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (i >= u64(n) * u64(rowlen)) return;
	const int col = int(i % u64(rowlen));
	f16_store(cache + kv_at(col / d, u64(kvlen[0]) + i / u64(rowlen), col % d, c, d), rows[i]);
}

template <class T> DEVICE void kv_compact(T *cache, const int *kvlen, const int *idx, int n, int rowlen, int c, int d) {
	const int col = int(blockIdx.x * blockDim.x + threadIdx.x);
	if (col >= rowlen) return;
	const u64 base = u64(kvlen[0]);
	for (int i = 0; i < n; i++) {
		cache[kv_at(col / d, base + u64(i), col % d, c, d)] = cache[kv_at(col / d, base + u64(idx[i]), col % d, c, d)];
	}
}
KERNEL void kv_compact_f32(float *cache, const int *kvlen, const int *idx, int n, int rowlen, int c, int d) { kv_compact(cache, kvlen, idx, n, rowlen, c, d); }
KERNEL void kv_compact_f16(f16_t *cache, const int *kvlen, const int *idx, int n, int rowlen, int c, int d) { kv_compact(cache, kvlen, idx, n, rowlen, c, d); }
