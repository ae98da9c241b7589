// Package cudafake is a fake CUDA driver, for tests and the GPU
// self-test's planning: it runs on any machine, its device memory is host
// memory, and each launch is executed by a function its caller gives when
// the stream is synchronised (as a GPU runs them after they are queued).
// Package cudatest passes one that runs the launch's kernel on the CUDA
// emulator, so host code, launch geometry and kernels are checked
// together without a GPU. The programs users install do not link it.
//
// The fake checks what a GPU would fault on or silently corrupt: every
// pointer argument must lie inside a live allocation, and memory is not
// read back before the launches that write it have run. A graph's nodes
// run in a topological order drawn afresh at each launch (SetSeed), as a
// GPU may run unordered kernels in any order or at once: a dependency the
// backend forgot shows as a result that changes with the order.
package cudafake

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
)

// Launch is one kernel launch as the executor receives it.
type Launch struct {
	cuda.Launch
	// Buffers are the allocations the pointer arguments point into, whole
	// and without repeats: the executor leaves the results in their Data.
	Buffers []Buffer
}

// Buffer is one device allocation: its address and its memory.
type Buffer struct {
	Base uint64
	Data []byte
}

// Info is what a fake driver reports as its device.
var Info = cuda.DeviceInfo{Name: "fake GPU (CUDA emulated on the CPU)", Major: 8, Minor: 0,
	Memory: 16 << 30, Multiprocessors: 108, Driver: 12000}

// NewBackend returns a CUDA backend (cuda.NewWithDriver) over a fake
// driver whose launches exec executes; with a nil exec they run nothing,
// which is enough to learn which kernels a plan launches.
func NewBackend(exec func(l *Launch) error) *cuda.Backend { return cuda.NewWithDriver(New(exec)) }

// New returns a fake driver whose launches exec executes (nil: none).
// exec must not keep l after it returns: the driver reuses it, so that
// replaying a plan allocates nothing.
func New(exec func(l *Launch) error) *Driver {
	f := &Driver{exec: exec, next: 0x7f0000000000}
	f.SetSeed(0)
	return f
}

// Driver is a fake CUDA driver (a cuda.Driver). It is safe for concurrent
// use.
type Driver struct {
	exec func(l *Launch) error

	mu      sync.Mutex
	allocs  []alloc // sorted by base
	next    uint64
	queue   []queued
	rng     *rand.Rand
	calls   Calls
	scratch Launch // the launch exec gets, reused
}

// queued is a launch or a copy on the stream.
type queued struct {
	l   *cuda.Launch // a launch, or nil for a copy
	dst uint64
	src []byte
}

// Calls counts the driver calls the backend made, for tests of the host
// path: a replayed plan is one GraphLaunches and one Syncs.
type Calls struct {
	Launches, GraphLaunches, Syncs int
	// Uploads are synchronous copies to the device, AsyncCopies queued
	// ones; Downloads copies to the host.
	Uploads, AsyncCopies, Downloads int
	// Graphs is the graphs built, Destroyed those destroyed.
	Graphs, Destroyed int
}

// Calls returns the counts so far.
func (f *Driver) Calls() Calls {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// SetSeed seeds the draw of each graph launch's node order (New seeds it
// with 0; tests pass testenv.Seed to vary it between runs and replay a
// failure).
func (f *Driver) SetSeed(seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng = rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

type alloc struct {
	base uint64
	data []byte
}

// Allocations returns how many allocations are live.
func (f *Driver) Allocations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.allocs)
}

// Info implements cuda.Driver.
func (f *Driver) Info() cuda.DeviceInfo { return Info }

// Alloc implements cuda.Driver.
func (f *Driver) Alloc(n int) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.next
	// 256-byte aligned, as cuMemAlloc's, with a gap so that an overrun
	// does not land in the next allocation.
	f.next += uint64(n+255)/256*256 + 4096
	f.allocs = append(f.allocs, alloc{base: p, data: make([]byte, n)})
	return p, nil
}

// find returns the index of the allocation holding [p, p+n).
func (f *Driver) find(p uint64, n int) (int, error) {
	i := allocAt(f.allocs, p)
	if i < 0 || p+uint64(n) > f.allocs[i].base+uint64(len(f.allocs[i].data)) {
		return -1, fmt.Errorf("cuda: device address %#x (%d bytes) is not inside a live allocation", p, n)
	}
	return i, nil
}

// allocAt finds the last allocation whose base is <= p, or -1.
func allocAt(allocs []alloc, p uint64) int {
	i, found := slices.BinarySearchFunc(allocs, p, func(a alloc, p uint64) int {
		switch {
		case a.base < p:
			return -1
		case a.base > p:
			return 1
		}
		return 0
	})
	if found {
		return i
	}
	return i - 1
}

// Free implements cuda.Driver.
func (f *Driver) Free(p uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := allocAt(f.allocs, p); i >= 0 && f.allocs[i].base == p {
		f.allocs = slices.Delete(f.allocs, i, i+1)
	}
}

// Upload implements cuda.Driver.
func (f *Driver) Upload(dst uint64, src []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Uploads++
	if err := f.flush(); err != nil {
		return err
	}
	i, err := f.find(dst, len(src))
	if err != nil {
		return err
	}
	a := f.allocs[i]
	copy(a.data[dst-a.base:], src)
	return nil
}

