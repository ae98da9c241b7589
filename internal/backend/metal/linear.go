package metal

import (
	"fmt"
	"runtime"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// LinearOp (graph.LinearOp): a product with the norm before it and bias,
// SwiGLU or GeGLU and residual after it. Up to Policy.MatvecMaxRows rows of x (a
// decode step, a verification tree), where launches are what a layer
// costs, it is one matvec or qmv dispatch with the rest folded in (the
// LINEAR_ bits of args.h): the kernels read every row of x whole anyway,
// so the norm costs a Σx² beside the dot products. Past that (prefill) it
// is composed from the unfused kernels (norm, products, elementwise), with
// scratch the plan owns: there the products dominate and a launch more or
// less is noise.

// fusion is what a matvec folds around its product: the linear* bits, the
// norm's epsilon, and the gain, bias and residual operands. Absent ones are
// bound to x: the kernels declare their buffers whatever the bits, Metal
// wants every declared buffer bound, and the kernels never read them.
type fusion struct {
	bits            int32
	eps             float32
	gain, bias, res graph.Operand
}

// plain is no fusion: the bare product.
func plain(x graph.Operand) fusion { return fusion{gain: x, bias: x, res: x} }

// outputsPer is the outputs of a simdgroup that computes rows weight rows:
// half of them with a GLU, which reads a gate row and an up row for each.
func (f fusion) outputsPer(rows int) int {
	if f.bits&(linearSwiGLU|linearGeGLU) != 0 {
		return rows / 2
	}
	return rows
}

// rowsOf returns rows lo..lo+n of o (its first dimension), as an operand
// over the same buffer.
func rowsOf(o graph.Operand, lo, n int) graph.Operand {
	row := o.Bytes() / o.Shape[0]
	shape := append(graph.Shape{n}, o.Shape[1:]...)
	return graph.Operand{Buf: o.Buf, Off: o.Off + lo*row, DType: o.DType, Shape: shape}
}

func (e *encoder) linear(op graph.LinearOp) error {
	src := op.Sources()
	in, out := e.step.In, e.step.Out
	x := in[src.X]
	f := plain(x)
	f.eps = op.Eps
	if op.Norm {
		f.bits |= linearNorm
		f.gain = in[src.Norm]
	}
	if op.Bias {
		f.bits |= linearBias
		f.bias = in[src.Bias]
	}
	switch op.GLU {
	case graph.GLUSiLU:
		f.bits |= linearSwiGLU
	case graph.GLUGELU:
		f.bits |= linearGeGLU
	}
	if op.Residual {
		f.bits |= linearResidual
		f.res = in[src.Residual]
	}
	var q qweight
	if op.Bits > 0 {
		q = qweight{in[src.Weight], in[src.Weight+1], in[src.Weight+2], op.Bits, op.GroupSize}
	}
	if x.Shape[0] <= e.b.policy.MatvecMaxRows {
		if op.Bits > 0 {
			return e.qmv(x, q, out, f)
		}
		return e.matvec(x, in[src.Weight], out, f)
	}
	product := func(x, dst graph.Operand, lo int) error { // x · (rows lo.. of w)ᵀ
		n := dst.Shape[1]
		if op.Bits > 0 {
			return e.qmm(x, q.rows(lo, n), dst)
		}
		return e.matmulTiles(x, rowsOf(in[src.Weight], lo, n), dst)
	}
	return e.linearComposed(op, f, product)
}

// linearComposed runs a LinearOp past the matvec rows as its definition:
// RMSNorm into scratch, the product (two, into gate and up scratch, with
// a GLU: gate and up are the weight's two halves of rows), bias adds,
// SwiGLU or GeGLU, the residual add.
func (e *encoder) linearComposed(op graph.LinearOp, f fusion, product func(x, dst graph.Operand, lo int) error) (err error) {
	x, out := e.step.In[op.Sources().X], e.step.Out
	m, k, n := x.Shape[0], x.Shape[1], out.Shape[1]
	var scratch []graph.Buffer
	defer func() {
		if err != nil || len(scratch) == 0 {
			for _, buf := range scratch {
				e.b.Free(buf)
			}
			return
		}
		// The scratch lives as long as the plan's dispatches that use it
		// (the cleanup must not reach the dispatch, hence b and not e).
		b := e.b
		runtime.AddCleanup(e.ds[len(e.ds)-1], func(bufs []graph.Buffer) {
			for _, buf := range bufs {
				b.Free(buf)
			}
		}, scratch)
	}()
	take := func(rows, cols int) (graph.Operand, error) {
		buf, err := e.b.Alloc(4 * rows * cols)
		if err != nil {
			return graph.Operand{}, err
		}
		scratch = append(scratch, buf)
		return graph.Operand{Buf: buf, DType: graph.F32, Shape: graph.Shape{rows, cols}}, nil
	}
	if op.Norm {
		h, err := take(m, k)
		if err != nil {
			return err
		}
		if err := e.launch(kernelName("norm", "rms", graph.F32), RMSNormArgs{M: i32(m), D: i32(k), Eps: op.Eps},
			[3]int{m, 1, 1}, threads1D(rowThreads), []int{sharedBytes(48)}, rd(x), rd(f.gain), wr(h)); err != nil {
			return err
		}
		x = h
	}
	add := func(a, b, dst graph.Operand) error { // dst = a + b, b broadcast over a's rows
		return e.launch(kernelName("elementwise", "add", graph.F32), ElementwiseArgs{N: i32(dst.Shape.Numel()), NB: i32(b.Shape.Numel())},
			groups1D(dst.Shape.Numel(), 256), threads1D(256), nil, rd(a), rd(b), wr(dst))
	}
	// half is the product of rows lo..lo+n of w, bias added, into dst.
	half := func(dst graph.Operand, lo int) error {
		if err := product(x, dst, lo); err != nil {
			return err
		}
		if !op.Bias {
			return nil
		}
		return add(dst, rowsOf(f.bias, lo, n), dst)
	}
	if op.GLU != graph.NoGLU {
		gate, err := take(m, n)
		if err != nil {
			return err
		}
		up, err := take(m, n)
		if err != nil {
			return err
		}
		if err := half(gate, 0); err != nil {
			return err
		}
		if err := half(up, n); err != nil {
			return err
		}
		glu := "swiglu"
		if op.GLU == graph.GLUGELU {
			glu = "geglu"
		}
		if err := e.launch(kernelName("elementwise", glu, graph.F32), ElementwiseArgs{N: i32(m * n), NB: i32(m * n)},
			groups1D(m*n, 256), threads1D(256), nil, rd(gate), rd(up), wr(out)); err != nil {
			return err
		}
	} else if err := half(out, 0); err != nil {
		return err
	}
	if op.Residual {
		if !f.res.Shape.Equal(out.Shape) {
			return fmt.Errorf("residual %v for a result %v", f.res.Shape, out.Shape)
		}
		return add(f.res, out, out) // r + y, as Add(x, MatMul(...)) was
	}
	return nil
}
