// rope.cu: rotary position embeddings with a position per row (tree tokens
// sit at prefix length + depth). The first 2·p dims of each head are rotated
// by pos·inv_freq[j]; NeoX pairs (j, j+p) as HF checkpoints do, otherwise
// adjacent pairs (2j, 2j+1) as llama.cpp's permuted weights do. x [m,h,d].
// One thread per element. Grid: (ceil(m·h·d/256)); block: 256.
#include "prelude.cuh"

// rope_at is element i of a head's rotated values (x is the head's first
// element), at position fpos: the one rotation both kernels apply, so that
// RoPEKVWrite's bits are RoPE's.
template <bool NEOX> DEVICE float rope_at(const float *x, int i, float fpos, const float *inv_freq, int p) {
	if (i >= 2 * p) return x[i];
	int j, i0, i1;
	bool first;
	if (NEOX) {
		j = i < p ? i : i - p;
		i0 = j;
		i1 = j + p;
		first = i < p;
	} else {
		j = i / 2;
		i0 = 2 * j;
		i1 = 2 * j + 1;
		first = i % 2 == 0;
	}
	const float a = x[i0], b = x[i1];
	// The angle as hi+lo (lo is the rounding error of the product), so that
	// large positions lose no accuracy: sin(hi+lo) ≈ sin(hi) + lo·cos(hi).
	const float f = inv_freq[j];
	const float hi = fpos * f, lo = cu_fma(fpos, f, -hi);
	float s0, c0;
	cu_sincos(hi, &s0, &c0);
	const float s = s0 + lo * c0, c = c0 - lo * s0;
	return first ? a * c - b * s : a * s + b * c;
}

template <bool NEOX> DEVICE void rope(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	const u64 total = u64(m) * u64(h) * u64(d);
	const u64 idx = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (idx >= total) return;
	const int i = int(idx % u64(d));
	const u64 row = idx / (u64(d) * u64(h));
	out[idx] = rope_at<NEOX>(x + (idx - u64(i)), i, float(pos[row]), inv_freq, p);
}

KERNEL void rope_neox_f32(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	rope<true>(out, x, pos, inv_freq, m, h, d, p);
}
KERNEL void rope_adjacent_f32(float *out, const float *x, const int *pos, const float *inv_freq, int m, int h, int d, int p) {
	rope<false>(out, x, pos, inv_freq, m, h, d, p);
}

// rope_kv_write (graph.RoPEKVWriteOp): qkv [m, (h+2·kvh)·d], each row the
// h query heads, then the kvh key heads, then the kvh value heads. Query
// elements are rotated into out [m,h,d]; keys rotated into the key cache
// and values copied into the value cache [kvh,c,d], at positions kvlen..
// (kvlen read on the device, as kv_write does; stored as kv_write stores:
// f16 rounded to nearest). One thread per element of qkv, so the three
// writes are one launch. Grid: (ceil(m·(h+2·kvh)·d/256)); block: 256.
template <bool NEOX, class T, class St>
DEVICE void rope_kv_write(float *out, T *kc, T *vc, const float *qkv, const int *pos, const int *kvlen, const float *inv_freq,
                          int m, int h, int kvh, int d, int c, int p, St store) {
	const u64 width = u64(h + 2 * kvh) * u64(d);
	const u64 idx = u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x);
	if (idx >= u64(m) * width) return;
	const u64 row = idx / width, col = idx % width;
	const int head = int(col / u64(d)), i = int(col % u64(d));
	const float *x = qkv + (idx - u64(i)); // the head's first element
	if (head < h) {
		out[row * u64(h) * u64(d) + col] = rope_at<NEOX>(x, i, float(pos[row]), inv_freq, p);
		return;
	}
	const u64 at = u64(kvlen[0]) + row;
	if (head < h + kvh) {
		store(kc + (u64(head - h) * u64(c) + at) * u64(d) + u64(i), rope_at<NEOX>(x, i, float(pos[row]), inv_freq, p));
	} else {
		store(vc + (u64(head - h - kvh) * u64(c) + at) * u64(d) + u64(i), x[i]);
	}
}
DEVICE void store_f32(float *p, float v) { *p = v; }
#define ROPE_KV_PARAMS(T) float *out, T *kc, T *vc, const float *qkv, const int *pos, const int *kvlen, const float *inv_freq, int m, int h, int kvh, int d, int c, int p
KERNEL void rope_kv_write_neox_f32(ROPE_KV_PARAMS(float)) { rope_kv_write<true>(out, kc, vc, qkv, pos, kvlen, inv_freq, m, h, kvh, d, c, p, store_f32); }
KERNEL void rope_kv_write_adjacent_f32(ROPE_KV_PARAMS(float)) { rope_kv_write<false>(out, kc, vc, qkv, pos, kvlen, inv_freq, m, h, kvh, d, c, p, store_f32); }
KERNEL void rope_kv_write_neox_f16(ROPE_KV_PARAMS(f16_t)) { rope_kv_write<true>(out, kc, vc, qkv, pos, kvlen, inv_freq, m, h, kvh, d, c, p, f16_store); }
KERNEL void rope_kv_write_adjacent_f16(ROPE_KV_PARAMS(f16_t)) { rope_kv_write<false>(out, kc, vc, qkv, pos, kvlen, inv_freq, m, h, kvh, d, c, p, f16_store); }
