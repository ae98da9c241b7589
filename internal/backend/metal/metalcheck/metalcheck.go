// Package metalcheck is the Metal backend's GPU self-test: every op case
// of package opcases run once on the device and on a reference backend,
// with a verdict per kernel of the library. The developer program
// internal/cmd/gpucheck runs it on a Mac; the programs users install do
// not link it, nor the op cases.
package metalcheck

import (
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/seed9b8f47b1/redrafter/internal/backend/metal"
	msl "github.com/seed9b8f47b1/redrafter/internal/backend/metal/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// SelfTest runs every op case once on be and on ref (the CPU reference
// backend) and returns a verdict per kernel of the library, in library
// order. A kernel no case reached fails with "not covered". progress, if
// not nil, is called after each case.
func SelfTest(be *metal.Backend, ref graph.Backend, seed uint64, progress func(done, total int)) ([]opcases.KernelVerdict, error) {
	lib, err := msl.Library()
	if err != nil {
		return nil, err
	}
	// Cases that fail before running are planned on a fake device, which
	// compiles nothing and cannot fail to.
	dry := metal.NewFake(metal.DefaultPolicy(metal.DeviceInfo{}), metal.Fake{})
	defer dry.Close()
	d := opcases.Device{Backend: be, Broken: map[string]string{}, Launched: metal.Dispatched, Dry: dry}
	// Compile every kernel first: a file Apple's compiler refuses fails its
	// own kernels, with the compiler's log, and the others still run.
	for _, k := range lib {
		d.Kernels = append(d.Kernels, k.Name)
		if err := be.BuildKernel(k.Name); err != nil {
			d.Broken[k.Name] = "does not compile: " + err.Error()
		}
	}
	return opcases.SelfTest(d, ref, opcases.All(rand.New(rand.NewPCG(seed, 5))), progress)
}

// Write prints the device and the verdicts as a table and a summary line;
// it reports whether every kernel passed.
func Write(w io.Writer, dev metal.DeviceInfo, vs []opcases.KernelVerdict) bool {
	fmt.Fprintf(w, "device: %s (%s, %s)\n", dev.Name, orUnknown(dev.Architecture), orUnknown(dev.Family))
	return opcases.WriteVerdicts(w, vs)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
