package metal

// The device seam: what the backend needs from Metal. device_darwin.go
// implements it over the purego binding; fake.go implements it on any OS
// by running each step on a reference backend the caller passes (the CPU's,
// in tests) or each dispatch through the caller's executor (the emulated
// kernel), so that the encoder can be tested without a Mac.

// device is one GPU with its command queue and compiled kernels.
type device interface {
	info() DeviceInfo
	// newBuffer returns a zeroed buffer in shared storage.
	newBuffer(size int) (devBuffer, error)
	// wrap makes host memory a buffer without copying: data must start on
	// a page and be whole pages long, in memory outside Go's heap (Apple:
	// "a single VM region, typically allocated with vm_allocate or mmap").
	wrap(data []byte) (devBuffer, error)
	// pageSize is the page of wrap: 16 KiB on Apple silicon.
	pageSize() int
	// pipeline returns the compute pipeline of a kernel, compiling on first use.
	pipeline(name string) (pipeline, error)
	newCommandBuffer() (commandBuffer, error)
	// do runs f where Metal objects may be created and encoded (on darwin:
	// a locked OS thread inside an autorelease pool).
	do(f func() error) error
	close()
}

// devBuffer is device memory the CPU can also see (shared storage).
type devBuffer interface {
	contents() []byte
	release()
}

// pipeline is a compiled kernel.
type pipeline interface {
	name() string
	// maxThreads is maxTotalThreadsPerThreadgroup.
	maxThreads() int
	// release frees the pipeline state (Backend.Close).
	release()
}

// commandBuffer holds one concurrent compute encoder.
type commandBuffer interface {
	// dispatch encodes one dispatch: pipeline, buffers, bytes, threadgroup
	// memory, then dispatchThreadgroups.
	dispatch(d *dispatch)
	// barrier orders the dispatches before it before the ones after it
	// (memoryBarrierWithScope:MTLBarrierScopeBuffers).
	barrier()
	// commit ends encoding and submits.
	commit()
	// wait blocks until the command buffer completes and reports its error.
	wait() error
}

// DeviceInfo describes a GPU for `redrafter devices` and the default policy.
type DeviceInfo struct {
	Name          string // e.g. "Apple M2 Pro"
	Architecture  string // e.g. "applegpu_g14s" (empty when unknown)
	Family        string // highest GPU family supported, e.g. "Apple8"
	UnifiedMemory bool
	// RecommendedMaxWorkingSetSize, in bytes.
	WorkingSet uint64
	// MaxBufferLength, in bytes.
	MaxBuffer uint64
	Cores     int // GPU cores, 0 when unknown
}
