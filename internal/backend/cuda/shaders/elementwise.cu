// elementwise.cu: SiLU, SwiGLU, GeGLU, Add and Mul (b broadcast over a's leading
// dimensions when it is shorter: b[i % nb]) and Concat along the last
// dimension. One thread per element. Grid: (ceil(n/256)); block: 256.
#include "prelude.cuh"

DEVICE u64 gid() { return u64(blockIdx.x) * u64(blockDim.x) + u64(threadIdx.x); }
DEVICE float silu(float x) { return x * (1.0f / (1.0f + cu_exp(-x))); }

KERNEL void silu_f32(float *out, const float *x, u64 n) {
	const u64 i = gid();
	if (i < n) out[i] = silu(x[i]);
}
KERNEL void swiglu_f32(float *out, const float *gate, const float *up, u64 n) {
	const u64 i = gid();
	if (i < n) out[i] = silu(gate[i]) * up[i];
}
// gelu is GELU with PyTorch's tanh approximation (Gemma's
// gelu_pytorch_tanh), tanh(u) taken as 1 - 2/(1 + e^(2u)), which is ±1
// where e^(2u) over- or underflows. matvec.cu's lin_gelu and quant.cu's
// qlin_gelu (the fused products' GeGLU) are the same expression, each file
// compiling alone (TestGELUCopiesAgree).
DEVICE float gelu(float x) {
	const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
	return 0.5f * x * (2.0f - 2.0f / (1.0f + cu_exp(2.0f * u)));
}
KERNEL void geglu_f32(float *out, const float *gate, const float *up, u64 n) {
	const u64 i = gid();
	if (i < n) out[i] = gelu(gate[i]) * up[i];
}
// softcap_f32 is cap·tanh(x/cap) (Gemma 2's final logits), tanh as in gelu.
KERNEL void softcap_f32(float *out, const float *x, u64 n, float cap) {
	const u64 i = gid();
	if (i < n) out[i] = cap - 2.0f * cap / (1.0f + cu_exp(2.0f * x[i] / cap));
}
KERNEL void add_f32(float *out, const float *a, const float *b, u64 n, u64 nb) {
	const u64 i = gid();
	if (i < n) out[i] = a[i] + b[i % nb];
}
KERNEL void mul_f32(float *out, const float *a, const float *b, u64 n, u64 nb) {
	const u64 i = gid();
	if (i < n) out[i] = a[i] * b[i % nb];
}
// concat_f32: out [m, da+db] from a [m,da] and b [m,db].
KERNEL void concat_f32(float *out, const float *a, const float *b, int m, int da, int db) {
	const u64 i = gid();
	const u64 w = u64(da) + u64(db);
	if (i >= u64(m) * w) return;
	const u64 r = i / w, c = i % w;
	out[i] = c < u64(da) ? a[r * u64(da) + c] : b[r * u64(db) + c - u64(da)];
}
