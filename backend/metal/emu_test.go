package metal

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/backend/metal/emu"
	msl "github.com/seed9b8f47b1/redrafter/backend/metal/shaders"
)

func TestMain(m *testing.M) { os.Exit(emu.Main(m)) }

// emuExec runs dispatches through the emulated kernels: the fake device's
// executor when a test wants the real kernel code, not the CPU reference.
type emuExec struct {
	b        *emu.Builder
	override map[string]string // file → source, for planted bugs

	mu  sync.Mutex
	ran map[string]int
}

// executed counts the kernels run through the emulator in this test binary.
var executed = &emuExec{ran: map[string]int{}}

func newEmuBackend(tb testing.TB, override map[string]string) (*Backend, *emuExec) {
	tb.Helper()
	x := &emuExec{b: emu.ForTest(tb), override: override, ran: map[string]int{}}
	dev := newFakeDevice()
	dev.exec = x.exec
	return newBackend(dev, DefaultPolicy(dev.info())), x
}

func (x *emuExec) exec(d *dispatch) error {
	name := d.pipe.name()
	file := kernelFamily(name) + ".metal"
	src, ok := x.override[file]
	if ok {
		src, _ = msl.Inline(file, src, msl.Raw)
	} else {
		var err error
		if src, err = msl.Source(file); err != nil {
			return err
		}
	}
	prog, err := x.b.Build(file, src)
	if err != nil {
		return err
	}
	ed := &emu.Dispatch{Kernel: name, Grid: d.grid, Group: d.group, Threadgroup: map[int]int{}}
	for i, n := range d.shared {
		ed.Threadgroup[i] = n
	}
	for _, b := range d.binds {
		if b.bytes != nil {
			ed.Buffers = append(ed.Buffers, emu.Buffer{Index: b.index, Data: append([]byte(nil), b.bytes...)})
			continue
		}
		data := append([]byte(nil), b.buf.bytes()[b.off:b.off+b.n]...)
		ed.Buffers = append(ed.Buffers, emu.Buffer{Index: b.index, Data: data})
	}
	if err := prog.Run(ed); err != nil {
		return err
	}
	for i, b := range d.binds {
		if b.buf != nil && b.write {
			copy(b.buf.bytes()[b.off:b.off+b.n], ed.Buffers[i].Data)
		}
	}
	for _, r := range []*emuExec{x, executed} {
		r.mu.Lock()
		r.ran[name]++
		r.mu.Unlock()
	}
	return nil
}

func (x *emuExec) names() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var ns []string
	for n := range x.ran {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (x *emuExec) String() string { return fmt.Sprint(x.names()) }
