package cuda

import (
	"fmt"
	"slices"
	"sync"
)

// NewFake returns a CUDA backend over a fake driver that runs on any
// machine: the encoder, the launch arguments and the stream discipline are
// the real backend's, the device memory is host memory, and each launch is
// executed by exec when the stream is synchronised (as a GPU runs them
// after they are queued). Package cudatest passes an exec that runs the
// launch's kernel on the CUDA emulator, so host code, launch geometry and
// kernels are checked together without a GPU.
//
// The fake checks what a GPU would fault on or silently corrupt: every
// pointer argument must lie inside a live allocation, and memory is not
// read back before the launches that write it have run.
func NewFake(exec func(l *Launch) error) *Backend {
	return newBackend(&fakeDriver{exec: exec, next: 0x7f0000000000})
}

// Launch is one kernel launch as NewFake's executor receives it.
type Launch struct {
	Kernel string // e.g. "matvec_f16"
	File   string // the .cu file of package shaders that defines it, e.g. "matvec.cu"
	Grid   [3]int // blocks
	Block  [3]int // threads per block
	// Params are the kernel's arguments as CU_LAUNCH_PARAM_BUFFER_POINTER
	// passes them.
	Params []byte
	// Buffers are the allocations the pointer arguments point into, whole
	// and without repeats: the executor leaves the results in their Data.
	Buffers []LaunchBuffer
}

// LaunchBuffer is one device allocation: its address and its memory.
type LaunchBuffer struct {
	Base uint64
	Data []byte
}

// FakeInfo is what a fake backend reports as its device.
var FakeInfo = DeviceInfo{Name: "fake GPU (CUDA emulated on the CPU)", Major: 8, Minor: 0,
	Memory: 16 << 30, Multiprocessors: 108, Driver: 12000}

type fakeDriver struct {
	exec func(l *Launch) error

	mu     sync.Mutex
	allocs []fakeAlloc // sorted by base
	next   uint64
	queue  []*launch
}

type fakeAlloc struct {
	base uint64
	data []byte
}

func (f *fakeDriver) info() DeviceInfo { return FakeInfo }

func (f *fakeDriver) alloc(n int) (devptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.next
	// 256-byte aligned, as cuMemAlloc's, with a gap so that an overrun
	// does not land in the next allocation.
	f.next += uint64(n+255)/256*256 + 4096
	f.allocs = append(f.allocs, fakeAlloc{base: p, data: make([]byte, n)})
	return devptr(p), nil
}

// find returns the index of the allocation holding [p, p+n).
func (f *fakeDriver) find(p devptr, n int) (int, error) {
	i := allocAt(f.allocs, uint64(p))
	if i < 0 || uint64(p)+uint64(n) > f.allocs[i].base+uint64(len(f.allocs[i].data)) {
		return -1, fmt.Errorf("cuda: device address %#x (%d bytes) is not inside a live allocation", uint64(p), n)
	}
	return i, nil
}

// allocAt finds the last allocation whose base is <= p, or -1.
func allocAt(allocs []fakeAlloc, p uint64) int {
	i, found := slices.BinarySearchFunc(allocs, p, func(a fakeAlloc, p uint64) int {
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

func (f *fakeDriver) free(p devptr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := allocAt(f.allocs, uint64(p)); i >= 0 && f.allocs[i].base == uint64(p) {
		f.allocs = slices.Delete(f.allocs, i, i+1)
	}
}

func (f *fakeDriver) upload(dst devptr, src []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.flush(); err != nil {
		return err
	}
	i, err := f.find(dst, len(src))
	if err != nil {
		return err
	}
	a := f.allocs[i]
	copy(a.data[uint64(dst)-a.base:], src)
	return nil
}

func (f *fakeDriver) download(dst []byte, src devptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.flush(); err != nil {
		return err
	}
	i, err := f.find(src, len(dst))
	if err != nil {
		return err
	}
	a := f.allocs[i]
	copy(dst, a.data[uint64(src)-a.base:])
	return nil
}

func (f *fakeDriver) launch(l *launch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := kernelFiles[l.kernel]; !ok {
		return fmt.Errorf("cuda: kernel %s: not in the loaded modules (CUDA_ERROR_NOT_FOUND)", l.kernel)
	}
	f.queue = append(f.queue, l)
	return nil
}

func (f *fakeDriver) sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flush()
}

// flush runs the queued launches in order; the first failure is reported
// once, as a GPU reports a failed kernel at the next synchronisation.
func (f *fakeDriver) flush() error {
	q := f.queue
	f.queue = nil
	for _, l := range q {
		if err := f.run(l); err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", l.kernel, err)
		}
	}
	return nil
}

func (f *fakeDriver) run(l *launch) error {
	fl := &Launch{Kernel: l.kernel, File: kernelFiles[l.kernel], Grid: l.grid, Block: l.block, Params: l.params}
	seen := map[int]bool{}
	for _, p := range l.ptrs {
		i, err := f.find(p, 0)
		if err != nil {
			return err
		}
		if !seen[i] {
			seen[i] = true
			fl.Buffers = append(fl.Buffers, LaunchBuffer{Base: f.allocs[i].base, Data: f.allocs[i].data})
		}
	}
	return f.exec(fl)
}

func (f *fakeDriver) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs, f.queue = nil, nil
}
