package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/emu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

func TestMain(m *testing.M) { os.Exit(core.Main(m)) }

// emuDevice is device memory for emulated launches: each allocation gets a
// device address (256-byte aligned, with a gap after it, as the driver's
// are), and a launch runs its kernel, compiled from its .cu file (or from
// a replacement source), over every allocation.
type emuDevice struct {
	t       *testing.T
	b       *emu.Builder
	sources map[string]string // .cu name → source, replacing the embedded one
	bufs    []emu.Buffer
	next    uint64
	ran     map[string]bool
}

func newEmuDevice(t *testing.T, sources map[string]string) *emuDevice {
	return &emuDevice{t: t, b: emu.ForTest(t), sources: sources, next: 0x7f0000000000, ran: map[string]bool{}}
}

func (d *emuDevice) alloc(data []byte) devptr {
	p := d.next
	d.bufs = append(d.bufs, emu.Buffer{Base: p, Data: append([]byte(nil), data...)})
	d.next += uint64(len(data)+255)/256*256 + 4096
	return devptr(p)
}

func (d *emuDevice) bytes(p devptr) []byte {
	for _, b := range d.bufs {
		if b.Base == uint64(p) {
			return b.Data
		}
	}
	d.t.Fatalf("no allocation at %#x", p)
	return nil
}

// kernelFile maps each kernel to its .cu file.
var kernelFile = sync.OnceValues(func() (map[string]string, error) {
	m := map[string]string{}
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			m[n] = f
		}
	}
	return m, nil
})

func (d *emuDevice) run(l *launch) error {
	files, err := kernelFile()
	if err != nil {
		return err
	}
	f, ok := files[l.kernel]
	if !ok {
		return fmt.Errorf("no kernel %s in internal/backend/cuda/shaders", l.kernel)
	}
	src, ok := d.sources[f]
	if !ok {
		if src, err = shaders.Source(f); err != nil {
			return err
		}
	}
	names, _ := shaders.Kernels(f)
	prog, err := d.b.Build(f, src, names)
	if err != nil {
		return err
	}
	d.ran[l.kernel] = true
	return prog.Run(&emu.Launch{Kernel: l.kernel, Grid: l.grid, Block: l.block, Params: l.params, Buffers: d.bufs})
}

func (d *emuDevice) f32s(p devptr) []float32 {
	b := d.bytes(p)
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func (d *emuDevice) i32s(p devptr) []int32 {
	b := d.bytes(p)
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func (d *emuDevice) ranNames() []string {
	var n []string
	for k := range d.ran {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

var _ = graph.F32

// emuExec returns an executor for NewFake that runs each launch on its
// emulated kernel (package cudatest does the same for other packages).
func emuExec(t *testing.T) func(l *Launch) error {
	b := emu.ForTest(t)
	return func(l *Launch) error {
		src, err := shaders.Source(l.File)
		if err != nil {
			return err
		}
		names, err := shaders.Kernels(l.File)
		if err != nil {
			return err
		}
		prog, err := b.Build(l.File, src, names)
		if err != nil {
			return err
		}
		el := &emu.Launch{Kernel: l.Kernel, Grid: l.Grid, Block: l.Block, Params: l.Params, Orders: []core.Order{core.Forward}}
		for _, x := range l.Buffers {
			el.Buffers = append(el.Buffers, emu.Buffer{Base: x.Base, Data: x.Data})
		}
		return prog.Run(el)
	}
}

// TestReadBandwidth runs bench's bandwidth probe on the emulated device:
// it launches, waits and reports a rate; and a cancelled context stops it.
func TestReadBandwidth(t *testing.T) {
	be := NewFake(emuExec(t))
	defer be.Close()
	allocs := func() int { return len(be.drv.(*fakeDriver).allocs) }
	before := allocs()
	bw, err := be.readBandwidth(context.Background(), 1<<16, 1)
	if err != nil || bw <= 0 {
		t.Fatalf("read bandwidth %v, %v", bw, err)
	}
	t.Logf("emulated: %.3g bytes/s", bw)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := be.readBandwidth(ctx, 1<<16, 1); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	if s := be.Stats(); s.Launches != 0 {
		t.Errorf("the probe shows in the plans' counters: %+v", s)
	}
	if n := allocs(); n != before {
		t.Errorf("%d device allocations after the probe, %d before", n, before)
	}
}
