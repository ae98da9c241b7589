//go:build darwin

package mtl

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// Libraries and C entry points, loaded on first use.
var (
	loadOnce sync.Once
	loadErr  error

	msgSend uintptr // objc_msgSend

	mtlCreateSystemDefaultDevice func() objc.ID
	mtlCopyAllDevices            func() objc.ID
	autoreleasePoolPush          func() uintptr
	autoreleasePoolPop           func(uintptr)

	// sendPointer is objc_msgSend for selectors returning a C pointer.
	sendPointer func(id objc.ID, sel objc.SEL) unsafe.Pointer
)

// Selectors, registered once.
var (
	sel_alloc                                      = objc.RegisterName("alloc")
	sel_new                                        = objc.RegisterName("new")
	sel_release                                    = objc.RegisterName("release")
	sel_retain                                     = objc.RegisterName("retain")
	sel_respondsToSelector                         = objc.RegisterName("respondsToSelector:")
	sel_count                                      = objc.RegisterName("count")
	sel_objectAtIndex                              = objc.RegisterName("objectAtIndex:")
	sel_stringWithUTF8String                       = objc.RegisterName("stringWithUTF8String:")
	sel_UTF8String                                 = objc.RegisterName("UTF8String")
	sel_localizedDescription                       = objc.RegisterName("localizedDescription")
	sel_name                                       = objc.RegisterName("name")
	sel_architecture                               = objc.RegisterName("architecture")
	sel_hasUnifiedMemory                           = objc.RegisterName("hasUnifiedMemory")
	sel_recommendedMaxWorkingSetSize               = objc.RegisterName("recommendedMaxWorkingSetSize")
	sel_maxBufferLength                            = objc.RegisterName("maxBufferLength")
	sel_maxThreadgroupMemoryLength                 = objc.RegisterName("maxThreadgroupMemoryLength")
	sel_supportsFamily                             = objc.RegisterName("supportsFamily:")
	sel_newCommandQueue                            = objc.RegisterName("newCommandQueue")
	sel_newLibraryWithSource_options_error         = objc.RegisterName("newLibraryWithSource:options:error:")
	sel_setFastMathEnabled                         = objc.RegisterName("setFastMathEnabled:")
	sel_setMathMode                                = objc.RegisterName("setMathMode:")
	sel_setMathFloatingPointFunctions              = objc.RegisterName("setMathFloatingPointFunctions:")
	sel_setLanguageVersion                         = objc.RegisterName("setLanguageVersion:")
	sel_newFunctionWithName                        = objc.RegisterName("newFunctionWithName:")
	sel_newComputePipelineStateWithFunction        = objc.RegisterName("newComputePipelineStateWithFunction:error:")
	sel_maxTotalThreadsPerThreadgroup              = objc.RegisterName("maxTotalThreadsPerThreadgroup")
	sel_threadExecutionWidth                       = objc.RegisterName("threadExecutionWidth")
	sel_newBufferWithLength_options                = objc.RegisterName("newBufferWithLength:options:")
	sel_newBufferWithBytesNoCopy                   = objc.RegisterName("newBufferWithBytesNoCopy:length:options:deallocator:")
	sel_contents                                   = objc.RegisterName("contents")
	sel_length                                     = objc.RegisterName("length")
	sel_commandBufferWithUnretainedReferences      = objc.RegisterName("commandBufferWithUnretainedReferences")
	sel_computeCommandEncoderWithDispatchType      = objc.RegisterName("computeCommandEncoderWithDispatchType:")
	sel_commit                                     = objc.RegisterName("commit")
	sel_waitUntilCompleted                         = objc.RegisterName("waitUntilCompleted")
	sel_status                                     = objc.RegisterName("status")
	sel_error                                      = objc.RegisterName("error")
	sel_GPUStartTime                               = objc.RegisterName("GPUStartTime")
	sel_GPUEndTime                                 = objc.RegisterName("GPUEndTime")
	sel_setComputePipelineState                    = objc.RegisterName("setComputePipelineState:")
	sel_setBuffer_offset_atIndex                   = objc.RegisterName("setBuffer:offset:atIndex:")
	sel_setBytes_length_atIndex                    = objc.RegisterName("setBytes:length:atIndex:")
	sel_setThreadgroupMemoryLength_atIndex         = objc.RegisterName("setThreadgroupMemoryLength:atIndex:")
	sel_dispatchThreadgroups_threadsPerThreadgroup = objc.RegisterName("dispatchThreadgroups:threadsPerThreadgroup:")
	sel_memoryBarrierWithScope                     = objc.RegisterName("memoryBarrierWithScope:")
	sel_endEncoding                                = objc.RegisterName("endEncoding")
)

