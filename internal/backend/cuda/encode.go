package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// encoder turns one plan step into launches (ops.go builds each one).
type encoder struct {
	b    *Backend
	step *graph.Step
	ls   []*launch
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
	s := e.step
	out, in, err := e.ptrs()
	if err != nil {
		return err
	}
	shape := func(i int) graph.Shape { return s.In[i].Shape }
	dtype := func(i int) graph.DType { return s.In[i].DType }
	switch op := s.Op.(type) {
	case graph.EmbedOp:
		v, d := shape(0)[0], shape(0)[1]
		e.add(embedLaunch(out, in[0], in[1], dtype(0), shape(1).Numel(), d, v))
	case graph.QEmbedOp:
		n, k := shape(3).Numel(), s.Out.Shape[1]
		e.add(qembedLaunch(out, in[0], in[1], in[2], in[3], op.Bits, dtype(1), n, k, shape(0)[0], op.GroupSize))
	case graph.MatMulOp:
		m, k := shape(0)[0], shape(0)[1]
		switch dt := dtype(1); {
		case m >= mmaMinRows && (dt == graph.F16 || dt == graph.BF16):
			e.add(matmulMMALaunch(out, in[0], in[1], dt, m, k, shape(1)[0]))
		case vecWeights(in[1], dt, k):
			e.add(matvec8Launch(out, in[0], in[1], dt, m, k, shape(1)[0]))
		default:
			e.add(matvecLaunch(out, in[0], in[1], dt, m, k, shape(1)[0]))
		}
	case graph.QMatMulOp:
		m, k := shape(0)[0], shape(0)[1]
		if !codesAligned(in[1]) {
			return fmt.Errorf("quantized weight codes at %#x are not 16-byte aligned", uint64(in[1]))
		}
		e.add(qmatvecLaunch(out, in[0], in[1], in[2], in[3], op.Bits, dtype(2), m, k, shape(1)[0], op.GroupSize))
	case graph.DequantizeOp:
		n, k := s.Out.Shape[0], s.Out.Shape[1]
		e.add(dequantLaunch(out, in[0], in[1], in[2], op.Bits, dtype(1), n, k, op.GroupSize))
	case graph.RMSNormOp:
		m, d := lastDim(shape(0))
		e.add(rmsNormLaunch(out, in[0], in[1], m, d, op.Eps))
	case graph.RoPEOp:
		freq := make([]byte, 4*len(op.InvFreq))
		for j, f := range op.InvFreq {
			binary.LittleEndian.PutUint32(freq[4*j:], math.Float32bits(f))
		}
		fp, err := e.b.constant(freq)
		if err != nil {
			return err
		}
		x := shape(0)
		e.add(ropeLaunch(out, in[0], in[1], fp, op.NeoX, x[0], x[1], x[2], len(op.InvFreq)))
	case graph.AttentionOp:
		q, k := shape(0), shape(1)
		l, err := attentionLaunch(out, in[0], in[1], in[2], in[3], in[4], dtype(1), q[0], q[1], k[0], q[2], k[1], op.Scale)
		if err != nil {
			return err
		}
		e.add(l)
	case graph.KVWriteOp:
		c := shape(0) // [KVH, C, D]
		e.add(kvWriteLaunch(in[0], in[1], in[2], dtype(0), shape(1)[0], c[0]*c[2], c[1], c[2]))
	case graph.KVCompactOp:
		c := shape(0)
		e.add(kvCompactLaunch(in[0], in[1], in[2], dtype(0), shape(2).Numel(), c[0]*c[2], c[1], c[2]))
	case graph.SiLUOp:
		e.add(siluLaunch(out, in[0], shape(0).Numel()))
	case graph.SwiGLUOp:
		e.add(swigluLaunch(out, in[0], in[1], shape(0).Numel()))
	case graph.AddOp:
		e.add(binaryLaunch("add_f32", out, in[0], in[1], shape(0).Numel(), shape(1).Numel()))
	case graph.MulOp:
		e.add(binaryLaunch("mul_f32", out, in[0], in[1], shape(0).Numel(), shape(1).Numel()))
	case graph.ConcatOp:
		m, da := lastDim(shape(0))
		_, db := lastDim(shape(1))
		e.add(concatLaunch(out, in[0], in[1], m, da, db))
	case graph.LogSoftmaxOp:
		m, v := lastDim(shape(0))
		e.add(logSoftmaxLaunch(out, in[0], m, v))
	case graph.ArgmaxOp:
		m, v := lastDim(shape(0))
		e.add(argmaxLaunch(out, in[0], m, v))
	case graph.TopKOp:
		m, v := lastDim(shape(0))
		e.add(topKLaunch(out, in[0], m, v, op.K))
	case graph.GatherRowsOp:
		x := shape(0)
		e.add(gatherRowsLaunch(out, in[0], in[1], dtype(0), x[0], shape(1).Numel(), x.Numel()/max(x[0], 1)))
	case graph.TakeAlongOp:
		m, v := lastDim(shape(0))
		_, k := lastDim(shape(1))
		e.add(takeAlongLaunch(out, in[0], in[1], m, v, k))
	case graph.RNNStepOp:
		m, k := shape(0)[0], shape(0)[1]
		e.add(rnnStepLaunch(out, in[0], in[1], in[2], in[3], in[4], dtype(2), m, k, shape(2)[0]))
	case graph.WarpLogSoftmaxOp:
		m, v := lastDim(shape(0))
		e.add(warpLogSoftmaxLaunch(out, in[0], m, v, op.K, op.Masked))
	case graph.BeamTopOp:
		rows, v := lastDim(shape(1))
		e.add(beamTopLaunch(out, in[0], in[1], shape(0)[1], rows, v, op.Width))
	case graph.BeamChainsOp:
		w := shape(1)[1]
		e.add(beamChainsLaunch(out, in[0], in[1], w, graph.ChainsLength(shape(0)[0], w), op.Depth))
	case graph.AcceptChainsOp:
		e.add(acceptChainsLaunch(out, in[0], in[1], op.Width, graph.ChainsLength(shape(0)[0], op.Width)))
	default:
		return fmt.Errorf("no kernel for %v", s.Op)
	}
	for _, l := range e.ls {
		if !hasKernel(l.kernel) {
			return fmt.Errorf("kernel %s is not in the shaders", l.kernel)
		}
	}
	return nil
}
