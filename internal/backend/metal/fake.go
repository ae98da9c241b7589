package metal

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// Fake says what a fake device (NewFake) does with the dispatches it is
// given. The backend to run them on comes from the caller, so that this
// package imports no other backend.
type Fake struct {
	// Reference, if set, runs the graph step each group of dispatches
	// implements, over the same memory: tests of code above the backend
	// (engines, samplers) pass the CPU reference backend. It must wrap
	// aligned host memory without copying or read results back (as
	// graph.Backend's WrapHost and Read).
	Reference graph.Backend
	// Exec, if set, runs each dispatch itself, instead of Reference: the
	// hook through which tests run the kernels off a Mac (package
	// metaltest runs them emulated on the CPU). It must leave the results
	// of the buffers marked Write in their Data; an error it returns is
	// the command buffer's.
	Exec func(d *Dispatch) error
	// Refuse maps a .metal file to the error its compilation gives, so
	// that tests see what a Mac user sees when Apple's compiler refuses
	// a file.
	Refuse map[string]error
}

// NewFake returns a Metal backend over a fake device that runs on any OS:
// the encoder, scheduler, buffer pool and plan cache are the real ones,
// and dispatches are executed as x says. Dispatches between two barriers
// are executed in reverse order, and the fake checks that none of them
// conflict, so a missing barrier shows up as a wrong result or an error.
// With neither x.Reference nor x.Exec the device executes nothing, which
// is enough to learn which kernels a plan dispatches (a GPU self-test
// does, for a case that failed before it ran).
func NewFake(p Policy, x Fake) *Backend {
	return newBackend(newFakeDevice(x), p)
}

// Dispatch is one kernel launch, as a fake device's Exec receives it.
type Dispatch struct {
	Kernel string // the kernel's name in the library, e.g. "matvec_nt_f16"
	File   string // the .metal file of package shaders that defines it, e.g. "matvec.metal"
	Grid   [3]int // threadgroups per grid
	Group  [3]int // threads per threadgroup
	// Threadgroup holds the threadgroup memory lengths in bytes, by
	// [[threadgroup(i)]] index.
	Threadgroup []int
	Buffers     []DispatchBuffer
}

// DispatchBuffer is one [[buffer(i)]] argument of a Dispatch.
type DispatchBuffer struct {
	Index int
	// Data is the operand's bytes in device memory itself for a bound
	// buffer (setBuffer), or a copy of the arguments for setBytes.
	Data []byte
	// Write is set when the kernel writes the operand; the executor must
	// write no other buffer.
	Write bool
}

// FakeEvents returns the commands a fake backend's device has received, as
// "dispatch <kernel>", "barrier", "commit" and "wait" lines, and clears them.
func FakeEvents(b *Backend) []string {
	f, ok := b.dev.(*fakeDevice)
	if !ok {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events
	f.events = nil
	return ev
}

type fakeDevice struct {
	x       Fake
	kernels map[string]bool
	// params holds each kernel's buffer parameters by index, as declared.
	params map[string]map[int]string

	mu        sync.Mutex
	events    []string
	live      int // buffers allocated and not released
	livePipes int // pipelines built and not released
	// inf, when set, is what info reports (tests of choices that depend
	// on the device, such as the KV budget).
	inf *DeviceInfo
	// wraps holds the address ranges the backend asked to wrap, refused
	// or not, for tests to check where its pointers went.
	wraps [][2]uintptr
	// inputs holds, for a step of several dispatches run on the reference,
	// what its inputs held at its first dispatch (see run).
	inputs map[*graph.Step][][]byte
}

func newFakeDevice(x Fake) *fakeDevice {
	lib, err := msl.Library()
	if err != nil {
		panic(err) // the embedded sources are part of the binary
	}
	f := &fakeDevice{x: x, kernels: map[string]bool{}, params: map[string]map[int]string{}}
	for _, k := range lib {
		f.kernels[k.Name] = true
		f.params[k.Name] = map[int]string{}
		for _, p := range k.Params {
			if p.Attr == "buffer" {
				f.params[k.Name][p.Index] = p.Decl
			}
		}
	}
	return f
}

func (f *fakeDevice) info() DeviceInfo {
	if f.inf != nil {
		return *f.inf
	}
	name := "fake (executes nothing)"
	switch {
	case f.x.Exec != nil:
		name = "fake (custom executor)"
	case f.x.Reference != nil:
		name = "fake (" + f.x.Reference.Name() + " reference)"
	}
	return DeviceInfo{Name: name, Architecture: "fake_g", Family: "fake", UnifiedMemory: true,
		WorkingSet: 1 << 32, MaxBuffer: 1 << 31}
}

type fakeBuffer struct {
	f        *fakeDevice
	data     []byte
	released bool
}

func (x *fakeBuffer) contents() []byte { return x.data }
func (x *fakeBuffer) release() {
	if x.released {
		panic("metal: fake buffer released twice")
	}
	x.released = true
	x.f.mu.Lock()
	x.f.live--
	x.f.mu.Unlock()
}

func (f *fakeDevice) newBuffer(size int) (devBuffer, error) {
	if max := f.info().MaxBuffer; uint64(size) > max {
		return nil, fmt.Errorf("fake device: newBufferWithLength:%d returned nil (the largest buffer is %d bytes)", size, max)
	}
	words := make([]uint64, (size+7)/8)
	f.mu.Lock()
	f.live++
	f.mu.Unlock()
	return &fakeBuffer{f: f, data: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:size]}, nil
}

