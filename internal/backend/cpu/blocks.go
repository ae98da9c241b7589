package cpu

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cpu/kernels"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

// ggml block-quantized weights (graph.DequantizeBlocksOp, BlockMatMulOp,
// BlockEmbedOp): every format package quant reads. The reference backend
// dequantizes each weight row with quant's reference and takes refMatMul's
// index-order dot product, so BlockMatMul(x, w) on it equals
// MatMul(x, DequantizeBlocks(w)) bit for bit; the fast backend decodes
// rows into scratch as it goes (kernels.MatMulBlocks), reading the blocks'
// own bytes, and its results are MatMulF32's over the same values, except
// Q6_K's and Q5_K's on AVX-512 VNNI machines, which multiply x rounded to
// int8 by the codes (BlocksInt8).

// BlocksInt8 reports whether b multiplies blocks of ggml format typ by
// activations rounded to int8 (kernels.BlocksInt8: Q6_K and Q5_K on AVX-512
// VNNI machines), for descriptions such as inspect's; the reference backend
// never does.
func (b *Backend) BlocksInt8(typ string) bool {
	t, ok := quant.ParseGGML(typ)
	return ok && !b.reference && kernels.BlocksInt8(t)
}

// blockRows checks a block operand [N, row bytes] of op's format for rows
// of k elements and returns the format and the row size in bytes.
func blockRows(w graph.Operand, typ string, k int) (quant.GGML, int, error) {
	t, ok := quant.ParseGGML(typ)
	if !ok {
		return 0, 0, fmt.Errorf("no kernels for ggml blocks of type %q", typ)
	}
	be := t.BlockElems()
	if k%be != 0 || w.Shape[1] != k/be*t.BlockBytes() {
		return 0, 0, fmt.Errorf("%v rows of %d bytes for %d elements (want %d-element blocks of %d bytes)",
			t, w.Shape[1], k, be, t.BlockBytes())
	}
	return t, w.Shape[1], nil
}

// dequantizeBlocks runs graph.DequantizeBlocksOp: every row, with the reference.
func (b *Backend) dequantizeBlocks(out graph.Operand, w graph.Operand, op graph.DequantizeBlocksOp) error {
	k := out.Shape[1]
	t, rb, err := blockRows(w, op.Type, k)
	if err != nil {
		return err
	}
	return quant.DequantizeGGML(t, f32(out), bytesOf(w)[:out.Shape[0]*rb])
}

// blockEmbed runs graph.BlockEmbedOp: the reference dequantization of the
// rows asked for.
func (b *Backend) blockEmbed(out graph.Operand, in []graph.Operand, op graph.BlockEmbedOp) error {
	k := out.Shape[1]
	t, rb, err := blockRows(in[0], op.Type, k)
	if err != nil {
		return err
	}
	y, w, n := f32(out), bytesOf(in[0]), in[0].Shape[0]
	for i, id := range i32(in[1]) {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("token id %d outside the table of %d rows", id, n)
		}
		if err := quant.DequantizeGGML(t, y[i*k:(i+1)*k], w[int(id)*rb:int(id+1)*rb]); err != nil {
			return err
		}
	}
	return nil
}

// blockMatMul runs graph.BlockMatMulOp: out[M,N] = x[M,K]·DequantizeBlocks(w)ᵀ,
// splitting the rows of w across workers.
func (b *Backend) blockMatMul(out graph.Operand, in []graph.Operand, op graph.BlockMatMulOp) error {
	m, k, n := in[0].Shape[0], in[0].Shape[1], in[1].Shape[0]
	t, rb, err := blockRows(in[1], op.Type, k)
	if err != nil {
		return err
	}
	x, y, w := f32(in[0]), f32(out), bytesOf(in[1])
	if b.reference {
		row := make([]float32, k)
		for j := range n {
			if err := quant.DequantizeGGML(t, row, w[j*rb:(j+1)*rb]); err != nil {
				return err
			}
			for i := range m {
				var s float32
				for c, xv := range x[i*k : (i+1)*k] {
					s += xv * row[c]
				}
				y[i*n+j] = s
			}
		}
		return nil
	}
	step := kernels.BlockRows(k)
	minRows := max(step, 1<<16/(k*max(m, 1))) // as matmul: give a worker ≥64K multiply-adds
	// x is prepared once (for the VNNI kernels: rounded to int8), not by
	// every worker's part.
	px := kernels.PrepareBlocks(x, m, k, t)
	b.pool.parallel(n, step, minRows, func(lo, hi int) {
		s := b.scratch(step * k)
		kernels.MatMulBlocksX(y[lo:], n, px, w[lo*rb:hi*rb], *s)
		b.release(s)
	})
	px.Release()
	return nil
}
