package cuda

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Backend runs graph plans on an NVIDIA GPU. A plan is turned once into a
// list of kernel launches (kept in Plan.BackendState). Its first Run
// queues them on one stream; its second builds a CUDA graph of them
// (graph.go), and that and every later Run launches the graph once. Each
// Run waits once. Weights are copied to device memory once, when the
// model binds them (WrapHost); small writes (a plan's inputs) are staged
// in host memory and copied at the start of the next Run, a plan's inputs
// in one copy (staging.go);
// the host reads results with Read after Run.
//
// A Backend is safe for concurrent use: Runs of different plans (the
// Sessions of one Engine) may be called on different goroutines; they take
// turns on the stream. One Plan must not Run on two goroutines at once.
type Backend struct {
	drv driver

	// runMu serialises Runs: each queues its launches and waits for them,
	// so a sync never waits for another Run's launches and an error is
	// the Run's own.
	runMu sync.Mutex

	// graphs is whether plans are replayed as CUDA graphs from their
	// second Run (REDRAFTER_CUDA_GRAPHS=off: never, for comparison).
	graphs bool

	// qmv1Cols is the columns a set of the one-row quantized products'
	// blocks has (REDRAFTER_CUDA_QMV1_COLS: 8, 4 or 2), or 0: chosen per
	// launch from its grid and the SMs (qmv1Cols in quant.go).
	qmv1Cols int
	// vgroups is the column groups a block of the 8-row kernels takes
	// (REDRAFTER_CUDA_VERIFY_GROUPS; 0: auto, verifyGroups).
	vgroups int

	stage staging

	mu        sync.Mutex
	stats     Stats
	constants map[string]devptr // small read-only arrays (RoPE frequencies), by content
	// live holds the plans with an instantiated graph, destroyed when the
	// plan is freed or, at the latest, when the backend closes.
	live   map[*planState]struct{}
	closed bool
}

// Stats counts what the backend has done, for tests and `bench`.
type Stats struct {
	// Runs is the plans run; Encodes those turned into launches (once
	// per plan); Launches the kernels launched; Waits the host's waits for
	// the device (one per Run that launched anything).
	Runs, Encodes, Launches, Waits int
	// GraphBuilds is the CUDA graphs instantiated (one per plan run more
	// than once), GraphLaunches the Runs that launched one (Launches
	// counts their kernels too), and GraphFallbacks the plans whose graph
	// the driver refused, which then run as launch lists.
	GraphBuilds, GraphLaunches, GraphFallbacks int
	// Copies is the asynchronous copies of staged writes, Staged the
	// writes staged: consecutive writes to adjacent device memory go in
	// one copy.
	Copies, Staged int
}

// newBackend reads the backend's switches; a REDRAFTER_CUDA_QMV1_COLS that
// parseQMV1Cols refuses counts as auto here (Open refuses it first).
func newBackend(d driver) *Backend {
	cols, _ := parseQMV1Cols(envvar.CUDAQMV1Cols.Get())
	g, _ := verifyGroupsEnv() // Open has refused bad values; NewWithDriver's tests take auto
	return &Backend{drv: d, constants: map[string]devptr{}, live: map[*planState]struct{}{},
		graphs: !envvar.CUDAGraphs.Off(), qmv1Cols: cols, vgroups: g}
}

// verifyGroupsEnv reads REDRAFTER_CUDA_VERIFY_GROUPS: 0 for auto, else 1,
// 2, 4 or 8. Unset is 1, the kernels measured on a GPU: auto's rule waits
// for one (none was lent after it was written, 2026-11-28).
func verifyGroupsEnv() (int, error) {
	switch v := envvar.CUDAVerifyGroups.Get(); v {
	case "":
		return 1, nil
	case "auto":
		return 0, nil
	case "1", "2", "4", "8":
		return int(v[0] - '0'), nil
	default:
		return 0, fmt.Errorf("%s=%q: want auto, 1, 2, 4 or 8", envvar.CUDAVerifyGroups.Name(), v)
	}
}

// Name implements graph.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device describes the GPU.
func (b *Backend) Device() DeviceInfo { return b.drv.info() }

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Counts implements graph.Counter: one stream submission per Run.
func (b *Backend) Counts() graph.Counts {
	s := b.Stats()
	return graph.Counts{Waits: s.Waits, Dispatches: s.Launches, CommandBuffers: s.Waits}
}

// MemoryLimit implements graph.MemoryLimiter: the device's memory.
func (b *Backend) MemoryLimit() int64 { return b.drv.info().Memory }

