package metal

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Go's heap pages are 8 KiB and Apple silicon's 16 KiB, so about half the
// large Go allocations start 8 KiB into a 16 KiB page. Wrapping one from its
// page start (what WrapHost once did) keeps a pointer into the neighbouring
// heap span, which the garbage collector reports as a bad pointer once that
// span is free. The fake device has 16 KiB pages, so this test sees such
// allocations on Linux too: whatever the backend keeps or hands the device
// must lie inside the allocation, or be memory of its own.
func TestWrapHostKeepsGoPointersInside(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	f := be.dev.(*fakeDevice)
	var keep [][]byte
	offsets := map[int]int{}
	for i := 0; i < 64 || offsets[8<<10] == 0; i++ {
		if i > 4096 {
			t.Fatalf("no Go allocation started 8 KiB into a 16 KiB page: %v", offsets)
		}
		data := make([]byte, 40<<10+4*(i%5))
		keep = append(keep, data)
		lo, hi := addr(data), addr(data)+uintptr(cap(data))
		offsets[int(lo%fakePage)]++
		data[0] = 1
		wb, err := be.WrapHost(data)
		if err != nil {
			t.Fatal(err)
		}
		dev := wb.(*Buffer).dev.contents()
		dlo, dhi := addr(dev), addr(dev)+uintptr(len(dev))
		// A window that reaches outside the allocation overlaps it; a copy
		// the device made elsewhere in the heap (which may end just below
		// lo) does not.
		if inside := dlo >= lo && dhi <= hi; !inside && dlo < hi && dhi > lo {
			t.Fatalf("allocation at page offset %d: the device buffer spans [%#x, %#x), the allocation [%#x, %#x)",
				lo%fakePage, dlo, dhi, lo, hi)
		}
		for _, w := range f.wraps {
			if w[0] < lo && w[1] > lo || w[0] < hi && w[1] > hi {
				t.Fatalf("allocation at page offset %d: the device was asked to wrap [%#x, %#x) across its bounds [%#x, %#x)",
					lo%fakePage, w[0], w[1], lo, hi)
			}
		}
		// Heap memory is copied: the device sees the bytes as they were.
		data[0] = 2
		got := make([]byte, 1)
		if err := be.Read(wb, 0, got); err != nil || got[0] != 1 {
			t.Fatalf("Go heap memory should be copied: read %v, %v", got, err)
		}
		be.Free(wb)
	}
	runtime.GC()
	runtime.KeepAlive(keep)
}

// The crash itself: each heap allocation wrapped right after a 24 KiB one
// that is then freed, with collections in between. Keeping a pointer into
// the freed span stops the garbage collector with "found bad pointer in Go
// heap" (GODEBUG=invalidptr=1, the default), as the old arithmetic did.
func TestWrapHostGoHeapSurvivesGC(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	var bufs []graph.Buffer
	var keep [][]byte
	for range 100 {
		x := make([]byte, 24<<10)
		data := make([]byte, 40<<10)
		keep = append(keep, data)
		wb, err := be.WrapHost(data)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, wb)
		runtime.KeepAlive(x)
		runtime.GC()
		runtime.GC()
	}
	for _, b := range bufs {
		be.Free(b)
	}
	runtime.KeepAlive(keep)
}

// mapAnon maps n bytes outside Go's heap and records them as mapped.
func mapAnon(t *testing.T, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	forget := graph.RecordMapped(m)
	t.Cleanup(func() { forget(); _ = unix.Munmap(m) })
	return m
}

func TestWrapHostMapped(t *testing.T) {
	be := newReferenceFake(DefaultPolicy(DeviceInfo{}))
	m := mapAnon(t, 8*fakePage)
	start := int((fakePage - addr(m)%fakePage) % fakePage) // the first 16 KiB page in the mapping
	// 4-byte aligned mapped memory is wrapped from the start of its 16 KiB
	// page, whatever its offset in the page; the Buffer is a window at that
	// offset.
	for _, off := range []int{0, 4, 100, fakePage - 8} {
		data := m[start+off : start+off+fakePage+100]
		wb, err := be.WrapHost(data)
		if err != nil {
			t.Fatal(err)
		}
		x := wb.(*Buffer)
		dev := x.dev.contents()
		if x.base != off || addr(dev) != addr(data)-uintptr(off) || len(dev)%fakePage != 0 || len(dev) < off+len(data) {
			t.Errorf("offset %d: base %d, device buffer of %d bytes at page offset %d", off, x.base, len(dev), addr(dev)%fakePage)
		}
		data[5] = byte(off + 1)
		got := make([]byte, 1)
		if err := be.Read(wb, 5, got); err != nil || got[0] != byte(off+1) {
			t.Errorf("offset %d: wrapped memory is not shared: %v %v", off, got, err)
		}
		be.Free(wb)
	}
	copied := func(what string, data []byte) {
		t.Helper()
		cb, err := be.WrapHost(data)
		if err != nil {
			t.Fatal(err)
		}
		data[0]++
		got := make([]byte, 1)
		if err := be.Read(cb, 0, got); err != nil || got[0] == data[0] {
			t.Errorf("%s should be copied: %v %v", what, got, err)
		}
		be.Free(cb)
	}
	// Memory kernels could not read as words is copied.
	copied("unaligned memory", m[start+1:start+50])
	// So is memory whose 16 KiB pages reach outside the mapping (Linux maps
	// 4 KiB pages): the device would see bytes nobody mapped.
	if start > 0 {
		copied("memory whose page starts before the mapping", m[start-4:start+8])
	}
	if (addr(m)+uintptr(len(m)))%fakePage != 0 {
		copied("memory whose last page ends after the mapping", m[len(m)-100:])
	}
}

