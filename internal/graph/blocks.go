package graph

import "fmt"

// ggml block-quantized weights (GGUF's Q5_K, Q6_K, IQ4_XS, ...; package
// quant defines each format and its reference dequantization): an [N,K]
// matrix kept as the file stores it, each row K/BlockElems blocks back to
// back, held in a U8 array [N, row bytes].
//
// Model code declares such a weight with Blocks, which stands for the
// dequantized [N,K] f32 matrix, as Quantized does for affine weights:
// MatMul and Embed recognise it and read the blocks directly
// (BlockMatMulOp, BlockEmbedOp); any other consumer makes the planner
// compute the DequantizeBlocksOp node itself. Type is ggml's name of the
// format ("Q5_K"), which a backend's Supports checks: a backend without
// kernels for a format says so, and model code converts the weight to a
// form it has kernels for.

// DequantizeBlocksOp (built by Blocks) expands a block-quantized matrix to
// float32, each value as package quant's reference gives it.
// Sources: w [N, row bytes] u8. Result [N,K] f32.
type DequantizeBlocksOp struct{ Type string }

// BlockMatMulOp is MatMulOp with a block-quantized weight, built by MatMul:
// out = x·DequantizeBlocks(w)ᵀ, computed without expanding w.
// Sources: x [M,K] f32, w [N, row bytes] u8. Result [M,N] f32. As for
// QMatMulOp, a row's result does not depend on the rows batched with it.
type BlockMatMulOp struct{ Type string }

// BlockEmbedOp is EmbedOp from a block-quantized table, built by Embed:
// out[i] = DequantizeBlocks(w)[ids[i]], dequantizing only the rows it
// gathers. Sources: w [V, row bytes] u8, ids [n] i32. Result [n,K] f32.
type BlockEmbedOp struct{ Type string }

func (DequantizeBlocksOp) isOp() {}
func (BlockMatMulOp) isOp()      {}
func (BlockEmbedOp) isOp()       {}

func (o DequantizeBlocksOp) String() string { return fmt.Sprintf("DequantizeBlocks{%s}", o.Type) }
func (o BlockMatMulOp) String() string      { return fmt.Sprintf("BlockMatMul{%s}", o.Type) }
func (o BlockEmbedOp) String() string       { return fmt.Sprintf("BlockEmbed{%s}", o.Type) }

// BlockOps lists one value of each block op. They are not in AllOps: a
// backend without kernels for block formats declines them in Supports,
// and model code converts such weights for it.
func BlockOps() []Op {
	return []Op{DequantizeBlocksOp{Type: "Q6_K"}, BlockMatMulOp{Type: "Q6_K"}, BlockEmbedOp{Type: "Q6_K"}}
}

// Blocks declares the [N,K] f32 matrix that the blocks w [N, row bytes]
// of format typ stand for: a DequantizeBlocksOp node. Pass it to MatMul or
// Embed to use the block kernels.
func Blocks(w *Array, typ string, k int) *Array {
	mustf(len(w.shape) == 2 && w.dtype == U8, "Blocks: w %v", w)
	mustf(typ != "" && k > 0, "Blocks: format %q, K=%d", typ, k)
	return node(DequantizeBlocksOp{Type: typ}, F32, Shape{w.shape[0], k}, w)
}

// blockSources returns the DequantizeBlocksOp and its blocks if a is the
// result of Blocks.
func blockSources(a *Array) (DequantizeBlocksOp, *Array, bool) {
	d, ok := a.op.(DequantizeBlocksOp)
	if !ok || a.kind != kindOp {
		return DequantizeBlocksOp{}, nil, false
	}
	return d, a.src[0], true
}

func blockMatMul(x, w *Array, d DequantizeBlocksOp, blocks *Array) *Array {
	mustf(len(x.shape) == 2 && x.dtype == F32, "BlockMatMul: x %v", x)
	mustf(x.shape[1] == w.shape[1], "BlockMatMul: x %v and w %v disagree on K", x.shape, w.shape)
	return node(BlockMatMulOp(d), F32, Shape{x.shape[0], w.shape[0]}, x, blocks)
}

func blockEmbed(table, ids *Array, d DequantizeBlocksOp, blocks *Array) *Array {
	mustf(len(ids.shape) == 1 && ids.dtype == I32, "BlockEmbed: ids %v", ids)
	return node(BlockEmbedOp(d), F32, Shape{ids.shape[0], table.shape[1]}, blocks, ids)
}