func load() error {
	loadOnce.Do(func() {
		lib, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("metal: loading libobjc: %w", err)
			return
		}
		if msgSend, err = purego.Dlsym(lib, "objc_msgSend"); err != nil {
			loadErr = fmt.Errorf("metal: objc_msgSend: %w", err)
			return
		}
		purego.RegisterLibFunc(&autoreleasePoolPush, lib, "objc_autoreleasePoolPush")
		purego.RegisterLibFunc(&autoreleasePoolPop, lib, "objc_autoreleasePoolPop")
		purego.RegisterFunc(&sendPointer, msgSend)
		m, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("%w (%v)", ErrUnavailable, err)
			return
		}
		// Command-line programs can get a nil default device unless
		// CoreGraphics is loaded.
		if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			loadErr = fmt.Errorf("metal: loading CoreGraphics: %w", err)
			return
		}
		purego.RegisterLibFunc(&mtlCreateSystemDefaultDevice, m, "MTLCreateSystemDefaultDevice")
		purego.RegisterLibFunc(&mtlCopyAllDevices, m, "MTLCopyAllDevices")
	})
	return loadErr
}

// Do runs f on a locked OS thread inside an autorelease pool.
func Do(f func() error) error {
	if err := load(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := autoreleasePoolPush()
	defer autoreleasePoolPop(pool)
	return f()
}

// send0 to send4 are objc_msgSend with 0 to 4 integer arguments, without
// reflection (unlike objc.Send and purego.RegisterFunc). Each call
// allocates its argument list (see msgArgs in abi.go): the encoder's hot
// path uses its scratch instead.
func send0(id objc.ID, sel objc.SEL) uintptr {
	r, _, _ := purego.SyscallN(msgSend, uintptr(id), uintptr(sel))
	return r
}

func send1(id objc.ID, sel objc.SEL, a uintptr) uintptr {
	r, _, _ := purego.SyscallN(msgSend, uintptr(id), uintptr(sel), a)
	return r
}

func send2(id objc.ID, sel objc.SEL, a, b uintptr) uintptr {
	r, _, _ := purego.SyscallN(msgSend, uintptr(id), uintptr(sel), a, b)
	return r
}

func send3(id objc.ID, sel objc.SEL, a, b, c uintptr) uintptr {
	r, _, _ := purego.SyscallN(msgSend, uintptr(id), uintptr(sel), a, b, c)
	return r
}

func send4(id objc.ID, sel objc.SEL, a, b, c, d uintptr) uintptr {
	r, _, _ := purego.SyscallN(msgSend, uintptr(id), uintptr(sel), a, b, c, d)
	return r
}

// nsString returns an autoreleased NSString.
func nsString(s string) objc.ID {
	return objc.ID(objc.GetClass("NSString")).Send(sel_stringWithUTF8String, s)
}

// goString copies an NSString.
func goString(s objc.ID) string {
	if s == 0 {
		return ""
	}
	return objc.Send[string](s, sel_UTF8String)
}

// nsError turns an NSError into a Go error (nil for nil).
func nsError(e objc.ID) error {
	if e == 0 {
		return nil
	}
	return fmt.Errorf("%s", goString(e.Send(sel_localizedDescription)))
}

// Object is any Objective-C object this package hands out.
type Object struct{ id objc.ID }

// Release sends release.
// Reference: https://developer.apple.com/documentation/objectivec/1418956-nsobject/1571957-release
func (o Object) Release() {
	if o.id != 0 {
		o.id.Send(sel_release)
	}
}

// Retain sends retain.
// Reference: https://developer.apple.com/documentation/objectivec/1418956-nsobject/1571946-retain
func (o Object) Retain() { o.id.Send(sel_retain) }

// IsNil reports whether the object is nil.
func (o Object) IsNil() bool { return o.id == 0 }

// Device is an MTLDevice.
// Reference: https://developer.apple.com/documentation/metal/mtldevice
type Device struct{ Object }

// CreateSystemDefaultDevice returns the default GPU, falling back to the
// first of CopyAllDevices (command-line tools may see no default).
// Reference: https://developer.apple.com/documentation/metal/1433401-mtlcreatesystemdefaultdevice
func CreateSystemDefaultDevice() (Device, error) {
	if err := load(); err != nil {
		return Device{}, err
	}
	if d := mtlCreateSystemDefaultDevice(); d != 0 {
		return Device{Object{d}}, nil
	}
	all, err := CopyAllDevices()
	if err != nil {
		return Device{}, err
	}
	if len(all) == 0 {
		return Device{}, ErrUnavailable
	}
	for _, d := range all[1:] {
		d.Release()
	}
	return all[0], nil
}

// CopyAllDevices returns every GPU, each retained.
// Reference: https://developer.apple.com/documentation/metal/1433367-mtlcopyalldevices
func CopyAllDevices() ([]Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	arr := mtlCopyAllDevices()
	if arr == 0 {
		return nil, nil
	}
	defer arr.Send(sel_release)
	n := objc.Send[uint](arr, sel_count)
	ds := make([]Device, 0, n)
	for i := uint(0); i < n; i++ {
		d := arr.Send(sel_objectAtIndex, i)
		d.Send(sel_retain)
		ds = append(ds, Device{Object{d}})
	}
	return ds, nil
}

// Name is the device's name, e.g. "Apple M2 Pro".
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433359-name
func (d Device) Name() string { return goString(d.id.Send(sel_name)) }

// ArchitectureName is architecture.name (macOS 14+), e.g. "applegpu_g14s",
// or "" when the OS has no such property.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/4213805-architecture
func (d Device) ArchitectureName() string {
	if !objc.Send[bool](d.id, sel_respondsToSelector, sel_architecture) {
		return ""
	}
	a := d.id.Send(sel_architecture)
	if a == 0 {
		return ""
	}
	return goString(a.Send(sel_name))
}

// HasUnifiedMemory reports whether CPU and GPU share memory.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/3229025-hasunifiedmemory
func (d Device) HasUnifiedMemory() bool { return objc.Send[bool](d.id, sel_hasUnifiedMemory) }

// RecommendedMaxWorkingSetSize is the memory the GPU can use without
// hurting performance, in bytes.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2369280-recommendedmaxworkingsetsize
func (d Device) RecommendedMaxWorkingSetSize() uint64 {
	return objc.Send[uint64](d.id, sel_recommendedMaxWorkingSetSize)
}

// MaxBufferLength is the largest buffer, in bytes.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2966563-maxbufferlength
func (d Device) MaxBufferLength() uint64 { return objc.Send[uint64](d.id, sel_maxBufferLength) }

// MaxThreadgroupMemoryLength is the threadgroup memory limit, in bytes.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/2877429-maxthreadgroupmemorylength
func (d Device) MaxThreadgroupMemoryLength() uint64 {
	return objc.Send[uint64](d.id, sel_maxThreadgroupMemoryLength)
}

// SupportsFamily reports whether the GPU supports a feature family.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/3143473-supportsfamily
func (d Device) SupportsFamily(family int) bool {
	return objc.Send[bool](d.id, sel_supportsFamily, family)
}

// CommandQueue is an MTLCommandQueue.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandqueue
type CommandQueue struct{ Object }

// NewCommandQueue makes a command queue.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433388-newcommandqueue
func (d Device) NewCommandQueue() (CommandQueue, error) {
	q := d.id.Send(sel_newCommandQueue)
	if q == 0 {
		return CommandQueue{}, fmt.Errorf("metal: newCommandQueue returned nil")
	}
	return CommandQueue{Object{q}}, nil
}

// Library is an MTLLibrary.
// Reference: https://developer.apple.com/documentation/metal/mtllibrary
type Library struct{ Object }

// NewLibraryWithSource compiles Metal Shading Language source in the given
// language version (LanguageVersion2_4, ...). With fastMath false the
// compiler may not reassociate or assume finite values, and sin, cos, exp
// and the like are the precise versions: MTLCompileOptions.mathMode Safe
// and mathFloatingPointFunctions Precise where the OS has them (macOS 15),
// else the deprecated fastMathEnabled. The error carries the compiler log.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433431-newlibrarywithsource
// Reference: https://developer.apple.com/documentation/metal/mtlcompileoptions/mathmode
func (d Device) NewLibraryWithSource(src string, version uint, fastMath bool) (Library, error) {
	opts := objc.ID(objc.GetClass("MTLCompileOptions")).Send(sel_new)
	defer opts.Send(sel_release)
	send1(opts, sel_setLanguageVersion, uintptr(version))
	if objc.Send[bool](opts, sel_respondsToSelector, sel_setMathMode) {
		mode, funcs := uintptr(MathModeSafe), uintptr(MathFloatingPointFunctionsPrecise)
		if fastMath {
			mode, funcs = MathModeFast, MathFloatingPointFunctionsFast
		}
		send1(opts, sel_setMathMode, mode)
		send1(opts, sel_setMathFloatingPointFunctions, funcs)
	} else {
		opts.Send(sel_setFastMathEnabled, fastMath)
	}
	var errID objc.ID
	lib := d.id.Send(sel_newLibraryWithSource_options_error, nsString(src), opts, unsafe.Pointer(&errID))
	if lib == 0 {
		if err := nsError(errID); err != nil {
			return Library{}, err
		}
		return Library{}, fmt.Errorf("newLibraryWithSource returned nil")
	}
	return Library{Object{lib}}, nil
}

// Function is an MTLFunction.
// Reference: https://developer.apple.com/documentation/metal/mtlfunction
type Function struct{ Object }

// NewFunctionWithName looks a kernel up by its host name.
// Reference: https://developer.apple.com/documentation/metal/mtllibrary/1515524-newfunctionwithname
func (l Library) NewFunctionWithName(name string) (Function, error) {
	f := l.id.Send(sel_newFunctionWithName, nsString(name))
	if f == 0 {
		return Function{}, fmt.Errorf("no function %q in the library", name)
	}
	return Function{Object{f}}, nil
}

// ComputePipelineState is an MTLComputePipelineState.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputepipelinestate
type ComputePipelineState struct{ Object }

// NewComputePipelineStateWithFunction compiles a function into a pipeline.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433395-newcomputepipelinestatewithfunct
func (d Device) NewComputePipelineStateWithFunction(f Function) (ComputePipelineState, error) {
	var errID objc.ID
	p := d.id.Send(sel_newComputePipelineStateWithFunction, f.id, unsafe.Pointer(&errID))
	if p == 0 {
		if err := nsError(errID); err != nil {
			return ComputePipelineState{}, err
		}
		return ComputePipelineState{}, fmt.Errorf("newComputePipelineStateWithFunction returned nil")
	}
	return ComputePipelineState{Object{p}}, nil
}

// MaxTotalThreadsPerThreadgroup is the pipeline's threadgroup size limit.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputepipelinestate/1414927-maxtotalthreadsperthreadgroup
func (p ComputePipelineState) MaxTotalThreadsPerThreadgroup() int {
	return int(objc.Send[uint](p.id, sel_maxTotalThreadsPerThreadgroup))
}

// ThreadExecutionWidth is the SIMD width (32 on Apple GPUs).
// Reference: https://developer.apple.com/documentation/metal/mtlcomputepipelinestate/1414911-threadexecutionwidth
func (p ComputePipelineState) ThreadExecutionWidth() int {
	return int(objc.Send[uint](p.id, sel_threadExecutionWidth))
}

// Buffer is an MTLBuffer.
// Reference: https://developer.apple.com/documentation/metal/mtlbuffer
type Buffer struct{ Object }

// NewBufferWithLength allocates a zeroed buffer.
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433375-newbufferwithlength
func (d Device) NewBufferWithLength(n int, options uint) (Buffer, error) {
	b := objc.ID(send2(d.id, sel_newBufferWithLength_options, uintptr(max(n, 1)), uintptr(options)))
	if b == 0 {
		return Buffer{}, fmt.Errorf("metal: newBufferWithLength:%d returned nil", n)
	}
	return Buffer{Object{b}}, nil
}

// NewBufferWithBytesNoCopy wraps page-aligned host memory of a whole
// number of pages without copying (no deallocator: the caller owns it).
// Reference: https://developer.apple.com/documentation/metal/mtldevice/1433382-newbufferwithbytesnocopy
func (d Device) NewBufferWithBytesNoCopy(data []byte, options uint) (Buffer, error) {
	if len(data) == 0 {
		return Buffer{}, fmt.Errorf("metal: newBufferWithBytesNoCopy of no bytes")
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	b := objc.ID(send4(d.id, sel_newBufferWithBytesNoCopy, uintptr(p), uintptr(len(data)), uintptr(options), 0))
	runtime.KeepAlive(data)
	if b == 0 {
		return Buffer{}, fmt.Errorf("metal: newBufferWithBytesNoCopy of %d bytes at %p returned nil (page-aligned?)", len(data), p)
	}
	return Buffer{Object{b}}, nil
}

// Contents is the buffer's memory as a byte slice of its length.
// Reference: https://developer.apple.com/documentation/metal/mtlbuffer/1515716-contents
func (b Buffer) Contents() []byte {
	p := sendPointer(b.id, sel_contents)
	n := send0(b.id, sel_length)
	return unsafe.Slice((*byte)(p), int(n))
}

// CommandBuffer is an MTLCommandBuffer.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer
type CommandBuffer struct{ Object }

// CommandBufferWithUnretainedReferences makes a command buffer that does
// not retain the buffers it uses (the caller keeps them alive). It is
// autoreleased; Retain it to use it outside the pool.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandqueue/1508684-commandbufferwithunretainedrefer
func (q CommandQueue) CommandBufferWithUnretainedReferences() (CommandBuffer, error) {
	c := objc.ID(send0(q.id, sel_commandBufferWithUnretainedReferences))
	if c == 0 {
		return CommandBuffer{}, fmt.Errorf("metal: commandBuffer returned nil")
	}
	return CommandBuffer{Object{c}}, nil
}

// Commit submits the command buffer.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1443003-commit
func (c CommandBuffer) Commit() { send0(c.id, sel_commit) }

// WaitUntilCompleted blocks until the GPU has run the command buffer.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1443039-waituntilcompleted
func (c CommandBuffer) WaitUntilCompleted() { send0(c.id, sel_waitUntilCompleted) }

// Status is the MTLCommandBufferStatus.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1443048-status
func (c CommandBuffer) Status() int { return int(send0(c.id, sel_status)) }

// Error is the command buffer's error, or nil.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1443040-error
func (c CommandBuffer) Error() error { return nsError(objc.ID(send0(c.id, sel_error))) }

// GPUTime is GPUEndTime - GPUStartTime, in seconds.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/1639926-gpustarttime
func (c CommandBuffer) GPUTime() float64 {
	return objc.Send[float64](c.id, sel_GPUEndTime) - objc.Send[float64](c.id, sel_GPUStartTime)
}

// ComputeCommandEncoder is an MTLComputeCommandEncoder.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder
type ComputeCommandEncoder struct {
	Object
	args *msgArgs // scratch for the hot path's arguments (abi.go)
}

// ComputeCommandEncoderWithDispatchType starts a compute pass; with
// DispatchTypeConcurrent, dispatches may overlap unless separated by
// MemoryBarrierWithScope.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandbuffer/3088442-computecommandencoderwithdispatc
func (c CommandBuffer) ComputeCommandEncoderWithDispatchType(t int) (ComputeCommandEncoder, error) {
	e := objc.ID(send1(c.id, sel_computeCommandEncoderWithDispatchType, uintptr(t)))
	if e == 0 {
		return ComputeCommandEncoder{}, fmt.Errorf("metal: computeCommandEncoder returned nil")
	}
	return ComputeCommandEncoder{Object: Object{e}, args: new(msgArgs)}, nil
}

// SetComputePipelineState sets the kernel.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443140-setcomputepipelinestate
func (e ComputeCommandEncoder) SetComputePipelineState(p ComputePipelineState) {
	purego.SyscallN(msgSend, e.args.words(uintptr(e.id), uintptr(sel_setComputePipelineState), uintptr(p.id))...)
}

// SetBufferOffsetAtIndex binds buffer(index).
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443126-setbuffer
func (e ComputeCommandEncoder) SetBufferOffsetAtIndex(b Buffer, offset, index int) {
	purego.SyscallN(msgSend, e.args.words(uintptr(e.id), uintptr(sel_setBuffer_offset_atIndex), uintptr(b.id), uintptr(offset), uintptr(index))...)
}

// SetBytesLengthAtIndex copies up to 4 KiB of data into buffer(index).
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443159-setbytes
func (e ComputeCommandEncoder) SetBytesLengthAtIndex(data []byte, index int) {
	if len(data) == 0 {
		return
	}
	// data is pinned in the scratch (on the heap, alive) until
	// objc_msgSend returns; Metal copies the bytes before it does.
	p := unsafe.Pointer(unsafe.SliceData(data))
	e.args.pin = p
	purego.SyscallN(msgSend, e.args.words(uintptr(e.id), uintptr(sel_setBytes_length_atIndex), uintptr(p), uintptr(len(data)), uintptr(index))...)
	e.args.pin = nil
}

// SetThreadgroupMemoryLengthAtIndex sizes threadgroup(index) memory (a
// multiple of 16 bytes).
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443142-setthreadgroupmemorylength
func (e ComputeCommandEncoder) SetThreadgroupMemoryLengthAtIndex(n, index int) {
	purego.SyscallN(msgSend, e.args.words(uintptr(e.id), uintptr(sel_setThreadgroupMemoryLength_atIndex), uintptr(n), uintptr(index))...)
}

// DispatchThreadgroups launches grid threadgroups of group threads.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/1443138-dispatchthreadgroups
//
// The two MTLSize structs are passed as abi.go explains, with one SyscallN
// and no allocation.
func (e ComputeCommandEncoder) DispatchThreadgroups(grid, group Size) {
	purego.SyscallN(msgSend, e.args.dispatch(runtime.GOARCH, uintptr(e.id), uintptr(sel_dispatchThreadgroups_threadsPerThreadgroup), grid, group)...)
	runtime.KeepAlive(e.args)
}

// MemoryBarrierWithScope orders the dispatches before it before those after.
// Reference: https://developer.apple.com/documentation/metal/mtlcomputecommandencoder/2966579-memorybarrierwithscope
func (e ComputeCommandEncoder) MemoryBarrierWithScope(scope int) {
	purego.SyscallN(msgSend, e.args.words(uintptr(e.id), uintptr(sel_memoryBarrierWithScope), uintptr(scope))...)
}

// EndEncoding ends the pass.
// Reference: https://developer.apple.com/documentation/metal/mtlcommandencoder/1458038-endencoding
func (e ComputeCommandEncoder) EndEncoding() { send0(e.id, sel_endEncoding) }
