// Package cpu is the portable backend: pure-Go reference kernels for every
// graph op, which are the oracle every other backend is tested against, plus
// SIMD fast paths (package kernels) for the loops that decide decoding speed,
// with work split across cores.
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
	"github.com/seed9b8f47b1/redrafter/internal/quant"
)

func init() {
	graph.Register("cpu", func() (graph.Backend, error) { return New(0), nil })
}

// Backend runs plans on the CPU. Reference backends run every op with its
// plain single-threaded loop (in the op family's file); the others use the
// fast kernels.
//
// A Backend is safe for concurrent use: plans of their own (the Sessions of
// one Engine) may Run on different goroutines at once, over the same weights.
// A Run keeps its state in the plan's buffers and in scratch space it takes
// for the length of one op's chunk of work (scratch); what Runs share is
// read-only (the weights) or locked (a weight's tiles, packed at first use;
// the worker pool's queue). One Plan must not Run on two goroutines at once.
type Backend struct {
	reference bool
	noFusion  bool         // tests: run every step on its own (see addNorm)
	fused     atomic.Int64 // add-and-norm pairs run as one loop, for tests
	pool      *pool
	scratches sync.Pool // of *[]float32; see scratch

	repackedInPlace, repackedCopies atomic.Int64 // see Repacked
	repackedSymmetric               atomic.Int64 // see RepackedSymmetric
}

// scratch returns scratch space of n floats for the caller alone, until it
// hands it back with release. It belongs to one call, never to the backend
// or a worker: concurrent Runs each take their own.
func (b *Backend) scratch(n int) *[]float32 {
	s, _ := b.scratches.Get().(*[]float32)
	if s == nil {
		s = new([]float32)
	}
	if cap(*s) < n {
		*s = make([]float32, n)
	}
	*s = (*s)[:n]
	return s
}

// release returns scratch space taken with scratch; it must not be used
// afterwards.
func (b *Backend) release(s *[]float32) { b.scratches.Put(s) }

// New returns a backend that uses up to threads goroutines per op
// (0 means GOMAXPROCS).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{pool: newPool(threads)}
}

// NewReference returns a backend that runs only the pure-Go reference
// kernels, single-threaded. Tests compare every other backend with it.
func NewReference() *Backend {
	return &Backend{reference: true, pool: newPool(1)}
}

// Threads is the number of goroutines an op may use.
func (b *Backend) Threads() int { return b.pool.n }

// MemoryLimit is the machine's physical memory (graph.MemoryLimiter).
func (b *Backend) MemoryLimit() int64 { return physicalMemory() }

// Name implements graph.Backend.
func (b *Backend) Name() string {
	if b.reference {
		return "cpu-ref"
	}
	return "cpu"
}

// buffer is host memory, 4-byte aligned so it can be viewed as float32/int32.
type buffer struct {
	b []byte
	// weights marks a buffer made by WrapHost or AdoptHost: model weights,
	// which no kernel writes, so a repacked copy stays valid (see tilesOf).
	// owned marks one made by AdoptHost, whose bytes may be repacked in
	// place; repacked says they were, so they no longer hold MLX's layout.
	weights, owned, repacked bool

	mu    sync.Mutex
	tiles *packedTiles
}

func (x *buffer) Size() int { return len(x.b) }

// Alloc implements graph.Backend.
func (b *Backend) Alloc(size int) (graph.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("cpu: alloc of %d bytes", size)
	}
	words := make([]uint64, (size+7)/8) // 8-byte aligned
	return &buffer{b: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:size]}, nil
}

// WrapHost implements graph.Backend. Data that is 4-byte aligned is used in
// place; anything else is copied once.
func (b *Backend) WrapHost(data []byte) (graph.Buffer, error) {
	if len(data) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4 == 0 {
		return &buffer{b: data, weights: true}, nil
	}
	nb, _ := b.Alloc(len(data))
	copy(nb.(*buffer).b, data)
	nb.(*buffer).weights = true
	return nb, nil
}

// AdoptHost implements graph.Adopter: WrapHost for bytes nobody else will
// read, which the backend may repack in place (quantized weights, see tilesOf).
func (b *Backend) AdoptHost(data []byte) (graph.Buffer, error) {
	buf, err := b.WrapHost(data)
	if err != nil {
		return nil, err
	}
	x := buf.(*buffer)
	x.owned = true
	return x, nil
}

