package metal

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Backend runs graph plans on a Metal device. A plan is turned once into a
// list of dispatches with its barriers and command-buffer cuts (kept in
// Plan.BackendState), and each Run replays it: one concurrent compute
// encoder per command buffer, the first committed early, one wait at the end.
//
// A Backend is safe for concurrent use: different plans (the Sessions of one
// Engine) may Run on different goroutines at once. What Runs share is locked
// (pipelines, the buffer pool, Stats) or read-only (the weights); each Run
// encodes its own command buffers on the device's queue. One Plan must not
// Run on two goroutines at once.
type Backend struct {
	dev    device
	policy Policy
	pool   *pool

	mu       sync.Mutex
	pipes    map[string]pipeline
	pipeErrs map[string]error // kernels that failed to build: not retried
	stats    Stats
	// hostBytes is the host memory given to the device by WrapHost and not
	// freed (the weights), for KVBudget.
	hostBytes int64
	// views are the no-copy device buffers over mapped weights (WrapHost).
	views []*hostView
}

// Stats counts what the backend has encoded, for tests and `bench`. Waits
// counts the host's waits for the device: one per Run that submitted work.
type Stats struct {
	Runs, Encodes, Dispatches, Barriers, CommandBuffers, Waits int
}

func newBackend(dev device, p Policy) *Backend {
	return &Backend{dev: dev, policy: p, pool: newPool(dev), pipes: map[string]pipeline{}, pipeErrs: map[string]error{}}
}

// Name implements graph.Backend.
func (b *Backend) Name() string { return "metal" }

// Device describes the GPU.
func (b *Backend) Device() DeviceInfo { return b.dev.info() }

// Policy is the command-buffer policy in use.
func (b *Backend) Policy() Policy { return b.policy }

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Counts implements graph.Counter.
func (b *Backend) Counts() graph.Counts {
	s := b.Stats()
	return graph.Counts{Waits: s.Waits, Dispatches: s.Dispatches, CommandBuffers: s.CommandBuffers}
}

// Close releases the pipelines, the pooled buffers and the device.
func (b *Backend) Close() error {
	b.mu.Lock()
	for name, p := range b.pipes {
		p.release()
		delete(b.pipes, name)
	}
	b.mu.Unlock()
	b.pool.drain()
	b.dev.close()
	return nil
}

// Buffer is Metal memory in shared storage: the CPU reads and writes it
// directly, the GPU sees the same bytes. It may be a window of a larger
// device buffer (base), as when host memory is wrapped from its page start.
type Buffer struct {
	dev   devBuffer
	base  int
	size  int
	class int       // pool size class; -1 when not pooled (WrapHost)
	view  *hostView // the shared no-copy view it is a window of, if any
	freed bool
}

// Size implements graph.Buffer.
func (x *Buffer) Size() int { return x.size }

func (x *Buffer) bytes() []byte { return x.dev.contents()[x.base : x.base+x.size] }

// Alloc implements graph.Backend. Buffers come from a pool of size classes.
func (b *Backend) Alloc(size int) (graph.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("metal: alloc of %d bytes", size)
	}
	if max := b.dev.info().MaxBuffer; max != 0 && uint64(size) > max {
		return nil, fmt.Errorf("metal: a buffer of %d bytes is larger than this GPU's largest buffer (maxBufferLength, %d bytes)", size, max)
	}
	return b.pool.get(size)
}

