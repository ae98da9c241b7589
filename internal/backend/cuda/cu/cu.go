//go:build cuda && linux

// Package cu is a thin purego binding (no cgo) of the CUDA driver API in
// libcuda.so.1: the functions the backend needs, bound to their _v2 symbols
// where the driver has them. Built only with the cuda tag on Linux.
package cu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Result is a CUresult.
type Result int32

// Results the binding names; the driver's own cuGetErrorName gives the rest.
const (
	Success       Result = 0
	NoDevice      Result = 100
	InvalidDevice Result = 101
)

// Device, Context, Module, Function and Stream are the driver's handles.
type (
	Device   int32
	Context  uintptr
	Module   uintptr
	Function uintptr
	Stream   uintptr
	DevPtr   uint64
)

// Device attributes the backend reads.
const (
	AttrMaxThreadsPerBlock      = 1
	AttrMaxSharedMemoryPerBlock = 8
	AttrMultiprocessorCount     = 16
	AttrComputeCapabilityMajor  = 75
	AttrComputeCapabilityMinor  = 76
)

// Error is a failed driver call.
type Error struct {
	Call   string
	Result Result
	Name   string
}

func (e *Error) Error() string {
	if e.Result == NoDevice {
		return fmt.Sprintf("cuda: %s: no NVIDIA GPU is visible to the driver (CUDA_ERROR_NO_DEVICE, 100): is a GPU installed, its kernel module loaded (nvidia-smi), and CUDA_VISIBLE_DEVICES not empty?", e.Call)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, int32(e.Result))
}

// Driver holds the bound functions of one loaded libcuda.
type Driver struct {
	Path string

	cuInit                    func(flags uint32) Result
	cuDriverGetVersion        func(v *int32) Result
	cuDeviceGetCount          func(n *int32) Result
	cuDeviceGet               func(d *Device, ordinal int32) Result
	cuDeviceGetName           func(name *byte, n int32, d Device) Result
	cuDeviceGetAttribute      func(v *int32, attr int32, d Device) Result
	cuDeviceTotalMem          func(bytes *uint64, d Device) Result
	cuDevicePrimaryCtxRetain  func(c *Context, d Device) Result
	cuDevicePrimaryCtxRelease func(d Device) Result
	cuCtxSetCurrent           func(c Context) Result
	cuCtxSynchronize          func() Result
	cuModuleLoadDataEx        func(m *Module, image unsafe.Pointer, n uint32, opts, vals unsafe.Pointer) Result
	cuModuleUnload            func(m Module) Result
	cuModuleGetFunction       func(f *Function, m Module, name *byte) Result
	cuMemAlloc                func(p *DevPtr, n uint64) Result
	cuMemFree                 func(p DevPtr) Result
	cuMemcpyHtoD              func(dst DevPtr, src unsafe.Pointer, n uint64) Result
	cuMemsetD8                func(dst DevPtr, v uint8, n uint64) Result
	cuStreamCreate            func(s *Stream, flags uint32) Result
	cuStreamDestroy           func(s Stream) Result
	cuGetErrorName            func(r Result, s **byte) Result
	cuMemHostAlloc            func(p *unsafe.Pointer, n uint64, flags uint32) Result
	cuMemFreeHost             func(p unsafe.Pointer) Result

	// The graph API (CUDA 12 or newer: cuGraphAddKernelNode_v2), bound
	// when the library has it; without it HasGraphs is false and the
	// backend runs plans as launch lists.
	cuGraphCreate               func(g *Graph, flags uint32) Result
	cuGraphAddKernelNode        func(n *GraphNode, g Graph, deps *GraphNode, nDeps uint64, p *kernelNodeParams) Result
	cuGraphInstantiateWithFlags func(e *GraphExec, g Graph, flags uint64) Result
	cuGraphExecDestroy          func(e GraphExec) Result
	cuGraphDestroy              func(g Graph) Result

	// The hot calls, made per launch or per Run, go through
	// purego.SyscallN on these addresses with arguments in hot's scratch
	// (no reflection, no allocation; purego.RegisterFunc's wrappers use
	// reflection and allocate on each call).
	fnLaunchKernel, fnMemcpyHtoDAsync, fnMemcpyDtoH, fnStreamSynchronize, fnGraphLaunch uintptr
	hot                                                                                 hotArgs
	syncArg                                                                             struct {
		sync.Mutex
		w [1]uintptr
	}
}

