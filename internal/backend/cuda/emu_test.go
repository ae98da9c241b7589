package cuda

import (
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
	// A file with a planted bug is built with the launched kernel alone (a
	// program for each): a second of clang's time where the whole file
	// takes up to forty, and the planted variants are many.
	names, _ := shaders.Kernels(f)
	src, ok := d.sources[f]
	if ok {
		names = []string{l.kernel}
	} else if src, err = shaders.Source(f); err != nil {
		return err
	}
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
