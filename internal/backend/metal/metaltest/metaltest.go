// Package metaltest runs the Metal backend's kernels on any OS, for tests:
// over the fake device (metal.NewFakeWith), every dispatch is executed by
// its .metal kernel compiled as C++ and run on the CPU by package
// internal/backend/metal/emu, so host code, grids and kernels are checked together.
// It needs clang++ 16 or newer: without one, tests that use it are skipped,
// or fail under CI (CI set), as emu.ForTest decides.
//
// Tests that use it should run through Main, which removes the compiled
// kernels afterwards. The production package metal does not import this
// package or emu.
package metaltest

import (
	"maps"
	"sync"
	"testing"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/emu"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

// Main runs a test binary's tests with one emulator build directory shared
// by all of them, removed afterwards (emu.Main). Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(metaltest.Main(m)) }
func Main(m *testing.M) int { return emu.Main(m) }

// NewEmulated returns a Metal backend over the fake device with every
// dispatch run by its emulated kernel, under the fake device's default
// policy. Dispatches run in the forward thread order only: the kernels are
// checked in every order by package metal's TestKernels, and a whole
// generation in three orders would take three times as long for nothing
// more about the host code.
func NewEmulated(tb testing.TB) *metal.Backend {
	tb.Helper()
	x := NewEmulator(tb, nil)
	x.Orders = []emu.Order{emu.Forward}
	ref := metal.NewFake(metal.Policy{})
	p := metal.DefaultPolicy(ref.Device())
	ref.Close()
	return metal.NewFakeWith(p, x.Exec)
}

// Emulator executes dispatches with the emulated kernels: the executor for
// metal.NewFakeWith. It is safe for concurrent use.
type Emulator struct {
	b        *emu.Builder
	override map[string]string

	// Contract and Orders are passed to every dispatch (emu.Dispatch): the
	// program variant (FMA contraction) and the thread orders to run in,
	// nil for emu.DefaultOrders.
	Contract emu.Contract
	Orders   []emu.Order

	mu  sync.Mutex
	ran map[string]int
}

// NewEmulator returns an emulator. override maps a .metal file name
// ("attention.metal") to source that replaces the embedded file, for tests
// that plant a bug; its includes are inlined as the device compiler sees
// them. Kernels are compiled once per test binary, on first use.
func NewEmulator(tb testing.TB, override map[string]string) *Emulator {
	tb.Helper()
	return &Emulator{b: emu.ForTest(tb), override: override, ran: map[string]int{}}
}

// Exec runs one dispatch through its emulated kernel and copies the
// buffers the kernel writes back into d.
func (x *Emulator) Exec(d *metal.Dispatch) error {
	var src string
	var err error
	if o, ok := x.override[d.File]; ok {
		src, err = msl.Inline(d.File, o, msl.Raw)
	} else {
		src, err = msl.Source(d.File)
	}
	if err != nil {
		return err
	}
	prog, err := x.b.Build(d.File, src)
	if err != nil {
		return err
	}
	ed := &emu.Dispatch{Kernel: d.Kernel, Grid: d.Grid, Group: d.Group, Threadgroup: map[int]int{},
		Contract: x.Contract, Orders: x.Orders}
	for i, n := range d.Threadgroup {
		ed.Threadgroup[i] = n
	}
	// The emulator gets copies: only what the kernel may write comes back.
	for _, b := range d.Buffers {
		ed.Buffers = append(ed.Buffers, emu.Buffer{Index: b.Index, Data: append([]byte(nil), b.Data...)})
	}
	if err := prog.Run(ed); err != nil {
		return err
	}
	for i, b := range d.Buffers {
		if b.Write {
			copy(b.Data, ed.Buffers[i].Data)
		}
	}
	x.mu.Lock()
	x.ran[d.Kernel]++
	x.mu.Unlock()
	return nil
}

// Ran returns how many dispatches of each kernel the emulator has run.
func (x *Emulator) Ran() map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return maps.Clone(x.ran)
}