// WrapHost implements graph.Backend. Memory mapped outside Go's heap (an
// mmapped weight file, recorded with graph.RecordMapped) is used without
// copying, through views: no-copy device buffers over whole pages of the
// mapping (newBufferWithBytesNoCopy takes whole pages), each from the page
// of the tensor that made it to the end of the mapping or as far as one
// device buffer reaches (maxBufferLength). Later tensors inside a view
// share it, and one that crosses a view's end starts a new view, which
// overlaps the last, so that every tensor lies whole in one view (as
// llama.cpp splits a model larger than maxBufferLength). The Buffer is the
// window at the tensor's offset in its view (base). The GPU only reads
// weights, so the neighbouring bytes it could see are never written.
//
// Everything else is copied once into memory the device owns: Go heap
// memory above all (weights converted at load), whose neighbouring page
// bytes belong to other objects, so that no pointer the backend keeps ever
// leaves the allocation it came from; and data that is not 4-byte aligned
// (kernels read it as words). A tensor larger than maxBufferLength is an
// error. Wrapped memory must stay mapped and unmodified until Free.
func (b *Backend) WrapHost(data []byte) (graph.Buffer, error) {
	if len(data) == 0 {
		return b.pool.get(0)
	}
	if max := b.dev.info().MaxBuffer; max != 0 && uint64(len(data)) > max {
		return nil, fmt.Errorf("metal: a tensor of %d bytes is larger than this GPU's largest buffer (maxBufferLength, %d bytes)", len(data), max)
	}
	b.mu.Lock()
	b.hostBytes += int64(len(data))
	b.mu.Unlock()
	if x := b.wrapMapped(data); x != nil {
		return x, nil
	}
	db, err := b.dev.newBuffer(len(data))
	if err != nil {
		b.mu.Lock()
		b.hostBytes -= int64(len(data))
		b.mu.Unlock()
		return nil, err
	}
	copy(db.contents(), data)
	return &Buffer{dev: db, size: len(data), class: -1}, nil
}

// hostView is a no-copy device buffer over pages [lo, hi) of a mapping,
// shared by the Buffers of the tensors inside it.
type hostView struct {
	dev    devBuffer
	lo, hi uintptr
	refs   int
}