// InvariantRows is how many rows one pass may hold while each row's result
// stays the same bits as alone, and the Group cuts its joint passes there:
// 64 (the matvec kernels keep the bits up to 256 rows, beyond which f16
// and bf16 weights go to the tensor cores; 64 is the row budget measured
// for Metal's joint passes, kept until one is measured on a GPU here).
func (b *Backend) InvariantRows() int { return matvecMaxRows }

// DefaultKVCache is the KV cache's element type unless asked otherwise:
// f16, which halves the bytes attention reads per step (as on Metal).
func (b *Backend) DefaultKVCache() graph.DType { return graph.F16 }

// RecommendedBeam is the default ReDrafter beam (W, L) on this GPU: 1×5,
// the fastest measured on an H200 for the TinyLlama-shaped model in f16
// and in 4 bits (docs/BENCHMARKS.md, "CUDA on a real GPU"). A pass over 17
// tokens (4×5) still costs twice a decode step there, more than the wider
// beam's extra accepted tokens (4.46 against 3.91 per step) buy back.
func (b *Backend) RecommendedBeam() (width, length int) { return recommendedBeam(b.drv.info()) }

// recommendedBeam is the same for every GPU until one measures otherwise.
func recommendedBeam(DeviceInfo) (width, length int) { return 1, 5 }

// Close releases the device. Buffers still allocated are released with
// it, and so are the graphs of plans not yet freed. It waits for a Run in
// progress.
func (b *Backend) Close() error {
	b.runMu.Lock()
	defer b.runMu.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for k, p := range b.constants {
		b.drv.free(p)
		delete(b.constants, k)
	}
	for st := range b.live {
		st.exec.destroy()
		st.exec = nil
		delete(b.live, st)
	}
	b.mu.Unlock()
	b.stage.close(b.drv)
	b.drv.close()
	return nil
}

// Buffer is device memory.
type Buffer struct {
	ptr   devptr
	size  int
	freed bool

	// host is an input block's host copy (AllocInputs), nil for any
	// other buffer; [lo, hi) is what Writes changed since the last Run,
	// and writes how many there were (guarded by the staging's mutex).
	host           []byte
	lo, hi, writes int
}

// Size implements graph.Buffer.
func (x *Buffer) Size() int { return x.size }

// Alloc implements graph.Backend.
func (b *Backend) Alloc(size int) (graph.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("cuda: alloc of %d bytes", size)
	}
	// An empty buffer still gets an address, so that a launch over it
	// passes a valid pointer (it reads nothing).
	p, err := b.drv.alloc(max(size, 4))
	if err != nil {
		return nil, fmt.Errorf("cuda: alloc of %d bytes: %w", size, err)
	}
	return &Buffer{ptr: p, size: size}, nil
}

// AllocInputs implements graph.InputBlocker: a plan's inputs in one
// device buffer with a host copy, so that the writes of a step, in any
// order, reach the device in one asynchronous copy (staging.go).
func (b *Backend) AllocInputs(size int) (graph.Buffer, error) {
	buf, err := b.Alloc(size)
	if err != nil {
		return nil, err
	}
	x := buf.(*Buffer)
	x.host = make([]byte, size)
	return x, nil
}

// WrapHost implements graph.Backend by copying data to device memory once:
// the weights live on the GPU, which reads them at its own bandwidth.
// (Mapping host memory into the device's address space would save the
// copy and the device memory, and read it over PCIe at every step.)
func (b *Backend) WrapHost(data []byte) (graph.Buffer, error) {
	buf, err := b.Alloc(len(data))
	if err != nil {
		return nil, err
	}
	if err := b.drv.upload(buf.(*Buffer).ptr, data); err != nil {
		b.Free(buf)
		return nil, fmt.Errorf("cuda: copying %d bytes to the device: %w", len(data), err)
	}
	return buf, nil
}

// Free implements graph.Backend.
func (b *Backend) Free(buf graph.Buffer) {
	x, ok := buf.(*Buffer)
	if !ok || x.freed {
		return
	}
	x.freed = true
	// A staged write into it must not land in whatever memory takes its
	// place.
	b.stage.drop(x.ptr)
	b.drv.free(x.ptr)
}

func (b *Backend) own(buf graph.Buffer) (*Buffer, error) {
	x, ok := buf.(*Buffer)
	if !ok {
		return nil, fmt.Errorf("cuda: buffer %T is not from this backend", buf)
	}
	if x.freed {
		return nil, fmt.Errorf("cuda: use of a freed buffer")
	}
	return x, nil
}

