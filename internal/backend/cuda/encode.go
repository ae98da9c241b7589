package cuda

import (
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// encoder turns one plan step into launches. The op families live in
// files with the stem of their .cu file (matmul.go, norm.go, ...), as the
// CPU's and Metal's do: each holds the encoder's method for its ops and the
// launches of its kernels (shapes in; grid, block and arguments out), which
// the emulator tests also run against the CPU reference.
type encoder struct {
	b    *Backend
	step *graph.Step
	ls   []*launch

	out devptr   // the step's output
	in  []devptr // its inputs
}

// ptr is the device address of an operand.
func (e *encoder) ptr(o graph.Operand) (devptr, error) {
	x, err := e.b.own(o.Buf)
	if err != nil {
		return 0, err
	}
	if o.Off < 0 || o.Off+o.Bytes() > x.size {
		return 0, fmt.Errorf("operand of %d bytes at %d outside its %d-byte buffer", o.Bytes(), o.Off, x.size)
	}
	return x.ptr + devptr(o.Off), nil
}

// ptrs returns the device addresses of the step's output and inputs.
func (e *encoder) ptrs() (out devptr, in []devptr, err error) {
	if out, err = e.ptr(e.step.Out); err != nil {
		return 0, nil, err
	}
	for _, o := range e.step.In {
		p, err := e.ptr(o)
		if err != nil {
			return 0, nil, err
		}
		in = append(in, p)
	}
	return out, in, nil
}

func (e *encoder) add(ls ...*launch) { e.ls = append(e.ls, ls...) }

// shape and dtype are those of the step's input i.
func (e *encoder) shape(i int) graph.Shape { return e.step.In[i].Shape }
func (e *encoder) dtype(i int) graph.DType { return e.step.In[i].DType }

// lastDim is the length of a shape's last dimension, and rows the product
// of the others.
func lastDim(s graph.Shape) (rows, n int) {
	n = s[len(s)-1]
	if n == 0 {
		return 0, 0
	}
	return s.Numel() / n, n
}

func (e *encoder) encode() error {
	var err error
	if e.out, e.in, err = e.ptrs(); err != nil {
		return err
	}
	switch op := e.step.Op.(type) {
	case graph.MatMulOp:
		err = e.matmul()
	case graph.EmbedOp:
		err = e.embed()
	case graph.RMSNormOp:
		err = e.rmsnorm(op)
	case graph.RoPEOp:
		err = e.rope(op)
	case graph.AttentionOp:
		err = e.attention(op)
	case graph.KVWriteOp:
		err = e.kvWrite()
	case graph.KVCompactOp:
		err = e.kvCompact()
	case graph.SiLUOp, graph.SwiGLUOp, graph.GeGLUOp, graph.SoftCapOp, graph.AddOp, graph.MulOp:
		err = e.elementwise()
	case graph.ConcatOp:
		err = e.concat()
	case graph.LogSoftmaxOp, graph.ArgmaxOp, graph.TopKOp, graph.WarpLogSoftmaxOp, graph.BeamTopOp:
		err = e.reduce()
	case graph.GatherRowsOp:
		err = e.gatherRows()
	case graph.TakeAlongOp:
		err = e.takeAlong()
	case graph.RNNStepOp:
		err = e.rnnStep()
	case graph.BeamChainsOp, graph.AcceptChainsOp:
		err = e.chains()
	case graph.QMatMulOp:
		err = e.qmatmul(op)
	case graph.QEmbedOp:
		err = e.qembed(op)
	case graph.DequantizeOp:
		err = e.dequantize(op)
	case graph.LinearOp:
		err = e.linear(op)
	case graph.RoPEKVWriteOp:
		err = e.ropeKVWrite(op)
	default:
		err = fmt.Errorf("no kernel for %v", e.step.Op)
	}
	if err != nil {
		return err
	}
	for _, l := range e.ls {
		if !hasKernel(l.kernel) {
			return fmt.Errorf("kernel %s is not in the shaders", l.kernel)
		}
	}
	return nil
}
