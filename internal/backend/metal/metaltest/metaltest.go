// Package metaltest runs the Metal backend's kernels on any OS, for tests:
// over the fake device (metal.NewFake), every dispatch is executed by
// its .metal kernel compiled as C++ and run on the CPU by package
// internal/backend/metal/emu, so host code, grids and kernels are checked together.
// It needs clang++ 16 or newer: without one, tests that use it are skipped,
// or fail under CI (CI set), as emu.ForTest decides.
//
// Tests that use it should run through Main, which removes the compiled
// kernels afterwards. Its core (build directory, skip rules, source
// overrides, the count of dispatches) is the one cudatest uses, in
// internal/backend/emu. The production package metal does not import this
// package or emu.
package metaltest

import (
	"testing"

	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	"github.com/seed9b8f47b1/redrafter/internal/backend/metal/emu"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
)

// Main runs a test binary's tests and then removes the compiled kernels
// (core.Main, which cudatest.Main is too). Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(metaltest.Main(m)) }
func Main(m *testing.M) int { return core.Main(m) }

// NewEmulated returns a Metal backend over the fake device with every
// dispatch run by its emulated kernel, under the fake device's default
// policy. Dispatches run in the forward thread order only: the kernels are
// checked in every order by package metal's TestKernels, and a whole
// generation in three orders would take three times as long for nothing
// more about the host code.
func NewEmulated(tb testing.TB) *metal.Backend {
	tb.Helper()
	x := NewEmulator(tb, nil)
	x.Orders = []core.Order{core.Forward}
	ref := metal.NewFake(metal.Policy{}, metal.Fake{})
	p := metal.DefaultPolicy(ref.Device())
	ref.Close()
	return metal.NewFake(p, metal.Fake{Exec: x.Exec})
}

// Emulator executes dispatches with the emulated kernels: the executor for
// metal.NewFake. It is safe for concurrent use.
type Emulator struct {
	core.Tally
	b   *emu.Builder
	src core.Sources

	// Contract and Orders are passed to every dispatch (emu.Dispatch): the
	// program variant (FMA contraction) and the thread orders to run in,
	// nil for core.DefaultOrders.
	Contract emu.Contract
	Orders   []core.Order
}

// NewEmulator returns an emulator. override maps a .metal file name
// ("attention.metal") to source that replaces the embedded file, for tests
// that plant a bug; its includes are inlined as the device compiler sees
// them. Kernels are compiled once per test binary, on first use.
func NewEmulator(tb testing.TB, override map[string]string) *Emulator {
	tb.Helper()
	inline := func(file, src string) (string, error) { return msl.Inline(file, src, msl.Raw) }
	return &Emulator{b: emu.ForTest(tb), src: core.Sources{Embedded: msl.Source, Override: override, Prepare: inline}}
}

// Exec runs one dispatch through its emulated kernel and copies the
// buffers the kernel writes back into d.
func (x *Emulator) Exec(d *metal.Dispatch) error {
	src, err := x.src.Source(d.File)
	if err != nil {
		return err
	}
	prog, err := x.b.Build(d.File, src)
	if err != nil {
		return err
	}
	ed := &emu.Dispatch{Request: core.Request{Kernel: d.Kernel, Grid: d.Grid, Group: d.Group, Threadgroup: map[int]int{},
		Orders: x.Orders}, Contract: x.Contract}
	for i, n := range d.Threadgroup {
		ed.Threadgroup[i] = n
	}
	// The emulator gets copies: only what the kernel may write comes back.
	for _, b := range d.Buffers {
		ed.Buffers = append(ed.Buffers, core.Buffer{Index: b.Index, Data: append([]byte(nil), b.Data...)})
	}
	if err := prog.Run(ed); err != nil {
		return err
	}
	for i, b := range d.Buffers {
		if b.Write {
			copy(b.Data, ed.Buffers[i].Data)
		}
	}
	x.Add(d.Kernel)
	return nil
}