// Write implements graph.Backend.
func (b *Backend) Write(dst graph.Buffer, off int, src []byte) error {
	x, err := b.own(dst)
	if err != nil {
		return err
	}
	if err := graph.CheckWrite("cuda", off, len(src), x.size); err != nil {
		return err
	}
	if x.host != nil {
		b.stage.writeInput(x, off, src)
		return nil
	}
	return b.stage.write(b.drv, x.ptr, x.ptr+devptr(off), src)
}

// Read implements graph.Backend.
func (b *Backend) Read(src graph.Buffer, off int, dst []byte) error {
	x, err := b.own(src)
	if err != nil {
		return err
	}
	if err := graph.CheckRead("cuda", off, len(dst), x.size); err != nil {
		return err
	}
	if err := b.stage.flushAndWait(b.drv); err != nil {
		return err
	}
	return b.drv.download(dst, x.ptr+devptr(off))
}

// kernelFiles maps each kernel to its .cu file, from the embedded PTX.
var kernelFiles = func() map[string]string {
	m := map[string]string{}
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			panic(err) // the embedded PTX is checked by tests
		}
		for _, n := range names {
			m[n] = f
		}
	}
	return m
}()

func hasKernel(name string) bool { _, ok := kernelFiles[name]; return ok }

// Supports implements graph.Backend: an op is supported when the kernels
// its encoding launches exist for its dtypes.
func (b *Backend) Supports(op graph.Op, in []graph.DType) bool {
	dt := func(i int) graph.DType {
		if i < len(in) {
			return in[i]
		}
		return 0
	}
	switch op := op.(type) {
	case graph.ReshapeOp, graph.SliceOp:
		return true
	case graph.EmbedOp:
		return dt(1) == graph.I32 && hasKernel("embed_"+dt(0).String())
	case graph.MatMulOp:
		return dt(0) == graph.F32 && hasKernel("matvec_"+dt(1).String())
	case graph.QMatMulOp:
		return dt(0) == graph.F32 && dt(1) == graph.U32 && dt(2) == dt(3) && hasKernel(fmt.Sprintf("qmatvec_%d_%v", op.Bits, dt(2)))
	case graph.QEmbedOp:
		return dt(0) == graph.U32 && dt(1) == dt(2) && hasKernel(fmt.Sprintf("qembed_%d_%v", op.Bits, dt(1)))
	case graph.DequantizeOp:
		return dt(0) == graph.U32 && dt(1) == dt(2) && hasKernel(fmt.Sprintf("dequant_%d_%v", op.Bits, dt(1)))
	case graph.KVWriteOp:
		return dt(1) == graph.F32 && hasKernel("kv_write_"+dt(0).String())
	case graph.KVCompactOp:
		return hasKernel("kv_compact_" + dt(0).String())
	case graph.LinearOp:
		return linearSupports(op, dt)
	case graph.RoPEKVWriteOp:
		return dt(0) == graph.F32 && dt(1) == graph.I32 && dt(2) == dt(3) && dt(4) == graph.I32 &&
			hasKernel("rope_kv_write_neox_"+dt(2).String())
	case graph.AttentionOp:
		return dt(0) == graph.F32 && dt(1) == dt(2) && hasKernel("attention_tree_"+dt(1).String())
	case graph.RMSNormOp:
		return dt(0) == graph.F32 && dt(1) == graph.F32
	case graph.RoPEOp, graph.SiLUOp, graph.SwiGLUOp, graph.GeGLUOp, graph.SoftCapOp, graph.AddOp, graph.MulOp, graph.ConcatOp,
		graph.LogSoftmaxOp, graph.ArgmaxOp, graph.TopKOp:
		return dt(0) == graph.F32
	case graph.GatherRowsOp:
		return hasKernel("gather_rows_" + dt(0).String())
	case graph.TakeAlongOp:
		return dt(0) == graph.F32 && hasKernel("take_along_f32")
	case graph.RNNStepOp:
		return dt(0) == graph.F32 && dt(1) == graph.F32 && dt(2) == dt(3) && dt(4) == graph.F32 && hasKernel("rnn_step_"+dt(2).String())
	case graph.WarpLogSoftmaxOp:
		return dt(0) == graph.F32 && hasKernel("warp_log_softmax_f32")
	case graph.BeamTopOp:
		return dt(0) == graph.I32 && dt(1) == graph.F32 && hasKernel("beam_top_f32")
	case graph.BeamChainsOp:
		return dt(0) == graph.I32 && dt(1) == graph.I32 && hasKernel("beam_chains_i32")
	case graph.AcceptChainsOp:
		return dt(0) == graph.I32 && dt(1) == graph.I32 && hasKernel("accept_chains_i32")
	}
	return false
}