// fakePage is the fake device's page: Apple silicon's 16 KiB, not the test
// host's 4 KiB, so that the Linux tests round host memory as a Mac does.
const fakePage = 16 << 10

func (f *fakeDevice) pageSize() int { return fakePage }

// wrap refuses what newBufferWithBytesNoCopy refuses (memory not on whole
// pages) and what Apple disallows (memory not mapped by vm_allocate or
// mmap, such as Go's heap), so that a test sees the backend asking for it.
func (f *fakeDevice) wrap(data []byte) (devBuffer, error) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	f.mu.Lock()
	f.wraps = append(f.wraps, [2]uintptr{p, p + uintptr(len(data))})
	f.mu.Unlock()
	if p%fakePage != 0 || len(data)%fakePage != 0 || len(data) == 0 || uint64(len(data)) > f.info().MaxBuffer {
		return nil, fmt.Errorf("fake device: newBufferWithBytesNoCopy of %d bytes at page offset %d", len(data), p%fakePage)
	}
	if !graph.InMapped(p, len(data)) {
		return nil, fmt.Errorf("fake device: newBufferWithBytesNoCopy of memory that is not mapped outside Go's heap")
	}
	f.mu.Lock()
	f.live++
	f.mu.Unlock()
	return &fakeBuffer{f: f, data: data}, nil
}

type fakePipeline struct {
	f        *fakeDevice
	nm       string
	released bool
}

func (p *fakePipeline) name() string    { return p.nm }
func (p *fakePipeline) maxThreads() int { return 1024 }
func (p *fakePipeline) release() {
	if p.released {
		panic("metal: fake pipeline released twice")
	}
	p.released = true
	p.f.mu.Lock()
	p.f.livePipes--
	p.f.mu.Unlock()
}

func (f *fakeDevice) pipeline(name string) (pipeline, error) {
	if err := f.x.Refuse[kernelFamily(name)+".metal"]; err != nil {
		return nil, err
	}
	if !f.kernels[name] {
		return nil, fmt.Errorf("metal: no function %q in the library", name)
	}
	f.mu.Lock()
	f.livePipes++
	f.mu.Unlock()
	return &fakePipeline{f: f, nm: name}, nil
}

func (f *fakeDevice) do(fn func() error) error { return fn() }
func (f *fakeDevice) close()                   {}

func (f *fakeDevice) record(e string) {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
}

type fakeCommandBuffer struct {
	f         *fakeDevice
	groups    [][]*dispatch // split at barriers
	committed bool
	err       error
}

func (f *fakeDevice) newCommandBuffer() (commandBuffer, error) {
	return &fakeCommandBuffer{f: f, groups: [][]*dispatch{nil}}, nil
}

func (c *fakeCommandBuffer) dispatch(d *dispatch) {
	if c.committed {
		panic("metal: dispatch on a committed command buffer")
	}
	c.f.record("dispatch " + d.pipe.name())
	g := &c.groups[len(c.groups)-1]
	*g = append(*g, d)
}

func (c *fakeCommandBuffer) barrier() {
	c.f.record("barrier")
	c.groups = append(c.groups, nil)
}

// commit executes the command buffer: each barrier group in reverse order,
// after checking that the group's dispatches do not conflict.
func (c *fakeCommandBuffer) commit() {
	c.f.record("commit")
	c.committed = true
	for _, g := range c.groups {
		for i, a := range g {
			for _, b := range g[:i] {
				if conflicts(a.reads, b.writes) || conflicts(a.writes, b.reads) || conflicts(a.writes, b.writes) {
					c.err = fmt.Errorf("fake device: %s and %s touch the same memory with no barrier between them",
						b.pipe.name(), a.pipe.name())
					return
				}
			}
		}
		for i := len(g) - 1; i >= 0; i-- {
			if err := c.f.run(g[i]); err != nil {
				c.err = err
				return
			}
		}
	}
}

func (c *fakeCommandBuffer) wait() error {
	c.f.record("wait")
	if !c.committed {
		return fmt.Errorf("fake device: wait on a command buffer that was not committed")
	}
	return c.err
}

