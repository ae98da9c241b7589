package cuda

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/seed9b8f47b1/redrafter/internal/backend/cuda/shaders"
	"github.com/seed9b8f47b1/redrafter/internal/backend/opcases"
	"github.com/seed9b8f47b1/redrafter/internal/graph"
)

// SelfTest runs every op case (package opcases, the cases Metal's
// self-test runs too) once on be and on the CPU reference backend and
// returns a verdict per kernel of the .cu files, in file order. A kernel
// no case reached fails with "not covered". progress, if not nil, is called
// after each case.
func SelfTest(be *Backend, seed uint64, progress func(done, total int)) ([]opcases.KernelVerdict, error) {
	d := opcases.Device{Backend: be, Launched: launched,
		Planned: func(c opcases.Case) []string {
			// Encode the case on a fake driver, which launches nothing.
			fake := NewFake(func(*Launch) error { return nil })
			defer fake.Close()
			outs, _ := c.Build(fake, graph.New())
			p, err := graph.Compile(fake, outs...)
			if err != nil {
				return nil
			}
			defer p.Free()
			st, err := fake.encodePlan(p)
			if err != nil {
				return nil
			}
			return st.kernels()
		}}
	for _, f := range shaders.Files() {
		names, err := shaders.Kernels(f)
		if err != nil {
			return nil, err
		}
		for _, k := range names {
			if k != probeKernel {
				d.Kernels = append(d.Kernels, k)
			}
		}
	}
	vs, err := opcases.SelfTest(d, opcases.All(rand.New(rand.NewPCG(seed, 5))), progress)
	if err != nil {
		return nil, err
	}
	return append(vs, checkProbe(be, rand.New(rand.NewPCG(seed, 6)))), nil
}

// probeKernel is bench's bandwidth probe, which no op launches:
// checkProbe checks it instead.
const probeKernel = "read_xor_u32"

// checkProbe runs the bandwidth probe over random words and compares each
// block's XOR with the host's.
func checkProbe(be *Backend, r *rand.Rand) opcases.KernelVerdict {
	v := opcases.KernelVerdict{Kernel: probeKernel, Cases: 1}
	const blocks, words = 3, 4 * (5*256 + 17)
	data := make([]uint32, words)
	want := make([]uint32, blocks)
	for i := range data {
		data[i] = r.Uint32()
		want[(i/4/256)%blocks] ^= data[i]
	}
	got := make([]uint32, blocks)
	start := time.Now()
	err := func() error {
		x, err := be.drv.alloc(4 * words)
		if err != nil {
			return err
		}
		defer be.drv.free(x)
		out, err := be.drv.alloc(4 * blocks)
		if err != nil {
			return err
		}
		defer be.drv.free(out)
		if err := be.drv.upload(x, graph.AsBytes(data)); err != nil {
			return err
		}
		be.runMu.Lock()
		err = be.drv.launch(readXorLaunch(out, x, words, blocks))
		if serr := be.drv.sync(); err == nil {
			err = serr
		}
		be.runMu.Unlock()
		if err != nil {
			return err
		}
		return be.drv.download(graph.AsBytes(got), out)
	}()
	v.Time = time.Since(start)
	switch {
	case err != nil:
		v.Fail = err.Error()
	case !slices.Equal(got, want):
		v.Fail = fmt.Sprintf("got %x, want %x", got, want)
	}
	return v
}

// launched is the kernels a plan that has run on a CUDA backend launches.
func launched(p *graph.Plan) []string {
	if st, ok := p.BackendState.(*planState); ok {
		return st.kernels()
	}
	return nil
}

func (st *planState) kernels() []string {
	var names []string
	for _, l := range st.launches {
		names = append(names, l.kernel)
	}
	return names
}

// WriteSelfTest prints the device and the verdicts as a table; it reports
// whether every kernel passed.
func WriteSelfTest(w io.Writer, dev DeviceInfo, vs []opcases.KernelVerdict) bool {
	fmt.Fprintf(w, "device: %s (compute capability %d.%d, %d SMs, %s)\n", dev.Name, dev.Major, dev.Minor,
		dev.Multiprocessors, gib(dev.Memory))
	return opcases.WriteVerdicts(w, vs)
}

// WriteDevices prints GPUs as a table with their recommended beam.
func WriteDevices(w io.Writer, infos []DeviceInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tcompute capability\tSMs\tmemory\tdriver\tbeam (W×L)")
	for _, d := range infos {
		bw, bl := recommendedBeam(d)
		fmt.Fprintf(tw, "%s\t%d.%d\t%d\t%s\tCUDA %d.%d\t%d×%d\n", d.Name, d.Major, d.Minor, d.Multiprocessors,
			gib(d.Memory), d.Driver/1000, d.Driver%1000/10, bw, bl)
	}
	tw.Flush()
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