// hotArgs is the scratch of the hot calls. purego.SyscallN is variadic
// and //go:uintptrescapes: an argument list built afresh escapes to the
// heap at every call, while a slice of memory already on the heap (this,
// inside the Driver) does not allocate. The mutex makes the scratch one
// caller's at a time; uncontended, it costs no more than an atomic.
type hotArgs struct {
	sync.Mutex
	w     [11]uintptr
	extra [5]uintptr // cuLaunchKernel's "extra" array
	size  uint64     // the parameter buffer's size, which extra points to
}

// Graph, GraphNode and GraphExec are the driver's graph handles.
type (
	Graph     uintptr
	GraphNode uintptr
	GraphExec uintptr
)

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS as cuda.h (12.0 and later,
// where it is CUDA_KERNEL_NODE_PARAMS_v2) lays it out on 64-bit targets:
// func at 0, the six dimensions and the shared bytes as unsigned ints at
// 8..36, 4 bytes of padding, then kernelParams at 40, extra at 48, kern
// at 56 and ctx at 64: 72 bytes (cu_test.go checks the offsets). kern
// and ctx stay 0: the node launches func in the current context.
type kernelNodeParams struct {
	fn                   uintptr
	gridX, gridY, gridZ  uint32
	blockX, blockY, blkZ uint32
	shared               uint32
	_                    uint32
	kernelParams         uintptr
	extra                uintptr
	kern                 uintptr
	ctx                  uintptr
}

var (
	loadMu sync.Mutex
	loaded = map[string]*Driver{}
)

// Load opens the driver library at path ("libcuda.so.1" searches the
// system's library path) and binds its functions. It does not call cuInit.
func Load(path string) (*Driver, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if d, ok := loaded[path]; ok {
		return d, nil
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("cuda: cannot load the NVIDIA driver library %s: %v (is the NVIDIA driver installed?)", path, err)
	}
	d := &Driver{Path: path}
	for _, b := range []struct {
		fn  any
		sym string
	}{
		{&d.cuInit, "cuInit"},
		{&d.cuDriverGetVersion, "cuDriverGetVersion"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDeviceGetName, "cuDeviceGetName"},
		{&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuCtxSynchronize, "cuCtxSynchronize"},
		{&d.cuModuleLoadDataEx, "cuModuleLoadDataEx"},
		{&d.cuModuleUnload, "cuModuleUnload"},
		{&d.cuModuleGetFunction, "cuModuleGetFunction"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemsetD8, "cuMemsetD8_v2"},
		{&d.cuStreamCreate, "cuStreamCreate"},
		{&d.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&d.cuGetErrorName, "cuGetErrorName"},
		{&d.cuMemHostAlloc, "cuMemHostAlloc"},
		{&d.cuMemFreeHost, "cuMemFreeHost"},
	} {
		sym, err := purego.Dlsym(lib, b.sym)
		if err != nil {
			return nil, fmt.Errorf("cuda: %s has no %s: %v (driver too old?)", path, b.sym, err)
		}
		purego.RegisterFunc(b.fn, sym)
	}
	for _, b := range []struct {
		fn  *uintptr
		sym string
	}{
		{&d.fnLaunchKernel, "cuLaunchKernel"},
		{&d.fnMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&d.fnMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&d.fnStreamSynchronize, "cuStreamSynchronize"},
	} {
		sym, err := purego.Dlsym(lib, b.sym)
		if err != nil {
			return nil, fmt.Errorf("cuda: %s has no %s: %v (driver too old?)", path, b.sym, err)
		}
		*b.fn = sym
	}
	d.bindGraphs(lib)
	loaded[path] = d
	return d, nil
}

// bindGraphs binds the graph API, all of it or none.
func (d *Driver) bindGraphs(lib uintptr) {
	syms := []string{"cuGraphCreate", "cuGraphAddKernelNode_v2", "cuGraphInstantiateWithFlags", "cuGraphExecDestroy", "cuGraphDestroy", "cuGraphLaunch"}
	addr := make([]uintptr, len(syms))
	for i, s := range syms {
		a, err := purego.Dlsym(lib, s)
		if err != nil {
			return
		}
		addr[i] = a
	}
	purego.RegisterFunc(&d.cuGraphCreate, addr[0])
	purego.RegisterFunc(&d.cuGraphAddKernelNode, addr[1])
	purego.RegisterFunc(&d.cuGraphInstantiateWithFlags, addr[2])
	purego.RegisterFunc(&d.cuGraphExecDestroy, addr[3])
	purego.RegisterFunc(&d.cuGraphDestroy, addr[4])
	d.fnGraphLaunch = addr[5]
}

// HasGraphs reports whether the library has the graph API this binding
// uses (CUDA 12 or newer).
func (d *Driver) HasGraphs() bool { return d.fnGraphLaunch != 0 }

// hotCall calls fn with the n arguments in the scratch, which the caller
// holds (d.hot locked), and returns its CUresult.
func (d *Driver) hotCall(fn uintptr, n int) Result {
	r, _, _ := purego.SyscallN(fn, d.hot.w[:n]...)
	return Result(int32(r))
}

func (d *Driver) check(call string, r Result) error {
	if r == Success {
		return nil
	}
	name := "CUDA_ERROR_UNKNOWN"
	var s *byte
	if d.cuGetErrorName(r, &s) == Success && s != nil {
		name = goString(s)
	}
	return &Error{Call: call, Result: r, Name: name}
}

func goString(p *byte) string {
	var b []byte
	for ; *p != 0; p = (*byte)(unsafe.Add(unsafe.Pointer(p), 1)) {
		b = append(b, *p)
	}
	return string(b)
}

// Init is cuInit(0).
func (d *Driver) Init() error { return d.check("cuInit", d.cuInit(0)) }

// Version is the driver's CUDA version (12040 for 12.4).
func (d *Driver) Version() (int, error) {
	var v int32
	return int(v), d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v))
}