// linearSupports reports whether a float LinearOp's sources have the
// dtypes its kernels take: f32 activations, gain, bias and residual.
func linearSupports(op graph.LinearOp, dt func(int) graph.DType) bool {
	s := op.Sources()
	for _, i := range []int{s.X, s.Norm, s.Bias, s.Residual} {
		if i >= 0 && dt(i) != graph.F32 {
			return false
		}
	}
	if op.Bits > 0 {
		// codes, scales, biases as QMatMulOp's
		return dt(s.Weight) == graph.U32 && dt(s.Weight+1) == dt(s.Weight+2) &&
			hasKernel(fmt.Sprintf("qlinear_norm_%d_%v", op.Bits, dt(s.Weight+1)))
	}
	return hasKernel("linear_" + dt(s.Weight).String())
}

// FusesLayers implements graph.FusedLayers: a decode layer is six launches
// (LinearOp and RoPEKVWriteOp) rather than seventeen, and at batch 1 each
// costs about its launch floor.
func (b *Backend) FusesLayers() bool { return true }

// planState is a plan's launches, kept between its Runs, with the buffers
// they use (checked before each Run: a plan must not outlive them), what
// each step reads and writes (for the graph's edges), and the graph once
// built.
type planState struct {
	backend    *Backend
	launches   []*launch
	launchStep []int    // by launch: its step
	access     []access // by step
	bufs       []*Buffer

	runs       int       // Runs that queued the launches or the graph
	exec       graphExec // the instantiated graph, from the second Run
	graphTried bool      // a graph was built, or the driver refused one
}

// Run implements graph.Backend: it encodes the plan (the first time),
// copies the staged writes, queues the plan's launches (first Run) or its
// graph (later Runs) and waits once. The calling goroutine holds its
// thread and the context for the whole Run (enter), not per launch.
func (b *Backend) Run(p *graph.Plan) error {
	st, ok := p.BackendState.(*planState)
	if !ok || st.backend != b {
		var err error
		if st, err = b.encodePlan(p); err != nil {
			return err
		}
		p.BackendState = st
	}
	for _, x := range st.bufs {
		if x.freed {
			return fmt.Errorf("cuda: a plan uses a freed buffer")
		}
	}
	b.runMu.Lock()
	defer b.runMu.Unlock()
	// The staging memory is copied from asynchronously: no Write may
	// touch it until this Run has waited.
	b.stage.mu.Lock()
	defer b.stage.mu.Unlock()
	if err := b.drv.enter(); err != nil {
		return err
	}
	defer b.drv.exit()
	b.mu.Lock()
	b.stats.Runs++
	b.mu.Unlock()
	copies, staged, queueErr := b.stage.queueLocked(b.drv)
	if copies == 0 && len(st.launches) == 0 {
		return queueErr
	}
	n, graphed := 0, false
	if queueErr == nil && len(st.launches) > 0 {
		n, graphed, queueErr = b.queuePlan(st)
	}
	// Wait for what was queued even after a failed launch, so that no
	// work of this Run is still running when it returns.
	syncErr := b.drv.sync()
	b.stage.resetLocked()
	b.mu.Lock()
	b.stats.Launches += n
	b.stats.Waits++
	b.stats.Copies += copies
	b.stats.Staged += staged
	if graphed {
		b.stats.GraphLaunches++
	}
	b.mu.Unlock()
	if queueErr != nil {
		return queueErr
	}
	return syncErr
}

// queuePlan queues a plan's kernels: as launches on its first Run, as its
// graph from the second (built then, so that one-off plans never pay for
// it). It returns how many kernels it queued and whether as a graph.
func (b *Backend) queuePlan(st *planState) (n int, graphed bool, err error) {
	st.runs++
	if st.runs >= 2 && st.exec == nil && !st.graphTried && b.graphs {
		st.graphTried = true
		exec, err := b.buildGraph(st)
		b.mu.Lock()
		if err != nil {
			// A driver without graphs (or refusing this one) still runs
			// the plan: as the launch list it was, which is slower but
			// the same work.
			b.stats.GraphFallbacks++
			b.mu.Unlock()
			slog.Warn("cuda: running a plan without a CUDA graph", "launches", len(st.launches), "err", err)
		} else {
			st.exec = exec
			b.live[st] = struct{}{}
			b.stats.GraphBuilds++
			b.mu.Unlock()
		}
	}
	if st.exec != nil {
		if err := st.exec.launch(); err != nil {
			return 0, false, fmt.Errorf("cuda: launching the graph of %d kernels: %w", len(st.launches), err)
		}
		return len(st.launches), true, nil
	}
	for _, l := range st.launches {
		if err := b.drv.launch(l); err != nil {
			return n, false, err
		}
		n++
	}
	return n, false, nil
}