func TestRecordMapped(t *testing.T) {
	m := mapAnon(t, 3*4096)
	p := uintptr(unsafe.Pointer(&m[0]))
	if !graph.InMapped(p, len(m)) || !graph.InMapped(p+100, 200) {
		t.Error("the mapping is not recorded")
	}
	if graph.InMapped(p-4096, 4096+10) || graph.InMapped(p, len(m)+4096) {
		t.Error("memory around the mapping counts as mapped")
	}
	words := make([]uint64, 1024)
	if graph.InMapped(uintptr(unsafe.Pointer(&words[0])), 8) {
		t.Error("Go heap memory counts as mapped")
	}
}

// Mapped weights are wrapped in views of at most maxBufferLength that
// tensors share; a tensor across a view's end starts a new, overlapping
// view; a tensor or buffer over maxBufferLength is an error that says so
// (it once fell back to a buffer of the same size, which Metal refuses).
func TestWrapHostViews(t *testing.T) {
	f := newReferenceDevice()
	f.inf = &DeviceInfo{Name: "fake", WorkingSet: 1 << 30, MaxBuffer: 4*fakePage + 100}
	be := newBackend(f, DefaultPolicy(*f.inf))
	m := mapAnon(t, 13*fakePage)
	start := int((fakePage - addr(m)%fakePage) % fakePage)
	for i := range m {
		m[i] = byte(i * 7)
	}
	at := func(off, n int) []byte { return m[start+off : start+off+n] }
	wrap := func(data []byte) *Buffer {
		t.Helper()
		wb, err := be.WrapHost(data)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if err := be.Read(wb, 0, got); err != nil || !slices.Equal(got, data) {
			t.Fatalf("tensor at %d: read back wrong bytes (%v)", addr(data)-addr(m), err)
		}
		return wb.(*Buffer)
	}
	t1 := wrap(at(100, 10000))
	t2 := wrap(at(20000, 30000))
	t3 := wrap(at(60000, 10000)) // pages 3 and 4: past the first view's 4 pages
	if t1.dev != t2.dev || t1.view == nil {
		t.Errorf("two tensors within 4 pages got different device buffers")
	}
	if t3.dev == t1.dev {
		t.Errorf("a tensor across the first view's end was put in it")
	}
	if len(be.views) != 2 {
		t.Errorf("%d views, want 2", len(be.views))
	}
	for _, v := range be.views {
		if n := len(v.dev.contents()); n > 4*fakePage || n%fakePage != 0 {
			t.Errorf("a view of %d bytes; the largest buffer is %d", n, f.inf.MaxBuffer)
		}
	}
	if v1, v3 := be.views[0], be.views[1]; !(v3.lo < v1.hi) {
		t.Errorf("views [%#x, %#x) and [%#x, %#x) do not overlap", v1.lo, v1.hi, v3.lo, v3.hi)
	}
	for _, big := range [][]byte{at(0, 5*fakePage), make([]byte, 5*fakePage)} {
		if _, err := be.WrapHost(big); err == nil || !strings.Contains(err.Error(), "maxBufferLength") {
			t.Errorf("a %d-byte tensor over maxBufferLength: %v", len(big), err)
		}
	}
	if _, err := be.Alloc(5 * fakePage); err == nil || !strings.Contains(err.Error(), "maxBufferLength") {
		t.Errorf("a %d-byte buffer over maxBufferLength: %v", 5*fakePage, err)
	}
	for _, x := range []*Buffer{t1, t2, t3} {
		be.Free(x)
	}
	if len(be.views) != 0 || f.live != 0 {
		t.Errorf("after Free: %d views, %d device buffers", len(be.views), f.live)
	}
}
