//go:build cuda && linux

package cuda

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func init() {
	graph.Register("cuda", func() (graph.Backend, error) { return Open() })
}

// LibraryPath is the driver library Open loads; the system's library path
// is searched for it.
const LibraryPath = "libcuda.so.1"

// Open opens GPU 0 through the NVIDIA driver: its primary context, one
// stream, and the kernels' PTX (embedded; the driver's JIT compiles it for
// the GPU), each module named in the error if the JIT refuses it.
func Open() (*Backend, error) {
	if _, err := parseQMV1Cols(envvar.CUDAQMV1Cols.Get()); err != nil {
		return nil, err
	}
	if _, err := verifyGroupsEnv(); err != nil {
		return nil, err
	}
	d, err := openDriver(LibraryPath)
	if err != nil {
		return nil, err
	}
	return newBackend(d), nil
}

// Devices lists the GPUs the driver sees.
func Devices() ([]DeviceInfo, error) {
	d, err := cu.Load(LibraryPath)
	if err != nil {
		return nil, err
	}
	if err := d.Init(); err != nil {
		return nil, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	var infos []DeviceInfo
	for i := range n {
		dev, err := d.Device(i)
		if err != nil {
			return nil, err
		}
		info, err := deviceInfo(d, dev)
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func deviceInfo(d *cu.Driver, dev cu.Device) (DeviceInfo, error) {
	var info DeviceInfo
	var err error
	if info.Name, err = d.DeviceName(dev); err != nil {
		return info, err
	}
	for _, a := range []struct {
		attr int
		v    *int
	}{{cu.AttrComputeCapabilityMajor, &info.Major}, {cu.AttrComputeCapabilityMinor, &info.Minor},
		{cu.AttrMultiprocessorCount, &info.Multiprocessors}} {
		if *a.v, err = d.Attribute(dev, a.attr); err != nil {
			return info, err
		}
	}
	mem, err := d.TotalMem(dev)
	if err != nil {
		return info, err
	}
	info.Memory = int64(mem)
	info.Driver, err = d.Version()
	return info, err
}

// realDriver runs launches on GPU 0 through libcuda. A CUDA context is
// current per OS thread, and goroutines move between threads: the hot
// calls (launch, sync, the async copies, graph launches) are made between
// enter and exit, which lock the goroutine to its thread and make the
// context current once per Run; every other call does so itself
// (current), which nests inside enter.
type realDriver struct {
	d      *cu.Driver
	dev    cu.Device
	ctx    cu.Context
	stream cu.Stream
	inf    DeviceInfo

	mu      sync.Mutex
	modules map[string]cu.Module   // by .cu file
	funcs   map[string]cu.Function // by kernel
}

func openDriver(path string) (*realDriver, error) {
	d, err := cu.Load(path)
	if err != nil {
		return nil, err
	}
	if err := d.Init(); err != nil {
		return nil, err
	}
	r := &realDriver{d: d, modules: map[string]cu.Module{}, funcs: map[string]cu.Function{}}
	if r.dev, err = d.Device(0); err != nil {
		return nil, err
	}
	if r.inf, err = deviceInfo(d, r.dev); err != nil {
		return nil, err
	}
	if r.inf.Major < 7 {
		return nil, fmt.Errorf("cuda: %s has compute capability %d.%d; the kernels need 7.0 or newer", r.inf.Name, r.inf.Major, r.inf.Minor)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r.ctx, err = d.PrimaryContext(r.dev); err != nil {
		return nil, err
	}
	if r.stream, err = d.NewStream(); err != nil {
		_ = d.ReleasePrimaryContext(r.dev)
		return nil, err
	}
	// JIT every module now: a PTX the driver refuses is an error naming its
	// file at open, not a failed step later.
	for _, f := range shaders.Files() {
		ptx, err := shaders.PTX(f)
		if err == nil {
			r.modules[f], err = d.LoadPTX(ptx)
		}
		if err != nil {
			r.closeLocked()
			return nil, fmt.Errorf("cuda: loading the kernels of %s: %w", f, err)
		}
	}
	return r, nil
}

func (r *realDriver) info() DeviceInfo { return r.inf }

// current runs f on a locked thread with the context current.
func (r *realDriver) current(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := r.d.SetCurrent(r.ctx); err != nil {
		return err
	}
	return f()
}

func (r *realDriver) alloc(n int) (devptr, error) {
	var p cu.DevPtr
	err := r.current(func() error {
		var err error
		if p, err = r.d.Alloc(n); err != nil {
			return err
		}
		if err = r.d.Zero(p, n); err != nil {
			_ = r.d.Free(p)
		}
		return err
	})
	return devptr(p), err
}

func (r *realDriver) free(p devptr) {
	_ = r.current(func() error { return r.d.Free(cu.DevPtr(p)) })
}

// upload and download use the legacy default stream, which waits for the
// backend's stream (created blocking) to finish what it was given.
func (r *realDriver) upload(dst devptr, src []byte) error {
	return r.current(func() error { return r.d.CopyToDevice(cu.DevPtr(dst), src) })
}

func (r *realDriver) download(dst []byte, src devptr) error {
	return r.current(func() error { return r.d.CopyToHost(dst, cu.DevPtr(src)) })
}

func (r *realDriver) function(kernel string) (cu.Function, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.funcs[kernel]; ok {
		return f, nil
	}
	file, ok := kernelFiles[kernel]
	if !ok {
		return 0, fmt.Errorf("cuda: no kernel %s in the shaders", kernel)
	}
	f, err := r.d.Function(r.modules[file], kernel)
	if err != nil {
		return 0, err
	}
	r.funcs[kernel] = f
	return f, nil
}

// enter locks the calling goroutine to its thread and makes the context
// current there, for the hot calls until exit.
func (r *realDriver) enter() error {
	runtime.LockOSThread()
	if err := r.d.SetCurrent(r.ctx); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

func (r *realDriver) exit() { runtime.UnlockOSThread() }

// launchFunction is l's kernel, looked up once per launch and kept in it
// (a plan's launches are reused at every Run).
func (r *realDriver) launchFunction(l *launch) (cu.Function, error) {
	if l.fn != 0 {
		return cu.Function(l.fn), nil
	}
	f, err := r.function(l.kernel)
	if err == nil {
		l.fn = uintptr(f)
	}
	return f, err
}

func (r *realDriver) launch(l *launch) error {
	f, err := r.launchFunction(l)
	if err != nil {
		return err
	}
	return r.d.Launch(f, l.grid, l.block, 0, r.stream, l.params, l.kernel)
}

func (r *realDriver) sync() error { return r.d.Sync(r.stream) }

func (r *realDriver) uploadAsync(dst devptr, src []byte) error {
	return r.d.CopyToDeviceAsync(cu.DevPtr(dst), src, r.stream)
}

func (r *realDriver) hostAlloc(n int) ([]byte, error) {
	var b []byte
	err := r.current(func() error {
		var err error
		b, err = r.d.HostAlloc(n)
		return err
	})
	return b, err
}

func (r *realDriver) hostFree(b []byte) {
	_ = r.current(func() error { return r.d.FreeHost(b) })
}

// newGraph builds the graph node by node (explicitly, not by stream
// capture: the edges are the plan's hazards, not the stream's order),
// instantiates it and destroys the template, which the executable graph
// does not need.
func (r *realDriver) newGraph(nodes []graphNode) (graphExec, error) {
	if !r.d.HasGraphs() {
		return nil, fmt.Errorf("cuda: the driver %s has no cuGraphAddKernelNode_v2 (CUDA 12 or newer)", r.d.Path)
	}
	var exec cu.GraphExec
	err := r.current(func() error {
		g, err := r.d.NewGraph()
		if err != nil {
			return err
		}
		defer func() { _ = r.d.DestroyGraph(g) }()
		handles := make([]cu.GraphNode, len(nodes))
		var deps []cu.GraphNode
		for i, n := range nodes {
			f, err := r.launchFunction(n.l)
			if err != nil {
				return err
			}
			deps = deps[:0]
			for _, d := range n.deps {
				deps = append(deps, handles[d])
			}
			if handles[i], err = r.d.AddKernelNode(g, deps, f, n.l.grid, n.l.block, 0, n.l.params, n.l.kernel); err != nil {
				return fmt.Errorf("node %d of %d: %w", i, len(nodes), err)
			}
		}
		exec, err = r.d.Instantiate(g)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &realGraph{r: r, exec: exec}, nil
}

// realGraph is an instantiated CUDA graph.
type realGraph struct {
	r    *realDriver
	exec cu.GraphExec
}

func (g *realGraph) launch() error { return g.r.d.LaunchGraph(g.exec, g.r.stream) }

func (g *realGraph) destroy() {
	_ = g.r.current(func() error { return g.r.d.DestroyGraphExec(g.exec) })
}

func (r *realDriver) close() {
	_ = r.current(func() error { r.closeLocked(); return nil })
}

func (r *realDriver) closeLocked() {
	for f, m := range r.modules {
		_ = r.d.Unload(m)
		delete(r.modules, f)
	}
	if r.stream != 0 {
		_ = r.d.DestroyStream(r.stream)
		r.stream = 0
	}
	_ = r.d.ReleasePrimaryContext(r.dev)
}