func (f *fakeDevice) run(d *dispatch) error {
	for _, b := range d.binds {
		// setBytes data lives in the constant address space (Apple: "Use
		// this method for single-use data smaller than 4 KB" bound as a
		// constant buffer); a kernel that declares it device reads memory
		// Metal does not promise to give it.
		if decl, ok := f.params[d.pipe.name()][b.index]; ok && b.buf == nil && !strings.HasPrefix(decl, "constant ") {
			return fmt.Errorf("fake device: %s gets setBytes data in buffer(%d), declared %q: declare it constant",
				d.pipe.name(), b.index, decl)
		}
		if b.buf != nil {
			if fb, ok := b.buf.dev.(*fakeBuffer); ok && fb.released {
				return fmt.Errorf("fake device: %s binds a released buffer", d.pipe.name())
			}
		}
	}
	switch {
	case f.x.Exec != nil:
		return f.x.Exec(d.export())
	case f.x.Reference == nil:
		return nil
	case d.parts > 1 && d.part == 0:
		// A step of several dispatches runs on the reference at its last,
		// which is where its result is written; but its inputs are read by
		// its first, after which a later dispatch may rightly overwrite
		// them (no barrier is needed against a dispatch that already ran).
		// So the inputs are taken as they are now.
		f.snapshotInputs(d.step)
		return nil
	case d.part != d.parts-1:
		return nil
	}
	return f.runReference(d.step)
}

// snapshotInputs copies the inputs of s that it does not write (in place:
// graph.WrittenSources, or its result's storage) for runReference.
func (f *fakeDevice) snapshotInputs(s *graph.Step) {
	written := map[int]bool{}
	for _, i := range graph.WrittenSources(s.Op) {
		written[i] = true
	}
	snap := make([][]byte, len(s.In))
	for i, o := range s.In {
		if written[i] || (o.Buf == s.Out.Buf && o.Off < s.Out.Off+s.Out.Bytes() && s.Out.Off < o.Off+o.Bytes()) {
			continue
		}
		if mb, ok := o.Buf.(*Buffer); ok {
			snap[i] = append([]byte(nil), mb.bytes()[o.Off:o.Off+o.Bytes()]...)
		}
	}
	f.mu.Lock()
	if f.inputs == nil {
		f.inputs = map[*graph.Step][][]byte{}
	}
	f.inputs[s] = snap
	f.mu.Unlock()
}

// export describes d for a custom executor.
func (d *dispatch) export() *Dispatch {
	name := d.pipe.name()
	x := &Dispatch{Kernel: name, File: kernelFamily(name) + ".metal", Grid: d.grid, Group: d.group,
		Threadgroup: append([]int(nil), d.shared...), Buffers: make([]DispatchBuffer, len(d.binds))}
	for i, b := range d.binds {
		x.Buffers[i] = DispatchBuffer{Index: b.index, Write: b.write}
		if b.buf != nil {
			x.Buffers[i].Data = b.buf.bytes()[b.off : b.off+b.n : b.off+b.n]
		} else {
			x.Buffers[i].Data = append([]byte(nil), b.bytes...)
		}
	}
	return x
}

// runReference runs a graph step on the reference backend over the same
// memory (the CPU backend wraps aligned host memory without copying).
func (f *fakeDevice) runReference(s *graph.Step) error {
	wrapOp := func(o graph.Operand) (graph.Operand, error) {
		mb, ok := o.Buf.(*Buffer)
		if !ok {
			return o, fmt.Errorf("fake device: operand buffer %T", o.Buf)
		}
		cb, err := f.x.Reference.WrapHost(mb.bytes())
		if err != nil {
			return o, err
		}
		o.Buf = cb
		return o, nil
	}
	cs := graph.Step{Op: s.Op, In: make([]graph.Operand, len(s.In))}
	var err error
	if cs.Out, err = wrapOp(s.Out); err != nil {
		return err
	}
	f.mu.Lock()
	snap := f.inputs[s]
	delete(f.inputs, s)
	f.mu.Unlock()
	for i, o := range s.In {
		if i < len(snap) && snap[i] != nil {
			// The input as the step's first dispatch read it.
			b, err := f.x.Reference.WrapHost(snap[i])
			if err != nil {
				return err
			}
			cs.In[i] = graph.Operand{Buf: b, DType: o.DType, Shape: o.Shape}
			continue
		}
		if cs.In[i], err = wrapOp(o); err != nil {
			return err
		}
	}
	if err := f.x.Reference.Run(&graph.Plan{Steps: []graph.Step{cs}}); err != nil {
		return fmt.Errorf("fake device: %w", err)
	}
	// A reference that copies memory it cannot use in place (as the CPU
	// backend does) has the result elsewhere: bring it back.
	out := s.Out.Buf.(*Buffer).bytes()[s.Out.Off : s.Out.Off+s.Out.Bytes()]
	return f.x.Reference.Read(cs.Out.Buf, cs.Out.Off, out)
}