// DeviceCount is the number of visible GPUs.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	return int(n), d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n))
}

// Device returns the GPU of an ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	var dev Device
	return dev, d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal)))
}

// DeviceName is the GPU's marketing name.
func (d *Driver) DeviceName(dev Device) (string, error) {
	buf := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&buf[0], int32(len(buf)), dev)); err != nil {
		return "", err
	}
	return goString(&buf[0]), nil
}

// Attribute reads a device attribute (the Attr constants).
func (d *Driver) Attribute(dev Device, attr int) (int, error) {
	var v int32
	return int(v), d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, int32(attr), dev))
}

// TotalMem is the GPU's memory in bytes.
func (d *Driver) TotalMem(dev Device) (uint64, error) {
	var n uint64
	return n, d.check("cuDeviceTotalMem", d.cuDeviceTotalMem(&n, dev))
}

// PrimaryContext retains the device's primary context and makes it current.
func (d *Driver) PrimaryContext(dev Device) (Context, error) {
	var c Context
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c, dev)); err != nil {
		return 0, err
	}
	return c, d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(c))
}

// ReleasePrimaryContext undoes PrimaryContext.
func (d *Driver) ReleasePrimaryContext(dev Device) error {
	return d.check("cuDevicePrimaryCtxRelease", d.cuDevicePrimaryCtxRelease(dev))
}

// SetCurrent makes c the calling thread's context.
func (d *Driver) SetCurrent(c Context) error { return d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(c)) }

