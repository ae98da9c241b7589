package graph

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
)

// Buffer is backend-owned storage. Only its backend knows what is inside.
type Buffer interface {
	Size() int // bytes
}

// Backend runs plans. Model code never sees one directly: it builds graphs,
// and the engine hands them to whichever backend was picked.
type Backend interface {
	// Name is the backend's short name: "cpu", "metal", "cuda".
	Name() string
	// Supports reports whether the backend can run op on inputs of these dtypes.
	Supports(op Op, in []DType) bool
	// Alloc returns a zeroed buffer of size bytes.
	Alloc(size int) (Buffer, error)
	// WrapHost makes host memory (typically an mmapped weight file) visible to
	// the backend, without copying when the hardware allows. data must stay
	// valid and unmodified until the buffer is freed.
	WrapHost(data []byte) (Buffer, error)
	// Free releases a buffer from Alloc or WrapHost.
	Free(b Buffer)
	// Write copies src into b at byte offset off.
	Write(b Buffer, off int, src []byte) error
	// Read copies from b at byte offset off into dst.
	Read(b Buffer, off int, dst []byte) error
	// Run executes the plan's steps in order and returns when all are done.
	Run(p *Plan) error
}

// CheckWrite and CheckRead are the bounds checks of Backend.Write and Read
// (n bytes at off in a buffer of size), with the backend's name in the error.
func CheckWrite(backend string, off, n, size int) error {
	if off < 0 || off+n > size {
		return fmt.Errorf("%s: write of %d bytes at %d into a %d-byte buffer", backend, n, off, size)
	}
	return nil
}

// CheckRead: see CheckWrite.
func CheckRead(backend string, off, n, size int) error {
	if off < 0 || off+n > size {
		return fmt.Errorf("%s: read of %d bytes at %d from a %d-byte buffer", backend, n, off, size)
	}
	return nil
}

// Adopter is a Backend that can take host memory over. AdoptHost is
// WrapHost for bytes made for the backend that the caller will never read
// or write again, so the backend may rearrange them in place (the CPU
// repacks quantized weights for its kernel there instead of in a copy).
type Adopter interface {
	AdoptHost(data []byte) (Buffer, error)
}

// InputBlocker is a Backend that holds each plan's inputs in one buffer
// of its own kind: Compile lays every input of a plan out in the buffer
// AllocInputs returns (in the order the graph declares them, each at a
// multiple of InputAlign bytes, the alignment a GPU allocation has), and
// nothing but Write changes that buffer, as no op writes an input. A GPU
// backend keeps a host copy of it, so that a step's inputs reach the
// device in one copy (CUDA).
type InputBlocker interface {
	AllocInputs(size int) (Buffer, error)
}

// InputAlign is the alignment of each input in an InputBlocker's buffer.
const InputAlign = 256

// MemoryLimiter is a Backend that knows how many bytes it can hold in all:
// the machine's memory for the CPU, the working set a GPU recommends. Model
// code checks large allocations (the KV cache) against it before making
// them, so a size from a file or a flag that cannot fit is an error rather
// than the runtime's fatal out-of-memory.
type MemoryLimiter interface {
	// MemoryLimit is the limit in bytes; 0 when unknown.
	MemoryLimit() int64
}

// Counts is the work a device backend has submitted so far: Waits is how
// often the host stopped until the device finished (each Run of a plan that
// does any work is one), Dispatches the kernels launched, CommandBuffers the
// batches they were submitted in. Per ReDrafter step these are what the
// host-device round trips cost; see drafter.Stats.
type Counts struct{ Waits, Dispatches, CommandBuffers int }

// Sub is c minus an earlier snapshot.
func (c Counts) Sub(earlier Counts) Counts {
	return Counts{c.Waits - earlier.Waits, c.Dispatches - earlier.Dispatches, c.CommandBuffers - earlier.CommandBuffers}
}

// Counter is a Backend that counts its device work (Metal, CUDA). The CPU,
// which runs on the host, has nothing to count.
type Counter interface {
	Counts() Counts
}

// Registry of backends, filled by backend packages' init functions.
var (
	regMu    sync.Mutex
	registry = map[string]func() (Backend, error){}
)

// Register makes a backend constructor available under name. Backends
// register in init; a name registered twice is a programming mistake
// (two packages claiming one name), so Register panics then, as
// database/sql.Register does. Tests replace a registration with
// RegisterForTest.
func Register(name string, open func() (Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	if open == nil {
		panic("graph: Register of a nil constructor for backend " + name)
	}
	if _, dup := registry[name]; dup {
		panic("graph: Register called twice for backend " + name)
	}
	registry[name] = open
}

// RegisterForTest makes open available under name until the test tb ends,
// replacing what name had, which tb's cleanup restores. tb is a
// testing.TB; graph asks only for its Cleanup so that programs do not link
// the testing package. Tests register their fakes with it, so that a name
// registered twice in production can be a mistake Register refuses.
func RegisterForTest(tb interface{ Cleanup(func()) }, name string, open func() (Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	prev, had := registry[name]
	registry[name] = open
	tb.Cleanup(func() {
		regMu.Lock()
		defer regMu.Unlock()
		if had {
			registry[name] = prev
		} else {
			delete(registry, name)
		}
	})
}

// Open opens the named backend. "auto" tries metal, then cuda, then cpu: it
// logs a warning for each one it skips (a GPU whose kernels do not build is
// worth knowing about), and if none opens, reports why each could not.
func Open(name string) (Backend, error) {
	regMu.Lock()
	defer regMu.Unlock()
	if name != "auto" {
		open, ok := registry[name]
		if !ok {
			if why, known := unbuilt[name]; known {
				return nil, fmt.Errorf("graph: backend %q is not in this build: %s (available: %v)", name, why, names())
			}
			return nil, fmt.Errorf("graph: unknown backend %q (available: %v)", name, names())
		}
		return open()
	}
	var errs []error
	for _, n := range []string{"metal", "cuda", "cpu"} {
		open, ok := registry[n]
		if !ok {
			continue
		}
		be, err := open()
		if err == nil {
			for _, skipped := range errs {
				slog.Warn("backend auto: skipped one", "err", skipped, "using", n)
			}
			return be, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n, err))
	}
	return nil, fmt.Errorf("graph: no backend could be opened: %v", errs)
}

// unbuilt says why a backend the project knows may be missing from a binary:
// a program registers a GPU backend by importing its public package.
var unbuilt = map[string]string{
	"metal": "the Metal backend runs on macOS in a program that imports github.com/seed9b8f47b1/redrafter/backend/metal (docs/METAL.md)",
	"cuda":  "the CUDA backend runs on Linux in a program that imports github.com/seed9b8f47b1/redrafter/backend/cuda, built with `go build -tags cuda` (docs/CUDA.md)",
}

func names() []string {
	var ns []string
	for n := range registry {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
