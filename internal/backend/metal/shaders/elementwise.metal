// elementwise.metal: SiLU, SwiGLU, GeGLU, Add and Mul (b broadcast over a's leading
// dims), and Concat along the last dim. One thread per output element.
// Grid: (ceil(n/256)); threadgroup: 256.
#include "common.h"

template <typename T>
kernel void elementwise_silu(
		constant ElementwiseArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device T *out [[buffer(2)]],
		uint3 tpig [[thread_position_in_grid]]) {
	if (tpig.x < uint(args.n)) {
		out[tpig.x] = T(silu(float(x[tpig.x])));
	}
}

template <typename T>
kernel void elementwise_swiglu(
		constant ElementwiseArgs &args [[buffer(0)]],
		device const T *gate [[buffer(1)]],
		device const T *up [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	if (tpig.x < uint(args.n)) {
		out[tpig.x] = T(silu(float(gate[tpig.x])) * float(up[tpig.x]));
	}
}

template <typename T>
kernel void elementwise_geglu(
		constant ElementwiseArgs &args [[buffer(0)]],
		device const T *gate [[buffer(1)]],
		device const T *up [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	if (tpig.x < uint(args.n)) {
		out[tpig.x] = T(gelu(float(gate[tpig.x])) * float(up[tpig.x]));
	}
}

// elementwise_softcap is cap·tanh(x/cap) (Gemma 2's final logits), tanh
// as in gelu (common.h).
template <typename T>
kernel void elementwise_softcap(
		constant SoftCapArgs &args [[buffer(0)]],
		device const T *x [[buffer(1)]],
		device T *out [[buffer(2)]],
		uint3 tpig [[thread_position_in_grid]]) {
	if (tpig.x < uint(args.n)) {
		const float c = args.cap;
		out[tpig.x] = T(c - 2.0f * c / (1.0f + exp(2.0f * float(x[tpig.x]) / c)));
	}
}

// Op 0 is Add, 1 is Mul.
template <typename T, int Op>
kernel void elementwise_binary(
		constant ElementwiseArgs &args [[buffer(0)]],
		device const T *a [[buffer(1)]],
		device const T *b [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint i = tpig.x;
	if (i >= uint(args.n)) {
		return;
	}
	const T bv = b[i % uint(args.nb)];
	out[i] = Op == 0 ? a[i] + bv : a[i] * bv;
}

template <typename T>
kernel void elementwise_concat(
		constant ConcatArgs &args [[buffer(0)]],
		device const T *a [[buffer(1)]],
		device const T *b [[buffer(2)]],
		device T *out [[buffer(3)]],
		uint3 tpig [[thread_position_in_grid]]) {
	const uint w = uint(args.Da + args.Db);
	const uint i = tpig.x;
	if (i >= uint(args.M) * w) {
		return;
	}
	const uint r = i / w;
	const uint c = i % w;
	out[i] = c < uint(args.Da) ? a[r * uint(args.Da) + c] : b[r * uint(args.Db) + c - uint(args.Da)];
}

instantiate_kernel("elementwise_silu_f32", elementwise_silu, float)
instantiate_kernel("elementwise_swiglu_f32", elementwise_swiglu, float)
instantiate_kernel("elementwise_geglu_f32", elementwise_geglu, float)
instantiate_kernel("elementwise_softcap_f32", elementwise_softcap, float)
instantiate_kernel("elementwise_add_f32", elementwise_binary, float, 0)
instantiate_kernel("elementwise_mul_f32", elementwise_binary, float, 1)
instantiate_kernel("elementwise_concat_f32", elementwise_concat, float)