// Download implements cuda.Driver.
func (f *Driver) Download(dst []byte, src uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Downloads++
	if err := f.flush(); err != nil {
		return err
	}
	i, err := f.find(src, len(dst))
	if err != nil {
		return err
	}
	a := f.allocs[i]
	copy(dst, a.data[src-a.base:])
	return nil
}

// Launch implements cuda.Driver.
func (f *Driver) Launch(l *cuda.Launch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.File == "" {
		return fmt.Errorf("cuda: kernel %s: not in the loaded modules (CUDA_ERROR_NOT_FOUND)", l.Kernel)
	}
	f.calls.Launches++
	f.queue = append(f.queue, queued{l: l})
	return nil
}

// UploadAsync implements cuda.Driver: the copy runs in stream order, at
// the next synchronisation, from src as it is then.
func (f *Driver) UploadAsync(dst uint64, src []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(dst, len(src)); err != nil {
		return err
	}
	f.calls.AsyncCopies++
	f.queue = append(f.queue, queued{dst: dst, src: src})
	return nil
}

// Sync implements cuda.Driver.
func (f *Driver) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Syncs++
	return f.flush()
}

// flush runs what is queued in order; the first failure is reported
// once, as a GPU reports a failed kernel at the next synchronisation.
func (f *Driver) flush() error {
	q := f.queue
	f.queue = f.queue[:0]
	for _, e := range q {
		if e.l == nil {
			i, err := f.find(e.dst, len(e.src))
			if err != nil {
				return fmt.Errorf("cuda: asynchronous copy: %w", err)
			}
			a := f.allocs[i]
			copy(a.data[e.dst-a.base:], e.src)
			continue
		}
		if err := f.run(e.l); err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", e.l.Kernel, err)
		}
	}
	return nil
}

// run checks a launch's pointers and executes it, without allocating.
func (f *Driver) run(l *cuda.Launch) error {
	fl := &f.scratch
	fl.Launch = *l
	fl.Buffers = fl.Buffers[:0]
	for _, p := range l.Pointers {
		i, err := f.find(p, 0)
		if err != nil {
			return err
		}
		base := f.allocs[i].base
		if !slices.ContainsFunc(fl.Buffers, func(b Buffer) bool { return b.Base == base }) {
			fl.Buffers = append(fl.Buffers, Buffer{Base: base, Data: f.allocs[i].data})
		}
	}
	if f.exec == nil {
		return nil
	}
	return f.exec(fl)
}

// NewGraph implements cuda.Driver. It refuses what cuGraphAddKernelNode
// would: a kernel not in the modules, a dependency on a node not yet added.
func (f *Driver) NewGraph(nodes []cuda.GraphNode) (cuda.Graph, error) {
	g := &Graph{f: f, nodes: make([]*cuda.Launch, len(nodes)), succ: make([][]int, len(nodes)),
		deps: make([]int, len(nodes)), left: make([]int, len(nodes)), ready: make([]int, 0, len(nodes))}
	for i, n := range nodes {
		if n.Launch.File == "" {
			return nil, fmt.Errorf("cuda: graph node %d: kernel %s: not in the loaded modules (CUDA_ERROR_NOT_FOUND)", i, n.Launch.Kernel)
		}
		g.nodes[i] = n.Launch
		for _, d := range n.Deps {
			if d < 0 || d >= i {
				return nil, fmt.Errorf("cuda: graph node %d depends on node %d, not added before it (CUDA_ERROR_INVALID_VALUE)", i, d)
			}
			g.succ[d] = append(g.succ[d], i)
			g.deps[i]++
		}
	}
	f.mu.Lock()
	f.calls.Graphs++
	f.mu.Unlock()
	return g, nil
}

// Graph is a fake instantiated graph (a cuda.Graph).
type Graph struct {
	f     *Driver
	nodes []*cuda.Launch
	succ  [][]int // by node: the nodes that depend on it
	deps  []int   // by node: how many it depends on
	// left and ready are a launch's scratch: the dependencies not yet
	// run, and the nodes free to run.
	left, ready []int
	destroyed   bool
}

// Launch implements cuda.Graph: it queues the nodes in a topological
// order drawn from the driver's seeded generator, a new one each launch.
func (g *Graph) Launch() error {
	f := g.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if g.destroyed {
		return fmt.Errorf("cuda: launch of a destroyed graph (CUDA_ERROR_INVALID_VALUE)")
	}
	f.calls.GraphLaunches++
	copy(g.left, g.deps)
	g.ready = g.ready[:0]
	for i, d := range g.deps {
		if d == 0 {
			g.ready = append(g.ready, i)
		}
	}
	for len(g.ready) > 0 {
		k := f.rng.IntN(len(g.ready))
		i := g.ready[k]
		g.ready[k] = g.ready[len(g.ready)-1]
		g.ready = g.ready[:len(g.ready)-1]
		f.queue = append(f.queue, queued{l: g.nodes[i]})
		for _, s := range g.succ[i] {
			if g.left[s]--; g.left[s] == 0 {
				g.ready = append(g.ready, s)
			}
		}
	}
	return nil
}

// Destroy implements cuda.Graph.
func (g *Graph) Destroy() {
	f := g.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !g.destroyed {
		g.destroyed = true
		f.calls.Destroyed++
	}
}

// Close implements cuda.Driver.
func (f *Driver) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs, f.queue = nil, nil
}
