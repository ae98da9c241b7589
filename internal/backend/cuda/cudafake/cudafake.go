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
// read back before the launches that write it have run.
package cudafake

import (
	"fmt"
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
func New(exec func(l *Launch) error) *Driver {
	return &Driver{exec: exec, next: 0x7f0000000000}
}

// Driver is a fake CUDA driver (a cuda.Driver). It is safe for concurrent
// use.
type Driver struct {
	exec func(l *Launch) error

	mu     sync.Mutex
	allocs []alloc // sorted by base
	next   uint64
	queue  []*cuda.Launch
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
	f.queue = append(f.queue, l)
	return nil
}

// Sync implements cuda.Driver.
func (f *Driver) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flush()
}

// flush runs the queued launches in order; the first failure is reported
// once, as a GPU reports a failed kernel at the next synchronisation.
func (f *Driver) flush() error {
	q := f.queue
	f.queue = nil
	for _, l := range q {
		if err := f.run(l); err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", l.Kernel, err)
		}
	}
	return nil
}

func (f *Driver) run(l *cuda.Launch) error {
	fl := &Launch{Launch: *l}
	seen := map[int]bool{}
	for _, p := range l.Pointers {
		i, err := f.find(p, 0)
		if err != nil {
			return err
		}
		if !seen[i] {
			seen[i] = true
			fl.Buffers = append(fl.Buffers, Buffer{Base: f.allocs[i].base, Data: f.allocs[i].data})
		}
	}
	if f.exec == nil {
		return nil
	}
	return f.exec(fl)
}

// Close implements cuda.Driver.
func (f *Driver) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs, f.queue = nil, nil
}
