// embed.cu: rows of an embedding table, out[i] = table[ids[i]] as f32, from
// f32/f16/bf16 tables and from 4-/8-bit affine-quantized ones (MLX layout:
// codes packed in u32 words, a scale and bias per group of gs elements,
// value = float(s·q) + b). An id outside [0, v) gives a row of NaN.
// Grid: (n, ceil(d/128)) (rows in x, which has room for 2^31 of them);
// block: 128 threads, an element each.
//
// A row is spread over blocks, not looped over by one: decoding embeds one
// id, and one block of 128 threads walking a 2048-wide row made 16 round
// trips to memory one after the other (a load after a store to out, which
// might alias the table, is not moved ahead of it): qembed_4 took 11 µs on
// an H100. With the row over 16 blocks each thread has one element; the
// grid-stride loop only serves rows wider than the grid (never, as
// launched).
#include "prelude.cuh"

template <class T> DEVICE void embed(float *out, const T *table, const int *ids, int n, int d, int v) {
	const int i = int(blockIdx.x);
	const int id = ids[i];
	for (int k = int(blockIdx.y * blockDim.x + threadIdx.x); k < d; k += int(gridDim.y * blockDim.x)) {
		out[u64(i) * u64(d) + u64(k)] = id >= 0 && id < v ? load_w(table, u64(id) * u64(d) + u64(k)) : cu_nan();
	}
}

KERNEL void embed_f32(float *out, const float *table, const int *ids, int n, int d, int v) { embed(out, table, ids, n, d, v); }
KERNEL void embed_f16(float *out, const f16_t *table, const int *ids, int n, int d, int v) { embed(out, table, ids, n, d, v); }
KERNEL void embed_bf16(float *out, const bf16_t *table, const int *ids, int n, int d, int v) { embed(out, table, ids, n, d, v); }

// affine_at is element k of row r of a quantized matrix with d columns.
template <int BITS, class S>
DEVICE float affine_at(const unsigned *w, const S *scales, const S *biases, u64 r, int k, int d, int gs) {
	const int per = 32 / BITS;
	const unsigned word = w[r * u64(d / per) + u64(k / per)];
	const unsigned q = (word >> (BITS * (k % per))) & ((1u << BITS) - 1u);
	const u64 g = r * u64(d / gs) + u64(k / gs);
	return load_w(scales, g) * float(q) + load_w(biases, g);
}

template <int BITS, class S>
DEVICE void qembed(float *out, const unsigned *w, const S *scales, const S *biases, const int *ids, int n, int d, int v, int gs) {
	const int i = int(blockIdx.x);
	const int id = ids[i];
	for (int k = int(blockIdx.y * blockDim.x + threadIdx.x); k < d; k += int(gridDim.y * blockDim.x)) {
		out[u64(i) * u64(d) + u64(k)] = id >= 0 && id < v ? affine_at<BITS>(w, scales, biases, u64(id), k, d, gs) : cu_nan();
	}
}

#define QEMBED(BITS, S, NAME) \
	KERNEL void qembed_##BITS##_##NAME(float *out, const unsigned *w, const S *scales, const S *biases, const int *ids, int n, int d, int v, int gs) { \
		qembed<BITS>(out, w, scales, biases, ids, n, d, v, gs); \
	}
QEMBED(4, float, f32)
QEMBED(4, f16_t, f16)
QEMBED(4, bf16_t, bf16)
QEMBED(8, float, f32)
QEMBED(8, f16_t, f16)
QEMBED(8, bf16_t, bf16)
