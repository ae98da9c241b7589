package graph

import (
	"os"
	"sync"
	"unsafe"
)

// Host memory outside Go's heap. A unified-memory GPU can use host memory in
// place, but only in whole pages (Metal's newBufferWithBytesNoCopy), so the
// backend must see the pages around a tensor. That is harmless in a mapped
// file, whose pages are all mapped and belong to nobody else, and fatal in
// Go's heap, where the rest of a page belongs to other objects and a pointer
// into them stops the garbage collector ("found bad pointer in Go heap").
// Go gives no way to ask whether memory is in its heap, so whoever maps
// memory records it here (internal/model/formats records each mmapped file), and
// backends wrap without copying only what lies inside a record.

type hostMapping struct{ lo, hi uintptr }

var (
	mappedMu sync.Mutex
	mapped   = map[*hostMapping]struct{}{}
)

// RecordMapped records data as host memory outside Go's heap: data must
// start on a page boundary, as mmap's result does, and it counts as mapped
// through the end of its last page (mmap maps whole pages). Call forget
// before the memory is unmapped.
func RecordMapped(data []byte) (forget func()) {
	if len(data) == 0 {
		return func() {}
	}
	page := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	m := &hostMapping{lo: lo, hi: (lo + uintptr(len(data)) + page - 1) &^ (page - 1)}
	mappedMu.Lock()
	mapped[m] = struct{}{}
	mappedMu.Unlock()
	return func() {
		mappedMu.Lock()
		delete(mapped, m)
		mappedMu.Unlock()
	}
}

// InMapped reports whether the n bytes from address p lie inside one memory
// region recorded by RecordMapped.
func InMapped(p uintptr, n int) bool {
	_, _, ok := MappedRegion(p, n)
	return ok
}

// MappedRegion returns the recorded region, [lo, hi) through the end of its
// last page, that holds the n bytes from address p.
func MappedRegion(p uintptr, n int) (lo, hi uintptr, ok bool) {
	if n < 0 || p+uintptr(n) < p {
		return 0, 0, false
	}
	mappedMu.Lock()
	defer mappedMu.Unlock()
	for m := range mapped {
		if p >= m.lo && p+uintptr(n) <= m.hi {
			return m.lo, m.hi, true
		}
	}
	return 0, 0, false
}