// Free implements graph.Backend; the garbage collector owns host memory.
func (b *Backend) Free(graph.Buffer) {}

// Write implements graph.Backend.
func (b *Backend) Write(dst graph.Buffer, off int, src []byte) error {
	x := dst.(*buffer)
	if err := x.dropTiles(); err != nil {
		return err
	}
	d := x.b
	if err := graph.CheckWrite("cpu", off, len(src), len(d)); err != nil {
		return err
	}
	copy(d[off:], src)
	return nil
}

// Read implements graph.Backend.
func (b *Backend) Read(src graph.Buffer, off int, dst []byte) error {
	x := src.(*buffer)
	if x.isRepacked() {
		return errRepacked
	}
	s := x.b
	if err := graph.CheckRead("cpu", off, len(dst), len(s)); err != nil {
		return err
	}
	copy(dst, s[off:])
	return nil
}

// Supports implements graph.Backend: the CPU runs every op on every dtype
// the graph builders accept, and the block ops on every ggml format
// package quant reads.
func (b *Backend) Supports(op graph.Op, in []graph.DType) bool {
	switch op := op.(type) {
	case graph.BlockMatMulOp:
		return blockFormat(op.Type)
	case graph.BlockEmbedOp:
		return blockFormat(op.Type)
	case graph.DequantizeBlocksOp:
		return blockFormat(op.Type)
	}
	return true
}

func blockFormat(typ string) bool { _, ok := quant.ParseGGML(typ); return ok }

// Run implements graph.Backend.
func (b *Backend) Run(p *graph.Plan) error {
	var prep preparedX // the last quantized product's x, for the next
	defer prep.release()
	for i := 0; i < len(p.Steps); i++ {
		s := &p.Steps[i]
		if _, ok := s.Op.(graph.QMatMulOp); !ok {
			prep.release()
		}
		if i+1 < len(p.Steps) && b.addNorm(s, &p.Steps[i+1]) {
			i++
			continue
		}
		if err := b.step(s, &prep); err != nil {
			return fmt.Errorf("cpu: step %d %v: %w", i, s.Op, err)
		}
	}
	return nil
}

// addNorm runs an AddOp and the RMSNormOp of its sum as one loop over rows,
// when s and t are such a pair (every layer has two: the residual stream
// plus a block's output, then the next block's norm), and reports whether
// it did. Split across the workers by rows, each adds a row and normalizes
// it while it is in its cache, where the add alone ran serially on the
// caller and the norm read the rows back across the cores. Each row gets
// the arithmetic add and rmsnorm give it. Operands that overlap other than
// exactly (a shifted alias would let one worker's row clobber another's)
// take the two steps.
func (b *Backend) addNorm(s, t *graph.Step) bool {
	if b.reference || b.noFusion {
		return false
	}
	norm, ok := t.Op.(graph.RMSNormOp)
	if _, isAdd := s.Op.(graph.AddOp); !ok || !isAdd {
		return false
	}
	same := func(a, b graph.Operand) bool { return a.Buf == b.Buf && a.Off == b.Off && a.Bytes() == b.Bytes() }
	sum, x, r, w, out := s.Out, s.In[0], s.In[1], t.In[1], t.Out
	if !same(t.In[0], sum) || x.Bytes() != sum.Bytes() || r.Bytes() != sum.Bytes() || w.Shape[0] == 0 || sum.Bytes()%(4*w.Shape[0]) != 0 {
		return false
	}
	for _, o := range []graph.Operand{x, r} {
		if overlaps(sum, o) && !same(sum, o) {
			return false
		}
	}
	for _, o := range []graph.Operand{x, r, w} {
		if overlaps(out, o) {
			return false
		}
	}
	if overlaps(out, sum) && !same(out, sum) {
		return false
	}
	d := w.Shape[0]
	y, a, c, wf, o := f32(sum), f32(x), f32(r), f32(w), f32(out)
	b.pool.parallel(len(y)/d, 1, 2, func(lo, hi int) {
		add(y[lo*d:hi*d], a[lo*d:hi*d], c[lo*d:hi*d])
		b.rmsnormRows(o, y, wf, d, norm.Eps, lo, hi)
	})
	b.fused.Add(1)
	return true
}