// wrapMapped returns data as a window of a view, or nil when data is not
// 4-byte aligned or not inside a recorded mapping. The slice of pages
// handed to the device is made only for mapped memory: a pointer below
// data's start is valid in a mapping and invalid in Go's heap.
func (b *Backend) wrapMapped(data []byte) *Buffer {
	ptr := unsafe.Pointer(unsafe.SliceData(data))
	p := uintptr(ptr)
	page := uintptr(b.dev.pageSize())
	lo := p / page * page
	hi := (p + uintptr(len(data)) + page - 1) / page * page
	if p%4 != 0 {
		return nil
	}
	_, mhi, ok := graph.MappedRegion(lo, int(hi-lo))
	if !ok {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range b.views {
		if v.lo <= lo && hi <= v.hi {
			v.refs++
			return &Buffer{dev: v.dev, base: int(p - v.lo), size: len(data), class: -1, view: v}
		}
	}
	n := (mhi - lo) / page * page // whole pages, at least those of data
	if max := uintptr(b.dev.info().MaxBuffer) / page * page; max != 0 && n > max {
		n = max
	}
	db, err := b.dev.wrap(unsafe.Slice((*byte)(unsafe.Add(ptr, -int(p-lo))), n))
	if err != nil {
		return nil
	}
	v := &hostView{dev: db, lo: lo, hi: lo + n, refs: 1}
	b.views = append(b.views, v)
	return &Buffer{dev: db, base: int(p - lo), size: len(data), class: -1, view: v}
}

// Free implements graph.Backend.
func (b *Backend) Free(buf graph.Buffer) {
	x, ok := buf.(*Buffer)
	if !ok || x.freed {
		return
	}
	x.freed = true
	if x.class < 0 { // from WrapHost
		b.mu.Lock()
		defer b.mu.Unlock()
		b.hostBytes -= int64(x.size)
		if v := x.view; v != nil {
			if v.refs--; v.refs > 0 {
				return
			}
			b.views = slices.DeleteFunc(b.views, func(w *hostView) bool { return w == v })
		}
		x.dev.release()
		return
	}
	b.pool.put(x)
}

func (b *Backend) own(buf graph.Buffer) (*Buffer, error) {
	x, ok := buf.(*Buffer)
	if !ok {
		return nil, fmt.Errorf("metal: buffer %T is not from this backend", buf)
	}
	if x.freed {
		return nil, fmt.Errorf("metal: use of a freed buffer")
	}
	return x, nil
}

// Write implements graph.Backend.
func (b *Backend) Write(dst graph.Buffer, off int, src []byte) error {
	x, err := b.own(dst)
	if err != nil {
		return err
	}
	if err := graph.CheckWrite("metal", off, len(src), x.size); err != nil {
		return err
	}
	copy(x.bytes()[off:], src)
	return nil
}

// Read implements graph.Backend.
func (b *Backend) Read(src graph.Buffer, off int, dst []byte) error {
	x, err := b.own(src)
	if err != nil {
		return err
	}
	if err := graph.CheckRead("metal", off, len(dst), x.size); err != nil {
		return err
	}
	copy(dst, x.bytes()[off:])
	return nil
}

// Supports implements graph.Backend.
func (b *Backend) Supports(op graph.Op, in []graph.DType) bool {
	dt := func(i int) graph.DType {
		if i < len(in) {
			return in[i]
		}
		return 0
	}
	switch op := op.(type) {
	case graph.EmbedOp:
		return hasKernel("embed", "rows", dt(0))
	case graph.QMatMulOp:
		return dt(0) == graph.F32 && dt(1) == graph.U32 && dt(2) == dt(3) &&
			hasKernel("quant", qmvVariant(op.Bits, op.GroupSize, qmvMaxM), dt(2)) && hasKernel("quant", qmmVariant(op.Bits, op.GroupSize), dt(2))
	case graph.QEmbedOp:
		return dt(0) == graph.U32 && dt(1) == dt(2) && hasKernel("quant", quantVariant("embed", op.Bits), dt(1))
	case graph.DequantizeOp:
		return dt(0) == graph.U32 && dt(1) == dt(2) && hasKernel("quant", quantVariant("dequant", op.Bits), dt(1))
	case graph.MatMulOp:
		return dt(0) == graph.F32 && hasKernel("matvec", matvecVariant(matvecMaxM), dt(1)) && hasKernel("matmul", "nt", dt(1))
	case graph.KVWriteOp:
		return dt(1) == graph.F32 && hasKernel("kv", "write", dt(0))
	case graph.KVCompactOp:
		return hasKernel("kv", "compact", dt(0))
	case graph.GatherRowsOp:
		return hasKernel("gather", "rows", dt(0))
	case graph.RNNStepOp:
		return dt(0) == graph.F32 && dt(1) == graph.F32 && dt(2) == dt(3) && dt(4) == graph.F32 && hasKernel("drafter", "rnn", dt(2))
	case graph.LinearOp:
		src := op.Sources()
		for _, i := range []int{src.X, src.Norm, src.Bias, src.Residual} {
			if i >= 0 && dt(i) != graph.F32 {
				return false
			}
		}
		if op.Bits > 0 {
			return b.Supports(graph.QMatMulOp{Bits: op.Bits, GroupSize: op.GroupSize},
				[]graph.DType{graph.F32, dt(src.Weight), dt(src.Weight + 1), dt(src.Weight + 2)})
		}
		return b.Supports(graph.MatMulOp{}, []graph.DType{graph.F32, dt(src.Weight)})
	case graph.RoPEKVWriteOp:
		return dt(0) == graph.F32 && dt(1) == graph.I32 && dt(2) == dt(3) && dt(4) == graph.I32 &&
			hasKernel("kv", "ropeneox", dt(2)) && hasKernel("kv", "ropeadjacent", dt(2))
	case graph.ReshapeOp, graph.SliceOp:
		return true
	case graph.WarpLogSoftmaxOp:
		return dt(0) == graph.F32 && hasKernel("reduce", "warp", dt(0))
	case graph.BeamTopOp:
		return dt(0) == graph.I32 && dt(1) == graph.F32 && hasKernel("reduce", "beamtop", dt(1))
	case graph.BeamChainsOp:
		return dt(0) == graph.I32 && dt(1) == graph.I32 && hasKernel("chains", "beam", dt(0))
	case graph.AcceptChainsOp:
		return dt(0) == graph.I32 && dt(1) == graph.I32 && hasKernel("chains", "accept", dt(0))
	case graph.AttentionOp:
		return dt(0) == graph.F32 && dt(1) == dt(2) && hasKernel("attention", "tree", dt(1))
	case graph.RMSNormOp, graph.RoPEOp, graph.SiLUOp, graph.SwiGLUOp, graph.GeGLUOp, graph.SoftCapOp, graph.AddOp, graph.MulOp,
		graph.ConcatOp, graph.LogSoftmaxOp, graph.ArgmaxOp, graph.TopKOp, graph.TakeAlongOp:
		return dt(0) == graph.F32
	}
	return false
}

// FusesLayers implements graph.FusedLayers: LinearOp and RoPEKVWriteOp are
// single dispatches here at decode (linear.go, kv.go), and a decode step's
// cost is mostly launches, so model code should build fused layers.
func (b *Backend) FusesLayers() bool { return true }

// planState is what a plan keeps between runs.
type planState struct {
	backend *Backend
	ds      []*dispatch
	sched   schedule
}

// Run implements graph.Backend: it encodes the plan (the first time),
// submits it, and waits once.
func (b *Backend) Run(p *graph.Plan) error {
	st, ok := p.BackendState.(*planState)
	if !ok || st.backend != b {
		var err error
		if st, err = b.encodePlan(p); err != nil {
			return err
		}
		p.BackendState = st
	}
	b.mu.Lock()
	b.stats.Runs++
	b.mu.Unlock()
	return b.submit(st)
}

func (b *Backend) encodePlan(p *graph.Plan) (*planState, error) {
	st := &planState{backend: b}
	err := b.dev.do(func() error {
		for i := range p.Steps {
			ds, err := b.encodeStep(&p.Steps[i])
			if err != nil {
				return fmt.Errorf("metal: step %d %v: %w", i, p.Steps[i].Op, err)
			}
			st.ds = append(st.ds, ds...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.sched = planSchedule(st.ds, b.policy)
	b.mu.Lock()
	b.stats.Encodes++
	b.mu.Unlock()
	return st, nil
}

// submit replays a plan's dispatches into command buffers and waits for the
// last one (a queue runs its command buffers in order). On an encoding error
// what was already encoded is still committed and waited for, so no command
// buffer is left open.
func (b *Backend) submit(st *planState) error {
	if len(st.ds) == 0 {
		return nil
	}
	var cbs []commandBuffer
	encErr := b.dev.do(func() error {
		var cb commandBuffer
		defer func() {
			if cb != nil {
				cb.commit()
				cbs = append(cbs, cb)
			}
		}()
		for i, d := range st.ds {
			for _, bd := range d.binds {
				if bd.buf != nil && bd.buf.freed {
					return fmt.Errorf("metal: %s uses a freed buffer", d.pipe.name())
				}
			}
			if cb == nil {
				var err error
				if cb, err = b.dev.newCommandBuffer(); err != nil {
					return err
				}
			}
			if st.sched.barrier[i] {
				cb.barrier()
			}
			cb.dispatch(d)
			if st.sched.commit[i] {
				cb.commit()
				cbs = append(cbs, cb)
				cb = nil
			}
		}
		return nil
	})
	var first error
	for _, cb := range cbs {
		if err := cb.wait(); err != nil && first == nil {
			first = fmt.Errorf("metal: command buffer: %w", err)
		}
	}
	if encErr != nil {
		return encErr
	}
	b.mu.Lock()
	b.stats.Dispatches += len(st.ds)
	b.stats.CommandBuffers += len(cbs)
	b.stats.Waits++ // the host waited for all of cbs at once
	for _, x := range st.sched.barrier {
		if x {
			b.stats.Barriers++
		}
	}
	b.mu.Unlock()
	return first
}

// pipeline returns a kernel's pipeline, building it on first use. The lock
// is not held while the device compiles, so that BuildKernels can compile
// files in parallel.
func (b *Backend) pipeline(name string) (pipeline, error) {
	b.mu.Lock()
	p, ok := b.pipes[name]
	err := b.pipeErrs[name]
	b.mu.Unlock()
	if ok || err != nil {
		return p, err
	}
	p, err = b.dev.pipeline(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.pipeErrs[name] = err
		return nil, err
	}
	b.pipes[name] = p
	return p, nil
}
