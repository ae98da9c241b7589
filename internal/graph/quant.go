package graph

import "fmt"

// Affine-quantized weights (MLX's layout; package quant defines it): an
// [N,K] matrix stored as Bits-bit codes packed into uint32 words, with a
// float scale s and bias b per group of GroupSize consecutive elements of a
// row, value = s·q + b.
//
// Model code declares such a weight with Quantized, which stands for the
// dequantized [N,K] f32 matrix. MatMul and Embed recognise it and read the
// packed form directly (QMatMulOp, QEmbedOp); any other consumer makes the
// planner compute the DequantizeOp node itself.

// DequantizeOp (built by Quantized) expands an affine-quantized matrix to
// float32: out[n,k] = float32(s·q) + b, with q the code of element k of row
// n and s, b the scale and bias of its group (the reference of package
// quant).
// Sources: w [N, K·Bits/32] u32, scales [N, K/GroupSize] (f32, f16 or
// bf16), biases like scales. Result [N,K] f32. It is the unfused definition
// of QMatMul and QEmbed.
type DequantizeOp struct{ Bits, GroupSize int }

// QMatMulOp is MatMulOp with an affine-quantized weight, built by MatMul:
// out = x·Dequantize(w, scales, biases)ᵀ, computed without expanding w.
// Sources: x [M,K] f32, then w, scales and biases as for Dequantize.
// Result [M,N] f32. Backends compute each row of out the same way whatever
// M is, so a row's result does not depend on the rows it is batched with.
// MLX: mx.quantized_matmul(x, w, scales, biases, transpose=True).
type QMatMulOp struct{ Bits, GroupSize int }

// QEmbedOp is EmbedOp from an affine-quantized table, built by Embed:
// out[i] = Dequantize(w, scales, biases)[ids[i]], dequantizing only the
// rows it gathers. Sources: w, scales, biases as for Dequantize (V rows),
// ids [n] i32. Result [n,K] f32.
type QEmbedOp struct{ Bits, GroupSize int }

func (DequantizeOp) isOp() {}
func (QMatMulOp) isOp()    {}
func (QEmbedOp) isOp()     {}

func (o DequantizeOp) String() string {
	return fmt.Sprintf("Dequantize{bits=%d,group=%d}", o.Bits, o.GroupSize)
}
func (o QMatMulOp) String() string {
	return fmt.Sprintf("QMatMul{bits=%d,group=%d}", o.Bits, o.GroupSize)
}
func (o QEmbedOp) String() string {
	return fmt.Sprintf("QEmbed{bits=%d,group=%d}", o.Bits, o.GroupSize)
}

// QuantBits reports whether the quantized ops support bits-bit codes (4 or 8).
func QuantBits(bits int) bool { return bits == 4 || bits == 8 }

// QuantGroupSize reports whether the quantized ops support groups of g
// elements (32, 64 or 128, as MLX).
func QuantGroupSize(g int) bool { return g == 32 || g == 64 || g == 128 }

// Quantized declares the [N,K] f32 matrix that packed codes w
// [N, K·bits/32], scales and biases [N, K/groupSize] stand for: a
// DequantizeOp node. Pass it to MatMul or Embed to use the quantized kernels.
func Quantized(w, scales, biases *Array, bits, groupSize int) *Array {
	mustf(QuantBits(bits) && QuantGroupSize(groupSize), "Dequantize: %d bits in groups of %d", bits, groupSize)
	mustf(len(w.shape) == 2 && w.dtype == U32, "Dequantize: w %v", w)
	n, k := w.shape[0], w.shape[1]*32/bits
	mustf(k%groupSize == 0, "Dequantize: K=%d is not a multiple of the group size %d", k, groupSize)
	want := Shape{n, k / groupSize}
	mustf(isFloatWeight(scales.dtype) && scales.shape.Equal(want), "Dequantize: scales %v for w %v, want %v", scales, w, want)
	mustf(biases.dtype == scales.dtype && biases.shape.Equal(want), "Dequantize: biases %v for scales %v", biases, scales)
	return node(DequantizeOp{Bits: bits, GroupSize: groupSize}, F32, Shape{n, k}, w, scales, biases)
}

// quantizedSources returns the DequantizeOp and its sources if a is the
// result of Quantized.
func quantizedSources(a *Array) (DequantizeOp, []*Array, bool) {
	d, ok := a.op.(DequantizeOp)
	if !ok || a.kind != kindOp {
		return DequantizeOp{}, nil, false
	}
	return d, a.src, true
}

func qMatMul(x, w *Array, d DequantizeOp, src []*Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "QMatMul: x %v", x)
	mustf(x.shape[1] == w.shape[1], "QMatMul: x %v and w %v disagree on K", x.shape, w.shape)
	return node(QMatMulOp(d), F32, Shape{x.shape[0], w.shape[0]}, x, src[0], src[1], src[2])
}

func qEmbed(table, ids *Array, d DequantizeOp, src []*Array) *Array {
	mustf(len(ids.shape) == 1 && ids.dtype == I32, "QEmbed: ids %v", ids)
	return node(QEmbedOp(d), F32, Shape{ids.shape[0], table.shape[1]}, src[0], src[1], src[2], ids)
}