// Release destroys the plan's graph; graph.Plan.Free calls it. The plan
// may still Run (as a launch list, then a new graph).
func (st *planState) Release() {
	b := st.backend
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.live[st]; ok && !b.closed {
		st.exec.destroy()
		delete(b.live, st)
	}
	st.exec, st.graphTried, st.runs = nil, false, 0
}

func (b *Backend) encodePlan(p *graph.Plan) (*planState, error) {
	st := &planState{backend: b}
	seen := map[*Buffer]bool{}
	for i := range p.Steps {
		s := &p.Steps[i]
		e := &encoder{b: b, step: s}
		if err := e.encode(); err != nil {
			return nil, fmt.Errorf("cuda: step %d %v: %w", i, s.Op, err)
		}
		st.launches = append(st.launches, e.ls...)
		for range e.ls {
			st.launchStep = append(st.launchStep, i)
		}
		st.access = append(st.access, stepAccess(s))
		for _, o := range append([]graph.Operand{s.Out}, s.In...) {
			if x, ok := o.Buf.(*Buffer); ok && !seen[x] {
				seen[x] = true
				st.bufs = append(st.bufs, x)
			}
		}
	}
	b.mu.Lock()
	b.stats.Encodes++
	b.mu.Unlock()
	return st, nil
}

// onStream runs f, which queues work on the stream and waits for it,
// between other Runs, with the goroutine entered for the hot calls.
func (b *Backend) onStream(f func() error) error {
	b.runMu.Lock()
	defer b.runMu.Unlock()
	if err := b.drv.enter(); err != nil {
		return err
	}
	defer b.drv.exit()
	return f()
}

// constant returns a device copy of data, shared by every plan that needs
// the same bytes, kept until Close.
func (b *Backend) constant(data []byte) (devptr, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.constants[string(data)]; ok {
		return p, nil
	}
	p, err := b.drv.alloc(max(len(data), 4))
	if err != nil {
		return 0, err
	}
	if err := b.drv.upload(p, data); err != nil {
		b.drv.free(p)
		return 0, err
	}
	b.constants[string(data)] = p
	return p, nil
}

// ReadBandwidth measures the GPU's streaming read bandwidth in bytes per
// second, for `redrafter bench`: read_xor_u32 over 1 GiB (an eighth of the
// device's memory when that is less), four reads per timed run, the best
// of five runs after a warm-up. Decoding reads its weights once per token,
// so its bytes per second over this is the fraction of the limit reached.
func (b *Backend) ReadBandwidth(ctx context.Context) (float64, error) {
	size := int64(1 << 30)
	if m := b.drv.info().Memory / 8; m > 0 && m < size {
		size = m
	}
	return b.readBandwidth(ctx, int(size)/16*16, 5)
}

func (b *Backend) readBandwidth(ctx context.Context, size, runs int) (float64, error) {
	const reads = 4
	blocks := 8 * max(b.drv.info().Multiprocessors, 1)
	x, err := b.drv.alloc(size)
	if err != nil {
		return 0, fmt.Errorf("cuda: read bandwidth: %w", err)
	}
	defer b.drv.free(x)
	out, err := b.drv.alloc(4 * blocks)
	if err != nil {
		return 0, fmt.Errorf("cuda: read bandwidth: %w", err)
	}
	defer b.drv.free(out)
	l := readXorLaunch(out, x, size/4, blocks)
	best := 0.0
	for i := range runs + 1 {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var elapsed time.Duration
		err := b.onStream(func() error {
			start := time.Now()
			var err error
			for range reads {
				if err = b.drv.launch(l); err != nil {
					break
				}
			}
			if serr := b.drv.sync(); err == nil {
				err = serr
			}
			elapsed = time.Since(start)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("cuda: read bandwidth: %w", err)
		}
		if i > 0 { // the first run is the warm-up
			best = max(best, float64(reads*size)/elapsed.Seconds())
		}
	}
	return best, nil
}