// LoadPTX JIT-compiles a NUL-free PTX module for the current context's GPU.
func (d *Driver) LoadPTX(ptx []byte) (Module, error) {
	img := append(append([]byte(nil), ptx...), 0)
	var m Module
	return m, d.check("cuModuleLoadDataEx", d.cuModuleLoadDataEx(&m, unsafe.Pointer(&img[0]), 0, nil, nil))
}

// Unload releases a module.
func (d *Driver) Unload(m Module) error { return d.check("cuModuleUnload", d.cuModuleUnload(m)) }

// Function looks a kernel up by name.
func (d *Driver) Function(m Module, name string) (Function, error) {
	b := append([]byte(name), 0)
	var f Function
	if err := d.check("cuModuleGetFunction", d.cuModuleGetFunction(&f, m, &b[0])); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// Launch params: CU_LAUNCH_PARAM_BUFFER_POINTER, _SIZE and _END.
const (
	launchParamEnd           = 0
	launchParamBufferPointer = 1
	launchParamBufferSize    = 2
)

// Launch starts f on s with its arguments as one buffer laid out as the
// kernel's parameters (CU_LAUNCH_PARAM_BUFFER_POINTER). params must stay
// unmoved until the call returns; the driver copies it.
func (d *Driver) Launch(f Function, grid, block [3]int, shared int, s Stream, params []byte, name string) error {
	h := &d.hot
	h.Lock()
	h.size = uint64(len(params))
	var p uintptr
	if len(params) > 0 {
		p = uintptr(unsafe.Pointer(&params[0]))
	}
	// The driver reads the "extra" array as void*s. Go's collector does not
	// move heap memory; KeepAlive holds params until the call returns, and
	// the scratch lives in d.
	h.extra = [5]uintptr{launchParamBufferPointer, p, launchParamBufferSize, uintptr(unsafe.Pointer(&h.size)), launchParamEnd}
	h.w = [11]uintptr{uintptr(f), uintptr(uint32(grid[0])), uintptr(uint32(grid[1])), uintptr(uint32(grid[2])),
		uintptr(uint32(block[0])), uintptr(uint32(block[1])), uintptr(uint32(block[2])), uintptr(uint32(shared)),
		uintptr(s), 0, uintptr(unsafe.Pointer(&h.extra[0]))}
	r := d.hotCall(d.fnLaunchKernel, 11)
	runtime.KeepAlive(params)
	h.Unlock()
	if err := d.check("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	return nil
}

// NewGraph creates an empty graph.
func (d *Driver) NewGraph() (Graph, error) {
	var g Graph
	return g, d.check("cuGraphCreate", d.cuGraphCreate(&g, 0))
}

// AddKernelNode adds a launch of f to g after deps, with its arguments as
// one buffer as in Launch. The driver copies the arguments into the node.
func (d *Driver) AddKernelNode(g Graph, deps []GraphNode, f Function, grid, block [3]int, shared int, params []byte, name string) (GraphNode, error) {
	size := uint64(len(params))
	var p uintptr
	if len(params) > 0 {
		p = uintptr(unsafe.Pointer(&params[0]))
	}
	extra := [5]uintptr{launchParamBufferPointer, p, launchParamBufferSize, uintptr(unsafe.Pointer(&size)), launchParamEnd}
	np := kernelNodeParams{fn: uintptr(f),
		gridX: uint32(grid[0]), gridY: uint32(grid[1]), gridZ: uint32(grid[2]),
		blockX: uint32(block[0]), blockY: uint32(block[1]), blkZ: uint32(block[2]),
		shared: uint32(shared), extra: uintptr(unsafe.Pointer(&extra[0]))}
	var dp *GraphNode
	if len(deps) > 0 {
		dp = &deps[0]
	}
	var n GraphNode
	r := d.cuGraphAddKernelNode(&n, g, dp, uint64(len(deps)), &np)
	runtime.KeepAlive(params)
	runtime.KeepAlive(&extra)
	runtime.KeepAlive(&size)
	if err := d.check("cuGraphAddKernelNode", r); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return n, nil
}

// Instantiate makes an executable graph of g; g may be destroyed after.
func (d *Driver) Instantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	return e, d.check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&e, g, 0))
}

