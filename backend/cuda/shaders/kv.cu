// kv.cu: the KV cache [c, kvh·d] (f32, or f16 rounded to nearest).
// kv_write copies n new rows to rows kvlen..kvlen+n-1: one thread per
// element, grid (ceil(n·rowlen/256)), block 256.
// kv_compact moves row kvlen+idx[i] to row kvlen+i for i in order (idx
// strictly increasing, idx[i] >= i). A later row's source can be an earlier
// row's destination, so each thread owns one column and walks i in order:
// grid (ceil(rowlen/256)), block 256.
#include "prelude.cuh"

KERNEL void kv_write_f32(float *cache, const float *rows, const int *kvlen, int n, int rowlen) {
	const u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (i >= u64(n) * u64(rowlen)) return;
	cache[u64(kvlen[0]) * u64(rowlen) + i] = rows[i];
}
KERNEL void kv_write_f16(f16_t *cache, const float *rows, const int *kvlen, int n, int rowlen) {
	const u64 i = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (i >= u64(n) * u64(rowlen)) return;
	f16_store(cache + u64(kvlen[0]) * u64(rowlen) + i, rows[i]);
}

template <class T> DEVICE void kv_compact(T *cache, const int *kvlen, const int *idx, int n, int rowlen) {
	const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
	if (c >= rowlen) return;
	const u64 base = u64(kvlen[0]);
	for (int i = 0; i < n; i++) {
		cache[(base + u64(i)) * u64(rowlen) + u64(c)] = cache[(base + u64(idx[i])) * u64(rowlen) + u64(c)];
	}
}
KERNEL void kv_compact_f32(float *cache, const int *kvlen, const int *idx, int n, int rowlen) { kv_compact(cache, kvlen, idx, n, rowlen); }
KERNEL void kv_compact_f16(f16_t *cache, const int *kvlen, const int *idx, int n, int rowlen) { kv_compact(cache, kvlen, idx, n, rowlen); }
