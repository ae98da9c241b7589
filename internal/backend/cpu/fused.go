package cpu

import (
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// LinearOp, RoPEKVWriteOp: the fused ops of package graph, composed here
// from the unfused ops' own code, in their order, so that a fused graph
// equals the unfused one bit for bit on either CPU backend. The CPU has no
// launches to save, so model code keeps building unfused graphs for it
// (the Backend does not implement graph.FusedLayers); these run fused
// graphs as the reference that GPU kernels are tested against.

// scratch is an f32 work area of a fused op, taken from a pool so that a
// decode step allocates nothing.
type scratch struct{ buf buffer }

var scratches sync.Pool

// takeScratch returns an operand of shape s (f32) over pooled memory, and
// the function that gives it back.
func takeScratch(s graph.Shape) (graph.Operand, func()) {
	n := 4 * s.Numel()
	sc, _ := scratches.Get().(*scratch)
	if sc == nil || cap(sc.buf.b) < n {
		sc = &scratch{buf: buffer{b: make([]byte, n)}}
	}
	sc.buf.b = sc.buf.b[:n]
	return graph.Operand{Buf: &sc.buf, DType: graph.F32, Shape: s}, func() { scratches.Put(sc) }
}

// linear runs a LinearOp as its definition: norm, product, bias, SwiGLU
// or GeGLU, residual.
func (b *Backend) linear(out graph.Operand, in []graph.Operand, op graph.LinearOp) error {
	src := op.Sources()
	x := in[src.X]
	m, k := x.Shape[0], x.Shape[1]
	if op.Norm {
		h, done := takeScratch(x.Shape)
		defer done()
		b.rmsnorm(f32(h), f32(x), f32(in[src.Norm]), k, op.Eps)
		x = h
	}
	n2 := in[src.Weight].Shape[0] // the product's columns (codes' rows when quantized)
	y := out
	if op.GLU != graph.NoGLU {
		var done func()
		y, done = takeScratch(graph.Shape{m, n2})
		defer done()
	}
	if op.Bits > 0 {
		var prep preparedX // x is this op's own: share it with no other product
		err := b.qmatmul(y, []graph.Operand{x, in[src.Weight], in[src.Weight+1], in[src.Weight+2]},
			graph.QMatMulOp{Bits: op.Bits, GroupSize: op.GroupSize}, &prep)
		prep.release()
		if err != nil {
			return err
		}
	} else if err := b.matmul(y, x, in[src.Weight]); err != nil {
		return err
	}
	ys := f32(y)
	if op.Bias {
		add(ys, ys, f32(in[src.Bias]))
	}
	o := f32(out)
	if op.GLU != graph.NoGLU {
		glu := b.swiglu
		if op.GLU == graph.GLUGELU {
			glu = b.geglu
		}
		n := n2 / 2
		for r := range m {
			row := ys[r*n2 : (r+1)*n2]
			glu(o[r*n:(r+1)*n], row[:n], row[n:])
		}
	}
	if op.Residual {
		add(o, f32(in[src.Residual]), o) // r + y, as Add(x, MatMul(...)) was
	}
	return nil
}

// ropeKVWrite runs a RoPEKVWriteOp as RoPE of the queries and keys and
// KVWrite of keys and values.
func (b *Backend) ropeKVWrite(out graph.Operand, in []graph.Operand, op graph.RoPEKVWriteOp) error {
	qkv, pos, kc, vc, kvLen := in[0], in[1], in[2], in[3], in[4]
	m, d := qkv.Shape[0], kc.Shape[2]
	hq, hkv := op.Heads*d, op.KVHeads*d
	src := f32(qkv)
	width := hq + 2*hkv
	// split copies columns lo..lo+w-1 of every row of qkv into dst.
	split := func(dst []float32, lo, w int) {
		for r := range m {
			copy(dst[r*w:(r+1)*w], src[r*width+lo:r*width+lo+w])
		}
	}
	q := f32(out)
	split(q, 0, hq)
	if err := b.rope(q, q, i32(pos), graph.Shape{m, op.Heads, d}, op.RoPE()); err != nil {
		return err
	}
	rows, done := takeScratch(graph.Shape{m, op.KVHeads, d})
	defer done()
	r := f32(rows)
	split(r, hq, hkv)
	if err := b.rope(r, r, i32(pos), rows.Shape, op.RoPE()); err != nil {
		return err
	}
	if err := kvWrite(kc, rows, kvLen); err != nil {
		return err
	}
	split(r, hq+hkv, hkv)
	return kvWrite(vc, rows, kvLen)
}
