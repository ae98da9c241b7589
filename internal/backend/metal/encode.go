package metal

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// encodeStep turns one graph step into its dispatches. The op families live
// in files with the stem of their .metal file (matmul.go, norm.go, ...).
func (b *Backend) encodeStep(s *graph.Step) ([]*dispatch, error) {
	e := &encoder{b: b, step: s}
	var err error
	switch op := s.Op.(type) {
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
		err = fmt.Errorf("no kernel for %v", s.Op)
	}
	if err != nil {
		return nil, err
	}
	for i, d := range e.ds {
		d.step, d.part, d.parts = s, i, len(e.ds)
	}
	return e.ds, nil
}

type encoder struct {
	b    *Backend
	step *graph.Step
	ds   []*dispatch
}

// arg is one kernel buffer after the argument struct: an operand read,
// written or both, or bytes.
type arg struct {
	op          graph.Operand
	read, write bool
	bytes       []byte
}

func rd(o graph.Operand) arg { return arg{op: o, read: true} }
func wr(o graph.Operand) arg { return arg{op: o, write: true} }
func rw(o graph.Operand) arg { return arg{op: o, read: true, write: true} }
func raw(b []byte) arg       { return arg{bytes: b} }

// launch adds a dispatch of kernel with args as buffer(0) and the given
// buffers as buffer(1), buffer(2), ... in order.
func (e *encoder) launch(kernel string, args any, grid, group [3]int, shared []int, bufs ...arg) error {
	pipe, err := e.b.pipeline(kernel)
	if err != nil {
		return err
	}
	threads := group[0] * group[1] * group[2]
	if max := pipe.maxThreads(); max > 0 && threads > max {
		return fmt.Errorf("%s: %d threads per threadgroup, the pipeline allows %d", kernel, threads, max)
	}
	for _, g := range grid {
		if g <= 0 {
			return fmt.Errorf("%s: empty grid %v", kernel, grid)
		}
	}
	var ab bytes.Buffer
	if err := binary.Write(&ab, binary.LittleEndian, args); err != nil {
		panic(err)
	}
	d := &dispatch{pipe: pipe, grid: grid, group: group, shared: shared}
	d.binds = append(d.binds, binding{index: 0, bytes: ab.Bytes()})
	for i, a := range bufs {
		if a.bytes != nil {
			if len(a.bytes) > 4096 {
				return fmt.Errorf("%s: %d bytes for buffer(%d), setBytes allows 4096", kernel, len(a.bytes), i+1)
			}
			d.binds = append(d.binds, binding{index: i + 1, bytes: a.bytes})
			continue
		}
		buf, err := e.b.own(a.op.Buf)
		if err != nil {
			return fmt.Errorf("%s: buffer(%d): %w", kernel, i+1, err)
		}
		d.binds = append(d.binds, binding{index: i + 1, buf: buf, off: a.op.Off, n: a.op.Bytes(), write: a.write})
		sp := span{buf: buf, lo: a.op.Off, hi: a.op.Off + a.op.Bytes()}
		if a.read {
			d.reads = append(d.reads, sp)
		}
		if a.write {
			d.writes = append(d.writes, sp)
		}
	}
	e.ds = append(e.ds, d)
	return nil
}

// groups1D is the grid for n threads in threadgroups of size.
func groups1D(n, size int) [3]int { return [3]int{(n + size - 1) / size, 1, 1} }

func threads1D(n int) [3]int { return [3]int{n, 1, 1} }

// sharedBytes rounds a threadgroup memory length up to Metal's 16 bytes.
func sharedBytes(floats int) int { return (4*floats + 15) &^ 15 }

func i32(n int) int32 { return int32(n) }