// LaunchGraph queues one run of e on s.
func (d *Driver) LaunchGraph(e GraphExec, s Stream) error {
	h := &d.hot
	h.Lock()
	h.w[0], h.w[1] = uintptr(e), uintptr(s)
	r := d.hotCall(d.fnGraphLaunch, 2)
	h.Unlock()
	return d.check("cuGraphLaunch", r)
}

// DestroyGraph releases a graph.
func (d *Driver) DestroyGraph(g Graph) error { return d.check("cuGraphDestroy", d.cuGraphDestroy(g)) }

// DestroyGraphExec releases an executable graph.
func (d *Driver) DestroyGraphExec(e GraphExec) error {
	return d.check("cuGraphExecDestroy", d.cuGraphExecDestroy(e))
}

// HostAlloc returns n bytes of page-locked host memory, which the device
// copies from asynchronously and without staging.
func (d *Driver) HostAlloc(n int) ([]byte, error) {
	var p unsafe.Pointer
	if err := d.check("cuMemHostAlloc", d.cuMemHostAlloc(&p, uint64(n), 0)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc.
func (d *Driver) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return d.check("cuMemFreeHost", d.cuMemFreeHost(unsafe.Pointer(&b[0])))
}

// CopyToDeviceAsync queues a copy of src (memory from HostAlloc, which
// must not change until s is synchronised) to dst on s.
func (d *Driver) CopyToDeviceAsync(dst DevPtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	h := &d.hot
	h.Lock()
	h.w[0], h.w[1], h.w[2], h.w[3] = uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(s)
	r := d.hotCall(d.fnMemcpyHtoDAsync, 4)
	h.Unlock()
	return d.check("cuMemcpyHtoDAsync", r)
}

// Alloc allocates n bytes of device memory.
func (d *Driver) Alloc(n int) (DevPtr, error) {
	var p DevPtr
	return p, d.check("cuMemAlloc", d.cuMemAlloc(&p, uint64(n)))
}

// Free releases device memory.
func (d *Driver) Free(p DevPtr) error { return d.check("cuMemFree", d.cuMemFree(p)) }

// CopyToDevice copies src to dst (synchronous).
func (d *Driver) CopyToDevice(dst DevPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(dst, unsafe.Pointer(&src[0]), uint64(len(src))))
}

// CopyToHost copies from src into dst (synchronous).
func (d *Driver) CopyToHost(dst []byte, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	h := &d.hot
	h.Lock()
	h.w[0], h.w[1], h.w[2] = uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))
	r := d.hotCall(d.fnMemcpyDtoH, 3)
	runtime.KeepAlive(dst)
	h.Unlock()
	return d.check("cuMemcpyDtoH", r)
}

// Zero sets n bytes at p to 0.
func (d *Driver) Zero(p DevPtr, n int) error {
	return d.check("cuMemsetD8", d.cuMemsetD8(p, 0, uint64(n)))
}

// NewStream creates a stream.
func (d *Driver) NewStream() (Stream, error) {
	var s Stream
	return s, d.check("cuStreamCreate", d.cuStreamCreate(&s, 0))
}

// DestroyStream releases a stream.
func (d *Driver) DestroyStream(s Stream) error {
	return d.check("cuStreamDestroy", d.cuStreamDestroy(s))
}

// Sync waits for everything queued on s. Its argument has a scratch of
// its own, so that other calls are not held up while the GPU works.
func (d *Driver) Sync(s Stream) error {
	d.syncArg.Lock()
	d.syncArg.w[0] = uintptr(s)
	r, _, _ := purego.SyscallN(d.fnStreamSynchronize, d.syncArg.w[:]...)
	d.syncArg.Unlock()
	return d.check("cuStreamSynchronize", Result(int32(r)))
}
