// Package cudacheck is the CUDA backend's GPU self-test: every op case of
// package opcases (the cases Metal's self-test runs too) run once on the
// device and on a reference backend, with a verdict per kernel of the .cu
// files. The developer program internal/cmd/gpucheck runs it on a GPU
// machine; the programs users install do not link it, nor the op cases.
package cudacheck

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/cudafake"
	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// SelfTest runs every op case once on be and on ref (the CPU reference
// backend) and returns a verdict per kernel of the .cu files, in file
// order. A kernel no case reached fails with "not covered". progress, if
// not nil, is called after each case.
func SelfTest(be *cuda.Backend, ref graph.Backend, seed uint64, progress func(done, total int)) ([]opcases.KernelVerdict, error) {
	// Cases that fail before running are planned on a fake driver, which
	// runs none of its launches.
	dry := cudafake.NewBackend(nil)
	defer dry.Close()
	d := opcases.Device{Backend: be, Launched: cuda.Launched, Dry: dry}
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			return nil, err
		}
		for _, k := range names {
			if k != cuda.ProbeKernel {
				d.Kernels = append(d.Kernels, k)
			}
		}
	}
	cols := be.QMV1Cols()
	vs, err := opcases.SelfTest(d, ref, WithEveryQMV1Width(opcases.All(rand.New(rand.NewPCG(seed, 5)))), progress)
	_ = be.SetQMV1Cols(cols) // back to the width it had, which it took before
	if err != nil {
		return nil, err
	}
	return append(vs, checkProbe(be, rand.New(rand.NewPCG(seed, 6)))), nil
}

// checkProbe is the verdict of the bandwidth probe, which no op case
// launches.
func checkProbe(be *cuda.Backend, r *rand.Rand) opcases.KernelVerdict {
	v := opcases.KernelVerdict{Kernel: cuda.ProbeKernel, Cases: 1}
	start := time.Now()
	err := be.CheckProbe(r)
	v.Time = time.Since(start)
	if err != nil {
		v.Fail = err.Error()
	}
	return v
}

// Write prints the device and the verdicts as a table; it reports whether
// every kernel passed.
func Write(w io.Writer, dev cuda.DeviceInfo, vs []opcases.KernelVerdict) bool {
	fmt.Fprintf(w, "device: %s (compute capability %d.%d, %d SMs, %.1f GiB)\n", dev.Name, dev.Major, dev.Minor,
		dev.Multiprocessors, float64(dev.Memory)/(1<<30))
	return opcases.WriteVerdicts(w, vs)
}

// WithEveryQMV1Width returns cases, then each one-row quantized product
// case again under 4- and 2-column sets: the CUDA backend picks a width
// per launch (REDRAFTER_CUDA_QMV1_COLS, 8 unless set), each width is its
// own kernels, and every kernel is to be run against the reference. A
// copy sets the width on a *cuda.Backend as it builds its graph, so the
// cases must run in order (they do: opcases.SelfTest and Check one at a
// time); the caller restores the backend's width afterwards.
func WithEveryQMV1Width(cases []opcases.Case) []opcases.Case {
	out := slices.Clone(cases)
	for _, cols := range []int{4, 2} {
		for _, c := range cases {
			oneRowQuant := (strings.HasPrefix(c.Name, "QMatMul/") || strings.HasPrefix(c.Name, "Linear/") && strings.Contains(c.Name, "-bit/")) &&
				strings.Contains(c.Name, "/M1_")
			if !oneRowQuant {
				continue
			}
			build := c.Build
			c.Name = fmt.Sprintf("%s/c%d", c.Name, cols)
			c.Build = func(be graph.Backend, g *graph.Graph) ([]*graph.Array, map[*graph.Array]any) {
				if cb, ok := be.(*cuda.Backend); ok {
					_ = cb.SetQMV1Cols(cols) // 4 and 2 are widths it takes
				}
				return build(be, g)
			}
			out = append(out, c)
		}
	}
	return out
}
