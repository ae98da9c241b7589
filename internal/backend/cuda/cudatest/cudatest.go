// Package cudatest runs the CUDA backend's kernels on any machine, for
// tests: over the fake driver (package cudafake), every launch is executed by
// its .cu kernel compiled as C++ and run on the CPU by package
// internal/backend/cuda/emu, so the backend's host code, launch geometry and
// kernels are checked together. It needs clang++ 16 or newer: without one,
// tests that use it are skipped, or fail under CI (CI set).
//
// Tests that use it should run through Main, which removes the compiled
// kernels afterwards. Its core (build directory, skip rules, source
// overrides, the count of launches) is the one metaltest uses, in
// internal/backend/emu. The production package cuda does not import it.
package cudatest

import (
	"testing"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/emu"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	core "github.com/seed9b8f47b1/redrafter/internal/backend/emu"
	"github.com/seed9b8f47b1/redrafter/internal/envvar"
)

// Main runs a test binary's tests and then removes the compiled kernels
// (core.Main, which metaltest.Main is too):
//
//	func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
func Main(m *testing.M) int { return core.Main(m) }

// Cleanup removes the compiled kernels, for a TestMain that runs its tests
// through neither Main.
func Cleanup() { core.Cleanup() }

// Builder returns the test binary's emulator builder, skipping tb without
// clang++ (failing it under CI, which must install one).
func Builder(tb testing.TB) *emu.Builder {
	tb.Helper()
	return emu.ForTest(tb)
}

// NewEmulated returns a CUDA backend over the fake driver with every
// launch run by its emulated kernel, its threads in the forward order
// only: package cuda's TestKernels runs every kernel in three orders, and
// a whole generation in three would take three times as long for nothing
// more about the host code.
//
// Graphs (a plan's second and later Runs) replay in node orders drawn from
// a fresh seed each time (REDRAFTER_SEED replays one), logged, so that an
// order that fails replays.
func NewEmulated(tb testing.TB) *cuda.Backend {
	tb.Helper()
	d := cudafake.New(NewEmulator(tb, nil).Exec)
	seed, err := core.SeedOr(uint64(time.Now().UnixNano()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("graph node orders: %s=%d", envvar.Seed.Name(), seed)
	d.SetSeed(seed)
	return cuda.NewWithDriver(d)
}

// Emulator executes launches with the emulated kernels. It is safe for
// concurrent use.
type Emulator struct {
	core.Tally
	b   *emu.Builder
	src core.Sources
	// Orders are the thread orders each launch runs in (emu.Launch);
	// nil is the forward order only.
	Orders []core.Order
}

// NewEmulator returns an emulator. override maps a .cu file name to source
// that replaces the embedded one, for tests that plant a bug.
func NewEmulator(tb testing.TB, override map[string]string) *Emulator {
	tb.Helper()
	return &Emulator{b: Builder(tb), src: core.Sources{Embedded: shaders.Source, Override: override}}
}

// Exec runs one launch through its emulated kernel, leaving the results
// in l's buffers.
func (x *Emulator) Exec(l *cudafake.Launch) error {
	src, err := x.src.Source(l.File)
	if err != nil {
		return err
	}
	names, err := shaders.Kernels(l.File)
	if err != nil {
		return err
	}
	if _, planted := x.src.Override[l.File]; planted {
		// The launched kernel alone: a planted variant's program builds
		// in a second, where the whole file's takes up to forty.
		names = []string{l.Kernel}
	}
	prog, err := x.b.Build(l.File, src, names)
	if err != nil {
		return err
	}
	el := &emu.Launch{Kernel: l.Kernel, Grid: l.Grid, Block: l.Block, Params: l.Params, Orders: x.Orders}
	if el.Orders == nil {
		el.Orders = []core.Order{core.Forward}
	}
	for _, b := range l.Buffers {
		el.Buffers = append(el.Buffers, emu.Buffer{Base: b.Base, Data: b.Data})
	}
	if err := prog.Run(el); err != nil {
		return err
	}
	x.Add(l.Kernel)
	return nil
}