func bytesOf(o graph.Operand) []byte {
	return o.Buf.(*buffer).b[o.Off : o.Off+o.Bytes()]
}

func f32(o graph.Operand) []float32 {
	b := bytesOf(o)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func i32(o graph.Operand) []int32 {
	b := bytesOf(o)
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func u16(o graph.Operand) []uint16 {
	b := bytesOf(o)
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// step runs one op; prep carries a prepared x from one quantized product
// to the next. Shapes were checked when the graph was built.
func (b *Backend) step(s *graph.Step, prep *preparedX) error {
	in := s.In
	switch op := s.Op.(type) {
	case graph.EmbedOp:
		return b.embed(s.Out, in[0], in[1])
	case graph.MatMulOp:
		return b.matmul(s.Out, in[0], in[1])
	case graph.RMSNormOp:
		b.rmsnorm(f32(s.Out), f32(in[0]), f32(in[1]), in[1].Shape[0], op.Eps)
	case graph.RoPEOp:
		return b.rope(f32(s.Out), f32(in[0]), i32(in[1]), in[0].Shape, op)
	case graph.AttentionOp:
		return b.attention(s.Out, in, op)
	case graph.KVWriteOp:
		return kvWrite(in[0], in[1], in[2])
	case graph.KVCompactOp:
		return kvCompact(in[0], in[1], in[2])
	case graph.SiLUOp:
		b.silu(f32(s.Out), f32(in[0]))
	case graph.SwiGLUOp:
		b.swiglu(f32(s.Out), f32(in[0]), f32(in[1]))
	case graph.GeGLUOp:
		b.geglu(f32(s.Out), f32(in[0]), f32(in[1]))
	case graph.SoftCapOp:
		for i, x := range f32(in[0]) { // a row of logits a token: no split
			f32(s.Out)[i] = softCap(x, op.Cap)
		}
	case graph.AddOp:
		add(f32(s.Out), f32(in[0]), f32(in[1]))
	case graph.MulOp:
		mul(f32(s.Out), f32(in[0]), f32(in[1]))
	case graph.ConcatOp:
		concat(f32(s.Out), f32(in[0]), f32(in[1]), in[0].Shape[0])
	case graph.LogSoftmaxOp:
		logSoftmax(f32(s.Out), f32(in[0]), last(in[0].Shape))
	case graph.ArgmaxOp:
		argmax(i32(s.Out), f32(in[0]), in[0].Shape[1])
	case graph.TopKOp:
		topK(i32(s.Out), f32(in[0]), in[0].Shape[1], op.K)
	case graph.GatherRowsOp:
		return gatherRows(s.Out, in[0], in[1])
	case graph.TakeAlongOp:
		return takeAlong(f32(s.Out), f32(in[0]), i32(in[1]), in[0].Shape[1], in[1].Shape[1])
	case graph.RNNStepOp:
		return b.rnnStep(s.Out, in)
	case graph.WarpLogSoftmaxOp:
		warpLogSoftmax(f32(s.Out), f32(in[0]), in[0].Shape[1], op)
	case graph.BeamTopOp:
		beamTop(i32(s.Out), i32(in[0]), f32(in[1]), in[1].Shape[0], in[1].Shape[1], op.Width)
	case graph.BeamChainsOp:
		beamChains(i32(s.Out), i32(in[0]), i32(in[1]), op.Depth)
	case graph.AcceptChainsOp:
		acceptChains(i32(s.Out), i32(in[0]), i32(in[1]), op.Width)
	case graph.QMatMulOp:
		return b.qmatmul(s.Out, in, op, prep)
	case graph.LinearOp:
		return b.linear(s.Out, in, op)
	case graph.RoPEKVWriteOp:
		return b.ropeKVWrite(s.Out, in, op)
	case graph.QEmbedOp:
		return b.qembed(s.Out, in, op)
	case graph.DequantizeOp:
		return b.dequantize(s.Out, in, op)
	case graph.BlockMatMulOp:
		return b.blockMatMul(s.Out, in, op)
	case graph.BlockEmbedOp:
		return b.blockEmbed(s.Out, in, op)
	case graph.DequantizeBlocksOp:
		return b.dequantizeBlocks(s.Out, in[0], op)
	default:
		return fmt.Errorf("unsupported op %v", s.Op)
	}
	return nil
}

func last(s graph.Shape) int { return s[len(s)-1] }
